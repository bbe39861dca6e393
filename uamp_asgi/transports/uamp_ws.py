"""Native UAMP over WebSocket on ASGI, with sessions resumable from the app's event log.

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

Resume (docs/resume.md): every frame a session sends goes into the app's
event log (``Config.event_log``: :mod:`uamp_stores.event_log`, in memory, in
a SQLite file or in Redis -- the store ``uamp serve --store`` opens), keyed
by the principal that opened the session, beside a
:class:`~uamp_stores.event_log.SessionRecord` (agent, configuration,
conversation, the response in flight and the process running it). A client
that lost its connection sends ``session.create`` with the same
``session_id`` and ``extensions.resume_from``; it gets ``session.created``
(``extensions.resumed``), every frame after that event, then the rest of a
response still running: a turn outlives the connection that started it and
keeps logging, and the resumed connection follows the log -- in this process
or, on a shared store, another -- until the response ends. A response whose
process is gone ends ``response.error`` ``interrupted`` with its partial
output (:func:`uamp_stores.orphans.interrupt_lost`). Then this connection
takes the log over and writes it from there on. Another principal's session
id is answered ``unknown_session``, like one that never existed. A fresh
``session.create`` naming a session whose log this process writes (the
caller's, live on another connection or over HTTP+SSE) is refused
``duplicate_session``: it would begin that log afresh under its writer.

Payment (UAMP 3.3 and 7.2; spec 004), as ``uamp serve``: no agent runs
unpaid; a response's price is locked before it runs, a response the token
does not pay for is held until one is accepted, and the lock is settled
once, from what the response used. That side of a connection is
:class:`~uamp_asgi.transports.uamp_ws_payment.PaymentPart` (its module
holds the theory).

A session's own requests, as ``uamp serve``: ``session.update`` is answered
``session.updated`` (a new token must name the connection's principal, else
``unauthorized``), ``capabilities.query`` with the view
:func:`uamp_proto.capabilities.queried` picks, and on a session with a delta
window (docs/flow.md) a delta past the window waits in :meth:`Connection.owe`
for the client's ack (windows are lifted when the client leaves: the turn
goes on into the log). Everything kept per session goes with its
``session.end`` (:meth:`Connection.forget`).

Voice calls (UAMP 5.16, 7.3; docs/voice.md), as ``uamp serve``:
``voice.invite`` places a call to the session's agent -- its ``take_call``
hook answers in a task of its own (the reader goes on), else its
capabilities at once -- and ``voice.accept`` or ``voice.decline`` goes out
(:mod:`uamp_proto.calls`). In a call, an ``input.audio`` marked
``is_final`` or a pause the session's ``server_vad`` heard starts a
response asking for audio and text, as if the client had sent
``response.create``. ``voice.end``, ``session.end`` or the connection closing
ends the call, and the agent's ``call_ended`` is told how long it ran.
Voice settings the server or agent cannot honour refuse ``session.create``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Final

import anyio
import attrs
import orjson

from uamp_proto import events as ev
from uamp_proto import flow, voice
from uamp_proto import types as ty
from uamp_proto.audio import TurnDetector
from uamp_proto.calls import (
    AnsweredCall,
    audio_turn,
    heard_pause,
    offer_of,
    reply_of,
    settings_refusal,
    turn_detector,
)
from uamp_proto.capabilities import queried, session_view
from uamp_proto.codec import from_dict, unstructure
from uamp_proto.connection import (
    MAX_SESSION_HISTORY_BYTES,
    NEED_DATA,
    ConnectionConfig,
    ServerConnection,
    SessionContext,
)
from uamp_proto.errors import (
    FlowControlError,
    LocalProtocolError,
    RemoteProtocolError,
    UampError,
)
from uamp_proto.payment import (
    Charge,
    PaymentState,
)
from uamp_proto.principal import Principal
from uamp_proto.responder import Responder, TurnRequest
from uamp_proto.response import ResponseTracker
from uamp_proto.resume import (
    LAST_REQUEST,
    RESUMED,
    LogEntry,
    ResumeError,
    ResumeStream,
    resume_from,
    start_after,
)
from uamp_proto.session_request import recoded, spoken_format, turn_request
from uamp_proto.topup import PaymentStops
from uamp_proto.voice import CallAnswer, CallOffer
from uamp_stores.event_log import EventLog, HistoryJSON, LogKey, SessionRecord
from uamp_stores.health import STORE_UNAVAILABLE, StoreUnavailable
from uamp_stores.orphans import interrupt_lost, orphaned

from ..app import Host
from ..http import HTTPError
from ..turns import Turn
from ..websocket import Closed, WebSocket
from .uamp_ws_payment import PaymentPart, _Unpaid

__all__ = ["Connection", "event_id", "mount"]

SUBPROTOCOLS: Final = ("uamp", "uamp.v1")
_TERMINAL = (ev.ResponseDone, ev.ResponseCancelled, ev.ResponseErrorEvent)
#: How long a follower waits for a writer's next entries before looking again (s).
_FOLLOW_WAIT: Final = 0.5

log = logging.getLogger("uamp_asgi.uamp_ws")


def event_id(frame: bytes) -> str:
    """The ``event_id`` of an encoded event (``""``: none)."""
    value = orjson.loads(frame).get("event_id")
    return value if isinstance(value, str) else ""


def _error(
    sid: str | None, code: str, message: str, field: str | None = None
) -> ev.SessionErrorEvent:
    """``session.error``; ``field`` names the offending field in ``details.field`` (6.3)."""
    details = {"field": field} if field else None
    return ev.SessionErrorEvent(
        session_id=sid, error=ty.ErrorInfo(code=code, message=message, details=details)
    )


def _unknown(sid: str) -> ResumeError:
    return ResumeError(
        f"no session {sid!r} to resume: it never existed or was forgotten",
        code="unknown_session",
    )


class Connection(PaymentPart):
    """The state of one UAMP WebSocket connection, and the sessions it logs."""

    #: What a call's offer and a turn's ``metadata["transport"]`` name.
    transport = "uamp-websocket"

    def __init__(
        self,
        host: Host,
        ws: WebSocket | None,
        fixed: Responder | None,
        principal: Principal,
    ) -> None:
        self.host = host
        self.log: EventLog = host.event_log
        self.ws = ws
        self.principal = principal
        self.fixed = fixed
        budget = host.config.max_history_bytes_per_principal
        self.conn = ServerConnection(
            ConnectionConfig(
                max_sessions=host.config.max_sessions,
                # One session alone never keeps more than its principal's budget.
                max_history_bytes=min(MAX_SESSION_HISTORY_BYTES, budget),
                on_history=self.history_kept,
                max_response_output_bytes=host.turns.max_output_bytes,
            )
        )
        self.agents: dict[str, Responder] = {}
        #: The sessions whose log this connection writes: key, record, owner token.
        self.keys: dict[str, LogKey] = {}
        self.records: dict[str, SessionRecord] = {}
        self._owners: dict[str, Callable[[], None]] = {}
        self._handlers: dict[str, Any] = {}
        self._history: dict[str, HistoryJSON] = {}
        #: Resumed sessions whose log another writer still writes (set once taken on).
        self.following: dict[str, anyio.Event] = {}
        self.turns: dict[str, Turn] = {}
        #: Per session: set when a presented token was judged (a held response looks again).
        self.paid: dict[str, anyio.Event] = {}
        #: Sessions whose token is being judged, and those with another one waiting.
        self.settling: set[str] = set()
        self.settle_again: set[str] = set()
        #: The waits of responses held for payment (a cancel ends one).
        self.holds: dict[str, anyio.CancelScope] = {}
        #: The price locked for each session's response in flight, with the
        #: core's tracker of that response: held across its rounds.
        self.charges: dict[str, tuple[Charge, ResponseTracker]] = {}
        #: Per session: the ``response.create`` of its response in flight, and how
        #: often that response stopped for a payment its agent raised for.
        self.creates: dict[str, ev.ResponseCreate] = {}
        self.stops: dict[str, tuple[ResponseTracker, PaymentStops]] = {}
        #: Per session: the call its agent took, and its ``server_vad`` detector.
        self.calls: dict[str, AnsweredCall] = {}
        self.detectors: dict[str, TurnDetector] = {}
        #: Per session: its token as last accepted (a refused update's is not kept).
        self.tokens: dict[str, str | None] = {}
        #: Per session: set by the client's next ack (a delta waits for window room).
        self.acked: dict[str, anyio.Event] = {}
        self.lock = anyio.Lock()
        self.open = True
        self.group: anyio.abc.TaskGroup | None = None

    def spawn(self, func: Callable[..., Coroutine[Any, Any, Any]], *args: object) -> None:
        """Run ``func(*args)`` beside the connection (a turn, a follower)."""
        assert self.group is not None
        self.group.start_soon(func, *args)

    async def write(self, frames: list[bytes]) -> None:
        """Send ``frames`` while the socket is open (a closed one drops them)."""
        if not self.open:
            # A turn that goes on into its log after the client left still
            # yields here (and a dropped peer's turn meets its cancellation):
            # an agent that never waits would otherwise hold the event loop.
            await anyio.lowlevel.checkpoint()
            return
        if not frames:
            return
        assert self.ws is not None
        async with self.lock:
            try:
                for frame in frames:
                    await self.ws.send(frame.decode())
            except (Closed, OSError):
                self.open = False

    def log_frames(self, frames: list[bytes], sid: str | None) -> None:
        """Append ``frames`` to session ``sid`` 's log when this connection writes it."""
        key = self.keys.get(sid) if sid is not None else None
        if key is None or not self.log.writing(key):
            return
        for frame in frames:
            self.log.append(key, frame, event_id(frame))

    async def replay(self, entries: Sequence[LogEntry]) -> None:
        """Send what a resumed session's log holds for its client."""
        await self.write([entry.data for entry in entries])

    async def owe(self, event: ev.Event, sid: str | None = None) -> None:
        """Send ``event`` through the core (logged when its session keeps a log).

        On a session with a delta window (docs/flow.md) a delta past it waits
        for the client's ack.
        """
        while True:
            try:
                frame = self.conn.send(event)
                break
            except FlowControlError:
                await self.acked.setdefault(sid or event.session_id or "", anyio.Event()).wait()
            except LocalProtocolError:
                return
        await self.deliver([frame], sid)

    def wake_acked(self, sid: str) -> None:
        """An ack (or the session's end) for ``sid``: a delta waiting for room looks again."""
        waiting = self.acked.pop(sid, None)
        if waiting is not None:
            waiting.set()

    def lift_windows(self) -> None:
        """The client left: no ack comes back here; running responses go on into the log."""
        for sid, ctx in self.conn.sessions.items():
            if ctx.send_window is not None:
                ctx.send_window.lift()
            self.wake_acked(sid)

    async def deliver(self, frames: list[bytes], sid: str | None) -> None:
        """Log ``frames`` when session ``sid`` keeps a log, then send them."""
        self.log_frames(frames, sid)
        await self.write(frames)

    async def refuse(
        self, sid: str | None, code: str, message: str, field: str | None = None
    ) -> None:
        """Turn down a ``session.create`` (a ``session.error``)."""
        await self.owe(_error(sid, code, message, field))

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

    def session_of(self, event: Any) -> str:
        """The session ``event`` is for: the one it names, or the only one (single-session
        mode, UAMP section 10); ``""`` when there is none."""
        if event.session_id is not None:
            return str(event.session_id)
        try:
            return str(self.conn.session(None).id)
        except KeyError:
            return ""

    async def handle(self, event: Any) -> None:
        if isinstance(event, ev.SessionCreate):
            await self.create(event)
        elif isinstance(event, ev.ResponseCreate):
            sid = self.session_of(event)
            if sid:
                self.creates[sid] = event
                self.start(sid, request=event.event_id)
        elif isinstance(event, ev.ResponseCancel):
            await self.cancel(self.session_of(event))
        elif isinstance(event, ev.PaymentSubmit):
            await self.ask_settle(self.session_of(event))
        elif isinstance(event, ev.InputText) and event.payment_token:
            sid = self.session_of(event)
            ctx = self.conn.sessions.get(sid)
            if ctx is not None and ctx.payment.state is PaymentState.SUBMITTED:
                # The core took the token as the answer to an open payment.required.
                await self.ask_settle(sid)
        elif isinstance(event, ev.ToolResult):
            sid = self.session_of(event)
            ctx = self.conn.sessions.get(sid)
            tracker = ctx.response if ctx is not None else None
            if tracker is not None and not tracker.pending_tool_calls and sid not in self.turns:
                self.start(sid, created=False)
        elif isinstance(event, ev.Progress) and flow.is_ack(event):
            self.wake_acked(self.session_of(event))
        elif isinstance(event, ev.SessionUpdate):
            await self.update(event)
        elif isinstance(event, ev.CapabilitiesQuery):
            await self.query(event)
        elif isinstance(event, (ev.VoiceInvite, ev.VoiceEnd, ev.InputAudio)):
            await self.voice(self.session_of(event), event)
        elif isinstance(event, ev.SessionEnd):
            sid = self.session_of(event)
            self.call_over(sid, "closed")
            self.end_hold(sid)
            if sid not in self.turns:  # a running round settles it as it ends
                await self.settle_charge(sid)
            self.put_record(sid, ended=True)
            self.release(sid)
            self.forget(sid)
            self.wake_acked(sid)

    def forget(self, sid: str) -> None:
        """What this connection kept about an ended session (a client that opens and ends
        sessions in a loop grows nothing)."""
        for kept in (self.agents, self.creates, self.stops, self.detectors, self.paid, self.tokens):
            kept.pop(sid, None)
        self.host.uamp_histories.ended(self, sid)

    def history_kept(self, sid: str, size: int) -> None:
        """The core weighed ``sid`` 's conversation: it counts against the principal's budget
        (``Config.max_history_bytes_per_principal``), over all its connections."""
        self.host.uamp_histories.kept(self.principal.key, self, sid, size)

    def forget_history(self, sid: str) -> None:
        """Empty ``sid`` 's kept conversation, and its copy in the event log's record
        (the principal's budget trimmed it: its next turn starts afresh)."""
        self.conn.forget_history(sid)
        self.put_record(sid)

    async def update(self, event: ev.SessionUpdate) -> None:
        """``session.update``: the core took the new settings; ``session.updated`` once the
        token (if any) names the session's principal (spec 000 section 10.3).

        Without ``session_id`` and with several sessions it is the connection's
        (UAMP 5.2): each session is answered.
        """
        sid = self.session_of(event)
        targets = [sid] if sid else list(self.conn.sessions)
        if not targets:
            await self.owe(_error(None, "no_session", "no session is open to update"))
            return
        auth = self.host.config.authenticator
        refused = None
        if auth is not None and event.token is not None:
            try:
                principal = await auth.authenticate(event.token)
                if principal.key != self.principal.key:
                    refused = "the token names another principal than the session's"
                else:
                    self.principal = principal  # the same caller, a fresher credential
            except UampError as exc:
                refused = str(exc) or "the token was refused"
        for target in targets:
            ctx = self.conn.sessions.get(target)
            if refused is not None:
                if ctx is not None:
                    ctx.token = self.tokens.get(target)  # the refused token is not the session's
                await self.owe(_error(target, "unauthorized", refused, "token"), target)
            else:
                if event.token is not None:
                    self.tokens[target] = event.token
                await self.owe(ev.SessionUpdated(session_id=target), target)
            if ctx is not None and ctx.payment.state is PaymentState.SUBMITTED:
                # The core took the new payment_token as the answer to an open payment.required.
                await self.ask_settle(target)

    async def query(self, event: ev.CapabilitiesQuery) -> None:
        """``capabilities.query`` (UAMP 5.4, 9.1): the session's view, or a hosted agent's."""
        sid = self.session_of(event) or None
        agent = self.agents.get(sid) if sid is not None else None
        caps = queried(agent, event.model, self.hosted)
        if caps is None:
            message = f"no model or agent {event.model!r} is known here"
            code = "unsupported" if agent is not None else "agent_not_found"
            await self.owe(_error(sid, code, message, "model"), sid)
            return
        ctx = self.conn.sessions.get(sid) if sid is not None else None
        view = session_view(caps, ctx.client_capabilities if ctx is not None else None)
        await self.owe(ev.CapabilitiesEvent(session_id=sid, capabilities=view), sid)

    def hosted(self, name: str | None) -> Responder | None:
        """The agent ``name`` addresses on this endpoint (``None``: its default one)."""
        fixed = self.fixed
        if fixed is not None:
            return fixed if name in (None, fixed.name) else None
        if name is None:
            return next(iter(self.host.agents.values())) if len(self.host.agents) == 1 else None
        return self.host.agents.get(name)

    async def cancel(self, sid: str) -> None:
        """``response.cancel``: the turn running here, or the one a resumed session follows."""
        turn = self.turns.get(sid)
        if turn is not None:
            turn.cancel()
            return
        if sid in self.holds:
            self.end_hold(sid)
            return
        if sid not in self.following:
            return
        key = (self.principal.key, sid)
        try:
            record = await self.log.load(key)
            if record.running is not None:
                message = {"op": "cancel", "response_id": record.running}
                await self.log.ask(record.node, key, message)
        except (ResumeError, StoreUnavailable):
            return

    # --- voice calls (UAMP 5.16, 7.3; docs/voice.md) --------------------------------

    async def voice(self, sid: str, event: ev.Event) -> None:
        """A call's ``voice.invite``, ``voice.end`` or audio from the client."""
        agent = self.agents.get(sid)
        if agent is None or sid not in self.conn.sessions:
            return
        if isinstance(event, ev.VoiceInvite):
            offer = offer_of(event, sid, transport=self.transport, principal=self.principal)
            if voice.has_call_hook(agent):
                self.spawn(self.ask_agent, sid, agent, offer)  # the reader goes on
            else:
                await self.answer_call(
                    sid, offer, voice.default_answer(agent.name, agent.capabilities())
                )
        elif isinstance(event, ev.VoiceEnd):
            self.call_over(sid, event.reason or "ended")
        elif isinstance(event, ev.InputAudio) and sid in self.calls:
            detector = self.detectors.get(sid)
            if event.is_final or (
                detector is not None
                and heard_pause(detector, event, self.conn.sessions[sid].config)
            ):
                self.audio_turn(sid)

    async def ask_agent(self, sid: str, agent: Responder, offer: CallOffer) -> None:
        answer = await voice.answer_call(agent, offer, move_on_after=anyio.move_on_after, log=log)
        if self.agents.get(sid) is agent:
            await self.answer_call(sid, offer, answer)

    async def answer_call(self, sid: str, offer: CallOffer, answer: CallAnswer) -> None:
        """Send the agent's answer; an accepted call is the session's until it ends."""
        try:
            frame = self.conn.send(reply_of(offer, answer))
        except LocalProtocolError as exc:  # the caller hung up meanwhile
            log.info("session %s: voice.invite not answered: %s", sid, exc)
            return
        if answer.accept:
            call = self.calls[sid] = AnsweredCall()
            call.accepted(offer.call_id, anyio.current_time())
        await self.deliver([frame], sid)

    def call_over(self, sid: str, reason: str) -> None:
        """The session's call ended: its agent's ``call_ended`` is told, in a task."""
        call, agent = self.calls.pop(sid, None), self.agents.get(sid)
        ended = call.over(sid, anyio.current_time(), reason) if call is not None else None
        if ended is not None and agent is not None:
            self.spawn(_tell_ended, agent, ended)

    def end_calls(self) -> None:
        """The connection closed: every call on it is over."""
        for sid in list(self.calls):
            self.call_over(sid, "closed")

    def audio_turn(self, sid: str) -> None:
        """The caller finished a turn in the call: the agent answers it, with audio."""
        ctx = self.conn.sessions.get(sid)
        if ctx is not None and ctx.response is None:
            # Queued behind the event being handled: the reader's loop takes it next.
            self.conn.receive(audio_turn(sid))

    # --- the session's log -----------------------------------------------------

    def begin_log(self, sid: str, agent: Responder) -> None:
        """Start the log of a new session: every frame it sends from now on is logged."""
        key = (self.principal.key, sid)
        record = SessionRecord(agent=agent.name, node=self.log.node)
        owner = functools.partial(self.taken_over, sid)
        self.log.begin(key, record.copy(), owner)
        self.hold(sid, key, record, owner)

    def hold(self, sid: str, key: LogKey, record: SessionRecord, owner: Callable[[], None]) -> None:
        """This connection writes ``sid`` 's log and answers what others ask about it."""
        self.keys[sid], self.records[sid], self._owners[sid] = key, record, owner
        handler = functools.partial(self.on_message, sid)
        self._handlers[sid] = handler
        self.log.register(key, handler)
        self.log.ensure_running(self.host.background)

    def put_record(self, sid: str, **changes: object) -> None:
        """Queue ``sid`` 's record with ``changes`` and its conversation so far."""
        key, record = self.keys.get(sid), self.records.get(sid)
        if key is None or record is None:
            return
        ctx = self.conn.sessions.get(sid)
        if ctx is not None:
            converted = self._history.setdefault(sid, HistoryJSON())
            record.history = converted.of(ctx.history, ctx.history_weights())
            record.config = unstructure(ctx.config) if ctx.config is not None else None
        for name, value in changes.items():
            setattr(record, name, value)
        self.log.put_record(key, record.copy())

    def taken_over(self, sid: str) -> None:
        """Another connection of this process resumed ``sid``: this one's copy ends.

        It logs the session no more and, on an open WebSocket, ends it with
        ``session.end`` ``resumed`` (as ``uamp serve`` does): left open, the
        two copies would both take turns and both count against the
        principal's history budget.
        """
        self.stop_logging(sid)
        open_here = self.ws is not None and self.open and self.group is not None
        if open_here and sid in self.conn.sessions:
            self.spawn(self.end_resumed, sid)

    async def end_resumed(self, sid: str) -> None:
        """End this connection's copy of ``sid``, resumed on another connection."""
        turn = self.turns.get(sid)
        if turn is not None:
            turn.cancel()
        try:
            frame: bytes | None = self.conn.send(ev.SessionEnd(session_id=sid, reason="resumed"))
        except LocalProtocolError:
            frame = None  # ended here meanwhile
        self.call_over(sid, "closed")
        self.end_hold(sid)
        self.forget(sid)
        self.wake_acked(sid)
        if frame is not None:
            await self.write([frame])

    def stop_logging(self, sid: str) -> None:
        """Stop writing ``sid`` 's log here, and answering what others ask about it."""
        key = self.keys.pop(sid, None)
        self.records.pop(sid, None)
        self._owners.pop(sid, None)
        self._history.pop(sid, None)
        handler = self._handlers.pop(sid, None)
        if key is not None and handler is not None:
            self.log.unregister(key, handler)

    def release(self, sid: str) -> None:
        """Stop writing ``sid`` 's log (it stays, to be resumed)."""
        key, owner = self.keys.get(sid), self._owners.get(sid)
        self.stop_logging(sid)
        if key is not None:
            self.log.release(key, owner)

    def release_all(self) -> None:
        """The connection is done: every log it writes is let go (and stays), and what its
        sessions kept leaves their principal's budget."""
        for sid in list(self.keys):
            self.release(sid)
        self.host.uamp_histories.closed(self)

    async def on_message(self, sid: str, message: dict[str, Any]) -> dict[str, Any]:
        """A message about ``sid`` from another connection or process (``EventLog.ask``)."""
        if message.get("op") == "cancel":
            turn = self.turns.get(sid)
            if turn is not None:
                turn.cancel()
            return {"cancelled": turn is not None}
        return {"error": "unsupported"}

    # --- sessions ------------------------------------------------------------------

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
        unheard = settings_refusal(event.session, agent)
        if unheard is not None:
            # UAMP 8.1: a voice setting is honoured or refused, never echoed as if it were.
            await self.refuse(sid, "unsupported", unheard[1], f"session.{unheard[0]}")
            return
        if self.log.health.unavailable:
            message = "the session store is unavailable; try again shortly"
            await self.refuse(sid, STORE_UNAVAILABLE, message)
            return
        if after is None and self.log.writing((self.principal.key, sid)):
            # The caller's session of that id writes this log (live on another
            # connection, or over HTTP+SSE): a new one would begin it afresh and
            # take it over. Checked with no await before begin_log: of two
            # creates naming one id, one wins.
            taken = f"session {sid!r} already exists"
            await self.refuse(sid, "duplicate_session", taken, "session_id")
            return
        self.agents[sid] = agent
        self.tokens[sid] = event.token
        detector = turn_detector(event.session)
        if detector is not None:
            self.detectors[sid] = detector
        if after is None:
            self.begin_log(sid, agent)
            await self.deliver([self.conn.accept(sid, agent=agent.name)], sid)
            # Section 9.1: session.created, then the capabilities view.
            ctx = self.conn.sessions[sid]
            view = session_view(agent.capabilities(), ctx.client_capabilities)
            await self.owe(ev.CapabilitiesEvent(session_id=sid, capabilities=view), sid)
            return
        key = (self.principal.key, sid)
        try:
            record = await self.log.load(key, conversation=True)
            if record.agent != agent.name:
                raise _unknown(sid)  # another endpoint's session: as an unknown one
            start = start_after(await self.log.window(key), await self.log.find(key, after), after)
        except (ResumeError, StoreUnavailable) as exc:
            await self.refuse(sid, exc.code, exc.message)
            return
        await self.resumed(sid, agent, record, start)

    async def resumed(self, sid: str, agent: Responder, record: SessionRecord, start: int) -> None:
        """Answer a resume: created, then the log after ``start``, then take the session on."""
        ctx = self.conn.sessions[sid]
        # Its conversation comes once this connection takes the session on: until
        # then the connection that keeps it holds and counts it (counted twice, it
        # would trim the principal's sessions -- this one's record too).
        self.restore(ctx, record, conversation=False)
        last = {LAST_REQUEST: record.request} if record.request else {}
        frame = self.conn.accept(sid, agent=agent.name, extensions={RESUMED: True, **last})
        await self.write([frame])
        self.following[sid] = anyio.Event()
        self.spawn(self.take_on, sid, ResumeStream(start), record)

    def restore(
        self, ctx: SessionContext | None, record: SessionRecord, *, conversation: bool = True
    ) -> None:
        """Put the record's configuration and (``conversation``) conversation into the core's
        session: a conversation is bounded and counted in its principal's budget."""
        if ctx is None:
            return
        if record.config is not None:
            ctx.config = from_dict(ty.SessionConfig, record.config)
        if conversation:
            ctx.history = [from_dict(ty.Message, m) for m in record.history]
            self.conn.bound_history(ctx.id)  # its bounds, and its principal's budget

    async def take_on(self, sid: str, stream: ResumeStream, first: SessionRecord) -> None:
        """Follow ``sid`` 's log until nobody else runs a response, then write it from here
        (``first``: the record the resume was answered from)."""
        key = (self.principal.key, sid)
        log = self.log
        try:
            record = await self.follow(key, stream)
            if sid not in self.conn.sessions:
                return  # it ended meanwhile
            owner = functools.partial(self.taken_over, sid)
            log.take_over(key)
            await log.adopt(key, owner)
            # What the previous writer appended before it let go.
            await self.replay(stream.backfill(await log.read(key, stream.cursor)).send)
        except (ResumeError, StoreUnavailable) as exc:
            # The session stays here, unlogged, with the conversation it resumed.
            self.restore(self.conn.sessions.get(sid), first)
            await self.owe(_error(sid, exc.code, exc.message))
            return
        finally:
            self.following.pop(sid, anyio.Event()).set()
        record.node = log.node
        self.hold(sid, key, record, owner)
        self.restore(self.conn.sessions.get(sid), record)
        self.put_record(sid)

    async def follow(self, key: LogKey, stream: ResumeStream) -> SessionRecord:
        """Send the log from the stream's cursor on until no response runs elsewhere.

        A response whose process is gone is ended ``interrupted`` in the log
        first (by the first process that notices). Returns the session's
        record once nothing runs.
        """
        log = self.log
        while True:
            entries = await log.read(key, stream.cursor)
            if entries:
                await self.replay(stream.backfill(entries).send)
                continue
            record, lost = await orphaned(log, key)
            if record.running is None:
                return record
            if lost:
                # Nobody writes it any more: its process stopped mid-response.
                if not await interrupt_lost(log, key, record):
                    await anyio.sleep(0.1)  # another process ends it
                continue
            entries = await log.wait(key, stream.cursor, timeout=_FOLLOW_WAIT)
            await self.replay(stream.backfill(entries).send)

    # --- responses -----------------------------------------------------------------

    def start(self, sid: str, *, created: bool = True, request: str | None = None) -> None:
        """Run the session's response (``request``: its ``response.create`` 's event id)."""
        self.spawn(self.respond, sid, created, request)

    async def respond(self, sid: str, created: bool, asked: str | None = None) -> None:
        following = self.following.get(sid)
        if following is not None:
            await following.wait()  # the conversation is the log's once taken on
        ctx = self.conn.sessions.get(sid)
        core = ctx.response if ctx is not None else None
        agent = self.agents.get(sid)
        if ctx is None or core is None or agent is None:
            return
        held = self.charges.get(sid)
        if held is None or held[1] is not core:
            await self.settle_charge(sid)  # another response's: it is over
            try:
                charge = await self.preflight(sid, agent, core.response_id)
            except _Unpaid as unpaid:
                if sid in self.conn.sessions:
                    await self.owe(unpaid.event(core, sid), sid)
                return
            if charge is not None:
                self.charges[sid] = (charge, core)
        request = self.request_of(sid, agent)
        if request is None:
            return
        ended = False
        recode = spoken_format(ctx)

        async def sink(event: ev.Event) -> None:
            nonlocal ended
            if recode is not None and type(event) is ev.AudioDelta:
                event = recoded(event, recode)  # UAMP 8.2: the client asked for G.711
            if isinstance(event, ev.ResponseDone):
                event = core.done_event(session_id=sid)
            if not isinstance(event, _TERMINAL):
                await self.owe(event, sid)
                return
            # The last event: charged before it is told, and the record says
            # the response ended, with the conversation it leaves, before
            # anyone can read that it did.
            balance = await self.settle_charge(sid)
            try:
                frame = self.conn.send(event)
            except LocalProtocolError:
                return
            self.put_record(sid, running=None, input=[])
            ended = True
            await self.deliver([frame], sid)
            if balance is not None:  # what the token has left, after the response
                await self.owe(attrs.evolve(balance, session_id=sid), sid)

        # On the app's turn options: the core's own bound (the core's tracker
        # refuses an event as the turn's would).
        turn = self.host.turns.turn(self.paying(sid, agent, core), request, sink, created=created)
        self.turns[sid] = turn
        inputs = unstructure(core.input_messages)
        # The record names the turn acted on: a client that resumes elsewhere
        # sends again one it asked for into a dying connection (LAST_REQUEST).
        named = {"request": asked} if asked else {}
        self.put_record(sid, running=request.response_id, input=inputs, **named)
        returned = False
        try:
            await turn.run()
            returned = True
        finally:
            self.turns.pop(sid, None)
            ctx = self.conn.sessions.get(sid)
            if ctx is None or ctx.response is not core:
                # The response is over: its tracker (and the input it holds)
                # goes with it, whatever the budget emptied of the history.
                stops = self.stops.get(sid)
                if stops is not None and stops[0] is core:
                    del self.stops[sid]
            if not ended:
                self.put_record(sid, running=None, input=[])
                if ctx is None or ctx.response is not core:
                    await self.settle_charge(sid)  # the session went with it
                elif returned and not core.pending_tool_calls:
                    # (Not when cancelled: a dropped peer's round is not run again.)
                    # Its tool results came while this round was finishing.
                    self.start(sid, created=False)

    def request_of(self, sid: str, agent: Responder) -> TurnRequest | None:
        """The agent's request for the session's response in flight (``None``: none)."""
        ctx = self.conn.sessions.get(sid)
        if ctx is None:
            return None
        return turn_request(
            ctx,
            self.creates.get(sid),
            agent=agent.name,
            transport=self.transport,
            token=ctx.token,
            principal=self.principal,
        )


async def _tell_ended(agent: Responder, ended: voice.CallEnded) -> None:
    await voice.call_ended(agent, ended, log=log)


def mount(host: Host) -> None:
    """Serve UAMP over WebSocket at ``.../uamp`` and ``/ws``."""

    async def serve(ws: WebSocket, fixed: Responder | None) -> None:
        offered = [
            p.strip() for p in ws.headers.get("sec-websocket-protocol", "").split(",") if p.strip()
        ]
        await ws.accept(next((p for p in SUBPROTOCOLS if p in offered), None))
        connection = Connection(host, ws, fixed, ws.principal)
        try:
            async with anyio.create_task_group() as group:
                await connection.run(group)
                connection.end_holds()
                connection.end_calls()
                connection.lift_windows()
                # The client left: its running turns go on into their logs (a
                # resumed connection follows them); the handler returns after.
        finally:
            with anyio.CancelScope(shield=True):
                await connection.settle_all()
            connection.release_all()
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
