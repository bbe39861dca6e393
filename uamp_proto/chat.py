"""Chat rooms as pure decisions (UAMP sections 6.18 and 7.1).

Theory of operation
-------------------
A chat room is shared by several sessions (people through any client, and
agents). Everything a room must *decide* lives here, with time passed in;
the I/O binding (``uamp_trio.hosting.chats``) keeps the rooms, stores the
messages and writes the events these decisions produce.

:class:`Roster`
    Who is in the room. Participants are sessions, identified by a member
    key; presence is per *user*: ``presence.online`` when a user's first
    session joins, ``presence.offline`` when its last one leaves, so a
    person on two devices (or two sessions multiplexed on one socket) is
    online once.
:class:`TypingGate`
    ``input.typing`` in, ``presence.typing`` out: per user at most one
    broadcast per ``min_interval`` (a client typing-spamming at 50/s makes
    a few per second reach the others), the latest state always delivered
    once the interval has passed (:meth:`TypingGate.poll`), and a typing
    user who goes quiet for ``timeout`` is cleared.
:class:`ReadState`
    Per user, the highest sequence number read; only moves forward and
    never past the last message.
:class:`AnswerPolicy`
    Which agents answer a message: every message, only when mentioned
    (``@name``), or by routing rules in the spirit of section 12 (a pattern
    a message must match, the agent that answers, a priority). An agent's
    own message never triggers an agent (no loops between agents). A rule's
    pattern comes from a client, so it is matched by RE2 (``google-re2``):
    time linear in the message, no backtracking, a compile bounded by
    :data:`MAX_RULE_PATTERN` characters and :data:`RULE_MEMORY` bytes of
    program; Python's ``re`` would let ``(a+)+$`` freeze the event loop and a
    pattern of 2,000 nested groups overflow its compiler's recursion.
:func:`backlog_action`
    What to do with a participant whose connection has ``queued`` unwritten
    events: nothing, tell it once, or drop it.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, Final, Protocol

import attrs

from .errors import ProtocolError

__all__ = [
    "APPROVERS",
    "AnswerPolicy",
    "Backlog",
    "Participant",
    "ReadState",
    "Respond",
    "Roster",
    "RoutingRule",
    "TypingGate",
    "agent_names",
    "approvers_setting",
    "backlog_action",
    "compile_rule",
    "may_answer",
    "mentions",
]

#: Agents a message names with ``@name``.
_MENTION: Final = re.compile(r"(?<![\w@])@([A-Za-z0-9_.~-]+)")
#: The longest pattern of a routing rule, in characters.
MAX_RULE_PATTERN: Final = 256
#: RE2's memory budget for one rule's compiled program (bytes): a pattern that
#: compiles to more (``\p{L}{100}``...) is refused, so compiling one stays
#: under a millisecond.
RULE_MEMORY: Final = 1 << 16
#: The most routing rules a room has.
MAX_RULES: Final = 64


class Pattern(Protocol):
    """A compiled routing pattern (RE2's)."""

    def search(self, text: str) -> object | None:
        """A match of the pattern anywhere in ``text``, or ``None``."""
        ...


def compile_rule(pattern: str, where: str = "match") -> Pattern:
    """``pattern`` (RE2 syntax: no backreferences or lookaround) compiled case-insensitive.

    Raises:
        ProtocolError: ``invalid_request`` naming ``where`` (the field) and
            what is wrong: too long, too big a program, not RE2 syntax.
    """
    if len(pattern) > MAX_RULE_PATTERN:
        raise ProtocolError(
            f"{where} is {len(pattern)} characters long; at most {MAX_RULE_PATTERN}",
            code="invalid_request",
            field=where,
        )
    try:
        import re2  # google-re2: the server's extra; imported only when a room has rules
    except ImportError:  # pragma: no cover - installed with uamp[trio]
        raise ProtocolError(
            f"{where}: this server cannot match routing rules (google-re2 is not installed)",
            code="invalid_request",
            field=where,
        ) from None
    options = re2.Options()
    options.case_sensitive = False
    options.log_errors = False
    options.max_mem = RULE_MEMORY
    try:
        compiled: Pattern = re2.compile(pattern, options)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise ProtocolError(
            f"{where} is not a regular expression this server matches: {reason}",
            code="invalid_request",
            field=where,
        ) from None
    return compiled


@attrs.frozen(kw_only=True)
class Participant:
    """One session in a room.

    Attributes:
        member: Unique per session in the room (the binding's key).
        user_id: Who it is; presence is per user id.
        username: Display name.
        kind: ``"user"`` or ``"agent"``.
    """

    member: str
    user_id: str
    username: str | None = None
    kind: str = "user"


class Roster:
    """The participants of one room; presence per user (see the module docstring)."""

    def __init__(self) -> None:
        self._members: dict[str, Participant] = {}
        self._sessions_of: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._members)

    def __contains__(self, member: object) -> bool:
        return member in self._members

    def get(self, member: str) -> Participant | None:
        """The participant with key ``member``, or ``None``."""
        return self._members.get(member)

    @property
    def participants(self) -> list[Participant]:
        """Every participant, in joining order."""
        return list(self._members.values())

    def online(self) -> list[Participant]:
        """One participant per online user (the first session of each), in joining order."""
        seen: set[str] = set()
        out = []
        for p in self._members.values():
            if p.user_id not in seen:
                seen.add(p.user_id)
                out.append(p)
        return out

    def join(self, participant: Participant) -> bool:
        """Add a participant; ``True`` when its user just came online.

        Raises:
            ProtocolError: ``member`` is in the room already.
        """
        if participant.member in self._members:
            raise ProtocolError(
                f"{participant.member!r} is in the room already", code="invalid_event"
            )
        self._members[participant.member] = participant
        count = self._sessions_of.get(participant.user_id, 0)
        self._sessions_of[participant.user_id] = count + 1
        return count == 0

    def leave(self, member: str) -> tuple[Participant | None, bool]:
        """Remove a participant: ``(it, whether its user went offline)``, or ``(None, False)``."""
        participant = self._members.pop(member, None)
        if participant is None:
            return None, False
        left = self._sessions_of[participant.user_id] - 1
        if left:
            self._sessions_of[participant.user_id] = left
            return participant, False
        del self._sessions_of[participant.user_id]
        return participant, True

    def users(self, kind: str | None = None) -> list[str]:
        """The online user ids (of one ``kind`` when given), in joining order."""
        return [p.user_id for p in self.online() if kind is None or p.kind == kind]


