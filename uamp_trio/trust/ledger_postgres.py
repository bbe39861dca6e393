"""The payment ledger on PostgreSQL, shared by servers on many machines.

``uamp serve --ledger postgresql://user@host/db`` (also ``postgres://``).

Theory of operation. What the ledger does is :class:`~.ledger_sql.SqlLedger`'s;
this backend supplies the database, in three parts.

* **Transactions.** Each change is one ``READ COMMITTED`` transaction that
  takes the token's row with ``SELECT ... FOR UPDATE`` before it reads
  anything else: writers of one token queue on that row lock, writers of other
  tokens do not wait at all. Amounts are ``NUMERIC`` and the table's ``CHECK``
  constraints refuse a negative balance or lock even if a bug asked for one.
  Connections come from a pool (psycopg 3's ``psycopg_pool``, blocking, used
  from worker threads as the SQLite ledger is: psycopg's async API runs on
  asyncio only, and a thread per call keeps the event loop free the same way);
  waiting for a connection, connecting and every statement have timeouts.
* **Liveness by heartbeat.** A lock's owner may run on another machine, so a
  pid means nothing here. Every open ledger writes its instance id and the
  database's clock to ``ledger_nodes`` from a daemon thread every
  ``heartbeat / 3`` seconds; an owner is alive while its row is younger than
  ``heartbeat`` seconds by the database's clock (one clock for every node, so
  skew between machines does not matter). A process killed with ``-9`` stops
  beating, and its locks become recoverable ``heartbeat`` seconds later; a
  ledger that closes deletes its row at once.
* **Migrations.** The schema is versioned in ``ledger_schema``. A server
  refuses to start on a database whose version is not its own, naming the
  command that fixes it; ``uamp ledger migrate --ledger URL`` (:func:`migrate`)
  applies what is missing in one transaction under an advisory lock, so two
  operators running it at once apply it once.

The URL may carry a password: no message of this module repeats it
(:func:`redact`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

import psycopg
from psycopg import conninfo
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from .ledger_sql import Cursor, Database, SqlLedger

__all__ = ["SCHEMA_VERSION", "PostgresLedger", "is_postgres_url", "migrate", "redact"]

#: Each entry is one schema version's statements; version N is ``MIGRATIONS[N - 1]``.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE meta (key TEXT PRIMARY KEY, value BYTEA NOT NULL);
    CREATE TABLE accounts (
        token_id TEXT PRIMARY KEY,
        currency TEXT NOT NULL,
        issued NUMERIC NOT NULL,
        topped_up NUMERIC NOT NULL,
        balance NUMERIC NOT NULL CHECK (balance >= 0),
        locked NUMERIC NOT NULL CHECK (locked >= 0),
        settled NUMERIC NOT NULL CHECK (settled >= 0),
        expires_at DOUBLE PRECISION,
        revoked INTEGER NOT NULL DEFAULT 0
    );
    CREATE TABLE locks (
        seq BIGSERIAL UNIQUE,
        token_id TEXT NOT NULL REFERENCES accounts(token_id),
        response_id TEXT NOT NULL,
        amount NUMERIC NOT NULL CHECK (amount >= 0),
        charged NUMERIC,
        state TEXT NOT NULL CHECK (state IN ('locked', 'settled')),
        principal TEXT,
        owner TEXT,
        locked_at DOUBLE PRECISION,
        PRIMARY KEY (token_id, response_id)
    );
    CREATE INDEX locks_open ON locks (response_id) WHERE state = 'locked';
    CREATE TABLE ledger_nodes (owner TEXT PRIMARY KEY, beat_at DOUBLE PRECISION NOT NULL);
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)

#: Any 64-bit number both migrators agree on: the advisory lock that serialises them.
_MIGRATION_LOCK = 0x75616D70_6C656467  # "uamp" "ledg"

_NOW = "extract(epoch from clock_timestamp())"


def is_postgres_url(spec: str) -> bool:
    """Whether ``--ledger`` names a PostgreSQL database rather than a file."""
    return spec.startswith(("postgresql://", "postgres://"))


def redact(url: str) -> str:
    """``url`` without its password, for messages."""
    try:
        parts = conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "postgresql://(unparsable URL)"
    host = parts.get("host", "localhost")
    port = f":{parts['port']}" if parts.get("port") else ""
    user = f"{parts['user']}@" if parts.get("user") else ""
    return f"postgresql://{user}{host}{port}/{parts.get('dbname', '')}"


@lru_cache(maxsize=256)
def _placeholders(sql: str) -> str:
    """The ledger's ``?`` placeholders as psycopg's ``%s`` (no ``%`` or ``?`` appears otherwise)."""
    return sql.replace("?", "%s")


class _Connection:
    """A psycopg connection that takes the ledger's ``?`` placeholders."""

    __slots__ = ("_conn",)

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def execute(self, sql: str, params: Any = None, /) -> Cursor:
        return self._conn.execute(_placeholders(sql), params)


def _connect_kwargs(connect_timeout: float, statement_timeout: float) -> dict[str, Any]:
    return {
        "autocommit": True,  # transactions are explicit (conn.transaction())
        "row_factory": dict_row,
        "connect_timeout": max(1, round(connect_timeout)),
        "options": f"-c statement_timeout={round(statement_timeout * 1000)}",
    }


