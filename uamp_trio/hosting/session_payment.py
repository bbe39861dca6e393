"""The session host's payment side (UAMP 3.3, 7.2; spec 004).

Theory of operation
-------------------
Before an agent runs, the host locks the response's price on the session's
latest payment token (:meth:`PaymentPart._preflight`); a response that token
does not pay for is *held*: ``payment.required`` names it and the session's
worker parks until a ``payment.submit`` (or a ``payment_token`` on
``session.update`` or ``input.text``) is accepted, or the bounded wait ends
with ``response.error`` ``payment_required``. Tokens are judged off the
reader (:meth:`PaymentPart._ask_settle`, one task per session at a time,
rate-limited per principal), so a slow ledger never stalls the connection.
Mid-response top-ups go through :class:`HostPayingAgent`. The charge is
settled from the response's usage before its terminal event is sent or
logged, and ``payment.balance`` follows it.
"""

from __future__ import annotations

import contextlib
import logging
import uuid

import attrs
import trio

from uamp_proto import events as ev
from uamp_proto.errors import LocalProtocolError
from uamp_proto.payment import (
    Charge,
    PaymentRequiredError,
    PaymentState,
    attempt_events,
    bounded_wait,
    held_event,
    settle_event,
)
from uamp_proto.responder import ResponderError, TurnRequest
from uamp_proto.response import ResponseTracker
from uamp_proto.topup import TopUpAgent

from .session_state import HostState, ResponseState, SessionGone, SessionState

__all__ = ["HostPayingAgent", "PaymentPart"]

log = logging.getLogger("uamp_trio.sessions")


class HostPayingAgent(TopUpAgent):
    """The session's agent, held for the payments it asks for mid-response.

    :class:`uamp_proto.topup.TopUpAgent` (shared with ``uamp_asgi``) with
    this host's wait: an emitted ``payment.required`` pauses the agent in its
    ``emit`` until paid and the extra amount locked; a raised
    PaymentRequiredError holds the response, then ``respond`` is called again
    on the conversation so far (the output the agent produced before raising
    included) with the new payment token, under the same response id (spec
    004, "Payment Handling"). After :data:`~uamp_proto.topup.MAX_PAYMENT_ROUNDS`
    raises, or a top-up not paid in time, the error goes to the turn runner,
    which ends the response with ``response.error`` ``payment_required``.

    One object per response, its side of the payment as methods (no closures).
    """

    def __init__(
        self,
        host: PaymentPart,
        session: SessionState,
        response: ResponseState,
        create: ev.ResponseCreate,
    ) -> None:
        super().__init__(session.agent, response.stops)
        self._host = host
        self._session = session
        self._response = response
        self._create = create

    async def hold(self, required: ev.PaymentRequired) -> None:
        await self._host._hold_for_payment(self._session, self._response, required)

    def next_request(self) -> TurnRequest:
        retry = self._host._request(self._session, self._response.id, self._create)
        if retry is None:
            raise SessionGone
        return retry

    def charge(self) -> Charge | None:
        return self._response.charge

    def token(self) -> str | None:
        ctx = self._host._contexts.get(self._session.id)
        return ctx.payment.token if ctx is not None else None


