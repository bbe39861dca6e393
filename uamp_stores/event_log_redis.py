"""Session event logs in Redis Streams: several ``uamp serve`` processes share them.

Each session has a stream ``{prefix}:log:{name}`` (one entry per event,
entry id ``0-{position}``, fields ``e`` the event id and ``d`` its JSON) and
a string ``{prefix}:rec:{name}`` (its :class:`SessionRecord`), where
``name`` is :func:`~uamp_stores.event_log.log_name` of the log key.
Explicit entry ids make Redis itself refuse a position written twice, and
let a reader in any process ask for "everything after position n" with one
``XREAD``/``XRANGE``.

Writes are batched: the flusher sends everything queued since its last round
in one write on one connection, encoded here in Redis's wire format
(:func:`_pack`): each run of consecutive events of one log is one ``EVAL``
of :data:`_APPEND` (``XADD`` with exact ``MAXLEN`` for the count retention,
inside Redis), then the record's ``updated`` field and ``PEXPIRE`` on both
keys at twice the retention age so Redis itself forgets abandoned sessions.
That is one reply to read per run, not per event (docs/scale-out.md, Cost).
Every Redis call runs in a
worker thread with the synchronous redis-py client (one store for Trio and asyncio
alike; redis-py's async client is asyncio's); :meth:`RedisEventLog.wait` is a
blocking ``XREAD`` there, which also sees what other processes append.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Callable
from typing import Any, Final, TypeVar

import anyio
import orjson

from uamp_proto.resume import LogEntry, LogWindow, Retention

from ._redis import RedisCalls, open_redis
from .event_log import READ_BATCH, EventLog, LogKey, Op, SessionRecord, log_name
from .health import STORE_TIMEOUT

__all__ = ["RedisEventLog"]

T = TypeVar("T")

#: Entries read per step while searching a log backwards for an event id.
_FIND_BATCH: Final = 512

#: Appends a run of entries to one stream: ``KEYS[1]`` the stream, ``ARGV[1]``
#: the count retention (exact ``MAXLEN``), then (entry id, event id, JSON)
#: triples. One command per run instead of one ``XADD`` each: far less to
#: encode, send and parse per event (docs/scale-out.md, Cost). An entry the
#: stream holds already is skipped: a batch sent again after a connection
#: broke mid-write (the store's outage, :mod:`.health`) may hold some.
_APPEND: Final = """
local keep = ARGV[1]
local added = 0
for i = 2, #ARGV, 3 do
  local r = redis.pcall('XADD', KEYS[1], 'MAXLEN', keep, ARGV[i],
                        'e', ARGV[i + 1], 'd', ARGV[i + 2])
  if type(r) == 'table' and r.err then
    if not string.find(r.err, 'equal or smaller', 1, true) then return r end
  else
    added = added + 1
  end
end
return added
"""


def _pack(commands: list[tuple[bytes | str | int, ...]]) -> bytes:
    """The commands in Redis's wire format (RESP), ready to send in one write."""
    out: list[bytes] = []
    for command in commands:
        out.append(b"*%d\r\n" % len(command))
        for arg in command:
            raw = arg if isinstance(arg, bytes) else str(arg).encode()
            out.append(b"$%d\r\n%b\r\n" % (len(raw), raw))
    return b"".join(out)


def _position(entry_id: bytes | str) -> int:
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return int(text.partition("-")[2])


def _entries(rows: list[Any]) -> list[LogEntry]:
    return [LogEntry(_position(i), f[b"e"].decode(), f[b"d"]) for i, f in rows]


