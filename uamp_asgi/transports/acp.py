"""The Agent Client Protocol over WebSocket (``.../acp/stream``) and HTTP (``.../acp``) on ASGI.

As ``uamp serve``'s (:mod:`uamp_trio.transports.acp`), translated by
:mod:`uamp_proto.adapters.acp`: ``initialize``, ``session/new``,
``session/load`` (replays the history), ``session/prompt`` (the turn's
updates stream as ``session/update`` notifications on the WebSocket, then the
answer with ``stopReason``), ``session/cancel``. Every WebSocket message is
answered in a task of its own (at most :data:`MAX_PENDING` at once), so a
cancel is read while a prompt streams. ``POST .../acp`` answers one payload
as JSON (no room for notifications there). Sessions live in memory, bounded
(:data:`MAX_SESSIONS_PER_PRINCIPAL` a principal) and owned by the principal
that created them: another's session id answers like a missing one. A
second prompt while one runs in a session is refused.
``prompt/submit``, ``tools/*``, the busy policies and the MCP servers a
stdio client names are ``uamp serve``'s.
"""

from __future__ import annotations

import uuid
from typing import Any, Final

import anyio
import attrs

from uamp_proto import history
from uamp_proto import jsonrpc as rpc
from uamp_proto import types as ty
from uamp_proto.adapters import acp
from uamp_proto.codec import unstructure
from uamp_proto.payment import BALANCE_EVENT, PaymentRequiredError, balance_fields
from uamp_proto.principal import Principal
from uamp_proto.responder import Responder, TurnRequest

from ..app import Host
from ..bounded import OwnedLRU
from ..http import JsonReply, Reply, Request
from ..turns import Turn
from ..websocket import Closed, WebSocket

__all__ = ["MAX_PENDING", "MAX_SESSIONS_PER_PRINCIPAL", "mount"]

#: Messages of one WebSocket answered at once; the next waits for one to end.
MAX_PENDING: Final = 64
#: Sessions one principal holds; the least recently used goes first.
MAX_SESSIONS_PER_PRINCIPAL: Final = 64
#: Sessions held in all.
MAX_SESSIONS: Final = 4096


@attrs.define
class _Session:
    id: str
    owner: tuple[str, str]
    agent: str
    messages: list[ty.Message] = attrs.field(factory=list)
    turn: Turn | None = None
    payment_token: str | None = None


class _Sessions:
    def __init__(self) -> None:
        #: What all of one principal's sessions keep (history.MAX_OWNER_HISTORY_BYTES).
        self.kept = history.HistoryBudget()
        self._all: OwnedLRU[_Session] = OwnedLRU(
            per_owner=MAX_SESSIONS_PER_PRINCIPAL, total=MAX_SESSIONS, on_drop=self.kept.forget
        )

    def trim_history(self, session: _Session, owner: Principal) -> None:
        """Bound what ``session`` keeps: its own bounds, then its owner's budget.

        Past the budget, the owner's least recently prompted other sessions
        lose their history (their next prompt starts afresh).
        """
        size = acp.trim_history(session.messages)
        for emptied in self.kept.kept(owner.key, session.id, size):
            other = self._all.peek(owner, str(emptied))
            if other is not None:
                other.messages = []

    def create(self, agent: str, owner: Principal) -> _Session:
        session = _Session(f"sess_{uuid.uuid4().hex}", owner.key, agent)
        self._all.put(owner, session.id, session)
        return session

    def get(self, agent: str, session_id: str, owner: Principal) -> _Session:
        found = self._all.get(owner, session_id)
        if found is None or found.agent != agent:
            raise acp.unknown_session(session_id)
        return found


