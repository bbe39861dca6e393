"""Chat rooms in Redis: participants connected to different processes share a room (docs/chat.md).

Theory of operation
-------------------
Keys, under ``{prefix}:chat:``, where ``{room}`` is a digest of the owner
and the chat id (:func:`~uamp_stores.event_log.log_name`):

* ``rec:{room}`` -- the record's settings as JSON (id, owner, members,
  policy, creation time);
* ``id:{chat_id}`` -- the rooms of that id, a sorted set by creation order;
* ``seq:{room}`` -- the number of its latest message;
* ``msg:{room}`` -- its messages, a sorted set by number (the newest
  ``max_messages`` kept);
* ``reads:{room}`` -- read marks, a hash user -> number;
* ``pres:{room}`` -- who is present, a hash member -> participants JSON;
* ``feed:{room}`` -- the room's feed, a Redis Stream of
  :class:`~uamp_trio.stores.chats.RoomEntry` s;
* ``active`` -- every room, a sorted set by the time of its latest message
  (or its creation): :meth:`~RedisChatStore.expire` deletes, in one script,
  the rooms idle since a time that no process has a participant in.

Each feed entry is written by one Lua script that also updates what the
entry changes (presence, read marks; for a message its number, taken from
``seq`` in the same step), so the feed's order is the order of those
changes. A process :meth:`~RedisChatStore.open_room` s a room by reading
its settings, newest messages, read marks, presence and the feed's last id
in one transaction, then follows the feed after that id: the snapshot and
the entries after it are exactly the room. One writer task sends what this
process publishes, in order, a pipeline per round (a publish never waits;
a graceful shutdown waits for the last round, :meth:`~RedisChatStore.flush`);
one reader task follows the feeds of every room open in this process with
a blocking ``XREAD`` and hands their entries on. Calls run in worker threads
with the synchronous redis-py client, as in the other Redis stores.

A process that dies leaves its members in ``pres:{room}`` until another
one sees its heartbeat gone and calls :meth:`~RedisChatStore.depart`: one
Lua script removes the members whose key starts with that process's id and
writes a ``depart`` entry for each, so however many processes call it, each
member leaves the feed once.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any, Final, TypeVar

import attrs
import orjson
import trio

from uamp_proto.codec import decode_object, to_dict
from uamp_proto.principal import Principal
from uamp_stores._redis import RedisCalls, open_redis
from uamp_stores.background import BackgroundLoop
from uamp_stores.event_log import log_name
from uamp_stores.health import STORE_TIMEOUT, StoreUnavailable

from .chats import (
    MAX_MESSAGES,
    ChatKey,
    ChatRecord,
    ChatStore,
    Deliver,
    RoomEntry,
    RoomState,
    StoredMessage,
)

__all__ = ["RedisChatStore"]

log = logging.getLogger("uamp_trio.stores")

T = TypeVar("T")

#: Entries kept per room feed (approximately: ``MAXLEN ~``).
FEED_LENGTH: Final = 10_000
#: How long one blocking read of the feeds waits (s); a room opened meanwhile
#: is followed from the next read, its entries waiting in the stream.
READ_BLOCK: Final = 0.25

#: ARGV: prefix, room, kind, member, participants, data, skip, user, seq, feed length.
_FEED: Final = """
local p, room, kind = ARGV[1], ARGV[2], ARGV[3]
if kind == 'arrive' then
  redis.call('HSET', p .. 'pres:' .. room, ARGV[4], ARGV[5])
elseif kind == 'leave' then
  redis.call('HDEL', p .. 'pres:' .. room, ARGV[4])
elseif kind == 'read' then
  -- The process that publishes it decided the mark moves on; a save may have stored it.
  local was = tonumber(redis.call('HGET', p .. 'reads:' .. room, ARGV[8]) or '0')
  if tonumber(ARGV[9]) > was then redis.call('HSET', p .. 'reads:' .. room, ARGV[8], ARGV[9]) end
