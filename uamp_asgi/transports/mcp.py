"""MCP Streamable HTTP on ASGI: every agent is an MCP server with one tool, itself.

``POST .../mcp`` takes one JSON-RPC payload, as ``uamp serve``'s
(:mod:`uamp_trio.transports.mcp`); the translation is
:mod:`uamp_proto.adapters.mcp`'s. ``initialize`` opens a session whose id
goes back in ``Mcp-Session-Id`` and every later request must carry it (400
without, 404 for an id this app does not know or that another principal
opened). ``tools/call`` runs one turn of the agent; a ``session`` argument
names a conversation the caller continues (kept in memory, bounded). Answers
are JSON, except a ``tools/call`` with a ``progressToken`` from a client that
accepts ``text/event-stream``: its answer is an SSE stream of
``notifications/progress`` (one per text delta, :class:`uamp_proto.adapters.mcp.Progress`)
while the agent talks, then the result, as ``uamp serve``'s. A notification
gets 202; ``DELETE`` ends the session. ``GET`` (a stream of server-initiated
messages) is 405: this server sends none.

Auth (MCP "Authorization"), as ``uamp serve``: the endpoint is an OAuth
protected resource. A refused caller's 401 names its RFC 9728 metadata
(``WWW-Authenticate: ... resource_metadata="..."``), served here under
``/.well-known/oauth-protected-resource``, naming the token issuers the
authenticator accepts (:mod:`uamp_proto.resource`).
"""

from __future__ import annotations

import uuid
from typing import Any, Final

from uamp_proto import events as ev
from uamp_proto import history, resource
from uamp_proto import jsonrpc as rpc
from uamp_proto import types as ty
from uamp_proto.adapters import mcp
from uamp_proto.payment import BALANCE_EVENT, PaymentRequiredError, balance_fields
from uamp_proto.principal import Principal
from uamp_proto.responder import Responder, TurnRequest
from uamp_proto.sse import encode_json

from ..app import Host
from ..bounded import OwnedLRU
from ..http import HTTPError, JsonReply, Reply, Request, StreamReply, Write
from ..turns import Sink

__all__ = ["MAX_CONVERSATIONS", "MAX_SESSIONS", "mount"]

SESSION_HEADER: Final = "mcp-session-id"
#: Open MCP sessions kept (all principals); the least recently used go first.
MAX_SESSIONS: Final = 4096
#: MCP sessions (and named conversations) one principal keeps; its own oldest go first.
MAX_SESSIONS_PER_PRINCIPAL: Final = 64
#: Named conversations kept (all principals); the oldest go first.
MAX_CONVERSATIONS: Final = 4096
#: Messages a named conversation keeps (and at most history.MAX_HISTORY_BYTES).
MAX_MESSAGES: Final = 200


#: ``encode_json(payload, event="message")`` is ``_SSE_BEFORE + payload + _SSE_AFTER``.
_SSE_BEFORE: Final = b"event: message\ndata: "
_SSE_AFTER: Final = b"\n\n"


def _wants_progress(item: rpc.Request) -> bool:
    """Whether a call asks for progress (``_meta.progressToken``)."""
    meta = item.params.get("_meta") if isinstance(item.params, dict) else None
    return isinstance(meta, dict) and meta.get("progressToken") is not None


def _refused(status: int, message: str) -> JsonReply:
    body = rpc.to_object(rpc.error_response(None, rpc.INVALID_REQUEST, message))
    return JsonReply(body, status)


