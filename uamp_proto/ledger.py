"""Ledger arithmetic for payment tokens (spec 000 section 7.2), with no storage.

Theory of operation. A payment token is an :class:`Account`: an amount issued
in one currency, raised by top-ups, and split at every moment into three
parts that always add up (the ledger's one invariant)::

    balance + locked + settled == issued + topped_up

A response first :func:`lock`\\ s an amount (refused with
``insufficient_balance``, ``token_expired`` or ``token_invalid``), then
:func:`settle`\\ s its real cost from that lock: at most the locked amount is
charged and the rest goes back to the balance. :func:`release` returns a lock
untouched (a response that never started, or a lock left by a process that
died). Every function returns a new :class:`Account`; nothing is mutated, and
amounts are :class:`~decimal.Decimal` (wire strings such as ``"9.50"``), never
floats. A store applies these in one transaction per change; this module only
decides.

:class:`Pricing` says what a response costs (spec 000 section 8.7): a fee per
response and rates per thousand input, output and cached tokens (a cached
token without a rate of its own costs an input token). Its :meth:`Pricing.hold`
is what is locked before the agent starts and :meth:`Pricing.cost` what is
settled from the response's usage when it ends.

Amounts are bounded (:func:`parse_amount`): finite, not negative, at most
:data:`MAX_AMOUNT`, and -- where money enters the ledger (an issue, a
top-up) -- with no more decimals than the currency has
(:func:`minor_units`, ISO 4217). A balance never goes over
:data:`MAX_AMOUNT` either, so every sum stays exact within
:class:`~decimal.Decimal`'s default 28 digits.
"""

from __future__ import annotations

from decimal import Context, Decimal, InvalidOperation, localcontext

import attrs

from .errors import UampError
from .types import UsageStats

__all__ = [
    "MAX_AMOUNT",
    "Account",
    "LedgerError",
    "Pricing",
    "format_amount",
    "lock",
    "minor_units",
    "parse_amount",
    "release",
    "settle",
    "top_up",
]


@attrs.define(auto_exc=True)
class LedgerError(UampError):
    """A ledger change was refused; ``code`` is a spec 000 section 7.2 payment error code.

    Attributes:
        code: ``insufficient_balance``, ``token_expired``, ``token_invalid`` ...
        message: A sentence for the payer.
        balance_required: The amount that was needed, when that is the problem.
        balance_current: The balance at the time.
    """

    code: str
    message: str
    balance_required: Decimal | None = attrs.field(default=None, kw_only=True)
    balance_current: Decimal | None = attrs.field(default=None, kw_only=True)


#: The largest amount the ledger takes or holds on one token (a trillion units
#: of any currency): far above any real balance, far below where 28 digits of
#: :class:`~decimal.Decimal` would start rounding sums.
MAX_AMOUNT = Decimal(10) ** 12

#: Longest amount text read: no real amount needs more characters.
_MAX_TEXT = 64

#: ISO 4217 currencies whose minor unit is not the cent (two decimals).
_MINOR_UNITS: dict[str, int] = {
    code: units
    for units, codes in (
        (0, "BIF CLP DJF GNF ISK JPY KMF KRW PYG RWF UGX UYI VND VUV XAF XOF XPF"),
        (3, "BHD IQD JOD KWD LYD OMR TND"),
        (4, "CLF UYW"),
    )
    for code in codes.split()
}

#: Room for any amount this module formats (MAX_AMOUNT with many decimals).
_WIDE = Context(prec=200)


def minor_units(currency: str) -> int:
    """Decimals an amount in ``currency`` may have (ISO 4217; two for an unlisted code)."""
    return _MINOR_UNITS.get(currency.upper(), 2)


