"""A2A tasks in Redis: several processes share them, ``uamp serve``'s and the ASGI app's.

docs/scale-out.md says how to run them.

Theory of operation
-------------------
Keys, under ``{prefix}:a2a:``:

* ``t:{id}`` -- a hash per task: ``o`` the owner (a digest of its principal
  key), ``c`` its context id, ``n`` its creation number, ``d`` the task as
  JSON (:func:`uamp_proto.adapters.a2a_records.task_to_json`, without its
  push-notification configs), ``p`` those configs as JSON, ``s`` the
  sequence number of its latest update;
* ``x:{id}`` -- a list: the text chunks written since ``d`` (``[artifact
  id, text]`` each), applied to ``d`` when the task is read;
* ``all``, ``own:{o}``, ``fin``, ``fin:{o}``, ``ctx:{o}:{context}`` --
  sorted sets of task ids by creation number: every task, an owner's, the
  finished ones (all and an owner's), a conversation's;
* ``n`` -- the creation counter;
* ``node:{node}`` -- a process's heartbeat while it listens (it expires
  :data:`NODE_TTL` after the last beat), and field ``r`` of a working task's
  hash names the process running its turn. A task whose ``r`` has no
  heartbeat lost its process: :meth:`RedisTaskStore.take_over` hands it to
  exactly one survivor (one script: check the beat, rewrite ``r``).

Every change that touches more than one key is one Lua script, so the
bounds hold across processes: adding checks the owner's quota and the store's
size and evicts the oldest finished task (the owner's, then anyone's) in one
step, as :class:`~uamp_stores.a2a_tasks.MemoryTaskStore` does.
Push-notification configs are a field of their own: the process running a
task's turn writes the task on each update without overwriting configs
another process set meanwhile, and reads them back (the publish script
returns them) so its webhooks follow. A batch of updates that only grows
text artifacts (a streamed turn's text chunks:
:func:`~uamp_proto.adapters.a2a_records.text_appends`) appends its chunks to
``x:{id}`` instead of rewriting ``d``, so a streamed chunk costs its own
size, not its task's; the next whole write empties the list, and a read
applies it (:func:`~uamp_proto.adapters.a2a_records.grow_text`) in the same
transaction as ``d``. The writer appends only what it can vouch for
(:class:`_TextMarks`): each artifact grown is, as at its last whole write,
one text item -- the same object, the turn's own -- longer by exactly the
chunks; anything else is a whole write.

Updates and cancel requests travel on one pub/sub channel,
``{prefix}:a2a:events``, which every process subscribes to while it runs
(:meth:`RedisTaskStore.run`). The publish script writes the task, numbers
the updates from ``s`` and publishes them in the same step, so a subscriber
that registers its feed, then reads the task and its ``s``, sees exactly the
updates after that snapshot. Redis calls run in worker threads with the
synchronous redis-py client, like :mod:`~uamp_stores.event_log_redis`.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from typing import Any, Final, TypeVar

import anyio
import orjson

from uamp_proto import types as ty
from uamp_proto.adapters.a2a import A2ATask, TaskState, Update
from uamp_proto.adapters.a2a_records import (
    grow_text,
    task_from_json,
    task_to_json,
    text_appends,
    update_from_json,
    update_to_json,
)
from uamp_proto.principal import Principal

from ._redis import RedisCalls, open_redis, redis_where
from .a2a_tasks import TaskFeed, TaskStore, quota_exceeded, store_full, task_not_found
from .background import BackgroundLoop
from .health import STORE_TIMEOUT, StoreUnavailable

__all__ = ["RedisTaskStore"]

log = logging.getLogger("uamp_stores")

T = TypeVar("T")

#: Forget one task: its hash and its place in every index.
_DROP: Final = """
local function drop(p, id)
  local tk = p .. 't:' .. id
  local o = redis.call('HGET', tk, 'o')
  if not o then return end
  local c = redis.call('HGET', tk, 'c')
  redis.call('DEL', tk, p .. 'x:' .. id)
  redis.call('ZREM', p .. 'all', id)
  redis.call('ZREM', p .. 'fin', id)
  redis.call('ZREM', p .. 'own:' .. o, id)
  redis.call('ZREM', p .. 'fin:' .. o, id)
  redis.call('ZREM', p .. 'ctx:' .. o .. ':' .. c, id)
