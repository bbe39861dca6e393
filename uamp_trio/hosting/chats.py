"""Live chat rooms: joining, fan-out, typing, read receipts, agents that answer (docs/chat.md).

Theory of operation
-------------------
One :class:`ChatHub` per app keeps the rooms that have someone connected in
this process; the :class:`~uamp_trio.stores.chats.ChatStore` keeps them
beyond that (settings, messages, read marks). Every decision -- presence,
order, typing throttle, read marks, which agent answers, what to do with a
lagging participant -- is :mod:`uamp_proto.chat`'s; this module applies
them and writes the events.

Participants are sessions. Each UAMP connection's
:class:`~uamp_trio.hosting.sessions.SessionHost` has one :class:`ChatLink`,
which queues the chat work of each of its sessions in order (join, post,
typing, read) and runs it in one task per session, so a session's events
reach its rooms in the order it sent them while the host's reader never
waits. A room's writes go through the participant's own protocol core
(``conn.send``: the same checks and ids as everything else it sends) into
its connection's outbox with :meth:`Outbox.push
<uamp_trio.hosting.outbox.Outbox.push>`, which never waits: fan-out
costs the poster nothing whatever the others' connections do.

Order: everything a participant hears of a room goes through the room's
feed (:meth:`ChatStore.publish <uamp_trio.stores.chats.ChatStore.publish>`):
arrivals, departures, messages, read marks, typing, the agents' answers.
Each process applies the feed's entries in the feed's order to its
:class:`Room` -- a copy of the room: who is present, the recent messages,
the read marks -- and delivers them to its own participants
(:meth:`ChatHub._apply`). With one process the feed is applied at once;
with a shared store (``--store redis://``) participants connected to
different processes are in one room and hear the same events in the same
order. A message gets its sequence number from the store as it enters the
feed (:meth:`ChatStore.post <uamp_trio.stores.chats.ChatStore.post>`), so
numbers and order agree, the sender's copy included (it tells it the number
and id). A newcomer is sent who is here, the history and the read marks as
they are when its own arrival is applied, then everything after. A member
key starts with its process's id (the event log's ``node``, whose heartbeat
a shared store keeps): when that heartbeat stops, a surviving process takes
the dead one's members out through the feed (:meth:`ChatHub._watch`). The
answers their agents were streaming end there too: every process follows
the answers in flight from the feed (each answer's entries name the member
that asked, whose process runs it), and applying that member's departure it
ends them for its participants with ``response.error`` ``interrupted`` and
the agent's typing stopped, in the same place of the room's order.

Agents: the agent of each participating session is in the room too (its
presence follows its sessions). When the room's :class:`AnswerPolicy
<uamp_proto.chat.AnswerPolicy>` picks one for a message, the hub runs it
(:class:`~uamp_trio.hosting.turns.ResponseRunner`) on the room's recent
messages, for the sender's principal and with the sender's payment token
(a turn the app's payment policy refuses does not run: the sender gets
``session.error`` ``payment_required``). Its events go to everyone with
the room's ``chat_id`` and the agent as ``sender`` -- ``response.created``,
the deltas, ``response.done`` -- then its answer is stored and fanned out
as ``message.created`` like any other message.

Backpressure: a participant whose connection has more than
``SessionLimits.max_pushed`` pushed events unwritten is told once, past
half of it (``session.error`` ``slow_consumer``), and past all of it its
queued pushes are dropped and its chat sessions ended (``session.end``
reason ``slow_consumer``); the others get ``presence.offline`` and lose
nothing.

This module holds :class:`ChatHub`; a connection's side is
:mod:`~uamp_trio.hosting.chat_link` (:class:`ChatLink`), a room as this
process holds it :mod:`~uamp_trio.hosting.chat_room` (:class:`Room`,
:class:`ChatLimits`, :class:`ChatProfile`). Every name is importable from
here.
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from uamp_proto import events as ev
from uamp_proto import ratelimit
from uamp_proto import types as ty
from uamp_proto.busy import BUSY, INVALID_POLICY, BusyError
from uamp_proto.chat import (
    AnswerPolicy,
    Participant,
    agent_names,
    approvers_setting,
    may_answer,
)
from uamp_proto.codec import from_dict, unstructure
from uamp_proto.errors import ProtocolError
from uamp_proto.payment import PaymentRequiredError
from uamp_proto.principal import Principal
from uamp_proto.responder import Responder, TurnRequest
from uamp_stores.background import start_background
from uamp_stores.busy import Slot
from uamp_stores.health import StoreHealth

from ..stores.chats import ChatKey, ChatRecord, ChatStore, RoomEntry, StoredMessage
from .chat_link import ChatLink
from .chat_room import ChatLimits, Room, _Member, chat_settings
from .chat_room import ChatProfile as ChatProfile

if TYPE_CHECKING:
    from .host import Host

__all__ = ["ChatHub", "ChatLimits", "ChatLink", "chat_settings"]

log = logging.getLogger("uamp_trio.chats")

#: The events that end an agent's answer in a room.
_ANSWER_ENDS: Final = (ev.ResponseDone, ev.ResponseErrorEvent, ev.ResponseCancelled)
#: How an answer ends when the process running it stops (docs/scale-out.md).
_ANSWER_LOST: Final = ty.ErrorInfo(
    code="interrupted", message="The server running this answer stopped before it finished."
)

#: Messages of a room an agent is given as its conversation.
AGENT_CONTEXT: Final = 50
#: Seconds between two checks of the heartbeats of the processes in the rooms.
WATCH_INTERVAL: Final = 1.0
#: The window of ``ServerConfig.chat_principal_messages`` (s).
POST_WINDOW: Final = 60.0
#: The longest wait between two sweeps for idle rooms (s).
SWEEP_INTERVAL: Final = 60.0


class ChatHub:
    """The live rooms of one app; see the module docstring.

    Args:
        store: Where rooms are kept.
        host: The app: its agents, payment policy and background nursery.
        limits: Room limits.
        clock: Wall-clock seconds (``created_at``, ``read_at``).
    """

    def __init__(
        self,
        store: ChatStore,
        host: Host,
        limits: ChatLimits | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.host = host
        self.limits = limits or ChatLimits()
        self.clock = clock
        self.rooms: dict[ChatKey, Room] = {}
        #: This hub's part of member keys: the process's id, whose heartbeat
        #: the shared event log keeps (:meth:`_watch`).
        self.node = host.stores.event_log.node
        self._watching = False
        self._joining = trio.Lock()
        #: Whether checking the rooms' processes fails now (logged once per outage).
        self._watch_health = StoreHealth("checking the chat rooms' processes")
        #: When each principal posted its recent messages (``chat_principal_messages``).
        self._posted: dict[tuple[str, str], deque[float]] = {}
        self._sweeping = False
        #: Calls between two people in a room: call id -> (caller, callee, chat id).
        self.calls: dict[str, tuple[_Member, _Member, str]] = {}
        #: Member key -> the id of the call it is in.
        self._call_of: dict[str, str] = {}

    # --- membership -------------------------------------------------------------

    async def join(self, member: _Member, chat_id: str, settings: Mapping[str, Any]) -> Room:
        """Put ``member`` into its room ``chat_id`` (created when it has none).

        Raises:
            ProtocolError: ``invalid_event``: bad ``members`` / policy settings.
        """
        says_policy = "respond" in settings or "rules" in settings
        policy = AnswerPolicy.from_json(settings) if says_policy else None
        approvals = approvers_setting(settings["approvals"]) if "approvals" in settings else None
        members = settings.get("members") if settings else None
        if members is not None and not (
            isinstance(members, list) and all(isinstance(m, str) for m in members)
        ):
            raise ProtocolError(
                "chat.members must be a list of principal ids", code="invalid_event"
            )
        # The server's limits (docs/security.md, "Chat rooms"): messages kept per room.
        self.store.max_messages = self.host.server_config.chat_room_messages
        async with self._joining:
            record = await self.store.find(member.principal, chat_id)
            if record is None:
                record = await self.store.create(
                    ChatRecord(
                        chat_id=chat_id,
                        owner=member.principal.key,
                        members=list(members or []),
                        policy={
                            **(policy.to_json() if policy is not None else {}),
                            **({"approvals": approvals} if approvals else {}),
                        },
                        created=self.clock(),
                    )
                )
            room = self.rooms.get(record.key)
            if room is None:
                self.store.ensure_running(self.host.background)
                self._start_watch()
                self._start_sweep()
                deliver = functools.partial(self._apply, record.key)
                keep = min(max(self.limits.history, AGENT_CONTEXT), self.store.max_messages)
                state = await self.store.open_room(record, deliver, keep)
                room = self.rooms[record.key] = Room(state, self.limits, keep)
            if record.owner == member.principal.key and (
                policy or members is not None or approvals
            ):
                # The owner's settings on a later join change the room's.
                if policy is not None:
                    kept = room.record.policy.get("approvals")
                    room.policy = policy
                    room.record.policy = {
                        **policy.to_json(),
                        **({"approvals": kept} if kept else {}),
                    }
                if approvals:
                    room.record.policy = {**room.record.policy, "approvals": approvals}
                if members is not None:
                    room.record.members = list(members)
                await self.store.save(room.record)
        self._enter(room, member)
        return room

    def _enter(self, room: Room, member: _Member) -> None:
        joiner = Participant(
            member=member.key, user_id=member.user_id, username=member.username, kind="user"
        )
        agent = Participant(
            member=member.key + "/agent", user_id=member.agent, username=member.agent, kind="agent"
        )
        room.pending[member.key] = member
        participants = (attrs.asdict(joiner), attrs.asdict(agent))
        entry = RoomEntry(kind="arrive", member=member.key, participants=participants)
        self.store.publish(room.key, entry)

    def _arrived(self, room: Room, entry: RoomEntry) -> None:
        """Apply an arrival: a newcomer of this process gets its snapshot; presence to all."""
        member = room.pending.pop(entry.member, None)
        chat_id = room.chat_id
        snapshot: list[ev.Event] = []
        if member is not None:
            # What the newcomer is owed: who is here, the history, the read marks.
            snapshot.extend(
                ev.PresenceOnline(user_id=p.user_id, username=p.username, chat_id=chat_id)
                for p in room.roster.online()
                if p.user_id != member.user_id
            )
            recent = list(room.recent)[-self.limits.history :]
            snapshot.extend(self._created(room, m) for m in recent)
            snapshot.extend(
                ev.MessageRead(chat_id=chat_id, user_id=user, seq=seq)
                for user, seq in room.reads.items()
            )
            room.members[member.key] = member
        for fields in entry.participants:
            participant = Participant(**fields)
            if room.roster.join(participant):
                self._fan_out(
                    room,
                    ev.PresenceOnline(
                        user_id=participant.user_id,
                        username=participant.username,
                        chat_id=chat_id,
                    ),
                    skip_user=participant.user_id,
                )
        if member is not None:
            for event in snapshot:
                member.link.deliver(member.session_id, event)

    def leave(self, room: Room, member: _Member) -> None:
        """Take ``member`` out of ``room``; ``presence.offline`` for a user or agent now gone."""
        here = room.members.pop(member.key, None) or room.pending.pop(member.key, None)
        if here is None:
            return
        call_id = self._call_of.get(member.key)
        if call_id is not None and self.calls[call_id][2] == room.chat_id:
            self._relay(call_id, member, ev.VoiceEnd(call_id=call_id, reason="left"))
            self._hang_up(call_id)
        staying = (*room.members.values(), *room.pending.values())
        if all(m.user_id != member.user_id for m in staying):
            # This process holds the user's typing state: cleared before it leaves
            # (it may stop following the room right after).
            for user, typing in room.typing.clear(member.user_id, 0.0):
                self._typing_event(room, user, typing)
        self.store.publish(room.key, RoomEntry(kind="leave", member=member.key))
        if not (room.members or room.pending) and self.rooms.get(room.key) is room:
            del self.rooms[room.key]
            self.store.close_room(room.key)

    def _left(self, room: Room, member_key: str) -> None:
        """Apply a departure: ``presence.offline`` for a user or agent now gone."""
        for key in (member_key, member_key + "/agent"):
            left, offline = room.roster.leave(key)
            if left is None or not offline:
                continue
            if left.kind == "user":
                # Only the process that holds the user's typing state has any to clear.
                for user, typing in room.typing.clear(left.user_id, 0.0):
                    self._typing_event(room, user, typing)
                if left.user_id in room.typists:  # its process stopped while it typed
                    room.typists.discard(left.user_id)
                    stop = ev.PresenceTyping(
                        user_id=left.user_id,
                        username=left.username,
                        is_typing=False,
                        chat_id=room.chat_id,
                    )
                    self._fan_out(room, stop, skip_user=left.user_id)
            self._fan_out(
                room,
                ev.PresenceOffline(
                    user_id=left.user_id, username=left.username, chat_id=room.chat_id
                ),
            )

    def _apply(self, key: ChatKey, entry: RoomEntry) -> None:
        """Apply one entry of a room's feed to this process's copy and participants."""
        room = self.rooms.get(key)
        if room is None:
            return
        if entry.kind == "arrive":
            self._arrived(room, entry)
        elif entry.kind == "leave":
            self._left(room, entry.member)
        elif entry.kind == "depart":
            self._lost_answers(room, entry.member)
            self._left(room, entry.member)
        elif entry.kind == "message" and entry.message is not None:
            stored = entry.message
            room.recent.append(stored)
            room.record.last_seq = max(room.record.last_seq, stored.seq)
            self._fan_out(room, self._created(room, stored))
        elif entry.kind == "read" and entry.event is not None:
            room.reads.mark(entry.user, entry.seq, max(room.record.last_seq, entry.seq))
            room.record.reads = room.reads.as_dict()
            self._fan_out(room, entry.event, skip_user=entry.skip_user)
        elif entry.event is not None:
            event = entry.event
            if isinstance(event, ev.PresenceTyping) and event.user_id is not None:
                (room.typists.add if event.is_typing else room.typists.discard)(event.user_id)
            elif isinstance(event, ev.ResponseCreated) and entry.member:
                room.answers[event.response_id] = (entry.member, event.unknown)
            elif isinstance(event, _ANSWER_ENDS) and event.response_id is not None:
                room.answers.pop(event.response_id, None)
            self._fan_out(room, event, skip_user=entry.skip_user)

    def _lost_answers(self, room: Room, member_key: str) -> None:
        """End the answers ``member_key`` 's stopped process was streaming (``interrupted``)."""
        lost = [rid for rid, (asker, _) in room.answers.items() if asker == member_key]
        for response_id in lost:
            _, fields = room.answers.pop(response_id)
            self._fan_out(
                room,
                ev.ResponseErrorEvent(error=_ANSWER_LOST, response_id=response_id, unknown=fields),
            )
            agent = fields.get("sender", {}).get("id")
            still = any(f.get("sender", {}).get("id") == agent for _, f in room.answers.values())
            if agent in room.typists and not still:
                room.typists.discard(agent)
                stop = ev.PresenceTyping(
                    user_id=agent, username=agent, is_typing=False, chat_id=room.chat_id
                )
                self._fan_out(room, stop)

    # --- rooms nobody is in, idle (docs/security.md) -----------------------------------

    def _start_sweep(self) -> None:
        if not self._sweeping:
            self._sweeping = True
            start_background(self.host.background, self._sweep, "uamp-chat-expiry", "chat expiry")

    async def _sweep(self) -> None:
        """Delete the rooms nobody is in with no message for ``chat_room_idle_timeout``."""
        try:
            while True:
                idle = self.host.server_config.chat_room_idle_timeout
                await trio.sleep(min(idle / 4, SWEEP_INTERVAL))
                gone = await self.store.expire(self.clock() - idle, set(self.rooms))
                if gone:
                    log.info("%d chat rooms expired (nobody in them, idle %g s)", gone, idle)
                now = trio.current_time()
                for poster, times in list(self._posted.items()):
                    if not times or times[-1] < now - POST_WINDOW:
                        del self._posted[poster]
        finally:
            self._sweeping = False

    def _admit_post(self, member: _Member, event: ev.InputText) -> None:
        """Refuse a post over the message size or its principal's rate (``ProtocolError``)."""
        config = self.host.server_config
        size = len(event.text.encode("utf-8", "surrogatepass"))
        if size > config.chat_max_message_bytes:
            raise ProtocolError(
                f"a chat message may hold {config.chat_max_message_bytes} bytes of text; "
                f"this one holds {size}",
                code="invalid_request",
                field="text",
            )
        limit = config.chat_principal_messages
        now = trio.current_time()
        times = self._posted.setdefault(member.principal.key, deque(maxlen=limit))
        refused = len(times) >= limit and times[0] > now - POST_WINDOW
        if not refused:
            times.append(now)
        # UAMP 6.17: the poster hears how many are left once few are.
        recent = [t for t in times if t > now - POST_WINDOW]
        reset_at = self.clock() + (recent[0] + POST_WINDOW - now) if recent else None
        warning = ratelimit.notice(limit, limit - len(recent), reset_at, member.session_id)
        if warning is not None:
            member.link.deliver(member.session_id, warning)
        if refused:
            raise ProtocolError(
                f"{member.principal.id!r} posted {limit} chat messages in the last "
                f"{POST_WINDOW:g} s, the most allowed; wait a little",
                code="rate_limited",
            )

    # --- processes that stop (a shared store) -----------------------------------------

    def _start_watch(self) -> None:
        if self.store.shared and self.host.stores.event_log.shared and not self._watching:
            self._watching = True
            self.host.stores.event_log.ensure_running(self.host.background)  # our heartbeat
            start_background(self.host.background, self._watch, "uamp-chat-watch", "chat watch")

    async def _watch(self) -> None:
        """Take the participants of processes whose heartbeat stopped out of the rooms here.

        A process missed on two checks in a row (its heartbeat lapses after
        a few seconds) is gone: :meth:`ChatStore.depart` takes its members
        out through each room's feed, once whichever process gets there
        first, and everyone applies their departure like any other.
        """
        missing: set[str] = set()
        try:
            while True:
                await trio.sleep(WATCH_INTERVAL)  # the first room opens meanwhile
                if not self.rooms:
                    return
                try:
                    missing = await self._check(missing)
                except Exception as exc:  # Redis away: the next round tries again
                    if not self._watch_health.down:
                        self._watch_health.failed(exc)  # once per outage
                    log.debug("checking the chat rooms' processes failed: %s", exc)
                else:
                    self._watch_health.ok()
        finally:
            self._watching = False

    async def _check(self, missing: set[str]) -> set[str]:
        """One round of :meth:`_watch`; ``missing``: processes not beating last round."""
        nodes = {
            p.member.split(":", 1)[0]
            for room in list(self.rooms.values())
            for p in room.roster.participants
        } - {self.node}
        dead = {node for node in nodes if not await self.host.stores.event_log.alive(node)}
        gone = dead & missing
        for room in list(self.rooms.values()):
            here = {p.member.split(":", 1)[0] for p in room.roster.participants}
            for node in gone & here:
                left = await self.store.depart(room.key, node)
                log.info("process %s stopped: %d left chat %s", node, left, room.chat_id)
        return dead

    # --- fan-out ----------------------------------------------------------------------

    def broadcast(
        self, room: Room, event: ev.Event, *, skip_user: str | None = None, member: str = ""
    ) -> None:
        """Send ``event`` to every participant (not to ``skip_user``'s sessions), via the feed.

        ``member``: the participating session an agent's answer event is for.
        """
        entry = RoomEntry(kind="event", event=event, skip_user=skip_user, member=member)
        self.store.publish(room.key, entry)

    def _fan_out(self, room: Room, event: ev.Event, *, skip_user: str | None = None) -> None:
        """Write ``event`` to this process's participants (not to ``skip_user``'s sessions)."""
        dropped = []
        for member in list(room.members.values()):
            if skip_user is not None and member.user_id == skip_user:
                continue
            if not member.link.deliver(member.session_id, event):
                dropped.append(member)
        for member in dropped:
            member.link.lagging()

    def _created(self, room: Room, message: StoredMessage) -> ev.MessageCreated:
        return ev.MessageCreated(
            chat_id=room.chat_id,
            message_id=message.message_id,
            seq=message.seq,
            sender=from_dict(ty.ChatSender, message.sender),
            message=from_dict(ty.Message, message.message),
            created_at=message.created_at,
        )

    # --- messages -----------------------------------------------------------------------

    async def post(self, room: Room, sender: ty.ChatSender, message: ty.Message) -> StoredMessage:
        """Number, store and fan out one message; returns it as stored."""
        fresh = StoredMessage(
            seq=0,  # the store numbers it
            message_id=f"msg_{uuid.uuid4().hex}",
            sender=unstructure(sender),
            message=unstructure(message),
            created_at=self.clock(),
        )
        async with room.lock:
            return await self.store.post(room.record, fresh)

    async def say(self, room: Room, member: _Member, event: ev.InputText) -> None:
        """A participant's ``input.text`` into the room; agents answer per the room's policy.

        Raises:
            ProtocolError: ``invalid_request`` (the text is too long) or
                ``rate_limited`` (its principal posted too many messages).
        """
        self._admit_post(member, event)
        for user, typing in room.typing.clear(member.user_id, trio.current_time()):
            self._typing_event(room, user, typing)
        role = event.role or "user"
        message = ty.Message(role=role, content=event.text, name=member.username)
        sender = ty.ChatSender(id=member.user_id, name=member.username, kind="user")
        stored = await self.post(room, sender, message)
        agents = agent_names(room.roster.participants)
        for agent in room.policy.choose(event.text, agents):
            if room.answering >= self.limits.max_answers:
                member.link.tell(
                    member.session_id,
                    "rate_limited",
                    f"{room.answering} agents are answering in chat {room.chat_id!r} already; "
                    f"{agent!r} does not answer this message",
                    {"limit": self.limits.max_answers, "agent": agent, "chat_id": room.chat_id},
                )
                continue
            slot = self._place(room, agent, member, event)
            if slot is None:
                continue
            room.answering += 1
            # The agent gets the poster's input.text.context (section 5.6),
            # with the room and the sender as the server knows them.
            context = {
                **(event.context or {}),
                "chat_id": room.chat_id,
                "sender_id": member.user_id,
            }
            failed = functools.partial(self._answer_failed, member, agent, room.chat_id)
            member.link.spawn(
                self._answer, room, agent, member, stored, context, slot, on_error=failed
            )

    def _place(self, room: Room, agent: str, member: _Member, event: ev.InputText) -> Slot | None:
        """The answer's place behind ``agent`` 's running answer in the room (docs/busy.md).

        ``None``: refused, and the poster told so (``session.error``).
        """
        gate = self.host.conversations
        try:
            policy = gate.policy(event.context)
            return gate.enter(("chat", room.chat_id, agent), member.principal, policy)
        except BusyError as exc:
            code = {BUSY: "response_in_progress", INVALID_POLICY: "invalid_request"}
            member.link.tell(
                member.session_id,
                code.get(exc.code, exc.code),
                f"{agent!r} does not answer this message in chat {room.chat_id!r}: {exc}",
                {"agent": agent, "chat_id": room.chat_id, "reason": exc.code},
            )
            return None

    @staticmethod
    def _answer_failed(member: _Member, agent: str, chat_id: str, exc: BaseException) -> None:
        member.link.tell(
            member.session_id,
            "internal_error",
            f"agent {agent!r} could not answer in chat {chat_id!r}: the server failed",
            {"agent": agent, "chat_id": chat_id},
        )

    def typing(self, room: Room, member: _Member, is_typing: bool) -> None:
        """A participant's ``input.typing``: throttled ``presence.typing`` to the others."""
        now = trio.current_time()
        for user, typing in room.typing.update(member.user_id, is_typing, now):
            self._typing_event(room, user, typing)
        if not room.timer and room.typing.next_deadline() is not None:
            room.timer = True
            member.link.spawn(self._typing_timer, room)

    def _typing_event(self, room: Room, user: str, is_typing: bool) -> None:
        participant = next((p for p in room.roster.online() if p.user_id == user), None)
        event = ev.PresenceTyping(
            user_id=user,
            username=participant.username if participant is not None else None,
            is_typing=is_typing,
            chat_id=room.chat_id,
        )
        self.broadcast(room, event, skip_user=user)

    async def _typing_timer(self, room: Room) -> None:
        try:
            while True:
                deadline = room.typing.next_deadline()
                if deadline is None or not room.members:
                    return
                await trio.sleep_until(deadline)
                for user, typing in room.typing.poll(trio.current_time()):
                    self._typing_event(room, user, typing)
        finally:
            room.timer = False

    async def read(self, room: Room, member: _Member, event: ev.MessageRead) -> None:
        """A participant read up to a message: the others get ``message.read``.

        Raises:
            ProtocolError: ``unknown_message``.
        """
        seq = event.seq
        if seq is None and event.message_id is not None:
            seq = next((m.seq for m in room.recent if m.message_id == event.message_id), None)
        if seq is None:
            raise ProtocolError(
                "message.read needs the seq (or the message_id of a recent message) it read up to",
                code="unknown_message",
            )
        if not room.reads.mark(member.user_id, seq, room.record.last_seq):
            return
        room.record.reads = room.reads.as_dict()
        message_id = next((m.message_id for m in room.recent if m.seq == seq), event.message_id)
        told = ev.MessageRead(
            chat_id=room.chat_id,
            user_id=member.user_id,
            seq=seq,
            message_id=message_id,
            read_at=self.clock(),
        )
        entry = RoomEntry(
            kind="read", user=member.user_id, seq=seq, event=told, skip_user=member.user_id
        )
        self.store.publish(room.key, entry)
        await self.store.save(room.record)

    # --- calls between people (docs/voice.md) -----------------------------------------

    def call_invite(self, room: Room, caller: _Member, invite: ev.VoiceInvite, to: str) -> None:
        """Relay ``caller``'s invite to participant ``to``; declined when it cannot ring."""
        call_id = invite.call_id or f"call_{uuid.uuid4().hex}"
        callee = next(
            (m for m in room.members.values() if m.user_id == to and m.key != caller.key), None
        )
        reason = None
        if callee is None:
            reason = f"{to!r} is not in chat {room.chat_id!r}"
        elif callee.key in self._call_of or caller.key in self._call_of or call_id in self.calls:
            reason = "busy"
        if callee is None or reason is not None:
            decline = ev.VoiceDecline(
                call_id=call_id, reason=reason, unknown={"chat_id": room.chat_id}
            )
            caller.link.deliver(caller.session_id, decline)
            return
        self.calls[call_id] = (caller, callee, room.chat_id)
        self._call_of[caller.key] = self._call_of[callee.key] = call_id
        ring = ev.VoiceInvite(
            call_id=call_id,
            sdp=invite.sdp,
            unknown={"chat_id": room.chat_id, "from": caller.user_id},
        )
        callee.link.deliver(callee.session_id, ring)

    def call_event(self, link: ChatLink, session_id: str, event: ev.Event) -> bool:
        """Pass a call event (or audio) of a session in a call to the other side, or ``False``."""
        key = link.member_key(session_id)
        call_id = self._call_of.get(key)
        if call_id is None:
            return False
        caller, callee, _ = self.calls[call_id]
        me = caller if caller.key == key else callee
        relayed: ev.Event
        if isinstance(event, ev.InputAudio):
            relayed = ev.AudioDelta(
                audio=event.audio, unknown={"call_id": call_id, "from": me.user_id}
            )
        elif isinstance(event, ev.VoiceAccept):
            relayed = ev.VoiceAccept(call_id=call_id, sdp=event.sdp)
        elif isinstance(event, ev.VoiceDecline):
            relayed = ev.VoiceDecline(call_id=call_id, reason=event.reason)
        elif isinstance(event, ev.VoiceEnd):
            relayed = ev.VoiceEnd(
                call_id=call_id, duration_ms=event.duration_ms, reason=event.reason
            )
        else:
            return False
        self._relay(call_id, me, relayed)
        if isinstance(event, ev.VoiceDecline | ev.VoiceEnd):
            self._hang_up(call_id)
        return True

    def _relay(self, call_id: str, sender: _Member, event: ev.Event) -> None:
        caller, callee, chat_id = self.calls[call_id]
        other = callee if sender is caller else caller
        event = attrs.evolve(event, unknown={**event.unknown, "chat_id": chat_id})
        other.link.deliver(other.session_id, event)

    def _hang_up(self, call_id: str) -> None:
        caller, callee, _ = self.calls.pop(call_id)
        self._call_of.pop(caller.key, None)
        self._call_of.pop(callee.key, None)

    # --- agents -----------------------------------------------------------------------

    def _conversation(self, room: Room, agent: str, trigger: StoredMessage) -> list[ty.Message]:
        recent = list(room.recent)
        if all(m.seq != trigger.seq for m in recent):  # not back through the feed yet
            recent = sorted([*recent, trigger], key=lambda m: m.seq)
        out = []
        for stored in recent[-AGENT_CONTEXT:]:
            message = from_dict(ty.Message, stored.message)
            mine = stored.sender.get("kind") == "agent" and stored.sender.get("id") == agent
            out.append(attrs.evolve(message, role="assistant") if mine else message)
        return out

    async def _answer(
        self,
        room: Room,
        name: str,
        poster: _Member,
        trigger: StoredMessage,
        context: dict[str, Any],
        slot: Slot,
    ) -> None:
        """Run agent ``name`` on the room and fan its answer out (see the module docstring).

        It waits for ``name`` 's earlier answers in the room (``slot``, the busy policy).
        """
        try:
            async with slot:
                agent = self.host.agents.get(name)
                if agent is None or name in self.host.agents.offline:
                    return
                await self._run_answer(room, agent, poster, trigger, context, slot)
        finally:
            slot.close()
            room.answering -= 1

    async def _run_answer(
        self,
        room: Room,
        agent: Responder,
        poster: _Member,
        trigger: StoredMessage,
        context: dict[str, Any],
        slot: Slot,
    ) -> None:
        name = agent.name
        response_id = f"resp_{uuid.uuid4().hex}"
        token, payment_token = poster.link.tokens(poster.session_id)
        try:
            charge = await self.host.open_charge(
                name, payment_token, response_id, principal=poster.principal
            )
        except PaymentRequiredError as unpaid:
            poster.link.tell(
                poster.session_id,
                "payment_required",
                f"agent {name!r} answers in this chat once paid: {unpaid.reason or unpaid.code}",
            )
            return
        sender = unstructure(ty.ChatSender(id=name, name=name, kind="agent"))
        chat = {"chat_id": room.chat_id, "sender": sender}
        request = TurnRequest(
            agent=name,
            session_id=poster.session_id,
            response_id=response_id,
            messages=self._conversation(room, name, trigger),
            token=token,
            payment_token=payment_token,
            metadata={
                "transport": "uamp-chat",
                "chat": {
                    "chat_id": room.chat_id,
                    "sender_id": poster.user_id,
                    "sender_name": poster.username,
                    "message_id": trigger.message_id,
                    "seq": trigger.seq,
                },
            },
            principal=poster.principal,
            context=context,
            client_capabilities=poster.link.host.client_capabilities(poster.session_id),
        )

        async def sink(event: ev.Event) -> None:
            if isinstance(event, ev.ToolCall | ev.PaymentRequired):
                return  # nobody in a room runs the agent's client tools or pays mid-answer
            fields = {**event.unknown, **chat}
            answer = attrs.evolve(event, session_id=None, unknown=fields)
            self.broadcast(room, answer, member=poster.key)

        # The room sees the agent's questions (the sink fans them out); who
        # may answer them is the room's setting (docs/human-in-the-loop.md).
        setting = str(room.record.policy.get("approvals") or "caller")
        caller, owner = poster.principal.key, room.record.owner

        def also(who: Principal) -> bool:
            present = {m.principal.key for m in room.members.values()}
            if who.id in room.record.members:  # a member the owner listed
                present.add(who.key)
            return may_answer(setting, who.key, caller=caller, owner=owner, members=present)

        port = self.host.interrupts.port(request, supported=True, also=also)
        request = attrs.evolve(request, interrupts=port)
        self._typing_event(room, name, True)
        runner = self.host.turns.runner(agent, request, sink, charge=charge)
        port.emit = runner.emit
        slot.bind(runner.cancel)  # a later message may interrupt this answer
        try:
            outcome = await runner.run()
        finally:
            port.close()  # no cycle keeps the request (and its conversation) alive
            self._typing_event(room, name, False)
        text = outcome.tracker.text
        # An interrupted answer says what it had said; a rolled-back one says nothing.
        kept = outcome.status == "cancelled" and slot.interrupted and not slot.dropped
        if (outcome.status == "completed" or kept) and text:
            reply = ty.Message(role="assistant", content=text, name=name)
            await self.post(room, from_dict(ty.ChatSender, sender), reply)
