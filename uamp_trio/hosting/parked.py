"""Turns that outlive their request: a run paused for a person, read on by a later request.

Theory of operation
-------------------
Some protocols end their HTTP response when the agent asks a person:
AG-UI's ``RUN_FINISHED`` with an interrupt outcome, the AI SDK's
``tool-approval-request``, a ``uamp_approve`` tool call on Chat Completions.
The run itself must not end with the response: it waits for the answer
(``app.interrupts``, docs/human-in-the-loop.md), which may come from the
same client's next request or from any other transport. :class:`ParkedTurns`
(``app.parked``) runs such a turn in the server's background nursery and
lets requests read it, one at a time:

* :meth:`ParkedTurns.start` starts a response (a
  :class:`~uamp_trio.hosting.turns.ResponseRunner` whose sink is the turn's
  backlog) and registers its :class:`ParkedTurn` under a key (the agent, the
  session, the principal);
* a request reads it with :meth:`ParkedTurn.read` until the run *pauses* --
  an ``interrupt.request`` is pending and nothing else follows at once
  (sibling tool calls that ask at the same moment are read too) -- or ends;
* when it paused, the request ends and the turn stays registered. A later
  request of the same principal on the same session finds it
  (:meth:`ParkedTurns.find`), answers (``app.interrupts.answer``), tells
  the turn which interrupts it answered (:meth:`ParkedTurn.answered`) and
  reads on. An answer from another transport lets the run go on with nobody
  reading: its events wait in the backlog for the next reader.

Bounds: a backlog holds at most ``max_backlog`` events. An agent that
outruns it waits while a request reads (backpressure); with nobody reading
the turn is cancelled. A turn that ended is dropped once read to the end; a
turn that paused (a later request may come for its rest) waits ``linger``
seconds for one; a turn that never paused and lost its reader is dropped
when it ends. One turn per key: a transport refuses to
start a second one while the first is parked (its client has interrupts to
answer first).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import AsyncGenerator, Callable
from typing import Final

import attrs
import trio

from uamp_proto import events as ev
from uamp_proto.interrupts import Interrupt
from uamp_proto.payment import Charge
from uamp_proto.principal import Principal
from uamp_proto.responder import Responder, TurnRequest

from .interrupts import Interrupts, ResponsePort
from .turns import DEFAULT_TURN_OPTIONS, ResponseOutcome, ResponseRunner, TurnOptions

__all__ = [
    "DEFAULT_LINGER",
    "DEFAULT_MAX_BACKLOG",
    "ParkedTurn",
    "ParkedTurns",
    "TurnKey",
    "turn_key",
    "waiting_on",
]

log = logging.getLogger("uamp_trio.parked")

#: ``(agent, session id, (principal scheme, principal id))``.
TurnKey = tuple[str, str, tuple[str, str]]

#: Events a parked turn keeps for its next reader.
DEFAULT_MAX_BACKLOG: Final = 4096
#: Seconds a turn that ended waits for a reader before it is dropped.
DEFAULT_LINGER: Final = 600.0
#: Scheduler passes a reader gives sibling tasks to ask too before it calls the run paused.
_SETTLE_PASSES: Final = 3


def turn_key(agent: str, session_id: str, principal: Principal) -> TurnKey:
    """The key a turn of ``principal`` on ``session_id`` of ``agent`` is parked under."""
    return (agent, session_id, principal.key)


@attrs.define(eq=False)
class ParkedTurn:
    """One response running in the background, read by one request at a time."""

    key: TurnKey
    max_backlog: int
    runner: ResponseRunner | None = None
    #: Interrupts asked and not resolved, by id, in the order asked.
    asked: dict[str, ev.Event] = attrs.field(factory=dict)
    finished: bool = False
    reading: bool = False
    #: A request ended with the turn paused: later requests may come for it.
    parked: bool = False
    _backlog: deque[ev.Event] = attrs.field(factory=deque)
    _changed: trio.Event = attrs.field(factory=trio.Event)
    _read_out: trio.Event = attrs.field(factory=trio.Event)
    #: Kept when the run ends and the runner is let go.
    _outcome: ResponseOutcome | None = None
    _principal: Principal | None = None

    @property
    def outcome(self) -> ResponseOutcome | None:
        """How the response ended (``None`` while it runs)."""
        return self.runner.outcome if self.runner is not None else self._outcome

    @property
    def principal(self) -> Principal:
        """Who owns it (the principal of its request)."""
        if self.runner is not None:
            return self.runner.request.principal
        assert self._principal is not None
        return self._principal

    def _let_go(self) -> None:
        """The run ended: keep what it said, drop the runner.

        The runner's sink is this turn, so the two (and the request, with its
        conversation) would otherwise only be freed by the garbage collector.
        """
        runner = self.runner
        if runner is not None:
            self._outcome, self._principal = runner.outcome, runner.request.principal
            self.runner = None

    @property
    def paused(self) -> bool:
        """Whether the run waits on interrupts and has nothing more to say for now."""
        return bool(self.asked) and not self._backlog and not self.finished

    def cancel(self) -> None:
        """Cancel the run (it ends with ``response.cancelled``)."""
        if self.runner is not None:
            self.runner.cancel()

    def answered(self, interrupt_ids: list[str]) -> None:
        """The caller answered these: they no longer hold the run paused."""
        for iid in interrupt_ids:
            self.asked.pop(iid, None)

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def sink(self, event: ev.Event) -> None:
        """The runner's sink: keep the event for the reader."""
        kind = event.type
        iid = getattr(event, "interrupt_id", None)
        if kind == "interrupt.request" and isinstance(iid, str):
            self.asked[iid] = event
        elif kind == "interrupt.resolved" and isinstance(iid, str):
            self.asked.pop(iid, None)
        self._backlog.append(event)
        self._wake()
        runner = self.runner
        while len(self._backlog) > self.max_backlog and runner is not None:
            if not self.reading:
                if not runner.cancel_requested:
                    log.warning("parked turn %s: nobody reads its backlog; cancelled", self.key[1])
                    runner.cancel()
                return  # the cancellation's own events may pass the bound
            await self._changed.wait()

    async def read(self) -> AsyncGenerator[ev.Event, None]:
        """The run's events until it pauses (see :attr:`paused`) or ends.

        Raises:
            RuntimeError: Another request reads it already.
        """
        if self.reading:
            raise RuntimeError("a parked turn has one reader at a time")
        self.reading = True
        try:
            while True:
                while self._backlog:
                    event = self._backlog.popleft()
                    self._wake()
                    yield event
                if self.finished:
                    self._read_out.set()
                    return
                if self.asked and await self._settled():
                    self.parked = True
                    return
                if not self._backlog and not self.finished:
                    await self._changed.wait()
        finally:
            self.reading = False
            self._wake()

    async def _settled(self) -> bool:
        """Whether nothing follows the pending interrupts after a few scheduler passes."""
        for _ in range(_SETTLE_PASSES):
            await trio.lowlevel.checkpoint()
            if self._backlog or self.finished or not self.asked:
                return False
        return True


