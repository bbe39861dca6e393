"""The A2A task stores: in memory, and in a real Redis checked against the memory one as a model."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from tests.proto.test_adapter_a2a_more_text import _EVENTS as STREAMED
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.adapters import a2a
from uamp_proto.adapters.a2a import TaskState, Trigger
from uamp_proto.adapters.a2a_records import task_to_json
from uamp_proto.principal import ANONYMOUS, Principal
from uamp_stores.a2a_tasks import QUOTA_EXCEEDED, TaskStore
from uamp_stores.a2a_tasks_redis import RedisTaskStore
from uamp_trio.stores import MemoryTaskStore, open_task_store

ALICE, BOB = Principal(id="alice", scheme="api_key"), Principal(id="bob", scheme="api_key")

Make = Callable[..., TaskStore]


@pytest.fixture(params=["memory", "redis"])
def make_store(request: pytest.FixtureRequest) -> Iterator[Make]:
    """Makes empty stores of the parametrised kind (each Redis one under its own prefix)."""
    url = request.getfixturevalue("redis_url") if request.param == "redis" else ""

    def make(max_tasks: int = 1000, max_per_principal: int | None = None) -> TaskStore:
        if request.param == "memory":
            return MemoryTaskStore(max_tasks, max_per_principal)
        return RedisTaskStore(url, max_tasks, max_per_principal, prefix=uuid.uuid4().hex)

    yield make


async def _finish(store: TaskStore, task: a2a.A2ATask) -> None:
    task.move(Trigger.FAIL)
    await store.save(task)


async def test_store_evicts_finished_tasks_and_refuses_when_all_run(make_store: Make) -> None:
    store = make_store(max_tasks=2, max_per_principal=3)  # the global bound governs
    first, second = (
        a2a.A2ATask(id="1", context_id="c", agent="a"),
        a2a.A2ATask(id="2", context_id="c", agent="a"),
    )
    await store.add(first, owner=ANONYMOUS)
    await store.add(second, owner=ANONYMOUS)
    with pytest.raises(a2a.A2AError) as full:
        await store.add(a2a.A2ATask(id="3", context_id="c", agent="a"), owner=ANONYMOUS)
    assert full.value.http_status == 503
    await _finish(store, first)
    await store.add(a2a.A2ATask(id="3", context_id="d", agent="a"), owner=ANONYMOUS)
    assert [t.id for t in await store.owned_by(ANONYMOUS)] == ["2", "3"]
    with pytest.raises(a2a.A2AError) as gone:
        await store.get("1", owner=ANONYMOUS)
    assert gone.value.code == a2a.TASK_NOT_FOUND
    latest = await store.latest_in_context("c", owner=ANONYMOUS)
    assert latest is not None and latest.id == "2"
    with pytest.raises(ValueError):
        await store.add(a2a.A2ATask(id="3", context_id="c", agent="a"), owner=ANONYMOUS)


async def test_a_principal_at_its_quota_is_refused_while_others_still_add(
    make_store: Make,
) -> None:
    store = make_store(max_tasks=10, max_per_principal=2)
    assert make_store(max_tasks=1000).max_per_principal == 100  # the default: a tenth
    mine = [a2a.A2ATask(id=f"a{i}", context_id="c", agent="a") for i in range(2)]
    for task in mine:
        await store.add(task, owner=ALICE)
    with pytest.raises(a2a.A2AError) as over:
        await store.check_quota(ALICE)
    assert over.value.code == QUOTA_EXCEEDED and over.value.http_status == 429
    assert over.value.data == {"status": 429, "code": "quota_exceeded", "limit": 2}
    with pytest.raises(a2a.A2AError):
        await store.add(a2a.A2ATask(id="a2", context_id="c", agent="a"), owner=ALICE)
    await store.add(a2a.A2ATask(id="b0", context_id="c", agent="a"), owner=BOB)  # bob goes on
    # A finished task of alice's own makes room for her next one (hers, not bob's, goes).
    await _finish(store, mine[0])
    await store.check_quota(ALICE)
    await store.add(a2a.A2ATask(id="a2", context_id="c", agent="a"), owner=ALICE)
    assert [t.id for t in await store.owned_by(ALICE)] == ["a1", "a2"]
    assert [t.id for t in await store.owned_by(BOB)] == ["b0"]


async def test_another_principals_task_answers_like_an_unknown_one(make_store: Make) -> None:
    store = make_store()
    await store.add(a2a.A2ATask(id="t", context_id="c", agent="a"), owner=ALICE)
    answers = []
    for task_id, who in (("t", BOB), ("nope", BOB)):
        with pytest.raises(a2a.A2AError) as refused:
            await store.get(task_id, owner=who)
        answers.append((refused.value.code, refused.value.http_status))
    assert answers == [(a2a.TASK_NOT_FOUND, 404)] * 2
    assert await store.owned_by(BOB) == []
    assert await store.latest_in_context("c", owner=BOB) is None
    with pytest.raises(a2a.A2AError):
        await store.follow("t", owner=BOB)


def _update(task: a2a.A2ATask, text: str, *, final: bool = False) -> a2a.Update:
    return a2a.Update(
        kind="status",
        task_id=task.id,
        context_id=task.context_id,
        state=task.state,
        message=a2a.StoredMessage(message_id=text, role="agent", items=[ty.TextContent(text=text)]),
        final=final,
    )


async def test_a_feed_gets_the_updates_after_its_snapshot_once_then_ends(make_store: Make) -> None:
    store = make_store()
    store.ensure_running(None)
    task = a2a.A2ATask(id="t", context_id="c", agent="a")
    await store.add(task, owner=ALICE)
    task.move(Trigger.START)
    await store.publish(task, [_update(task, "before")])
    snapshot, feed = await store.follow("t", owner=ALICE)
    assert snapshot.state is TaskState.WORKING
    task.artifacts.append(a2a.Artifact(artifact_id="x", name="n"))
    await store.publish(task, [_update(task, "one"), _update(task, "two")])
    task.move(Trigger.COMPLETE)
    await store.publish(task, [_update(task, "done", final=True)])
    seen: list[str] = []
    with trio.fail_after(10):
        async for update in feed:  # ends with the task
            assert update.message is not None
            seen.append(update.message.message_id)
    assert seen == ["one", "two", "done"]
    stored = await store.get("t", owner=ALICE)
    assert stored.state is TaskState.COMPLETED and [a.artifact_id for a in stored.artifacts] == [
        "x"
    ]
    feed.close()


async def test_watching_answers_as_watched_before_during_and_after_a_feed(
    make_store: Make,
) -> None:
    """A running turn asks ``task_id in store.watching()`` on every chunk instead of ``watched``."""
    store = make_store()
    store.ensure_running(None)
    view = store.watching()  # taken once, as a turn does
    for task_id in ("t", "u"):
        await store.add(a2a.A2ATask(id=task_id, context_id="c", agent="a"), owner=ALICE)

    def agrees() -> list[bool]:
        seen = [task_id in view for task_id in ("t", "u", "nope")]
        assert seen == [store.watched(task_id) for task_id in ("t", "u", "nope")]
        return seen

    alone = agrees()
    _, feed = await store.follow("t", owner=ALICE)
    assert agrees()[0]
    feed.close()
    assert agrees() == alone
    _, feed = await store.follow("u", owner=ALICE)
    task = await store.get("u", owner=ALICE)
    task.move(Trigger.START)
    task.move(Trigger.COMPLETE)
    await store.publish(task, [_update(task, "done", final=True)])  # the feed ends with it
    assert agrees() == alone
    feed.close()
    assert alone == [store.shared] * 3


async def test_a_slow_feed_is_dropped_and_the_publisher_never_waits(make_store: Make) -> None:
    store = make_store()
    store.ensure_running(None)
    task = a2a.A2ATask(id="t", context_id="c", agent="a", state=TaskState.WORKING)
    await store.add(task, owner=ALICE)
    _, slow = await store.follow("t", owner=ALICE)
    _, fresh = await store.follow("t", owner=ALICE)
    got: list[str] = []
    with trio.fail_after(20):
        reading = aiter(fresh)
        for batch in range(10):  # 100 updates, more than a feed buffers; slow is never read
            await store.publish(task, [_update(task, f"{batch}.{n}") for n in range(10)])
            while len(got) < 10 * (batch + 1):
                update = await anext(reading)
                assert update.message is not None
                got.append(update.message.message_id)
        buffered = [u async for u in slow]  # what it held when it was dropped, then its end
    assert got == [f"{b}.{n}" for b in range(10) for n in range(10)]
    assert 0 < len(buffered) <= 64
    slow.close()
    fresh.close()


async def test_push_configs_set_elsewhere_survive_the_running_turns_writes(
    make_store: Make,
) -> None:
    store = make_store()
    running = a2a.A2ATask(id="t", context_id="c", agent="a")
    await store.add(running, owner=ALICE)
    other_view = await store.get("t", owner=ALICE)  # another request's copy
    other_view.push_configs["p1"] = {"id": "p1", "url": "https://example.com/hook"}
    await store.save_push_configs(other_view)
    running.move(Trigger.START)
    await store.publish(running, [])
    assert "p1" in running.push_configs
    assert (await store.get("t", owner=ALICE)).push_configs == {
        "p1": {"id": "p1", "url": "https://example.com/hook"}
    }


async def test_a_working_task_whose_runner_stops_beating_goes_to_exactly_one_survivor(
    redis_url: str,
) -> None:
    prefix = uuid.uuid4().hex
    runner, *survivors = (RedisTaskStore(redis_url, prefix=prefix) for _ in range(4))
    task = a2a.A2ATask(id="t", context_id="c", agent="a")
    await runner.add(task, owner=ALICE)
    assert [await s.take_over("t") for s in survivors] == [False] * 3  # nobody runs it yet
    task.move(Trigger.START)
    await runner.publish(task, [])  # working, and its runner beats
    assert [await s.take_over("t") for s in survivors] == [False] * 3  # the runner lives
    runner._redis.delete(f"{prefix}:a2a:node:{runner.node}")  # its process died
    taken = [await s.take_over("t") for s in survivors]
    assert taken == [True, False, False]  # one survivor holds it now, and it lives
    task.move(Trigger.FAIL)
    await survivors[0].publish(task, [])  # ended: nobody runs it
    runner._redis.delete(f"{prefix}:a2a:node:{survivors[0].node}")
    assert [await s.take_over("t") for s in survivors] == [False] * 3
    assert not await MemoryTaskStore().take_over("t")


def test_open_task_store_picks_the_store(redis_url: str) -> None:
    assert isinstance(open_task_store("memory"), MemoryTaskStore)
    assert isinstance(open_task_store("sqlite:/tmp/x.db"), MemoryTaskStore)
    chosen = open_task_store(redis_url, 7, 3)
    assert isinstance(chosen, RedisTaskStore)
    assert (chosen.max_tasks, chosen.max_per_principal) == (7, 3)


# --- the Redis store against the memory one, as a model -----------------------------------

PEOPLE = [Principal(id=f"p{i}", scheme="api_key") for i in range(2)]
CONTEXTS = ["c0", "c1"]
TEXTS = st.text(max_size=12)


async def _outcome(call: Awaitable[Any]) -> Any:
    """What a store call answered: its value, or the error's code."""
    try:
        return await call
    except a2a.A2AError as exc:
        return ("error", exc.code, exc.http_status)
    except ValueError:
        return ("error", "duplicate")


