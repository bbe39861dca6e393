"""Every event log (memory, SQLite, Redis Streams) keeps the same promises.

One parametrised suite: a hypothesis model check of the store semantics
(positions, retention by count, reads, lookups by event id, windows), and
cases for tails that wait for later writes, expiry, ownership and restarts.
Redis is a real ``redis-server`` on 127.0.0.1 (tests/_support/redis_server.py).
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import orjson
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from uamp_proto.resume import LogWindow, ResumeError, Retention, start_after
from uamp_stores.event_log import EventLog, LogKey, SessionRecord
from uamp_stores.event_log_redis import RedisEventLog
from uamp_stores.event_log_sqlite import SqliteEventLog
from uamp_trio.stores import open_event_log

KINDS = ["memory", "sqlite", "redis"]
ALICE = ("api_key", "alice")
BOB = ("api_key", "bob")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def make_log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., EventLog]]:
    """Makes stores of the parametrised kind; same ``name``, same storage."""
    kind = request.param
    url = request.getfixturevalue("redis_url") if kind == "redis" else ""
    run = uuid.uuid4().hex[:8]
    made: list[EventLog] = []

    def make(
        retention: Retention | None = None, clock: Clock | None = None, name: str = "a"
    ) -> EventLog:
        clock = clock or Clock()
        log: EventLog
        if kind == "memory":
            from uamp_stores.event_log import MemoryEventLog

            log = MemoryEventLog(retention, clock=clock)
        elif kind == "sqlite":
            log = SqliteEventLog(tmp_path / f"{name}.db", retention, clock=clock)
        else:
            log = RedisEventLog(url, retention, prefix=f"t{run}{name}", clock=clock)
        made.append(log)
        return log

    yield make


def kinds() -> Any:
    return pytest.mark.parametrize("make_log", KINDS, indirect=True)


def key(sid: str, owner: tuple[str, str] = ALICE) -> LogKey:
    return (owner, sid)


def ev(n: int) -> bytes:
    return b'{"type":"response.delta","event_id":"evt.%d"}' % n


# --- the model check ------------------------------------------------------------

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("open"), st.sampled_from("xy")),
        st.tuples(st.just("append"), st.sampled_from("xy"), st.integers(1, 8)),
        st.tuples(st.just("flush")),
        st.tuples(st.just("read"), st.sampled_from("xy"), st.integers(0, 30)),
        st.tuples(st.just("find"), st.sampled_from("xy"), st.integers(0, 30)),
        st.tuples(st.just("window"), st.sampled_from("xy")),
    ),
    max_size=25,
)


@kinds()
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS, keep=st.integers(1, 12))
def test_store_semantics_match_the_model(
    make_log: Callable[..., EventLog], ops: list[tuple[Any, ...]], keep: int
) -> None:
    """After each flush the store answers exactly as a list-per-session model does."""
    counter = itertools.count(1)

    async def main() -> None:
        log = make_log(Retention(max_events=keep), name=f"m{uuid.uuid4().hex[:8]}")
        model: dict[str, list[tuple[int, str]]] = {}
        firsts: dict[str, int] = {}
        try:
            for op in ops:
                name = op[1] if len(op) > 1 else ""
                k = key(name)
                if op[0] == "open":
                    await log.open(k, SessionRecord(agent="demo"))
                    model[name], firsts[name] = [], 1
                elif op[0] == "append":
                    if name not in model:
                        with pytest.raises(KeyError):
                            log.append(k, ev(0), "evt.0")
                        continue
                    for _ in range(op[2]):
                        n = next(counter)
                        entry = log.append(k, ev(n), f"evt.{n}")
                        last = model[name][-1][0] if model[name] else firsts[name] - 1
                        assert entry.position == last + 1
                        model[name].append((entry.position, f"evt.{n}"))
                    kept = model[name][-keep:]
                    if len(kept) < len(model[name]):
                        firsts[name] = kept[0][0]
                    model[name] = kept
                elif op[0] == "flush":
                    await log.flush()
                else:
                    await log.flush()
                    held = model.get(name, [])
                    if op[0] == "read":
                        got = await log.read(k, op[2])
                        assert [(e.position, e.event_id) for e in got] == [
                            p for p in held if p[0] > op[2]
                        ]
                        assert all(e.data == ev(int(e.event_id[4:])) for e in got)
                    elif op[0] == "find":
                        ids = {i: p for p, i in held}
                        assert await log.find(k, f"evt.{op[2]}") == ids.get(f"evt.{op[2]}")
                    else:
                        window = await log.window(k)
                        if held:
                            assert window == LogWindow(held[0][0], held[-1][0])
                        else:
                            assert window.last == 0 or window.first == window.last + 1
        finally:
            await log.aclose()

    trio.run(main)


# --- tails, expiry, ownership, restarts --------------------------------------------


@kinds()
async def test_tail_yields_the_log_then_later_writes(make_log: Callable[..., EventLog]) -> None:
    log = make_log()
    k = key("s1")
    await log.open(k, SessionRecord(agent="demo"))
    for n in range(1, 6):
        log.append(k, ev(n), f"evt.{n}")
    await log.flush()
    got: list[int] = []

    async def reader() -> None:
        async for entries in log.tail(k, 2):
            got.extend(e.position for e in entries)
            if got[-1] == 9:
                return

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        await trio.sleep(0.05)
        for n in range(6, 10):
            log.append(k, ev(n), f"evt.{n}")
            await log.flush()
            await trio.sleep(0.01)
    assert got == [3, 4, 5, 6, 7, 8, 9]
    await log.aclose()


@kinds()
async def test_the_flusher_writes_what_append_queued(make_log: Callable[..., EventLog]) -> None:
    log = make_log()
    k = key("s1")
    await log.open(k, SessionRecord(agent="demo"))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(log.run)
        for n in range(1, 101):
            log.append(k, ev(n), f"evt.{n}")
        with trio.fail_after(5):
            while (await log.window(k)).last < 100:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert [e.position for e in await log.read(k, 95)] == [96, 97, 98, 99, 100]
    await log.aclose()


@kinds()
async def test_a_trimmed_log_says_beyond_retention(make_log: Callable[..., EventLog]) -> None:
    log = make_log(Retention(max_events=3))
    k = key("s1")
    await log.open(k, SessionRecord(agent="demo"))
    for n in range(1, 11):
        log.append(k, ev(n), f"evt.{n}")
    await log.flush()
    window = await log.window(k)
    assert window == LogWindow(8, 10)
    assert start_after(window, await log.find(k, "evt.9"), "evt.9") == 9
    with pytest.raises(ResumeError) as caught:
        start_after(window, await log.find(k, "evt.2"), "evt.2")
    assert caught.value.code == "beyond_retention"
    await log.aclose()


@kinds()
async def test_records_expire_then_are_forgotten(make_log: Callable[..., EventLog]) -> None:
    clock = Clock()
    log = make_log(Retention(max_age=60.0), clock)
    k = key("s1")
    await log.open(k, SessionRecord(agent="demo", history=[{"role": "user", "content": "hi"}]))
    clock.now += 30
    log.append(k, ev(1), "evt.1")
    await log.flush()
    clock.now += 59  # 59 s after the last activity
    record = await log.load(k)
    assert (record.agent, record.history) == ("demo", [{"role": "user", "content": "hi"}])
    clock.now += 2
    with pytest.raises(ResumeError) as caught:
        await log.load(k)
    assert caught.value.code == "session_expired"
    clock.now += 60
    with pytest.raises(ResumeError) as caught:
        await log.load(k)
    assert caught.value.code == "unknown_session"
    await log.aclose()


@kinds()
async def test_another_owner_finds_nothing(make_log: Callable[..., EventLog]) -> None:
    log = make_log()
    await log.open(key("s1"), SessionRecord(agent="demo"))
    log.append(key("s1"), ev(1), "evt.1")
    await log.flush()
    with pytest.raises(ResumeError) as theirs:
        await log.load(key("s1", BOB))
    with pytest.raises(ResumeError) as never:
        await log.load(key("s-never", BOB))
    assert (theirs.value.code, never.value.code) == ("unknown_session", "unknown_session")
    assert await log.read(key("s1", BOB), 0) == []
    assert await log.find(key("s1", BOB), "evt.1") is None
    await log.aclose()


@pytest.mark.parametrize("make_log", ["sqlite", "redis"], indirect=True)
async def test_a_new_store_on_the_same_storage_continues_the_log(
    make_log: Callable[..., EventLog],
) -> None:
    first = make_log(name="shared")
    k = key("s1")
    await first.open(k, SessionRecord(agent="demo", running="resp_1", node="n1"))
    for n in range(1, 4):
        first.append(k, ev(n), f"evt.{n}")
    await first.flush()
    await first.aclose()  # the process is gone
    second = make_log(name="shared")
    assert (await second.load(k)).running == "resp_1"
    assert await second.adopt(k) == 3
    assert second.append(k, ev(4), "evt.4").position == 4
    await second.flush()
    assert [e.position for e in await second.read(k, 0)] == [1, 2, 3, 4]
    await second.aclose()


def test_open_event_log_picks_the_store(tmp_path: Path, redis_url: str) -> None:
    from uamp_stores.event_log import MemoryEventLog

    assert isinstance(open_event_log("memory"), MemoryEventLog)
    assert isinstance(open_event_log(f"sqlite:{tmp_path / 'a.db'}"), SqliteEventLog)
    assert isinstance(open_event_log(str(tmp_path / "b.db")), SqliteEventLog)
    assert isinstance(open_event_log(redis_url), RedisEventLog)


async def test_the_memory_log_stays_under_its_byte_budget() -> None:
    from uamp_stores.event_log import MemoryEventLog

    clock = Clock()
    log = MemoryEventLog(max_bytes=2000, clock=clock)
    for sid in ("old", "new"):
        await log.open(key(sid), SessionRecord(agent="demo"))
    for n in range(1, 51):
        clock.now += 1
        log.append(key("old"), ev(n) + b" " * 60, f"evt.{n}")
    for n in range(51, 61):
        clock.now += 1
        log.append(key("new"), ev(n) + b" " * 60, f"evt.{n}")
    assert log.size <= 2000
    # The least recently active session lost its oldest events first.
    assert (await log.window(key("new"))) == LogWindow(1, 10)
    old = await log.window(key("old"))
    assert old.last == 50 and old.first > 1
    with pytest.raises(ResumeError) as caught:
        start_after(old, await log.find(key("old"), "evt.1"), "evt.1")
    assert caught.value.code == "beyond_retention"


def test_record_copy_is_a_shallow_copy_of_every_field() -> None:
    # Every field set away from its default: a field copy() forgot would differ.
    values = {
        "agent": "a",
        "config": {"modalities": ["text"]},
        "history": [{"role": "user", "content": "hi"}],
        "running": "resp_1",
        "input": [{"role": "user", "content": "hi"}],
        "node": "n1",
        "updated": 12.5,
        "ended": True,
        "request": "evt_1",
        "dropped": True,
    }
    assert set(values) == {f.name for f in attrs.fields(SessionRecord)}
    record = SessionRecord(**values)  # type: ignore[arg-type]
    copied = record.copy()
    assert copied is not record and copied == record == attrs.evolve(record)
    assert copied.history is record.history  # shallow, as attrs.evolve
    copied.running = None
    assert record.running == "resp_1"


# --- the memory log's per-principal cap ------------------------------------------

CAP_OPS = st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 5)), max_size=40)


@settings(max_examples=200, deadline=None)
@given(ops=CAP_OPS, cap=st.integers(1, 4), total=st.integers(1, 8))
def test_a_principal_at_its_cap_forgets_its_own_oldest_session_only(
    ops: list[tuple[str, int]], cap: int, total: int
) -> None:
    """Sessions kept match a model: per principal at most ``cap``, its own oldest going first;
    over all at most ``total``, the least recently active going first."""
    from uamp_stores.event_log import MemoryEventLog

    clock = Clock()
    log = MemoryEventLog(max_sessions=total, max_sessions_per_principal=cap, clock=clock)
    model: dict[LogKey, float] = {}

    def oldest(keys: list[LogKey]) -> LogKey:
        return min(keys, key=lambda k: model[k])

    async def held(k: LogKey) -> bool:
        try:
            await log.load(k)
        except ResumeError:
            return False
        return True

    async def main() -> None:
        for who, n in ops:
            clock.now += 1
            k = key(f"s{n}", ("api_key", who))
            model.pop(k, None)
            while len(own := [m for m in model if m[0] == k[0]]) >= cap:
                del model[oldest(own)]
            while len(model) >= total:
                del model[oldest(list(model))]
            model[k] = clock.now
            log.begin(k, SessionRecord(agent="demo"))
            everyone = [key(f"s{i}", ("api_key", p)) for p in "abc" for i in range(6)]
            assert {k for k in everyone if await held(k)} == set(model)
            assert len(log) == len(model)

    trio.run(main)


def test_the_per_principal_cap_is_checked() -> None:
    from uamp_stores.event_log import MemoryEventLog

    with pytest.raises(ValueError):
        MemoryEventLog(max_sessions_per_principal=0)


# --- the memory log's budget over its records' conversations -----------------------

#: ``(principal, session, weight of its conversation or 0, ended)``
RECORD_OPS = st.lists(
    st.tuples(st.sampled_from("ab"), st.integers(0, 4), st.integers(0, 120), st.booleans()),
    max_size=40,
)


def _conversation(size: int) -> list[dict[str, Any]]:
    """A conversation of one message that weighs ``size`` + 15 (``history.weight``)."""
    return [{"role": "user", "content": "x" * size}] if size else []


@settings(max_examples=300, deadline=None)
@given(ops=RECORD_OPS, cap=st.integers(1, 300), total=st.integers(1, 500))
def test_records_keep_their_conversations_within_the_budgets(
    ops: list[tuple[str, int, int, bool]], cap: int, total: int
) -> None:
    """What records keep matches a model: per principal at most ``cap``, its own least
    recently grown losing theirs first; over all at most ``total``; ended ones keep none."""
    from uamp_stores.event_log import MemoryEventLog
    from uamp_stores.session_record import history_weight

    log = MemoryEventLog(max_record_bytes_per_principal=cap, max_record_bytes=total)
    kept: dict[LogKey, int] = {}  # records with a conversation, least recently grown first
    dropped: set[LogKey] = set()
    for who, n, size, ended in ops:
        k = key(f"s{n}", ("api_key", who))
        record = SessionRecord(agent="demo", history=_conversation(size), ended=ended)
        weight = history_weight(record.history)
        log.put_record(k, record)
        if not ended and weight and kept.get(k) == weight:
            pass  # the weight it is counted at again (a response's opening record): no change
        else:
            kept.pop(k, None)
            dropped.discard(k)
        if ended or not weight or kept.get(k) == weight:
            pass
        elif weight > min(cap, total):
            dropped.add(k)
        else:
            kept[k] = weight
            for bound, owner in ((cap, k[0]), (total, None)):
                while sum(w for m, w in kept.items() if owner in (None, m[0])) > bound:
                    oldest = next(m for m in kept if owner in (None, m[0]) and m != k)
                    del kept[oldest]
                    dropped.add(oldest)
        for m, memory in log._logs.items():
            assert history_weight(memory.record.history) == kept.get(m, 0)
            assert memory.record.dropped == (m in dropped)
        for owner in {m[0] for m in log._logs}:
            mine = sum(w for m, w in kept.items() if m[0] == owner)
            assert log.record_bytes.total(owner) == mine <= cap
        assert log.all_record_bytes.total(None) == sum(kept.values()) <= total


async def test_a_dropped_conversation_is_refused_to_a_resume_only() -> None:
    from uamp_stores.event_log import MemoryEventLog

    log = MemoryEventLog(max_record_bytes_per_principal=100)
    old, new = key("s1", ALICE), key("s2", ALICE)
    log.put_record(old, SessionRecord(agent="demo", history=_conversation(60)))
    log.put_record(new, SessionRecord(agent="demo", history=_conversation(60)))
    record = await log.load(old)  # cancels and other lookups still find the record
    assert record.dropped and record.history == []
    with pytest.raises(ResumeError) as caught:
        await log.load(old, conversation=True)
    assert caught.value.code == "beyond_retention"
    assert (await log.load(new, conversation=True)).history == _conversation(60)
    # The session goes on and puts its whole conversation again: it is kept again.
    log.put_record(old, SessionRecord(agent="demo", history=_conversation(60)))
    assert (await log.load(old, conversation=True)).history == _conversation(60)
    assert (await log.load(new)).dropped


async def test_another_principals_dropped_record_answers_as_a_missing_one() -> None:
    """No oracle: bob asking for alice's dropped session hears what a missing id gets."""
    from uamp_stores.event_log import MemoryEventLog

    log = MemoryEventLog(max_record_bytes_per_principal=100)
    log.put_record(key("s1"), SessionRecord(agent="demo", history=_conversation(60)))
    log.put_record(key("s2"), SessionRecord(agent="demo", history=_conversation(60)))
    assert (await log.load(key("s1"))).dropped  # alice's: beyond_retention to her
    answers = []
    for sid in ("s1", "s9"):
        with pytest.raises(ResumeError) as caught:
            await log.load(key(sid, BOB), conversation=True)
        answers.append((caught.value.code, str(caught.value).replace(sid, "ID")))
    assert answers[0] == answers[1] and answers[0][0] == "unknown_session"


