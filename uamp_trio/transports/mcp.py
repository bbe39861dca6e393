"""The MCP transport: every agent is an MCP server (Streamable HTTP and stdio).

Theory of operation
-------------------
:class:`McpDispatcher` answers the JSON-RPC messages of one MCP peer
(translation in :mod:`uamp_proto.adapters.mcp`): ``initialize``, ``ping``,
``tools/list``, ``tools/call`` (one UAMP turn of the agent per call) and the
notifications ``notifications/initialized`` and ``notifications/cancelled``
(which cancels the named call's turn). ``server/discover`` and every other
method are answered ``-32601``.

Two carriers:

* **Streamable HTTP** at ``/agents/{name}/mcp`` (MCP 2025-03-26 and later):
  ``POST`` one JSON-RPC payload. An ``initialize`` opens an MCP session
  whose id goes back in ``Mcp-Session-Id``; every later request must carry
  it (``400`` without, ``404`` for an id the server does not know -- or that
  another principal opened). Requests are answered with a JSON body, except
  a ``tools/call`` with a ``progressToken`` from a client that accepts
  ``text/event-stream``: its answer is an SSE stream of
  ``notifications/progress`` while the agent talks, then the result.
  Notifications alone get ``202``. ``GET`` opens the session's stream of
  server-initiated messages (one per session; kept alive with SSE comments;
  it ends with the session), ``DELETE`` ends the session.
* **stdio** (:func:`serve_stdio`, ``uamp mcp``): newline-delimited JSON, one
  peer per process.

A human in the loop (docs/human-in-the-loop.md): when a call's run asks a
person and the client declared form elicitation in ``initialize``, the
server sends ``elicitation/create`` (an approval: a form with one boolean
``approved``; a question: its flat schema, or one ``answer`` string) on
the call's stream -- over HTTP every ``tools/call`` of such a client is
answered as SSE so there is a stream to send it on -- and the client's
``ElicitResult``, POSTed back, answers the interrupt (``decline`` and
``cancel`` deny). An interrupt answered from another transport meanwhile
stops the asking. Clients without elicitation get the host's interrupt
policy.

A busy conversation (docs/busy.md): a ``tools/call`` naming a ``session``
whose call still runs meets the busy policy (the server's, or the call's
``_meta["uamp.on_busy"]``; a bad value is ``-32602``). ``reject`` (and a
full queue) is a tool error (``isError``, ``_meta.code``
``conversation_busy`` / ``queue_full``); ``enqueue`` answers it after the
running call, on the conversation that call left; ``interrupt`` and
``rollback`` stop the running call, whose answer is then a tool error
saying so (``_meta["uamp.on_busy"]``: how it was stopped) with what it said
so far; under ``interrupt`` that stays in the conversation, under
``rollback`` its turn leaves none.

A request whose ``Origin`` is neither the server's own nor one
``--allowed-origins`` names is refused ``403`` (MCP asks servers to check it:
DNS rebinding of a local server).

Auth (MCP "Authorization"): the endpoint is an OAuth protected resource. The
gate's 401 names its RFC 9728 metadata
(``/.well-known/oauth-protected-resource/agents/{name}/mcp``), served here,
which names the configured token issuers. Payment: a call whose token
(``_meta.payment_token`` of the call, else the ``X-PAYMENT`` header) does not
pay is a tool error naming the price (``isError: true``, spec 004's
``accepts`` in ``_meta.payment``): MCP hosts show tool errors to the model and
the user, while a JSON-RPC error would usually be hidden as a failure of
the connection. Signing: with a signer, a successful call carries
``_meta.signature`` over the reply's text and the request payload as
received.
"""

from __future__ import annotations

import contextvars
import importlib.metadata
import logging
import uuid
from typing import Any, Final

import trio

from uamp_proto import events as ev
from uamp_proto import jsonrpc as rpc
from uamp_proto import types as ty
from uamp_proto.adapters import mcp
from uamp_proto.adapters._human import Ask, ask_of
from uamp_proto.busy import INVALID_POLICY, POLICY_KEY, BusyError
from uamp_proto.errors import UampError
from uamp_proto.payment import BALANCE_EVENT, PaymentPolicy, PaymentRequiredError, balance_fields
from uamp_proto.principal import ANONYMOUS, Principal
from uamp_proto.responder import Responder, TurnRequest, with_interrupts
from uamp_proto.signing import ResponseSigner
from uamp_proto.sse import encode_comment, encode_json
from uamp_stores.busy import ConversationGate, Slot