def _shape(found: Any) -> Any:
    if isinstance(found, a2a.A2ATask):
        return task_to_json(found)
    if isinstance(found, list):
        return [_shape(f) for f in found]
    return found


class RedisMatchesMemory(RuleBasedStateMachine):
    """Every answer of :class:`RedisTaskStore` equals :class:`MemoryTaskStore` 's."""

    url = ""

    def __init__(self) -> None:
        super().__init__()
        # Small bounds, so that quotas and evictions come often.
        self.model = MemoryTaskStore(max_tasks=3, max_per_principal=2)
        self.real = RedisTaskStore(self.url, 3, 2, prefix=uuid.uuid4().hex)
        self.ids: list[tuple[str, int]] = []  # every id ever added, with its owner's index

    def teardown(self) -> None:
        trio.run(self.real.aclose)

    def _both(self, *calls: Callable[[TaskStore], Awaitable[Any]]) -> Any:
        """Run each call on both stores (one event loop for all); the model's last answer."""

        async def run() -> list[tuple[Any, Any]]:
            return [(await _outcome(c(self.model)), await _outcome(c(self.real))) for c in calls]

        answers = trio.run(run)
        for expected, actual in answers:
            assert _shape(actual) == _shape(expected)
        return answers[-1][0]

    @rule(
        who=st.integers(0, 1), context=st.sampled_from(CONTEXTS), text=TEXTS, finished=st.booleans()
    )
    def add(self, who: int, context: str, text: str, finished: bool) -> None:
        self._add(f"t{len(self.ids)}", who, context, text, finished)

    @rule(who=st.integers(0, 1))
    def add_again(self, who: int) -> None:
        if self.ids:
            self._add(self.ids[-1][0], who, CONTEXTS[0], "", False)

    def _add(self, task_id: str, who: int, context: str, text: str, finished: bool) -> None:
        def make() -> a2a.A2ATask:
            task = a2a.A2ATask(
                id=task_id,
                context_id=context,
                agent="a",
                history=[
                    a2a.StoredMessage(
                        message_id="m", role="user", items=[ty.TextContent(text=text)]
                    )
                ],
                conversation=[ty.Message(role="user", content=text)],
            )
            if finished:
                task.move(Trigger.REJECT)
            return task

        outcome = self._both(lambda store: store.add(make(), owner=PEOPLE[who]))
        if outcome is None:
            self.ids.append((task_id, who))

    @rule(pick=st.integers(0, 50), text=TEXTS)
    def work_on(self, pick: int, text: str) -> None:
        """A turn: a stored, unfinished task gets an artifact and finishes (both stores)."""
        if not self.ids:
            return
        task_id, who = self.ids[pick % len(self.ids)]

        async def step(store: TaskStore) -> None:
            task = await store.get(task_id, owner=PEOPLE[who])
            if task.state.is_terminal:
                return
            task.move(Trigger.START)
            task.artifacts.append(
                a2a.Artifact(artifact_id="x", name="answer", items=[ty.TextContent(text=text)])
            )
            task.move(Trigger.COMPLETE)
            await store.publish(task, [_update(task, text, final=True)])

        self._both(step)

    @rule(pick=st.integers(0, 50), url=st.sampled_from(["https://a.example/h", ""]))
    def set_push(self, pick: int, url: str) -> None:
        if not self.ids:
            return
        task_id, who = self.ids[pick % len(self.ids)]

        async def step(store: TaskStore) -> None:
            task = await store.get(task_id, owner=PEOPLE[who])
            if url:
                task.push_configs["p"] = {"id": "p", "url": url}
            else:
                task.push_configs.pop("p", None)
            await store.save_push_configs(task)

        self._both(step)

    @rule(pick=st.integers(0, 50))
    def discard(self, pick: int) -> None:
        if self.ids:
            task_id = self.ids[pick % len(self.ids)][0]
            self._both(lambda store: store.discard(task_id))

    @rule(who=st.integers(0, 1))
    def check_quota(self, who: int) -> None:
        self._both(lambda store: store.check_quota(PEOPLE[who]))

    @invariant()
    def every_lookup_agrees(self) -> None:
        calls: list[Callable[[TaskStore], Awaitable[Any]]] = []
        for task_id, _ in self.ids:
            for person in PEOPLE:  # the owner sees it; the other gets not-found
                calls.append(lambda store, i=task_id, p=person: store.get(i, owner=p))
        for person in PEOPLE:
            calls.append(lambda store, p=person: store.owned_by(p))
            for context in CONTEXTS:
                calls.append(lambda store, c=context, p=person: store.latest_in_context(c, owner=p))
        self._both(*calls)


