"""Session event logs: what a session sent, kept so a client can resume (docs/resume.md).

Theory of operation
-------------------
:class:`EventLog` is the one small interface; :class:`MemoryEventLog` (the
default, one process), :class:`~uamp_trio.stores.event_log_sqlite.SqliteEventLog`
(one process, survives restarts) and
:class:`~uamp_trio.stores.event_log_redis.RedisEventLog` (several processes
on one Redis) implement it. A log is named by a :data:`LogKey`, the owner's
principal key and the session id, so a session can only ever be found by the
principal that created it (docs/security.md, Ownership).

*Writing.* The process running a session :meth:`~EventLog.open` s (a new
session) or :meth:`~EventLog.adopt` s (one whose log exists) its log, then
:meth:`~EventLog.append` s each event it sends. ``append`` never waits: it
gives the event its position (:class:`uamp_proto.resume.Positions`) and
queues it. A flusher task (:meth:`EventLog.run`, started by the app) writes
everything queued in one batch per round -- one transaction, one Redis
pipeline -- so the cost per event stays small while a response streams. An
entry is readable once flushed; the memory log makes it readable at once.

*Reading.* :meth:`~EventLog.tail` yields a session's entries after a
position: what the log holds, then what is appended later, each position
once and in order (:class:`uamp_proto.resume.ResumeStream` merges the
pieces). Between reads it waits in :meth:`~EventLog.wait`: in-process a
parking lot woken by the flusher; on Redis a blocking stream read, which also
sees what other processes append.

*Session records.* Beside the log each session has a :class:`SessionRecord`
(its agent, configuration, conversation, the response in flight and the
process running it), written with :meth:`~EventLog.save`. A session last
active longer ago than the retention's ``max_age`` is expired, twice that
and it is forgotten (:class:`uamp_proto.resume.Retention`); each log keeps
at most ``max_events`` entries.
"""

from __future__ import annotations

import abc
import hashlib
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

import attrs
import orjson
import trio

from uamp_proto.resume import LogEntry, LogWindow, Positions, ResumeError, ResumeStream, Retention

__all__ = [
    "EventLog",
    "LogKey",
    "MemoryEventLog",
    "SessionRecord",
    "log_name",
]

#: A session's log: ``(owner's principal key, session id)``.
LogKey = tuple[tuple[str, str], str]

#: Entries read per round of :meth:`EventLog.tail`.
READ_BATCH: Final = 1024


def log_name(key: LogKey) -> str:
    """A stable, printable name for ``key`` (a digest of the owner, then the session id)."""
    owner = hashlib.sha256(orjson.dumps(list(key[0]))).hexdigest()[:24]
    return f"{owner}:{key[1]}"


@attrs.define(kw_only=True)
class SessionRecord:
    """What a resumable session needs besides its log.

    Attributes:
        agent: The agent's name.
        config: The session configuration (UAMP ``session`` object) as JSON.
        history: The conversation so far, as UAMP messages in JSON.
        running: The id of the response in flight, or ``None``.
        node: Which process runs the session (``uamp serve``'s node id).
        updated: When the session was last active (the log's clock).
        ended: Whether the session ended (``session.end``): not resumable.
    """

    agent: str
    config: dict[str, Any] | None = None
    history: list[dict[str, Any]] = attrs.field(factory=list)
    running: str | None = None
    node: str = ""
    updated: float = 0.0
    ended: bool = False

    def encode(self) -> bytes:
        """The record as JSON."""
        return orjson.dumps(attrs.asdict(self))

    @classmethod
    def decode(cls, data: bytes | str) -> SessionRecord:
        """A record from :meth:`encode` 's JSON."""
        return cls(**orjson.loads(data))


