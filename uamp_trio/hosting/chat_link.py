"""One connection's side of the chat rooms: :class:`ChatLink`.

Each UAMP connection's :class:`~uamp_trio.hosting.sessions.SessionHost` has
one :class:`ChatLink`. It queues the chat work of each of the connection's
sessions in order (join, say, typing, read) and runs it in one task per
session, so a session's events reach its rooms in the order it sent them
while the host's reader never waits. It writes a room's events to a session
through the connection's own protocol core and outbox, never waiting; a
connection that lets more than ``SessionLimits.max_pushed`` of them pile up
unwritten is warned, then its chats end (``slow_consumer``; see "Backpressure"
in :mod:`uamp_trio.hosting.chats`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import trio

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.chat import Backlog, backlog_action
from uamp_proto.errors import LocalProtocolError, ProtocolError

from ..engines.supervise import OnError, supervised
from .chat_room import Room, _Member

if TYPE_CHECKING:
    from .chats import ChatHub
    from .sessions import SessionHost

__all__ = ["ChatLink"]

log = logging.getLogger("uamp_trio.chats")


class _ChatSession:
    """One session's chat state on its connection."""

    def __init__(self) -> None:
        self.queue: deque[tuple[str, Any]] = deque()
        self.wakeup = trio.lowlevel.ParkingLot()
        self.rooms: dict[str, tuple[Room, _Member]] = {}
        self.worker = False
        self.closed = False


