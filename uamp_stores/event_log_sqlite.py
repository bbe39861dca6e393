"""Session event logs in one SQLite file: one process, survives a restart.

Two tables, ``uamp_events`` (one row per logged event, keyed by log and
position, indexed by event id) and ``uamp_sessions`` (one row per session
record). Every call runs in a worker thread, one at a time on one
connection, so the event loop never waits on the disk; the flusher writes a
whole batch of events in one transaction and trims each log it touched to
the retention in the same transaction. Readers in this process are woken
after each flush (the interface's :meth:`~EventLog.wait`); a second process
on the same file would not wake them, which is why this store is for one
process (:class:`~uamp_stores.event_log_redis.RedisEventLog` is for
several).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from uamp_proto.resume import LogEntry, LogWindow, Retention

from ._sqlite import SqliteBacked
from .event_log import READ_BATCH, EventLog, LogKey, Op, SessionRecord, log_name

__all__ = ["SqliteEventLog"]

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS uamp_events (
    log TEXT NOT NULL,
    position INTEGER NOT NULL,
    event_id TEXT NOT NULL,
    written REAL NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (log, position)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS uamp_events_id ON uamp_events (log, event_id);
CREATE TABLE IF NOT EXISTS uamp_sessions (
    log TEXT PRIMARY KEY,
    updated REAL NOT NULL,
    record BLOB NOT NULL
);
"""


class SqliteEventLog(SqliteBacked, EventLog):
    """Event logs and session records in the SQLite file ``path``.

    Args:
        path: The database file (created when missing).
        retention: How much is kept, and how long.
        clock: Wall-clock seconds.
    """

    def __init__(
        self,
        path: str | Path,
        retention: Retention | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(retention, clock=clock)
        self._open(path, _SCHEMA)

    def _transaction(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            out = fn(db)
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        return out

    async def _write(self, batch: list[Op]) -> None:
        keep = self.retention.max_events
        horizon = self.clock() - 2 * self.retention.max_age

        def write(db: sqlite3.Connection) -> None:
            rows: list[tuple[str, int, str, float, bytes]] = []
            last: dict[str, tuple[int, float]] = {}

            def put_events() -> None:
                db.executemany(
                    "INSERT OR REPLACE INTO uamp_events "
                    "(log, position, event_id, written, data) VALUES (?, ?, ?, ?, ?)",
                    rows,
                )
                rows.clear()

            for kind, key, payload, written in batch:
                name = log_name(key)
                if kind == "event":
                    rows.append((name, payload.position, payload.event_id, written, payload.data))
                    last[name] = (payload.position, written)
                    continue
                put_events()  # in order: the events queued before this record
                if kind == "lost":  # its queued writes were dropped (:meth:`EventLog._shed`)
                    db.execute("DELETE FROM uamp_events WHERE log = ?", (name,))
                    db.execute("DELETE FROM uamp_sessions WHERE log = ?", (name,))
                    last.pop(name, None)
                    continue
                if kind == "reset":
                    # Forgotten sessions go first (the sweep rides on session creation).
                    db.execute(
                        "DELETE FROM uamp_events WHERE log IN "
                        "(SELECT log FROM uamp_sessions WHERE updated < ?)",
                        (horizon,),
                    )
                    db.execute("DELETE FROM uamp_sessions WHERE updated < ?", (horizon,))
                    db.execute("DELETE FROM uamp_events WHERE log = ?", (name,))
                    last.pop(name, None)
                db.execute(
                    "INSERT OR REPLACE INTO uamp_sessions (log, updated, record) VALUES (?, ?, ?)",
                    (name, written, payload.encode()),
                )
            put_events()
            for name, (position, written) in last.items():
                db.execute(
                    "DELETE FROM uamp_events WHERE log = ? AND position <= ?",
                    (name, position - keep),
                )
                db.execute(
                    "UPDATE uamp_sessions SET updated = MAX(updated, ?) WHERE log = ?",
                    (written, name),
                )

        await self._call(self._transaction, write)

    async def _load(self, key: LogKey) -> SessionRecord | None:
        def load() -> SessionRecord | None:
            row = self._db.execute(
                "SELECT updated, record FROM uamp_sessions WHERE log = ?", (log_name(key),)
            ).fetchone()
            if row is None:
                return None
            record = SessionRecord.decode(row[1])
            record.updated = row[0]
            return record

        record = await self._call(load)
        if record is None or self.retention.forgotten(record.updated, self.clock()):
            return None
        return record

    async def window(self, key: LogKey) -> LogWindow:
        def window() -> LogWindow:
            row = self._db.execute(
                "SELECT MIN(position), MAX(position) FROM uamp_events WHERE log = ?",
                (log_name(key),),
            ).fetchone()
            if row is None or row[0] is None:
                return LogWindow()
            return LogWindow(row[0], row[1])

        return await self._call(window)

    async def find(self, key: LogKey, event_id: str) -> int | None:
        def find() -> int | None:
            row = self._db.execute(
                "SELECT MAX(position) FROM uamp_events WHERE log = ? AND event_id = ?",
                (log_name(key), event_id),
            ).fetchone()
            return None if row is None else row[0]

        return await self._call(find)

    async def read(self, key: LogKey, after: int, limit: int = READ_BATCH) -> list[LogEntry]:
        def read() -> list[LogEntry]:
            rows = self._db.execute(
                "SELECT position, event_id, data FROM uamp_events "
                "WHERE log = ? AND position > ? ORDER BY position LIMIT ?",
                (log_name(key), after, limit),
            ).fetchall()
            return [LogEntry(p, i, bytes(d)) for p, i, d in rows]

        return await self._call(read)

    async def drop(self, key: LogKey) -> None:
        self._forget_pending(key)
        name = log_name(key)

        def drop(db: sqlite3.Connection) -> None:
            db.execute("DELETE FROM uamp_events WHERE log = ?", (name,))
            db.execute("DELETE FROM uamp_sessions WHERE log = ?", (name,))

        await self._call(self._transaction, drop)
        self.release(key)

    async def aclose(self) -> None:
        await super().aclose()
        async with self._lock:
            self._db.close()
