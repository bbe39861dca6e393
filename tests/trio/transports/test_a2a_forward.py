"""A stream's request writes the turn's updates in order, in batches, and stops at a pause.

``_forward`` takes every update that is ready in one go and hands the lot
to ``write_many`` (one write for the batch) or to ``write`` one by one; a
final ``input-required`` update ends the request's part, whatever follows.
"""

from __future__ import annotations

import contextlib

import pytest
import trio
import trio.testing

from uamp_proto.adapters.a2a import TaskState, Update
from uamp_trio.transports.a2a.service import _forward


def _update(i: int, state: TaskState | None = None, final: bool = False) -> Update:
    return Update(kind="status", task_id=f"t{i}", context_id="c", state=state, final=final)


PAUSE = TaskState.INPUT_REQUIRED
CASES = {
    "all ready, then the end": ([[0, 1, 2, 3]], None),
    "two batches": ([[0, 1], [2, 3, 4]], None),
    "a pause ends it": ([[0, 1, "pause", 3, 4]], 2),
    "a pause in the second batch": ([[0], [1, "pause"], [3]], 2),
    "a final completed update does not": ([[0, "done", 2]], None),
}


@pytest.mark.parametrize("batched", [True, False])
@pytest.mark.parametrize("name", list(CASES))
async def test_forward_writes_in_order_up_to_a_pause(name: str, batched: bool) -> None:
    batches, stop = CASES[name]
    send, receive = trio.open_memory_channel[Update](64)
    written: list[Update] = []
    calls: list[int] = []

    async def write(update: Update) -> None:
        written.append(update)

    async def write_many(updates: list[Update]) -> None:
        calls.append(len(updates))
        written.extend(updates)

    sent: list[Update] = []
    i = 0
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_forward, receive, write, write_many if batched else None)
        async with send:
            for batch in batches:
                for item in batch:
                    if item == "pause":
                        update = _update(i, PAUSE, final=True)
                    elif item == "done":
                        update = _update(i, TaskState.COMPLETED, final=True)
                    else:
                        update = _update(i)
                    i += 1
                    sent.append(update)
                    # (once the request paused, nobody reads: the send fails)
                    with contextlib.suppress(trio.BrokenResourceError):
                        send.send_nowait(update)
                await trio.testing.wait_all_tasks_blocked()
    assert written == (sent if stop is None else sent[: stop + 1])
    if batched:
        assert all(n > 1 for n in calls)  # a single update goes through write