class EventLog(abc.ABC):
    """Per-session event logs and session records; see the module docstring.

    Args:
        retention: How much is kept, and how long.
        clock: Wall-clock seconds (records' ``updated``; expiry).
    """

    def __init__(
        self, retention: Retention | None = None, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.retention = retention or Retention()
        self.clock = clock
        self._positions: dict[LogKey, Positions] = {}
        self._pending: list[tuple[LogKey, LogEntry, float]] = []
        self._dirty = trio.Event()
        self._flushed = trio.lowlevel.ParkingLot()

    # --- writing ------------------------------------------------------------------

    async def open(self, key: LogKey, record: SessionRecord) -> None:
        """Start a new, empty log for ``key`` (a log it had is dropped) with ``record``."""
        self._positions[key] = Positions()
        self._forget_pending(key)
        record.updated = self.clock()
        await self._reset(key, record)

    async def adopt(self, key: LogKey) -> int:
        """Continue ``key`` 's log in this process; returns its last position."""
        last = (await self.window(key)).last
        self._positions[key] = Positions(last)
        return last

    def release(self, key: LogKey) -> None:
        """This process writes no more to ``key`` (its log stays)."""
        self._positions.pop(key, None)

    def _forget_pending(self, key: LogKey) -> None:
        if any(k == key for k, _, _ in self._pending):
            self._pending = [p for p in self._pending if p[0] != key]

    def writing(self, key: LogKey) -> bool:
        """Whether this process writes ``key`` 's log."""
        return key in self._positions

    def append(self, key: LogKey, data: bytes, event_id: str) -> LogEntry:
        """Queue one event for ``key`` 's log; never waits.

        Raises:
            KeyError: The log is not open in this process.
        """
        entry = LogEntry(self._positions[key].next(), event_id, data)
        self._pending.append((key, entry, self.clock()))
        self._dirty.set()
        return entry

    async def flush(self) -> None:
        """Write everything queued, in one batch."""
        batch, self._pending = self._pending, []
        if self._dirty.is_set():
            self._dirty = trio.Event()
        if batch:
            await self._write(batch)
        if self._flushed:
            self._flushed.unpark_all()

    async def run(self) -> None:
        """The flusher: write what was queued, one batch per round, until cancelled."""
        try:
            while True:
                await self._dirty.wait()
                await self.flush()
        finally:
            with trio.CancelScope(shield=True):
                await self.flush()

    # --- reading ------------------------------------------------------------------

    async def tail(self, key: LogKey, after: int) -> AsyncIterator[list[LogEntry]]:
        """The entries after position ``after``, then each later one, in order, once each.

        Raises:
            ResumeError: ``beyond_retention`` when the log dropped entries
                after ``after`` before they were read.
        """
        stream = ResumeStream(after)
        entries = await self.read(key, after)
        while True:
            step = stream.backfill(entries)
            if step.send:
                yield list(step.send)
                entries = await self.read(key, stream.cursor)
                continue
            entries = await self.wait(key, stream.cursor)

    async def load(self, key: LogKey) -> SessionRecord:
        """The session's record.

        Raises:
            ResumeError: ``unknown_session`` (never existed, forgotten, or
                another principal's: one answer for all), ``session_expired``.
        """
        record = await self._load(key)
        if record is None:
            raise ResumeError(
                f"no session {key[1]!r} to resume: it never existed or was forgotten",
                code="unknown_session",
            )
        now = self.clock()
        if record.ended or self.retention.expired(record.updated, now):
            raise ResumeError(
                f"session {key[1]!r} has "
                + ("ended" if record.ended else "expired")
                + " and cannot be resumed",
                code="session_expired",
            )
        return record

    async def save(self, key: LogKey, record: SessionRecord) -> None:
        """Replace ``key`` 's record (``updated`` becomes now)."""
        record.updated = self.clock()
        await self._save(key, record)

    # --- what each store implements ----------------------------------------------

    @abc.abstractmethod
    async def _reset(self, key: LogKey, record: SessionRecord) -> None:
        """Drop ``key`` 's log and store ``record``."""

    @abc.abstractmethod
    async def _write(self, batch: list[tuple[LogKey, LogEntry, float]]) -> None:
        """Store a batch of ``(key, entry, time)``, trimming each log to the retention."""

    @abc.abstractmethod
    async def _load(self, key: LogKey) -> SessionRecord | None:
        """The stored record, or ``None``."""

    @abc.abstractmethod
    async def _save(self, key: LogKey, record: SessionRecord) -> None:
        """Store ``record``."""

    @abc.abstractmethod
    async def window(self, key: LogKey) -> LogWindow:
        """The positions ``key`` 's log retains (``LogWindow()`` for none)."""

    @abc.abstractmethod
    async def find(self, key: LogKey, event_id: str) -> int | None:
        """The position of ``event_id`` in ``key`` 's log, or ``None``."""

    @abc.abstractmethod
    async def read(self, key: LogKey, after: int, limit: int = READ_BATCH) -> list[LogEntry]:
        """Up to ``limit`` entries after position ``after``, in order."""

    async def wait(self, key: LogKey, after: int, timeout: float = 1.0) -> list[LogEntry]:
        """Entries after ``after``, waiting up to ``timeout`` for some (in-process writers)."""
        entries = await self.read(key, after)
        if entries:
            return entries
        with trio.move_on_after(timeout):
            await self._flushed.park()
        return await self.read(key, after)

    @abc.abstractmethod
    async def drop(self, key: LogKey) -> None:
        """Forget ``key`` 's log and record."""

    async def aclose(self) -> None:
        """Flush and release what the store holds open."""
        await self.flush()


class _MemoryLog:
    __slots__ = ("entries", "index", "last", "record")

    def __init__(self, record: SessionRecord) -> None:
        self.record = record
        self.entries: deque[LogEntry] = deque()
        self.index: dict[str, int] = {}
        self.last = 0


class MemoryEventLog(EventLog):
    """Event logs in this process's memory (the default): bounded, gone on restart.

    Args:
        retention: How much is kept, and how long.
        max_sessions: Most sessions kept; past it the least recently active
            is forgotten.
        clock: Wall-clock seconds.
    """

    def __init__(
        self,
        retention: Retention | None = None,
        *,
        max_sessions: int = 10_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(retention, clock=clock)
        if max_sessions < 1:
            raise ValueError("max_sessions must be at least 1")
        self.max_sessions = max_sessions
        self._logs: dict[LogKey, _MemoryLog] = {}

    def __len__(self) -> int:
        return len(self._logs)

    def append(self, key: LogKey, data: bytes, event_id: str) -> LogEntry:
        # Readable at once: nothing to flush, readers are woken here.
        entry = LogEntry(self._positions[key].next(), event_id, data)
        self._store(key, entry, self.clock())
        if self._flushed:
            self._flushed.unpark_all()
        return entry

    def _store(self, key: LogKey, entry: LogEntry, written: float) -> None:
        log = self._logs.get(key)
        if log is None:
            return  # dropped meanwhile
        log.entries.append(entry)
        log.index[entry.event_id] = entry.position
        log.last = entry.position
        log.record.updated = written
        keep = self.retention.max_events
        while len(log.entries) > keep:
            old = log.entries.popleft()
            if log.index.get(old.event_id) == old.position:
                del log.index[old.event_id]

    async def _reset(self, key: LogKey, record: SessionRecord) -> None:
        self._sweep()
        self._logs.pop(key, None)
        while len(self._logs) >= self.max_sessions:
            oldest = min(self._logs, key=lambda k: self._logs[k].record.updated)
            del self._logs[oldest]
        self._logs[key] = _MemoryLog(record)

    def _sweep(self) -> None:
        now = self.clock()
        gone = [
            k for k, log in self._logs.items() if self.retention.forgotten(log.record.updated, now)
        ]
        for k in gone:
            del self._logs[k]

    async def _write(self, batch: list[tuple[LogKey, LogEntry, float]]) -> None:
        for key, entry, written in batch:
            self._store(key, entry, written)

    async def _load(self, key: LogKey) -> SessionRecord | None:
        log = self._logs.get(key)
        if log is None or self.retention.forgotten(log.record.updated, self.clock()):
            return None
        return attrs.evolve(log.record)

    async def _save(self, key: LogKey, record: SessionRecord) -> None:
        log = self._logs.get(key)
        if log is None:
            log = self._logs[key] = _MemoryLog(record)
        log.record = attrs.evolve(record)

    async def window(self, key: LogKey) -> LogWindow:
        log = self._logs.get(key)
        if log is None:
            return LogWindow()
        first = log.entries[0].position if log.entries else log.last + 1
        return LogWindow(first, log.last)

    async def find(self, key: LogKey, event_id: str) -> int | None:
        log = self._logs.get(key)
        return None if log is None else log.index.get(event_id)

    async def read(self, key: LogKey, after: int, limit: int = READ_BATCH) -> list[LogEntry]:
        log = self._logs.get(key)
        if log is None or not log.entries or after >= log.last:
            return []
        entries = log.entries
        start = max(0, after + 1 - entries[0].position)
        return [entries[i] for i in range(start, min(len(entries), start + limit))]

    async def drop(self, key: LogKey) -> None:
        self._logs.pop(key, None)
        self.release(key)
