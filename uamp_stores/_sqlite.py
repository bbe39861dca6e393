"""The SQLite file behind a store: WAL mode, used from worker threads one call at a time."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio

T = TypeVar("T")


def connect(path: str | Path, schema: str) -> sqlite3.Connection:
    """A connection to ``path`` (created when missing) in WAL mode, with ``schema`` applied.

    Autocommit (``isolation_level=None``): callers open their own transactions.
    Not tied to the opening thread, because worker threads use it (one at a time).
    """
    db = sqlite3.connect(path, isolation_level=None, timeout=30.0, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.executescript(schema)
    return db


class SqliteBacked:
    """A store over one SQLite file whose blocking calls run in a worker thread, one at a time."""

    path: str
    _db: sqlite3.Connection
    _lock: anyio.Lock

    def _open(self, path: str | Path, schema: str) -> None:
        self.path = str(path)
        self._db = connect(self.path, schema)
        self._lock = anyio.Lock()

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        async with self._lock:
            return await anyio.to_thread.run_sync(fn, *args)
