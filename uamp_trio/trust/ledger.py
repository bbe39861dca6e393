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
charges once). A lock still open when its process died is returned to the
balance by :meth:`Ledger.recover` at the next start.
"""

from __future__ import annotations

import os
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs
import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from uamp_proto import ledger as arith
from uamp_proto.ledger import Account, LedgerError, format_amount

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
    PRIMARY KEY (token_id, response_id)
);
"""

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
    """

    def __init__(self, path: str | Path, *, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self._clock = clock
        self._db = sqlite3.connect(self.path, isolation_level=None, timeout=30.0)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self._key = self._signing_key()

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

    def token_id(self, token: str) -> str:
        """The id a token names, once its signature is verified.

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
        if isinstance(exp, int | float) and self._clock() >= exp:
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

    def lock(self, token: str, response_id: str, amount: Decimal | str) -> Account:
        """Hold ``amount`` for ``response_id``; a second call for the same response is a no-op.

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
                "INSERT INTO locks (token_id, response_id, amount, state)"
                " VALUES (?, ?, ?, 'locked')",
                (token_id, response_id, str(value)),
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

        Settling a response that was settled already, or never locked, changes nothing.
        """
        token_id = self.token_id(token)
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

    def recover(self) -> int:
        """Return every open lock to its balance (locks left by a process that died).

        Call once at start, before serving. Returns how many locks were released.
        """
        with self._transaction() as db:
            rows = db.execute(
                "SELECT token_id, response_id, amount FROM locks WHERE state = 'locked'"
            ).fetchall()
            for row in rows:
                account = arith.release(self._load(db, row["token_id"]), Decimal(row["amount"]))
                self._store(db, row["token_id"], account)
                db.execute(
                    "UPDATE locks SET state = 'settled', charged = '0'"
                    " WHERE token_id = ? AND response_id = ?",
                    (row["token_id"], row["response_id"]),
                )
            return len(rows)

    def totals(self) -> dict[str, Decimal]:
        """Sums over every token (issued, topped_up, balance, locked, settled)."""
        names = ("issued", "topped_up", "balance", "locked", "settled")
        sums = dict.fromkeys(names, Decimal(0))
        with self._transaction() as db:
            for row in db.execute("SELECT * FROM accounts"):
                for name in names:
                    sums[name] += Decimal(row[name])
        return sums
