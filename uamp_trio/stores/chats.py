"""Chat rooms kept beyond a connection: settings, messages, read marks (docs/chat.md).

Theory of operation
-------------------
:class:`ChatStore` is the small interface; :class:`MemoryChatStore` (the
default) and :class:`~uamp_trio.stores.chats_sqlite.SqliteChatStore`
(survives a restart) and
:class:`~uamp_trio.stores.chats_redis.RedisChatStore` (several processes
on one Redis) implement it. Who is connected and typing lives in the
processes (:mod:`uamp_trio.hosting.chats`).

The room feed: every change of a room a participant should hear of -- a
session arriving or leaving, a message, a read mark, any other room event
-- is a :class:`RoomEntry`, :meth:`ChatStore.publish` ed to the room's feed
(it never waits). Each process that has the room open
(:meth:`ChatStore.open_room`) applies the feed's entries in one order, the
same in every process, to its copy of the room and delivers them to its own
participants. A store kept by one process (memory, SQLite) applies each
entry at once, in the publishing call; the Redis store carries them on a
Redis Stream per room. :meth:`ChatStore.post` numbers, stores and publishes
a message in one step, so message numbers and feed order agree.

Ownership (docs/security.md): a room is stored under its owner's principal
key and its id (:data:`ChatKey`), and lists who else may join it
(``members``: principal ids, or ``"*"`` for anyone). :meth:`ChatStore.find`
gives a principal its own room of that id, else one that lists it, else
nothing -- so a principal naming someone else's room gets a new room of its
own, exactly as for an id nobody used. With no authentication every caller
is the same anonymous principal and shares every room.

Each message gets its sequence number from the room (``last_seq + 1``)
before it is stored; a store keeps at most ``max_messages`` per room (the
oldest go first), and :meth:`ChatStore.expire` deletes the rooms nobody is
in that had no message for a while (the hub calls it).
"""

from __future__ import annotations

import abc
from collections import deque
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any, ClassVar, Final

import attrs

from uamp_proto import events as ev
from uamp_proto.principal import Principal

if TYPE_CHECKING:
    from ..engines.supervise import Spawner

__all__ = [
    "ChatKey",
    "ChatRecord",
    "ChatStore",
    "MemoryChatStore",
    "RoomEntry",
    "RoomState",
    "StoredMessage",
]

#: A room: ``(owner's principal key, chat id)``.
ChatKey = tuple[tuple[str, str], str]

#: Messages kept per room unless the store is told otherwise.
MAX_MESSAGES: Final = 10_000
#: Anyone may join a room listing this member.
ANYONE: Final = "*"
#: Schemes a member may name (``"jwt:bob"``); see :func:`member_key`.
SCHEMES: Final = frozenset({"jwt", "api_key", "anonymous", "local"})


def member_key(member: str, scheme: str) -> tuple[str, str]:
    """The principal key a room's ``members`` entry names.

    ``"jwt:bob"`` names scheme and id; a bare ``"bob"`` is an id of the
    owner's ``scheme`` (the usual case: one server, one way to authenticate).
    """
    named, sep, rest = member.partition(":")
    if sep and named in SCHEMES:
        return (named, rest)
    return (scheme, member)


@attrs.define(kw_only=True)
class ChatRecord:
    """A room's settings and state.

    Attributes:
        chat_id: The id clients name.
        owner: The creator's principal key.
        members: Principal ids that may join besides the owner (``"*"``: anyone).
        policy: When agents answer (:class:`uamp_proto.chat.AnswerPolicy` JSON).
        last_seq: The sequence number of the latest message (0: none).
        reads: Per user id, the highest sequence number read.
        created: When the room was created (Unix seconds).
        active: When its latest message was posted (else ``created``): a
            room with nobody in it idle since long enough is deleted
            (:meth:`ChatStore.expire`).
    """

    chat_id: str
    owner: tuple[str, str]
    members: list[str] = attrs.field(factory=list)
    policy: dict[str, Any] = attrs.field(factory=dict)
    last_seq: int = 0
    reads: dict[str, int] = attrs.field(factory=dict)
    created: float = 0.0
    active: float = 0.0

    @property
    def last_active(self) -> float:
        """When the room last had a message, or was created."""
        return max(self.active, self.created)

    @property
    def key(self) -> ChatKey:
        """Where the room is stored."""
        return (self.owner, self.chat_id)

    def admits(self, principal: Principal) -> bool:
        """Whether ``principal`` may join: the owner, or listed in :attr:`members`.

        Members are compared by the whole identity, scheme and id (see
        :func:`member_key`): the API key ``bob`` is not the JWT subject ``bob``.
        """
        if principal.key == self.owner or ANYONE in self.members:
            return True
        scheme = self.owner[0]
        return any(member_key(m, scheme) == principal.key for m in self.members)

    def to_json(self) -> dict[str, Any]:
        """The record as JSON-ready data."""
        data = attrs.asdict(self)
        data["owner"] = list(self.owner)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ChatRecord:
        """A record from :meth:`to_json` 's data."""
        owner = data["owner"]
        return cls(**{**data, "owner": (str(owner[0]), str(owner[1]))})