class PaymentPart(HostState):
    """The session host's payment side (module docstring)."""

    async def _unpaid(self, agent: str, token: str | None) -> PaymentRequiredError | None:
        """What the app's payment policy asks before ``agent`` may answer, or ``None``."""
        app = self._app
        return None if app is None else await app.payment_required(agent, token)

    def _ask_settle(self, session: SessionState) -> None:
        """Have the latest payment token judged (:meth:`_settle`) in a task of its own.

        One task per session at a time (a flood of submits is one more
        round, not a task each); the reader never waits for the ledger.
        """
        if self._refuse_payment_attempt(session):
            return
        if session.settling:
            session.settle_again = True
            return
        session.settling = True
        self._nursery.start_soon(self._settle_rounds, session)

    def _refuse_payment_attempt(self, session: SessionState) -> bool:
        """Count a presented token for the session's principal; past the rate, refuse it.

        ``payment.error`` ``rate_limited`` (``can_retry``: the response stays
        held), with a ``rate_limit`` event saying when the window resets;
        the ledger is not asked. A ``rate_limit`` also warns as the rate
        comes near (UAMP 6.17).
        """
        app = self._app
        if app is None:
            return False
        verdict = app.payment_attempts.hit(
            session.principal.key, trio.current_time(), self._clock()
        )
        with contextlib.suppress(LocalProtocolError):
            for event in attempt_events(verdict, session.id):
                self._owe(event)
        return not verdict.allowed

    async def _settle_rounds(self, session: SessionState) -> None:
        try:
            while True:
                session.settle_again = False
                await self._settle(session)
                if not session.settle_again:
                    return
        finally:
            session.settling = False

    async def _settle(self, session: SessionState) -> None:
        """Answer a ``payment.submit`` (or a ``session.update`` token) with the policy's verdict.

        The token the client presented is checked with the same policy that
        demanded it: ``payment.accepted`` releases a held or paused response
        (its task is woken), ``payment.error`` ``token_invalid`` with
        ``can_retry`` keeps it waiting for another token.
        """
        ctx = self._contexts.get(session.id)
        if ctx is None:
            return
        negotiation = ctx.payment
        unpaid = await self._unpaid(session.agent.name, negotiation.token)
        app = self._app
        remaining = None
        if unpaid is None and app is not None:
            remaining = await app.payment_balance(negotiation.token)
        if self._contexts.get(session.id) is not ctx:
            return  # the session ended while the ledger answered
        reply = settle_event(
            negotiation, session.id, unpaid, remaining, f"pay_{uuid.uuid4().hex[:24]}"
        )
        try:
            self._owe(reply)
        except LocalProtocolError as exc:  # pragma: no cover - any state after a submit allows it
            log.warning("cannot answer payment.submit: %s", exc)
            return
        session.wake()

    async def _hold_for_payment(
        self, session: SessionState, response: ResponseState, required: ev.PaymentRequired
    ) -> None:
        """Send ``payment.required`` and wait until the client has paid.

        No response content flows meanwhile (the core refuses it while the
        negotiation is ``required`` or ``submitted``). The reader settles each
        ``payment.submit`` (:meth:`_settle`) and wakes this task; a
        ``response.cancel`` cancels the worker's scope, which ends the wait
        (and the response) with ``response.cancelled``.

        The wait is bounded (:attr:`SessionLimits.payment_wait`): the
        requirements carry ``expires_at``, the wall-clock second it ends
        (UAMP 7.2; an earlier one the policy set stands).

        Raises:
            SessionGone: The session ended while waiting.
            ResponderError: ``payment_required``: nothing was paid by then.
        """
        required, wait = bounded_wait(required, self._clock(), self.limits.payment_wait)
        await self._send(session, response, required)
        with trio.move_on_after(wait):
            while True:
                ctx = self._contexts.get(session.id)
                if ctx is None:
                    # Ending the session cancelled this response: let that land first.
                    await trio.lowlevel.checkpoint()
                    raise SessionGone
                if ctx.payment.state is PaymentState.ACCEPTED:
                    return
                await session.wakeup.park()
        raise ResponderError(
            "payment_required",
            f"no payment was accepted within {wait:g} s (the requirements' expires_at)",
        )

    async def _preflight(self, session: SessionState, response: ResponseState) -> None:
        """Hold the response's price before the agent runs (spec 004, UAMP row of the table).

        The app locks the price on the session's latest payment token
        (:meth:`Host.open_charge <uamp_trio.hosting.host.Host.open_charge>`)
        into :attr:`ResponseState.charge`. A response that token does not pay for
        is held: the client gets ``payment.required`` with the pending
        ``response_id`` and the agent does not run until a ``payment.submit``
        (or a ``payment_token`` on ``session.update`` or ``input.text``) is
        accepted and the lock succeeds. A negotiation left open by a response
        cancelled while it waited is announced again unless such a token has
        settled it meanwhile.
        """
        while True:
            ctx = self._contexts.get(session.id)
            if ctx is None:
                raise SessionGone
            negotiation = ctx.payment
            if not negotiation.blocks_content:
                app = self._app
                if app is None or app.payment_policy is None:
                    return  # nothing to lock (Host.open_charge would answer None)
                try:
                    response.charge = await app.open_charge(
                        session.agent.name,
                        negotiation.token,
                        response.id,
                        principal=session.principal,
                    )
                    return
                except PaymentRequiredError as unpaid:
                    required = held_event(negotiation, response.id, session.id, unpaid)
            else:
                required = held_event(negotiation, response.id, session.id)
            await self._hold_for_payment(session, response, required)

    async def _settle_charge(
        self, session: SessionState, response: ResponseState, tracker: ResponseTracker | None
    ) -> None:
        """Settle the response's charge from its usage; ``payment.balance`` to the client.

        ``tracker`` ``None``: the response never ran (its session ended
        while the price was being locked): the whole lock is freed.
        """
        await self._charge_now(response, tracker)
        balance, response.balance = response.balance, None
        if balance is None or session.id not in self._contexts:
            return
        try:
            data = self.conn.send(attrs.evolve(balance, session_id=session.id))
        except LocalProtocolError as exc:  # pragma: no cover - allowed in every state
            log.info("payment.balance not sent: %s", exc)
            return
        self._log(session.id, data)
        # In order after the response's last event (an owed reply would jump
        # the queue); a client whose outbox is full misses this update.
        if not self.outbox.offer(data):
            log.info("payment.balance not sent: the outbox is full")

    @staticmethod
    async def _charge_now(response: ResponseState, tracker: ResponseTracker | None) -> None:
        """Settle the response's charge (once) from ``tracker`` 's usage, keeping its balance.

        Called before the response's terminal event is sent or logged: a
        process that dies after its client (or the session's log) got
        ``response.done`` has charged it already. Settling after it left a
        window where the lock outlived the delivered response and the
        recovery of the dead process's locks freed it: a free response.
        """
        charge, response.charge = response.charge, None
        if charge is None:
            return
        if tracker is None:
            await charge.settle(None, used=False)
            return
        used = tracker.usage is not None or bool(tracker.output)
        response.balance = await charge.settle(tracker.usage, used=used)