class _Typing:
    __slots__ = ("last_input", "sent_at", "shown", "wanted")

    def __init__(self) -> None:
        self.shown = False  # what the others were last told
        self.wanted = False  # what the user last said
        self.sent_at = float("-inf")
        self.last_input = float("-inf")


class TypingGate:
    """Throttles ``input.typing`` into ``presence.typing``; see the module docstring.

    Args:
        min_interval: Least time between two broadcasts for one user (s).
        timeout: A user shown typing who sends nothing for this long is
            cleared (s).

    Every method returns the broadcasts due, as ``(user_id, is_typing)``.
    """

    def __init__(self, min_interval: float = 0.25, timeout: float = 5.0) -> None:
        if min_interval < 0 or timeout <= 0:
            raise ValueError("min_interval must be >= 0 and timeout > 0")
        self.min_interval = min_interval
        self.timeout = timeout
        self._users: dict[str, _Typing] = {}

    def update(self, user_id: str, is_typing: bool, now: float) -> list[tuple[str, bool]]:
        """The user says it is (or stopped) typing at ``now``."""
        state = self._users.get(user_id)
        if state is None:
            if not is_typing:
                return []
            state = self._users[user_id] = _Typing()
        state.wanted = is_typing
        if is_typing:
            state.last_input = now
        return self._due(user_id, state, now)

    def clear(self, user_id: str, now: float) -> list[tuple[str, bool]]:
        """The user posted a message or left: not typing any more, told at once if shown."""
        state = self._users.pop(user_id, None)
        if state is None or not state.shown:
            return []
        return [(user_id, False)]

    def poll(self, now: float) -> list[tuple[str, bool]]:
        """Broadcasts that became due by ``now`` (held states, timeouts)."""
        out: list[tuple[str, bool]] = []
        for user_id, state in list(self._users.items()):
            if state.wanted and now - state.last_input >= self.timeout:
                state.wanted = False
            out.extend(self._due(user_id, state, now))
            if not (state.wanted or state.shown) and now - state.sent_at >= self.min_interval:
                del self._users[user_id]  # nothing held, nothing to space: forget
        return out

    def next_deadline(self) -> float | None:
        """When :meth:`poll` may next have something to say, or ``None``."""
        deadlines = []
        for state in self._users.values():
            if state.wanted != state.shown:
                deadlines.append(state.sent_at + self.min_interval)
            if state.wanted:
                deadlines.append(state.last_input + self.timeout)
        return min(deadlines) if deadlines else None

    def _due(self, user_id: str, state: _Typing, now: float) -> list[tuple[str, bool]]:
        if state.wanted == state.shown or now - state.sent_at < self.min_interval:
            return []
        state.shown = state.wanted
        state.sent_at = now
        return [(user_id, state.shown)]


