"""The Agent Client Protocol transport: stdio, WebSocket and HTTP (spec 004).

One JSON-RPC 2.0 dispatcher, :class:`AcpConnection`, serves three carriers:

* **stdio** (:func:`serve_stdio`, ``uamp acp``): newline-delimited JSON on a
  process's stdin/stdout, the way editors (Zed, JetBrains ...) run agents;
* **WebSocket** ``/agents/{name}/acp/stream``: one JSON-RPC payload per
  message, notifications streamed as they happen;
* **HTTP** ``POST /agents/{name}/acp``: one payload per request. With
  ``Accept: text/event-stream`` the answer is a stream of server-sent
  events: every notification the payload causes (``session/update``,
  ``prompt/started``, ``prompt/progress``), as it happens, then the answer
  as the last event -- what the WebSocket and stdio deliver. Otherwise the
  answer alone, as JSON (a plain JSON body has no room for notifications).

Methods (see :mod:`uamp_proto.adapters.acp` for the translation):

* Zed ACP v1: ``initialize``, ``session/new``, ``session/load`` (sessions
  live in memory for the life of the process; loading replays the history
  as ``session/update`` notifications), ``session/prompt`` (updates stream
  as ``session/update`` notifications, then the answer with ``stopReason``),
  ``session/cancel`` (notification; the running prompt answers
  ``stopReason: "cancelled"``);
* spec 004: ``prompt/submit`` (``prompt/started`` and ``prompt/progress``
  notifications on streaming carriers), ``tools/list``, ``tools/call``,
  ``capabilities``.

Every request runs in its own task, so ``session/cancel`` is read while a
prompt streams.

A human in the loop (docs/human-in-the-loop.md): on the two-way carriers
(stdio, WebSocket) a tool call that needs approval becomes the agent's
request ``session/request_permission`` (the tool call, options "Allow" and
"Deny"); the option the client chooses answers the interrupt, ``cancelled``
(or an error: a client without permission support) denies it. An interrupt
answered from another transport meanwhile stops waiting for the client's
choice. A question (no ACP form) is said as an ``agent_message_chunk``
naming the interrupt, to be answered from a client that can. On plain
HTTP (no way to ask the client) the host's interrupt policy applies.

On stdio (``uamp acp``, the local user) the MCP servers a
session names (``mcpServers``) are given to each prompt's turn
(``TurnRequest.mcp_servers``, connected by the agent for that turn); the
network carriers never pass them on, so no remote client makes the server
start a program or open a connection of its choosing. Each prompt is one
UAMP turn (``served.turns.open``: the server's turn options, the defaults
on stdio; :meth:`~uamp_trio.hosting.turns.TurnOptions.open`).
Payment: with a :class:`~uamp_proto.payment.PaymentPolicy`, a prompt whose
token (``payment_token`` in the params or ``_meta``, else the one the session
last paid with) does not pass is refused with JSON-RPC error ``-32402`` and
``data.accepts``.

Signing (spec 004 "Response Signing"): with a signer, a prompt that ends
neither cancelled nor failed answers with ``_meta.signature`` in its result
(``session/prompt`` and ``prompt/submit``): an RS256 JWT over the reply's
text (the ``agent_message_chunk`` texts joined; ``content`` of
``prompt/submit``) and the JSON-RPC payload that carried the request, exactly
as received (an HTTP body, a WebSocket message, a stdio line without its
newline; a whole batch when it came in one).

Ownership (docs/security.md): a session belongs to the principal that
created it with ``session/new``. ``session/load``, ``session/prompt`` and
``session/cancel`` from any other principal -- on another connection or
carrier, or with another token -- are answered exactly as for a session that
does not exist (``-32002``; a cancel is ignored either way), so a session id
can neither be probed nor run on its owner's payment token.

Bounds (docs/security.md): the sessions one principal holds, what each keeps
of ``cwd`` and ``mcpServers``, and how long an unused one lives are
:class:`~uamp_trio.stores.acp_sessions.AcpLimits` -- on a server, its
``ServerConfig.acp_*`` fields (``uamp serve --acp-*``); on stdio,
:func:`serve_stdio`'s ``limits`` (``uamp acp --max-sessions`` ...).
"""

