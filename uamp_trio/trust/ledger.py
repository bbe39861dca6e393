"""The payment ledger in one SQLite file (``uamp serve --ledger PATH``).

Theory of operation. What the ledger does is :class:`~.ledger_sql.SqlLedger`'s;
this backend adds the file. Each change is one ``BEGIN IMMEDIATE``
transaction: SQLite's write lock makes concurrent spenders, in this process
or others on the same machine, take turns. The file runs in WAL mode, whose
shared-memory index does not work across hosts, so a ledger file is never
shared over the network: several machines share a PostgreSQL ledger
(:mod:`.ledger_postgres`).

A lock whose process died is found by its instance id
(:mod:`uamp_trio.trust.owners`: exact on one machine, no heartbeat needed) and
freed by :meth:`~.ledger_sql.SqlLedger.recover` at the next start of any server
on the file. Calls run in a worker thread one at a time per ledger.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from uamp_proto.ledger import LedgerError

from .ledger_sql import Database, SqlLedger, TokenState
from .owners import is_alive

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


class Ledger(SqlLedger):
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
        super().__init__(clock=clock, owner=owner, concurrency=1)
        self.path = Path(path)
        # One connection for every thread that asks (SqlLedger.call's workers,
        # a command or test calling a method directly): each transaction holds
        # it alone, since sqlite3 must never run on one connection in two
        # threads at once (a process crash, not an error).
        self._one_at_a_time = threading.RLock()
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
        self._load_key()

    def close(self) -> None:
        """Close the database (after a transaction under way in another thread)."""
        with self._one_at_a_time:
            self._db.close()

    def __enter__(self) -> Ledger:
        return self

    @contextmanager
    def _transaction(self) -> Iterator[Database]:
        with self._one_at_a_time:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _alive(self, db: Database, owner: str | None) -> bool:
        return is_alive(owner)
