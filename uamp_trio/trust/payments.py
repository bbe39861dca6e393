"""The ledger behind the payment policy: each response locks, then settles what it used.

Theory of operation. :class:`LedgerPolicy` is the
:class:`~uamp_proto.payment.ChargingPolicy` the composition root puts on the
host (``uamp serve --ledger PATH --price AMOUNT``). Before an agent starts, a
transport asks the host to *open* a charge for the response
(:meth:`~uamp_trio.hosting.host.Host.open_charge`): the policy verifies the
caller's payment token (signature first, then expiry and balance) and locks
the response's hold on it in one ledger transaction; a refusal is a
:class:`~uamp_proto.payment.PaymentRequiredError` whose ``code`` is the
spec 000 section 7.2 reason (``payment_required`` when no token came at all,
else ``insufficient_balance``, ``token_expired``, ``token_invalid``), which
each transport renders its own way (402, ``payment.required``, ``-32402`` ...).

When the response ends -- completed, failed or cancelled, also when its
client went away -- the turn driver settles the :class:`LedgerCharge` once
with the response's usage: the real cost (:meth:`uamp_proto.ledger.Pricing.cost`,
at most the lock) is charged and the rest goes back to the balance. The
settlement returns the ``payment.balance`` event (with
``low_balance_warning``) for transports that can carry it. A lock whose
process died before settling is freed by :meth:`SqlLedger.recover` at the next
start (on PostgreSQL: once its heartbeat has expired).

An agent declares its own prices with a ``pricing`` attribute (a
:class:`~uamp_proto.ledger.Pricing`); agents without one cost the server's
flat ``price`` per response. Ledger calls are database transactions run in
worker threads (:meth:`SqlLedger.call`), so a slow disk or database
or another server holding the file's write lock never stalls the event loop;
a settlement is shielded from cancellation and completes.
"""

from __future__ import annotations

import logging
from decimal import Decimal

import anyio
import attrs

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.ledger import LedgerError, Pricing, format_amount
from uamp_proto.payment import PaymentRequiredError

from .ledger_sql import SqlLedger

__all__ = ["LedgerCharge", "LedgerPolicy"]

log = logging.getLogger("uamp_trio.payments")

#: How often (s) adopting a lost server's lock asks again while the ledger sees it alive.
ADOPT_POLL = 0.5

#: A balance below this many holds of the response just settled is "low".
LOW_BALANCE_HOLDS = 5


@attrs.define(eq=False)
class LedgerCharge:
    """The lock of one response on one payment token; see the module docstring."""

    policy: LedgerPolicy
    token: str
    response_id: str
    pricing: Pricing
    #: Set for a lock adopted from a lost server (:meth:`LedgerPolicy.adopt`),
    #: which is settled by the token's id (its token is not known here).
    token_id: str | None = None
    settled: bool = attrs.field(default=False, init=False)

    async def settle(self, usage: ty.UsageStats | None, *, used: bool) -> ev.PaymentBalance | None:
        """Charge the response's cost from its lock and free the rest (once; shielded)."""
        if self.settled:
            return None
        self.settled = True
        cost = self.pricing.cost(usage, used=used)
        ledger = self.policy.ledger
        try:
            if self.token_id is not None:
                account = await ledger.call(
                    ledger.settle_orphan, self.token_id, self.response_id, cost
                )
            else:
                account = await ledger.call(ledger.settle, self.token, self.response_id, cost)
        except LedgerError as exc:
            # Cannot happen for a token that locked (its signature was good
            # and settling accepts an expired one); logged, never raised.
            log.warning("cannot settle response %s: %s", self.response_id, exc.message)
            return None
        return self.policy.balance_event(account.balance, account.currency, self.pricing)

    async def extend(self, token: str | None, amount: str) -> None:
        """Lock ``amount`` more for this response (spec 004 mid-stream top-up).

        A charge adopted after a node loss (:meth:`LedgerPolicy.adopt`)
        knows no token: it takes the one given.
        """
        ledger = self.policy.ledger
        try:
            await ledger.call(ledger.extend, token or self.token, self.response_id, amount)
        except (LedgerError, ValueError) as exc:
            raise self.policy.refusal(self.pricing, exc, amount=amount) from None


