"""The busy-conversation gate every transport runs its turns through (docs/busy.md).

Loop-neutral (its one wait is :mod:`anyio`'s), so both servers gate their
conversations with it.

A transport wraps each run of a conversation in :meth:`ConversationGate.turn`::

    async with host.conversations.turn(key, principal, policy) as slot:
        ...                         # start the run
        slot.bind(runner.cancel)    # how to stop it if a later message cuts in
        ...                         # the run
    if slot.dropped: ...            # rolled back: keep nothing of its turn

``turn`` applies the policy with the pure :class:`uamp_proto.busy.Lanes`:
the block is entered at once (idle conversation), after the runs before it
(``enqueue``), or after the running one was cancelled (``interrupt``,
``rollback``); a refused message raises :class:`~uamp_proto.busy.BusyError`
before anything ran, which the transport answers with its protocol's busy
error. A caller that goes away while waiting leaves the queue.

A transport whose runs mostly start in an idle conversation and end before
anybody else arrives (the UAMP session host: the core already serialises a
session's responses) :meth:`~ConversationGate.defer` s the run instead of
entering it: the gate enters its slot only when another message arrives for
the same conversation, just before applying the policy to that message, so
everybody sees the same moves as if it had entered at once, and the usual run
costs no slot, ticket or lane.

The gate lives in one process: across nodes (the Redis store) the same
conversation reached through two processes is not serialised; see
docs/busy.md.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable, Hashable
from contextlib import asynccontextmanager
from typing import Any

import anyio

from uamp_proto.busy import (
    BUSY,
    QUEUE_FULL,
    BusyError,
    BusyLimits,
    BusyPolicy,
    Lanes,
    Move,
    policy_of,
)
from uamp_proto.principal import Principal

__all__ = ["ConversationGate", "Slot", "http_status"]


def http_status(error: BusyError) -> int:
    """An HTTP status for a refused message: 409 busy, 429 queue full, 400 a bad policy."""
    return {BUSY: 409, QUEUE_FULL: 429}.get(error.code, 400)


class Slot:
    """One message's place in its conversation (from :meth:`ConversationGate.enter`).

    ``async with slot`` waits for the message's turn and holds the
    conversation until the block ends; :meth:`close` gives the place up
    (also of a message that never ran). Both are safe to repeat.
    """

    __slots__ = (
        "_cancel",
        "_gate",
        "_held",
        "_is_ready",
        "_key",
        "_on_ready",
        "_woken",
        "handoff",
        "inherited",
        "stopped",
        "ticket",
        "waited",
    )

    def __init__(self, gate: ConversationGate, key: Hashable, ticket: int, runs: bool) -> None:
        self._gate = gate
        self._key = key
        self.ticket = ticket
        #: ``"keep"`` (interrupted) or ``"drop"`` (rolled back) once a later
        #: message cut in; ``None`` otherwise.
        self.stopped: str | None = None
        #: Whether the message had to wait for earlier runs.
        self.waited = not runs
        self._cancel: Callable[[], None] | None = None
        self._on_ready: Callable[[], None] | None = None
        #: Whether the message's turn has come; :attr:`_woken` is made only
        #: for a message that waits (most run at once and never need one).
        self._is_ready = runs
        self._woken: anyio.Event | None = None
        #: ``True`` while the conversation is this slot's; ``None`` once closed.
        self._held: bool | None = runs
        #: What the run leaves to the next message of its conversation (the
        #: transport's choice: the conversation as it now stands), set before
        #: the slot closes; the next slot finds it in :attr:`inherited`.
        self.handoff: Any = None
        #: The :attr:`handoff` of the run this message waited for (``None``:
        #: it did not wait, or that run left nothing).
        self.inherited: Any = None

    @property
    def dropped(self) -> bool:
        """Whether the run was rolled back: its turn is to leave no trace."""
        return self.stopped == "drop"

    @property
    def interrupted(self) -> bool:
        """Whether a later message stopped the run (interrupt or rollback)."""
        return self.stopped is not None

    @property
    def ready(self) -> bool:
        """Whether the message's turn has come (or it never had to wait)."""
        return self._is_ready

    def bind(self, cancel: Callable[[], None]) -> None:
        """How to cancel the run; called at once when it was already asked to stop."""
        self._cancel = cancel
        if self.stopped is not None:
            cancel()

    def on_ready(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` when the message's turn comes (a loop that picks ready slots)."""
        self._on_ready = callback

    async def wait(self) -> None:
        """Wait for the message's turn; a wait that fails (cancelled) gives the place up.

        Raises:
            RuntimeError: The slot was closed.
        """
        if self.ticket < 0:
            return  # a free slot (ConversationGate.free) never waits
        if self._held is None:
            raise RuntimeError("this slot was closed")
        if self._is_ready:
            return
        if self._woken is None:
            self._woken = anyio.Event()
        try:
            await self._woken.wait()
        except BaseException:
            self.close()
            raise

    async def __aenter__(self) -> Slot:
        await self.wait()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Give the conversation (or the place in its queue) up; the next message runs."""
        # Nothing stops a run that gave its place up. The callbacks are often
        # bound methods of the slot's owner, which holds the slot: no cycle.
        self._cancel = self._on_ready = None
        held, self._held = self._held, None
        if held is None or self.ticket < 0:
            return
        self._gate._release(self._key, self, held)

    def _stop(self, how: str) -> None:
        self.stopped = how
        if self._cancel is not None:
            self._cancel()

    def _wake(self) -> None:
        self._held = True
        self._is_ready = True
        if self._woken is not None:
            self._woken.set()
        if self._on_ready is not None:
            self._on_ready()


class ConversationGate:
    """The busy policy of one server's conversations (one per server, as its host's gate).

    Args:
        limits: The bounds on waiting messages.
        default: The policy when a request names none (``uamp serve --on-busy``).
    """

    def __init__(
        self, limits: BusyLimits | None = None, default: BusyPolicy = BusyPolicy.ENQUEUE
    ) -> None:
        self.lanes = Lanes(limits)
        self.default = default
        self._slots: dict[int, Slot] = {}
        self._ids = itertools.count()
        #: Runs let into an idle conversation without a slot yet (:meth:`defer`):
        #: key -> what enters the run's slot once somebody else asks.
        self._deferred: dict[Hashable, Callable[[], None]] = {}

    def configure(self, limits: BusyLimits, default: BusyPolicy) -> None:
        """New limits and default (the server's configuration; waiting messages stay)."""
        self.lanes.limits = limits
        self.default = default

    def policy(self, metadata: object) -> BusyPolicy:
        """The policy ``metadata`` asks for (``uamp.on_busy``), or the server's.

        Raises:
            BusyError: ``invalid_policy``.
        """
        return policy_of(metadata, self.default)

    def busy(self, key: Hashable) -> bool:
        """Whether a run of ``key`` is active."""
        return key in self._deferred or self.lanes.running(key) is not None

    def defer(self, key: Hashable, enter: Callable[[], None]) -> bool:
        """Let a run into idle conversation ``key`` without entering its slot yet.

        What :meth:`enter` would do for it (it runs at once: every policy
        runs in an idle conversation) is put off until somebody else
        arrives for ``key``: :meth:`enter` then calls ``enter`` first (the
        run enters its slot, as if it had entered when it started), then
        applies the policy to the newcomer. A run nobody arrives behind --
        the usual one -- costs no slot, ticket or lane. The caller
        :meth:`undefer` s it when the run ends, whoever came meanwhile.

        Returns:
            ``False`` (nothing was put off): ``key`` is not idle; enter the
            run's slot now.
        """
        if key in self._deferred or self.lanes.running(key) is not None:
            return False
        self._deferred[key] = enter
        return True

    def undefer(self, key: Hashable, enter: Callable[[], None]) -> bool:
        """The run :meth:`defer` let in ended; ``False``: its slot was entered meanwhile."""
        if self._deferred.get(key) is enter:
            del self._deferred[key]
            return True
        return False

    def enter(self, key: Hashable, principal: Principal, policy: BusyPolicy | None = None) -> Slot:
        """A message for conversation ``key`` arrives: its place, or a refusal.

        Apply the policy at once: an interrupted or rolled-back run is
        cancelled now. The caller must close the slot (``async with`` or
        :meth:`Slot.close`) however the message ends.

        Raises:
            BusyError: The message is refused (``conversation_busy``,
                ``queue_full``); it holds nothing.
        """
        if self._deferred:
            deferred = self._deferred.pop(key, None)
            if deferred is not None:
                deferred()  # the run let in before takes its place first (defer)
        ticket = next(self._ids)
        admission = self.lanes.arrive(key, ticket, principal.key, policy or self.default)
        if admission.move is Move.REFUSE:
            assert admission.refusal is not None
            raise admission.refusal
        slot = Slot(self, key, ticket, admission.runs)
        self._slots[ticket] = slot
        if admission.stop is not None:
            victim = self._slots.get(admission.stop)  # type: ignore[call-overload]
            if victim is not None:
                victim._stop("drop" if admission.drop else "keep")
        return slot

    def free(self) -> Slot:
        """A slot that holds nothing, for a message that is not a new turn.

        A message that answers a paused run's question (docs/human-in-the-loop.md)
        goes on with that run: it is never held, refused or stopped by the policy.
        """
        return Slot(self, None, -1, True)

    @asynccontextmanager
    async def turn(
        self, key: Hashable, principal: Principal, policy: BusyPolicy | None = None
    ) -> AsyncIterator[Slot]:
        """:meth:`enter` and hold the conversation for the block.

        Raises:
            BusyError: The message is refused; nothing was held.
        """
        async with self.enter(key, principal, policy) as slot:
            yield slot

    def _release(self, key: Hashable, slot: Slot, held: bool) -> None:
        self._slots.pop(slot.ticket, None)
        if not held:
            self.lanes.leave(key, slot.ticket)
            return
        nxt = self.lanes.finish(key, slot.ticket)
        if nxt is not None:
            following = self._slots[nxt]  # type: ignore[index]
            following.inherited = slot.handoff
            following._wake()
