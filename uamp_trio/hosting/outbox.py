"""The bounded queue between a connection's producers and its one writer.

Theory of operation
-------------------
Every connection that carries UAMP sessions (a WebSocket, an HTTP+SSE
session, a relay link) has one writer task and many producers: the reader,
which owes replies (``session.created``, errors, pongs, acks); each
session's worker, which sends a response's events; a chat room, which fans
events out. They meet in an :class:`Outbox` of encoded events, which the
writer drains whole (:meth:`Outbox.take`), so a burst becomes one write.

Three kinds of entry, three rules:

* owed replies (:meth:`Outbox.put_owed`) never wait and go first; a peer
  that makes the server owe more than ``max_owed`` of them (it sends and
  never reads) is refused with :class:`Overloaded`, and the transport
  drops it;
* response events (:meth:`Outbox.put`) wait for room, in the whole queue
  and in their session's :class:`Quota`: a client that stops reading stops
  the agent (the socket fills, the writer blocks, the outbox fills, the
  agent's ``emit`` waits), and one busy session of a multiplexed connection
  cannot take the queue the others share;
* fanned-out chat events (:meth:`Outbox.push`) never wait; the room bounds
  them itself.

*Held writes* (:func:`write_at_yields`): a producer can frame and write its
own events during its scheduler step, when nothing is queued and the
transport's writer is idle (:class:`DirectWriter`): a short response then
costs no step of the writer's.
"""

from __future__ import annotations

import contextvars
import types
from collections import deque
from collections.abc import Callable, Coroutine, Generator
from typing import Any, Protocol, TypeVar

import trio

from uamp_proto.errors import UampError

__all__ = [
    "DirectWriter",
    "Discard",
    "Outbox",
    "OutboxClosed",
    "Overloaded",
    "Quota",
    "write_at_yields",
]

_T = TypeVar("_T")


class OutboxClosed(UampError):
    """The outbox was closed; nothing more will be taken from it."""


class Overloaded(UampError):
    """The peer made the server owe more replies than it may queue."""