def parse_amount(text: str | int | Decimal, *, currency: str | None = None) -> Decimal:
    """A finite amount from 0 to :data:`MAX_AMOUNT` from its wire form (``"10.00"``).

    Args:
        currency: When given, the amount may have no more decimals than
            that currency has (``"0.001"`` USD is refused; ``"1.50"`` JPY too).

    Raises:
        ValueError: not a number, negative, not finite, over the maximum, or
            finer than the currency's minor unit; the message says which.
    """
    raw = str(text)
    if len(raw) > _MAX_TEXT:
        raise ValueError(f"not an amount: {raw[:_MAX_TEXT]!r}... is too long")
    try:
        value = Decimal(raw.strip())
    except InvalidOperation:
        raise ValueError(f"not an amount: {raw!r}") from None
    if not value.is_finite() or value < 0:
        raise ValueError(f"an amount must be a finite number >= 0: {raw!r}")
    if value > MAX_AMOUNT:
        raise ValueError(f"an amount must be at most {MAX_AMOUNT:,}: {raw!r}")
    if currency is not None:
        units = minor_units(currency)
        with localcontext(_WIDE):
            exact = value == value.quantize(Decimal(1).scaleb(-units))
        if not exact:
            raise ValueError(f"{currency.upper()} amounts have at most {units} decimal(s): {raw!r}")
    return value


def format_amount(value: Decimal) -> str:
    """The wire form of an amount: plain digits, at least two decimals (``"9.50"``).

    Never raises for a finite amount, however large or fine it is.
    """
    with localcontext(_WIDE):
        value = value.normalize()
        if value.as_tuple().exponent >= -2:  # type: ignore[operator]
            value = value.quantize(Decimal("0.01"))
    return format(value, "f")


def _amount(value: str | int | Decimal) -> Decimal:
    return parse_amount(value)


def _optional_amount(value: str | int | Decimal | None) -> Decimal | None:
    return None if value is None else parse_amount(value)


_THOUSAND = Decimal(1000)

#: Tokens a per-token price locks for before the agent starts, when the
#: pricing names no ``hold`` of its own (input and output each).
DEFAULT_HOLD_TOKENS = 4096


@attrs.frozen(kw_only=True)
class Pricing:
    """What one response of an agent costs (spec 000 section 8.7).

    Attributes:
        currency: ISO currency code.
        per_request: Fee of a response that ran (emitted anything).
        input_per_1k: Per thousand input tokens not read from a cache.
        output_per_1k: Per thousand output tokens.
        cache_read_per_1k: Per thousand cached tokens (``None``: the input rate).
        input_includes_cached: Whether ``input_tokens`` counts the cached
            tokens too (OpenAI, Gemini, Fireworks) or not (Anthropic).
        hold: Amount locked before the agent starts; ``None``: the fee plus
            :data:`DEFAULT_HOLD_TOKENS` input and output tokens. A response is
            never charged more than its lock.
    """

    currency: str = "USD"
    per_request: Decimal = attrs.field(default=Decimal(0), converter=_amount)
    input_per_1k: Decimal = attrs.field(default=Decimal(0), converter=_amount)
    output_per_1k: Decimal = attrs.field(default=Decimal(0), converter=_amount)
    cache_read_per_1k: Decimal | None = attrs.field(default=None, converter=_optional_amount)
    input_includes_cached: bool = True
    hold: Decimal | None = attrs.field(default=None, converter=_optional_amount)

    @classmethod
    def flat(cls, price: str | Decimal, currency: str = "USD") -> Pricing:
        """A fixed price per response."""
        return cls(currency=currency, per_request=parse_amount(price))

    @property
    def per_token(self) -> bool:
        """Whether any token rate is set."""
        return bool(self.input_per_1k or self.output_per_1k or self.cache_read_per_1k)

    def hold_amount(self) -> Decimal:
        """The amount locked before the agent starts."""
        if self.hold is not None:
            return self.hold
        if not self.per_token:
            return self.per_request
        tokens = Decimal(DEFAULT_HOLD_TOKENS) / _THOUSAND
        return self.per_request + (self.input_per_1k + self.output_per_1k) * tokens

    def cost(self, usage: UsageStats | None, *, used: bool = True) -> Decimal:
        """The real cost of a response that reported ``usage``.

        Args:
            usage: Token counts (section 8.7); ``None`` counts no tokens.
            used: Whether the response ran at all (emitted anything); one
                that did not owes no fee.
        """
        total = self.per_request if used else Decimal(0)
        if usage is None:
            return total
        cached = Decimal(usage.cached_tokens or 0)
        input_tokens = Decimal(usage.input_tokens or 0)
        uncached = (
            max(input_tokens - cached, Decimal(0)) if self.input_includes_cached else (input_tokens)
        )
        cache_rate = self.cache_read_per_1k
        if cache_rate is None:
            cache_rate = self.input_per_1k
        total += uncached * self.input_per_1k / _THOUSAND
        total += cached * cache_rate / _THOUSAND
        total += Decimal(usage.output_tokens or 0) * self.output_per_1k / _THOUSAND
        return total


