"""A persistence adapter backed by one SQLite file in WAL mode.

Theory of operation
-------------------
A SessionJSON is split in two tables: ``uap_sessions`` holds everything but
the checkpoints (one row per session), ``uap_checkpoints`` one row per
checkpoint, in list order. Checkpoints never change once made, so a save
inserts only the checkpoints that are new (or whose JSON changed, by digest)
and deletes those no longer listed, all in one transaction. Saving after
every step therefore costs one session row and one checkpoint row, not the
whole history of checkpoints again.

Rows are keyed by ``(owner, session id)`` (the owner's storage key,
:func:`~uamp_agents.persistence.owner_key`; ``""`` for an unowned session).
A file written before owners existed (tables ``uap_sessions`` and
``uap_checkpoints``) is moved to the owned tables on first open, its
sessions unowned.

The database runs in WAL mode with ``synchronous=FULL``: a committed save
survives the process being killed (and a power cut), and readers in other
processes do not block the writer. The stdlib ``sqlite3`` calls block, so
they run in a worker thread, one at a time per adapter.
"""

from __future__ import annotations

import builtins
import hashlib
import os
import sqlite3
from pathlib import Path
from typing import Any, Final

import orjson
import trio

from uamp_proto.principal import Principal

from ._base import PersistenceError, encode_session, owner_key, session_id_of, stored_owner

__all__ = ["SQLiteAdapter"]

#: Seconds a writer waits for another process's lock before failing.
BUSY_TIMEOUT: Final = 10.0

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS uap_owned_sessions (
    owner TEXT NOT NULL,
    id TEXT NOT NULL,
    updated_at TEXT,
    split INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (owner, id)
);
CREATE TABLE IF NOT EXISTS uap_owned_checkpoints (
    owner TEXT NOT NULL,
    session_id TEXT NOT NULL,
    id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    digest TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (owner, session_id, id)
);
CREATE INDEX IF NOT EXISTS uap_owned_checkpoints_order
    ON uap_owned_checkpoints (owner, session_id, seq);
"""

#: Moves a file of the first schema (no owners) to the owned tables, unowned.
_MIGRATE: Final = """
INSERT OR IGNORE INTO uap_owned_sessions (owner, id, updated_at, split, body)
    SELECT '', id, updated_at, split, body FROM uap_sessions;
INSERT OR IGNORE INTO uap_owned_checkpoints (owner, session_id, id, seq, digest, body)
    SELECT '', session_id, id, seq, digest, body FROM uap_checkpoints;
