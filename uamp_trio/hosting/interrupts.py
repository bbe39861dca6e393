"""Pending interrupts of the host: runs paused for a person, answerable from anywhere.

Theory of operation
-------------------
One :class:`Interrupts` per host (``app.interrupts``). Every transport uses
the same two calls (docs/human-in-the-loop.md, "The hosting API"):

* :meth:`Interrupts.port` gives a response its
  :class:`~uamp_proto.interrupts.InterruptPort` (``TurnRequest.interrupts``).
  When the agent asks, the port completes the interrupt (id, session,
  response, agent, expiry), records it in the store under the response's
  principal (bounded per principal), hands the transport an
  :class:`~uamp_proto.events.InterruptRequest` through ``emit`` -- the
  transport renders it natively (the UAMP event, an AG-UI interrupt, an A2A
  ``input-required`` ...) -- and waits for the answer or the expiry. Then
  it forgets the interrupt, emits :class:`~uamp_proto.events.InterruptResolved`
  and returns the answer to the agent. The run and its response stay open
  meanwhile: a paused run is an *active* run of its session
  (:meth:`Interrupts.paused` tells which interrupt it waits on; with a relay,
  also for a run paused on another process).
* :meth:`Interrupts.answer` answers by interrupt id, from any connection or
  transport: the principal must own it (another principal's id reads exactly
  like a missing one), the answer must fit its kind; then the paused run
  goes on. Answering is not a new turn of the conversation.

For a client that does not declare interrupts (``extensions.interrupts`` in
its capabilities) the configured policy applies: ``deny`` refuses the call
at once (the model sees the refusal), ``wait`` pauses anyway (someone may
answer from another client).

Time: expiry deadlines use the trio clock for waiting and the wall clock
(``clock``) for the ``expires_at`` clients see.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
import uuid
from collections.abc import Callable
from typing import Any, Final, Literal, Protocol

import attrs
import trio

from uamp_proto import events as ev
from uamp_proto import jsonrpc as rpc
from uamp_proto.adapters._human import Ask, dismissed
from uamp_proto.errors import UampError
from uamp_proto.interrupts import (
    DEFAULT_EXPIRY,
    DEFAULT_MAX_PENDING,
    Answer,
    Interrupt,
    InterruptLimitError,
    PendingTable,
    answer_problem,
    interrupt_fields,
    outcome_of,
)
from uamp_proto.principal import Principal
from uamp_proto.responder import Emit, TurnRequest

__all__ = [
    "InterruptNotFound",
    "InterruptPolicy",
    "InterruptRelay",
    "Interrupts",
    "InvalidAnswer",
    "ResponsePort",
]

log = logging.getLogger("uamp_trio.interrupts")

#: What happens to an interrupt for a client that does not declare support.
InterruptPolicy = Literal["deny", "wait"]
POLICIES: Final = ("deny", "wait")


class InterruptNotFound(UampError):
    """No pending interrupt with that id for this principal (or it expired)."""

    code = "interrupt_not_found"


class InvalidAnswer(UampError):
    """The answer does not fit the interrupt (an approval without ``approved`` ...)."""

    code = "invalid_answer"


def _check(interrupt: Interrupt, answer: Answer) -> None:
    problem = answer_problem(interrupt, answer)
    if problem is not None:
        raise InvalidAnswer(problem)


class InterruptRelay(Protocol):
    """Where interrupts meet answers given on other processes (a Redis store:
    :class:`uamp_trio.stores.interrupts_redis.RedisInterruptRelay`)."""

    poll: float

    async def publish(
        self, interrupt: Interrupt, owner: tuple[str, str], ttl: float | None
    ) -> None:
        """Record a pending interrupt."""

    async def lookup(self, interrupt_id: str, owner: tuple[str, str]) -> Interrupt | None:
        """The owner's pending interrupt ``interrupt_id``, if recorded."""

    async def send_answer(self, interrupt_id: str, answer: Answer) -> None:
        """Hand an answer to the waiting process."""

    async def take_answer(self, interrupt_id: str) -> Answer | None:
        """An answer given elsewhere, if any."""

    async def asked_before(self, interrupt: Interrupt, owner: tuple[str, str]) -> Interrupt | None:
        """The interrupt recorded for the same ask of the same run (a lost process's)."""

    async def forget(self, interrupt: Interrupt) -> None:
        """Drop the record and its answers."""

    async def owned(self, owner: tuple[str, str]) -> list[Interrupt]:
        """Every interrupt recorded for ``owner`` (on any process)."""