from ..engines.cors import CorsPolicy
from ..engines.http import (
    JSON_HEADERS,
    SSE_HEADERS,
    HTTPError,
    Request,
    Response,
    SendChunk,
    StreamingResponse,
    json_response,
)
from ..hosting.agents import ServedAgent
from ..hosting.host import Host, PolicyTransport
from ..hosting.interrupts import Interrupts
from ..hosting.router import RouteMeta
from ..hosting.rpc_streams import PEER_GONE, Handle, SendPayload, answer_payload, serve_ndjson
from ..hosting.turns import ResponseOutcome, ResponseRunner
from ..stores.mcp_sessions import McpConversation, McpPeer, McpSessionStore, TooManySessions
from ..trust import resource

__all__ = ["McpDispatcher", "McpTransport", "mount", "serve_stdio"]

log = logging.getLogger("uamp_trio.mcp")

#: The endpoint: JSON-RPC refusals, an OAuth protected resource (RFC 9728).
ROUTES = RouteMeta(transport="mcp", error_style="jsonrpc", protected_resource=True)
#: The RFC 9728 metadata: public (a client reads it before it has a token).
METADATA_ROUTES = RouteMeta(transport="mcp", error_style="jsonrpc", public=True)

#: The MCP Streamable HTTP headers.
SESSION_HEADER: Final = "mcp-session-id"
VERSION_HEADER: Final = "mcp-protocol-version"

#: Seconds between two keep-alive comments on an idle ``GET`` stream (well
#: under the server's ``response_idle_timeout``).
KEEPALIVE: Final = 15.0

#: The payload being answered, as received: what a response signature covers.
_PAYLOAD: contextvars.ContextVar[bytes] = contextvars.ContextVar("mcp_payload", default=b"")


def _version() -> str:
    try:
        return importlib.metadata.version("uamp")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - not installed
        return "0"


class _Unanswered(UampError):
    """A request that gets no response: its call was cancelled."""