class Outbox:
    """A bounded queue of encoded events between producers and one writer.

    Response tasks :meth:`put` (waiting while it is full); the reader adds the
    replies it owes with :meth:`put_owed` (never waiting; those go first);
    a chat room fans its events out with :meth:`push` (never waiting; the
    room decides what to do with a connection whose pushed events pile up);
    the writer :meth:`take` s everything ready at once. An event put for a
    :class:`Quota` (one session's) also waits while that quota's share is
    queued, so one session cannot fill a queue the others share.

    *Held writes.* A transport whose writer can write without waiting sets
    :attr:`direct`. A producer run by :func:`write_at_yields` (a session's
    worker) is *holding* during each of its scheduler steps: with nothing
    queued, the events it offers are framed by :attr:`direct` instead of
    queued, and written in one go when the step ends (:meth:`release`) or
    when the producer asks (:meth:`write_held`: a response's first delta). The
    writer is not woken for them: a short response costs its worker's step
    and no step of the writer's. Nobody else runs during the step, so
    nothing can be queued or written in between, and order is kept.

    Args:
        size: Most queued events from :meth:`put`.
        max_owed: Most queued replies from :meth:`put_owed`.
        per_quota: Most queued events of one :class:`Quota`.
    """

    def __init__(self, size: int = 64, max_owed: int = 1024, per_quota: int | None = None) -> None:
        self._size = size
        self._max_owed = max_owed
        self._per_quota = size if per_quota is None else per_quota
        self._items: deque[bytes] = deque()
        #: The quota of each of :attr:`_items` (``None``: none), in step with it.
        self._quotas: deque[Quota | None] = deque()
        self._owed: deque[bytes] = deque()
        self._pushed: deque[bytes] = deque()
        self._space = trio.lowlevel.ParkingLot()
        self._ready = trio.lowlevel.ParkingLot()
        self._poked = False
        self._closed = False
        #: Tasks that may still :meth:`put` (the host's running responses).
        self.producers = 0
        #: The transport's writer of held events (``None``: everything is queued).
        self.direct: DirectWriter | None = None
        #: Whether the task running now holds its events (see :func:`write_at_yields`).
        self.holding = False
        self._held = False
        #: Set by a producer that handed a worker work to start (the session
        #: host's ``response.create``); the transport's reader takes it
        #: (:meth:`follow`).
        self.woken = False
        #: The reader waiting in :meth:`follow` for a worker's step to end.
        self._follower: trio.lowlevel.Task | None = None

    def __len__(self) -> int:
        return len(self._items) + len(self._owed) + len(self._pushed)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    async def put(self, data: bytes, quota: Quota | None = None) -> None:
        """Queue one event, waiting while the outbox (or ``quota``'s share) is full.

        Raises:
            OutboxClosed: The outbox is (or gets) closed.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        while not self.offer(data, quota):
            if self._closed:
                raise OutboxClosed
            try:
                await self._space.park()
            except BaseException:
                self._wake_for_space()  # woken (maybe) but leaving: pass the turn on
                raise
        self._wake_for_space()

    def offer(self, data: bytes, quota: Quota | None = None) -> bool:
        """Queue one event if there is room, without waiting; ``False`` when full or closed.

        For a producer that passed a cancel point just before (the turn
        runner's ``emit``), so :meth:`put` 's own would be a second one.
        """
        if self._closed or len(self._items) >= self._size:
            return False
        if (
            self.holding
            and not self._items
            and not self._owed
            and not self._pushed
            and self.direct is not None
            and self.direct.hold(data)
        ):
            self._held = True
            return True
        if quota is not None:
            if quota.queued >= self._per_quota:
                return False
            quota.queued += 1
        self._items.append(data)
        self._quotas.append(quota)
        if self._ready:
            self._ready.unpark_all()
        return True

    def release(self) -> None:
        """The holding task's step ends: write what it held (see the class docstring).

        Then the reader waiting in :meth:`follow`, if any, is woken.
        """
        self.holding = False
        self.write_held()
        self.woken = False  # a worker's step ended: nothing is left to follow
        follower = self._follower
        if follower is not None:
            self._follower = None
            trio.lowlevel.reschedule(follower)

    async def follow(self) -> None:
        """Wait until a holding task's step ends (:meth:`release`); for the reader.

        A reader that just handed a worker a response waits here before it
        waits for its socket again: the worker runs first, and the reader's
        registration with the I/O poller (a system call and about ten calls
        in trio) comes after the response's first write instead of before
        it. Every step of a worker ends in :meth:`release`, a step that
        blocks too, so the reader is back within one step of the worker's
        (where a ``response.cancel`` is read). Cancellable.
        """
        self.woken = False
        self._follower = trio.lowlevel.current_task()
        await trio.lowlevel.wait_task_rescheduled(self._unfollow)

    def _unfollow(self, _: object) -> trio.lowlevel.Abort:
        self._follower = None
        return trio.lowlevel.Abort.SUCCEEDED

    def write_held(self) -> None:
        """Write what the holding task held so far, now; it holds on for the rest of its step."""
        if self._held:
            self._held = False
            if self.direct is not None:
                self.direct.flush()

    def _wake_for_space(self) -> None:
        """Wake one more waiting producer while there is room for it."""
        if self._space and len(self._items) < self._size:
            self._space.unpark()

    def _taken(self) -> None:
        """The queued events were handed to the writer: free their quotas and wake producers.

        As many producers are woken as there is room for, not all of them:
        with a thousand sessions' responses waiting, waking all for 64
        places made each drain a thousand task switches, most of them to
        park again. A woken producer that puts and sees room left, or that
        leaves without putting, wakes the next (:meth:`_wake_for_space`).
        """
        for quota in self._quotas:
            if quota is not None:
                quota.queued -= 1
        self._quotas.clear()
        self._items.clear()
        if self._space:
            self._space.unpark(count=self._size)

    def put_owed(self, data: bytes) -> None:
        """Queue a reply the server owes, without waiting.

        Raises:
            Overloaded: More than ``max_owed`` replies are unwritten.
        """
        if self._closed:
            return
        if len(self._owed) >= self._max_owed:
            raise Overloaded(f"more than {self._max_owed} replies are waiting to be written")
        self._owed.append(data)
        if self._ready:
            self._ready.unpark_all()

    def push(self, data: bytes) -> int:
        """Queue an event fanned out to this connection, without waiting.

        Returns:
            How many pushed events are now unwritten (0 when closed): the
            caller bounds it (:func:`uamp_proto.chat.backlog_action`).
        """
        if self._closed:
            return 0
        self._pushed.append(data)
        if self._ready:
            self._ready.unpark_all()
        return len(self._pushed)

    def drop_pushed(self) -> int:
        """Forget the unwritten pushed events (a participant dropped for lagging); how many."""
        count = len(self._pushed)
        self._pushed.clear()
        return count

    def poke(self) -> None:
        """Wake the writer with nothing queued (the transport has frames of its own)."""
        self._poked = True
        if self._ready:
            self._ready.unpark_all()

    async def take(self) -> list[bytes]:
        """Everything queued (owed replies first); waits for at least one or a poke.

        Raises:
            OutboxClosed: The outbox is closed and empty.
        """
        while not self._items and not self._owed and not self._pushed and not self._poked:
            if self._closed:
                raise OutboxClosed
            await self._ready.park()
        self._poked = False
        return self._drain_into([])

    async def take_more(self, batch: list[bytes], rounds: int = 32) -> list[bytes]:
        """Let ready producers add to ``batch`` before it is written (coalescing).

        Yields to the scheduler while the outbox keeps growing, at most
        ``rounds`` times, then adds whatever arrived. Each trio ``send_all``
        costs as much as framing several small events, so writing what the
        producers can add within a few scheduler rounds is cheaper than
        writing each event on its own; an idle producer ends the wait at once,
        and with no producer alive (:attr:`producers`) there is nobody to
        wait for: a response that ran to its end in one step is written
        without a scheduler round.
        """
        for _ in range(rounds):
            before = len(self)
            if before >= self._size or not self.producers:
                break
            await trio.lowlevel.cancel_shielded_checkpoint()
            if len(self) == before:
                break
        if self._items or self._owed or self._pushed:
            self._drain_into(batch)
        return batch

    def _drain_into(self, batch: list[bytes]) -> list[bytes]:
        """Move everything queued (owed replies first) onto ``batch``; free its quotas."""
        batch.extend(self._owed)
        self._owed.clear()
        if self._pushed:
            batch.extend(self._pushed)
            self._pushed.clear()
        batch.extend(self._items)
        self._taken()
        return batch

    def close(self) -> None:
        """Refuse further events; :meth:`take` drains what is queued, then raises."""
        self._closed = True
        self._ready.unpark_all()
        self._space.unpark_all()


class DirectWriter(Protocol):
    """What writes an :class:`Outbox` 's held events: the transport's connection."""

    def hold(self, data: bytes) -> bool:
        """Take ``data`` to write at :meth:`flush`; ``False``: it must be queued."""
        ...

    def flush(self) -> None:
        """Write what was held, without waiting (the writer sends what the socket refuses)."""
        ...


@types.coroutine
def write_at_yields(
    coro: Coroutine[Any, Any, _T],
    outbox: Outbox,
    step_end: Callable[[], None] | None = None,
    blocking: Callable[[], None] | None = None,
    context: contextvars.Context | None = None,
) -> Generator[Any, Any, _T]:
    """Run ``coro`` holding its events in ``outbox``; each time it yields, write them.

    Awaited in place of ``coro``: every value ``coro`` yields to the trio
    scheduler (the only way a task gives up the CPU) passes through here, and
    the events ``coro`` offered since it last resumed are written first
    (:meth:`Outbox.release`), so nothing it emitted waits while it blocks.
    ``step_end`` runs after that write, still before any other task runs
    (the session's deferred record, :meth:`SessionHost._respond`), and
    ``blocking`` after it when ``coro`` yields (not when it returns or
    raises): a reader running a response hands its reading on there
    (:mod:`uamp_trio.hosting.ws_connection`). With ``context``, each step of
    ``coro`` runs in it, as :func:`~uamp_trio.engines.contexts.in_context`
    runs them (one wrapper on the await chain instead of two).
    What comes back (a value or an exception, a cancellation included) goes
    into ``coro`` unchanged.
    """
    value: Any = None
    error: BaseException | None = None
    while True:
        outbox.holding = True
        try:
            if context is None:
                step = coro.send(value) if error is None else coro.throw(error)
            elif error is None:
                step = context.run(coro.send, value)
            else:
                step = context.run(coro.throw, error)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        finally:
            outbox.release()
            if step_end is not None:
                step_end()
        if blocking is not None:
            blocking()
        try:
            value, error = (yield step), None
        except BaseException as exc:  # handed to coro, which decides
            value, error = None, exc


class Quota:
    """One producer's (a session's) count of events queued in an :class:`Outbox`."""

    __slots__ = ("queued",)

    def __init__(self) -> None:
        self.queued = 0


class Discard(Outbox):
    """Where a detached host's events go: nowhere (the event log has them)."""

    def offer(self, data: bytes, quota: Quota | None = None) -> bool:
        return True

    async def put(self, data: bytes, quota: Quota | None = None) -> None:
        await trio.lowlevel.checkpoint_if_cancelled()

    def put_owed(self, data: bytes) -> None:
        return

    def push(self, data: bytes) -> int:
        return 0