from __future__ import annotations

import contextvars
import importlib.metadata
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import orjson
import trio

from uamp_proto import events as ev
from uamp_proto import jsonrpc as rpc
from uamp_proto import types as ty
from uamp_proto.adapters import acp
from uamp_proto.adapters._human import Ask, ask_of, describe, is_approval
from uamp_proto.busy import INVALID_POLICY, BusyError
from uamp_proto.codec import unstructure
from uamp_proto.payment import (
    BALANCE_EVENT,
    Charge,
    PaymentPolicy,
    PaymentRequiredError,
    balance_fields,
)
from uamp_proto.principal import ANONYMOUS, Principal
from uamp_proto.responder import TOOL_CALL, Responder, TurnRequest
from uamp_proto.signing import ResponseSigner
from uamp_proto.sse import encode_json
from uamp_stores.busy import ConversationGate, Slot

from ..engines.http import SSE_HEADERS, HTTPError, Request, Response, SendChunk, StreamingResponse
from ..engines.websocket import ConnectionClosed, WebSocketRequest
from ..hosting.agents import ServedAgent
from ..hosting.host import Host, PolicyTransport
from ..hosting.interrupts import Interrupts
from ..hosting.middleware import reject_upgrade
from ..hosting.router import RouteMeta
from ..hosting.rpc_streams import (
    PEER_GONE,
    Handle,
    SendPayload,
    answer_payload,
    serve_ndjson,
    serve_payloads,
)
from ..hosting.turns import DEFAULT_BUFFER, ResponseOutcome
from ..stores.acp_sessions import AcpLimits, AcpSession, AcpSessionStore
from ..trust.auth import Authenticator, AuthError

__all__ = [
    "AcpConnection",
    "AcpSession",
    "AcpSessionStore",
    "AcpTransport",
    "mount",
    "serve_stdio",
]

#: What middleware knows of these routes: JSON-RPC error refusals.
#: Methods a connection whose token expired may still call.
_WITHOUT_AUTH = frozenset({"initialize", "authenticate"})

ROUTES = RouteMeta(transport="acp", error_style="jsonrpc")

log = logging.getLogger("uamp_trio.acp")

#: Most MCP servers of a session a prompt connects (more are left out).
MAX_MCP_SERVERS = 8

#: The payload being answered, as received: what a response signature covers.
#: Set per task by :meth:`AcpConnection.handle_payload` (each payload is
#: answered in a task of its own), so concurrent prompts never mix theirs up.
_PAYLOAD: contextvars.ContextVar[bytes] = contextvars.ContextVar("acp_payload", default=b"")


def _version() -> str:
    try:
        return importlib.metadata.version("uamp")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - not installed
        return "0"


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


