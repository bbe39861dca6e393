"""What every SQL ledger does, whatever the database: tokens, locks, settlements.

Theory of operation. Each change (issue, top-up, lock, settle, release) is one
transaction that reads the token's row *for update*, asks
:mod:`uamp_proto.ledger` whether the change is allowed and what the row
becomes, and writes it back with the lock's own row. The database serialises
the writers of one token (SQLite by its write lock, PostgreSQL by the row
lock), so concurrent spenders, in this process or others, take turns and no
token is ever driven below zero. Every transaction that changes money locks
exactly one token row, first; the sweep of dead servers' locks locks its rows
in token order, so two servers never wait on each other.

A payment token is a JWT (EdDSA) signed by the ledger's own key, which lives
in the database; its ``jti`` names the row. Verification checks the signature
before any lookup, so a guessed id is worth nothing.

Locks are keyed by ``(token, response_id)``: locking or settling the same
response twice changes nothing the second time (``payment.submit`` sent twice,
or a call retried after a network fault, charges once). Each lock records the
principal it was taken for and the server instance that holds it; a lock
still open when its server died is returned to the balance by
:meth:`SqlLedger.recover`. What "died" means is the backend's: on SQLite (one
machine) the process is gone (:mod:`uamp_trio.trust.owners`), on PostgreSQL
(many machines) its heartbeat expired.

The methods are blocking database calls. A server makes them through
:meth:`SqlLedger.call`, which runs them in worker threads (as many at once as
the backend allows), shielded from cancellation so that a settlement started
in a ``finally`` block completes. ``call`` is anyio's: the same ledger (and
:class:`~uamp_trio.trust.payments.LedgerPolicy` over it) works under
``uamp serve`` (Trio) and in ``uamp_asgi`` on asyncio.

A backend supplies the connection (:meth:`SqlLedger._transaction`, yielding
something with ``execute(sql, params)`` whose rows are mappings, SQL written
with ``?`` placeholders), liveness (:meth:`SqlLedger._alive`) and two dialect
words: what makes a ``SELECT`` lock its row, and what orders locks by age.
"""

from __future__ import annotations

import contextlib
import functools
import os
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from decimal import Decimal
from typing import Any, ParamSpec, Protocol, TypeVar

import anyio
import attrs
import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from uamp_proto import ledger as arith
from uamp_proto.ledger import Account, LedgerError, format_amount

from .owners import instance_id

__all__ = ["Cursor", "Database", "SqlLedger", "TokenState"]

_P = ParamSpec("_P")
_T = TypeVar("_T")

_ISSUER = "uamp-ledger"


class Cursor(Protocol):
    """The rows of one statement, each a mapping of column name to value."""

    def fetchone(self) -> Any: ...

    def fetchall(self) -> Any: ...


class Database(Protocol):
    """One transaction's connection: ``execute`` with ``?`` placeholders."""

    def execute(self, sql: str, params: Any = ..., /) -> Cursor: ...


@attrs.frozen(kw_only=True)
class TokenState:
    """What ``uamp tokens show`` prints for a token."""

    token_id: str
    account: Account

    def as_json(self) -> dict[str, Any]:
        """The JSON object: balance, currency, locked, settled, expires_at."""
        a = self.account
        return {
            "token_id": self.token_id,
            "balance": format_amount(a.balance),
            "currency": a.currency,
            "locked": format_amount(a.locked),
            "settled": format_amount(a.settled),
            "issued": format_amount(a.issued),
            "topped_up": format_amount(a.topped_up),
            "expires_at": a.expires_at,
            "revoked": a.revoked,
        }


def _row_to_account(row: Mapping[str, Any]) -> Account:
    return Account(
        currency=row["currency"],
        issued=Decimal(row["issued"]),
        topped_up=Decimal(row["topped_up"]),
        balance=Decimal(row["balance"]),
        locked=Decimal(row["locked"]),
        settled=Decimal(row["settled"]),
        expires_at=row["expires_at"],
        revoked=bool(row["revoked"]),
    )


def _amount(value: Decimal) -> str:
    """How an amount is written to a row (text: exact on every backend)."""
    return str(value)


