"""Session event logs: what a session sent, kept so a client can resume (docs/resume.md).

Theory of operation
-------------------
:class:`EventLog` is the one small interface; :class:`MemoryEventLog` (the
default, one process), :class:`~uamp_stores.event_log_sqlite.SqliteEventLog`
(one process, survives restarts) and
:class:`~uamp_stores.event_log_redis.RedisEventLog` (several processes
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

*Messages between processes.* The process that writes a session's log
:meth:`~EventLog.register` s a handler for it; any process can
:meth:`~EventLog.ask` the session's writer (the record's ``node``) something
-- an HTTP+SSE POST that reached another process, a ``response.cancel``
sent on another connection -- and gets the handler's answer. In one process
that is a call; on Redis the question goes to the writer's inbox stream and
the answer comes back on a list the asker waits on (:meth:`EventLog._ask_remote`,
:meth:`EventLog._serve_inbox`).

*Session records.* Beside the log each session has a :class:`SessionRecord`
(its agent, configuration, conversation, the response in flight and the
process running it; :mod:`uamp_stores.session_record`, which also keeps its
conversation's JSON), written with :meth:`~EventLog.save`. A session last
active longer ago than the retention's ``max_age`` is expired, twice that
and it is forgotten (:class:`uamp_proto.resume.Retention`); each log keeps
at most ``max_events`` entries. An ended session's record keeps no
conversation (it cannot be resumed). The memory log also bounds the
conversations its records keep, per principal and in all: a record past the
budget loses its conversation (:attr:`SessionRecord.dropped`), and a resume of
it is refused (``beyond_retention``).

*Outages* (a shared store that stops answering; :mod:`.health`). A batch
that fails to be written goes back to the head of the queue and the flusher
starts again after a backoff, so what was queued is written, in order, once
the store answers (a Redis entry written twice is skipped). Meanwhile
:attr:`~EventLog.health` says the store is down and the transports refuse new
sessions and responses with ``store_unavailable``. The queue is bounded
(:attr:`EventLog.max_pending` writes): past it the session with the oldest
queued write loses its queued writes and its log, which is deleted from the
store once it answers (a resume then says ``unknown_session``), and a warning
says so.
"""

from __future__ import annotations

import abc
import hashlib
import logging
import os
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, ClassVar, Final, cast

import anyio
import orjson

from uamp_proto.history import MAX_OWNER_HISTORY_BYTES, HistoryBudget
from uamp_proto.resume import LogEntry, LogWindow, Positions, ResumeError, ResumeStream, Retention

from .background import BackgroundLoop
from .health import StoreUnavailable, describe, is_outage
from .session_record import HistoryJSON, HistoryView, SessionRecord, history_weight

log = logging.getLogger("uamp_stores")

__all__ = [
    "EventLog",
    "HistoryJSON",
    "HistoryView",
    "LogKey",
    "MemoryEventLog",
    "SessionRecord",
    "log_name",
]

#: A session's log: ``(owner's principal key, session id)``.
LogKey = tuple[tuple[str, str], str]

#: A process's answer to a message about a session it writes (:meth:`EventLog.ask`).
Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]

#: Entries read per round of :meth:`EventLog.tail`.
READ_BATCH: Final = 1024


def log_name(key: LogKey) -> str:
    """A stable, printable name for ``key`` (a digest of the owner, then the session id)."""
    owner = hashlib.sha256(orjson.dumps(list(key[0]))).hexdigest()[:24]
    return f"{owner}:{key[1]}"


#: One queued write: ``("reset" | "record", key, SessionRecord, time)``,
#: ``("event", key, LogEntry, time)`` or ``("lost", key, None, time)`` (delete
#: the log and record: its writes were dropped), applied in order by a flush.
Op = tuple[str, LogKey, Any, float]

#: The most writes queued while the store does not answer (:attr:`EventLog.max_pending`).
MAX_PENDING: Final = 100_000


class _Wakeup:
    """Wakes every task parked in :meth:`park` at once (a parking lot, on anyio).

    False while nobody waits, so a writer that wakes after each event pays
    for no event object then.
    """

    __slots__ = ("_event", "parked")

    def __init__(self) -> None:
        self._event: anyio.Event | None = None
        #: Tasks waiting now.
        self.parked = 0

    def __bool__(self) -> bool:
        return self.parked > 0

    async def park(self) -> None:
        """Wait for the next :meth:`unpark_all`."""
        if self._event is None:
            self._event = anyio.Event()
        event = self._event
        self.parked += 1
        try:
            await event.wait()
        finally:
            self.parked -= 1

    def unpark_all(self) -> None:
        """Wake every task parked now."""
        event, self._event = self._event, None
        if event is not None:
            event.set()


