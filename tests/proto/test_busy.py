"""The busy-conversation state machine (uamp_proto.busy): every move of its table."""

from __future__ import annotations

import itertools
from types import MappingProxyType

import pytest
from hypothesis import given
from hypothesis import strategies as st

from uamp_proto.busy import (
    BUSY,
    INVALID_POLICY,
    MOVES,
    POLICY_KEY,
    QUEUE_FULL,
    BusyError,
    BusyLimits,
    BusyPolicy,
    Lanes,
    LaneState,
    Move,
    parse_policy,
    policy_of,
)

R, E, I, B = BusyPolicy.REJECT, BusyPolicy.ENQUEUE, BusyPolicy.INTERRUPT, BusyPolicy.ROLLBACK  # noqa: E741


def _lanes_in(state: LaneState) -> Lanes:
    """A conversation ``"c"`` in ``state`` (ticket 0 running unless idle)."""
    lanes = Lanes(BusyLimits(per_conversation=4, per_principal=4))
    if state is LaneState.IDLE:
        return lanes
    assert lanes.arrive("c", 0, "p", E).runs
    if state is LaneState.STOPPING:
        assert lanes.arrive("c", 1, "p", I).move is Move.CUT_IN
    assert lanes.state("c") is state
    return lanes


def test_the_table_covers_every_state_and_policy() -> None:
    assert set(MOVES) == set(itertools.product(LaneState, BusyPolicy))


# (state before, policy) -> (move, state after, running after, waiting after, stop, drop)
CASES = [
    (LaneState.IDLE, R, Move.RUN, LaneState.RUNNING, 9, [], None, False),
    (LaneState.IDLE, E, Move.RUN, LaneState.RUNNING, 9, [], None, False),
    (LaneState.IDLE, I, Move.RUN, LaneState.RUNNING, 9, [], None, False),
    (LaneState.IDLE, B, Move.RUN, LaneState.RUNNING, 9, [], None, False),
    (LaneState.RUNNING, R, Move.REFUSE, LaneState.RUNNING, 0, [], None, False),
    (LaneState.RUNNING, E, Move.QUEUE, LaneState.RUNNING, 0, [9], None, False),
    (LaneState.RUNNING, I, Move.CUT_IN, LaneState.STOPPING, 0, [9], 0, False),
    (LaneState.RUNNING, B, Move.CUT_IN, LaneState.STOPPING, 0, [9], 0, True),
    (LaneState.STOPPING, R, Move.REFUSE, LaneState.STOPPING, 0, [1], None, False),
    (LaneState.STOPPING, E, Move.QUEUE, LaneState.STOPPING, 0, [1, 9], None, False),
    # A second cut-in waits behind the first: messages that cut in keep their order.
    (LaneState.STOPPING, I, Move.CUT_IN, LaneState.STOPPING, 0, [1, 9], 0, False),
    (LaneState.STOPPING, B, Move.CUT_IN, LaneState.STOPPING, 0, [1, 9], 0, True),
]


@pytest.mark.parametrize(
    ("before", "policy", "move", "after", "running", "waiting", "stop", "drop"), CASES
)
def test_arrive(
    before: LaneState,
    policy: BusyPolicy,
    move: Move,
    after: LaneState,
    running: int,
    waiting: list[int],
    stop: int | None,
    drop: bool,
) -> None:
    lanes = _lanes_in(before)
    admission = lanes.arrive("c", 9, "p", policy)
    assert admission.move is move
    assert admission.stop == stop
    assert admission.drop is drop
    assert (admission.refusal is not None) is (move is Move.REFUSE)
    if move is Move.REFUSE:
        assert admission.refusal is not None and admission.refusal.code == BUSY
    assert lanes.state("c") is after
    assert lanes.running("c") == running
    assert lanes.waiting("c") == waiting
    if stop is not None:
        assert lanes.stopped(stop) == ("drop" if drop else "keep")


def test_a_rollback_after_an_interrupt_still_drops_the_turn() -> None:
    lanes = _lanes_in(LaneState.STOPPING)  # interrupted: keep
    assert lanes.stopped(0) == "keep"
    assert lanes.arrive("c", 2, "p", B).drop
    assert lanes.stopped(0) == "drop"
    # ... and a later interrupt does not bring it back.
    assert lanes.arrive("c", 3, "p", I).drop


def test_finish_runs_the_next_in_order_and_forgets_an_idle_conversation() -> None:
    lanes = Lanes()
    assert lanes.arrive("c", "a", "p", E).runs
    lanes.arrive("c", "b", "p", E)
    lanes.arrive("c", "c", "p", E)
    lanes.arrive("c", "x", "p", I)  # cuts in before b and c
    lanes.arrive("c", "y", "p", I)  # behind x
    assert lanes.waiting("c") == ["x", "y", "b", "c"]
    assert lanes.queued_by("p") == 4
    order = []
    ticket = lanes.finish("c", "a")
    while ticket is not None:
        order.append(ticket)
        assert lanes.state("c") is LaneState.RUNNING  # a new run is not stopping
        ticket = lanes.finish("c", ticket)
    assert order == ["x", "y", "b", "c"]
    assert len(lanes) == 0 and lanes.queued_by("p") == 0
    assert lanes.stopped("a") is None  # forgotten with its run


