"""batched_writer: what a streaming body queues while a write is in flight leaves as one write."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from uamp_trio.engines.http import SendChunk, SerialBodyWriter, batched_writer

TIMEOUT = 10


class Recorder:
    """A ``write`` that records its calls; optionally blocks or fails."""

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[bytes, bool]] = []
        self.fail = fail
        self.gate: trio.Event | None = None

    async def __call__(self, data: bytes, final: bool) -> None:
        self.calls.append((data, final))
        if self.fail:
            raise trio.BrokenResourceError("peer gone")
        if self.gate is not None:
            await self.gate.wait()
        await trio.lowlevel.checkpoint()


async def test_chunks_queued_before_the_producer_waits_leave_in_one_write() -> None:
    write = Recorder()
    with trio.fail_after(TIMEOUT):
        async with batched_writer(write) as send:
            for i in range(10):
                await send(b"%d," % i)
    assert write.calls == [(b"0,1,2,3,4,5,6,7,8,9,", True)]


async def test_head_may_leave_before_the_first_chunk_and_each_wait_flushes() -> None:
    write = Recorder()
    with trio.fail_after(TIMEOUT):
        async with batched_writer(write) as send:
            await trio.testing.wait_all_tasks_blocked()
            await send(b"a")
            await send(b"b")
            await trio.testing.wait_all_tasks_blocked()
            await send(b"c")
    assert write.calls == [(b"", False), (b"ab", False), (b"c", True)]


async def test_empty_body_still_ends_with_a_final_write() -> None:
    write = Recorder()
    with trio.fail_after(TIMEOUT):
        async with batched_writer(write) as send:
            await send(b"")
    assert write.calls == [(b"", True)]


async def test_a_producer_ahead_of_the_socket_waits_at_the_high_water_mark() -> None:
    write = Recorder()
    write.gate = trio.Event()
    sent = 0

    async def produce(send: SendChunk) -> None:
        nonlocal sent
        for _ in range(100):
            await send(b"x" * 10)
            sent += 1

    with trio.fail_after(TIMEOUT):
        async with batched_writer(write, high_water=50) as send, trio.open_nursery() as nursery:
            nursery.start_soon(produce, send)
            await trio.testing.wait_all_tasks_blocked()
            # The writer holds one batch; at most high_water + a chunk wait.
            assert 0 < sent < 100
            held = sum(len(d) for d, _ in write.calls)
            assert (sent * 10) - held <= 60
            write.gate.set()
    assert b"".join(d for d, _ in write.calls) == b"x" * 1000
    assert write.calls[-1][1] is True


async def test_a_failed_write_cancels_the_producer_and_is_raised() -> None:
    write = Recorder(fail=True)
    reached = False
    with trio.fail_after(TIMEOUT), pytest.raises(trio.BrokenResourceError):
        async with batched_writer(write) as send:
            await send(b"x")
            await trio.sleep_forever()
            reached = True
    assert not reached
    assert write.calls == [(b"x", False)]


async def test_the_bodys_own_exception_propagates_unwrapped_without_a_final_write() -> None:
    write = Recorder()
    with trio.fail_after(TIMEOUT), pytest.raises(ValueError, match="boom"):
        async with batched_writer(write) as send:
            await send(b"x")
            raise ValueError("boom")
    assert all(not final for _, final in write.calls)


async def test_send_after_a_failed_write_raises() -> None:
    write = Recorder(fail=True)
    with trio.fail_after(TIMEOUT), pytest.raises(trio.BrokenResourceError):
        async with batched_writer(write) as send:
            with trio.CancelScope(shield=True):  # not cancelled: send() itself reports
                await send(b"x")
                await trio.testing.wait_all_tasks_blocked()
                await send(b"y")


# --- SerialBodyWriter: one writer task for a connection's bodies, one at a time ---------


async def test_one_writer_task_serves_a_connections_bodies_in_turn() -> None:
    writes = [Recorder(), Recorder(), Recorder()]
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            bodies = SerialBodyWriter(nursery)
            async with bodies.body(writes[0]) as send:
                await send(b"a")
                await send(b"b")
            tasks = list(nursery.child_tasks)
            async with bodies.body(writes[1]) as send:
                await trio.testing.wait_all_tasks_blocked()  # head before the first chunk
                await send(b"c")
            async with bodies.body(writes[2]) as send:
                await send(b"")
            assert list(nursery.child_tasks) == tasks and len(tasks) == 1
            nursery.cancel_scope.cancel()
    assert writes[0].calls == [(b"ab", True)]
    assert writes[1].calls == [(b"", False), (b"c", True)]
    assert writes[2].calls == [(b"", True)]


async def test_a_failed_producer_writes_nothing_more_and_the_next_body_is_served() -> None:
    failed, after = Recorder(), Recorder()
    failed.gate = trio.Event()  # the first write is still in flight when the body fails
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            bodies = SerialBodyWriter(nursery)
            with pytest.raises(ValueError, match="boom"):
                async with bodies.body(failed) as send:
                    await send(b"x")
                    await trio.testing.wait_all_tasks_blocked()
                    await send(b"y")
                    raise ValueError("boom")
            failed.gate.set()
            await trio.testing.wait_all_tasks_blocked()
            async with bodies.body(after) as send:
                await send(b"z")
            nursery.cancel_scope.cancel()
    assert failed.calls == [(b"x", False)]  # "y" was queued, never written
    assert after.calls == [(b"z", True)]


async def test_a_failed_write_raises_its_error_and_cancels_the_connection() -> None:
    write = Recorder(fail=True)
    reached = False
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            bodies = SerialBodyWriter(nursery)
            with pytest.raises(trio.BrokenResourceError):
                async with bodies.body(write) as send:
                    await send(b"x")
                    await trio.sleep_forever()
                    reached = True
            assert nursery.cancel_scope.cancel_called
    assert not reached
    assert write.calls == [(b"x", False)]


async def test_a_second_body_while_one_is_open_is_refused() -> None:
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            bodies = SerialBodyWriter(nursery)
            async with bodies.body(Recorder()) as send:
                with pytest.raises(RuntimeError, match="still being written"):
                    async with bodies.body(Recorder()):
                        pass  # pragma: no cover - refused before
                await send(b"x")
            nursery.cancel_scope.cancel()


async def test_a_body_that_never_waited_fails_its_final_write_like_the_writer_would() -> None:
    write = Recorder(fail=True)
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            bodies = SerialBodyWriter(nursery)
            with pytest.raises(trio.BrokenResourceError):
                async with bodies.body(write) as send:
                    await send(b"x")  # never waits: the producer writes it itself
            assert nursery.cancel_scope.cancel_called
    assert write.calls == [(b"x", True)]


# --- a send from another task (the A2A turn writes into the request's stream) ------------


async def test_a_send_from_another_task_waiting_for_room_fails_when_the_body_is_abandoned() -> None:
    """It raises instead of waiting for good: nobody drains the body's queue any more."""
    write = Recorder()
    write.gate = trio.Event()  # the socket takes nothing more
    outcome: list[str] = []

    async def other(send: SendChunk, started: trio.Event) -> None:
        await send(b"x" * 10)
        await trio.testing.wait_all_tasks_blocked()  # the writer holds it: the socket is full
        started.set()
        try:
            await send(b"y" * 100)  # past the high-water mark: waits for room
        except trio.BrokenResourceError:
            outcome.append("raised")
        else:
            outcome.append("returned")  # pragma: no cover - the failure this test is about

    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as outside:
            bodies = SerialBodyWriter(outside)
            with trio.CancelScope() as scope:  # the request goes away
                async with bodies.body(write, high_water=50) as send:
                    started = trio.Event()
                    outside.start_soon(other, send, started)
                    await started.wait()
                    await trio.testing.wait_all_tasks_blocked()
                    assert outcome == []  # it waits for room
                    scope.cancel()
                    await trio.sleep_forever()
            await trio.testing.wait_all_tasks_blocked()
            assert outcome == ["raised"]
            outside.cancel_scope.cancel()


async def test_a_send_past_the_high_water_mark_after_the_body_ended_raises() -> None:
    write = Recorder()
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as outside:
            bodies = SerialBodyWriter(outside)
            async with bodies.body(write, high_water=50) as send:
                await send(b"x")
            with pytest.raises(trio.BrokenResourceError):
                await send(b"y" * 100)  # nobody would ever make room
            outside.cancel_scope.cancel()
    assert write.calls == [(b"x", True)]
