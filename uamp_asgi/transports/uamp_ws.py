"""Native UAMP over WebSocket on ASGI, with resumable sessions kept in memory.

Endpoints: ``.../uamp`` for an agent (and ``/uamp`` at the root), ``/ws`` for
any agent (``session.create.agent`` names it), as ``uamp serve``.

Theory of operation
-------------------
The sans-IO core (:class:`uamp_proto.connection.ServerConnection`) keeps the
state of each connection: sessions, order rules, the responses' trackers,
pings. This module feeds it the frames the client sends and writes what it
owes; on ``response.create`` it runs the agent (:class:`~uamp_asgi.turns.Turn`)
in the connection's task group, every event through the core's ``send`` (which
stamps its ``event_id``), into the session's log, then to the socket.

Resume (docs/resume.md): every frame a session sends is kept in its
:class:`SessionLog` (in this process's memory, :data:`RETAIN` frames a
session, :data:`MAX_SESSIONS` sessions, owned by the principal that opened
it). A client that lost its connection sends ``session.create`` with the
same ``session_id`` and ``extensions.resume_from``; it gets ``session.created``
(``extensions.resumed``), every frame after that event, then the rest of a
response that was still running: a turn outlives the connection that started
it (the handler returns once its turns ended) and keeps logging, and the
resumed connection follows the log until it ends.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, Final

import anyio
import attrs
import orjson

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.capabilities import session_view
from uamp_proto.connection import NEED_DATA, ConnectionConfig, ServerConnection, SessionContext
from uamp_proto.errors import LocalProtocolError, RemoteProtocolError
from uamp_proto.payment import PaymentRequiredError
from uamp_proto.principal import Principal
from uamp_proto.responder import Responder, TurnRequest
from uamp_proto.resume import RESUMED, ResumeError, resume_from

from ..app import Host
from ..bounded import OwnedLRU
from ..http import HTTPError
from ..turns import Turn
from ..websocket import Closed, WebSocket

__all__ = ["MAX_SESSIONS", "RETAIN", "Connection", "Record", "SessionLog", "event_id", "mount"]

#: Frames kept per session for a resume; older ones are dropped.
RETAIN: Final = 2048
#: Sessions whose logs are kept (all principals); the least recently used go first.
MAX_SESSIONS: Final = 4096
#: Session logs one principal keeps; its own least recently used go first.
MAX_SESSIONS_PER_PRINCIPAL: Final = 256
SUBPROTOCOLS: Final = ("uamp", "uamp.v1")
_TERMINAL = (ev.ResponseDone, ev.ResponseCancelled, ev.ResponseErrorEvent)


@attrs.define
class Record:
    """One session's log: its frames, conversation and whether a response runs."""

    agent: str
    frames: deque[tuple[str, bytes]] = attrs.field(factory=lambda: deque(maxlen=RETAIN))
    dropped: bool = False
    history: list[ty.Message] = attrs.field(factory=list)
    config: ty.SessionConfig | None = None
    running: int = 0
    changed: anyio.Event = attrs.field(factory=anyio.Event)
    #: Frames ever appended: the position just after the newest.
    total: int = 0

    def append(self, event_id: str, frame: bytes) -> None:
        if len(self.frames) == self.frames.maxlen:
            self.dropped = True
        self.frames.append((event_id, frame))
        self.total += 1
        self.wake()

    def since(self, position: int) -> list[tuple[str, bytes]]:
        """``(event_id, frame)`` after ``position`` (a :attr:`total` seen earlier) still held."""
        skip = max(0, position - (self.total - len(self.frames)))
        return list(self.frames)[skip:]

    def position_of(self, event_id: str) -> int:
        """The position just after the frame ``event_id``.

        Raises:
            ResumeError: ``beyond_retention`` or ``unknown_event``.
        """
        first = self.total - len(self.frames)
        for i, (eid, _) in enumerate(self.frames):
            if eid == event_id:
                return first + i + 1
        if self.dropped:
            raise ResumeError(f"the log no longer holds the events after {event_id!r}")
        raise ResumeError(f"no event {event_id!r} in this session", code="unknown_event")

    def wake(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()

    def after(self, event_id: str) -> list[bytes]:
        """The frames after ``event_id``.

        Raises:
            ResumeError: ``beyond_retention`` or ``unknown_event``.
        """
        return [f for _, f in self.since(self.position_of(event_id))]


class SessionLog:
    """Every session's :class:`Record`, by owner and session id; bounded (:mod:`..bounded`)."""

    def __init__(self, max_sessions: int = MAX_SESSIONS) -> None:
        per_owner = min(MAX_SESSIONS_PER_PRINCIPAL, max_sessions)
        self._records: OwnedLRU[Record] = OwnedLRU(per_owner=per_owner, total=max_sessions)

    def open(self, owner: Principal, sid: str, agent: str) -> Record:
        record = Record(agent)
        self._records.put(owner, sid, record)
        return record

    def find(self, owner: Principal, sid: str) -> Record | None:
        """The caller's session ``sid`` (another principal's: ``None``, as a missing one)."""
        return self._records.get(owner, sid)


def event_id(frame: bytes) -> str:
    """The ``event_id`` of an encoded event (``""``: none)."""
    value = orjson.loads(frame).get("event_id")
    return value if isinstance(value, str) else ""


def _error(sid: str | None, code: str, message: str) -> ev.SessionErrorEvent:
    return ev.SessionErrorEvent(session_id=sid, error=ty.ErrorInfo(code=code, message=message))


class Connection:
    """The state of one UAMP WebSocket connection."""

    def __init__(
        self,
        host: Host,
        log: SessionLog,
        ws: WebSocket | None,
        fixed: Responder | None,
        principal: Principal,
    ) -> None:
        self.host = host
        self.log = log
        self.ws = ws
        self.principal = principal
        self.fixed = fixed
        self.conn = ServerConnection(ConnectionConfig(max_sessions=host.config.max_sessions))
        self.agents: dict[str, Responder] = {}
        self.records: dict[str, Record] = {}
        self.turns: dict[str, Turn] = {}
        self.lock = anyio.Lock()
        self.open = True
        self.group: anyio.abc.TaskGroup | None = None

    def spawn(self, func: Callable[..., Coroutine[Any, Any, Any]], *args: object) -> None:
        """Run ``func(*args)`` beside the connection (a turn, a follower)."""
        assert self.group is not None
        self.group.start_soon(func, *args)

    async def write(self, frames: list[bytes]) -> None:
        """Send ``frames`` while the socket is open (a closed one drops them)."""
        if not self.open or not frames:
            return
        assert self.ws is not None
        async with self.lock:
            try:
                for frame in frames:
                    await self.ws.send(frame.decode())
            except (Closed, OSError):
                self.open = False

    async def owe(self, event: ev.Event, sid: str | None = None) -> None:
        """Send ``event`` through the core (logged when its session keeps a log)."""
        try:
            frame = self.conn.send(event)
        except LocalProtocolError:
            return
        await self.deliver([frame], sid)

    async def deliver(self, frames: list[bytes], sid: str | None) -> None:
        """Log ``frames`` when session ``sid`` keeps a log, then send them."""
        record = self.records.get(sid) if sid is not None else None
        if record is not None:
            for frame in frames:
                record.append(event_id(frame), frame)
        await self.write(frames)

    async def refuse(self, sid: str | None, code: str, message: str) -> None:
        """Turn down a ``session.create`` (a ``session.error``)."""
        await self.owe(_error(sid, code, message))

    async def run(self, group: anyio.abc.TaskGroup) -> None:
        self.group = group
        assert self.ws is not None
        while True:
            try:
                data = await self.ws.receive()
            except Closed:
                self.open = False
                return
            self.conn.receive(data)
            while True:
                try:
                    event = self.conn.next_event()
                except RemoteProtocolError:
                    await self.write(self.conn.data_to_send())
                    continue
                if event is NEED_DATA:
                    break
                await self.write(self.conn.data_to_send())
                await self.handle(event)

    async def handle(self, event: Any) -> None:
        if isinstance(event, ev.SessionCreate):
            await self.create(event)
        elif isinstance(event, ev.ResponseCreate):
            sid = event.session_id
            assert sid is not None
            self.start(sid)
        elif isinstance(event, ev.ResponseCancel):
            turn = self.turns.get(event.session_id or "")
            if turn is not None:
                turn.cancel()
        elif isinstance(event, ev.ToolResult):
            sid = event.session_id or ""
            ctx = self.conn.sessions.get(sid)
            tracker = ctx.response if ctx is not None else None
            if tracker is not None and not tracker.pending_tool_calls and sid not in self.turns:
                self.start(sid, created=False)

    async def create(self, event: ev.SessionCreate) -> None:
        sid = event.session_id
        assert sid is not None
        try:
            after = resume_from(event.unknown.get("extensions"))
            agent = self.fixed or self.host.resolve_agent({}, model=event.agent)
            if event.agent is not None and event.agent != agent.name:
                raise HTTPError(404, f"No agent named {event.agent!r}.", code="agent_not_found")
        except ResumeError as exc:
            await self.refuse(sid, exc.code, exc.message)
            return
        except HTTPError as exc:
            await self.refuse(sid, exc.code or "agent_not_found", exc.message)
            return
        self.agents[sid] = agent
        principal = self.principal
        if after is None:
            self.records[sid] = self.log.open(principal, sid, agent.name)
            await self.deliver([self.conn.accept(sid, agent=agent.name)], sid)
            # Section 9.1: session.created, then the capabilities view.
            ctx = self.conn.sessions[sid]
            view = session_view(agent.capabilities(), ctx.client_capabilities)
            await self.owe(ev.CapabilitiesEvent(session_id=sid, capabilities=view), sid)
            return
        record = self.log.find(principal, sid)
        try:
            if record is None or record.agent != agent.name:
                raise ResumeError(f"no session {sid!r} to resume", code="unknown_session")
            missed = record.after(after)
        except ResumeError as exc:
            await self.refuse(sid, exc.code, exc.message)
            return
        ctx = self.conn.sessions[sid]
        ctx.history = list(record.history)
        if record.config is not None:
            ctx.config = record.config
        self.records[sid] = record
        frame = self.conn.accept(sid, agent=agent.name, extensions={RESUMED: True})
        await self.write([frame, *missed])
        if record.running:
            self.spawn(self.follow, ctx, record, record.total)

    async def follow(self, ctx: SessionContext, record: Record, seen: int) -> None:
        """Send what a response running elsewhere logs, until it ends; then take its history."""
        while True:
            frames = [f for _, f in record.since(seen)]
            seen = record.total
            ended = not record.running
            if ended:  # before the client sees the end and asks again
                ctx.history = list(record.history)
            await self.write(frames)
            if ended:
                return
            await record.changed.wait()

    def start(self, sid: str, *, created: bool = True) -> None:
        ctx = self.conn.sessions[sid]
        tracker = ctx.response
        agent = self.agents.get(sid)
        if tracker is None or agent is None:
            return
        config = ctx.config
        request = TurnRequest(
            agent=agent.name,
            session_id=sid,
            response_id=tracker.response_id,
            messages=ctx.conversation(),
            instructions=config.instructions if config else None,
            tools=list(config.tools or []) if config else [],
            token=ctx.token,
            payment_token=ctx.payment_token,
            principal=self.principal,
            client_capabilities=ctx.client_capabilities,
        )
        self.spawn(self.respond, ctx, agent, request, created)

    async def respond(
        self, ctx: SessionContext, agent: Responder, request: TurnRequest, created: bool
    ) -> None:
        sid = ctx.id
        record = self.records.get(sid)
        core = ctx.response
        assert core is not None

        ended = False

        async def sink(event: ev.Event) -> None:
            nonlocal ended
            if isinstance(event, ev.ResponseDone):
                event = core.done_event(session_id=sid)
            if record is None or not isinstance(event, _TERMINAL):
                await self.owe(event, sid)
                return
            # The last event: the log says the response ended, with the
            # conversation it leaves, before anyone can read that it did.
            try:
                frame = self.conn.send(event)
            except LocalProtocolError:
                return
            record.history, record.config = list(ctx.history), ctx.config
            record.running -= 1
            ended = True
            await self.deliver([frame], sid)

        try:
            charge = await self.host.open_charge(
                agent, ctx.payment_token, request.response_id, request.principal
            )
        except PaymentRequiredError as unpaid:
            await self.owe(core.error_event(unpaid.code, str(unpaid), session_id=sid), sid)
            return
        turn = Turn(agent, request, sink, charge=charge, created=created)
        self.turns[sid] = turn
        if record is not None:
            record.running += 1
        try:
            await turn.run()
        finally:
            self.turns.pop(sid, None)
            if record is not None and not ended:
                record.running -= 1
                record.wake()


def mount(host: Host) -> None:
    """Serve UAMP over WebSocket at ``.../uamp`` and ``/ws``."""
    log = SessionLog()

    async def serve(ws: WebSocket, fixed: Responder | None) -> None:
        offered = [
            p.strip() for p in ws.headers.get("sec-websocket-protocol", "").split(",") if p.strip()
        ]
        await ws.accept(next((p for p in SUBPROTOCOLS if p in offered), None))
        connection = Connection(host, log, ws, fixed, ws.principal)
        async with anyio.create_task_group() as group:
            await connection.run(group)
            # The client left: its running turns go on into their logs (a
            # resumed connection follows them); the handler returns after.
        await ws.close()

    async def per_agent(ws: WebSocket) -> None:
        try:
            agent = host.resolve_agent(ws.path_params)
        except HTTPError:
            await ws.close(1008)
            return
        await serve(ws, agent if "agent" in ws.path_params or len(host.agents) == 1 else None)

    async def any_agent(ws: WebSocket) -> None:
        await serve(ws, None)

    host.websocket("/uamp", per_agent)
    host.websocket("/ws", any_agent)