@attrs.frozen(kw_only=True)
class StoredMessage:
    """One message of a room as stored.

    Attributes:
        seq: Its position in the room (1, 2, ...).
        message_id: Its id.
        sender: Who sent it (``ChatSender`` JSON).
        message: The UAMP message (section 8.5) as JSON.
        created_at: When it was stored (Unix seconds).
    """

    seq: int
    message_id: str
    sender: dict[str, Any]
    message: dict[str, Any]
    created_at: float

    def to_json(self) -> dict[str, Any]:
        """The message as JSON-ready data."""
        return attrs.asdict(self)


@attrs.frozen(kw_only=True)
class RoomEntry:
    """One change of a room on its feed (see the module docstring).

    Attributes:
        kind: ``arrive`` (``member`` joined, as ``participants``),
            ``leave`` (``member`` left), ``depart`` (``member`` left because
            its process stopped, :meth:`ChatStore.depart`), ``message`` (``message`` was
            stored), ``read`` (``user`` read up to ``seq``; ``event`` tells
            the others) or ``event`` (``event`` for everyone).
        member: The participating session (a key unique across processes).
        participants: Who ``member`` brings: the person, then its agent
            (:class:`uamp_proto.chat.Participant` fields as JSON).
        message: The stored message.
        event: A UAMP event for the room.
        skip_user: A user whose sessions are not sent ``event``.
        user: Who read.
        seq: Up to which message.
    """

    kind: str
    member: str = ""
    participants: tuple[dict[str, Any], ...] = ()
    message: StoredMessage | None = None
    event: ev.Event | None = None
    skip_user: str | None = None
    user: str = ""
    seq: int = 0


@attrs.frozen(kw_only=True)
class RoomState:
    """A room as a process starts following it: its record, newest messages, who is in it."""

    record: ChatRecord
    recent: list[StoredMessage]
    present: dict[str, tuple[dict[str, Any], ...]] = attrs.field(factory=dict)


#: Where a process applies a room's feed entries.
Deliver = Callable[[RoomEntry], None]


