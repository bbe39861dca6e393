"""Pending interrupts shared by the processes of one Redis (docs/human-in-the-loop.md).

Theory of operation
-------------------
A run paused for a person waits in the process that runs it
(:class:`~uamp_trio.hosting.interrupts.Interrupts`); this relay lets a
person answer on *another* process. Keys, under ``{prefix}:int:``:

* ``rec:{id}`` -- the interrupt and its owner as JSON, written when the
  run asks and deleted when it ends (it expires with the interrupt);
* ``key:{session}:{response}:{key}`` -- the id of the run's ask, so that a
  run carried on after its process was lost asks again *under the same id*
  (the client may answer the id it was shown first);
* ``own:{owner}`` -- the set of the ids recorded for one principal, so any
  process can list a principal's pending interrupts (``Interrupts.pending``,
  ``Interrupts.paused``); an id whose record is gone is dropped from it when
  it is listed;
* ``ans:{id}`` -- a list the answering process pushes the answer to; the
  waiting process takes it with ``LPOP`` every :data:`POLL` seconds while it
  waits (polling holds no worker thread, unlike a blocking pop per waiting
  interrupt).

Another principal's id reads like a missing one here too: the owner is
checked before anything is pushed.
"""

from __future__ import annotations

from typing import Any, Final

import attrs
import orjson

from uamp_proto.interrupts import Answer, Interrupt
from uamp_stores._redis import RedisCalls, open_redis

__all__ = ["POLL", "RedisInterruptRelay"]

#: Seconds between two looks for an answer given on another process.
POLL: Final = 0.25
#: Seconds a record outlives its interrupt's expiry (or lives without one).
GRACE: Final = 3600


class RedisInterruptRelay(RedisCalls):
    """Interrupt records and answers in Redis; see the module docstring.

    Args:
        url: The Redis URL (``redis://host:port/db``).
        prefix: Key prefix, so several apps can share one database.
    """

    poll = POLL

    def __init__(self, url: str, prefix: str = "uamp") -> None:
        self.url = url
        self.prefix = prefix
        self._redis = open_redis(url)

    def _key(self, kind: str, interrupt_id: str) -> str:
        return f"{self.prefix}:int:{kind}:{interrupt_id}"

    def _owned(self, owner: tuple[str, str]) -> str:
        """The key of ``owner`` 's set of interrupt ids (the scheme's length keeps ids apart)."""
        scheme, ident = owner
        return self._key("own", f"{len(scheme)}:{scheme}:{ident}")

    def _asked(self, interrupt: Interrupt) -> str:
        """The key naming the run's ask: its session, response and interrupt key."""
        return self._key("key", f"{interrupt.session_id}:{interrupt.response_id}:{interrupt.key}")

    async def publish(
        self, interrupt: Interrupt, owner: tuple[str, str], ttl: float | None
    ) -> None:
        """Record ``interrupt`` for ``owner`` for ``ttl`` seconds (plus a grace)."""
        data = orjson.dumps({"interrupt": attrs.asdict(interrupt), "owner": list(owner)})
        seconds = int(ttl or 0) + GRACE
        pipe = self._redis.pipeline()
        pipe.set(self._key("rec", interrupt.id), data, seconds)
        pipe.set(self._asked(interrupt), interrupt.id, seconds)
        pipe.sadd(self._owned(owner), interrupt.id)
        pipe.expire(self._owned(owner), seconds)
        await self._call(pipe.execute)

    async def owned(self, owner: tuple[str, str]) -> list[Interrupt]:
        """Every interrupt recorded for ``owner``, on any process."""
        key = self._owned(owner)
        ids = sorted(i.decode() for i in await self._call(self._redis.smembers, key))
        if not ids:
            return []
        raws = await self._call(self._redis.mget, [self._key("rec", i) for i in ids])
        found: list[Interrupt] = []
        gone: list[str] = []
        for interrupt_id, raw in zip(ids, raws, strict=True):
            record: dict[str, Any] | None = None if raw is None else orjson.loads(raw)
            if record is None or tuple(record["owner"]) != owner:
                gone.append(interrupt_id)
                continue
            found.append(Interrupt(**record["interrupt"]))
        if gone:
            await self._call(self._redis.srem, key, *gone)
        return found

    async def asked_before(self, interrupt: Interrupt, owner: tuple[str, str]) -> Interrupt | None:
        """The interrupt a lost process recorded for the same ask of the same run, if any."""
        known = await self._call(self._redis.get, self._asked(interrupt))
        return None if known is None else await self.lookup(known.decode(), owner)

    async def lookup(self, interrupt_id: str, owner: tuple[str, str]) -> Interrupt | None:
        """The interrupt ``interrupt_id`` if it is recorded for ``owner``."""
        raw = await self._call(self._redis.get, self._key("rec", interrupt_id))
        if raw is None:
            return None
        found: dict[str, Any] = orjson.loads(raw)
        if tuple(found["owner"]) != owner:
            return None
        return Interrupt(**found["interrupt"])

    async def send_answer(self, interrupt_id: str, answer: Answer) -> None:
        """Hand ``answer`` to the process whose run waits on ``interrupt_id``."""
        key = self._key("ans", interrupt_id)
        await self._call(self._redis.rpush, key, orjson.dumps(attrs.asdict(answer)))
        await self._call(self._redis.expire, key, GRACE)

    async def take_answer(self, interrupt_id: str) -> Answer | None:
        """An answer given on another process, if one came."""
        raw = await self._call(self._redis.lpop, self._key("ans", interrupt_id))
        return None if raw is None else Answer(**orjson.loads(raw))

    async def forget(self, interrupt: Interrupt) -> None:
        """The run no longer waits: the record, its index and any answer go.

        (Its id leaves its owner's set when the set is next listed.)
        """
        keys = (self._key("rec", interrupt.id), self._key("ans", interrupt.id))
        await self._call(self._redis.delete, *keys, self._asked(interrupt))

    async def aclose(self) -> None:
        """Close the connection pool."""
        self._redis.close()