class ChatLink:
    """The chat side of one connection's :class:`SessionHost`; see the module docstring."""

    def __init__(self, host: SessionHost, hub: ChatHub) -> None:
        self.host = host
        self.hub = hub
        self._sessions: dict[str, _ChatSession] = {}
        self._warned = False
        self._dropped = False

    def member_key(self, session_id: str) -> str:
        """The key of ``session_id`` in its rooms (unique across processes)."""
        return f"{self.hub.node}:{id(self)}:{session_id}"

    @property
    def active(self) -> bool:
        """Whether any session of the connection takes part in a chat."""
        return bool(self._sessions)

    # --- from the session host (never waits) ------------------------------------------

    def submit(self, session_id: str, kind: str, payload: Any) -> None:
        """Queue chat work of a session: ``join`` (settings), ``say``, ``typing``, ``read``."""
        state = self._sessions.get(session_id)
        if state is None:
            state = self._sessions[session_id] = _ChatSession()
        if len(state.queue) >= self.hub.limits.queued_chat_events:
            self.tell(
                session_id,
                "rate_limited",
                "too many chat events are waiting; slow down",
                {"limit": self.hub.limits.queued_chat_events, "event_type": kind},
            )
            return
        state.queue.append((kind, payload))
        if not state.worker:
            state.worker = True
            self.spawn(
                self._work, session_id, state, on_error=functools.partial(self._failed, session_id)
            )
        elif state.wakeup:
            state.wakeup.unpark_all()

    def end(self, session_id: str) -> None:
        """The session ended or its connection went away: it leaves every room."""
        state = self._sessions.pop(session_id, None)
        if state is None:
            return
        state.closed = True
        state.wakeup.unpark_all()
        for room, member in state.rooms.values():
            self.hub.leave(room, member)
        state.rooms.clear()

    def voice(self, session_id: str, event: ev.Event) -> bool:
        """A call event of a session in a room: ``True`` when it concerns a call between people.

        ``voice.invite`` with ``to`` (a participant's user id) rings that
        participant; the events of a call in progress, and its audio, go to
        the other side. Anything else is the session's call with its agent.
        """
        if isinstance(event, ev.VoiceInvite):
            to = event.unknown.get("to") if event.unknown else None
            if not isinstance(to, str):
                return False
            named = event.unknown.get("chat_id")
            chat_id = named if isinstance(named, str) else self.host.chat_of(session_id, event)
            state = self._sessions.get(session_id)
            joined = state.rooms.get(chat_id) if state is not None and chat_id else None
            if joined is None:
                self.tell(session_id, "invalid_event", f"not in chat {chat_id!r}: join it first")
                return True
            self.hub.call_invite(joined[0], joined[1], event, to)
            return True
        return self.hub.call_event(self, session_id, event)

    # --- to the session host ---------------------------------------------------------

    def deliver(self, session_id: str, event: ev.Event) -> bool:
        """Write a room's event to one session; ``False`` when the connection lags too far."""
        if self._dropped:
            return True
        host = self.host
        try:
            data = host.conn.send(event, session_id=session_id)
        except LocalProtocolError as exc:
            log.debug("chat event %s not sent to %s: %s", event.type, session_id, exc)
            return True
        queued = host.outbox.push(data)
        limit = host.limits.max_pushed
        action = backlog_action(queued, limit, warned=self._warned)
        if action is Backlog.WARN:
            self._warned = True
            self.tell(
                session_id,
                "slow_consumer",
                f"{queued} chat events are waiting to be written to this connection; "
                f"past {limit} its chats end",
                {"queued": queued, "limit": limit},
            )
        elif action is Backlog.DROP:
            return False
        elif queued <= limit // 4:
            self._warned = False
        return True

    def lagging(self) -> None:
        """Past the limit: drop what is queued and end every chat session of the connection."""
        if self._dropped:
            return
        self._dropped = True
        dropped = self.host.outbox.drop_pushed()
        log.info("dropping a lagging chat participant (%d events unwritten)", dropped)
        for session_id in list(self._sessions):
            self.end(session_id)
            self.host.end_session(session_id, "slow_consumer")
        self._dropped = False
        self._warned = False

    def tell(
        self, session_id: str, code: str, message: str, details: dict[str, Any] | None = None
    ) -> None:
        """``session.error`` to one session, in order with its chat events (never waits)."""
        error = ty.ErrorInfo(code=code, message=message, details=details)
        with contextlib.suppress(LocalProtocolError):
            data = self.host.conn.send(ev.SessionErrorEvent(session_id=session_id, error=error))
            self.host.outbox.push(data)

    def tokens(self, session_id: str) -> tuple[str | None, str | None]:
        """The session's auth and payment tokens."""
        return self.host.session_tokens(session_id)

    def spawn(self, fn: Callable[..., Any], *args: Any, on_error: OnError | None = None) -> None:
        """Run chat work supervised in the app's background nursery (else the connection's).

        ``on_error`` ends the work with its client when it raises (a bug).
        """
        nursery = self.hub.host.background or self.host.nursery
        what = f"chat work {getattr(fn, '__name__', fn)}"
        nursery.start_soon(functools.partial(supervised, fn, *args, what=what, on_error=on_error))

    def _failed(self, session_id: str, exc: BaseException) -> None:
        """The session's chat task failed: told so, it leaves its rooms (it may join again)."""
        self.tell(
            session_id,
            "internal_error",
            "this session's chat work failed on the server; it left its chats",
        )
        self.end(session_id)

    # --- the session's chat task ----------------------------------------------------------

    async def _work(self, session_id: str, state: _ChatSession) -> None:
        try:
            while not state.closed:
                if not state.queue:
                    await state.wakeup.park()
                    continue
                kind, payload = state.queue.popleft()
                try:
                    await self._step(session_id, state, kind, payload)
                except ProtocolError as exc:
                    details = {"field": exc.field} if exc.field else None
                    self.tell(session_id, exc.code, exc.message, details)
        finally:
            state.worker = False

    async def _step(self, session_id: str, state: _ChatSession, kind: str, payload: Any) -> None:
        if kind == "join":
            chat_id, settings = payload
            await self._room(session_id, state, chat_id, settings)
            return
        event = payload
        chat_id = self.host.chat_of(session_id, event)
        if chat_id is None:
            return
        room, member = await self._room(session_id, state, chat_id, None)
        if state.closed:
            return
        if kind == "say":
            await self.hub.say(room, member, event)
        elif kind == "typing":
            self.hub.typing(room, member, event.is_typing)
        elif kind == "read":
            await self.hub.read(room, member, event)

    async def _room(
        self,
        session_id: str,
        state: _ChatSession,
        chat_id: str,
        settings: Mapping[str, Any] | None,
    ) -> tuple[Room, _Member]:
        joined = state.rooms.get(chat_id)
        if joined is not None:
            return joined
        profile = self.host.chat_profile(session_id)
        if settings is None:
            settings = profile.settings
        member = _Member(
            link=self,
            session_id=session_id,
            principal=profile.principal,
            user_id=profile.user_id,
            username=profile.username,
            agent=profile.agent,
        )
        room = await self.hub.join(member, chat_id, settings)
        if state.closed:
            self.hub.leave(room, member)
        else:
            state.rooms[chat_id] = (room, member)
        return room, member
