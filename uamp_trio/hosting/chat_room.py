"""A chat room as this process holds it, and who is in it.

:class:`Room` is this process's copy of a room -- its record, who is
present, the recent messages, the read marks, the typing gate, the answers
streaming in it -- to which :class:`~uamp_trio.hosting.chats.ChatHub`
applies the room's feed. ``_Member`` is one participating session as the
room sees it, :class:`ChatProfile` who a session is in its chats, and
:class:`ChatLimits` the limits of one app's rooms.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs
import trio

from uamp_proto import types as ty
from uamp_proto.chat import AnswerPolicy, Participant, ReadState, Roster, TypingGate
from uamp_proto.principal import Principal

from ..stores.chats import ChatKey, RoomState, StoredMessage

if TYPE_CHECKING:
    from .chat_link import ChatLink

__all__ = ["ChatLimits", "ChatProfile", "Room", "chat_settings"]


@attrs.frozen(kw_only=True)
class ChatLimits:
    """Limits of the chat rooms of one app.

    Attributes:
        history: Messages a joining participant is sent (the newest).
        typing_interval: Least time between two typing broadcasts of one user (s).
        typing_timeout: A typing user quiet this long is cleared (s).
        max_answers: Agent answers running at once in one room; a message
            past it is stored but not answered (the sender is told).
        queued_chat_events: Chat events of one session waiting for its
            chat task before the session is told ``rate_limited``.
    """

    history: int = 100
    typing_interval: float = 0.25
    typing_timeout: float = 5.0
    max_answers: int = 4
    queued_chat_events: int = 256


def chat_settings(config: ty.SessionConfig | None) -> Mapping[str, Any]:
    """The ``session.extensions.chat`` object of a session (``{}`` when absent)."""
    ext = config.extensions if config is not None else None
    found = ext.get("chat") if ext else None
    return found if isinstance(found, Mapping) else {}


@attrs.define(eq=False)
class _Member:
    """One session in a room, as the room sees it."""

    link: ChatLink
    session_id: str
    principal: Principal
    user_id: str
    username: str | None
    agent: str

    @property
    def key(self) -> str:
        return self.link.member_key(self.session_id)


class Room:
    """A room with someone connected in this process: this process's copy of it."""

    def __init__(self, state: RoomState, limits: ChatLimits, keep: int) -> None:
        record, recent = state.record, state.recent
        self.record = record
        self.roster = Roster()
        for participants in state.present.values():
            for fields in participants:
                self.roster.join(Participant(**fields))
        #: This process's participating sessions.
        self.members: dict[str, _Member] = {}
        #: Those whose arrival is not applied yet.
        self.pending: dict[str, _Member] = {}
        self.typing = TypingGate(limits.typing_interval, limits.typing_timeout)
        self.reads = ReadState(record.reads)
        self.policy = AnswerPolicy.from_json(record.policy)
        self.recent: deque[StoredMessage] = deque(recent, maxlen=keep)
        #: Users the feed last said are typing (cleared here when they go offline).
        self.typists: set[str] = set()
        self.lock = trio.Lock()
        self.answering = 0
        self.timer = False
        #: Answers streaming in the room, from the feed: response id -> the
        #: asking member (whose process runs it) and the answer's chat fields.
        self.answers: dict[str, tuple[str, Mapping[str, Any]]] = {}

    @property
    def chat_id(self) -> str:
        return self.record.chat_id

    @property
    def key(self) -> ChatKey:
        return self.record.key


@attrs.frozen(kw_only=True)
class ChatProfile:
    """Who a session is in its chats."""

    principal: Principal
    user_id: str
    username: str | None
    agent: str
    settings: Mapping[str, Any]
