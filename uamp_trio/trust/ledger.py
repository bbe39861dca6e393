"""The payment ledger: payment tokens and their money in one SQLite file.

Theory of operation. Each change (issue, top-up, lock, settle, release) is one
``BEGIN IMMEDIATE`` transaction that reads the token's row, asks
:mod:`uamp_proto.ledger` whether the change is allowed and what the row
becomes, and writes it back with the lock's own row; SQLite's write lock makes
concurrent spenders, in this process or others, take turns, so no token is
ever driven below zero. The file runs in WAL mode.

A payment token is a JWT (EdDSA) signed by the ledger's own key, which lives
in the file; its ``jti`` names the row. Verification checks the signature
before any lookup, so a guessed id is worth nothing.

Locks are keyed by ``(token, response_id)``: locking or settling the same
response twice changes nothing the second time (``payment.submit`` sent twice
charges once). Each lock records the principal it was taken for and the
server instance that holds it (:mod:`uamp_trio.trust.owners`). A lock still
open when its process died is returned to the balance by
:meth:`Ledger.recover` at the next start of any server on the file; the open
locks of servers that still run are left alone.

The methods are blocking SQLite calls. A server makes them through
:meth:`Ledger.call`, which runs them in a worker thread, one at a time per
ledger (a limiter of 1), shielded from cancellation so that a settlement
started in a ``finally`` block completes.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import attrs
import jwt
import trio
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from uamp_proto import ledger as arith
from uamp_proto.ledger import Account, LedgerError, format_amount

from .owners import instance_id, is_alive

__all__ = ["Ledger", "LedgerError", "TokenState"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS accounts (
    token_id TEXT PRIMARY KEY,
    currency TEXT NOT NULL,
    issued TEXT NOT NULL,
    topped_up TEXT NOT NULL,
    balance TEXT NOT NULL,
    locked TEXT NOT NULL,
    settled TEXT NOT NULL,
    expires_at REAL,
    revoked INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS locks (
    token_id TEXT NOT NULL REFERENCES accounts(token_id),
    response_id TEXT NOT NULL,
    amount TEXT NOT NULL,
    charged TEXT,
    state TEXT NOT NULL CHECK (state IN ('locked', 'settled')),
    principal TEXT,
    owner TEXT,
    locked_at REAL,
    PRIMARY KEY (token_id, response_id)
);
"""

#: Columns added to ``locks`` after its first version (older files gain them), with their types.
_ADDED_LOCK_COLUMNS = (("principal", "TEXT"), ("owner", "TEXT"), ("locked_at", "REAL"))

_P = ParamSpec("_P")
_T = TypeVar("_T")

_ISSUER = "uamp-ledger"


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


def _row_to_account(row: sqlite3.Row) -> Account:
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


