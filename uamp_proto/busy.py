"""A busy conversation: one policy for a message that arrives while a run is active.

Theory of operation
-------------------
A *conversation* is whatever a transport continues from one message to the
next: a UAMP session, an AG-UI thread, an A2A context, an ACP session, a chat
room's agent, a Responses conversation. When a new message arrives while a
run of the same conversation is active (streaming, waiting for client tools,
paused on a human's answer), the server applies one :class:`BusyPolicy`:

``reject``
    The new message is refused with the protocol's busy error.
``enqueue``
    It runs after the current run (and after those queued before it), in order.
``interrupt``
    The current run is cancelled; its partial output stays in the
    conversation; the new message runs next.
``rollback``
    The current run is cancelled and its turn (input and output) is dropped
    from the conversation; the new message runs next.

:class:`Lanes` is the pure state machine behind every transport: one lane
per conversation key, holding the running ticket and the tickets waiting
behind it. A transport (through :mod:`uamp_trio.hosting.busy`) calls
:meth:`Lanes.arrive` when a message arrives, :meth:`Lanes.finish` when a run
ends and :meth:`Lanes.leave` when a waiting caller goes away; the answers
say what to do (run, wait, refuse, stop the running ticket). The moves are
the table :data:`MOVES`.

Waiting tickets are what a caller can make grow, so they are bounded twice
(:class:`BusyLimits`): per conversation and per principal (over every
conversation of that principal). A message past either bound is refused
with ``queue_full``, whatever the policy. Tickets that interrupt wait at the
head of the queue, behind earlier ones that interrupted, so messages that
cut in still run in the order they came.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Hashable, Mapping
from typing import Final

import attrs

from .errors import UampError

__all__ = [
    "BUSY",
    "DEFAULT_POLICY",
    "INVALID_POLICY",
    "MOVES",
    "POLICY_KEY",
    "QUEUE_FULL",
    "Admission",
    "BusyError",
    "BusyLimits",
    "BusyPolicy",
    "LaneState",
    "Lanes",
    "Move",
    "parse_policy",
    "policy_of",
]


class BusyPolicy(enum.Enum):
    """What happens to a message for a conversation whose run is active."""

    REJECT = "reject"
    ENQUEUE = "enqueue"
    INTERRUPT = "interrupt"
    ROLLBACK = "rollback"


#: ``uamp serve --on-busy``'s default.
DEFAULT_POLICY: Final = BusyPolicy.ENQUEUE

#: The key that carries a per-request policy in a protocol's metadata
#: (A2A message metadata, ACP ``_meta``, AG-UI ``forwardedProps``, UAMP
#: ``response.create`` extensions, Responses ``metadata``); see docs/busy.md.
POLICY_KEY: Final = "uamp.on_busy"

#: Error codes (also the protocol's ``code`` where it has one).
BUSY: Final = "conversation_busy"
QUEUE_FULL: Final = "queue_full"
INVALID_POLICY: Final = "invalid_policy"


@attrs.define(auto_exc=True)
class BusyError(UampError):
    """A message refused because its conversation is busy (or the value of a policy is bad).

    Attributes:
        message: Why, for a person.
        code: :data:`BUSY`, :data:`QUEUE_FULL` or :data:`INVALID_POLICY`.
    """

    message: str
    code: str = attrs.field(kw_only=True, default=BUSY)


def parse_policy(value: object) -> BusyPolicy:
    """The policy named ``value`` (``"reject"`` ... or a :class:`BusyPolicy`).

    Raises:
        BusyError: ``invalid_policy``: not one of the four names.
    """
    if isinstance(value, BusyPolicy):
        return value
    if isinstance(value, str):
        try:
            return BusyPolicy(value.strip().lower())
        except ValueError:
            pass
    names = ", ".join(p.value for p in BusyPolicy)
    raise BusyError(f"{POLICY_KEY} must be one of {names}, not {value!r}.", code=INVALID_POLICY)


def policy_of(metadata: object, default: BusyPolicy) -> BusyPolicy:
    """The policy a request asks for under :data:`POLICY_KEY` of ``metadata``, else ``default``.

    Raises:
        BusyError: ``invalid_policy``: the key holds something else than a policy name.
    """
    if not metadata or not isinstance(metadata, Mapping):
        return default  # nothing asked (the usual request): no ABC check
    value = metadata.get(POLICY_KEY)
    return default if value is None else parse_policy(value)


@attrs.frozen(kw_only=True)
class BusyLimits:
    """Bounds on waiting messages.

    Attributes:
        per_conversation: Messages one conversation may hold waiting.
        per_principal: Messages one principal may hold waiting over all its
            conversations.
    """

    per_conversation: int = 8
    per_principal: int = 32

    def __attrs_post_init__(self) -> None:
        if self.per_conversation < 1 or self.per_principal < 1:
            raise ValueError("busy queue limits must be at least 1")


class LaneState(enum.Enum):
    """A conversation's state, as the table sees it."""

    IDLE = "idle"  #: nothing runs
    RUNNING = "running"  #: a run is active and nobody asked it to stop
    STOPPING = "stopping"  #: the active run was asked to stop (interrupt or rollback)


