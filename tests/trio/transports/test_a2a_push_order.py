"""A2A push deliveries reach each webhook in the order the task's updates came.

A turn that runs inline may announce several updates (``working``, an
artifact, ``completed``) within one scheduler step. trio starts the tasks
spawned in one step in a random order, so one delivery task per update
(each taking a per-webhook lock) could post ``completed`` before
``working``; the sender keeps one queue per webhook instead.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import trio

from uamp_proto import types as ty
from uamp_proto.adapters import a2a
from uamp_proto.adapters.a2a import A2ATask, TaskState, Update
from uamp_stores.a2a_push import PushSender


def _task(*hooks: str) -> A2ATask:
    task = A2ATask(id="task-1", context_id="ctx-1", agent="a")
    for hook in hooks:
        task.push_configs[hook] = {"id": hook, "url": f"https://push.example/{hook}"}
    return task


def _status(state: TaskState, final: bool = False) -> Update:
    return Update(kind="status", task_id="task-1", context_id="ctx-1", state=state, final=final)


class _Recorder:
    """Stands in for ``PushSender._post``: records (hook, state); the first post is slow."""

    def __init__(self) -> None:
        self.posted: list[tuple[str, str]] = []

    async def post(self, config: dict[str, Any], payload: bytes) -> None:
        if not self.posted:
            await trio.sleep(0.01)  # a slow first delivery: the others queue behind it
        await trio.sleep(0)
        state = orjson.loads(payload)["statusUpdate"]["status"]["state"]
        self.posted.append((config["id"], state))


STATES = [TaskState.WORKING, TaskState.WORKING, TaskState.INPUT_REQUIRED, TaskState.COMPLETED]


@pytest.mark.parametrize("seed", range(8))
async def test_updates_told_in_one_step_are_posted_in_order(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = _Recorder()
    sender = PushSender()
    monkeypatch.setattr(sender, "_post", recorder.post)
    task = _task("hook-a", "hook-b")
    sent = [_status(state, final=state is TaskState.COMPLETED) for state in STATES]
    async with trio.open_nursery() as nursery:
        for update in sent:  # no checkpoint in between, as an inline turn does
            sender.notify(nursery, task, update)
    expected = [
        a2a.render_update(u, a2a.Dialect.V1)["statusUpdate"]["status"]["state"] for u in sent
    ]
    for hook in ("hook-a", "hook-b"):
        assert [s for h, s in recorder.posted if h == hook] == expected
    assert sender._queues == {}  # nothing kept once delivered


async def test_an_update_told_while_its_webhook_is_posting_goes_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    recorder = _Recorder()
    sender = PushSender()
    monkeypatch.setattr(sender, "_post", recorder.post)
    task = _task("hook-a")
    async with trio.open_nursery() as nursery:
        sender.notify(nursery, task, _status(TaskState.WORKING))
        await trio.sleep(0.001)  # the first post is under way
        sender.notify(nursery, task, _status(TaskState.COMPLETED, final=True))
        sender.notify(nursery, _task(), _status(TaskState.FAILED))  # no webhook: nothing
    assert recorder.posted == [
        ("hook-a", "TASK_STATE_WORKING"),
        ("hook-a", "TASK_STATE_COMPLETED"),
    ]
    assert sender._queues == {}


def _chunk(n: int) -> Update:
    text = ty.TextContent(text=f"chunk {n}")
    artifact = a2a.Artifact(artifact_id="answer", name="answer", items=[text])
    return Update(
        kind="artifact", task_id="task-1", context_id="ctx-1", artifact=artifact, append=n > 0
    )


async def test_a_webhook_that_never_answers_holds_a_bounded_queue_and_gets_the_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The abuse: a task streams 2,000 updates to a webhook that holds its first POST.

    Before the bound every update waited in memory for the webhook; now at
    most ``max_queued`` do, the artifact chunks give way, and every status
    update (the task's end included) is still posted, in order.
    """
    released = trio.Event()
    posted: list[dict[str, Any]] = []

    async def held_post(config: dict[str, Any], payload: bytes) -> None:
        if not posted:
            posted.append(orjson.loads(payload))
            await released.wait()  # the receiver sits on its first request
            return
        posted.append(orjson.loads(payload))

    sender = PushSender(max_queued=16)
    monkeypatch.setattr(sender, "_post", held_post)
    task = _task("hook-a")
    longest = 0
    async with trio.open_nursery() as nursery:
        sender.notify(nursery, task, _status(TaskState.WORKING))
        await trio.sleep(0.001)  # the first post is held
        for n in range(2000):
            sender.notify(nursery, task, _chunk(n))
            if n == 1000:
                sender.notify(nursery, task, _status(TaskState.INPUT_REQUIRED))
            longest = max(longest, len(sender._queues[("task-1", "hook-a")]))
        sender.notify(nursery, task, _status(TaskState.COMPLETED, final=True))
        released.set()
    states = [p["statusUpdate"]["status"]["state"] for p in posted if "statusUpdate" in p]
    assert longest == 16
    assert states == ["TASK_STATE_WORKING", "TASK_STATE_INPUT_REQUIRED", "TASK_STATE_COMPLETED"]
    assert len(posted) == 1 + 16
    assert sender.counts["dropped"] == 2000 + 2 - 16  # what came while the queue was full
    # The chunks that stayed are the newest, in order.
    chunks = [
        p["artifactUpdate"]["artifact"]["parts"][0]["text"]
        for p in posted[1:-1]
        if "artifactUpdate" in p
    ]
    numbers = [int(c.split()[1]) for c in chunks]
    assert numbers == list(range(2000 - len(numbers), 2000))
    assert sender._queues == {}