end
local function finish(p, id, tk)
  local o = redis.call('HGET', tk, 'o')
  local n = redis.call('HGET', tk, 'n')
  redis.call('ZADD', p .. 'fin', n, id)
  redis.call('ZADD', p .. 'fin:' .. o, n, id)
end
"""

#: ARGV: prefix, id, owner, context, task JSON, push JSON, finished (0/1), max, per owner.
_ADD: Final = (
    _DROP
    + """
local p, id, o, c = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local tk = p .. 't:' .. id
if redis.call('EXISTS', tk) == 1 then return 'duplicate' end
local most, per = tonumber(ARGV[8]), tonumber(ARGV[9])
if redis.call('ZCARD', p .. 'own:' .. o) >= per then
  local victim = redis.call('ZRANGE', p .. 'fin:' .. o, 0, 0)[1]
  if victim then drop(p, victim) end
  if redis.call('ZCARD', p .. 'own:' .. o) >= per then return 'quota' end
end
while redis.call('ZCARD', p .. 'all') >= most do
  local victim = redis.call('ZRANGE', p .. 'fin', 0, 0)[1]
  if not victim then return 'full' end
  drop(p, victim)
end
local n = redis.call('INCR', p .. 'n')
redis.call('HSET', tk, 'o', o, 'c', c, 'n', n, 'd', ARGV[5], 'p', ARGV[6], 's', 0)
redis.call('ZADD', p .. 'all', n, id)
redis.call('ZADD', p .. 'own:' .. o, n, id)
redis.call('ZADD', p .. 'ctx:' .. o .. ':' .. c, n, id)
if ARGV[7] == '1' then finish(p, id, tk) end
return 'ok'
"""
)

#: ARGV: prefix, id.
_DISCARD: Final = _DROP + "drop(ARGV[1], ARGV[2])\nreturn 'ok'\n"

#: How long a process's heartbeat outlives its last beat, in milliseconds
#: (it beats every second while it listens, and on each write of a working task).
NODE_TTL: Final = 5000

#: ARGV: prefix, id, task JSON or '' (text chunks only), finished (0/1), push
#: JSON or '' (kept), runner node or '' (none runs it now), its heartbeat's
#: time to live, the number K of text chunks, K chunks, updates...
#: Returns the stored push JSON, or nil when the task is not stored.
_PUBLISH: Final = (
    _DROP
    + """
local p, id = ARGV[1], ARGV[2]
local tk = p .. 't:' .. id
if redis.call('EXISTS', tk) == 0 then return nil end
local k = tonumber(ARGV[8])
if ARGV[3] ~= '' then
  redis.call('HSET', tk, 'd', ARGV[3])
  redis.call('DEL', p .. 'x:' .. id)
end
for i = 9, 8 + k do redis.call('RPUSH', p .. 'x:' .. id, ARGV[i]) end
if ARGV[5] ~= '' then redis.call('HSET', tk, 'p', ARGV[5]) end
if ARGV[4] == '1' then finish(p, id, tk) end
if ARGV[6] ~= '' then
  redis.call('HSET', tk, 'r', ARGV[6])
  redis.call('SET', p .. 'node:' .. ARGV[6], '1', 'PX', ARGV[7])
else
  redis.call('HDEL', tk, 'r')