def _owner(principal: Principal) -> tuple[str, str]:
    return (principal.scheme, principal.id)


@attrs.define(eq=False)
class _Waiter:
    interrupt: Interrupt
    event: trio.Event = attrs.field(factory=trio.Event)
    answer: Answer | None = None
    #: Who else may answer (besides the owner).
    also: Callable[[Principal], bool] | None = None


class Interrupts:
    """The host's pending interrupts; see the module docstring.

    Args:
        expiry: Seconds an interrupt waits for its answer (``None``: forever).
        max_pending: Interrupts one principal may have pending at once.
        policy: For clients that do not declare interrupts: ``deny`` or ``wait``.
        clock: Wall-clock seconds, for ``expires_at``.

    Raises:
        ValueError: An unknown policy, or a bound below 1.
    """

    def __init__(
        self,
        *,
        expiry: float | None = DEFAULT_EXPIRY,
        max_pending: int = DEFAULT_MAX_PENDING,
        policy: InterruptPolicy = "deny",
        clock: Callable[[], float] = time.time,
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"interrupt policy must be one of {POLICIES}, not {policy!r}")
        if expiry is not None and expiry <= 0:
            raise ValueError("interrupt expiry must be positive")
        self.expiry = expiry
        self.policy: InterruptPolicy = policy
        self.clock = clock
        self._table = PendingTable(max_pending)
        self._waiters: dict[str, _Waiter] = {}
        #: Shares pending interrupts with other processes (``uamp serve
        #: --store redis://...``); ``None``: this process only.
        self.relay: InterruptRelay | None = None

    # --- the API every transport uses -------------------------------------------

    def port(
        self,
        request: TurnRequest | None,
        *,
        supported: bool = True,
        also: Callable[[Principal], bool] | None = None,
    ) -> ResponsePort:
        """The interrupt port of one response (set its ``emit`` before the agent runs).

        Args:
            request: The response's request (its principal owns the interrupts);
                ``None``: given later by :meth:`ResponsePort.bind` (a request
                built with the port in it, rather than copied to hold it).
            supported: Whether the client can show and answer interrupts; if
                not, the host's :attr:`policy` applies.
            also: Other principals who may see and answer them (a chat
                room's setting); the owner always may.
        """
        return ResponsePort(self, request, supported, also)

    async def answer(self, principal: Principal, interrupt_id: str, answer: Answer) -> Interrupt:
        """Answer interrupt ``interrupt_id`` for ``principal``; the paused run goes on.

        Returns the interrupt answered.

        Raises:
            InterruptNotFound: No such pending interrupt of this principal
                (also: another principal's, or expired).
            InvalidAnswer: The answer does not fit its kind.
        """
        owner = _owner(principal)
        found = self.get(principal, interrupt_id)
        waiter = self._waiters.get(interrupt_id)
        if found is None and self.relay is not None:
            # Paused in another process: its run takes the answer from the relay.
            remote = await self.relay.lookup(interrupt_id, owner)
            if remote is not None and not remote.expired(self.clock()):
                _check(remote, answer)
                await self.relay.send_answer(interrupt_id, answer)
                return remote
        if found is None or waiter is None or waiter.answer is not None:
            raise InterruptNotFound(f"no pending interrupt {interrupt_id!r}")
        _check(found, answer)
        waiter.answer = answer
        waiter.event.set()
        return found

    async def answer_reply(
        self,
        principal: Principal,
        ask: Ask,
        reply: rpc.Response | rpc.ErrorResponse,
        parse: Callable[[Any, Ask], Answer],
        what: str,
    ) -> None:
        """Answer ``ask`` with a client's JSON-RPC reply to the protocol's own question.

        For transports that ask the client with a request of their own (ACP
        ``session/request_permission``, MCP ``elicitation/create``): an error
        reply, or a result ``parse`` cannot read (logged as ``what``), is the
        ask dismissed; an interrupt answered elsewhere or expired meanwhile is
        left as it is.
        """
        answer = dismissed(ask)
        if isinstance(reply, rpc.Response):
            try:
                answer = parse(reply.result, ask)
            except rpc.JSONRPCError as exc:
                log.info("%s not understood: %s", what, exc.message)
        with contextlib.suppress(InterruptNotFound, InvalidAnswer):
            await self.answer(principal, ask.id, answer)

    async def paused(self, principal: Principal, session_id: str) -> list[Interrupt]:
        """The interrupts ``principal`` may answer that runs of ``session_id`` wait on.

        Empty: no run of the session is paused for this principal. A paused
        run is an active run of its session; a message that answers one of
        these is an answer, not a new turn. With a :attr:`relay`, runs paused
        on other processes count too.
        """
        return [it for it in await self.pending(principal) if it.session_id == session_id]

    async def pending(self, principal: Principal) -> list[Interrupt]:
        """Every pending interrupt ``principal`` may answer, oldest first.

        With a :attr:`relay`, also those of the principal's runs paused on
        other processes (another principal's are never there). When the
        store does not answer, this process's alone.
        """
        here = [it for it in self._table.find() if self.get(principal, it.id) is not None]
        if self.relay is None:
            return here
        try:
            elsewhere = await self.relay.owned(_owner(principal))
        except UampError as exc:
            log.warning("cannot list interrupts on other processes: %s", exc)
            return here
        now = self.clock()
        known = {it.id for it in here}
        here += [it for it in elsewhere if it.id not in known and not it.expired(now)]
        return sorted(here, key=lambda it: math.inf if it.expires_at is None else it.expires_at)

    def get(self, principal: Principal, interrupt_id: str) -> Interrupt | None:
        """The pending interrupt ``interrupt_id`` if ``principal`` owns it (or may answer it)."""
        found = self._table.get(interrupt_id, _owner(principal), self.clock())
        if found is None:
            waiter = self._waiters.get(interrupt_id)
            if waiter is not None and waiter.also is not None and waiter.also(principal):
                found = self._table.get(interrupt_id, None, self.clock())
        return found

    def __len__(self) -> int:
        return len(self._table)

    # --- the port's side ----------------------------------------------------------

    async def _wait_here_or_there(self, relay: InterruptRelay, waiter: _Waiter) -> None:
        """Until an answer comes, given here or (through the relay) on another process."""
        interrupt = waiter.interrupt
        while not waiter.event.is_set():
            with trio.move_on_after(relay.poll):
                await waiter.event.wait()
            if waiter.event.is_set():
                return
            try:
                remote = await relay.take_answer(interrupt.id)
            except UampError as exc:  # the store is down: answers given here still count
                log.warning("cannot read answers for interrupt %s: %s", interrupt.id, exc)
                continue
            if remote is not None and answer_problem(interrupt, remote) is None:
                waiter.answer = remote
                waiter.event.set()

    async def _wait(
        self,
        interrupt: Interrupt,
        owner: tuple[str, str],
        emit: Emit,
        also: Callable[[Principal], bool] | None = None,
    ) -> Answer:
        existing = next(
            (
                it
                for it in self._table.find(session_id=interrupt.session_id, key=interrupt.key)
                if it.response_id == interrupt.response_id
            ),
            None,
        )
        if existing is not None:  # asked again (a resumed run): same interrupt, same id
            interrupt = attrs.evolve(interrupt, id=existing.id, expires_at=existing.expires_at)
            waiter = self._waiters[existing.id]
        else:
            self._table.add(interrupt, owner)
            waiter = self._waiters[interrupt.id] = _Waiter(interrupt, also=also)
        answer: Answer | None = None
        relay = self.relay
        try:
            if relay is not None and existing is None:
                lost = await relay.asked_before(interrupt, owner)
                if lost is not None:  # carried on from a lost process: keep the id shown
                    self._table.remove(interrupt.id)
                    self._waiters.pop(interrupt.id, None)
                    interrupt = attrs.evolve(interrupt, id=lost.id)
                    waiter.interrupt = interrupt
                    self._table.add(interrupt, owner)
                    self._waiters[interrupt.id] = waiter
                await relay.publish(interrupt, owner, self.expiry)
            await emit(ev.InterruptRequest(**interrupt_fields(interrupt)))
            deadline = (
                trio.current_time() + max(0.0, interrupt.expires_at - self.clock())
                if interrupt.expires_at is not None
                else float("inf")
            )
            with trio.move_on_at(deadline):
                if relay is None:
                    await waiter.event.wait()
                else:
                    await self._wait_here_or_there(relay, waiter)
            answer = waiter.answer or Answer.expiry()
        finally:
            self._waiters.pop(interrupt.id, None)
            self._table.remove(interrupt.id)
            if relay is not None:
                with trio.CancelScope(shield=True), contextlib.suppress(UampError):
                    await relay.forget(interrupt)
        await emit(
            ev.InterruptResolved(
                interrupt_id=interrupt.id,
                outcome=outcome_of(interrupt, answer),
                response_id=interrupt.response_id,
            )
        )
        return answer