class McpDispatcher:
    """The JSON-RPC dispatcher of one MCP peer (a stdio pipe, or one HTTP request of a session).

    Args:
        served: The agent, its payment policy, its signer and its turn options
            (the server's output bound; the defaults on stdio).
        store: Where named conversations live.
        principal: Who the peer acts for (owns its conversations).
        calls: The peer's running calls by request id (an HTTP session's,
            shared by its requests), for ``notifications/cancelled``.
        notify: Sends a notification to the peer (progress), or ``None``
            when the carrier cannot (a JSON answer).
        framed: The carrier's framing of a notification and its raw
            ``send``: ``(before, after, send)`` sends
            ``before + payload + after`` as ``notify(payload)`` would, for
            the progress hot path (``None``: use ``notify``).
        payment_token: The token of the carrier (``X-PAYMENT``), used when a
            call names none.
        interrupts: Where a call's run asks a person (``None``: it cannot).
        elicits: The client declared form elicitation (an HTTP session's
            flag; on stdio ``initialize`` sets it).
        asked: The server's requests waiting for the client's answer (an
            HTTP session's, shared by its requests).
        conversations: The busy policy of named sessions (the host's gate).
    """

    def __init__(
        self,
        served: ServedAgent,
        store: McpSessionStore,
        *,
        principal: Principal = ANONYMOUS,
        calls: dict[Any, ResponseRunner] | None = None,
        notify: SendPayload | None = None,
        framed: tuple[bytes, bytes, SendPayload] | None = None,
        payment_token: str | None = None,
        interrupts: Interrupts | None = None,
        elicits: bool = False,
        asked: dict[str, Any] | None = None,
        conversations: ConversationGate | None = None,
    ) -> None:
        self.served = served
        self.conversations = conversations or ConversationGate()
        self.interrupts = interrupts
        self.elicits = elicits
        self.asked: dict[str, Any] = {} if asked is None else asked
        self.agent: Responder = served.agent
        self.store = store
        self.principal = principal
        self.calls: dict[Any, ResponseRunner] = {} if calls is None else calls
        self._notify = notify
        self._framed = framed
        self.payment_token = payment_token
        self._methods = {
            "initialize": self._initialize,
            "ping": self._ping,
            "tools/list": self._tools_list,
            "tools/call": self._tools_call,
        }

    async def handle_payload(self, data: bytes | str) -> bytes | None:
        """Answer one payload; ``None`` when nothing is owed (notifications)."""
        _PAYLOAD.set(data.encode() if isinstance(data, str) else bytes(data))
        return await answer_payload(data, self.handle_message)

    async def handle_message(self, item: rpc.Message | rpc.Invalid) -> rpc.Message | None:
        """The answer to one decoded message (``None`` for notifications and replies)."""
        if isinstance(item, rpc.Invalid):
            return item.error.response(item.id)
        if isinstance(item, rpc.Notification):
            if item.method == "notifications/cancelled":
                call = self.calls.get(mcp.cancelled_request(item.params))
                if call is not None:
                    call.cancel()
            return None
        if not isinstance(item, rpc.Request):
            waiter = self.asked.pop(str(item.id), None)
            if waiter is not None:  # the client answers an elicitation of ours
                waiter.send_nowait(item)
            return None  # (a reply to nothing we asked is ignored)
        method = self._methods.get(item.method)
        if method is None:
            return rpc.error_response(
                item.id,
                rpc.METHOD_NOT_FOUND,
                f"Method not found: {item.method!r}. This server speaks the initialize "
                f"handshake (MCP {', '.join(mcp.PROTOCOL_VERSIONS)}) with tools only.",
                {"method": item.method},
            )
        try:
            return rpc.response(item.id, await method(item.id, item.params))
        except rpc.JSONRPCError as exc:
            return exc.response(item.id)
        except _Unanswered:
            return None
        except PEER_GONE:
            raise  # the caller left mid-call: its stream ends, no failure of ours
        except Exception:
            log.exception("MCP method %s failed", item.method)
            return rpc.error_response(
                item.id, rpc.INTERNAL_ERROR, f"Internal error while handling {item.method}."
            )

    # --- methods ------------------------------------------------------------------------

    async def _initialize(self, _id: rpc.Id, params: Any) -> Any:
        version = mcp.negotiate(params)
        self.elicits = mcp.client_elicits(params)
        return mcp.initialize_result(
            version,
            agent_name=self.agent.name,
            server_version=_version(),
            instructions=getattr(self.agent, "description", None) or None,
        )

    async def _ping(self, _id: rpc.Id, params: Any) -> Any:
        return {}

    async def _tools_list(self, _id: rpc.Id, params: Any) -> Any:
        return mcp.tools_list_result(self.agent.name, getattr(self.agent, "description", None))

    async def _tools_call(self, request_id: rpc.Id, params: Any) -> Any:
        call = mcp.parse_call(params, self.agent.name)
        if call.prompt is None:
            return mcp.error_result(call.problem or "Bad arguments.")
        if call.session is None:
            return await self._call(request_id, call, None, None)
        meta = params.get("_meta") if isinstance(params, dict) else None
        gate = self.conversations
        try:
            policy = gate.policy(meta)
            slot = gate.enter(
                ("mcp", self.principal.key, self.agent.name, call.session), self.principal, policy
            )
        except BusyError as exc:
            if exc.code == INVALID_POLICY:
                raise rpc.JSONRPCError(rpc.INVALID_PARAMS, str(exc), {"code": exc.code}) from None
            return mcp.error_result(
                f"Session {call.session!r}: {exc} Or use another session name.",
                meta={"code": exc.code},
            )
        conversation = self.store.conversation(self.principal, self.agent.name, call.session)
        conversation.calls += 1
        try:
            async with slot:  # enqueue: after the session's earlier calls
                return await self._call(request_id, call, conversation, slot)
        finally:
            conversation.calls -= 1

    async def _call(
        self,
        request_id: rpc.Id,
        call: mcp.CallParams,
        conversation: McpConversation | None,
        slot: Slot | None,
    ) -> Any:
        """Run one call's turn (on its named conversation, holding its place)."""
        token = call.payment_token or self.payment_token
        response_id = f"resp_{uuid.uuid4().hex}"
        try:
            charge = await self.served.open_charge(token, response_id, self.principal)
        except PaymentRequiredError as exc:
            return mcp.payment_result(exc)
        message = ty.Message(role="user", content=call.prompt)
        history = conversation.messages if conversation is not None else []
        request = TurnRequest(
            agent=self.agent.name,
            principal=self.principal,
            session_id=conversation.id if conversation is not None else f"mcp_{uuid.uuid4().hex}",
            response_id=response_id,
            messages=[*history, message],
            payment_token=token,
            metadata={"transport": "mcp"},
        )
        notify = self._notify
        progress = None
        out = notify  # where a progress notification goes, as encoded
        if call.progress_token is not None and notify is not None:
            if self._framed is None:
                progress = mcp.Progress(call.progress_token)
            else:  # framed by the Progress itself: one copy, one call less
                before, after, out = self._framed
                progress = mcp.Progress(call.progress_token, before=before, after=after)
        port = None
        if self.interrupts is not None:
            asks = self.elicits and notify is not None
            port = self.interrupts.port(request, supported=asks)
            request = with_interrupts(request, port)
        waiting: dict[str, trio.CancelScope] = {}
        encoded = progress.encoded if progress is not None else None
        asking: trio.Nursery | None = None

        async def sink(event: ev.Event) -> None:
            if type(event) is ev.ResponseDelta:
                # The hot path: a text delta is one progress notification
                # (its JSON made without dicts) to the carrier, or nothing.
                delta = event.delta
                if encoded is not None and type(delta) is ty.DeltaText:
                    data = encoded(delta.text)
                    if data is not None and out is not None:
                        await out(data)
            elif type(event) is ev.InterruptRequest:
                if self.elicits and notify is not None and asking is not None:
                    asking.start_soon(self._elicit, ask_of(event), waiting)
            elif type(event) is ev.InterruptResolved:
                scope = waiting.pop(event.interrupt_id, None)
                if scope is not None:
                    scope.cancel()  # answered elsewhere: stop asking here

        # Inline: the agent runs in this task and each event reaches the
        # carrier through sink(), with no channel hop and no task switch.
        turn = self.served.turns.runner(self.agent, request, sink, stamp=False, charge=charge)
        if port is not None:
            port.emit = turn.emit
        self.calls[request_id] = turn
        if slot is not None:
            slot.bind(turn.cancel)  # a later call in the session may stop this one
        try:
            async with trio.open_nursery() as asking:
                outcome = await turn.run()
                asking.cancel_scope.cancel()
        finally:
            if self.calls.get(request_id) is turn:
                del self.calls[request_id]
            if port is not None:
                port.close()  # no cycle keeps the request (and its conversation) alive
        if slot is not None and slot.interrupted and outcome.status == "cancelled":
            return self._stopped(outcome, slot, message, conversation)
        return self._result(outcome, call.session, message, conversation)

    def _stopped(
        self,
        outcome: ResponseOutcome,
        slot: Slot,
        message: ty.Message,
        conversation: McpConversation | None,
    ) -> dict[str, Any]:
        """The answer of a call a later call of its session stopped (interrupt, rollback)."""
        how = "rollback" if slot.dropped else "interrupt"
        if conversation is not None and not slot.dropped:
            # Interrupted: what it said so far stays in the conversation.
            self.store.remember(conversation, [message, *outcome.tracker.messages()])
        said = outcome.tracker.text
        text = "A later call in this session stopped this one"
        text += f"; it had said: {said}" if said else "."
        return mcp.error_result(text, meta={POLICY_KEY: how})

    async def _elicit(self, ask: Ask, waiting: dict[str, trio.CancelScope]) -> None:
        """Ask the client's user with ``elicitation/create``; its result answers ``ask``."""
        notify = self._notify
        assert notify is not None and self.interrupts is not None
        with trio.CancelScope() as scope:
            waiting[ask.id] = scope
            rid = f"uamp-elicit-{uuid.uuid4().hex}"
            send, receive = trio.open_memory_channel[rpc.Response | rpc.ErrorResponse](1)
            self.asked[rid] = send
            try:
                await notify(
                    rpc.encode(rpc.request(rid, mcp.ELICIT_METHOD, mcp.elicitation_params(ask)))
                )
                reply = await receive.receive()
            finally:
                self.asked.pop(rid, None)
            await self.interrupts.answer_reply(
                self.principal, ask, reply, mcp.parse_elicitation_result, "MCP elicitation result"
            )
        waiting.pop(ask.id, None)

    def _result(
        self,
        outcome: ResponseOutcome,
        session: str | None,
        message: ty.Message,
        conversation: Any,
    ) -> dict[str, Any]:
        meta: dict[str, Any] = {}
        if outcome.balance is not None:
            meta[BALANCE_EVENT] = balance_fields(outcome.balance)
        if outcome.status == "cancelled":
            # MCP "Cancellation": the receiver of notifications/cancelled
            # sends no response (an HTTP client gets 202, or its stream ends).
            raise _Unanswered
        if outcome.status == "failed":
            error = outcome.error
            assert error is not None
            return mcp.error_result(f"The agent failed ({error.code}): {error.message}", meta=meta)
        if outcome.status == "requires_action":
            names = ", ".join(c.name for c in outcome.pending_tool_calls)
            return mcp.error_result(
                f"The agent asked its caller to run tools ({names}); MCP callers run none.",
                meta=meta,
            )
        if conversation is not None:
            self.store.remember(conversation, [message, *outcome.tracker.messages()])
        text = outcome.tracker.text
        signer = self.served.signer
        if signer is not None:
            meta["signature"] = signer(text, _PAYLOAD.get())
        return mcp.call_result(text, session=session, meta=meta)


