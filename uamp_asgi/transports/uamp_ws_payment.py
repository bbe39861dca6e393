"""What a UAMP WebSocket connection on ASGI does for payment: locks, holds, verdicts.

Theory of operation
-------------------
Payment (UAMP 3.3 and 7.2; spec 004), as ``uamp serve``: before the agent
runs, its price is locked on the session's latest payment token
(:meth:`Host.open_charge <uamp_asgi.app.Host.open_charge>`; a ledger answers
from a worker thread). A response that token does not pay for is *held*:
``payment.required`` (:func:`uamp_proto.payment.held_event`, with the pending
``response_id`` and an ``expires_at`` ``Config.payment_wait`` away) goes out
and the response's task waits. Each token presented (``payment.submit``, or
``payment_token`` on ``session.update``/``input.text`` answering it) is
counted against the principal's rate, then judged in one task per session
(:meth:`PaymentPart.settle`): ``payment.accepted`` wakes the held response,
which locks its price and runs; ``payment.error`` keeps it waiting. A
``response.cancel`` ends the wait ``response.cancelled``; the deadline ends it
``response.error`` ``payment_required``. No agent runs unpaid. The lock
belongs to the response, not to one call of the agent: a response that waits
for the client's tool results keeps it (:attr:`Connection.charges`) for its
next round, and it is settled once, from the response's own tracker, just
before its terminal event is sent, which ``payment.balance`` follows (or
when its session or connection ends with it unfinished). A tool result that
arrives while the previous round is still finishing starts the next round
when that one ends.

An agent asks for more money mid-response (spec 004 "Mid-Stream Token
Top-Up") by emitting ``payment.required`` or raising
:class:`~uamp_proto.payment.PaymentRequiredError`: the response is held the
same way (its wait is :meth:`PaymentPart.await_payment`) and goes on once a
token is accepted -- the emitted request locks that much more on the
response's charge first, a raised one runs the agent again on the
conversation so far (:mod:`uamp_proto.topup`, shared with ``uamp serve``).
Unpaid by the deadline, the response ends ``response.error``
``payment_required`` and is settled within what was locked.

:class:`PaymentPart` is that side of :class:`~uamp_asgi.transports.uamp_ws.Connection`
(which subclasses it and sets every attribute it declares); its methods
and :class:`_Unpaid` import from :mod:`uamp_asgi.transports.uamp_ws` too.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import anyio

from uamp_proto import events as ev
from uamp_proto.errors import UampError
from uamp_proto.payment import (
    Charge,
    PaymentRequiredError,
    PaymentState,
    attempt_events,
    balance_of,
    bounded_wait,
    held_event,
    pricing_of,
    refusal,
    settle_event,
)
from uamp_proto.responder import Responder, ResponderError, TurnRequest
from uamp_proto.response import ResponseTracker
from uamp_proto.topup import PayingAgent, PaymentStops

if TYPE_CHECKING:
    from uamp_proto.connection import ServerConnection
    from uamp_proto.principal import Principal

    from ..app import Host

__all__ = ["PaymentPart"]


class PaymentPart:
    """A connection's payment side (module docstring): the price of each response locked
    before its agent runs, held until paid, settled once from what it used."""

    if TYPE_CHECKING:
        host: Host
        conn: ServerConnection
        principal: Principal
        agents: dict[str, Responder]
        paid: dict[str, anyio.Event]
        settling: set[str]
        settle_again: set[str]
        holds: dict[str, anyio.CancelScope]
        charges: dict[str, tuple[Charge, ResponseTracker]]
        stops: dict[str, tuple[ResponseTracker, PaymentStops]]

        def spawn(self, func: Callable[..., Coroutine[Any, Any, Any]], *args: object) -> None: ...

        async def owe(self, event: ev.Event, sid: str | None = None) -> None: ...

        def request_of(self, sid: str, agent: Responder) -> TurnRequest | None: ...

    def paying(self, sid: str, agent: Responder, core: ResponseTracker) -> PayingAgent:
        """``agent``, held for the payments it asks for mid-response (:mod:`uamp_proto.topup`)."""
        stops = self.stops.get(sid)
        if stops is None or stops[0] is not core:  # a new response: its own count
            stops = self.stops[sid] = (core, PaymentStops())

        async def hold(required: ev.PaymentRequired) -> None:
            try:
                await self.await_payment(sid, required)
            except _Unpaid as unpaid:
                why = unpaid.why or "the session ended while the response waited for payment"
                raise ResponderError("payment_required", why) from None

        def again() -> TurnRequest:
            request = self.request_of(sid, agent)
            ctx = self.conn.sessions.get(sid)
            if request is None or ctx is None or ctx.response is not core:
                raise ResponderError("payment_required", "the response ended while held")
            return request

        def charge() -> Charge | None:
            held = self.charges.get(sid)
            return held[0] if held is not None and held[1] is core else None

        def token() -> str | None:
            ctx = self.conn.sessions.get(sid)
            return ctx.payment.token if ctx is not None else None

        return PayingAgent(
            agent, stops=stops[1], hold=hold, again=again, charge=charge, token=token
        )

    async def settle_charge(self, sid: str) -> ev.PaymentBalance | None:
        """Settle the price held for ``sid`` 's response (once) from what it used;
        the ``payment.balance`` to send after it, if any."""
        held = self.charges.pop(sid, None)
        if held is None:
            return None
        charge, tracker = held
        used = tracker.usage is not None or bool(tracker.output)
        with anyio.CancelScope(shield=True):
            balance = await charge.settle(tracker.usage, used=used)
        return balance

    async def settle_all(self) -> None:
        """The connection ended: responses left waiting for tool results are settled."""
        for sid in list(self.charges):
            await self.settle_charge(sid)

    async def preflight(self, sid: str, agent: Responder, response_id: str) -> Charge | None:
        """Lock the response's price on the session's token, holding it until paid.

        Raises:
            _Unpaid: The session ended, the client cancelled, or nothing was
                paid by the requirements' ``expires_at``.
        """
        while True:
            ctx = self.conn.sessions.get(sid)
            if ctx is None:
                raise _Unpaid(None)
            negotiation = ctx.payment
            if not negotiation.blocks_content:
                try:
                    return await self.host.open_charge(
                        agent, negotiation.token, response_id, self.principal
                    )
                except PaymentRequiredError as unpaid:
                    required = held_event(negotiation, response_id, sid, unpaid)
            else:
                required = held_event(negotiation, response_id, sid)
            await self.await_payment(sid, required)

    async def await_payment(self, sid: str, required: ev.PaymentRequired) -> None:
        """Send ``payment.required`` and wait until a token is accepted.

        Raises:
            _Unpaid: As :meth:`preflight`.
        """
        required, wait = bounded_wait(required, time.time(), self.host.config.payment_wait)
        await self.owe(required, sid)
        with anyio.move_on_after(wait) as scope:
            self.holds[sid] = scope
            try:
                while True:
                    ctx = self.conn.sessions.get(sid)
                    if ctx is None:
                        raise _Unpaid(None)
                    if ctx.payment.state is PaymentState.ACCEPTED:
                        return
                    await self.paid.setdefault(sid, anyio.Event()).wait()
            finally:
                ended = self.holds.pop(sid, None) is None
        if ended:  # end_hold: cancelled, or the session or connection ended
            raise _Unpaid("cancelled" if sid in self.conn.sessions else None)
        raise _Unpaid(f"no payment was accepted within {wait:g} s (the requirements' expires_at)")

    def end_hold(self, sid: str) -> None:
        """End the wait of session ``sid`` 's response held for payment, if any."""
        scope = self.holds.pop(sid, None)
        if scope is not None:
            scope.cancel()

    def end_holds(self) -> None:
        """The client left: responses held for payment end (nobody will pay them)."""
        for sid in list(self.holds):
            self.end_hold(sid)

    async def ask_settle(self, sid: str) -> None:
        """Judge the session's latest token in a task of its own (one per session at a time).

        Past the principal's rate the token is refused unjudged.
        """
        if sid not in self.conn.sessions:
            return
        now = time.monotonic()
        verdict = self.host.payment_attempts.hit(self.principal.key, now, time.time())
        for event in attempt_events(verdict, sid):
            await self.owe(event, sid)
        if not verdict.allowed:
            return
        if sid in self.settling:
            self.settle_again.add(sid)
            return
        self.settling.add(sid)
        self.spawn(self.settle_rounds, sid)

    async def settle_rounds(self, sid: str) -> None:
        try:
            while True:
                self.settle_again.discard(sid)
                await self.settle(sid)
                if sid not in self.settle_again:
                    return
        finally:
            self.settling.discard(sid)

    async def settle(self, sid: str) -> None:
        """Answer the token presented with the policy's verdict, and wake a held response."""
        ctx = self.conn.sessions.get(sid)
        agent = self.agents.get(sid)
        if ctx is None or agent is None:
            return
        negotiation = ctx.payment
        policy = self.host.config.payment_policy
        unpaid = await refusal(policy, agent.name, negotiation.token, pricing_of(agent))
        remaining = None if unpaid is not None else await balance_of(policy, negotiation.token)
        if self.conn.sessions.get(sid) is not ctx:
            return  # the session ended while the ledger answered
        pay_id = f"pay_{uuid.uuid4().hex[:24]}"
        await self.owe(settle_event(negotiation, sid, unpaid, remaining, pay_id), sid)
        woken = self.paid.pop(sid, None)
        if woken is not None:
            woken.set()


class _Unpaid(UampError):
    """A held response ends unpaid (``why``: ``None`` the session ended, ``"cancelled"``,
    else the expiry's message)."""

    def __init__(self, why: str | None) -> None:
        super().__init__(why)
        self.why = why

    def event(self, core: ResponseTracker, sid: str) -> ev.Event:
        """The response's last event."""
        if self.why == "cancelled":
            return core.cancelled_event(session_id=sid)
        return core.error_event("payment_required", str(self.why), session_id=sid)