class EventLog(BackgroundLoop, abc.ABC):
    """Per-session event logs and session records; see the module docstring.

    Args:
        retention: How much is kept, and how long.
        clock: Wall-clock seconds (records' ``updated``; expiry).
    """

    loop_name = "uamp-event-log"
    loop_what = "the event log flusher"
    #: Whether other processes share this store (claims and messages reach them).
    shared: ClassVar[bool] = False
    #: Whether :meth:`put_record` copies the record before it returns (the
    #: caller may then change its own at once); otherwise the record waits in
    #: the queue as it is, and the caller hands over one it no longer changes.
    copies_records: ClassVar[bool] = False
    #: Whether every write is applied as it is made, with nothing queued (the
    #: memory log): then nobody can read the log between two writes of one
    #: scheduler step, and a writer may put a record a little later in the
    #: same step without anyone seeing the difference.
    applies_at_once: ClassVar[bool] = False
    #: The most writes queued (only reached while the store does not answer).
    max_pending: int = MAX_PENDING

    def __init__(
        self, retention: Retention | None = None, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.retention = retention or Retention()
        self.clock = clock
        #: This process's name in session records (``SessionRecord.node``): its
        #: pid, then a random part (a pid alone is reused after a restart).
        self.node = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self._positions: dict[LogKey, Positions] = {}
        self._owners: dict[LogKey, Callable[[], None]] = {}
        self._claims: set[tuple[LogKey, str]] = set()
        self._handlers: dict[LogKey, Handler] = {}
        self._pending: list[Op] = []
        self._dirty = anyio.Event()
        self._flushing = anyio.Lock()
        self._flushed = _Wakeup()
        self._running = False
        #: Sessions whose queued writes were dropped (the queue was full): not queued any more.
        self._lost: set[LogKey] = set()

    # --- writing ------------------------------------------------------------------

    def begin(
        self, key: LogKey, record: SessionRecord, owner: Callable[[], None] | None = None
    ) -> None:
        """Start a new, empty log for ``key`` (dropping any it had) with ``record``; never waits.

        ``owner`` is called when another connection of this process takes
        the session over (:meth:`take_over`).
        """
        self._positions[key] = Positions()
        if owner is not None:
            self._owners[key] = owner
        self._forget_pending(key)
        self._lost.discard(key)
        record.node = self.node
        self._queue(("reset", key, record, self._stamp(record)))

    async def open(self, key: LogKey, record: SessionRecord) -> None:
        """:meth:`begin`, then write it."""
        self.begin(key, record)
        await self.flush()

    async def adopt(self, key: LogKey, owner: Callable[[], None] | None = None) -> int:
        """Continue ``key`` 's log in this process; returns its last position."""
        await self.flush()
        last = (await self.window(key)).last
        self._positions[key] = Positions(last)
        if owner is not None:
            self._owners[key] = owner
        return last

    def release(self, key: LogKey, owner: Callable[[], None] | None = None) -> None:
        """This process writes no more to ``key`` (its log stays).

        With ``owner``, only if that owner still holds the log.
        """
        if owner is not None and self._owners.get(key) is not owner:
            return
        self._positions.pop(key, None)
        self._owners.pop(key, None)
        self._lost.discard(key)

    def take_over(self, key: LogKey) -> None:
        """Ask the connection of this process that writes ``key`` to let it go."""
        owner = self._owners.get(key)
        if owner is not None:
            owner()
        self.release(key)

    def _forget_pending(self, key: LogKey) -> None:
        if any(op[1] == key for op in self._pending):
            self._pending = [op for op in self._pending if op[1] != key]

    def writing(self, key: LogKey) -> bool:
        """Whether this process writes ``key`` 's log."""
        return key in self._positions

    def append(self, key: LogKey, data: bytes, event_id: str) -> LogEntry:
        """Queue one event for ``key`` 's log; never waits.

        Raises:
            KeyError: The log is not open in this process.
        """
        entry = LogEntry(self._positions[key].next(), event_id, data)
        self._queue(("event", key, entry, self.clock()))
        return entry

    def put_record(self, key: LogKey, record: SessionRecord) -> None:
        """Queue ``record`` as ``key`` 's record (``updated`` becomes now); never waits.

        An ended session's record keeps no conversation: it cannot be resumed.
        """
        if record.ended and record.history:
            record.history = []
        self._queue(("record", key, record, self._stamp(record)))

    async def save(self, key: LogKey, record: SessionRecord) -> None:
        """:meth:`put_record`, then write it."""
        self.put_record(key, record)
        await self.flush()

    def _stamp(self, record: SessionRecord) -> float:
        record.updated = now = self.clock()
        return now

    def _queue(self, op: Op) -> None:
        if self._lost and op[1] in self._lost:
            return  # its earlier writes were dropped: the rest would make a log with a gap
        self._pending.append(op)
        self._dirty.set()
        if len(self._pending) > self.max_pending:
            self._shed_queue()

    def _shed_queue(self) -> None:
        """The queue is full (the store does not answer): drop the oldest session's writes."""
        while len(self._pending) > self.max_pending // 2 and self._pending[0][0] != "lost":
            key = self._pending[0][1]
            dropped = sum(1 for op in self._pending if op[1] == key)
            self._forget_pending(key)
            self._lost.add(key)
            self._pending.append(("lost", key, None, self.clock()))
            log.warning(
                "the event log's queue is full while the store does not answer: session %s "
                "lost %d queued writes; its log is deleted when the store answers again "
                "(a resume says unknown_session)",
                key[1],
                dropped,
            )

    @property
    def pending(self) -> bool:
        """Whether writes are queued or being written."""
        return bool(self._pending) or self._flushing.locked()

    async def flush(self) -> None:
        """Write everything queued so far (after any flush in progress), in one batch."""
        async with self._flushing:
            batch, self._pending = self._pending, []
            if self._dirty.is_set():
                self._dirty = anyio.Event()
            if batch:
                try:
                    await self._write(batch)
                except BaseException as exc:
                    # Kept, in order, before what was queued meanwhile: written once
                    # the store answers (the flusher starts again after a backoff).
                    self._pending[:0] = batch
                    self._dirty.set()
                    if not self.health.down and is_outage(exc):
                        self.health.failed(exc)  # requests are refused from now on
                    if (
                        isinstance(exc, Exception)
                        and is_outage(exc)
                        and not isinstance(exc, StoreUnavailable)
                    ):
                        raise StoreUnavailable(
                            f"the event log's store is unavailable ({describe(exc)})"
                        ) from exc
                    raise
                self.health.ok()
        if self._flushed:
            self._flushed.unpark_all()

    async def run(self) -> None:
        """The flusher: write what was queued, one batch per round, until cancelled."""
        self._running = True
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._beat)
                group.start_soon(self._serve_inbox)
                while True:
                    await self._dirty.wait()
                    await self.flush()
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await self._last_flush()
            raise
        finally:
            self._running = False

    async def _last_flush(self) -> None:
        """Write what is queued as the flusher stops (the app closes); say what is lost."""
        try:
            await self.flush()
        except Exception as exc:
            log.warning(
                "%d queued event log writes are lost: the store did not answer as the "
                "server stopped (%s)",
                len(self._pending),
                describe(exc),
            )

    async def _beat(self) -> None:
        """Tell other processes this one is alive (stores shared between processes)."""
        return

    # --- messages to the process writing a session ---------------------------------

    def register(self, key: LogKey, handler: Handler) -> None:
        """Answer messages about ``key`` with ``handler`` (this process writes it)."""
        self._handlers[key] = handler

    def unregister(self, key: LogKey, handler: Handler) -> None:
        """Stop answering for ``key`` (only if ``handler`` is still the one registered)."""
        if self._handlers.get(key) is handler:
            del self._handlers[key]

    async def ask(
        self, node: str, key: LogKey, message: dict[str, Any], timeout: float = 10.0
    ) -> dict[str, Any] | None:
        """The answer of process ``node`` 's handler for ``key`` to ``message``.

        ``None``: nobody there answers for ``key`` (or not within ``timeout``).
        """
        if node == self.node:
            return await self.answer(key, message)
        return await self._ask_remote(node, key, message, timeout)

    async def answer(self, key: LogKey, message: dict[str, Any]) -> dict[str, Any] | None:
        """This process's handler's answer for ``key`` (``None``: none registered)."""
        handler = self._handlers.get(key)
        if handler is None:
            return None
        try:
            return await handler(message)
        except Exception:
            log.exception("answering a message about session %s failed", key[1])
            return None

    async def _ask_remote(
        self, node: str, key: LogKey, message: dict[str, Any], timeout: float
    ) -> dict[str, Any] | None:
        """Ask another process (stores shared between processes); here: nobody answers."""
        return None

    async def _serve_inbox(self) -> None:
        """Answer what other processes ask (stores shared between processes)."""
        return

    async def alive(self, node: str) -> bool:
        """Whether the process ``node`` still runs (for a single-process store: this one)."""
        return node == self.node

    async def claim(self, key: LogKey, what: str, *, ttl: float | None = None) -> bool:
        """Claim ``what`` of ``key`` once (the first caller wins, in every process).

        ``ttl``: seconds the claim holds in a shared store (default: as long
        as a session's records).
        """
        if (key, what) in self._claims:
            return False
        self._claims.add((key, what))
        return True

    async def unclaim(self, key: LogKey, what: str) -> None:
        """Give up a claim of :meth:`claim`: the next caller wins it again."""
        self._claims.discard((key, what))

    async def claimant(self, key: LogKey, what: str) -> str | None:
        """The process (``node``) that holds the claim on ``what`` of ``key``, if any."""
        return self.node if (key, what) in self._claims else None

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

    async def load(self, key: LogKey, *, conversation: bool = False) -> SessionRecord:
        """The session's record.

        ``conversation``: the caller restores the session's conversation from
        it (a resume), so a record whose conversation the store dropped
        (:attr:`SessionRecord.dropped`) is refused.

        Raises:
            ResumeError: ``unknown_session`` (never existed, forgotten, or
                another principal's: one answer for all), ``session_expired``;
                ``beyond_retention`` for a dropped conversation.
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
        if conversation and record.dropped:
            raise ResumeError(
                f"session {key[1]!r} cannot be resumed: its conversation was dropped to keep "
                "its principal's sessions within the server's bounds; start a new session",
                code="beyond_retention",
            )
        return record

    # --- what each store implements ----------------------------------------------

    @abc.abstractmethod
    async def _write(self, batch: list[Op]) -> None:
        """Apply a batch of queued writes in order, trimming each log to the retention."""

    @abc.abstractmethod
    async def _load(self, key: LogKey) -> SessionRecord | None:
        """The stored record, or ``None``."""

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
        with anyio.move_on_after(timeout):
            await self._flushed.park()
        return await self.read(key, after)

    @abc.abstractmethod
    async def drop(self, key: LogKey) -> None:
        """Forget ``key`` 's log and record."""

    async def aclose(self) -> None:
        """Flush and release what the store holds open."""
        await self.flush()