DROP TABLE uap_checkpoints;
DROP TABLE uap_sessions;
"""


def _digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


class SQLiteAdapter:
    """Stores sessions in the SQLite database at ``path`` (created if missing).

    Close it with :meth:`aclose` (or ``async with``) when done.

    Args:
        path: The database file.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._conn: sqlite3.Connection | None = None
        self._lock = trio.Lock()

    # --- connection -----------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(
                self.path,
                timeout=BUSY_TIMEOUT,
                isolation_level=None,  # explicit BEGIN/COMMIT below
                check_same_thread=False,  # used from worker threads, one at a time
            )
            try:
                mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    raise PersistenceError(f"{self.path}: could not enable WAL mode ({mode})")
                conn.execute("PRAGMA synchronous=FULL")
                conn.executescript(_SCHEMA)
                old = conn.execute(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'uap_sessions'"
                ).fetchone()
                if old is not None:
                    conn.executescript(f"BEGIN IMMEDIATE;{_MIGRATE}COMMIT;")
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    async def _run(self, fn: Any, *args: Any) -> Any:
        async with self._lock:
            try:
                return await trio.to_thread.run_sync(fn, *args)
            except sqlite3.Error as exc:
                raise PersistenceError(f"{self.path}: {exc}") from exc

    async def journal_mode(self) -> str:
        """The database's journal mode (``"wal"``)."""

        def query() -> str:
            return str(self._connect().execute("PRAGMA journal_mode").fetchone()[0])

        result: str = await self._run(query)
        return result

    async def aclose(self) -> None:
        """Close the database connection (it reopens on next use)."""

        def close() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        await self._run(close)

    async def __aenter__(self) -> SQLiteAdapter:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # --- adapter --------------------------------------------------------

    def _save(
        self,
        owner: str,
        session_id: str,
        head: bytes,
        split: bool,
        checkpoints: builtins.list[Any],
    ) -> None:
        conn = self._connect()
        rows = []
        for seq, checkpoint in enumerate(checkpoints):
            cp_id = checkpoint.get("id") if isinstance(checkpoint, dict) else None
            if not isinstance(cp_id, str):
                cp_id = f"#{seq}"  # keeps an id-less entry in place; validation is the reader's
            body = orjson.dumps(checkpoint)
            rows.append((cp_id, seq, _digest(body), body.decode()))
        updated = orjson.loads(head).get("updatedAt")
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(
                "INSERT INTO uap_owned_sessions (owner, id, updated_at, split, body)"
                " VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT(owner, id) DO UPDATE SET updated_at = excluded.updated_at, "
                "split = excluded.split, body = excluded.body",
                (
                    owner,
                    session_id,
                    updated if isinstance(updated, str) else None,
                    int(split),
                    head.decode(),
                ),
            )
            stored = {
                cp_id: (seq, digest)
                for cp_id, seq, digest in conn.execute(
                    "SELECT id, seq, digest FROM uap_owned_checkpoints"
                    " WHERE owner = ? AND session_id = ?",
                    (owner, session_id),
                )
            }
            keep = {row[0] for row in rows}
            conn.executemany(
                "DELETE FROM uap_owned_checkpoints WHERE owner = ? AND session_id = ? AND id = ?",
                [(owner, session_id, cp_id) for cp_id in stored if cp_id not in keep],
            )
            conn.executemany(
                "INSERT OR REPLACE INTO uap_owned_checkpoints"
                " (owner, session_id, id, seq, digest, body) VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (owner, session_id, cp_id, seq, digest, body)
                    for cp_id, seq, digest, body in rows
                    if stored.get(cp_id) != (seq, digest)
                ],
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    async def save(self, session_json: dict[str, Any]) -> None:
        """Store ``session_json`` in one transaction, durable once it returns.

        Raises:
            PersistenceError: No string ``id``, not JSON-serialisable, or a
                database error.
        """
        session_id = session_id_of(session_json)
        checkpoints = session_json.get("checkpoints")
        head_value = dict(session_json)
        split = isinstance(checkpoints, builtins.list)
        if split:
            # Stored as rows; the key stays (as null) to keep its place.
            head_value["checkpoints"] = None
        else:
            checkpoints = []
        head = encode_session(head_value, session_id)
        owner = stored_owner(session_json)
        await self._run(self._save, owner, session_id, head, split, checkpoints)

    def _load(self, owner: str, session_id: str) -> dict[str, Any] | None:
        conn = self._connect()
        # One read transaction, so the head and its checkpoints match.
        conn.execute("BEGIN")
        try:
            row = conn.execute(
                "SELECT split, body FROM uap_owned_sessions WHERE owner = ? AND id = ?",
                (owner, session_id),
            ).fetchone()
            if row is None:
                return None
            value: dict[str, Any] = orjson.loads(row[1])
            if row[0]:
                value["checkpoints"] = [
                    orjson.loads(body)
                    for (body,) in conn.execute(
                        "SELECT body FROM uap_owned_checkpoints"
                        " WHERE owner = ? AND session_id = ? ORDER BY seq",
                        (owner, session_id),
                    )
                ]
            return value
        finally:
            conn.execute("COMMIT")

    async def load(
        self, session_id: str, *, owner: Principal | None = None
    ) -> dict[str, Any] | None:
        """The stored SessionJSON of ``owner``'s ``session_id``, or ``None``."""
        result: dict[str, Any] | None = await self._run(self._load, owner_key(owner), session_id)
        return result

    async def list(self, *, owner: Principal | None = None) -> builtins.list[str]:
        """The session ids stored for ``owner``, sorted."""
        key = owner_key(owner)

        def query() -> builtins.list[str]:
            rows = self._connect().execute(
                "SELECT id FROM uap_owned_sessions WHERE owner = ? ORDER BY id", (key,)
            )
            return [row[0] for row in rows]

        result: builtins.list[str] = await self._run(query)
        return result

    async def delete(self, session_id: str, *, owner: Principal | None = None) -> None:
        """Remove ``owner``'s session and its checkpoints."""
        key = owner_key(owner)

        def remove() -> None:
            conn = self._connect()
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute(
                    "DELETE FROM uap_owned_checkpoints WHERE owner = ? AND session_id = ?",
                    (key, session_id),
                )
                conn.execute(
                    "DELETE FROM uap_owned_sessions WHERE owner = ? AND id = ?", (key, session_id)
                )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

        await self._run(remove)