@attrs.frozen(kw_only=True)
class Account:
    """One payment token's money.

    Attributes:
        currency: ISO currency code (``USD``).
        issued: Amount at issue.
        topped_up: Sum of top-ups since.
        balance: Free to lock.
        locked: Held by responses in flight.
        settled: Charged for finished responses.
        expires_at: Seconds since the epoch after which nothing may be locked, or ``None``.
        revoked: A revoked token locks nothing.
    """

    currency: str
    issued: Decimal
    topped_up: Decimal = Decimal(0)
    balance: Decimal
    locked: Decimal = Decimal(0)
    settled: Decimal = Decimal(0)
    expires_at: float | None = None
    revoked: bool = False

    @classmethod
    def new(cls, amount: Decimal, currency: str, expires_at: float | None = None) -> Account:
        """A freshly issued token holding ``amount``."""
        return cls(currency=currency, issued=amount, balance=amount, expires_at=expires_at)

    def balanced(self) -> bool:
        """Whether the invariant holds (it always should)."""
        return (
            self.balance + self.locked + self.settled == self.issued + self.topped_up
            and min(self.balance, self.locked, self.settled) >= 0
        )

    def usable(self, now: float) -> None:
        """Raise unless the token may lock money at ``now``.

        Raises:
            LedgerError: ``mandate_revoked`` (its issuer revoked it: UAMP 7.2's
                code for a payment authority withdrawn) or ``token_expired``.
        """
        if self.revoked:
            raise LedgerError("mandate_revoked", "the payment token was revoked")
        if self.expires_at is not None and now >= self.expires_at:
            raise LedgerError("token_expired", "the payment token has expired")


def lock(account: Account, amount: Decimal, now: float) -> Account:
    """Move ``amount`` from the balance to the locked part.

    Raises:
        LedgerError: ``token_invalid``, ``token_expired`` or ``insufficient_balance``.
    """
    account.usable(now)
    if amount < 0:
        raise ValueError("cannot lock a negative amount")
    if amount > account.balance:
        raise LedgerError(
            "insufficient_balance",
            "insufficient balance to process the request",
            balance_required=amount,
            balance_current=account.balance,
        )
    return attrs.evolve(account, balance=account.balance - amount, locked=account.locked + amount)


def settle(account: Account, locked: Decimal, cost: Decimal) -> Account:
    """End a lock of ``locked``: charge ``min(cost, locked)``, return the rest to the balance."""
    if locked < 0 or cost < 0 or locked > account.locked:
        raise ValueError("settle: the lock is not held by this account")
    charged = min(cost, locked)
    return attrs.evolve(
        account,
        locked=account.locked - locked,
        settled=account.settled + charged,
        balance=account.balance + (locked - charged),
    )


def release(account: Account, locked: Decimal) -> Account:
    """End a lock of ``locked`` with nothing charged."""
    return settle(account, locked, Decimal(0))


def top_up(account: Account, amount: Decimal) -> Account:
    """Add ``amount`` to the balance (allowed on an expired token; it still cannot lock).

    Raises:
        ValueError: ``amount`` is not positive, or the token would hold more
            than :data:`MAX_AMOUNT` (balance and locks together).
    """
    if amount <= 0:
        raise ValueError("a top-up must be positive")
    if account.balance + account.locked + amount > MAX_AMOUNT:
        raise ValueError(f"a token holds at most {MAX_AMOUNT:,}: the top-up would pass it")
    return attrs.evolve(
        account, balance=account.balance + amount, topped_up=account.topped_up + amount
    )