# --- stdio ---------------------------------------------------------------------------------


async def serve_stdio(
    agent: Responder,
    *,
    stdin: trio.abc.ReceiveStream | None = None,
    stdout: trio.abc.SendStream | None = None,
    payment_policy: PaymentPolicy | None = None,
    signer: ResponseSigner | None = None,
    principal: Principal = ANONYMOUS,
    max_line: int = 16 * 1024 * 1024,
) -> None:
    """Serve ``agent`` as an MCP server over newline-delimited JSON until EOF (``uamp mcp``).

    Args:
        stdin: Where requests arrive (default: fd 0).
        stdout: Where answers go (default: fd 1); log to stderr only.
        payment_policy: Consulted before every call.
        signer: Signs each call's answer (``_meta.signature``).
        principal: Who the peer acts for (``uamp mcp``: the local user).
        max_line: Longest accepted line; longer ones get ``-32600``.
    """
    store = McpSessionStore()
    interrupts = Interrupts()  # the one peer answers its own calls' questions
    gate = ConversationGate()

    def handler_for(send: SendPayload) -> Handle:
        served = ServedAgent(agent, payment_policy, signer)
        return McpDispatcher(
            served,
            store,
            principal=principal,
            notify=send,
            interrupts=interrupts,
            conversations=gate,
        ).handle_payload

    await serve_ndjson(handler_for, stdin=stdin, stdout=stdout, max_line=max_line)


