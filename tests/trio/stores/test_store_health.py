"""Store outages (uamp_stores.health): supervised loops, their log lines, the bounded queue.

The supervisor is driven on trio's mock clock through tables of failures;
the event log's bounded queue is checked on a real Redis that is down, then
started on the same port.
"""

from __future__ import annotations

import itertools
import logging
import uuid
from pathlib import Path

import pytest
import redis
import trio
import trio.testing

from tests._support.redis_server import free_port, start_redis, stop_redis
from uamp_stores.event_log import SessionRecord
from uamp_stores.event_log_redis import RedisEventLog
from uamp_stores.health import StoreHealth, StoreUnavailable, supervise

OUTAGE = StoreUnavailable("Redis at 127.0.0.1:1/0 is unavailable (ConnectionError: refused)")
BUG = KeyError("oops")


def _lines(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level]


@pytest.mark.parametrize(
    ("failures", "waits", "warnings"),
    [
        # A store outage: one warning for the whole outage, the waits doubling to the cap.
        ([OUTAGE] * 8, [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0], 1),
        # A bug: the same waits, and a warning at each retry at the cap.
        ([BUG] * 8, [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0], 3),
        # An exception group of outages (a loop's nursery) is an outage too.
        ([ExceptionGroup("loop", [OUTAGE, OSError("reset")])] * 3, [0.1, 0.2, 0.4], 1),
        ([], [], 0),
    ],
)
async def test_a_failing_loop_is_restarted_with_backoff_and_logged_once(
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
    failures: list[Exception],
    waits: list[float],
    warnings: int,
) -> None:
    caplog.set_level(logging.DEBUG, logger="uamp_stores")
    health = StoreHealth("the test loop")
    starts: list[float] = []
    pending = list(failures)

    async def run() -> None:
        starts.append(trio.current_time())
        if pending:
            raise pending.pop(0)
        health.ok()  # the round reached the store

    await supervise(run, health)
    assert [round(b - a, 3) for a, b in itertools.pairwise(starts)] == waits
    assert len(_lines(caplog, logging.WARNING)) == warnings
    # The traceback of each failure only at debug level.
    assert not any(r.exc_info for r in caplog.records if r.levelno > logging.DEBUG)
    assert sum(1 for r in caplog.records if r.exc_info) == len(failures)
    recovered = [m for m in _lines(caplog, logging.INFO) if "works again" in m]
    assert len(recovered) == (1 if failures else 0)
    assert not health.down


async def test_a_second_outage_is_logged_again_and_backs_off_from_the_start(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="uamp_stores")
    health = StoreHealth("the test loop")
    script: list[Exception | None] = [OUTAGE, OUTAGE, OUTAGE, None, OUTAGE, None]
    starts: list[float] = []

    async def run() -> None:
        starts.append(trio.current_time())
        step = script.pop(0)
        if step is not None:
            raise step
        health.ok()
        if script:
            raise OUTAGE  # reached the store, then lost it again

    await supervise(run, health)
    assert [round(b - a, 3) for a, b in itertools.pairwise(starts)] == [
        0.1, 0.2, 0.4, 0.1, 0.2,
    ]  # fmt: skip
    assert len(_lines(caplog, logging.WARNING)) == 2
    assert len([m for m in _lines(caplog, logging.INFO) if "works again" in m]) == 2


async def test_writes_queued_while_redis_is_down_are_written_once_it_is_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Past the bound the oldest session's writes go (its log deleted later); the rest stay."""
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    store = RedisEventLog(url, prefix=f"t{uuid.uuid4().hex[:8]}")
    store.max_pending = 40
    old, new = (("user", "u"), "sess_old"), (("user", "u"), "sess_new")
    store.begin(old, SessionRecord(agent="a"))
    with pytest.raises(StoreUnavailable, match=rf"127\.0\.0\.1:{port}/0"):
        await store.flush()  # nothing listens: kept
    assert store.health.down
    for i in range(30):
        store.append(old, b'{"n": %d}' % i, f"old-{i}")
    store.begin(new, SessionRecord(agent="a"))
    for i in range(20):
        store.append(new, b'{"n": %d}' % i, f"new-{i}")
    # Past 40 writes the oldest session's 31 are dropped, and said so.
    assert any("sess_old lost 31 queued writes" in m for m in _lines(caplog, logging.WARNING))
    store.append(old, b"{}", "old-late")  # its log has a gap now: not queued any more
    server = start_redis(tmp_path, port)
    try:
        # A key of the old session that an earlier process wrote is deleted too.
        client = redis.Redis.from_url(url)
        client.set(store._rec(old), b"stale")
        await store.flush()
        assert not store.pending
        assert client.exists(store._rec(old), store._log(old)) == 0
        assert [e.event_id for e in await store.read(new, 0)] == [f"new-{i}" for i in range(20)]
        # Sent again (a write that broke after Redis applied it): nothing twice, no error.
        store._pending = [("event", new, e, 0.0) for e in await store.read(new, 0)]
        await store.flush()
        assert len(await store.read(new, 0)) == 20
        client.close()
    finally:
        stop_redis(server)
        await store.aclose()