#: The most bytes of conversation all records of a :class:`MemoryEventLog` keep
#: (``max_record_bytes``): as much as its events (``max_bytes``).
MAX_RECORD_BYTES: Final = 64 * 1024 * 1024


class _MemoryLog:
    __slots__ = ("entries", "index", "last", "record", "size", "weight")

    def __init__(self, record: SessionRecord) -> None:
        self.record = record
        self.entries: deque[LogEntry] = deque()
        self.index: dict[str, int] = {}
        self.last = 0
        self.size = 0
        #: The record's conversation's weight, as counted in the record budgets.
        self.weight = 0


class MemoryEventLog(EventLog):
    """Event logs in this process's memory (the default): bounded, gone on restart.

    Args:
        retention: How much is kept, and how long.
        max_sessions: Most sessions kept; past it the least recently active
            is forgotten.
        max_bytes: Most event bytes kept over all sessions; past it the
            least recently active sessions' logs are dropped first (their
            records stay, so a resume says ``beyond_retention``).
        max_sessions_per_principal: Most sessions of one principal kept
            (``None``: no cap of its own); past it that principal's least
            recently active is forgotten, so nobody can push out another
            principal's sessions by opening many.
        max_record_bytes_per_principal: Most bytes of conversation (weighed
            as the live budget weighs it, :func:`uamp_proto.history.message_weight`)
            the records of one principal's sessions keep; past it that
            principal's least recently changed records lose their conversation
            (:attr:`SessionRecord.dropped`: a resume says ``beyond_retention``),
            never another principal's.
        max_record_bytes: Most bytes of conversation all records keep; past
            it the least recently changed records lose theirs.
        clock: Wall-clock seconds.

    A record is weighed once as it is put (a live session's conversation is
    weighed as it is converted, :class:`HistoryJSON`); an ended session's
    record keeps no conversation. A record whose conversation alone is
    over a bound keeps none.
    """

    def __init__(
        self,
        retention: Retention | None = None,
        *,
        max_sessions: int = 10_000,
        max_bytes: int = 64 * 1024 * 1024,
        max_sessions_per_principal: int | None = None,
        max_record_bytes_per_principal: int = MAX_OWNER_HISTORY_BYTES,
        max_record_bytes: int = MAX_RECORD_BYTES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(retention, clock=clock)
        per_principal = max_sessions_per_principal
        if max_sessions < 1 or max_bytes < 1 or (per_principal is not None and per_principal < 1):
            raise ValueError("max_sessions, max_bytes and the per-principal cap must be at least 1")
        if max_record_bytes_per_principal < 1 or max_record_bytes < 1:
            raise ValueError("max_record_bytes and its per-principal bound must be at least 1")
        self.max_sessions = max_sessions
        self.max_bytes = max_bytes
        self.max_sessions_per_principal = per_principal
        #: The records' conversations per principal, least recently changed first.
        self.record_bytes = HistoryBudget(max_record_bytes_per_principal)
        #: The same over all principals (one owner, ``None``).
        self.all_record_bytes = HistoryBudget(max_record_bytes)
        #: Event bytes held over all sessions.
        self.size = 0
        self._logs: dict[LogKey, _MemoryLog] = {}
        #: Each principal's sessions (kept only with a per-principal cap).
        self._owned: dict[tuple[str, str], set[LogKey]] = {}

    #: ``put_record`` applies the record at once, as a copy.
    copies_records: ClassVar[bool] = True
    applies_at_once: ClassVar[bool] = True

    def __len__(self) -> int:
        return len(self._logs)

    @property
    def pending(self) -> bool:
        """Never: every write is applied as it is queued (asked before each event is sent)."""
        return False

    @property
    def max_record_bytes_per_principal(self) -> int:
        """Most bytes of conversation one principal's records keep."""
        return self.record_bytes.max_bytes

    @property
    def max_record_bytes(self) -> int:
        """Most bytes of conversation all records keep."""
        return self.all_record_bytes.max_bytes

    def put_record(self, key: LogKey, record: SessionRecord) -> None:
        """:meth:`EventLog.put_record`, applied at once (a copy; no queued write to dispatch)."""
        record.updated = self.clock()
        log = self._logs.get(key)
        if log is None:
            log = self._add(key, record)
        self._keep(key, log, record)
        if self._flushed.parked:
            self._flushed.unpark_all()

    def _keep(self, key: LogKey, log: _MemoryLog, record: SessionRecord) -> None:
        """Store a copy of ``record`` as ``log`` 's, its conversation within the budgets."""
        kept = log.record = record.copy()
        history = kept.history
        if kept.ended:
            size = 0
        elif type(history) is HistoryView and history.weight is not None:
            size = history.weight  # weighed as converted (the usual record)
        else:
            size = history_weight(history)
        if size and size == log.weight:
            return  # the conversation the budgets count already (a response's opening record)
        if kept.ended or size > min(self.record_bytes.max_bytes, self.all_record_bytes.max_bytes):
            if kept.history:
                kept.history, kept.dropped = [], not kept.ended
            size = 0
        if not size:
            if log.weight:
                log.weight = 0
                self.record_bytes.forget(key[0], key)
                self.all_record_bytes.forget(None, key)
            return
        log.weight = size
        for other in self.record_bytes.kept(key[0], key, size):
            self._drop_history(cast("LogKey", other))  # the principal's own, first
        for other in self.all_record_bytes.kept(None, key, size):
            self._drop_history(cast("LogKey", other))

    def _drop_history(self, key: LogKey) -> None:
        """A budget emptied ``key`` 's conversation: its record keeps none (``dropped``)."""
        log = self._logs.get(key)
        if log is None or not log.weight:
            return
        self.record_bytes.forget(key[0], key)
        self.all_record_bytes.forget(None, key)
        log.weight = 0
        log.record.history, log.record.dropped = [], True

    def append(self, key: LogKey, data: bytes, event_id: str) -> LogEntry:
        """:meth:`EventLog.append`, stored at once (no queued write to dispatch).

        What is kept is a copy of ``data`` of its own size: a frame from
        ``orjson.dumps`` (3.12 on) holds a buffer of 4 or 16 KiB whatever its
        length, so 10,000 deltas of 1 KiB kept as they came held 160 MB, not
        the 12 MB ``max_bytes`` counts.
        """
        entry = LogEntry(self._positions[key].next(), event_id, bytes(memoryview(data)))
        self._store(key, entry, self.clock())
        if self._flushed.parked:
            self._flushed.unpark_all()
        return entry

    def _queue(self, op: Op) -> None:
        # Applied at once: nothing to flush; readers are woken here.
        kind, key, payload, written = op
        if kind == "event":
            self._store(key, payload, written)
        elif kind == "record":
            log = self._logs.get(key)
            if log is None:
                log = self._add(key, payload)
            self._keep(key, log, payload)
        else:
            self._reset(key, payload)
        if self._flushed.parked:
            self._flushed.unpark_all()

    def _store(self, key: LogKey, entry: LogEntry, written: float) -> None:
        log = self._logs.get(key)
        if log is None:
            return  # dropped meanwhile
        log.entries.append(entry)
        log.index[entry.event_id] = entry.position
        log.last = entry.position
        log.record.updated = written
        n = len(entry.data)
        log.size += n
        self.size += n
        keep = self.retention.max_events
        while len(log.entries) > keep:
            self._pop_oldest(log)
        if self.size > self.max_bytes:
            self._shed(log)

    def _pop_oldest(self, log: _MemoryLog) -> None:
        old = log.entries.popleft()
        if log.index.get(old.event_id) == old.position:
            del log.index[old.event_id]
        log.size -= len(old.data)
        self.size -= len(old.data)

    def _shed(self, current: _MemoryLog) -> None:
        """Drop events of the least recently active sessions until under ``max_bytes``."""
        for log in sorted(self._logs.values(), key=lambda x: x.record.updated):
            while log.entries and self.size > self.max_bytes:
                if log is current and len(log.entries) == 1:
                    return  # the event just appended stays
                self._pop_oldest(log)
            if self.size <= self.max_bytes:
                return

    def _reset(self, key: LogKey, record: SessionRecord) -> None:
        self._sweep()
        self._forget(key)
        owned = self._owned.get(key[0])
        cap = self.max_sessions_per_principal
        while owned and cap is not None and len(owned) >= cap:
            self._forget(min(owned, key=lambda k: self._logs[k].record.updated))
        while len(self._logs) >= self.max_sessions:
            self._forget(min(self._logs, key=lambda k: self._logs[k].record.updated))
        self._keep(key, self._add(key, record), record)

    def _add(self, key: LogKey, record: SessionRecord) -> _MemoryLog:
        log = self._logs[key] = _MemoryLog(record.copy())
        if self.max_sessions_per_principal is not None:
            self._owned.setdefault(key[0], set()).add(key)
        return log

    def _forget(self, key: LogKey) -> None:
        log = self._logs.pop(key, None)
        if log is not None:
            self.size -= log.size
            if log.weight:
                self.record_bytes.forget(key[0], key)
                self.all_record_bytes.forget(None, key)
            owned = self._owned.get(key[0])
            if owned is not None:
                owned.discard(key)
                if not owned:
                    del self._owned[key[0]]

    def _sweep(self) -> None:
        now = self.clock()
        gone = [
            k for k, log in self._logs.items() if self.retention.forgotten(log.record.updated, now)
        ]
        for k in gone:
            self._forget(k)

    async def _write(self, batch: list[Op]) -> None:  # pragma: no cover - never queued
        for op in batch:
            self._queue(op)

    async def _load(self, key: LogKey) -> SessionRecord | None:
        log = self._logs.get(key)
        if log is None or self.retention.forgotten(log.record.updated, self.clock()):
            return None
        return log.record.copy()

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
        self._forget(key)
        self.release(key)