def _to_hold(amount: Decimal | str) -> Decimal:
    """An amount to lock; one past :data:`~uamp_proto.ledger.MAX_AMOUNT` no token can hold.

    Raises:
        LedgerError: ``insufficient_balance`` for an amount over the maximum.
        ValueError: One that is not an amount at all.
    """
    try:
        return arith.parse_amount(amount)
    except ValueError:
        with contextlib.suppress(ArithmeticError):
            if Decimal(str(amount)) > arith.MAX_AMOUNT:
                raise LedgerError(
                    "insufficient_balance",
                    "insufficient balance to process the request",
                    balance_required=arith.MAX_AMOUNT,
                ) from None
        raise


class SqlLedger(ABC):
    """Payment tokens in a SQL database; see the module docstring.

    Args:
        clock: Seconds since the epoch (injectable for tests).
        owner: The instance id recorded with every lock this ledger takes
            (default: this process's, :func:`~uamp_trio.trust.owners.instance_id`).
        concurrency: How many :meth:`call` s may run at once.
    """

    #: Seconds a dead server instance may still look alive (a heartbeat ledger's
    #: window; ``0``: its death is known at once, as from the process table).
    liveness: float = 0.0
    #: Appended to a ``SELECT`` of one token's row inside a transaction that changes it.
    FOR_UPDATE = ""
    #: The column that orders a token's locks oldest first.
    LOCK_ORDER = "rowid"

    def __init__(
        self,
        *,
        clock: Callable[[], float],
        owner: str | None = None,
        concurrency: int = 1,
    ) -> None:
        self._clock = clock
        self.owner = owner or instance_id()
        # anyio's, so the same ledger serves a Trio server and an asyncio
        # (ASGI) app alike: on Trio it is trio.to_thread underneath.
        self._limiter = anyio.CapacityLimiter(concurrency)
        self._key: ed25519.Ed25519PrivateKey | None = None

    # -- what a backend supplies ----------------------------------------------

    @abstractmethod
    def _transaction(self) -> AbstractContextManager[Database]:
        """One transaction: committed when the block ends, rolled back when it raises."""

    @abstractmethod
    def _alive(self, db: Database, owner: str | None) -> bool:
        """Whether the server instance ``owner`` may still settle its locks."""

    @abstractmethod
    def close(self) -> None:
        """Let go of the database."""

    # -- common ----------------------------------------------------------------

    async def call(self, method: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """Run one of this ledger's methods in a worker thread (see the module docstring).

        Shielded: once asked, the call completes and its result is returned
        even if the caller is being cancelled (the cancellation lands at the
        caller's next checkpoint).
        """
        with anyio.CancelScope(shield=True):
            result = await anyio.to_thread.run_sync(
                functools.partial(method, *args, **kwargs), limiter=self._limiter
            )
        return result

    def now(self) -> float:
        """The ledger's clock (seconds since the epoch)."""
        return self._clock()

    def __enter__(self) -> SqlLedger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _load_key(self) -> None:
        """Read the signing key, creating it if this database has none (call once, at open)."""
        pem = serialization.Encoding.PEM
        with self._transaction() as db:
            row = db.execute("SELECT value FROM meta WHERE key = 'signing_key'").fetchone()
            if row is None:
                key = ed25519.Ed25519PrivateKey.generate()
                created = key.private_bytes(
                    pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
                )
                # Two servers opening a new database at once: the first key written wins.
                db.execute(
                    "INSERT INTO meta (key, value) VALUES ('signing_key', ?)"
                    " ON CONFLICT (key) DO NOTHING",
                    (created,),
                )
                row = db.execute("SELECT value FROM meta WHERE key = 'signing_key'").fetchone()
        loaded = serialization.load_pem_private_key(bytes(row["value"]), password=None)
        assert isinstance(loaded, ed25519.Ed25519PrivateKey)
        self._key = loaded

    @property
    def _signing_key(self) -> ed25519.Ed25519PrivateKey:
        assert self._key is not None, "the backend did not call _load_key()"
        return self._key

    # -- tokens ---------------------------------------------------------------

    def issue(
        self, amount: Decimal | str, currency: str, *, expires_in: float | None = None
    ) -> str:
        """Create a token holding ``amount``; return the signed token string.

        Raises:
            ValueError: A currency that is not a 3-letter code, or an amount
                :func:`~uamp_proto.ledger.parse_amount` refuses in it (nothing is written).
        """
        if not currency.isascii() or not currency.isalpha() or len(currency) != 3:
            raise ValueError(f"currency must be a 3-letter code: {currency!r}")
        value = arith.parse_amount(amount, currency=currency)
        now = self._clock()
        expires_at = None if expires_in is None else now + expires_in
        token_id = "pt_" + uuid.UUID(bytes=os.urandom(16)).hex
        account = Account.new(value, currency.upper(), expires_at)
        with self._transaction() as db:
            db.execute(
                "INSERT INTO accounts (token_id, currency, issued, topped_up, balance, locked,"
                " settled, expires_at, revoked) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0)",
                (
                    token_id,
                    account.currency,
                    _amount(account.issued),
                    _amount(account.topped_up),
                    _amount(account.balance),
                    _amount(account.locked),
                    _amount(account.settled),
                    expires_at,
                ),
            )
        claims: dict[str, Any] = {"jti": token_id, "iss": _ISSUER, "iat": int(now)}
        if expires_at is not None:
            claims["exp"] = int(expires_at)
        return jwt.encode(claims, self._signing_key, algorithm="EdDSA")

    def token_id(self, token: str, *, expired_ok: bool = False) -> str:
        """The id a token names, once its signature is verified.

        ``expired_ok``: accept an expired token (settling what it locked
        while it was valid).

        Raises:
            LedgerError: ``token_invalid`` (not ours or altered), ``token_expired``.
        """
        try:
            claims = jwt.decode(
                token,
                self._signing_key.public_key(),
                algorithms=["EdDSA"],
                issuer=_ISSUER,
                options={"require": ["jti", "iss"], "verify_exp": False},
            )
        except jwt.PyJWTError:
            raise LedgerError("token_invalid", "the payment token is invalid") from None
        exp = claims.get("exp")
        if not expired_ok and isinstance(exp, int | float) and self._clock() >= exp:
            raise LedgerError("token_expired", "the payment token has expired")
        token_id = claims["jti"]
        if not isinstance(token_id, str):
            raise LedgerError("token_invalid", "the payment token is invalid")
        return token_id

    def _load(self, db: Database, token_id: str, *, update: bool = True) -> Account:
        row = db.execute(
            "SELECT * FROM accounts WHERE token_id = ?" + (self.FOR_UPDATE if update else ""),
            (token_id,),
        ).fetchone()
        if row is None:
            # Signed by this ledger, yet its account is gone: withdrawn.
            raise LedgerError("mandate_revoked", "the payment token's account no longer exists")
        return _row_to_account(row)

    def _store(self, db: Database, token_id: str, account: Account) -> None:
        assert account.balanced(), "ledger invariant broken"
        db.execute(
            "UPDATE accounts SET topped_up = ?, balance = ?, locked = ?, settled = ?, revoked = ?"
            " WHERE token_id = ?",
            (
                _amount(account.topped_up),
                _amount(account.balance),
                _amount(account.locked),
                _amount(account.settled),
                int(account.revoked),
                token_id,
            ),
        )

    def show(self, token: str) -> TokenState:
        """The token's current state."""
        token_id = self.token_id(token)
        with self._transaction() as db:
            return TokenState(token_id=token_id, account=self._load(db, token_id, update=False))

    def top_up(self, token: str, amount: Decimal | str) -> Account:
        """Add ``amount`` to the token's balance.

        Raises:
            ValueError: An amount :func:`~uamp_proto.ledger.parse_amount`
                refuses in the token's currency, or one that would take the
                token past :data:`~uamp_proto.ledger.MAX_AMOUNT` (nothing is written).
        """
        return self.top_up_id(self.token_id(token), amount).account

    def top_up_id(self, token_id: str, amount: Decimal | str) -> TokenState:
        """Add ``amount`` to the token whose id is ``token_id`` (the operator's HTTP route).

        Raises:
            LedgerError: ``mandate_revoked``: no such token here.
            ValueError: As :meth:`top_up`.
        """
        arith.parse_amount(amount)  # a malformed amount is refused before any lock
        with self._transaction() as db:
            account = self._load(db, token_id)
            value = arith.parse_amount(amount, currency=account.currency)
            account = arith.top_up(account, value)
            self._store(db, token_id, account)
            return TokenState(token_id=token_id, account=account)

    def revoke(self, token: str) -> None:
        """Stop a token from locking anything more."""
        token_id = self.token_id(token)
        with self._transaction() as db:
            self._store(db, token_id, attrs.evolve(self._load(db, token_id), revoked=True))

    # -- one response's money -------------------------------------------------

    def lock(
        self,
        token: str,
        response_id: str,
        amount: Decimal | str,
        *,
        principal: str | None = None,
    ) -> Account:
        """Hold ``amount`` for ``response_id``; a second call for the same response is a no-op.

        The lock records ``principal`` (who the response is for) and this
        ledger's :attr:`owner`.

        Raises:
            LedgerError: ``token_invalid``, ``token_expired``, ``insufficient_balance``.
        """
        token_id = self.token_id(token)
        value = _to_hold(amount)
        with self._transaction() as db:
            account = self._load(db, token_id)
            held = db.execute(
                "SELECT 1 FROM locks WHERE token_id = ? AND response_id = ?",
                (token_id, response_id),
            ).fetchone()
            if held is not None:
                return account
            account = arith.lock(account, value, self._clock())
            self._store(db, token_id, account)
            db.execute(
                "INSERT INTO locks"
                " (token_id, response_id, amount, state, principal, owner, locked_at)"
                " VALUES (?, ?, ?, 'locked', ?, ?, ?)",
                (token_id, response_id, _amount(value), principal, self.owner, self._clock()),
            )
            return account

    def extend(self, token: str, response_id: str, amount: Decimal | str) -> Account:
        """Lock ``amount`` more for a response already holding a lock (a mid-stream top-up).

        Raises:
            LedgerError: ``token_invalid``, ``token_expired``, ``insufficient_balance``,
                or ``payment_failed`` when the response holds no open lock.
        """
        token_id = self.token_id(token)
        value = _to_hold(amount)
        with self._transaction() as db:
            account = self._load(db, token_id)
            held = self._held(db, token_id, response_id)
            if held is None:
                raise LedgerError("payment_failed", "the response holds no lock on this token")
            account = arith.lock(account, value, self._clock())
            self._store(db, token_id, account)
            db.execute(
                "UPDATE locks SET amount = ? WHERE token_id = ? AND response_id = ?",
                (_amount(held + value), token_id, response_id),
            )
            return account

    @staticmethod
    def _held(db: Database, token_id: str, response_id: str) -> Decimal | None:
        """The amount of the response's open lock, or ``None``."""
        row = db.execute(
            "SELECT amount, state FROM locks WHERE token_id = ? AND response_id = ?",
            (token_id, response_id),
        ).fetchone()
        if row is None or row["state"] != "locked":
            return None
        return Decimal(row["amount"])

    def settle(self, token: str, response_id: str, cost: Decimal | str) -> Account:
        """Charge the response's real cost (at most its lock); the rest returns to the balance.

        Settling a response that was settled already, or never locked, changes
        nothing. A token that expired (or was revoked) since it locked still
        settles: the lock was taken while it was good.
        """
        return self._settle_id(self.token_id(token, expired_ok=True), response_id, cost)

    def orphan(self, response_id: str) -> str | None:
        """The token id of ``response_id`` 's open lock if its server died, else ``None``.

        For the server that carries the response on after that loss
        (docs/resume.md, "Node loss"): it settles that lock
        (:meth:`settle_orphan`) instead of locking again, so the response is
        charged once.
        """
        return self.find_orphan(response_id)[0]

    def find_orphan(self, response_id: str) -> tuple[str | None, bool]:
        """:meth:`orphan`, and whether another server that still looks alive holds the lock.

        A server that died less than :attr:`liveness` seconds ago looks
        alive: the one carrying its response on asks again until it does
        not (:meth:`LedgerPolicy.adopt <uamp_trio.trust.payments.LedgerPolicy.adopt>`).
        """
        with self._transaction() as db:
            row = db.execute(
                "SELECT token_id, owner FROM locks WHERE response_id = ? AND state = 'locked'",
                (response_id,),
            ).fetchone()
            if row is None or row["owner"] == self.owner:
                return None, False
            if self._alive(db, row["owner"]):
                return None, True
        return str(row["token_id"]), False

    def settle_orphan(self, token_id: str, response_id: str, cost: Decimal | str) -> Account:
        """:meth:`settle` a lock found by :meth:`orphan` (a no-op once settled)."""
        return self._settle_id(token_id, response_id, cost)

    def _settle_id(self, token_id: str, response_id: str, cost: Decimal | str) -> Account:
        if isinstance(cost, Decimal) and cost.is_finite() and cost > arith.MAX_AMOUNT:
            cost = arith.MAX_AMOUNT  # more than any lock: the whole lock is charged
        value = arith.parse_amount(cost)
        with self._transaction() as db:
            account = self._load(db, token_id)
            held = self._held(db, token_id, response_id)
            if held is None:
                return account
            account = arith.settle(account, held, value)
            self._store(db, token_id, account)
            db.execute(
                "UPDATE locks SET state = 'settled', charged = ?"
                " WHERE token_id = ? AND response_id = ?",
                (_amount(min(value, held)), token_id, response_id),
            )
            return account

    def release(self, token: str, response_id: str) -> Account:
        """End the response's lock with nothing charged."""
        return self.settle(token, response_id, Decimal(0))

    def recover(self, *, grace: float = 0.0) -> int:
        """Return the open locks of dead server instances to their balances.

        Call at start, before serving. Locks held by a server that still
        runs are left to it. Returns how many locks were released.

        ``grace``: leave a dead server's lock taken less than this many
        seconds ago. Its response may still be carried on by a server that
        resumes the session from a log that outlived the process
        (docs/resume.md, "Node loss"), which settles that lock
        (:meth:`orphan`) -- releasing it first would make that response free.
        """
        oldest = self._clock() - grace
        with self._transaction() as db:
            found = db.execute(
                "SELECT token_id, response_id, owner, locked_at FROM locks WHERE state = 'locked'"
                " ORDER BY token_id, response_id"
            ).fetchall()
            dead = [
                r
                for r in found
                if r["owner"] != self.owner
                and (r["locked_at"] is None or r["locked_at"] <= oldest)
                and not self._alive(db, r["owner"])
            ]
            freed = 0
            for row in dead:
                token_id, response_id = row["token_id"], row["response_id"]
                account = self._load(db, token_id)
                # Read again under the token's row lock: another server may have settled it.
                held = self._held(db, token_id, response_id)
                if held is None:
                    continue
                self._store(db, token_id, arith.release(account, held))
                db.execute(
                    "UPDATE locks SET state = 'settled', charged = '0'"
                    " WHERE token_id = ? AND response_id = ?",
                    (token_id, response_id),
                )
                freed += 1
            return freed

    def entries(self, token: str) -> list[dict[str, Any]]:
        """The token's locks, oldest first, with their principal and owner."""
        token_id = self.token_id(token)
        with self._transaction() as db:
            rows = db.execute(
                "SELECT response_id, amount, charged, state, principal, owner FROM locks"
                f" WHERE token_id = ? ORDER BY {self.LOCK_ORDER}",
                (token_id,),
            ).fetchall()
        return [
            {k: (str(v) if isinstance(v, Decimal) else v) for k, v in dict(row).items()}
            for row in rows
        ]

    def totals(self) -> dict[str, Decimal]:
        """Sums over every token (issued, topped_up, balance, locked, settled)."""
        names = ("issued", "topped_up", "balance", "locked", "settled")
        sums = dict.fromkeys(names, Decimal(0))
        with self._transaction() as db:
            for row in db.execute("SELECT * FROM accounts").fetchall():
                for name in names:
                    sums[name] += Decimal(row[name])
        return sums