class _Peer:
    """One ACP peer: a WebSocket connection, or one HTTP request."""

    def __init__(
        self,
        host: Host,
        sessions: _Sessions,
        agent: Responder,
        principal: Principal,
        notify: Any,
        payment_token: str | None,
    ) -> None:
        self.host = host
        self.sessions = sessions
        self.agent = agent
        self.principal = principal
        self.notify = notify
        self.payment_token = payment_token

    async def handle(self, item: rpc.Message | rpc.Invalid) -> rpc.Message | None:
        if isinstance(item, rpc.Invalid):
            return item.error.response(item.id)
        if isinstance(item, rpc.Notification):
            if item.method == "session/cancel":
                try:
                    session = self.sessions.get(
                        self.agent.name, acp.parse_cancel(item.params), self.principal
                    )
                except rpc.JSONRPCError:
                    return None  # another's or a missing session: ignored alike
                if session.turn is not None:
                    session.turn.cancel()
            return None
        if not isinstance(item, rpc.Request):
            return None
        try:
            return rpc.response(item.id, await self.method(item.method, item.params))
        except rpc.JSONRPCError as exc:
            return exc.response(item.id)

    async def method(self, name: str, params: Any) -> Any:
        agent = self.agent
        if name == "initialize":
            caps = agent.capabilities()
            version = params.get("protocolVersion") if isinstance(params, dict) else None
            if version is not None and not isinstance(version, str):  # Zed's ACP: a number
                return acp.initialize_result(
                    params, agent_name=agent.name, version="0", capabilities=caps, load_session=True
                )
            return acp.spec_initialize_result(agent_name=agent.name, version="0", capabilities=caps)
        if name == "capabilities":
            return unstructure(agent.capabilities())
        if name == "session/new":
            acp.parse_new_session(params)
            return {"sessionId": self.sessions.create(agent.name, self.principal).id}
        if name == "session/load":
            parsed = acp.parse_load_session(params)
            session = self.sessions.get(agent.name, parsed.session_id, self.principal)
            for update in acp.history_updates(session.messages):
                await self.notify(session.id, update)
            return {}
        if name == "session/prompt":
            return await self.prompt(params)
        raise rpc.JSONRPCError(rpc.METHOD_NOT_FOUND, f"Method not found: {name!r}.")

    async def prompt(self, params: Any) -> Any:
        parsed = acp.parse_prompt(params)
        session = self.sessions.get(self.agent.name, parsed.session_id, self.principal)
        if session.turn is not None:
            raise rpc.JSONRPCError(
                rpc.INVALID_REQUEST,
                "A prompt is running in this session; send session/cancel to stop it.",
                {"sessionId": session.id, "code": "busy"},
            )
        token = parsed.payment_token or session.payment_token or self.payment_token
        response_id = f"resp_{uuid.uuid4().hex}"
        try:
            charge = await self.host.open_charge(self.agent, token, response_id, self.principal)
        except PaymentRequiredError as exc:
            raise acp.payment_error(exc) from None
        if parsed.payment_token is not None:
            session.payment_token = parsed.payment_token
        request = TurnRequest(
            agent=self.agent.name,
            principal=self.principal,
            session_id=session.id,
            response_id=response_id,
            messages=[*session.messages, parsed.message],
            payment_token=token,
            metadata={"transport": "acp"},
        )
        encoder = acp.UpdateEncoder()

        async def sink(event: Any) -> None:
            for update in encoder.feed(event):
                await self.notify(session.id, update)

        turn = session.turn = self.host.turns.turn(self.agent, request, sink, charge=charge)
        try:
            outcome = await turn.run()
        finally:
            session.turn = None
        for update in encoder.unanswered([c.id for c in outcome.pending_tool_calls]):
            await self.notify(session.id, update)
        session.messages.append(parsed.message)
        if outcome.status != "failed":
            session.messages.extend(outcome.tracker.messages())
        self.sessions.trim_history(session, self.principal)  # its bounds, its owner's
        result = acp.prompt_result(outcome)
        if outcome.balance is not None:
            result["_meta"] = {BALANCE_EVENT: balance_fields(outcome.balance)}
        return result


def mount(host: Host) -> None:
    """Register ``.../acp/stream`` (WebSocket) and ``POST .../acp``."""
    sessions = _Sessions()

    async def stream(ws: WebSocket) -> None:
        try:
            agent = host.resolve_agent(ws.path_params)
        except Exception:
            await ws.close(1008)
            return
        await ws.accept()
        lock = anyio.Lock()

        async def send(payload: bytes) -> None:
            async with lock:
                await ws.send(payload.decode())

        async def notify(session_id: str, update: dict[str, Any]) -> None:
            note = rpc.notification("session/update", {"sessionId": session_id, "update": update})
            await send(rpc.encode(note))

        peer = _Peer(host, sessions, agent, ws.principal, notify, ws.headers.get("x-payment"))
        slots = anyio.Semaphore(MAX_PENDING)

        async def answer(data: str | bytes) -> None:
            try:
                reply = await rpc.answer_payload(data, peer.handle)
                if reply is not None:
                    await send(reply)
            except Closed:
                pass
            finally:
                slots.release()

        async with anyio.create_task_group() as group:
            try:
                while True:
                    data = await ws.receive()
                    await slots.acquire()
                    group.start_soon(answer, data)
            except Closed:
                group.cancel_scope.cancel()  # nobody reads the answers any more

    async def post(request: Request) -> Reply:
        agent = host.resolve_agent(request.path_params)

        async def quiet(session_id: str, update: dict[str, Any]) -> None:
            return None  # a JSON answer has no room for notifications

        peer = _Peer(
            host, sessions, agent, request.principal, quiet, request.headers.get("x-payment")
        )
        reply = await rpc.answer_payload(request.body, peer.handle)
        return JsonReply(b"" if reply is None else reply, 200 if reply is not None else 202)

    host.websocket("/acp/stream", stream)
    host.route("POST", "/acp", post, style="jsonrpc")