def test_the_redis_store_answers_as_the_memory_model(redis_url: str) -> None:
    RedisMatchesMemory.url = redis_url
    run = RedisMatchesMemory.TestCase
    run.settings = settings(
        max_examples=15,
        stateful_step_count=25,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    run().runTest()


# --- a streamed turn's text chunks, appended instead of rewriting the task ---------------


def _turn_ids() -> Callable[[str], str]:
    count = iter(range(10**9))
    return lambda prefix: f"{prefix}-{next(count)}"


async def test_text_chunks_are_appended_and_read_back_as_the_task(redis_url: str) -> None:
    prefix = uuid.uuid4().hex
    writer = RedisTaskStore(redis_url, prefix=prefix)
    reader = RedisTaskStore(redis_url, prefix=prefix)
    task = a2a.A2ATask(id="t", context_id="c", agent="a")
    await writer.add(task, owner=ALICE)
    task.move(Trigger.START)
    run = a2a.TaskRun(task, _turn_ids())
    for n in range(30):
        event = ev.ResponseDelta(delta=ty.DeltaText(text=f"w{n} "), response_id="r")
        await writer.publish(task, run.feed(event))
    stored = writer._redis.hget(f"{prefix}:a2a:t:t", "d")
    assert writer._redis.llen(f"{prefix}:a2a:x:t") == 29  # the first chunk made the artifact
    assert b"w29" not in stored  # the task was not written again for them
    assert task_to_json(await reader.get("t", owner=ALICE)) == task_to_json(task)
    assert [task_to_json(t) for t in await reader.owned_by(ALICE)] == [task_to_json(task)]
    await writer.publish(task, run.cancel(None))  # a whole write: the chunks are folded in
    assert task.state is TaskState.CANCELED
    assert writer._redis.exists(f"{prefix}:a2a:x:t") == 0
    assert task_to_json(await reader.get("t", owner=ALICE)) == task_to_json(task)
    await writer.discard("t")
    assert writer._redis.exists(f"{prefix}:a2a:x:t", f"{prefix}:a2a:t:t") == 0
    await writer.aclose()
    await reader.aclose()


@given(events=STREAMED)
@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_whatever_a_turn_streams_another_process_reads_the_task_as_written(
    redis_url: str, events: list[ev.Event]
) -> None:
    """Text chunks appended, artifacts of the agent's under the text's id, the rest: a
    reader (another process) gets the writer's task after every publish."""

    async def run() -> None:
        prefix = uuid.uuid4().hex
        writer = RedisTaskStore(redis_url, prefix=prefix)
        reader = RedisTaskStore(redis_url, prefix=prefix)
        try:
            task = a2a.A2ATask(id="t", context_id="c", agent="a")
            await writer.add(task, owner=ALICE)
            task.move(Trigger.START)
            turn = a2a.TaskRun(task, _turn_ids())
            for event in events:
                await writer.publish(task, turn.feed(event))
                read = await reader.get("t", owner=ALICE)
                assert task_to_json(read) == task_to_json(task)
        finally:
            await writer.aclose()
            await reader.aclose()

    trio.run(run)