class Move(enum.Enum):
    """What :meth:`Lanes.arrive` does with a message."""

    RUN = "run"  #: it runs now
    REFUSE = "refuse"  #: it is refused (``conversation_busy``)
    QUEUE = "queue"  #: it waits at the tail
    CUT_IN = "cut_in"  #: it waits at the head (behind earlier cut-ins); the run is stopped


#: The transitions: (the lane's state, the message's policy) -> the move.
MOVES: Final[Mapping[tuple[LaneState, BusyPolicy], Move]] = {
    **{(LaneState.IDLE, p): Move.RUN for p in BusyPolicy},
    (LaneState.RUNNING, BusyPolicy.REJECT): Move.REFUSE,
    (LaneState.RUNNING, BusyPolicy.ENQUEUE): Move.QUEUE,
    (LaneState.RUNNING, BusyPolicy.INTERRUPT): Move.CUT_IN,
    (LaneState.RUNNING, BusyPolicy.ROLLBACK): Move.CUT_IN,
    (LaneState.STOPPING, BusyPolicy.REJECT): Move.REFUSE,
    (LaneState.STOPPING, BusyPolicy.ENQUEUE): Move.QUEUE,
    (LaneState.STOPPING, BusyPolicy.INTERRUPT): Move.CUT_IN,
    (LaneState.STOPPING, BusyPolicy.ROLLBACK): Move.CUT_IN,
}


@attrs.frozen(kw_only=True)
class Admission:
    """The answer to :meth:`Lanes.arrive`.

    Attributes:
        move: What happens to the message.
        stop: The running ticket to cancel now, or ``None``.
        drop: Whether that ticket's turn is to be dropped (``rollback``);
            otherwise its partial output is kept (``interrupt``).
        refusal: The :class:`BusyError` of a refused message.
    """

    move: Move
    stop: Hashable | None = None
    drop: bool = False
    refusal: BusyError | None = None

    @property
    def runs(self) -> bool:
        """Whether the message runs at once."""
        return self.move is Move.RUN


#: The admission of a message that runs at once (frozen: one for all).
_RUNS: Final = Admission(move=Move.RUN)


@attrs.define
class _Lane:
    running: Hashable | None = None
    #: How the running ticket was asked to stop: None, "keep" or "drop".
    stopping: str | None = None
    cut_ins: int = 0  #: how many of the waiting tickets (at the head) cut in
    waiting: deque[tuple[Hashable, Hashable]] = attrs.Factory(deque)

    @property
    def state(self) -> LaneState:
        if self.running is None:
            return LaneState.IDLE
        return LaneState.RUNNING if self.stopping is None else LaneState.STOPPING