end
local first = 9 + k
if #ARGV >= first then
  local s = redis.call('HINCRBY', tk, 's', #ARGV - first + 1) - (#ARGV - first + 1)
  for i = first, #ARGV do
    s = s + 1
    redis.call('PUBLISH', p .. 'events', 'u\\n' .. s .. '\\n' .. id .. '\\n' .. ARGV[i])
  end
end
return redis.call('HGET', tk, 'p')
"""
)

#: ARGV: prefix, id, this node. 1 when the task's runner has no heartbeat
#: and this node now runs it (to end it), else 0.
_TAKE_OVER: Final = """
local tk = ARGV[1] .. 't:' .. ARGV[2]
local r = redis.call('HGET', tk, 'r')
if not r or r == ARGV[3] then return 0 end
if redis.call('EXISTS', ARGV[1] .. 'node:' .. r) == 1 then return 0 end
redis.call('HSET', tk, 'r', ARGV[3])
redis.call('SET', ARGV[1] .. 'node:' .. ARGV[3], '1', 'PX', ARGV[4])
return 1
"""

#: ARGV: prefix, id, push JSON.
_SAVE_PUSH: Final = """
local tk = ARGV[1] .. 't:' .. ARGV[2]
if redis.call('EXISTS', tk) == 1 then redis.call('HSET', tk, 'p', ARGV[3]) end
return 'ok'
"""


def _owner(principal: Principal) -> str:
    return hashlib.sha256(orjson.dumps(list(principal.key))).hexdigest()


def _encode(task: A2ATask) -> tuple[bytes, bytes]:
    """The task's JSON without its push configs, and those configs."""
    data = task_to_json(task)
    push = data.pop("push_configs")
    return orjson.dumps(data), orjson.dumps(push)


def _decode(data: bytes, push: bytes | None, chunks: list[bytes]) -> A2ATask:
    """The task as stored: its JSON, its push configs, the text chunks written since."""
    fields = orjson.loads(data)
    fields["push_configs"] = orjson.loads(push) if push else {}
    task = task_from_json(fields)
    if chunks:
        grow_text(task, (tuple(orjson.loads(c)) for c in chunks))
    return task


class _TextMarks:
    """What the process wrote of each working task's one-text artifacts, to append to them.

    Per task: artifact id -> (its one text item, the text's length written).
    Set at each whole write of a working task, forgotten at any other write.
    """

    def __init__(self) -> None:
        self._tasks: dict[str, dict[str, tuple[ty.TextContent, int]]] = {}

    def written(self, task: A2ATask) -> None:
        """``task`` was written whole (its text settled)."""
        if task.state is not TaskState.WORKING:
            self._tasks.pop(task.id, None)
            return
        self._tasks[task.id] = {
            a.artifact_id: (a.items[0], len(a.items[0].text))
            for a in task.artifacts
            if len(a.items) == 1 and type(a.items[0]) is ty.TextContent
        }

    def grew(self, task: A2ATask, appends: list[tuple[str, str]]) -> bool:
        """Whether ``appends`` are all that changed in their artifacts since written (noted)."""
        marks = self._tasks.get(task.id)
        if marks is None:
            return False
        grown: dict[str, int] = {}
        for artifact_id, text in appends:
            grown[artifact_id] = grown.get(artifact_id, 0) + len(text)
        by_id = {a.artifact_id: a for a in task.artifacts if a.artifact_id in grown}
        for artifact_id, added in grown.items():
            artifact, mark = by_id.get(artifact_id), marks.get(artifact_id)
            if artifact is None or mark is None or len(artifact.items) != 1:
                return False
            item, length = mark
            if artifact.items[0] is not item or len(item.text) != length + added:
                return False
        for artifact_id, added in grown.items():
            item, length = marks[artifact_id]
            marks[artifact_id] = (item, length + added)
        return True

    def forget(self, task_id: str) -> None:
        self._tasks.pop(task_id, None)


class RedisTaskStore(RedisCalls, BackgroundLoop, TaskStore):
    """A2A tasks in Redis (``redis://host:port/db``), shared by every process using it.

    Args:
        url: The Redis URL.
        max_tasks: Tasks kept in the whole store.
        max_per_principal: Tasks one principal may hold.
        prefix: Key prefix, so several apps can share one database.
    """

    loop_name = "uamp-a2a-tasks"
    loop_what = "the A2A task listener"

    shared = True

    def __init__(
        self,
        url: str,
        max_tasks: int = 1000,
        max_per_principal: int | None = None,
        *,
        prefix: str = "uamp",
    ) -> None:
        super().__init__(max_tasks, max_per_principal)
        self.url = url
        self._p = f"{prefix}:a2a:"
        # Typed loosely: redis-py's stubs union every reply shape.
        self._redis: Any = open_redis(url)
        self._add = self._redis.register_script(_ADD)
        self._discard = self._redis.register_script(_DISCARD)
        self._publish = self._redis.register_script(_PUBLISH)
        self._save_push = self._redis.register_script(_SAVE_PUSH)
        self._take_over = self._redis.register_script(_TAKE_OVER)
        #: This process, as working tasks' hashes name their runner.
        self.node = uuid.uuid4().hex
        self._marks = _TextMarks()
        self._running = False
        self._listening = anyio.Event()

    # --- tasks -------------------------------------------------------------------------

    async def add(self, task: A2ATask, *, owner: Principal) -> None:
        data, push = _encode(task)
        args: list[Any] = [
            self._p, task.id, _owner(owner), task.context_id, data, push,
            "1" if task.state.is_terminal else "0", self.max_tasks, self.max_per_principal,
        ]  # fmt: skip
        outcome = await self._call(lambda: self._add(args=args))
        if outcome == b"duplicate":
            raise ValueError(f"task {task.id!r} exists already")
        if outcome == b"quota":
            raise quota_exceeded(self.max_per_principal)
        if outcome == b"full":
            raise store_full()

    async def check_quota(self, owner: Principal) -> None:
        o = _owner(owner)

        def counts() -> Any:
            pipe = self._redis.pipeline(transaction=True)
            pipe.zcard(f"{self._p}own:{o}")
            pipe.zcard(f"{self._p}fin:{o}")
            return pipe.execute()

        held, finished = await self._call(counts)
        if held >= self.max_per_principal and not finished:
            raise quota_exceeded(self.max_per_principal)

    async def discard(self, task_id: str) -> None:
        self._marks.forget(task_id)
        await self._call(lambda: self._discard(args=[self._p, task_id]))

    async def _read(self, task_id: str, owner: str) -> tuple[A2ATask, int] | None:
        """The task and its update number, if ``owner`` (a digest) has it."""

        def read() -> Any:
            pipe = self._redis.pipeline(transaction=True)
            pipe.hmget(f"{self._p}t:{task_id}", "o", "d", "p", "s")
            pipe.lrange(f"{self._p}x:{task_id}", 0, -1)
            return pipe.execute()

        (stored_owner, data, push, seq), chunks = await self._call(read)
        if data is None or stored_owner.decode() != owner:
            return None
        return _decode(data, push, chunks), int(seq)

    async def get(self, task_id: str, *, owner: Principal) -> A2ATask:
        found = await self._read(task_id, _owner(owner))
        if found is None:
            raise task_not_found(task_id)
        return found[0]

    async def _many(self, ids: list[bytes]) -> list[A2ATask]:
        def read() -> Any:
            pipe = self._redis.pipeline(transaction=True)
            for task_id in ids:
                pipe.hmget(f"{self._p}t:{task_id.decode()}", "d", "p")
                pipe.lrange(f"{self._p}x:{task_id.decode()}", 0, -1)
            return pipe.execute()

        rows = await self._call(read) if ids else []
        # A task evicted between the two reads is simply not there.
        pairs = zip(rows[::2], rows[1::2], strict=True)
        return [_decode(d, p, chunks) for (d, p), chunks in pairs if d is not None]

    async def owned_by(self, owner: Principal) -> list[A2ATask]:
        ids = await self._call(self._redis.zrange, f"{self._p}own:{_owner(owner)}", 0, -1)
        return await self._many(ids)

    async def latest_in_context(self, context_id: str, *, owner: Principal) -> A2ATask | None:
        o = _owner(owner)
        ids = await self._call(self._redis.zrange, f"{self._p}ctx:{o}:{context_id}", -1, -1)
        tasks = await self._many(ids)
        return tasks[0] if tasks else None

    async def save(self, task: A2ATask) -> None:
        await self._write(task, [], with_push=True)

    async def save_push_configs(self, task: A2ATask) -> None:
        push = orjson.dumps(task.push_configs)
        await self._call(lambda: self._save_push(args=[self._p, task.id, push]))

    async def publish(self, task: A2ATask, updates: list[Update]) -> None:
        await self._write(task, updates, with_push=False)

    async def _write(self, task: A2ATask, updates: list[Update], *, with_push: bool) -> None:
        working = task.state is TaskState.WORKING
        appends = None if with_push or not working else text_appends(updates)
        chunks: list[bytes] = []
        if appends is not None:
            task.settle()
            if not self._marks.grew(task, appends):
                appends = None
        if appends is None:
            data, push = _encode(task)
            self._marks.written(task)
        else:  # only text grew: its chunks, not the whole task again
            data, push = b"", b""
            chunks = [orjson.dumps(chunk) for chunk in appends]
        args: list[Any] = [
            self._p, task.id, data, "1" if task.state.is_terminal else "0",
            push if with_push else b"", self.node if working else "", NODE_TTL, len(chunks),
        ]  # fmt: skip
        args.extend(chunks)
        args.extend(orjson.dumps(update_to_json(u)) for u in updates)
        stored = await self._call(lambda: self._publish(args=args))
        if stored is not None and not with_push:
            task.push_configs = orjson.loads(stored)

    # --- subscribers and cancel requests -------------------------------------------------

    async def follow(self, task_id: str, *, owner: Principal) -> tuple[A2ATask, TaskFeed]:
        self.ensure_running(None)
        # The feed must hear what is published from now on (bounded: Redis may be down).
        with anyio.move_on_after(STORE_TIMEOUT):
            await self._listening.wait()
        if not self._listening.is_set():
            raise StoreUnavailable(f"{redis_where(self.url)} does not answer: no task updates")
        feed = self._watchers.open(task_id)
        try:
            found = await self._read(task_id, _owner(owner))
        except BaseException:
            feed.close()
            raise
        if found is None:
            feed.close()
            raise task_not_found(task_id)
        task, feed.after = found
        return task, feed

    async def take_over(self, task_id: str) -> bool:
        args = [self._p, task_id, self.node, NODE_TTL]
        return bool(await self._call(lambda: self._take_over(args=args)))

    async def request_cancel(self, task_id: str) -> None:
        await self._call(self._redis.publish, f"{self._p}events", b"c\n" + task_id.encode())

    async def run(self) -> None:
        """Hear every process's updates and cancel requests until cancelled."""
        self._running = True
        pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
        try:
            await self._call(pubsub.subscribe, f"{self._p}events")
            self._listening.set()
            self.health.ok()
            beat, last = f"{self._p}node:{self.node}", -1.0
            while True:
                if anyio.current_time() - last >= 1.0:
                    await self._call(lambda: self._redis.set(beat, b"1", px=NODE_TTL))
                    last = anyio.current_time()
                message = await self._call(
                    lambda: pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                )
                if message is not None and message.get("type") == "message":
                    self._dispatch(message["data"])
        finally:
            self._running = False
            self._listening = anyio.Event()
            pubsub.close()

    def _dispatch(self, data: bytes) -> None:
        kind, _, rest = data.partition(b"\n")
        if kind == b"c":
            self._cancel_here(rest.decode())
            return
        seq, _, rest = rest.partition(b"\n")
        task_id, _, payload = rest.partition(b"\n")
        name = task_id.decode()
        if name in self._watchers:
            self._watchers.deliver(name, int(seq), update_from_json(orjson.loads(payload)))

    async def aclose(self) -> None:
        self._redis.close()