class LedgerPolicy:
    """Payment through a ledger (:class:`~uamp_trio.trust.ledger_sql.SqlLedger`).

    Args:
        ledger: Where the tokens and their money live.
        price: Flat price per response of an agent that declares no pricing.
        currency: Currency of that price.
        free_agents: Agents that cost nothing.
        orphan_grace: Seconds a dead server's lock is left for a server that
            carries its response on (:meth:`adopt`). Past that it is
            released (:meth:`SqlLedger.recover`), checked at most once a minute
            when a lock is taken. ``0``: dead servers' locks are released
            only by the start-up recovery.
        operators: Principal ids that may top tokens up over HTTP
            (``POST /api/payments/tokens/{id}/topup``); empty: nobody.
    """

    #: Seconds between two sweeps for dead servers' locks past ``orphan_grace``.
    SWEEP_EVERY = 60.0

    def __init__(
        self,
        ledger: SqlLedger,
        *,
        price: str | Decimal = "0.01",
        currency: str = "USD",
        free_agents: frozenset[str] = frozenset(),
        orphan_grace: float = 0.0,
        operators: frozenset[str] = frozenset(),
    ) -> None:
        self.ledger = ledger
        self.operators = operators
        self.default_pricing = Pricing.flat(price, currency.upper())
        self.free_agents = free_agents
        self.orphan_grace = orphan_grace
        self._swept = ledger.now()

    # --- what is asked -----------------------------------------------------------

    def requirements(self, pricing: Pricing, amount: str | None = None) -> ty.PaymentRequirements:
        """The ``payment.required`` requirements of one response at ``pricing``."""
        return ty.PaymentRequirements(
            amount=amount or format_amount(pricing.hold_amount()),
            currency=pricing.currency,
            schemes=[ty.PaymentScheme(scheme="token", network="uamp")],
            reason="agent_usage",
        )

    def refusal(
        self, pricing: Pricing, exc: LedgerError | ValueError | None, *, amount: str | None = None
    ) -> PaymentRequiredError:
        """The error a transport reports for a token that cannot pay (``None``: no token)."""
        requirements = self.requirements(pricing, amount)
        if exc is None:
            return PaymentRequiredError(requirements)
        if isinstance(exc, LedgerError):
            current = exc.balance_current
            return PaymentRequiredError(
                requirements,
                code=exc.code,
                reason=exc.message,
                balance_current=None if current is None else format_amount(current),
            )
        return PaymentRequiredError(requirements, code="payment_failed", reason=str(exc))

    def balance_event(self, balance: Decimal, currency: str, pricing: Pricing) -> ev.PaymentBalance:
        """``payment.balance`` for a token left with ``balance``."""
        hold = pricing.hold_amount()
        low = hold > 0 and balance < hold * LOW_BALANCE_HOLDS
        return ev.PaymentBalance(
            balance=format_amount(balance),
            balance_remaining=format_amount(balance),
            currency=currency,
            low_balance_warning=low,
            estimated_remaining=int(balance / hold) if hold > 0 else None,
            threshold=format_amount(hold * LOW_BALANCE_HOLDS),
        )

    async def balance_of(self, token: str) -> str | None:
        """The token's free balance (``payment.accepted.balance_remaining``), or ``None``."""
        try:
            state = await self.ledger.call(self.ledger.show, token)
        except LedgerError:
            return None
        return format_amount(state.account.balance)

    def pricing(self, agent: str, declared: Pricing | None) -> Pricing | None:
        """The pricing of ``agent``: its own, else the flat price (``None``: free)."""
        if agent in self.free_agents:
            return None
        return declared or self.default_pricing

    # --- PaymentPolicy / ChargingPolicy ---------------------------------------------

    def check(self, agent: str, token: str | None) -> ty.PaymentRequirements | None:
        """``None`` when ``token`` could pay a response of ``agent`` now (nothing is locked).

        Blocking (for callers outside an event loop); servers use :meth:`verify`.
        """
        refused = self._verify(agent, token, None)
        return None if refused is None else refused.requirements

    async def verify(
        self, agent: str, token: str | None, declared: Pricing | None
    ) -> PaymentRequiredError | None:
        """Why ``token`` cannot pay a response of ``agent`` now, or ``None`` (nothing locked)."""
        if self.pricing(agent, declared) is None:
            return None
        return await self.ledger.call(self._verify, agent, token, declared)

    def _verify(
        self, agent: str, token: str | None, declared: Pricing | None
    ) -> PaymentRequiredError | None:
        pricing = self.pricing(agent, declared)
        if pricing is None:
            return None
        if token is None:
            return self.refusal(pricing, None)
        hold = pricing.hold_amount()
        try:
            state = self.ledger.show(token).account
            state.usable(self.ledger.now())
            if state.currency != pricing.currency:
                raise LedgerError("token_invalid", f"the payment token holds {state.currency}")
            if state.balance < hold:
                raise LedgerError(
                    "insufficient_balance",
                    "insufficient balance to process the request",
                    balance_required=hold,
                    balance_current=state.balance,
                )
        except LedgerError as exc:
            return self.refusal(pricing, exc)
        return None

    async def open(
        self,
        agent: str,
        token: str | None,
        response_id: str,
        declared: Pricing | None = None,
        *,
        principal: str | None = None,
    ) -> LedgerCharge | None:
        """Lock the hold of one response of ``agent`` on ``token`` (for ``principal``).

        Raises:
            PaymentRequiredError: No token, or the ledger refused it (its code says why).
        """
        pricing = self.pricing(agent, declared)
        if pricing is None:
            return None
        if token is None:
            raise self.refusal(pricing, None)
        await self.ledger.call(self._lock, pricing, token, response_id, principal)
        return LedgerCharge(self, token, response_id, pricing)

    async def adopt(
        self, agent: str, response_id: str, declared: Pricing | None = None
    ) -> LedgerCharge | None:
        """The open lock of ``response_id`` left by a server that died, as a charge to settle.

        ``None``: the agent is free, or no dead server holds a lock for that
        response (it was settled, freed by a restart, or never taken).
        The session store may see a server dead before the ledger does (a
        heartbeat ledger's window is longer): while the lock's holder still
        looks alive to the ledger this asks again, every
        :data:`ADOPT_POLL` seconds, for at most the ledger's
        :attr:`~uamp_trio.trust.ledger_sql.SqlLedger.liveness` and one more
        poll. Giving up earlier left the lock to the start-up sweep, which
        frees it: the response was delivered and charged nothing.
        """
        pricing = self.pricing(agent, declared)
        if pricing is None:
            return None
        ledger = self.ledger
        deadline = anyio.current_time() + ledger.liveness + ADOPT_POLL
        while True:
            token_id, held = await ledger.call(ledger.find_orphan, response_id)
            if token_id is not None:
                return LedgerCharge(self, "", response_id, pricing, token_id)
            if not held or anyio.current_time() >= deadline:
                return None
            await anyio.sleep(ADOPT_POLL)

    def _lock(self, pricing: Pricing, token: str, response_id: str, principal: str | None) -> None:
        if self.orphan_grace > 0 and self.ledger.now() - self._swept >= self.SWEEP_EVERY:
            self._swept = self.ledger.now()
            self.ledger.recover(grace=self.orphan_grace)
        try:
            account = self.ledger.show(token).account
            if account.currency != pricing.currency:
                raise LedgerError("token_invalid", f"the payment token holds {account.currency}")
            self.ledger.lock(token, response_id, pricing.hold_amount(), principal=principal)
        except LedgerError as exc:
            raise self.refusal(pricing, exc) from None