@kinds()
async def test_an_ended_record_keeps_no_conversation(make_log: Callable[..., EventLog]) -> None:
    log = make_log()
    k = key("s1")
    log.begin(k, SessionRecord(agent="demo"))
    await log.save(k, SessionRecord(agent="demo", history=_conversation(10), ended=True))
    record = await log._load(k)
    assert record is not None and record.ended and list(record.history) == []


def test_the_record_budgets_are_checked() -> None:
    from uamp_stores.event_log import MemoryEventLog

    with pytest.raises(ValueError):
        MemoryEventLog(max_record_bytes_per_principal=0)
    with pytest.raises(ValueError):
        MemoryEventLog(max_record_bytes=0)


def test_a_record_keeps_what_it_does_not_know_out() -> None:
    # A record written by a newer version (a field this one lacks), read in a rolling update.
    newer = orjson.loads(SessionRecord(agent="a", running="resp_1", request="evt_1").encode())
    decoded = SessionRecord.decode(orjson.dumps({**newer, "future_field": [1]}))
    assert decoded == SessionRecord(agent="a", running="resp_1", request="evt_1")


@kinds()
async def test_a_store_that_says_it_copies_records_keeps_what_was_put(
    make_log: Callable[..., EventLog],
) -> None:
    # A store with copies_records keeps the record as it was put, whatever its
    # writer does to its own afterwards (the UAMP session host then puts its
    # record without a copy of its own); the others are handed a copy.
    log = make_log()
    k = key("s1")
    await log.open(k, SessionRecord(agent="demo"))
    mine = SessionRecord(agent="demo", running="resp_1", history=[{"role": "user"}])
    log.put_record(k, mine if log.copies_records else mine.copy())
    mine.running, mine.history = None, []
    await log.flush()
    record = await log.load(k)
    assert (record.running, record.history) == ("resp_1", [{"role": "user"}])


async def test_the_memory_log_keeps_frames_at_their_own_size() -> None:
    # orjson.dumps (3.12 on) hands back bytes in a buffer of 4 or 16 KiB: kept as
    # they came, 1,000 deltas of 1 KiB held 16 MB where max_bytes counted 1.2 MB.
    import tracemalloc

    from uamp_stores.event_log import MemoryEventLog

    log = MemoryEventLog()
    k = key("s1")
    await log.open(k, SessionRecord(agent="demo"))
    delta = {"type": "response.delta", "delta": {"text": "x" * 1024}}
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(1000):  # as a session writes them: made, logged, let go
            log.append(k, orjson.dumps({**delta, "event_id": f"evt_{n}"}), f"evt_{n}")
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    size = 1000 * len(orjson.dumps({**delta, "event_id": "evt_999"}))
    assert abs(log.size - size) < 1000 * 4  # the ids' lengths differ
    assert held < 2 * size  # the frames, their entries and index; not 13 times the frames