def test_finish_of_a_ticket_that_does_not_run_is_an_error() -> None:
    lanes = Lanes()
    lanes.arrive("c", 1, "p", E)
    lanes.arrive("c", 2, "p", E)
    with pytest.raises(KeyError):
        lanes.finish("c", 2)
    with pytest.raises(KeyError):
        lanes.finish("other", 1)


def test_leave_removes_a_waiting_ticket_and_its_count() -> None:
    lanes = Lanes()
    lanes.arrive("c", 1, "p", E)
    lanes.arrive("c", 2, "p", I)
    lanes.arrive("c", 3, "q", E)
    lanes.leave("c", 2)
    lanes.leave("c", 42)  # not waiting: nothing
    lanes.leave("nowhere", 3)
    assert lanes.waiting("c") == [3]
    assert (lanes.queued_by("p"), lanes.queued_by("q")) == (0, 1)
    # The cut-in that left no longer holds the head: a new cut-in goes first.
    lanes.arrive("c", 4, "p", I)
    assert lanes.waiting("c") == [4, 3]


@pytest.mark.parametrize("policy", [E, I, B])
def test_the_queue_of_one_conversation_is_bounded(policy: BusyPolicy) -> None:
    lanes = Lanes(BusyLimits(per_conversation=2, per_principal=100))
    lanes.arrive("c", 0, "p", E)
    assert lanes.arrive("c", 1, "p", policy).move is not Move.REFUSE
    assert lanes.arrive("c", 2, "q", policy).move is not Move.REFUSE
    refused = lanes.arrive("c", 3, "r", policy)
    assert refused.move is Move.REFUSE and refused.stop is None
    assert refused.refusal is not None and refused.refusal.code == QUEUE_FULL
    assert lanes.waiting("c") == [1, 2]


def test_the_waiting_messages_of_one_principal_are_bounded_over_conversations() -> None:
    lanes = Lanes(BusyLimits(per_conversation=100, per_principal=3))
    for conv in ("a", "b", "c", "d"):
        lanes.arrive(conv, f"{conv}0", "p", E)
    assert all(lanes.arrive(c, f"{c}1", "p", E).move is Move.QUEUE for c in ("a", "b", "c"))
    refused = lanes.arrive("d", "d1", "p", E)
    assert refused.refusal is not None and refused.refusal.code == QUEUE_FULL
    # Another principal is not held back by p.
    assert lanes.arrive("d", "d2", "q", E).move is Move.QUEUE
    lanes.finish("a", "a0")  # a1 runs: p has room again
    assert lanes.arrive("d", "d3", "p", E).move is Move.QUEUE


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["arrive", "finish", "leave"]),
            st.sampled_from(["c1", "c2"]),
            st.sampled_from(["p", "q"]),
            st.sampled_from(list(BusyPolicy)),
            st.integers(0, 7),
        ),
        max_size=60,
    )
)
def test_any_sequence_keeps_the_bounds_and_the_counts(ops: list) -> None:
    limits = BusyLimits(per_conversation=3, per_principal=4)
    lanes = Lanes(limits)
    ticket = itertools.count()
    for op, key, owner, policy, pick in ops:
        if op == "arrive":
            lanes.arrive(key, next(ticket), owner, policy)
        elif op == "finish":
            running = lanes.running(key)
            if running is not None:
                lanes.finish(key, running)
        else:
            waiting = lanes.waiting(key)
            if waiting:
                lanes.leave(key, waiting[pick % len(waiting)])
        for conv in ("c1", "c2"):
            assert len(lanes.waiting(conv)) <= limits.per_conversation
            if lanes.waiting(conv):
                assert lanes.running(conv) is not None
        assert lanes.queued_by("p") <= limits.per_principal
        assert lanes.queued_by("q") <= limits.per_principal
        total = len(lanes.waiting("c1")) + len(lanes.waiting("c2"))
        assert lanes.queued_by("p") + lanes.queued_by("q") == total


@pytest.mark.parametrize(
    ("value", "policy"),
    [("reject", R), ("enqueue", E), (" Interrupt ", I), ("ROLLBACK", B), (B, B)],
)
def test_parse_policy(value: object, policy: BusyPolicy) -> None:
    assert parse_policy(value) is policy


@pytest.mark.parametrize("value", ["later", "", 3, None, ["reject"]])
def test_parse_policy_refuses_anything_else(value: object) -> None:
    with pytest.raises(BusyError) as caught:
        parse_policy(value)
    assert caught.value.code == INVALID_POLICY


def test_policy_of_metadata() -> None:
    assert policy_of({POLICY_KEY: "reject"}, E) is R
    assert policy_of({"other": 1}, I) is I
    assert policy_of(None, B) is B
    assert policy_of("not a mapping", E) is E
    for empty in ({}, MappingProxyType({}), "", [], ()):  # nothing asked: the default
        assert policy_of(empty, R) is R
    assert policy_of(MappingProxyType({POLICY_KEY: "rollback"}), E) is B
    with pytest.raises(BusyError):
        policy_of({POLICY_KEY: "soon"}, E)


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError):
        BusyLimits(per_conversation=0)
    with pytest.raises(ValueError):
        BusyLimits(per_principal=0)
