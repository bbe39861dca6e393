"""The outbox wakes as many waiting producers as there is room for, and none is stranded."""

from __future__ import annotations

import trio
import trio.testing

from tests._support.steps import TaskSteps
from uamp_trio.hosting.outbox import Outbox


async def test_many_waiting_producers_are_woken_only_for_the_room_there_is() -> None:
    producers, each, size = 50, 3, 4
    outbox = Outbox(size=size)
    got: list[bytes] = []
    steps = TaskSteps(lambda name: name.startswith("producer"))
    trio.lowlevel.add_instrument(steps)

    async def producer(i: int) -> None:
        for j in range(each):
            await outbox.put(f"{i}:{j}".encode())

    try:
        async with trio.open_nursery() as nursery:
            for i in range(producers):
                nursery.start_soon(producer, i, name=f"producer{i}")
            while len(got) < producers * each:
                got.extend(await outbox.take())
                await trio.sleep(0)  # the writer writes; producers refill
    finally:
        trio.lowlevel.remove_instrument(steps)
    # Everything arrived, each producer's events in its order.
    assert len(got) == producers * each
    for i in range(producers):
        mine = [g for g in got if g.startswith(f"{i}:".encode())]
        assert mine == [f"{i}:{j}".encode() for j in range(each)]
    # Each put parks at most a few times: waking all 50 producers for every
    # 4 places took about 50 steps per 4 events (~1,900 here).
    assert steps.steps < 4 * producers * each


async def test_a_producer_cancelled_while_waiting_does_not_strand_the_others() -> None:
    outbox = Outbox(size=1)
    await outbox.put(b"first")
    done: list[str] = []
    leaving = trio.CancelScope()

    async def producer(name: str, scope: trio.CancelScope) -> None:
        with scope:
            await outbox.put(name.encode())
            done.append(name)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(producer, "a", leaving)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(producer, "b", trio.CancelScope())
        await trio.testing.wait_all_tasks_blocked()
        leaving.cancel()  # "a", first in line, leaves while parked
        await trio.testing.wait_all_tasks_blocked()
        assert await outbox.take() == [b"first"]
        with trio.fail_after(1):
            assert await outbox.take() == [b"b"]  # the freed place went to "b"
    assert done == ["b"]