class Lanes:
    """Every busy conversation's running ticket and queue; see the module docstring.

    Tickets are hashable ids the caller makes up, unique per :class:`Lanes`;
    owners are principal keys (anything hashable). A conversation with nothing running and
    nothing waiting is forgotten.
    """

    def __init__(self, limits: BusyLimits | None = None) -> None:
        self.limits = limits or BusyLimits()
        self._lanes: dict[Hashable, _Lane] = {}
        self._queued: dict[Hashable, int] = {}  # owner -> waiting tickets
        #: What stopped each ticket that was asked to stop ("keep" or "drop").
        self._stopped: dict[Hashable, str] = {}

    def __len__(self) -> int:
        """How many conversations are busy."""
        return len(self._lanes)

    def state(self, key: Hashable) -> LaneState:
        """The state of conversation ``key``."""
        lane = self._lanes.get(key)
        return LaneState.IDLE if lane is None else lane.state

    def running(self, key: Hashable) -> Hashable | None:
        """The ticket running in ``key``, or ``None``."""
        lane = self._lanes.get(key)
        return None if lane is None else lane.running

    def waiting(self, key: Hashable) -> list[Hashable]:
        """The tickets waiting in ``key``, the next first."""
        lane = self._lanes.get(key)
        return [] if lane is None else [t for t, _ in lane.waiting]

    def queued_by(self, owner: Hashable) -> int:
        """How many tickets ``owner`` has waiting."""
        return self._queued.get(owner, 0)

    def stopped(self, ticket: Hashable) -> str | None:
        """``"keep"`` (interrupted), ``"drop"`` (rolled back) or ``None`` for ``ticket``."""
        return self._stopped.get(ticket)

    def arrive(
        self, key: Hashable, ticket: Hashable, owner: Hashable, policy: BusyPolicy
    ) -> Admission:
        """A message (``ticket``, from ``owner``) arrives for conversation ``key``."""
        lane = self._lanes.get(key)
        if lane is None:  # idle: every policy runs (the table's IDLE rows), the usual case
            self._lanes[key] = _Lane(running=ticket)
            return _RUNS
        move = MOVES[(lane.state, policy)]
        if move is Move.RUN:  # pragma: no cover - a lane that exists is never idle
            self._lanes[key] = _Lane(running=ticket)
            return _RUNS
        assert lane is not None
        if move is Move.REFUSE:
            refusal = BusyError(
                "A run is already active in this conversation; wait for it to end or cancel it.",
                code=BUSY,
            )
            return Admission(move=move, refusal=refusal)
        if len(lane.waiting) >= self.limits.per_conversation:
            return self._full("this conversation", self.limits.per_conversation)
        if self._queued.get(owner, 0) >= self.limits.per_principal:
            return self._full("this caller", self.limits.per_principal)
        self._queued[owner] = self._queued.get(owner, 0) + 1
        if move is Move.QUEUE:
            lane.waiting.append((ticket, owner))
            return Admission(move=move)
        lane.waiting.insert(lane.cut_ins, (ticket, owner))
        lane.cut_ins += 1
        drop = policy is BusyPolicy.ROLLBACK
        # A rollback after an interrupt of the same run still drops its turn.
        how = "drop" if drop or lane.stopping == "drop" else "keep"
        lane.stopping = how
        assert lane.running is not None
        self._stopped[lane.running] = how
        return Admission(move=move, stop=lane.running, drop=how == "drop")

    def finish(self, key: Hashable, ticket: Hashable) -> Hashable | None:
        """The run of ``ticket`` ended; returns the ticket that runs now, or ``None``.

        Raises:
            KeyError: ``ticket`` is not the one running in ``key``.
        """
        lane = self._lanes.get(key)
        if lane is None or lane.running != ticket:
            raise KeyError(ticket)
        self._stopped.pop(ticket, None)
        if not lane.waiting:
            del self._lanes[key]
            return None
        nxt, owner = lane.waiting.popleft()
        self._unqueue(owner)
        lane.cut_ins = max(0, lane.cut_ins - 1)
        lane.running, lane.stopping = nxt, None
        return nxt

    def leave(self, key: Hashable, ticket: Hashable) -> None:
        """A waiting ``ticket`` gave up (its caller went away); nothing if it does not wait."""
        lane = self._lanes.get(key)
        if lane is None:
            return
        for index, (waiting, owner) in enumerate(lane.waiting):
            if waiting == ticket:
                del lane.waiting[index]
                self._unqueue(owner)
                if index < lane.cut_ins:
                    lane.cut_ins -= 1
                return

    def _unqueue(self, owner: Hashable) -> None:
        left = self._queued[owner] - 1
        if left:
            self._queued[owner] = left
        else:
            del self._queued[owner]

    @staticmethod
    def _full(whose: str, limit: int) -> Admission:
        refusal = BusyError(
            f"Too many messages are waiting for {whose} (at most {limit}); retry later.",
            code=QUEUE_FULL,
        )
        return Admission(move=Move.REFUSE, refusal=refusal)
