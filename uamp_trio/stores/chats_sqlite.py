"""Chat rooms in one SQLite file: they survive a restart (docs/chat.md).

Two tables: ``uamp_chats`` (one row per room: its key, id and record as
JSON) and ``uamp_chat_messages`` (one row per message, keyed by room and
sequence number). Every call runs in a worker thread, one at a time on one
connection, so the event loop never waits on the disk.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

import orjson

from uamp_proto.principal import Principal
from uamp_stores._sqlite import SqliteBacked

from .chats import MAX_MESSAGES, ChatKey, ChatRecord, ChatStore, StoredMessage

__all__ = ["SqliteChatStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS uamp_chats (
    room TEXT PRIMARY KEY,
    chat_id TEXT NOT NULL,
    record BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS uamp_chats_id ON uamp_chats (chat_id);
CREATE TABLE IF NOT EXISTS uamp_chat_messages (
    room TEXT NOT NULL,
    seq INTEGER NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (room, seq)
) WITHOUT ROWID;
"""


def _room(key: ChatKey) -> str:
    return orjson.dumps([list(key[0]), key[1]]).decode()


class SqliteChatStore(SqliteBacked, ChatStore):
    """Rooms and messages in the SQLite file ``path`` (created when missing)."""

    def __init__(self, path: str | Path, max_messages: int = MAX_MESSAGES) -> None:
        super().__init__(max_messages)
        self._open(path, _SCHEMA)

    async def find(self, principal: Principal, chat_id: str) -> ChatRecord | None:
        return await self._call(self._find, principal, chat_id)

    def _find(self, principal: Principal, chat_id: str) -> ChatRecord | None:
        rows = self._db.execute(
            "SELECT room, record FROM uamp_chats WHERE chat_id = ? ORDER BY rowid", (chat_id,)
        ).fetchall()
        records = [ChatRecord.from_json(orjson.loads(r[1])) for r in rows]
        own = next((r for r in records if r.owner == principal.key), None)
        return own or next((r for r in records if r.admits(principal)), None)

    async def create(self, record: ChatRecord) -> ChatRecord:
        return await self._call(self._create, record)

    def _create(self, record: ChatRecord) -> ChatRecord:
        room = _room(record.key)
        self._db.execute(
            "INSERT OR IGNORE INTO uamp_chats (room, chat_id, record) VALUES (?, ?, ?)",
            (room, record.chat_id, orjson.dumps(record.to_json())),
        )
        row = self._db.execute("SELECT record FROM uamp_chats WHERE room = ?", (room,)).fetchone()
        return ChatRecord.from_json(orjson.loads(row[0]))

    async def save(self, record: ChatRecord) -> None:
        await self._call(
            self._db.execute,
            "UPDATE uamp_chats SET record = ? WHERE room = ?",
            (orjson.dumps(record.to_json()), _room(record.key)),
        )

    async def append(self, key: ChatKey, message: StoredMessage) -> None:
        await self._call(self._append, _room(key), message)

    def _append(self, room: str, message: StoredMessage) -> None:
        with self._db:
            self._db.execute("BEGIN")
            self._db.execute(
                "INSERT OR REPLACE INTO uamp_chat_messages (room, seq, data) VALUES (?, ?, ?)",
                (room, message.seq, orjson.dumps(message.to_json())),
            )
            self._db.execute(
                "DELETE FROM uamp_chat_messages WHERE room = ? AND seq <= ?",
                (room, message.seq - self.max_messages),
            )

    async def history(self, key: ChatKey, after: int = 0, limit: int = 100) -> list[StoredMessage]:
        if limit <= 0:
            return []
        rows = await self._call(self._history, _room(key), after, limit)
        return [StoredMessage(**orjson.loads(r[0])) for r in reversed(rows)]

    def _history(self, room: str, after: int, limit: int) -> list[Any]:
        return self._db.execute(
            "SELECT data FROM uamp_chat_messages WHERE room = ? AND seq > ? "
            "ORDER BY seq DESC LIMIT ?",
            (room, after, limit),
        ).fetchall()

    async def expire(self, before: float, keep: Collection[ChatKey] = ()) -> int:
        kept = {_room(key) for key in keep}
        return await self._call(self._expire, before, kept)

    def _expire(self, before: float, kept: set[str]) -> int:
        rows = self._db.execute("SELECT room, record FROM uamp_chats").fetchall()
        gone = [
            (room,)
            for room, data in rows
            if room not in kept and ChatRecord.from_json(orjson.loads(data)).last_active < before
        ]
        with self._db:
            self._db.execute("BEGIN")
            self._db.executemany("DELETE FROM uamp_chats WHERE room = ?", gone)
            self._db.executemany("DELETE FROM uamp_chat_messages WHERE room = ?", gone)
        return len(gone)

    async def aclose(self) -> None:
        """Close the database."""
        await self._call(self._db.close)