class RedisEventLog(RedisCalls, EventLog):
    """Event logs and session records in Redis (``redis://host:port/db``).

    Args:
        url: The Redis URL.
        retention: How much is kept, and how long.
        prefix: Key prefix, so several apps can share one database.
        clock: Wall-clock seconds.
    """

    shared = True

    def __init__(
        self,
        url: str,
        retention: Retention | None = None,
        *,
        prefix: str = "uamp",
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(retention, clock=clock)
        self.url = url
        self.prefix = prefix
        # Typed loosely: redis-py's stubs union every reply shape.
        self._redis: Any = open_redis(url)

    def _log(self, key: LogKey) -> str:
        return f"{self.prefix}:log:{log_name(key)}"

    def _rec(self, key: LogKey) -> str:
        return f"{self.prefix}:rec:{log_name(key)}"

    @property
    def _ttl_ms(self) -> int:
        return int(2 * self.retention.max_age * 1000) + 1000

    async def ping(self) -> bool:
        """Whether the server answers."""
        return bool(await self._call(self._redis.ping))

    async def _write(self, batch: list[Op]) -> None:
        commands: list[tuple[bytes | str | int, ...]] = []
        keep = self.retention.max_events
        ttl = self._ttl_ms
        touched: dict[LogKey, float] = {}
        run: list[bytes | str] = []  # XADD arguments of consecutive events of one log
        run_key: LogKey | None = None

        def end_run() -> None:
            if run_key is not None and run:
                commands.append(("EVAL", _APPEND, 1, self._log(run_key), keep, *run))
                run.clear()

        for kind, key, payload, written in batch:
            touched[key] = written
            if kind == "event":
                if key != run_key:
                    end_run()
                    run_key = key
                run.extend((f"0-{payload.position}", payload.event_id, payload.data))
                continue
            end_run()
            run_key = None
            if kind == "lost":
                commands.append(("DEL", self._log(key), self._rec(key), f"{self._rec(key)}:u"))
                touched.pop(key, None)
                continue
            if kind == "reset":
                commands.append(("DEL", self._log(key)))
            commands.append(("SET", self._rec(key), payload.encode(), "PX", ttl))
        end_run()
        for key, written in touched.items():
            rec = self._rec(key)
            commands.append(("PEXPIRE", self._log(key), ttl))
            # The record's activity stamp, without rewriting the record.
            commands.append(("SET", f"{rec}:u", repr(written), "PX", ttl))
            commands.append(("PEXPIRE", rec, ttl))
        await self._call(self._send, _pack(commands), len(commands))

    def _send(self, packed: bytes, replies: int) -> None:
        """Send commands packed by :func:`_pack` on one connection; read their replies."""
        from redis.exceptions import ResponseError

        pool = self._redis.connection_pool
        conn = pool.get_connection()
        try:
            conn.send_packed_command([packed])
            failed = None
            for _ in range(replies):
                try:
                    conn.read_response()
                except ResponseError as exc:  # the others still answer
                    failed = failed or exc
            if failed is not None:
                raise failed
        except BaseException:
            conn.disconnect()
            raise
        finally:
            pool.release(conn)

    async def _beat(self) -> None:
        while True:
            await self._call(lambda: self._redis.set(self._node(self.node), b"1", px=3000))
            self.health.ok()
            await anyio.sleep(1.0)

    def _inbox(self, node: str) -> str:
        return f"{self.prefix}:inbox:{node}"

    async def _ask_remote(
        self, node: str, key: LogKey, message: dict[str, Any], timeout: float
    ) -> dict[str, Any] | None:
        reply = f"{self.prefix}:reply:{uuid.uuid4().hex}"
        question = orjson.dumps({"k": [list(key[0]), key[1]], "m": message, "r": reply})

        def ask() -> Any:
            self._redis.xadd(self._inbox(node), {"q": question}, maxlen=1000, approximate=True)
            return self._redis.blpop([reply], timeout=max(1, round(timeout)))

        found = await self._call(ask, timeout=timeout + STORE_TIMEOUT)
        if not found:
            return None
        answer: dict[str, Any] | None = orjson.loads(found[1])
        return answer

    async def _serve_inbox(self) -> None:
        # From the inbox's start, then after the last entry read -- never ``$``
        # (what arrives once a read has begun), which lost a question put in
        # before the first read or between two reads. The inbox is this
        # process's alone (its node id is random): all of it is for us.
        inbox, last = self._inbox(self.node), "0-0"
        while True:
            read = functools.partial(self._redis.xread, {inbox: last}, count=64, block=1000)
            found = await self._call(read)
            for entry_id, fields in found[0][1] if found else ():
                last = entry_id
                question = orjson.loads(fields[b"q"])
                owner, sid = question["k"]
                answer = await self.answer((tuple(owner), sid), question["m"])

                def reply(name: str = question["r"], data: bytes = orjson.dumps(answer)) -> None:
                    pipe = self._redis.pipeline(transaction=False)
                    pipe.rpush(name, data)
                    pipe.pexpire(name, 30_000)
                    pipe.execute()

                await self._call(reply)

    def _node(self, node: str) -> str:
        return f"{self.prefix}:node:{node}"

    async def alive(self, node: str) -> bool:
        if node == self.node:
            return True
        return bool(await self._call(self._redis.exists, self._node(node)))

    async def claim(self, key: LogKey, what: str, *, ttl: float | None = None) -> bool:
        name = f"{self._rec(key)}:claim:{what}"
        px = self._ttl_ms if ttl is None else max(1, int(ttl * 1000))
        return bool(await self._call(lambda: self._redis.set(name, self.node, px=px, nx=True)))

    async def unclaim(self, key: LogKey, what: str) -> None:
        await self._call(self._redis.delete, f"{self._rec(key)}:claim:{what}")

    async def claimant(self, key: LogKey, what: str) -> str | None:
        node = await self._call(self._redis.get, f"{self._rec(key)}:claim:{what}")
        return None if node is None else bytes(node).decode()

    async def _load(self, key: LogKey) -> SessionRecord | None:
        raw, stamp = await self._call(self._redis.mget, [self._rec(key), f"{self._rec(key)}:u"])
        if raw is None:
            return None
        record = SessionRecord.decode(raw)
        if stamp is not None:
            record.updated = max(record.updated, float(stamp))
        if self.retention.forgotten(record.updated, self.clock()):
            return None
        return record

    async def window(self, key: LogKey) -> LogWindow:
        pipe = self._redis.pipeline(transaction=True)
        pipe.xrange(self._log(key), count=1)
        pipe.xrevrange(self._log(key), count=1)
        first, last = await self._call(pipe.execute)
        if not last:
            return LogWindow()
        return LogWindow(_position(first[0][0]), _position(last[0][0]))

    async def find(self, key: LogKey, event_id: str) -> int | None:
        def find() -> int | None:
            name, high = self._log(key), "+"
            while True:
                rows = self._redis.xrevrange(name, max=high, count=_FIND_BATCH)
                for entry_id, fields in rows:
                    if fields[b"e"].decode() == event_id:
                        return _position(entry_id)
                if len(rows) < _FIND_BATCH:
                    return None
                low = _position(rows[-1][0])
                if low <= 1:
                    return None
                high = f"0-{low - 1}"

        return await self._call(find)

    async def read(self, key: LogKey, after: int, limit: int = READ_BATCH) -> list[LogEntry]:
        rows = await self._call(
            lambda: self._redis.xrange(self._log(key), min=f"0-{after + 1}", count=limit)
        )
        return _entries(rows)

    async def wait(self, key: LogKey, after: int, timeout: float = 1.0) -> list[LogEntry]:
        name = self._log(key)
        block = max(1, int(timeout * 1000))
        found = await self._call(
            lambda: self._redis.xread({name: f"0-{after}"}, count=READ_BATCH, block=block),
            timeout=timeout + STORE_TIMEOUT,
        )
        if not found:
            return []
        return _entries(found[0][1])

    async def drop(self, key: LogKey) -> None:
        self._forget_pending(key)
        await self._call(self._redis.delete, self._log(key), self._rec(key), f"{self._rec(key)}:u")
        self.release(key)

    async def aclose(self) -> None:
        await super().aclose()
        self._redis.close()
