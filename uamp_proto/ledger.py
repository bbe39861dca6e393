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
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

import attrs

from .errors import UampError

__all__ = [
    "Account",
    "LedgerError",
    "lock",
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


def parse_amount(text: str | int | Decimal) -> Decimal:
    """A non-negative finite amount from its wire form (``"10.00"``).

    Raises:
        ValueError: not a number, negative, or not finite.
    """
    try:
        value = Decimal(str(text))
    except InvalidOperation:
        raise ValueError(f"not an amount: {text!r}") from None
    if not value.is_finite() or value < 0:
        raise ValueError(f"an amount must be a finite number >= 0: {text!r}")
    return value


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
            LedgerError: ``token_invalid`` (revoked) or ``token_expired``.
        """
        if self.revoked:
            raise LedgerError("token_invalid", "the payment token was revoked")
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
    """Add ``amount`` to the balance (allowed on an expired token; it still cannot lock)."""
    if amount <= 0:
        raise ValueError("a top-up must be positive")
    return attrs.evolve(
        account, balance=account.balance + amount, topped_up=account.topped_up + amount
    )