class AcpConnection:
    """The JSON-RPC dispatcher of one ACP peer (one stdio pipe, socket or request).

    Args:
        served: The agent, the payment policy consulted before every prompt,
            the signer of each prompt's answer (``_meta.signature``) and the
            turn options each prompt runs on (the server's output bound; the
            defaults on stdio).
        store: Where sessions live (shared by every connection of a server).
        send: Writes a payload to the peer, or ``None`` when the carrier has
            no way to push notifications (plain HTTP).
        principal: Who the peer is (the authenticated caller; the local
            user on stdio); owns the sessions it creates and is put on
            every ``TurnRequest``.
        authenticator: Verifies the fresh token of an ``authenticate``
            request (method ``bearer``) once the connection's token expired;
            ``None``: no authentication configured.
        clock: Seconds since the epoch, to tell an expired token.
        interrupts: Where a prompt's run asks a person (``None``: it cannot).
        two_way: The carrier can take requests from the agent (stdio,
            WebSocket): approvals become ``session/request_permission``.
    """

    def __init__(
        self,
        served: ServedAgent,
        store: AcpSessionStore,
        send: SendPayload | None,
        *,
        principal: Principal = ANONYMOUS,
        authenticator: Authenticator | None = None,
        clock: Callable[[], float] = time.time,
        session_queue: int = DEFAULT_BUFFER,
        connect_mcp: bool = False,
        conversations: ConversationGate | None = None,
        interrupts: Interrupts | None = None,
        two_way: bool = False,
    ) -> None:
        self.served = served
        #: The busy policy of the sessions (docs/busy.md): the server's gate,
        #: shared by every connection; a gate of its own on stdio.
        self.conversations = conversations or ConversationGate()
        self.interrupts = interrupts
        self.two_way = two_way and send is not None
        #: The agent's own requests waiting for the client's answer, by id.
        self._asked: dict[str, trio.MemorySendChannel[rpc.Response | rpc.ErrorResponse]] = {}
        self._asked_count = 0
        #: Give each prompt's turn the MCP servers its session names (at most
        #: :data:`MAX_MCP_SERVERS`). Only for a peer that may run programs
        #: here: the local user of ``uamp acp`` on stdio.
        self.connect_mcp = connect_mcp
        #: Events one session's running prompt may queue for the writer
        #: before its agent waits (the server's ``max_session_queued_events``).
        self.session_queue = session_queue
        self.principal = principal
        self.agent = served.agent
        self.authenticator = authenticator
        self._clock = clock
        self.store = store
        self._send = send
        self._version = _version()
        self._methods: dict[str, Callable[[rpc.Id, Any], Awaitable[Any]]] = {
            "initialize": self._initialize,
            "session/new": self._session_new,
            "session/load": self._session_load,
            "session/prompt": self._session_prompt,
            "prompt/submit": self._prompt_submit,
            "tools/list": self._tools_list,
            "tools/call": self._tools_call,
            "capabilities": self._capabilities,
            "authenticate": self._authenticate,
        }

    # --- payload handling -------------------------------------------------------

    async def handle_payload(self, data: bytes | str) -> bytes | None:
        """Answer one payload; ``None`` when nothing is owed (notifications)."""
        _PAYLOAD.set(data.encode() if isinstance(data, str) else bytes(data))
        return await answer_payload(data, self.handle_message)

    async def handle_message(self, item: rpc.Message | rpc.Invalid) -> rpc.Message | None:
        """The answer to one decoded message (``None`` for notifications, replies)."""
        if isinstance(item, rpc.Invalid):
            return item.error.response(item.id)
        expired = self.principal.expired(self._clock())
        if isinstance(item, rpc.Notification):
            if not expired:
                await self._notification(item)
            return None
        if not isinstance(item, rpc.Request):
            waiter = self._asked.pop(str(item.id), None)
            if waiter is not None:  # the client answers a request of ours
                waiter.send_nowait(item)
            return None  # (a reply to nothing we asked is ignored)
        if expired and item.method not in _WITHOUT_AUTH:
            # The connection's token ran out while it was open: nothing more
            # runs for it until ``authenticate`` brings a fresh one.
            return rpc.error_response(
                item.id,
                acp.AUTH_REQUIRED,
                "The connection's token has expired: call authenticate (methodId"
                ' "bearer", _meta.token) with a fresh one.',
                {"status": 401, "code": "unauthorized"},
            )
        method = self._methods.get(item.method)
        if method is None:
            return rpc.error_response(
                item.id,
                rpc.METHOD_NOT_FOUND,
                f"Method not found: {item.method!r}.",
                {"method": item.method},
            )
        try:
            return rpc.response(item.id, await method(item.id, item.params))
        except rpc.JSONRPCError as exc:
            return exc.response(item.id)
        except HTTPError as exc:
            return rpc.error_response(item.id, rpc.INVALID_PARAMS, exc.message)
        except PEER_GONE:
            raise  # the caller left mid-call: its stream ends, no failure of ours
        except Exception:
            log.exception("ACP method %s failed", item.method)
            return rpc.error_response(
                item.id, rpc.INTERNAL_ERROR, f"Internal error while handling {item.method}."
            )

    async def _notification(self, note: rpc.Notification) -> None:
        if note.method == "session/cancel":
            try:
                session_id = acp.parse_cancel(note.params)
                session = self.store.get(self.agent.name, session_id, owner=self.principal)
            except rpc.JSONRPCError as exc:
                log.info("ignored session/cancel: %s", exc.message)
                return
            if session.turn is not None:
                session.turn.cancel()
        # Other notifications (and unknown ones) need no answer.

    async def _notify(self, method: str, params: dict[str, Any]) -> None:
        if self._send is not None:
            await self._send(rpc.encode(rpc.notification(method, params)))

    async def _update(self, session_id: str, update: dict[str, Any]) -> None:
        await self._notify("session/update", {"sessionId": session_id, "update": update})

    async def _ask_client(
        self, method: str, params: dict[str, Any]
    ) -> rpc.Response | rpc.ErrorResponse:
        """Send a request of the agent's to the client; its answer."""
        assert self._send is not None
        self._asked_count += 1
        rid = f"uamp-{self._asked_count}"
        send, receive = trio.open_memory_channel[rpc.Response | rpc.ErrorResponse](1)
        self._asked[rid] = send
        try:
            await self._send(rpc.encode(rpc.request(rid, method, params)))
            return await receive.receive()
        finally:
            self._asked.pop(rid, None)

    async def _ask_person(
        self, session_id: str, ask: Ask, waiting: dict[str, trio.CancelScope]
    ) -> None:
        """Ask the client's user about ``ask`` (see the module docstring) and answer it."""
        assert self.interrupts is not None
        with trio.CancelScope() as scope:
            waiting[ask.id] = scope
            if not is_approval(ask):
                note = f"{describe(ask)} (interrupt {ask.id}: answer it from a client that can.)"
                await self._update(
                    session_id,
                    {
                        "sessionUpdate": "agent_message_chunk",
                        "content": {"type": "text", "text": note},
                    },
                )
                return
            reply = await self._ask_client(
                "session/request_permission", acp.permission_request(session_id, ask)
            )
            await self.interrupts.answer_reply(
                self.principal, ask, reply, acp.parse_permission_outcome, "ACP permission answer"
            )
        waiting.pop(ask.id, None)

    # --- payment ----------------------------------------------------------------

    async def _charge(self, token: str | None, response_id: str) -> Charge | None:
        """Hold the price of one prompt (the turn driver settles it); ``-32402`` if unpaid."""
        try:
            return await self.served.open_charge(token, response_id, self.principal)
        except PaymentRequiredError as exc:
            raise acp.payment_error(exc) from None

    # --- methods ----------------------------------------------------------------

    async def _initialize(self, _id: rpc.Id, params: Any) -> Any:
        caps = self.agent.capabilities()
        if (
            isinstance(params, dict)
            and "protocolVersion" in params
            and not isinstance(params["protocolVersion"], str)
        ):
            return self._initialized(
                acp.initialize_result(
                    params,
                    agent_name=self.agent.name,
                    version=self._version,
                    capabilities=caps,
                    load_session=True,
                    mcp_http=self.connect_mcp,
                )
            )
        return self._initialized(
            acp.spec_initialize_result(
                agent_name=self.agent.name, version=self._version, capabilities=caps
            )
        )

    def _initialized(self, result: dict[str, Any]) -> dict[str, Any]:
        if self.authenticator is not None:
            result["authMethods"] = [dict(acp.BEARER_AUTH_METHOD)]
        return result

    async def _authenticate(self, _id: rpc.Id, params: Any) -> Any:
        """Refresh the connection's token (method ``bearer``); a no-op without auth."""
        auth = self.authenticator
        if auth is None:
            return {}  # no auth methods are advertised; accept as a no-op
        p = params if isinstance(params, dict) else {}
        meta = p.get("_meta")
        token = meta.get("token") if isinstance(meta, dict) else None
        if p.get("methodId") != acp.BEARER_AUTH_METHOD["id"] or not isinstance(token, str):
            raise rpc.JSONRPCError(
                rpc.INVALID_PARAMS,
                'authenticate takes methodId "bearer" and the token in _meta.token.',
            )
        try:
            fresh = await auth.authenticate(token)
        except AuthError as exc:
            raise rpc.JSONRPCError(
                acp.AUTH_REQUIRED, exc.message, {"status": 401, "code": "unauthorized"}
            ) from None
        if fresh.id != self.principal.id:
            # Another principal's token never takes over this connection's sessions.
            raise rpc.JSONRPCError(
                acp.AUTH_REQUIRED,
                "The token is for another principal than this connection's.",
                {"status": 401, "code": "unauthorized"},
            )
        self.principal = fresh
        return {}

    async def _capabilities(self, _id: rpc.Id, params: Any) -> Any:
        return unstructure(self.agent.capabilities())

    async def _session_new(self, _id: rpc.Id, params: Any) -> Any:
        parsed = acp.parse_new_session(params)
        session = self.store.create(
            self.agent.name, parsed.cwd, owner=self.principal, mcp_servers=parsed.mcp_servers
        )
        return {"sessionId": session.id}

    async def _session_load(self, _id: rpc.Id, params: Any) -> Any:
        parsed = acp.parse_load_session(params)
        session = self.store.get(self.agent.name, parsed.session_id, owner=self.principal)
        self.store.reopen(session, parsed.cwd, parsed.mcp_servers)
        for update in acp.history_updates(session.messages):
            await self._update(session.id, update)
        return {}

    async def _session_prompt(self, _id: rpc.Id, params: Any) -> Any:
        parsed = acp.parse_prompt(params)
        session = self.store.get(self.agent.name, parsed.session_id, owner=self.principal)
        gate = self.conversations
        meta = params.get("_meta") if isinstance(params, dict) else None
        try:
            policy = gate.policy(meta)
            # A prompt while another runs in the session: the busy policy.
            async with gate.turn(("acp", session.id), self.principal, policy) as slot:
                return await self._prompt(session, parsed, slot)
        except BusyError as exc:
            if exc.code == INVALID_POLICY:
                raise rpc.JSONRPCError(rpc.INVALID_PARAMS, str(exc), {"code": exc.code}) from None
            raise rpc.JSONRPCError(
                rpc.INVALID_REQUEST,
                f"{exc} (send session/cancel to stop the running prompt)",
                {"sessionId": session.id, "code": exc.code},
            ) from None

    async def _prompt(self, session: AcpSession, parsed: acp.PromptParams, slot: Slot) -> Any:
        """One prompt of ``session``, holding the session (``slot``)."""
        token = parsed.payment_token or session.payment_token
        response_id = _new_id("resp")
        charge = await self._charge(token, response_id)
        if parsed.payment_token is not None:
            session.payment_token = parsed.payment_token
        request = TurnRequest(
            agent=self.agent.name,
            principal=self.principal,
            session_id=session.id,
            response_id=response_id,
            messages=[*session.messages, parsed.message],
            payment_token=token,
            metadata={"transport": "acp", "cwd": session.cwd},
            mcp_servers=session.mcp_servers[:MAX_MCP_SERVERS] if self.connect_mcp else [],
        )
        encoder = acp.UpdateEncoder()
        port = None
        if self.interrupts is not None:
            port = self.interrupts.port(request, supported=self.two_way)
            request = attrs.evolve(request, interrupts=port)
        session.busy = True
        try:
            async with (
                self.served.turns.open(
                    self.agent, request, charge=charge, buffer=self.session_queue, port=port
                ) as turn,
                trio.open_nursery() as asking,
            ):
                session.turn = turn
                slot.bind(turn.cancel)  # a later prompt may interrupt this one
                waiting: dict[str, trio.CancelScope] = {}
                async for event in turn:
                    if isinstance(event, ev.InterruptRequest):
                        if self.two_way:
                            asking.start_soon(self._ask_person, session.id, ask_of(event), waiting)
                        continue
                    if isinstance(event, ev.InterruptResolved):
                        scope = waiting.pop(event.interrupt_id, None)
                        if scope is not None:
                            scope.cancel()  # answered elsewhere: stop asking here
                        continue
                    for update in encoder.feed(event):
                        await self._update(session.id, update)
                asking.cancel_scope.cancel()
            outcome = turn.outcome
            assert outcome is not None
            pending = [c.id for c in outcome.pending_tool_calls]
            for update in encoder.unanswered(pending):
                await self._update(session.id, update)
        finally:
            session.turn = None
            session.busy = False
            self.store.touch(session)  # idle from the prompt's end, not its start
        if not slot.dropped:  # a rolled-back prompt leaves no trace in the session
            session.messages.append(parsed.message)
            if outcome.status != "failed":
                session.messages.extend(outcome.tracker.messages())
            self.store.trim_history(session)  # its bounds (messages, bytes), its owner's
        return self._signed(acp.prompt_result(outcome), outcome)

    def _signed(self, result: dict[str, Any], outcome: ResponseOutcome) -> dict[str, Any]:
        """``result`` with ``_meta.signature`` when the answer is to be signed.

        A paid answer also carries ``_meta["payment.balance"]``: ACP has no
        payment notification, and ``_meta`` is its place for extensions.
        """
        if outcome.balance is not None:
            balance = balance_fields(outcome.balance)
            result["_meta"] = {**result.get("_meta", {}), BALANCE_EVENT: balance}
        signer = self.served.signer
        if signer is None or outcome.status not in ("completed", "requires_action"):
            return result
        signature = signer(outcome.tracker.text, _PAYLOAD.get())
        result["_meta"] = {**result.get("_meta", {}), "signature": signature}
        return result

    async def _prompt_submit(self, request_id: rpc.Id, params: Any) -> Any:
        parsed = acp.parse_prompt_submit(params)
        response_id = _new_id("resp")
        charge = await self._charge(parsed.payment_token, response_id)
        request = TurnRequest(
            agent=self.agent.name,
            principal=self.principal,
            session_id=_new_id("sess"),
            response_id=response_id,
            messages=parsed.messages,
            payment_token=parsed.payment_token,
            metadata={"transport": "acp"},
        )
        async with self.served.turns.open(
            self.agent, request, charge=charge, buffer=self.session_queue
        ) as turn:
            # Inside: a peer gone before this leaves no lock behind.
            await self._notify("prompt/started", {"requestId": str(request_id)})
            async for event in turn:
                delta = getattr(event, "delta", None)
                if isinstance(delta, ty.DeltaText) and delta.text:
                    await self._notify(
                        "prompt/progress",
                        {"requestId": str(request_id), "content": delta.text, "role": "assistant"},
                    )
        outcome = turn.outcome
        assert outcome is not None
        if outcome.status == "failed":
            error = outcome.error
            assert error is not None
            raise rpc.JSONRPCError(rpc.INTERNAL_ERROR, error.message, {"code": error.code})
        result: dict[str, Any] = {
            "status": "cancelled" if outcome.status == "cancelled" else "complete",
            "content": outcome.tracker.text,
        }
        calls = outcome.pending_tool_calls
        if calls:
            result["tool_calls"] = [
                {"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls
            ]
        usage = acp.usage_object(outcome.tracker.usage)
        if usage is not None:
            result["usage"] = usage
        return self._signed(result, outcome)

    async def _tools_list(self, _id: rpc.Id, params: Any) -> Any:
        return acp.tools_list_result(self.agent.capabilities())

    async def _tools_call(self, _id: rpc.Id, params: Any) -> Any:
        name, arguments = acp.parse_tools_call(params)
        if name not in acp.tool_names(self.agent.capabilities()):
            raise rpc.JSONRPCError(
                rpc.INVALID_PARAMS,
                f"Unknown tool {name!r}; tools/list names the agent's tools.",
                {"name": name},
            )
        token = params.get("payment_token") if isinstance(params, dict) else None
        response_id = _new_id("resp")
        charge = await self._charge(token if isinstance(token, str) else None, response_id)
        call = orjson.dumps({"name": name, "arguments": arguments}).decode()
        request = TurnRequest(
            agent=self.agent.name,
            principal=self.principal,
            session_id=_new_id("sess"),
            response_id=response_id,
            # An agent that runs its tools (a served UAP agent) runs this one
            # and ignores the prose, which is for one that does not.
            messages=[ty.Message(role="user", content=f"Call the tool {name}: {call}")],
            metadata={"transport": "acp", TOOL_CALL: {"name": name, "arguments": arguments}},
        )
        async with self.served.turns.open(self.agent, request, charge=charge) as turn:
            async for _ in turn:
                pass
        outcome = turn.outcome
        assert outcome is not None
        if outcome.error is not None and outcome.error.code == "unknown_tool":
            raise rpc.JSONRPCError(rpc.INVALID_PARAMS, outcome.error.message, {"name": name})
        failed = outcome.status != "completed"
        text = outcome.tracker.text
        if outcome.error is not None:
            text = outcome.error.message
        return {"content": [{"type": "text", "text": text}], "isError": failed}


# --- carriers -------------------------------------------------------------------------


async def serve_stdio(
    agent: Responder,
    *,
    stdin: trio.abc.ReceiveStream | None = None,
    stdout: trio.abc.SendStream | None = None,
    payment_policy: PaymentPolicy | None = None,
    max_line: int = 16 * 1024 * 1024,
    signer: ResponseSigner | None = None,
    principal: Principal = ANONYMOUS,
    store: AcpSessionStore | None = None,
    limits: AcpLimits | None = None,
) -> None:
    """Serve ``agent`` as an ACP agent over newline-delimited JSON until EOF.

    Args:
        stdin: Where requests arrive (default: the process's fd 0).
        stdout: Where answers go (default: fd 1). Nothing else may write
            there: log to stderr.
        payment_policy: Consulted before every prompt.
        max_line: Longest accepted line; longer ones get ``-32600``.
        signer: Signs each prompt's answer (``_meta.signature``).
        principal: Who the peer acts for (``uamp acp``: the local user,
            scheme ``local``).
        store: Where the peer's sessions live (default: a store of this
            peer's own, as one process serves one peer).
        limits: The bounds of a store made here (default :class:`AcpLimits`).
    """
    sessions = store if store is not None else AcpSessionStore(limits)
    interrupts = Interrupts()  # the one peer answers its own run's questions

    def handler_for(send: SendPayload) -> Handle:
        served = ServedAgent(agent, payment_policy, signer)
        return AcpConnection(
            served,
            sessions,
            send,
            principal=principal,
            connect_mcp=True,
            interrupts=interrupts,
            two_way=True,
        ).handle_payload

    await serve_ndjson(handler_for, stdin=stdin, stdout=stdout, max_line=max_line)


class AcpTransport(PolicyTransport):
    """The ACP endpoints of an :class:`~uamp_trio.app.App` (see :class:`PolicyTransport`).

    Sessions live in the app's
    :attr:`Stores.acp_sessions <uamp_trio.stores.Stores.acp_sessions>`.
    """

    def __init__(self, app: Host, *, payment_policy: PaymentPolicy | None = None) -> None:
        super().__init__(app, payment_policy=payment_policy)
        self.store = app.stores.acp_sessions

    def mount(self) -> None:
        """Register ``POST .../acp`` and ``WS .../acp/stream``, and the idle sessions' sweep."""
        self.app.agent_route("POST", "/acp", self.http, label="ACP (JSON-RPC)", meta=ROUTES)
        self.app.agent_websocket("/acp/stream", self.websocket, label="ACP stream", meta=ROUTES)
        self.app.services.append(self.sweep)

    def limits(self) -> AcpLimits:
        """The bounds the serving server's configuration sets (``ServerConfig.acp_*``)."""
        cfg = self.app.server_config
        current = self.store.limits
        if (
            current.max_sessions != cfg.acp_max_sessions
            or current.max_session_bytes != cfg.acp_max_session_bytes
            or current.idle_timeout != cfg.acp_session_idle_timeout
        ):
            current = AcpLimits(
                max_sessions=cfg.acp_max_sessions,
                max_session_bytes=cfg.acp_max_session_bytes,
                idle_timeout=cfg.acp_session_idle_timeout,
            )
            self.store.limits = current
        return current

    async def sweep(self) -> None:
        """Forget idle sessions while the server serves, even with no ACP request coming."""
        while True:
            await trio.sleep(min(60.0, self.limits().idle_timeout / 4))
            gone = self.store.expire()
            if gone:
                log.info("ACP: %d idle session(s) expired", gone)

    def _connection(
        self,
        agent: Responder,
        send: SendPayload | None,
        principal: Principal,
        *,
        session_queue: int = DEFAULT_BUFFER,
        two_way: bool = False,
    ) -> AcpConnection:
        """A dispatcher for one carrier and caller, with the app's policy and signer as of now."""
        self.limits()
        return AcpConnection(
            self.served(agent),
            self.store,
            send,
            principal=principal,
            authenticator=self.app.authenticator,
            session_queue=session_queue,
            conversations=self.app.conversations,
            interrupts=self.app.interrupts,
            two_way=two_way,
        )

    async def http(self, request: Request) -> Response | StreamingResponse:
        """``POST .../acp``: one JSON-RPC payload in, its answer out.

        A client that accepts ``text/event-stream`` gets the notifications
        the payload causes (``session/update``, ``prompt/started`` ...) as
        they happen, one SSE event each, then the answer as the last event;
        any other gets the answer alone, as JSON.
        """
        agent = self.app.resolve_agent(request.path_params)
        if "text/event-stream" in (request.headers.get("accept") or ""):

            async def produce(send: SendChunk) -> None:
                async def notify(payload: bytes) -> None:
                    await send(encode_json(payload))

                conn = self._connection(agent, notify, request.principal)
                reply = await conn.handle_payload(request.body)
                if reply is not None:
                    await send(encode_json(reply))

            return StreamingResponse(producer=produce, headers=list(SSE_HEADERS))
        conn = self._connection(agent, None, request.principal)
        reply = await conn.handle_payload(request.body)
        if reply is None:
            return Response(status=204)
        return Response(status=200, headers=[("content-type", "application/json")], body=reply)

    async def websocket(self, pending: WebSocketRequest) -> None:
        """``WS .../acp/stream``: JSON-RPC payloads as WebSocket messages."""
        try:
            agent = self.app.resolve_agent(pending.request.path_params)
        except HTTPError as exc:
            await reject_upgrade(pending, ROUTES.error_style, exc)
            return
        ws = await pending.accept()

        async def send(payload: bytes) -> None:
            await ws.send(payload.decode())

        async def receive() -> bytes | str | None:
            try:
                return await ws.receive()
            except ConnectionClosed:
                return None

        conn = self._connection(
            agent,
            send,
            pending.request.principal,
            session_queue=pending.max_session_queued_events,
            two_way=True,
        )
        try:
            await serve_payloads(
                conn.handle_payload,
                receive,
                send,
                drain=False,
                max_pending=pending.max_queued_events,
            )
        except ConnectionClosed:
            pass
        finally:
            await ws.close()


def mount(app: Host, *, payment_policy: PaymentPolicy | None = None) -> None:
    """Mount the ACP transport on ``app`` (a :data:`~uamp_trio.app.Transport`)."""
    AcpTransport(app, payment_policy=payment_policy).mount()