end
redis.call('XADD', p .. 'feed:' .. room, 'MAXLEN', '~', ARGV[10], '*',
  'k', kind, 'm', ARGV[4], 'p', ARGV[5], 'd', ARGV[6], 's', ARGV[7], 'u', ARGV[8], 'q', ARGV[9])
return 1
"""

#: ARGV: prefix, room, message JSON without its seq, messages kept, feed length, its time.
_POST: Final = """
local p, room = ARGV[1], ARGV[2]
redis.call('ZADD', p .. 'active', ARGV[6], room)
local seq = redis.call('INCR', p .. 'seq:' .. room)
local data = '{"seq":' .. seq .. ',' .. string.sub(ARGV[3], 2)
redis.call('ZADD', p .. 'msg:' .. room, seq, data)
redis.call('ZREMRANGEBYRANK', p .. 'msg:' .. room, 0, -(tonumber(ARGV[4]) + 1))
redis.call('XADD', p .. 'feed:' .. room, 'MAXLEN', '~', ARGV[5], '*',
  'k', 'message', 'm', '', 'p', '', 'd', data, 's', '', 'u', '', 'q', seq)
return seq
"""

#: ARGV: prefix, room, member key prefix of the stopped process, feed length.
_DEPART: Final = """
local p, room, node = ARGV[1], ARGV[2], ARGV[3]
local gone = 0
for _, member in ipairs(redis.call('HKEYS', p .. 'pres:' .. room)) do
  if string.sub(member, 1, #node) == node then
    redis.call('HDEL', p .. 'pres:' .. room, member)
    redis.call('XADD', p .. 'feed:' .. room, 'MAXLEN', '~', ARGV[4], '*',
      'k', 'depart', 'm', member, 'p', '', 'd', '', 's', '', 'u', '', 'q', 0)
    gone = gone + 1
  end
end
return gone
"""

#: ARGV: prefix, room, record JSON, chat id, created. Returns the stored record JSON.
_CREATE: Final = """
local p, room = ARGV[1], ARGV[2]
if redis.call('SET', p .. 'rec:' .. room, ARGV[3], 'NX') then
  redis.call('ZADD', p .. 'id:' .. ARGV[4], redis.call('INCR', p .. 'n'), room)
  redis.call('ZADD', p .. 'active', ARGV[5], room)
end
return redis.call('GET', p .. 'rec:' .. room)
"""

#: ARGV: prefix, idle since, rooms open in the calling process. Deletes every room
#: idle since then that no process has a participant in; returns how many.
_EXPIRE: Final = """
local p, keep = ARGV[1], {}
for i = 3, #ARGV do keep[ARGV[i]] = true end
local gone = 0
for _, room in ipairs(redis.call('ZRANGEBYSCORE', p .. 'active', '-inf', '(' .. ARGV[2])) do
  if not keep[room] and redis.call('HLEN', p .. 'pres:' .. room) == 0 then
    local rec = redis.call('GET', p .. 'rec:' .. room)
    if rec then
      redis.call('ZREM', p .. 'id:' .. cjson.decode(rec)['chat_id'], room)
    end
    redis.call('DEL', p .. 'rec:' .. room, p .. 'seq:' .. room, p .. 'msg:' .. room,
      p .. 'reads:' .. room, p .. 'pres:' .. room, p .. 'feed:' .. room)
    redis.call('ZREM', p .. 'active', room)
    gone = gone + 1
  end
end
return gone
"""


#: ARGV: prefix, room, record JSON, last seq, then user, seq pairs: settings, and the
#: number and read marks where they are higher than stored.
_SAVE: Final = """
local p, room = ARGV[1], ARGV[2]
if not redis.call('SET', p .. 'rec:' .. room, ARGV[3], 'XX') then return 0 end
local seq = tonumber(redis.call('GET', p .. 'seq:' .. room) or '0')
if tonumber(ARGV[4]) > seq then redis.call('SET', p .. 'seq:' .. room, ARGV[4]) end
for i = 5, #ARGV, 2 do
  local was = tonumber(redis.call('HGET', p .. 'reads:' .. room, ARGV[i]) or '0')
  if tonumber(ARGV[i + 1]) > was then
    redis.call('HSET', p .. 'reads:' .. room, ARGV[i], ARGV[i + 1])
  end
end
return 1
"""


def _room(key: ChatKey) -> str:
    return log_name(key)


def _settings(record: ChatRecord) -> bytes:
    """What ``rec:`` keeps: the record without its number and read marks (kept apart)."""
    data = record.to_json()
    data.pop("last_seq")
    data.pop("reads")
    return orjson.dumps(data)


def _record(data: bytes, last_seq: int = 0, reads: dict[str, int] | None = None) -> ChatRecord:
    fields = orjson.loads(data)
    return ChatRecord.from_json({**fields, "last_seq": last_seq, "reads": reads or {}})


def _message(data: bytes) -> StoredMessage:
    return StoredMessage(**orjson.loads(data))


def _field(fields: dict[bytes, bytes], name: bytes) -> str:
    return fields.get(name, b"").decode()


def _entry(fields: dict[bytes, bytes]) -> RoomEntry:
    """A feed entry as the stream holds it."""
    kind = _field(fields, b"k")
    data = fields.get(b"d", b"")
    participants = fields.get(b"p", b"")
    return RoomEntry(
        kind=kind,
        member=_field(fields, b"m"),
        participants=tuple(orjson.loads(participants)) if participants else (),
        message=_message(data) if kind == "message" else None,
        event=decode_object(orjson.loads(data)) if data and kind != "message" else None,  # type: ignore[arg-type]
        skip_user=_field(fields, b"s") or None,
        user=_field(fields, b"u"),
        seq=int(fields.get(b"q") or 0),
    )


@attrs.define(eq=False)
class _Pending:
    """One write queued for the writer; ``done`` is set with its result."""

    script: Any
    args: list[Any]
    done: trio.Event = attrs.field(factory=trio.Event)
    result: Any = None


class RedisChatStore(RedisCalls, BackgroundLoop, ChatStore):
    """Chat rooms and their feeds in Redis (``redis://host:port/db``); see the module docstring.

    Args:
        url: The Redis URL.
        max_messages: Messages kept per room.
        prefix: Key prefix, so several apps can share one database.
    """

    loop_name = "uamp-chat-feeds"
    loop_what = "the chat feeds of the Redis store"
    shared = True

    def __init__(self, url: str, max_messages: int = MAX_MESSAGES, *, prefix: str = "uamp") -> None:
        super().__init__(max_messages)
        self.url = url
        self._p = f"{prefix}:chat:"
        # Typed loosely: redis-py's stubs union every reply shape.
        self._redis: Any = open_redis(url)
        self._feed_script = self._redis.register_script(_FEED)
        self._post_script = self._redis.register_script(_POST)
        self._create_script = self._redis.register_script(_CREATE)
        self._save_script = self._redis.register_script(_SAVE)
        self._depart_script = self._redis.register_script(_DEPART)
        self._expire_script = self._redis.register_script(_EXPIRE)
        self._noop_script = self._redis.register_script("return 0")
        self._queue: list[_Pending] = []
        self._dirty = trio.Event()
        self._opened = trio.Event()
        #: Room name -> (its key, last feed id read).
        self._following: dict[str, tuple[ChatKey, bytes]] = {}
        self._running = False

    # --- rooms and messages ---------------------------------------------------------

    async def find(self, principal: Principal, chat_id: str) -> ChatRecord | None:
        def read() -> list[Any]:
            names = self._redis.zrange(f"{self._p}id:{chat_id}", 0, -1)
            if not names:
                return []
            return list(self._redis.mget([f"{self._p}rec:{n.decode()}" for n in names]))

        records = [_record(r) for r in await self._call(read) if r is not None]
        own = next((r for r in records if r.owner == principal.key), None)
        found = own or next((r for r in records if r.admits(principal)), None)
        if found is None:
            return None
        room = _room(found.key)

        def counts() -> Any:
            pipe = self._redis.pipeline(transaction=True)
            pipe.get(f"{self._p}seq:{room}")
            pipe.hgetall(f"{self._p}reads:{room}")
            return pipe.execute()

        seq, reads = await self._call(counts)
        found.last_seq = int(seq or 0)
        found.reads = {k.decode(): int(v) for k, v in reads.items()}
        return found

    async def create(self, record: ChatRecord) -> ChatRecord:
        room = _room(record.key)
        args: list[Any] = [self._p, room, _settings(record), record.chat_id, record.created]
        stored = await self._call(lambda: self._create_script(args=args))
        return _record(stored)

    async def save(self, record: ChatRecord) -> None:
        args: list[Any] = [self._p, _room(record.key), _settings(record), record.last_seq]
        for user, seq in record.reads.items():
            args.extend((user, seq))
        await self._call(lambda: self._save_script(args=args))

    async def append(self, key: ChatKey, message: StoredMessage) -> None:
        name = f"{self._p}msg:{_room(key)}"

        def write() -> None:
            pipe = self._redis.pipeline(transaction=True)
            pipe.zadd(name, {orjson.dumps(message.to_json()): message.seq})
            pipe.zremrangebyrank(name, 0, -(self.max_messages + 1))
            pipe.execute()

        await self._call(write)

    async def expire(self, before: float, keep: Collection[ChatKey] = ()) -> int:
        args = [self._p, before, *(_room(key) for key in keep)]
        return int(await self._call(lambda: self._expire_script(args=args)))

    async def history(self, key: ChatKey, after: int = 0, limit: int = 100) -> list[StoredMessage]:
        if limit <= 0:
            return []
        rows = await self._call(
            lambda: self._redis.zrevrangebyscore(
                f"{self._p}msg:{_room(key)}", "+inf", f"({after}", start=0, num=limit
            )
        )
        return [_message(r) for r in reversed(rows)]

    # --- the feed ---------------------------------------------------------------------

    async def open_room(self, record: ChatRecord, deliver: Deliver, history: int) -> RoomState:
        room = _room(record.key)
        p = self._p

        def snapshot() -> Any:
            pipe = self._redis.pipeline(transaction=True)
            pipe.get(f"{p}seq:{room}")
            pipe.hgetall(f"{p}reads:{room}")
            pipe.zrevrange(f"{p}msg:{room}", 0, max(history, 1) - 1)
            pipe.hgetall(f"{p}pres:{room}")
            pipe.xrevrange(f"{p}feed:{room}", count=1)
            return pipe.execute()

        seq, reads, recent, present, last = await self._call(snapshot)
        self._room_feeds[record.key] = deliver
        self._following[room] = (record.key, last[0][0] if last else b"0-0")
        self._opened.set()
        record = attrs.evolve(
            record,
            last_seq=int(seq or 0),
            reads={k.decode(): int(v) for k, v in reads.items()},
        )
        return RoomState(
            record=record,
            recent=[_message(r) for r in reversed(recent)],
            present={k.decode(): tuple(orjson.loads(v)) for k, v in present.items()},
        )

    def close_room(self, key: ChatKey) -> None:
        super().close_room(key)
        self._following.pop(_room(key), None)

    def publish(self, key: ChatKey, entry: RoomEntry) -> None:
        if entry.kind == "message" and entry.message is not None:
            data = orjson.dumps(entry.message.to_json())
        elif entry.event is not None:
            data = orjson.dumps(to_dict(entry.event))
        else:
            data = b""
        participants = orjson.dumps(list(entry.participants)) if entry.participants else b""
        args = [
            self._p, _room(key), entry.kind, entry.member, participants, data,
            entry.skip_user or "", entry.user, entry.seq, FEED_LENGTH,
        ]  # fmt: skip
        self._enqueue(_Pending(self._feed_script, args))

    async def depart(self, key: ChatKey, node: str) -> int:
        args = [self._p, _room(key), f"{node}:", FEED_LENGTH]
        return int(await self._written(_Pending(self._depart_script, args)))

    async def post(self, record: ChatRecord, message: StoredMessage) -> StoredMessage:
        fields = message.to_json()
        del fields["seq"]  # the script puts the number first
        args = [
            self._p,
            _room(record.key),
            orjson.dumps(fields),
            self.max_messages,
            FEED_LENGTH,
            message.created_at,
        ]
        seq = int(await self._written(_Pending(self._post_script, args)))
        record.last_seq = max(record.last_seq, seq)
        return attrs.evolve(message, seq=seq)

    async def flush(self) -> None:
        """Return once what was published so far is written (a drain's last entries).

        The writer sends its queue in order, a batch per round: a no-op
        queued last is answered after everything before it. Raises
        :class:`~.health.StoreUnavailable` (or Redis's error) when the
        write failed.
        """
        if self._running or self._queue:
            await self._written(_Pending(self._noop_script, []))

    async def _written(self, pending: _Pending) -> Any:
        """Queue ``pending`` for the writer; its script's result once sent (raised if it failed)."""
        self._enqueue(pending)
        await pending.done.wait()
        if isinstance(pending.result, BaseException):
            raise pending.result
        return pending.result

    def _enqueue(self, pending: _Pending) -> None:
        self.ensure_running(None)
        self._queue.append(pending)
        self._dirty.set()

    async def run(self) -> None:
        """Write what this process publishes and read the feeds it follows, until cancelled."""
        self._running = True
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._write)
                nursery.start_soon(self._read)
        finally:
            self._running = False

    async def _write(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty = trio.Event()
            batch, self._queue = self._queue, []

            def send(batch: list[_Pending] = batch) -> list[Any]:
                pipe = self._redis.pipeline(transaction=False)
                for pending in batch:
                    pending.script(args=pending.args, client=pipe)
                return list(pipe.execute(raise_on_error=False))

            try:
                results = await self._call(send)
            except Exception as exc:  # Redis gone: the waiting posts fail, the rest is lost
                if not self.health.down:
                    self.health.failed(exc)  # once per outage; each loss at debug level
                log.debug("chat feed write failed: %s", exc)
                results = [exc] * len(batch)
            except BaseException:  # cancelled (the loop restarts): nobody waits forever
                stopped = StoreUnavailable("the chat store stopped writing; try again")
                for pending in batch:
                    pending.result = stopped
                    pending.done.set()
                raise
            else:
                self.health.ok()
            for pending, result in zip(batch, results, strict=True):
                pending.result = result
                pending.done.set()

    async def _read(self) -> None:
        while True:
            if not self._following:
                self._opened = trio.Event()
                await self._opened.wait()
                continue
            streams = {f"{self._p}feed:{name}": last for name, (_, last) in self._following.items()}
            block = int(READ_BLOCK * 1000)
            found = await self._call(
                lambda: self._redis.xread(streams, count=512, block=block),  # noqa: B023
                timeout=READ_BLOCK + STORE_TIMEOUT,
            )
            self.health.ok()
            for stream, rows in found or ():
                name = stream.decode().removeprefix(f"{self._p}feed:")
                for entry_id, fields in rows:
                    following = self._following.get(name)
                    if following is None:
                        break  # closed meanwhile
                    key = following[0]
                    self._following[name] = (key, entry_id)
                    deliver = self._room_feeds.get(key)
                    if deliver is not None:
                        try:
                            deliver(_entry(fields))
                        except Exception:
                            log.exception("applying a chat feed entry failed")

    async def aclose(self) -> None:
        self._redis.close()