def schema_version(url: str, *, connect_timeout: float = 10.0) -> int:
    """The schema version of the database at ``url`` (0: no ledger there yet)."""
    with psycopg.connect(url, **_connect_kwargs(connect_timeout, 30.0)) as conn:
        exists = conn.execute("SELECT to_regclass('ledger_schema') AS t").fetchone()
        if exists is None or exists["t"] is None:
            return 0
        row = conn.execute("SELECT max(version) AS v FROM ledger_schema").fetchone()
        return int(row["v"] or 0) if row is not None else 0


def migrate(url: str, *, connect_timeout: float = 10.0) -> tuple[int, int]:
    """Bring the database at ``url`` to :data:`SCHEMA_VERSION`; returns (before, after).

    Raises:
        ValueError: The database is newer than this uamp (one line for the user).
    """
    with (
        psycopg.connect(url, **_connect_kwargs(connect_timeout, 300.0)) as conn,
        conn.transaction(),
    ):
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        conn.execute("CREATE TABLE IF NOT EXISTS ledger_schema (version INTEGER NOT NULL)")
        row = conn.execute("SELECT max(version) AS v FROM ledger_schema").fetchone()
        before = int(row["v"] or 0) if row is not None else 0
        if before > SCHEMA_VERSION:
            raise ValueError(
                f"the ledger at {redact(url)} has schema version {before}, newer than this"
                f" uamp's {SCHEMA_VERSION}: upgrade uamp"
            )
        for version in range(before + 1, SCHEMA_VERSION + 1):
            conn.execute(MIGRATIONS[version - 1])
            conn.execute("INSERT INTO ledger_schema (version) VALUES (%s)", (version,))
    return before, SCHEMA_VERSION


class PostgresLedger(SqlLedger):
    """Payment tokens in a PostgreSQL database; see the module docstring.

    Args:
        url: ``postgresql://user:password@host:port/dbname`` (libpq's URL).
        clock: Seconds since the epoch, for token expiry and lock ages.
        owner: The instance id recorded with this ledger's locks and heartbeat.
        pool_size: Connections at most (and ledger calls at once).
        heartbeat: Seconds without a heartbeat after which an owner is dead.
        connect_timeout: Seconds to connect, and to wait for a free pooled connection.
        statement_timeout: Seconds any statement may run.
        auto_migrate: Create or upgrade the schema instead of refusing (tests, one-off tools).

    Raises:
        ValueError: The database cannot be reached or its schema is not this
            uamp's (one line naming the fix, never the password).
    """

    FOR_UPDATE = " FOR UPDATE"
    LOCK_ORDER = "seq"

    def __init__(
        self,
        url: str,
        *,
        clock: Callable[[], float] = time.time,
        owner: str | None = None,
        pool_size: int = 8,
        heartbeat: float = 15.0,
        connect_timeout: float = 10.0,
        statement_timeout: float = 30.0,
        auto_migrate: bool = False,
    ) -> None:
        super().__init__(clock=clock, owner=owner, concurrency=pool_size)
        self.url = redact(url)
        self.heartbeat = heartbeat
        self.liveness = heartbeat
        try:
            if auto_migrate:
                migrate(url, connect_timeout=connect_timeout)
            found = schema_version(url, connect_timeout=connect_timeout)
        except psycopg.Error as exc:
            raise ValueError(f"cannot open ledger {self.url}: {_first_line(exc)}") from None
        if found != SCHEMA_VERSION:
            raise ValueError(
                f"the ledger at {self.url} has schema version {found}, this uamp needs"
                f" {SCHEMA_VERSION}: run 'uamp ledger migrate --ledger URL' first"
            )
        self._pool = ConnectionPool(
            url,
            min_size=1,
            max_size=pool_size,
            timeout=connect_timeout,
            kwargs=_connect_kwargs(connect_timeout, statement_timeout),
            open=True,
            name="uamp-ledger",
        )
        self._stop = threading.Event()
        try:
            self._beat()
            self._load_key()
        except BaseException:
            self._pool.close()
            raise
        self._beater = threading.Thread(
            target=self._beat_until_closed, name="uamp-ledger-heartbeat", daemon=True
        )
        self._beater.start()

    def __enter__(self) -> PostgresLedger:
        return self

    def close(self) -> None:
        """Stop beating, forget this owner (its locks are then recoverable), close the pool."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._beater.join(timeout=5)
        try:
            with self._transaction() as db:
                db.execute("DELETE FROM ledger_nodes WHERE owner = ?", (self.owner,))
        except (psycopg.Error, PoolTimeout):
            pass  # the heartbeat expires on its own
        self._pool.close()

    @contextmanager
    def _transaction(self) -> Iterator[Database]:
        with self._pool.connection() as conn, conn.transaction():
            yield _Connection(conn)

    def _alive(self, db: Database, owner: str | None) -> bool:
        if not owner:
            return False
        row = db.execute(
            f"SELECT 1 FROM ledger_nodes WHERE owner = ? AND beat_at > {_NOW} - ?",
            (owner, self.heartbeat),
        ).fetchone()
        return row is not None

    def _beat(self) -> None:
        with self._transaction() as db:
            db.execute(
                f"INSERT INTO ledger_nodes (owner, beat_at) VALUES (?, {_NOW})"
                f" ON CONFLICT (owner) DO UPDATE SET beat_at = {_NOW}",
                (self.owner,),
            )

    def _beat_until_closed(self) -> None:
        while not self._stop.wait(self.heartbeat / 3):
            try:
                self._beat()
            except (psycopg.Error, PoolTimeout):
                continue  # the database is away; the next beat tries again


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