class _Mcp:
    def __init__(self, host: Host) -> None:
        self.host = host
        #: The agent of each open MCP session, by its owner and id.
        self.sessions: OwnedLRU[str] = OwnedLRU(
            per_owner=MAX_SESSIONS_PER_PRINCIPAL, total=MAX_SESSIONS
        )
        #: What all of one principal's conversations keep (history.MAX_OWNER_HISTORY_BYTES).
        self.kept = history.HistoryBudget()
        self.conversations: OwnedLRU[list[ty.Message]] = OwnedLRU(
            per_owner=MAX_SESSIONS_PER_PRINCIPAL, total=MAX_CONVERSATIONS, on_drop=self.kept.forget
        )

    async def endpoint(self, request: Request) -> Reply:
        agent = self.host.resolve_agent(request.path_params)
        if request.method == "GET":
            return _refused(405, "This server sends no messages of its own: POST requests.")
        if request.method == "DELETE":
            peer = request.headers.get(SESSION_HEADER, "")
            if self.sessions.get(request.principal, peer) != agent.name:
                return _refused(404, "Session not found.")
            self.sessions.pop(request.principal, peer)
            return JsonReply({})
        try:
            batch = rpc.decode(request.body)
        except rpc.JSONRPCError as exc:
            return JsonReply(rpc.to_object(exc.response(None)), 400)
        calls = [i for i in batch.items if isinstance(i, rpc.Request)]
        opening = any(c.method == "initialize" for c in calls)
        discover = len(calls) == 1 and calls[0].method == mcp.DISCOVER_METHOD
        headers: list[tuple[str, str]] = []
        if opening:
            peer = uuid.uuid4().hex
            self.sessions.put(request.principal, peer, agent.name)
            headers.append((SESSION_HEADER, peer))
        elif not discover:
            peer = request.headers.get(SESSION_HEADER, "")
            if not peer:
                return _refused(400, "The Mcp-Session-Id header is required; send initialize.")
            if self.sessions.get(request.principal, peer) != agent.name:
                return _refused(404, "Session not found: send initialize again.")

        item = batch.items[0] if batch.items else None
        accepts_sse = "text/event-stream" in request.headers.get("accept", "")
        if (
            accepts_sse
            and not batch.is_batch
            and isinstance(item, rpc.Request)
            and item.method == "tools/call"
            and _wants_progress(item)
        ):
            return self.streamed(agent, request, item)

        async def handle(item: rpc.Message | rpc.Invalid) -> rpc.Message | None:
            return await self.answer(agent, request, item)

        reply = await rpc.answer_payload(request.body, handle)
        if reply is None:
            return JsonReply(b"", 202)
        return JsonReply(reply, 200, headers)

    def streamed(self, agent: Responder, request: Request, item: rpc.Request) -> Reply:
        """A ``tools/call`` answered as SSE: its progress, then its result."""

        params = item.params if isinstance(item.params, dict) else {}
        token = params["_meta"]["progressToken"]  # _wants_progress checked it

        async def produce(write: Write) -> None:
            progress = mcp.Progress(token, before=_SSE_BEFORE, after=_SSE_AFTER)

            async def sink(event: ev.Event) -> None:
                if type(event) is ev.ResponseDelta and type(event.delta) is ty.DeltaText:
                    data = progress.encoded(event.delta.text)
                    if data is not None:
                        await write(data)

            reply = await self.answer(agent, request, item, sink)
            if reply is not None:
                await write(encode_json(rpc.encode(reply), event="message"))

        return StreamReply(produce)

    async def answer(
        self,
        agent: Responder,
        request: Request,
        item: rpc.Message | rpc.Invalid,
        sink: Sink | None = None,
    ) -> rpc.Message | None:
        if isinstance(item, rpc.Invalid):
            return item.error.response(item.id)
        if not isinstance(item, rpc.Request):
            return None  # notifications (a cancel of a call answered already) and replies
        name = getattr(agent, "description", None) or None
        try:
            if item.method == "initialize":
                version = mcp.negotiate(item.params)
                result: Any = mcp.initialize_result(
                    version, agent_name=agent.name, server_version="0", instructions=name
                )
            elif item.method == "ping":
                result = {}
            elif item.method == "tools/list":
                result = mcp.tools_list_result(agent.name, name)
            elif item.method == "tools/call":
                result = await self.call(agent, request, item.params, sink)
            else:
                return rpc.error_response(
                    item.id, rpc.METHOD_NOT_FOUND, f"Method not found: {item.method!r}."
                )
        except rpc.JSONRPCError as exc:
            return exc.response(item.id)
        return rpc.response(item.id, result)

    async def call(
        self, agent: Responder, request: Request, params: Any, sink: Sink | None = None
    ) -> Any:
        call = mcp.parse_call(params, agent.name)
        if call.prompt is None:
            return mcp.error_result(call.problem or "Bad arguments.")
        principal: Principal = request.principal
        key = f"{agent.name}\x00{call.session}"
        kept = self.conversations.get(principal, key) if call.session is not None else None
        earlier = kept or []
        token = call.payment_token or request.headers.get("x-payment")
        response_id = f"resp_{uuid.uuid4().hex}"
        try:
            charge = await self.host.open_charge(agent, token, response_id, principal)
        except PaymentRequiredError as exc:
            return mcp.payment_result(exc)
        message = ty.Message(role="user", content=call.prompt)
        turn = TurnRequest(
            agent=agent.name,
            principal=principal,
            session_id=f"mcp_{uuid.uuid4().hex}",
            response_id=response_id,
            messages=[*earlier, message],
            payment_token=token,
            metadata={"transport": "mcp"},
        )
        outcome = await self.host.turns.run(agent, turn, sink, charge=charge)
        meta: dict[str, Any] = {}
        if outcome.balance is not None:
            meta[BALANCE_EVENT] = balance_fields(outcome.balance)
        if outcome.status in ("failed", "cancelled"):
            error = outcome.error
            why = f"{error.code}: {error.message}" if error else "cancelled"
            return mcp.error_result(f"The agent failed ({why})", meta=meta)
        if outcome.status == "requires_action":
            names = ", ".join(c.name for c in outcome.pending_tool_calls)
            return mcp.error_result(
                f"The agent asked its caller to run tools ({names}); MCP callers run none.",
                meta=meta,
            )
        if call.session is not None:
            grown = [*earlier, message, *outcome.tracker.messages()]
            size = history.trim(grown, max_messages=MAX_MESSAGES)  # and MAX_HISTORY_BYTES
            self.conversations.put(principal, key, grown)
            # Past the principal's budget its least recently continued ones go.
            for emptied in self.kept.kept(principal.key, key, size):
                self.conversations.pop(principal, str(emptied))
        text = outcome.tracker.text
        signer = self.host.config.response_signer
        if signer is not None:
            meta["signature"] = signer(text, request.body)
        return mcp.call_result(text, session=call.session, meta=meta)