class ReadState:
    """Per user, the highest message sequence number read."""

    def __init__(self, reads: Mapping[str, int] | None = None) -> None:
        self._reads: dict[str, int] = dict(reads or {})

    def mark(self, user_id: str, seq: int, last_seq: int) -> bool:
        """``user_id`` read up to ``seq``; ``True`` when that moved its mark forward.

        Raises:
            ProtocolError: ``seq`` names no message of the room (``unknown_message``).
        """
        if seq < 1 or seq > last_seq:
            raise ProtocolError(
                f"no message {seq} in this chat (last is {last_seq})", code="unknown_message"
            )
        if seq <= self._reads.get(user_id, 0):
            return False
        self._reads[user_id] = seq
        return True

    def of(self, user_id: str) -> int:
        """The user's mark (0: nothing read)."""
        return self._reads.get(user_id, 0)

    def items(self) -> list[tuple[str, int]]:
        """Every ``(user_id, seq)`` mark."""
        return list(self._reads.items())

    def as_dict(self) -> dict[str, int]:
        """The marks as a JSON-ready dict."""
        return dict(self._reads)


def mentions(text: str) -> list[str]:
    """The names ``text`` mentions with ``@name``, in order, each once."""
    seen: dict[str, None] = {}
    for name in _MENTION.findall(text):
        seen.setdefault(name.rstrip("."), None)
    return list(seen)


@attrs.frozen(kw_only=True)
class RoutingRule:
    """Section 12 in a chat: messages matching ``match`` go to ``agent``.

    Attributes:
        match: A regular expression (RE2 syntax) searched in the message
            text, case-insensitive; compiled when the rule is made.
        agent: The agent that answers.
        priority: Higher wins when several rules match.

    Raises:
        ProtocolError: ``invalid_request``: ``match`` is refused
            (:func:`compile_rule`).
    """

    match: str
    agent: str
    priority: int = 0
    _pattern: Pattern = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_pattern", compile_rule(self.match))

    def matches(self, text: str) -> bool:
        """Whether ``text`` matches the rule (time linear in ``text``)."""
        return self._pattern.search(text) is not None


class Respond(enum.Enum):
    """When agents answer a chat message."""

    EVERY = "every"
    MENTION = "mention"
    RULES = "rules"
    NONE = "none"