class ParkedTurns:
    """The host's turns that outlive their request; see the module docstring.

    Args:
        max_backlog: Events one turn keeps for its next reader.
        linger: Seconds a turn that ended waits for a reader.
        turns: The turn options every turn started here runs on (the host
            sets :attr:`turns` to its own whenever its configuration changes).
    """

    def __init__(
        self,
        *,
        max_backlog: int = DEFAULT_MAX_BACKLOG,
        linger: float = DEFAULT_LINGER,
        turns: TurnOptions = DEFAULT_TURN_OPTIONS,
    ) -> None:
        if max_backlog < 1:
            raise ValueError("max_backlog must be at least 1")
        self.max_backlog = max_backlog
        self.linger = linger
        #: The host's turn options (the output bound ...), read by each start.
        self.turns = turns
        self._turns: dict[TurnKey, ParkedTurn] = {}

    def __len__(self) -> int:
        return len(self._turns)

    def find(self, key: TurnKey) -> ParkedTurn | None:
        """The turn parked under ``key``, if any (another principal's key finds nothing)."""
        return self._turns.get(key)

    def start(
        self,
        spawner: Callable[..., None],
        agent: Responder,
        request: TurnRequest,
        *,
        key: TurnKey,
        charge: Charge | None = None,
        port: ResponsePort | None = None,
        on_end: Callable[[], None] | None = None,
    ) -> ParkedTurn:
        """Start ``request`` 's response in the background; its :class:`ParkedTurn`.

        Args:
            spawner: ``start_soon`` of the nursery the run lives in (the
                app's background nursery).
            key: What a later request finds it by (:func:`turn_key`).
            charge: Money held for the response; settled when it ends.
            port: The response's interrupt port: it sends its events to the
                runner's ``emit`` while the agent runs, and is closed when
                the response ends.
            on_end: Called once the response ended (e.g. to give up the
                conversation's place: a paused turn still holds it).

        The response runs on :attr:`turns` (the host's: its output bound ...).

        A turn that ended and waits for its last reader is replaced.

        Raises:
            RuntimeError: A turn that has not ended is parked under ``key``.
        """
        earlier = self._turns.get(key)
        if earlier is not None and not earlier.finished:
            raise RuntimeError("a turn is parked under this key already")
        turn = ParkedTurn(key=key, max_backlog=self.max_backlog)
        turn.runner = self.turns.runner(agent, request, turn.sink, charge=charge)
        if port is not None:
            port.emit = turn.runner.emit
        self._turns[key] = turn
        spawner(self._drive, turn, port, on_end)
        return turn

    async def _drive(
        self,
        turn: ParkedTurn,
        port: ResponsePort | None,
        on_end: Callable[[], None] | None,
    ) -> None:
        assert turn.runner is not None
        try:
            await turn.runner.run()
        finally:
            if port is not None:
                port.close()  # no cycle keeps the request (and its conversation) alive
            turn._let_go()
            turn.finished = True
            turn._wake()
            if on_end is not None:
                on_end()
        try:
            # Someone may still come for the rest while a request reads it or
            # it paused; a turn that never paused and lost its reader has
            # nobody: dropped at once.
            with trio.move_on_after(self.linger):
                while not turn._read_out.is_set() and (turn.parked or turn.reading):
                    changed = turn._changed
                    await changed.wait()
        finally:
            if self._turns.get(turn.key) is turn:
                del self._turns[turn.key]


async def waiting_on(
    interrupts: Interrupts, principal: Principal, agent: str, session_id: str
) -> list[Interrupt]:
    """The interrupts ``principal`` may answer that runs of ``agent`` on ``session_id`` wait on.

    Another principal's interrupts are not there (they read as missing);
    with the Redis relay, runs paused on other processes are.
    """
    return [it for it in await interrupts.paused(principal, session_id) if it.agent == agent]