def mount(host: Host) -> None:
    """Register ``POST/GET/DELETE .../mcp`` and its RFC 9728 metadata."""
    host.route(
        ["POST", "GET", "DELETE"], "/mcp", _Mcp(host).endpoint, style="jsonrpc", protected=True
    )

    async def resource_metadata(request: Request) -> Reply:
        """``GET /.well-known/oauth-protected-resource[/agents/{name}/mcp]`` (RFC 9728)."""
        auth = host.config.authenticator
        if auth is None:
            raise HTTPError(
                404, "This server takes no tokens: it is no protected resource.", code="not_found"
            )
        if "agent" in request.path_params:
            host.resolve_agent(request.path_params)
        below = request.full_path.removeprefix(request.root_path).removeprefix(resource.WELL_KNOWN)
        host_header = request.headers.get("host") or request.headers.get(":authority")
        url = resource.origin_of(request.scheme, host_header) + request.root_path + below
        return JsonReply(resource.metadata_document(url, resource.issuers(auth)))

    # Standalone the MCP endpoint is /agents/{name}/mcp; mounted at /agents, /{name}/mcp.
    for below in ("", "/mcp", "/agents/{agent}/mcp", "/{agent}/mcp"):
        host.route("GET", resource.WELL_KNOWN + below, resource_metadata, public=True)
