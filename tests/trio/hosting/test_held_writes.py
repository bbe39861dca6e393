"""Held writes: a task run by ``write_at_yields`` has its events written each time it yields."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from uamp_trio.hosting.outbox import Outbox, write_at_yields


class Recorder:
    """A DirectWriter that holds while ``open`` and records each flush's events."""

    def __init__(self) -> None:
        self.open = True
        self.framed: list[bytes] = []
        self.flushes: list[list[bytes]] = []

    def hold(self, data: bytes) -> bool:
        if not self.open:
            return False
        self.framed.append(data)
        return True

    def flush(self) -> None:
        self.flushes.append(self.framed)
        self.framed = []


def outbox_with(writer: Recorder) -> Outbox:
    outbox = Outbox(size=8)
    outbox.direct = writer
    return outbox


async def test_each_step_is_written_once_when_it_yields_and_the_result_comes_back() -> None:
    writer = Recorder()
    outbox = outbox_with(writer)
    seen_between: list[list[list[bytes]]] = []

    async def producer() -> int:
        await outbox.put(b"a")
        await outbox.put(b"b")
        await trio.sleep(0)
        seen_between.append(list(writer.flushes))
        await outbox.put(b"c")
        return 42

    assert await write_at_yields(producer(), outbox) == 42
    # put() has a cancel point that does not yield; a, b went out at the sleep.
    assert seen_between == [[[b"a", b"b"]]]
    assert writer.flushes == [[b"a", b"b"], [b"c"]]
    assert len(outbox) == 0  # nothing was queued for the writer
    assert not outbox.holding


async def test_outside_a_holding_task_events_are_queued() -> None:
    writer = Recorder()
    outbox = outbox_with(writer)
    await outbox.put(b"x")
    assert writer.framed == [] and writer.flushes == []
    assert await outbox.take() == [b"x"]


async def test_with_something_queued_later_events_queue_behind_it() -> None:
    writer = Recorder()
    outbox = outbox_with(writer)
    outbox.put_owed(b"owed")

    async def producer() -> None:
        await outbox.put(b"after")

    await write_at_yields(producer(), outbox)
    assert writer.flushes == []
    assert await outbox.take() == [b"owed", b"after"]


async def test_a_refused_hold_queues_and_keeps_order_with_what_was_held() -> None:
    writer = Recorder()
    outbox = outbox_with(writer)

    async def producer() -> None:
        await outbox.put(b"held")
        writer.open = False  # e.g. the store began a flush
        await outbox.put(b"queued")
        writer.open = True
        await outbox.put(b"queued too")  # something is queued: no hold

    await write_at_yields(producer(), outbox)
    assert writer.flushes == [[b"held"]]
    assert await outbox.take() == [b"queued", b"queued too"]


async def test_a_cancellation_reaches_the_task_and_what_it_held_is_written() -> None:
    writer = Recorder()
    outbox = outbox_with(writer)
    reached: list[str] = []

    async def producer() -> None:
        await outbox.put(b"before")
        try:
            await trio.sleep_forever()
        finally:
            reached.append("finally")

    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:

            async def run() -> None:
                await write_at_yields(producer(), outbox)

            nursery.start_soon(run)
            await trio.testing.wait_all_tasks_blocked()
            assert writer.flushes == [[b"before"]]
            scope.cancel()
    assert scope.cancelled_caught
    assert reached == ["finally"]
    assert not outbox.holding


async def test_an_exception_of_the_task_propagates_after_its_events_are_written() -> None:
    writer = Recorder()
    outbox = outbox_with(writer)

    async def producer() -> None:
        await outbox.put(b"e")
        raise ValueError("agent bug")

    with pytest.raises(ValueError, match="agent bug"):
        await write_at_yields(producer(), outbox)
    assert writer.flushes == [[b"e"]]
    assert not outbox.holding


async def test_a_follower_wakes_when_a_holding_step_ends() -> None:
    # Outbox.follow: the reader waits there for a worker's step to end
    # (release), a step that blocks included; a step's end clears the mark.
    writer = Recorder()
    outbox = outbox_with(writer)
    seen: list[str] = []
    gate = trio.Event()

    async def worker() -> None:
        await outbox.put(b"first")
        seen.append("worker step")
        await gate.wait()  # blocks: its step ends here
        seen.append("worker again")

    async def reader() -> None:
        await outbox.follow()
        seen.append("reader back")
        assert writer.flushes == [[b"first"]]  # written before the reader ran
        gate.set()

    async with trio.open_nursery() as nursery:
        outbox.woken = True
        nursery.start_soon(reader)
        await trio.testing.wait_all_tasks_blocked()
        assert not outbox.woken and seen == []

        async def holding() -> None:
            await write_at_yields(worker(), outbox)

        nursery.start_soon(holding)
    assert seen == ["worker step", "reader back", "worker again"]

    outbox.woken = True
    await write_at_yields(trio.sleep(0), outbox)
    assert not outbox.woken  # a step ended: nothing is left to follow


async def test_a_follower_is_cancellable() -> None:
    outbox = Outbox(size=8)
    with trio.move_on_after(0.01) as scope:
        await outbox.follow()
    assert scope.cancelled_caught
    await write_at_yields(trio.sleep(0), outbox)  # a later step end wakes nobody