class Ledger:
    """Payment tokens in one SQLite file.

    Args:
        path: The database file (created with its signing key on first use).
        clock: Seconds since the epoch (injectable for tests).
        owner: The instance id recorded with every lock this ledger takes
            (default: this process's, :func:`~uamp_trio.trust.owners.instance_id`).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        clock: Callable[[], float] = time.time,
        owner: str | None = None,
    ) -> None:
        self.path = Path(path)
        self._clock = clock
        self.owner = owner or instance_id()
        # Used from worker threads (Ledger.call), one at a time.
        self._db = sqlite3.connect(
            self.path, isolation_level=None, timeout=30.0, check_same_thread=False
        )
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        have = {row["name"] for row in self._db.execute("PRAGMA table_info(locks)")}
        for column, kind in _ADDED_LOCK_COLUMNS:
            if column not in have:
                self._db.execute(f"ALTER TABLE locks ADD COLUMN {column} {kind}")
        self._key = self._signing_key()
        self._limiter = trio.CapacityLimiter(1)

    async def call(self, method: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """Run one of this ledger's methods in a worker thread (see the module docstring).

        Shielded: once asked, the call completes and its result is returned
        even if the caller is being cancelled (the cancellation lands at the
        caller's next checkpoint).
        """
        with trio.CancelScope(shield=True):
            result = await trio.to_thread.run_sync(
                functools.partial(method, *args, **kwargs), limiter=self._limiter
            )
        return result

    def now(self) -> float:
        """The ledger's clock (seconds since the epoch)."""
        return self._clock()

    def close(self) -> None:
        """Close the database."""
        self._db.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _signing_key(self) -> ed25519.Ed25519PrivateKey:
        with self._transaction() as db:
            row = db.execute("SELECT value FROM meta WHERE key = 'signing_key'").fetchone()
            if row is None:
                key = ed25519.Ed25519PrivateKey.generate()
                pem = key.private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.PKCS8,
                    serialization.NoEncryption(),
                )
                db.execute("INSERT INTO meta (key, value) VALUES ('signing_key', ?)", (pem,))
                return key
        loaded = serialization.load_pem_private_key(row["value"], password=None)
        assert isinstance(loaded, ed25519.Ed25519PrivateKey)
        return loaded

    # -- tokens ---------------------------------------------------------------

    def issue(
        self, amount: Decimal | str, currency: str, *, expires_in: float | None = None
    ) -> str:
        """Create a token holding ``amount``; return the signed token string."""
        value = arith.parse_amount(amount)
        if not currency.isalpha() or len(currency) != 3:
            raise ValueError(f"currency must be a 3-letter code: {currency!r}")
        now = self._clock()
        expires_at = None if expires_in is None else now + expires_in
        token_id = "pt_" + uuid.UUID(bytes=os.urandom(16)).hex
        account = Account.new(value, currency.upper(), expires_at)
        with self._transaction() as db:
            db.execute(
                "INSERT INTO accounts VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0)",
                (
                    token_id,
                    account.currency,
                    str(account.issued),
                    str(account.topped_up),
                    str(account.balance),
                    str(account.locked),
                    str(account.settled),
                    expires_at,
                ),
            )
        claims: dict[str, Any] = {"jti": token_id, "iss": _ISSUER, "iat": int(now)}
        if expires_at is not None:
            claims["exp"] = int(expires_at)
        return jwt.encode(claims, self._key, algorithm="EdDSA")

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
                self._key.public_key(),
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

    def _load(self, db: sqlite3.Connection, token_id: str) -> Account:
        row = db.execute("SELECT * FROM accounts WHERE token_id = ?", (token_id,)).fetchone()
        if row is None:
            raise LedgerError("token_invalid", "the payment token is invalid")
        return _row_to_account(row)

    def _store(self, db: sqlite3.Connection, token_id: str, account: Account) -> None:
        assert account.balanced(), "ledger invariant broken"
        db.execute(
            "UPDATE accounts SET topped_up = ?, balance = ?, locked = ?, settled = ?, revoked = ?"
            " WHERE token_id = ?",
            (
                str(account.topped_up),
                str(account.balance),
                str(account.locked),
                str(account.settled),
                int(account.revoked),
                token_id,
            ),
        )

    def show(self, token: str) -> TokenState:
        """The token's current state."""
        token_id = self.token_id(token)
        with self._transaction() as db:
            return TokenState(token_id=token_id, account=self._load(db, token_id))

    def top_up(self, token: str, amount: Decimal | str) -> Account:
        """Add ``amount`` to the token's balance."""
        token_id = self.token_id(token)
        value = arith.parse_amount(amount)
        with self._transaction() as db:
            account = arith.top_up(self._load(db, token_id), value)
            self._store(db, token_id, account)
            return account

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
        value = arith.parse_amount(amount)
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
                (token_id, response_id, str(value), principal, self.owner, self._clock()),
            )
            return account

    def extend(self, token: str, response_id: str, amount: Decimal | str) -> Account:
        """Lock ``amount`` more for a response already holding a lock (a mid-stream top-up).

        Raises:
            LedgerError: ``token_invalid``, ``token_expired``, ``insufficient_balance``,
                or ``payment_failed`` when the response holds no open lock.
        """
        token_id = self.token_id(token)
        value = arith.parse_amount(amount)
        with self._transaction() as db:
            account = self._load(db, token_id)
            held = self._held(db, token_id, response_id)
            if held is None:
                raise LedgerError("payment_failed", "the response holds no lock on this token")
            account = arith.lock(account, value, self._clock())
            self._store(db, token_id, account)
            db.execute(
                "UPDATE locks SET amount = ? WHERE token_id = ? AND response_id = ?",
                (str(held + value), token_id, response_id),
            )
            return account

    @staticmethod
    def _held(db: sqlite3.Connection, token_id: str, response_id: str) -> Decimal | None:
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
        with self._transaction() as db:
            row = db.execute(
                "SELECT token_id, owner FROM locks WHERE response_id = ? AND state = 'locked'",
                (response_id,),
            ).fetchone()
        if row is None or row["owner"] == self.owner or is_alive(row["owner"]):
            return None
        return str(row["token_id"])

    def settle_orphan(self, token_id: str, response_id: str, cost: Decimal | str) -> Account:
        """:meth:`settle` a lock found by :meth:`orphan` (a no-op once settled)."""
        return self._settle_id(token_id, response_id, cost)

    def _settle_id(self, token_id: str, response_id: str, cost: Decimal | str) -> Account:
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
                (str(min(value, held)), token_id, response_id),
            )
            return account

    def release(self, token: str, response_id: str) -> Account:
        """End the response's lock with nothing charged."""
        return self.settle(token, response_id, Decimal(0))

    def recover(self, *, grace: float = 0.0) -> int:
        """Return the open locks of dead server instances to their balances.

        Call at start, before serving. Locks held by a server that still
        runs (another process on the same file) are left to it; see
        :mod:`uamp_trio.trust.owners`. Returns how many locks were released.

        ``grace``: leave a dead server's lock taken less than this many
        seconds ago. Its response may still be carried on by a server that
        resumes the session from a log that outlived the process
        (docs/resume.md, "Node loss"), which settles that lock
        (:meth:`orphan`) -- releasing it first would make that response free.
        """
        oldest = self._clock() - grace
        with self._transaction() as db:
            found = db.execute(
                "SELECT token_id, response_id, amount, owner, locked_at FROM locks"
                " WHERE state = 'locked'"
            ).fetchall()
            rows = [
                r
                for r in found
                if r["owner"] != self.owner
                and (r["locked_at"] is None or r["locked_at"] <= oldest)
                and not is_alive(r["owner"])
            ]
            for row in rows:
                account = arith.release(self._load(db, row["token_id"]), Decimal(row["amount"]))
                self._store(db, row["token_id"], account)
                db.execute(
                    "UPDATE locks SET state = 'settled', charged = '0'"
                    " WHERE token_id = ? AND response_id = ?",
                    (row["token_id"], row["response_id"]),
                )
            return len(rows)

    def entries(self, token: str) -> list[dict[str, Any]]:
        """The token's locks, oldest first, with their principal and owner."""
        token_id = self.token_id(token)
        with self._transaction() as db:
            rows = db.execute(
                "SELECT response_id, amount, charged, state, principal, owner FROM locks"
                " WHERE token_id = ? ORDER BY rowid",
                (token_id,),
            ).fetchall()
        return [dict(row) for row in rows]

    def totals(self) -> dict[str, Decimal]:
        """Sums over every token (issued, topped_up, balance, locked, settled)."""
        names = ("issued", "topped_up", "balance", "locked", "settled")
        sums = dict.fromkeys(names, Decimal(0))
        with self._transaction() as db:
            for row in db.execute("SELECT * FROM accounts"):
                for name in names:
                    sums[name] += Decimal(row[name])
        return sums
