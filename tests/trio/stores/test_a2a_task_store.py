"""The bounded in-memory A2A task store of the server."""

from __future__ import annotations

import pytest

from uamp_proto.adapters import a2a
from uamp_proto.adapters.a2a import Trigger
from uamp_proto.principal import ANONYMOUS
from uamp_trio.stores.a2a_tasks import TaskStore


def test_store_evicts_finished_tasks_and_refuses_when_all_run() -> None:
    store = TaskStore(max_tasks=2)
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