class ChatStore(abc.ABC):
    """Where rooms and their messages are kept; see the module docstring.

    Args:
        max_messages: Messages kept per room (the oldest are dropped).
    """

    #: Whether other processes share the rooms (their participants can be in them).
    shared: ClassVar[bool] = False

    def __init__(self, max_messages: int = MAX_MESSAGES) -> None:
        if max_messages < 1:
            raise ValueError("max_messages must be at least 1")
        self.max_messages = max_messages
        self._room_feeds: dict[ChatKey, Deliver] = {}

    @abc.abstractmethod
    async def find(self, principal: Principal, chat_id: str) -> ChatRecord | None:
        """``principal``'s own room ``chat_id``, else one that admits it, else ``None``."""

    @abc.abstractmethod
    async def create(self, record: ChatRecord) -> ChatRecord:
        """Store a new room; the one already under its key if there is one."""

    @abc.abstractmethod
    async def save(self, record: ChatRecord) -> None:
        """Write a room's settings, ``last_seq`` and read marks."""

    @abc.abstractmethod
    async def append(self, key: ChatKey, message: StoredMessage) -> None:
        """Add a message (its ``seq`` already assigned) and trim to ``max_messages``."""

    @abc.abstractmethod
    async def history(self, key: ChatKey, after: int = 0, limit: int = 100) -> list[StoredMessage]:
        """The last ``limit`` messages with ``seq > after``, oldest first."""

    # --- the room feed (one process: applied at once) ------------------------------

    async def open_room(self, record: ChatRecord, deliver: Deliver, history: int) -> RoomState:
        """Follow ``record`` 's room: ``deliver`` gets each entry published from now on."""
        self._room_feeds[record.key] = deliver
        return RoomState(record=record, recent=await self.history(record.key, limit=history))

    def close_room(self, key: ChatKey) -> None:
        """Stop following the room ``key``."""
        self._room_feeds.pop(key, None)

    def publish(self, key: ChatKey, entry: RoomEntry) -> None:
        """Add ``entry`` to the room's feed; never waits."""
        deliver = self._room_feeds.get(key)
        if deliver is not None:
            deliver(entry)

    async def post(self, record: ChatRecord, message: StoredMessage) -> StoredMessage:
        """Number ``message`` (``last_seq + 1``), store and publish it; the caller holds the room.

        A shared store numbers it in the store instead: ``record.last_seq``
        is only this process's view there.
        """
        stored = attrs.evolve(message, seq=record.last_seq + 1)
        await self.append(record.key, stored)
        record.last_seq, record.active = stored.seq, stored.created_at
        await self.save(record)
        self.publish(record.key, RoomEntry(kind="message", message=stored))
        return stored

    async def depart(self, key: ChatKey, node: str) -> int:
        """Take every participant of the stopped process ``node`` out of room ``key``, once.

        Each gets a ``depart`` entry on the room's feed; of several processes
        calling this for the same ``node`` only the first finds anyone to
        take out. Returns how many left. A store one process keeps has no
        other process's participants: nobody.
        """
        return 0

    @abc.abstractmethod
    async def expire(self, before: float, keep: Collection[ChatKey] = ()) -> int:
        """Delete the rooms idle since ``before`` that nobody is in; how many.

        Idle: no message since (nor created since). Nobody in it: none of
        ``keep`` (the rooms open in this process) and, in a shared store, no
        participant of any process.
        """

    def ensure_running(self, nursery: Spawner | None) -> None:  # noqa: B027 - optional
        """Start what carries the feeds between processes (a shared store)."""

    async def flush(self) -> None:  # noqa: B027 - optional for stores that write at once
        """Return once every entry published so far is written (a shared store queues them)."""

    async def aclose(self) -> None:  # noqa: B027 - optional for stores holding nothing open
        """Release what the store holds open."""


class MemoryChatStore(ChatStore):
    """Rooms in this process's memory (the default)."""

    def __init__(self, max_messages: int = MAX_MESSAGES) -> None:
        super().__init__(max_messages)
        self._rooms: dict[ChatKey, ChatRecord] = {}
        self._messages: dict[ChatKey, deque[StoredMessage]] = {}
        #: chat id -> keys of the rooms of that id, oldest first.
        self._by_id: dict[str, list[ChatKey]] = {}

    async def find(self, principal: Principal, chat_id: str) -> ChatRecord | None:
        own = self._rooms.get((principal.key, chat_id))
        if own is not None:
            return attrs.evolve(own)
        for key in self._by_id.get(chat_id, ()):
            record = self._rooms[key]
            if record.admits(principal):
                return attrs.evolve(record)
        return None

    async def create(self, record: ChatRecord) -> ChatRecord:
        existing = self._rooms.get(record.key)
        if existing is not None:
            return attrs.evolve(existing)
        self._rooms[record.key] = attrs.evolve(record)
        self._messages[record.key] = deque(maxlen=self.max_messages)
        self._by_id.setdefault(record.chat_id, []).append(record.key)
        return attrs.evolve(record)

    async def save(self, record: ChatRecord) -> None:
        if record.key in self._rooms:
            self._rooms[record.key] = attrs.evolve(record, reads=dict(record.reads))

    async def append(self, key: ChatKey, message: StoredMessage) -> None:
        messages = self._messages.get(key)
        if messages is not None:
            messages.append(message)

    async def history(self, key: ChatKey, after: int = 0, limit: int = 100) -> list[StoredMessage]:
        messages = [m for m in self._messages.get(key, ()) if m.seq > after]
        return messages[-limit:] if limit > 0 else []

    async def expire(self, before: float, keep: Collection[ChatKey] = ()) -> int:
        gone = [
            key
            for key, record in self._rooms.items()
            if record.last_active < before and key not in keep
        ]
        for key in gone:
            record = self._rooms.pop(key)
            self._messages.pop(key, None)
            same_id = self._by_id[record.chat_id]
            same_id.remove(key)
            if not same_id:
                del self._by_id[record.chat_id]
        return len(gone)