class ResponsePort:
    """The :class:`~uamp_proto.interrupts.InterruptPort` of one response.

    Attributes:
        emit: Where the interrupt events go (the response's ``emit``); set
            it before the agent runs.
    """

    def __init__(
        self,
        host: Interrupts,
        request: TurnRequest | None,
        supported: bool,
        also: Callable[[Principal], bool] | None = None,
    ) -> None:
        self._host = host
        self._request = request
        self._supported = supported
        self._also = also
        self.emit: Emit | None = None
        self._closed = False

    def bind(self, request: TurnRequest) -> None:
        """The request this port asks for (made with ``request=None``, before the request)."""
        self._request = request

    def close(self) -> None:
        """The response ended: nothing more can be asked through this port.

        Drops :attr:`emit`, which refers (through the response's runner) back
        to the request that holds this port, and the request itself (which
        holds it when bound): without the cycles the request
        and its conversation are freed when the response ends rather than by
        the garbage collector, which walks the whole conversation for each
        one it finds (a cost that grew with the session).
        """
        self.emit = None
        self._request = None  # which may hold this port (see bind)
        self._closed = True

    async def ask(self, interrupt: Interrupt) -> Answer:
        """Record, show and wait for ``interrupt``; see :class:`Interrupts`."""
        host = self._host
        if not self._supported and host.policy == "deny":
            return Answer(approved=False, reason="this client cannot answer approvals")
        if self._closed:
            raise RuntimeError("the response has ended: nothing more can be asked")
        request = self._request
        if self.emit is None or request is None:
            raise RuntimeError("the port's emit or request is not set")
        interrupt = attrs.evolve(
            interrupt,
            id=str(uuid.uuid4()),  # the host's own: what clients answer by
            agent=interrupt.agent or request.agent,
            session_id=request.session_id,
            response_id=request.response_id,
            expires_at=None if host.expiry is None else host.clock() + host.expiry,
        )
        try:
            return await host._wait(interrupt, _owner(request.principal), self.emit, self._also)
        except InterruptLimitError as exc:
            log.info("interrupt refused for %s: %s", request.principal.id, exc)
            return Answer(approved=False, reason=str(exc))