@attrs.frozen(kw_only=True)
class AnswerPolicy:
    """Which agents answer a chat message; see the module docstring.

    Attributes:
        respond: ``every`` message (each agent in the room), only when
            ``mention`` ed, by ``rules`` (the best matching rule's agent; an
            ``@mention`` still works), or ``none``.
        rules: The routing rules for ``rules``.
    """

    respond: Respond = Respond.MENTION
    rules: tuple[RoutingRule, ...] = ()

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> AnswerPolicy:
        """The policy from its JSON form ``{"respond": ..., "rules": [...]}``.

        Raises:
            ProtocolError: ``invalid_event`` naming the bad field.
        """
        if not data:
            return cls()
        try:
            respond = Respond(data.get("respond", "mention"))
        except ValueError:
            allowed = ", ".join(r.value for r in Respond)
            raise ProtocolError(
                f"chat.respond must be one of {allowed}, got {data.get('respond')!r}",
                code="invalid_event",
            ) from None
        rules = []
        raw_rules = data.get("rules") or []
        if not isinstance(raw_rules, list) or len(raw_rules) > MAX_RULES:
            raise ProtocolError(
                f"chat.rules must be a list of at most {MAX_RULES} rules",
                code="invalid_request",
                field="chat.rules",
            )
        for n, raw in enumerate(raw_rules):
            field = f"chat.rules[{n}]"
            try:
                match, agent = raw["match"], raw["agent"]
                priority = int(raw.get("priority", 0))
                if not (isinstance(match, str) and isinstance(agent, str)):
                    raise TypeError
            except (KeyError, TypeError, ValueError, AttributeError):
                raise ProtocolError(
                    f"{field} needs match (a regular expression), agent (a name) "
                    "and an integer priority",
                    code="invalid_request",
                    field=field,
                ) from None
            try:
                rules.append(RoutingRule(match=match, agent=agent, priority=priority))
            except ProtocolError as exc:  # the pattern: say which rule's
                where = f"{field}.{exc.field}"
                raise ProtocolError(f"{field}.{exc.message}", code=exc.code, field=where) from None
        return cls(respond=respond, rules=tuple(rules))

    def to_json(self) -> dict[str, Any]:
        """The JSON form :meth:`from_json` reads."""
        out: dict[str, Any] = {"respond": self.respond.value}
        if self.rules:
            out["rules"] = [
                {"match": r.match, "agent": r.agent, "priority": r.priority} for r in self.rules
            ]
        return out

    def choose(self, text: str, agents: Sequence[str], *, from_agent: bool = False) -> list[str]:
        """The agents (of those in the room) that answer ``text``, in order."""
        if from_agent or not agents or self.respond is Respond.NONE:
            return []
        if self.respond is Respond.EVERY:
            return list(agents)
        named = [a for a in mentions(text) if a in agents]
        if self.respond is Respond.MENTION or named:
            return named
        best: RoutingRule | None = None
        for rule in self.rules:
            better = best is None or rule.priority > best.priority
            if better and rule.agent in agents and rule.matches(text):
                best = rule
        return [best.agent] if best is not None else []


class Backlog(enum.Enum):
    """What to do with a participant's connection that has events queued."""

    OK = "ok"
    WARN = "warn"
    DROP = "drop"


def backlog_action(queued: int, limit: int, *, warned: bool) -> Backlog:
    """``DROP`` past ``limit``; ``WARN`` once past half of it; else ``OK``."""
    if queued > limit:
        return Backlog.DROP
    if queued > limit // 2 and not warned:
        return Backlog.WARN
    return Backlog.OK


def agent_names(participants: Iterable[Participant]) -> list[str]:
    """The agents among ``participants``, each once, in order."""
    seen: dict[str, None] = {}
    for p in participants:
        if p.kind == "agent":
            seen.setdefault(p.user_id, None)
    return list(seen)


# --- who may answer an agent's question in a room (docs/human-in-the-loop.md) ---------------

#: The room setting ``chat.approvals``: who may answer an interrupt of an
#: agent answering in the room -- the member whose message it answers
#: (``caller``, the default), the room's owner, or any member.
APPROVERS: Final = ("caller", "owner", "members")


def approvers_setting(value: object) -> str:
    """A valid ``chat.approvals`` value.

    Raises:
        ProtocolError: ``invalid_event`` for anything else.
    """
    if value not in APPROVERS:
        raise ProtocolError(
            f"chat.approvals must be one of {', '.join(APPROVERS)}, got {value!r}",
            code="invalid_event",
        )
    return str(value)


def may_answer(
    setting: str,
    who: tuple[str, str],
    *,
    caller: tuple[str, str],
    owner: tuple[str, str],
    members: Collection[tuple[str, str]],
) -> bool:
    """Whether principal ``who`` may answer an interrupt of a room's agent under ``setting``.

    The caller always may (the interrupt is theirs); ``owner`` adds the
    room's owner, ``members`` every principal in the room.
    """
    if who == caller:
        return True
    if setting == "owner":
        return who == owner
    if setting == "members":
        return who in members
    return False
