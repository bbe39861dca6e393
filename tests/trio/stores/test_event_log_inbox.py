"""A question asked of another process on Redis is answered, whenever it arrives.

Processes on one Redis ask each other about the sessions they write
(``EventLog.ask``: a POST forwarded to the process serving its session)
through a stream per process, its inbox. The inbox reader used to read
from ``$`` -- only what arrives after each read starts -- so a question
added before its first read, or between two reads, was never seen and the
asker waited out its timeout (uamp_asgi's HTTP+SSE then answered 409
``session_elsewhere``; CI saw it once). An inbox belongs to one process (its
node id is random), so its reader now starts at its beginning and goes on
from the last entry it read.
"""

from __future__ import annotations

import uuid
from typing import Any

import redis
import trio

from uamp_stores.event_log_redis import RedisEventLog

KEY = (("bearer", "alice"), "sess_1")


async def test_a_question_asked_before_the_inbox_is_read_is_answered(redis_url: str) -> None:
    prefix = f"inbox{uuid.uuid4().hex[:8]}"
    serving, asking = (
        RedisEventLog(redis_url, prefix=prefix),
        RedisEventLog(redis_url, prefix=prefix),
    )
    heard: list[dict[str, Any]] = []

    async def handler(message: dict[str, Any]) -> dict[str, Any]:
        heard.append(message)
        return {"accepted": len(message["events"])}

    serving.register(KEY, handler)
    answers: list[dict[str, Any] | None] = []
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:

            async def ask() -> None:
                answers.append(await asking.ask(serving.node, KEY, {"events": [1, 2]}, timeout=8))

            nursery.start_soon(ask)
            inbox, store = f"{prefix}:inbox:{serving.node}", redis.Redis.from_url(redis_url)
            while not store.xlen(inbox):  # the question is in, nobody reads yet
                await trio.sleep(0.01)
            nursery.start_soon(serving.run)  # its loops start only now
            while not answers:
                await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
    assert answers == [{"accepted": 2}]
    assert heard == [{"events": [1, 2]}]