# --- Streamable HTTP -----------------------------------------------------------------------


def _refused(
    status: int, code: int, message: str, headers: list[tuple[str, str]] | None = None
) -> Response:
    """An HTTP refusal with a JSON-RPC error body (``id: null``)."""
    body = rpc.encode(rpc.error_response(None, code, message))
    return Response(status=status, headers=[*JSON_HEADERS, *(headers or [])], body=body)


class _Refused(UampError):
    def __init__(self, response: Response) -> None:
        self.response = response


async def _until(events: list[trio.Event], timeout: float) -> bool:
    """Wait for any of ``events`` for at most ``timeout`` seconds; whether one was set."""
    with trio.move_on_after(timeout):
        async with trio.open_nursery() as nursery:

            async def wait(event: trio.Event) -> None:
                await event.wait()
                nursery.cancel_scope.cancel()

            for event in events:
                nursery.start_soon(wait, event)
    return any(event.is_set() for event in events)


def _wants_progress(item: rpc.Request) -> bool:
    meta = item.params.get("_meta") if isinstance(item.params, dict) else None
    return isinstance(meta, dict) and meta.get("progressToken") is not None


class McpTransport(PolicyTransport):
    """The MCP endpoints of an app (see the module docstring); state in ``stores.mcp_sessions``."""

    def __init__(self, app: Host, *, payment_policy: PaymentPolicy | None = None) -> None:
        super().__init__(app, payment_policy=payment_policy)
        self.store: McpSessionStore = app.stores.mcp_sessions

    def mount(self) -> None:
        """Register ``POST/GET/DELETE .../mcp`` and the RFC 9728 metadata."""
        self.app.agent_route(
            ["POST", "GET", "DELETE"],
            "/mcp",
            self.endpoint,
            label="MCP (Streamable HTTP)",
            meta=ROUTES,
        )
        for path in ("", "/mcp", "/agents/{agent}/mcp"):
            self.app.router.add(
                "GET", resource.WELL_KNOWN + path, self.resource_metadata, meta=METADATA_ROUTES
            )

    async def resource_metadata(self, request: Request) -> Response:
        """``GET /.well-known/oauth-protected-resource[/agents/{name}/mcp]`` (RFC 9728)."""
        if self.app.authenticator is None:
            raise HTTPError(404, "This server takes no tokens: it is no protected resource.")
        if "agent" in request.path_params:
            self.app.resolve_agent(request.path_params)
        path = request.path.removeprefix(resource.WELL_KNOWN)
        doc = resource.metadata_document(
            resource.origin(request) + request.root_path + path,
            resource.issuers(self.app.authenticator),
        )
        return json_response(doc)

    async def endpoint(self, request: Request) -> Response | StreamingResponse:
        """``.../mcp``: POST a message, GET the session's stream, DELETE the session."""
        agent = self.app.resolve_agent(request.path_params)
        origin = request.headers.get("origin")
        if origin is not None and not self._origin_allowed(origin, request):
            # MCP "Security Warning": a page of another origin (DNS
            # rebinding of a local server) gets nothing.
            return _refused(403, rpc.INVALID_REQUEST, f"Origin {origin!r} may not call.")
        try:
            if request.method == "POST":
                return await self._post(agent, request)
            peer = self._peer(agent, request)
            if request.method == "DELETE":
                self.store.close(peer.id)
                return Response(status=200)
            return self._stream(peer, request)
        except _Refused as refused:
            return refused.response

    def _origin_allowed(self, origin: str, request: Request) -> bool:
        """The page's own origin, or one ``--allowed-origins`` lets call (CORS)."""
        if origin == resource.origin(request):
            return True
        config = self.app.server_config
        policy = CorsPolicy.of(config.allowed_origins)
        return policy is not None and policy.allows(origin)

    def _peer(self, agent: Responder, request: Request) -> McpPeer:
        """The session a request names, checked (else :class:`_Refused`)."""
        peer_id = request.headers.get(SESSION_HEADER)
        if not peer_id:
            raise _Refused(
                _refused(
                    400,
                    rpc.INVALID_REQUEST,
                    "Bad request: the Mcp-Session-Id header is required; send initialize first.",
                )
            )
        version = request.headers.get(VERSION_HEADER)
        if version is not None and version not in mcp.PROTOCOL_VERSIONS:
            raise _Refused(
                _refused(
                    400,
                    rpc.INVALID_REQUEST,
                    f"Unsupported MCP-Protocol-Version {version!r}; this server speaks "
                    f"{', '.join(mcp.PROTOCOL_VERSIONS)}.",
                )
            )
        peer = self.store.get(agent.name, peer_id, request.principal)
        if peer is None:
            raise _Refused(
                _refused(404, rpc.INVALID_REQUEST, "Session not found: send initialize again.")
            )
        return peer

    def _dispatcher(
        self,
        agent: Responder,
        request: Request,
        peer: McpPeer | None,
        notify: SendPayload | None,
        framed: tuple[bytes, bytes, SendPayload] | None = None,
    ) -> McpDispatcher:
        return McpDispatcher(
            self.served(agent),
            self.store,
            principal=request.principal,
            calls=None if peer is None else peer.calls,
            notify=notify,
            framed=framed,
            payment_token=request.headers.get("x-payment"),
            interrupts=self.app.interrupts,
            elicits=peer is not None and peer.elicits,
            asked=None if peer is None else peer.asked,
            conversations=self.app.conversations,
        )

    async def _post(self, agent: Responder, request: Request) -> Response | StreamingResponse:
        try:
            batch = rpc.decode(request.body)
        except rpc.JSONRPCError as exc:
            return Response(
                status=400, headers=list(JSON_HEADERS), body=rpc.encode(exc.response(None))
            )
        calls = [i for i in batch.items if isinstance(i, rpc.Request)]
        if any(c.method == "initialize" for c in calls):
            return await self._initialize(agent, request, batch)
        if len(calls) == 1 and calls[0].method == mcp.DISCOVER_METHOD:
            # The 2026-07-28 probe, sent before any session: "not found" is
            # what makes its clients fall back to initialize (docs/mcp.md).
            answer = await self._dispatcher(agent, request, None, None).handle_message(calls[0])
            assert answer is not None
            return Response(status=200, headers=list(JSON_HEADERS), body=rpc.encode(answer))
        peer = self._peer(agent, request)
        if not calls:
            await self._dispatcher(agent, request, peer, None).handle_payload(request.body)
            return Response(status=202)
        accepts_sse = "text/event-stream" in (request.headers.get("accept") or "")
        if (
            accepts_sse
            and not batch.is_batch
            and calls[0].method == "tools/call"
            and (_wants_progress(calls[0]) or peer.elicits)
        ):
            return self._streamed(agent, request, peer)
        reply = await self._dispatcher(agent, request, peer, None).handle_payload(request.body)
        if reply is None:  # a cancelled call: no response is owed
            return Response(status=202)
        return Response(status=200, headers=list(JSON_HEADERS), body=reply)

    async def _initialize(self, agent: Responder, request: Request, batch: rpc.Batch) -> Response:
        item = batch.items[0]
        if batch.is_batch or not isinstance(item, rpc.Request):
            return _refused(400, rpc.INVALID_REQUEST, "initialize must be sent alone.")
        try:
            version = mcp.negotiate(item.params)
        except rpc.JSONRPCError as exc:
            return Response(
                status=400, headers=list(JSON_HEADERS), body=rpc.encode(exc.response(item.id))
            )
        try:
            peer = self.store.open(agent.name, request.principal, version)
        except TooManySessions as exc:
            return _refused(429, rpc.INVALID_REQUEST, f"Too many MCP sessions: {exc}; end one.")
        peer.elicits = mcp.client_elicits(item.params)
        reply = await self._dispatcher(agent, request, peer, None).handle_payload(request.body)
        headers = [*JSON_HEADERS, (SESSION_HEADER, peer.id)]
        return Response(status=200, headers=headers, body=reply or b"")

    def _streamed(self, agent: Responder, request: Request, peer: McpPeer) -> StreamingResponse:
        """A ``tools/call`` answered as SSE: its progress, then its result."""

        async def produce(send: SendChunk) -> None:
            async def notify(payload: bytes) -> None:
                await send(encode_json(payload, event="message"))

            framed = (_SSE_BEFORE, _SSE_AFTER, send)
            dispatcher = self._dispatcher(agent, request, peer, notify, framed)
            reply = await dispatcher.handle_payload(request.body)
            if reply is not None:
                await send(encode_json(reply, event="message"))

        return StreamingResponse(producer=produce, headers=list(SSE_HEADERS))

    def _stream(self, peer: McpPeer, request: Request) -> StreamingResponse | Response:
        """``GET``: the session's stream of server-initiated messages (there are none yet)."""
        if "text/event-stream" not in (request.headers.get("accept") or ""):
            return _refused(406, rpc.INVALID_REQUEST, "GET takes Accept: text/event-stream.")
        if peer.streaming:
            return _refused(409, rpc.INVALID_REQUEST, "This session's stream is already open.")
        peer.streaming = True
        app = self.app

        async def produce(send: SendChunk) -> None:
            await send(encode_comment("stream open"))
            while not await _until([peer.ended, app.drain_started], KEEPALIVE):
                await send(encode_comment("keep-alive"))

        async def release() -> None:
            peer.streaming = False

        return StreamingResponse(producer=produce, headers=list(SSE_HEADERS), on_close=release)


#: ``encode_json(payload, event="message")`` is ``_SSE_BEFORE + payload + _SSE_AFTER``.
_SSE_BEFORE: Final = b"event: message\ndata: "
_SSE_AFTER: Final = b"\n\n"


def mount(app: Host, *, payment_policy: PaymentPolicy | None = None) -> None:
    """Mount the MCP transport on ``app`` (a :data:`~uamp_trio.app.Transport`)."""
    McpTransport(app, payment_policy=payment_policy).mount()
