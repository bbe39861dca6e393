"""The hosting layer's busy-conversation gate (uamp_stores.busy) under trio."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from uamp_proto.busy import QUEUE_FULL, BusyError, BusyLimits, BusyPolicy
from uamp_proto.principal import Principal
from uamp_stores.busy import ConversationGate
from uamp_trio.hosting.host import Host
from uamp_trio.stores import Stores

P = Principal(id="p", scheme="test")
Q = Principal(id="q", scheme="test")


async def test_enqueued_turns_run_one_after_another_in_order() -> None:
    gate = ConversationGate()
    order: list[str] = []

    async def turn(name: str, hold: float) -> None:
        async with gate.turn("c", P) as slot:
            order.append(f"start {name}")
            await trio.sleep(hold)
            order.append(f"end {name}")
            assert slot.waited is (name != "a")

    async with trio.open_nursery() as nursery:
        for name in "abc":
            nursery.start_soon(turn, name, 0.1)
            await trio.testing.wait_all_tasks_blocked()
    assert order == ["start a", "end a", "start b", "end b", "start c", "end c"]
    assert not gate.busy("c") and len(gate.lanes) == 0


@pytest.mark.parametrize(("policy", "dropped"), [("interrupt", False), ("rollback", True)])
async def test_a_cut_in_cancels_the_running_turn(policy: str, dropped: bool) -> None:
    gate = ConversationGate()
    seen: list[tuple[str, bool, bool]] = []

    async def first() -> None:
        async with gate.turn("c", P) as slot:
            with trio.CancelScope() as scope:
                slot.bind(scope.cancel)
                await trio.sleep_forever()
            seen.append(("first", slot.interrupted, slot.dropped))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(first)
        await trio.testing.wait_all_tasks_blocked()
        async with gate.turn("c", P, BusyPolicy(policy)) as slot:
            seen.append(("second", slot.interrupted, slot.waited))
    assert seen == [("first", True, dropped), ("second", False, True)]


async def test_bind_after_the_stop_cancels_at_once() -> None:
    gate = ConversationGate()
    held = gate.enter("c", P)
    await held.__aenter__()
    cut_in = gate.enter("c", P, BusyPolicy.INTERRUPT)  # the run has no cancel yet
    cancelled: list[bool] = []
    held.bind(lambda: cancelled.append(True))
    assert cancelled == [True]
    await held.__aexit__(None, None, None)
    async with cut_in:
        assert gate.lanes.running("c") == cut_in.ticket


async def test_a_caller_that_goes_away_while_waiting_leaves_the_queue() -> None:
    gate = ConversationGate(BusyLimits(per_conversation=1, per_principal=5))
    async with gate.turn("c", P):
        with trio.move_on_after(0.05):
            async with gate.turn("c", P):
                raise AssertionError("it never runs")  # pragma: no cover
        assert gate.lanes.waiting("c") == [] and gate.lanes.queued_by(P.key) == 0
        # Its place is free again for another message.
        waiting = gate.enter("c", Q)
        assert gate.lanes.waiting("c") == [waiting.ticket]
        with pytest.raises(BusyError) as full:
            gate.enter("c", P)
        assert full.value.code == QUEUE_FULL
        waiting.close()
        waiting.close()  # twice is nothing
    assert len(gate.lanes) == 0


async def test_reject_raises_before_anything_is_held() -> None:
    gate = ConversationGate(default=BusyPolicy.REJECT)
    async with gate.turn("c", P):
        with pytest.raises(BusyError):
            gate.enter("c", Q)
        async with gate.turn("other", Q):  # another conversation is not busy
            pass


def test_the_host_gate_follows_the_server_config() -> None:
    from uamp_trio.engines.server import ServerConfig

    host = Host(stores=Stores())
    assert host.conversations.default is BusyPolicy.ENQUEUE
    host.server_config = ServerConfig(
        on_busy="rollback", busy_max_queued=3, busy_max_queued_per_principal=4
    )
    gate = host.conversations
    assert gate.default is BusyPolicy.ROLLBACK
    assert gate.lanes.limits == BusyLimits(per_conversation=3, per_principal=4)
    with pytest.raises(ValueError, match="on_busy"):
        ServerConfig(on_busy="sometimes")


async def test_a_free_slot_is_never_held_back() -> None:
    gate = ConversationGate(default=BusyPolicy.REJECT)
    async with gate.turn("c", P):
        async with gate.free() as slot:  # an answer to a paused run, not a new turn
            assert not slot.waited and not slot.interrupted
        assert gate.lanes.running("c") is not None and gate.lanes.waiting("c") == []
