"""The bounded in-memory A2A task store of the server."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from uamp_proto.adapters import a2a
from uamp_proto.adapters.a2a import Trigger
from uamp_proto.principal import ANONYMOUS, Principal
from uamp_trio.stores.a2a_tasks import QUOTA_EXCEEDED, TaskStore

ALICE, BOB = Principal(id="alice", scheme="api_key"), Principal(id="bob", scheme="api_key")


def test_store_evicts_finished_tasks_and_refuses_when_all_run() -> None:
    store = TaskStore(max_tasks=2, max_per_principal=3)  # the global bound governs
    first, second = (
        a2a.A2ATask(id="1", context_id="c", agent="a"),
        a2a.A2ATask(id="2", context_id="c", agent="a"),
    )
    store.add(first, owner=ANONYMOUS)
    store.add(second, owner=ANONYMOUS)
    with pytest.raises(a2a.A2AError) as full:
        store.add(a2a.A2ATask(id="3", context_id="c", agent="a"), owner=ANONYMOUS)
    assert full.value.http_status == 503
    first.move(Trigger.FAIL)
    store.add(a2a.A2ATask(id="3", context_id="d", agent="a"), owner=ANONYMOUS)
    assert [t.id for t in store] == ["2", "3"]
    with pytest.raises(a2a.A2AError) as gone:
        store.get("1", owner=ANONYMOUS)
    assert gone.value.code == a2a.TASK_NOT_FOUND
    latest = store.latest_in_context("c", owner=ANONYMOUS)
    assert latest is not None and latest.id == "2"
    with pytest.raises(ValueError):
        store.add(a2a.A2ATask(id="3", context_id="c", agent="a"), owner=ANONYMOUS)


def test_a_principal_at_its_quota_is_refused_while_others_still_add() -> None:
    store = TaskStore(max_tasks=10, max_per_principal=2)
    assert TaskStore(max_tasks=1000).max_per_principal == 100  # the default: a tenth
    mine = [a2a.A2ATask(id=f"a{i}", context_id="c", agent="a") for i in range(2)]
    for task in mine:
        store.add(task, owner=ALICE)
    with pytest.raises(a2a.A2AError) as over:
        store.check_quota(ALICE)
    assert over.value.code == QUOTA_EXCEEDED and over.value.http_status == 429
    assert over.value.data == {"status": 429, "code": "quota_exceeded", "limit": 2}
    with pytest.raises(a2a.A2AError):
        store.add(a2a.A2ATask(id="a2", context_id="c", agent="a"), owner=ALICE)
    store.add(a2a.A2ATask(id="b0", context_id="c", agent="a"), owner=BOB)  # bob is not held up
    # A finished task of alice's own makes room for her next one (hers, not bob's, goes).
    mine[0].move(Trigger.FAIL)
    store.check_quota(ALICE)
    store.add(a2a.A2ATask(id="a2", context_id="c", agent="a"), owner=ALICE)
    assert [t.id for t in store.owned_by(ALICE)] == ["a1", "a2"]
    assert [t.id for t in store.owned_by(BOB)] == ["b0"]


@given(
    st.lists(
        st.tuples(st.sampled_from(["add", "finish"]), st.integers(0, 2), st.integers(0, 30)),
        max_size=60,
    )
)
def test_store_model_bounds_hold_and_only_finished_tasks_are_evicted(
    ops: list[tuple[str, int, int]],
) -> None:
    """Against a model: totals and quotas bounded, refusals exactly when no room is left."""
    people = [Principal(id=f"p{i}", scheme="api_key") for i in range(3)]
    store = TaskStore(max_tasks=5, max_per_principal=3)
    alive: dict[str, tuple[int, a2a.A2ATask]] = {}  # id -> (owner, task) of every task added
    for n, (op, who, pick) in enumerate(ops):
        if op == "finish":
            running = [t for _, t in alive.values() if not t.state.is_terminal]
            if running:
                running[pick % len(running)].move(Trigger.FAIL)
            continue
        stored = {t.id for t in store}
        held = [i for i, (o, _) in alive.items() if o == who and i in stored]
        unfinished = {i for i in stored if not alive[i][1].state.is_terminal}
        task = a2a.A2ATask(id=f"t{n}", context_id="c", agent="a")
        quota_full = len(held) >= 3 and all(i in unfinished for i in held)
        store_full = len(unfinished) >= 5 and not (len(held) >= 3 and not quota_full)
        try:
            store.add(task, owner=people[who])
        except a2a.A2AError as exc:
            expected = QUOTA_EXCEEDED if quota_full else a2a.INTERNAL_ERROR
            assert quota_full or store_full
            assert exc.code == expected
            continue
        assert not quota_full
        alive[task.id] = (who, task)
        now = {t.id for t in store}
        assert len(now) <= 5
        assert unfinished <= now  # no running or paused task was evicted
        for i, person in enumerate(people):
            assert len(store.owned_by(person)) <= 3, i
