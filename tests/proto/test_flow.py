"""Tests of delta windows (uamp_proto.flow, spec 003 section 5)."""

from __future__ import annotations

import random
from collections import deque
from typing import Any

import attrs
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from uamp_proto import codec
from uamp_proto.errors import FlowControlError, LocalProtocolError, RemoteProtocolError
from uamp_proto.events import EVENT_TYPES, InputText, Progress
from uamp_proto.flow import (
    DEFAULT_DELTA_WINDOW,
    ERR_MISSING_DELTA_SEQ,
    FLOW_CONTROLLED_TYPES,
    MAX_DELTA_WINDOW,
    ReceiveWindow,
    SendWindow,
    ack_event,
    ack_of,
    confirmed_window,
    flow_extension,
    grant_window,
    is_ack,
    requested_window,
)

# A step is (operation, arguments, expected). ``expected`` is the return value,
# or an exception class, or (exception class, substring of the message).
Step = tuple[str, tuple[Any, ...], Any]


def run_steps(obj: Any, steps: list[Step]) -> None:
    for i, (op, args, expected) in enumerate(steps):
        where = f"step {i}: {op}{args}"
        if op == "check":
            (attribute,) = args
            assert getattr(obj, attribute) == expected, where
            continue
        method = getattr(obj, op)
        if isinstance(expected, tuple) or (
            isinstance(expected, type) and issubclass(expected, Exception)
        ):
            exc, match = expected if isinstance(expected, tuple) else (expected, None)
            before = dict(vars(obj))
            with pytest.raises(exc, match=match) as info:
                method(*args)
            # A refused operation changes nothing.
            assert vars(obj) == before, where
            if issubclass(exc, RemoteProtocolError):
                assert info.value.code == ERR_MISSING_DELTA_SEQ, where
                assert info.value.reply is None, where
        else:
            assert method(*args) == expected, where


# --- SendWindow -------------------------------------------------------------------

SEND_CASES: dict[str, list[Step]] = {
    "fresh window": [
        ("check", ("available",), 3),
        ("check", ("next_seq",), 0),
        ("check", ("in_flight",), 0),
        ("check", ("response_id",), None),
    ],
    "stamp before start_stream": [("stamp", ("r1",), LocalProtocolError)],
    "stamps count up from 0": [
        ("start_stream", ("r1",), None),
        ("stamp", ("r1",), 0),
        ("check", ("available",), 2),
        ("stamp", ("r1",), 1),
        ("stamp", ("r1",), 2),
        ("check", ("available",), 0),
        ("check", ("next_seq",), 3),
    ],
    "full window refuses": [
        ("start_stream", ("r1",), None),
        ("stamp", ("r1",), 0),
        ("stamp", ("r1",), 1),
        ("stamp", ("r1",), 2),
        ("stamp", ("r1",), (FlowControlError, "full")),
        ("check", ("next_seq",), 3),
    ],
    "ack frees and stamping resumes": [
        ("start_stream", ("r1",), None),
        ("stamp", ("r1",), 0),
        ("stamp", ("r1",), 1),
        ("stamp", ("r1",), 2),
        ("acknowledge", ("r1", 1), 2),
        ("check", ("available",), 2),
        ("stamp", ("r1",), 3),
        ("stamp", ("r1",), 4),
        ("stamp", ("r1",), FlowControlError),
    ],
    "ack is cumulative": [
        ("start_stream", ("r1",), None),
        ("stamp", ("r1",), 0),
        ("stamp", ("r1",), 1),
        ("stamp", ("r1",), 2),
        ("acknowledge", ("r1", 2), 3),
        ("check", ("available",), 3),
        ("check", ("acked",), 2),
    ],
    "lower ack ignored": [
        ("start_stream", ("r1",), None),
        ("stamp", ("r1",), 0),
        ("stamp", ("r1",), 1),
        ("acknowledge", ("r1", 1), 2),
        ("acknowledge", ("r1", 0), 0),
        ("acknowledge", ("r1", 1), 0),
        ("check", ("acked",), 1),
        ("check", ("available",), 3),
    ],
    "ack of a seq never sent": [
        ("start_stream", ("r1",), None),
        ("stamp", ("r1",), 0),
        ("acknowledge", ("r1", 1), (RemoteProtocolError, "only 0..0 were sent")),
        ("check", ("available",), 2),
    ],
    "ack before any frame": [
        ("start_stream", ("r1",), None),
        ("acknowledge", ("r1", 0), RemoteProtocolError),
    ],
    "ack for an older response ignored": [
        ("start_stream", ("r1",), None),
        ("stamp", ("r1",), 0),
        ("start_stream", ("r2",), None),
        ("acknowledge", ("r1", 0), 0),
        ("acknowledge", ("r1", 99), 0),
        ("check", ("acked",), -1),
    ],
    "ack for an unknown response ignored": [
        ("start_stream", ("r1",), None),
        ("stamp", ("r1",), 0),
        ("acknowledge", ("zz", 0), 0),
        ("check", ("available",), 2),
    ],
    "new stream forgives un-acked frames": [
        ("start_stream", ("r1",), None),
        ("stamp", ("r1",), 0),
        ("stamp", ("r1",), 1),
        ("stamp", ("r1",), 2),
        ("start_stream", ("r2",), None),
        ("check", ("available",), 3),
        ("stamp", ("r2",), 0),
        ("stamp", ("r1",), LocalProtocolError),
    ],
    "restarting the streaming response refused": [
        ("start_stream", ("r1",), None),
        ("stamp", ("r1",), 0),
        ("start_stream", ("r1",), LocalProtocolError),
        ("stamp", ("r1",), 1),
    ],
    "response id may come back later": [
        ("start_stream", ("r1",), None),
        ("stamp", ("r1",), 0),
        ("start_stream", ("r2",), None),
        ("start_stream", ("r1",), None),
        ("stamp", ("r1",), 0),
    ],
    "stamp for another response": [
        ("start_stream", ("r1",), None),
        ("stamp", ("r2",), LocalProtocolError),
    ],
}


@pytest.mark.parametrize("steps", list(SEND_CASES.values()), ids=list(SEND_CASES))
def test_send_window(steps: list[Step]) -> None:
    run_steps(SendWindow(3), steps)


def test_flow_control_error_details() -> None:
    window = SendWindow(1, session_id="s1")
    window.start_stream("r1")
    window.stamp("r1")
    with pytest.raises(FlowControlError) as info:
        window.stamp("r1")
    assert info.value.code == "flow_control"
    assert info.value.session_id == "s1"
    assert isinstance(info.value, LocalProtocolError)


def test_window_of_one_alternates() -> None:
    window = SendWindow(1)
    window.start_stream("r")
    for seq in range(5):
        assert window.stamp("r") == seq
        assert window.available == 0
        assert window.acknowledge("r", seq) == 1


def test_a_lifted_window_numbers_on_and_never_refuses() -> None:
    window = SendWindow(2)
    window.start_stream("r")
    assert [window.stamp("r"), window.stamp("r")] == [0, 1]
    with pytest.raises(FlowControlError):
        window.stamp("r")  # full, nothing acknowledged
    window.lift()  # the response outlived its connection (docs/resume.md)
    assert [window.stamp("r") for _ in range(100)] == list(range(2, 102))
    window.start_stream("r2")  # numbering per response still restarts
    assert window.stamp("r2") == 0


def test_a_resumed_session_created_keeps_both_its_window_and_its_extensions() -> None:
    from uamp_proto.connection import ClientConnection, ConnectionConfig, ServerConnection

    client, server = ClientConnection(ConnectionConfig(delta_window=8)), ServerConnection()
    server.receive(client.create_session(session_id="s1"))
    assert server.next_event().type == "session.create"  # type: ignore[union-attr]
    raw = orjson.loads(server.accept("s1", extensions={"resumed": True}))
    assert raw["extensions"] == {"resumed": True}
    assert raw["session"]["config"]["extensions"]["flow"] == {"delta_window": 8}


# --- ReceiveWindow ----------------------------------------------------------------

RECEIVE_CASES: dict[str, list[Step]] = {
    "fresh window": [
        ("check", ("expected",), 0),
        ("check", ("acked",), -1),
        ("pending_ack", ("r1",), None),
    ],
    "in order, ack every 2": [
        ("receive", ("r1", 0), None),
        ("receive", ("r1", 1), 1),
        ("acknowledged", ("r1", 1), None),
        ("receive", ("r1", 2), None),
        ("receive", ("r1", 3), 3),
    ],
    "due ack repeats until recorded": [
        ("receive", ("r1", 0), None),
        ("receive", ("r1", 1), 1),
        ("receive", ("r1", 2), 2),
        ("acknowledged", ("r1", 2), None),
        ("receive", ("r1", 3), None),
    ],
    "first frame must be 0": [("receive", ("r1", 1), (RemoteProtocolError, "missing delta_seq"))],
    "negative first frame": [("receive", ("r1", -1), (RemoteProtocolError, "invalid delta_seq"))],
    "frame without delta_seq": [
        ("receive", ("r1", None), (RemoteProtocolError, "missing delta_seq"))
    ],
    "gap of one": [
        ("receive", ("r1", 0), None),
        ("receive", ("r1", 2), (RemoteProtocolError, "missing delta_seq 1 ")),
    ],
    "gap of several": [
        ("receive", ("r1", 0), None),
        ("receive", ("r1", 5), (RemoteProtocolError, r"missing delta_seq 1\.\.4")),
    ],
    "duplicate": [
        ("receive", ("r1", 0), None),
        ("receive", ("r1", 1), 1),
        ("receive", ("r1", 1), (RemoteProtocolError, "duplicate delta_seq 1")),
        ("receive", ("r1", 0), (RemoteProtocolError, "duplicate delta_seq 0")),
    ],
    "refused frame is not counted": [
        ("receive", ("r1", 0), None),
        ("receive", ("r1", 2), RemoteProtocolError),
        ("receive", ("r1", 1), 1),
    ],
    "window exceeded": [
        ("receive", ("r1", 0), None),
        ("receive", ("r1", 1), 1),
        ("receive", ("r1", 2), 2),
        ("receive", ("r1", 3), 3),
        ("receive", ("r1", 4), (RemoteProtocolError, "delta window exceeded")),
        ("acknowledged", ("r1", 0), None),
        ("receive", ("r1", 4), 4),
    ],
    "window exceeded after partial ack": [
        ("receive", ("r1", 0), None),
        ("receive", ("r1", 1), 1),
        ("acknowledged", ("r1", 1), None),
        ("receive", ("r1", 2), None),
        ("receive", ("r1", 3), 3),
        ("receive", ("r1", 4), 4),
        ("receive", ("r1", 5), 5),
        ("receive", ("r1", 6), (RemoteProtocolError, "window exceeded")),
    ],
    "pending ack": [
        ("receive", ("r1", 0), None),
        ("pending_ack", ("r1",), 0),
        ("pending_ack", ("r2",), None),
        ("acknowledged", ("r1", 0), None),
        ("pending_ack", ("r1",), None),
        ("receive", ("r1", 1), None),
        ("pending_ack", ("r1",), 1),
    ],
    "acknowledging a frame not received": [
        ("receive", ("r1", 0), None),
        ("acknowledged", ("r1", 1), LocalProtocolError),
        ("check", ("acked",), -1),
    ],
    "lower or other acknowledged ignored": [
        ("receive", ("r1", 0), None),
        ("receive", ("r1", 1), 1),
        ("acknowledged", ("r1", 1), None),
        ("acknowledged", ("r1", 0), None),
        ("acknowledged", ("r9", 7), None),
        ("check", ("acked",), 1),
    ],
    "new response restarts numbering": [
        ("receive", ("r1", 0), None),
        ("receive", ("r1", 1), 1),
        ("receive", ("r2", 0), None),
        ("check", ("response_id",), "r2"),
        ("check", ("acked",), -1),
        ("pending_ack", ("r1",), None),
        ("pending_ack", ("r2",), 0),
    ],
    "new response must start at 0": [
        ("receive", ("r1", 0), None),
        ("receive", ("r2", 3), (RemoteProtocolError, "missing delta_seq 0..2")),
        ("check", ("response_id",), "r1"),
    ],
    "late frame of an earlier response": [
        ("receive", ("r1", 0), None),
        ("receive", ("r2", 0), None),
        ("receive", ("r1", 1), (RemoteProtocolError, "missing delta_seq")),
    ],
}


@pytest.mark.parametrize("steps", list(RECEIVE_CASES.values()), ids=list(RECEIVE_CASES))
def test_receive_window(steps: list[Step]) -> None:
    run_steps(ReceiveWindow(4, ack_every=2), steps)


def test_receive_error_carries_session() -> None:
    window = ReceiveWindow(4, session_id="s9")
    with pytest.raises(RemoteProtocolError) as info:
        window.receive("r", 3)
    assert info.value.session_id == "s9"
    assert info.value.code == "4.09"


@pytest.mark.parametrize(("window", "ack_every"), [(1, 1), (2, 1), (3, 1), (4, 2), (64, 32)])
def test_default_ack_every(window: int, ack_every: int) -> None:
    assert ReceiveWindow(window).ack_every == ack_every


@pytest.mark.parametrize(
    ("window", "ack_every"),
    [
        (0, None),
        (-1, None),
        (True, None),
        (1.5, None),
        (MAX_DELTA_WINDOW + 1, None),
        (4, 0),
        (4, 5),
        (4, True),
    ],
)
def test_bad_receive_window(window: Any, ack_every: Any) -> None:
    with pytest.raises(ValueError):
        ReceiveWindow(window, ack_every)


@pytest.mark.parametrize("window", [0, -1, True, 2.0, MAX_DELTA_WINDOW + 1])
def test_bad_send_window(window: Any) -> None:
    with pytest.raises(ValueError):
        SendWindow(window)


# --- negotiation -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("extensions", "expected"),
    [
        (None, None),
        ({}, None),
        ({"other": 1}, None),
        ({"flow": None}, None),
        ({"flow": {}}, DEFAULT_DELTA_WINDOW),
        ({"flow": {"delta_window": 1}}, 1),
        ({"flow": {"delta_window": 16, "future": True}}, 16),
        ({"flow": {"delta_window": MAX_DELTA_WINDOW}}, MAX_DELTA_WINDOW),
    ],
)
def test_requested_window(extensions: Any, expected: int | None) -> None:
    assert requested_window(extensions) == expected


@pytest.mark.parametrize(
    "extensions",
    [
        {"flow": {"delta_window": 0}},
        {"flow": {"delta_window": -3}},
        {"flow": {"delta_window": True}},
        {"flow": {"delta_window": False}},
        {"flow": {"delta_window": "8"}},
        {"flow": {"delta_window": 8.0}},
        {"flow": {"delta_window": 8.5}},
        {"flow": {"delta_window": None}},
        {"flow": {"delta_window": [8]}},
        {"flow": {"delta_window": MAX_DELTA_WINDOW + 1}},
        {"flow": 8},
        {"flow": "yes"},
        {"flow": [8]},
        ["flow"],
    ],
)
def test_requested_window_refuses(extensions: Any) -> None:
    with pytest.raises(RemoteProtocolError) as info:
        requested_window(extensions)
    assert info.value.code == "invalid_event"
    assert info.value.message.startswith("session.extensions")


@pytest.mark.parametrize(
    ("requested", "maximum", "granted"),
    [(None, 64, None), (8, 64, 8), (64, 64, 64), (1000, 64, 64), (5, 1, 1)],
)
def test_grant_window(requested: int | None, maximum: int, granted: int | None) -> None:
    assert grant_window(requested, maximum) == granted


def test_grant_window_bad_maximum() -> None:
    with pytest.raises(ValueError):
        grant_window(8, 0)


@pytest.mark.parametrize(
    ("extensions", "requested", "expected"),
    [
        (None, 8, None),
        ({}, 8, None),
        ({"flow": {"delta_window": 8}}, 8, 8),
        ({"flow": {"delta_window": 4}}, 8, 4),
        ({"flow": {"delta_window": 9}}, 8, RemoteProtocolError),
        ({"flow": {"delta_window": 4}}, None, RemoteProtocolError),
        ({"flow": {"delta_window": "4"}}, 8, RemoteProtocolError),
    ],
)
def test_confirmed_window(extensions: Any, requested: int | None, expected: Any) -> None:
    if expected is RemoteProtocolError:
        with pytest.raises(RemoteProtocolError) as info:
            confirmed_window(extensions, requested)
        assert info.value.code == "invalid_event"
    else:
        assert confirmed_window(extensions, requested) == expected


def test_flow_extension_roundtrips_through_requested_window() -> None:
    assert flow_extension() == {"flow": {"delta_window": DEFAULT_DELTA_WINDOW}}
    assert flow_extension(7) == {"flow": {"delta_window": 7}}
    assert requested_window(flow_extension(7)) == 7
    assert DEFAULT_DELTA_WINDOW == 64


@pytest.mark.parametrize("window", [0, -1, True, "8", 8.0])
def test_flow_extension_refuses(window: Any) -> None:
    with pytest.raises(LocalProtocolError):
        flow_extension(window)


def test_flow_controlled_types() -> None:
    assert (
        frozenset({"response.delta", "audio.delta", "transcript.delta", "thinking"})
        == FLOW_CONTROLLED_TYPES
    )
    # Each is a known event whose class has a delta_seq field.
    for wire_type in FLOW_CONTROLLED_TYPES:
        cls = EVENT_TYPES[wire_type]
        assert "delta_seq" in attrs.fields_dict(cls)


# --- acks -------------------------------------------------------------------------


def test_ack_event() -> None:
    ack = ack_event("resp_1", 41, session_id="s1")
    assert isinstance(ack, Progress)
    assert (ack.target, ack.target_id, ack.stage, ack.delta_seq, ack.session_id) == (
        "response",
        "resp_1",
        "ack",
        41,
        "s1",
    )
    assert is_ack(ack)
    assert ack_of(ack) == ("resp_1", 41)


def test_ack_on_the_wire() -> None:
    wire = codec.encode(ack_event("resp_1", 3))
    decoded = codec.decode(wire)
    assert is_ack(decoded)
    assert isinstance(decoded, Progress)
    assert ack_of(decoded) == ("resp_1", 3)


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        (Progress(target="response", target_id="r", stage="ack", delta_seq=0), True),
        (Progress(target="response", target_id="r", stage="ack"), True),
        (Progress(target="response", target_id="r", stage="thinking", delta_seq=0), False),
        (Progress(target="tool", target_id="r", stage="ack", delta_seq=0), False),
        (Progress(target="response"), False),
        (InputText(text="ack"), False),
        ("progress", False),
        (None, False),
    ],
)
def test_is_ack(event: object, expected: bool) -> None:
    assert is_ack(event) is expected


@pytest.mark.parametrize(
    "event",
    [
        Progress(target="response", target_id="r", stage="ack"),
        Progress(target="response", target_id="r", stage="ack", delta_seq=-1),
        Progress(target="response", stage="ack", delta_seq=1),
        Progress(target="response", target_id="", stage="ack", delta_seq=1),
    ],
)
def test_ack_of_refuses_malformed(event: Progress) -> None:
    with pytest.raises(RemoteProtocolError) as info:
        ack_of(event)
    assert info.value.code == "invalid_event"


# --- a sender and a receiver paired in memory ---------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    window=st.integers(1, 8),
    responses=st.lists(st.integers(0, 30), min_size=1, max_size=4),
    ack_every=st.integers(1, 8),
    seed=st.integers(0, 2**32 - 1),
)
def test_paired_windows_never_deadlock(
    window: int, responses: list[int], ack_every: int, seed: int
) -> None:
    """Random scheduling and ack timing: no deadlock, no overrun, deltas in order."""
    # The schedule comes from a seeded generator: a drawn choice per step would
    # exceed hypothesis's entropy budget for long runs.
    rng = random.Random(seed)
    ack_every = min(ack_every, window)
    sender = SendWindow(window)
    receiver = ReceiveWindow(window, ack_every)
    to_client: deque[tuple[str, int | None]] = deque()  # (response, seq); None = done
    to_server: deque[tuple[str, int]] = deque()
    received: dict[str, list[int]] = {}
    due: tuple[str, int] | None = None  # the ack the receiver owes and has not sent
    current = -1  # index of the response the sender is streaming
    sent_in_current = 0
    ids = [f"r{i}" for i in range(len(responses))]

    for _ in range(10_000):
        actions = []
        if current < len(responses) - 1 and (current < 0 or sent_in_current == responses[current]):
            actions.append("start")
        if current >= 0 and sent_in_current < responses[current]:
            if sender.available > 0:
                actions.append("send")
            else:
                actions.append("send_refused")
        if to_client:
            actions.append("deliver")
        if due is not None:
            actions.append("ack")
        if to_server:
            actions.append("deliver_ack")
        essential = [a for a in actions if a != "send_refused"]
        if not essential:
            break
        action = rng.choice(actions)

        if action == "start":
            if current >= 0:
                to_client.append((ids[current], None))
            current += 1
            sent_in_current = 0
            sender.start_stream(ids[current])
        elif action == "send":
            seq = sender.stamp(ids[current])
            assert seq == sent_in_current
            sent_in_current += 1
            to_client.append((ids[current], seq))
        elif action == "send_refused":
            with pytest.raises(FlowControlError):
                sender.stamp(ids[current])
        elif action == "deliver":
            rid, got = to_client.popleft()
            if got is None:  # the response ended: flush what is owed
                pending = receiver.pending_ack(rid)
                if pending is not None:
                    due = (rid, pending)
            else:
                received.setdefault(rid, []).append(got)
                ack = receiver.receive(rid, got)
                if ack is not None:
                    due = (rid, ack)
        elif action == "ack":
            assert due is not None
            rid, seq = due
            if rng.random() < 0.5:  # flush everything received, not just what is due
                pending = receiver.pending_ack(rid)
                if pending is not None:
                    assert pending >= seq
                    seq = pending
            receiver.acknowledged(rid, seq)
            to_server.append((rid, seq))
            due = None
        elif action == "deliver_ack":
            rid, seq = to_server.popleft()
            sender.acknowledge(rid, seq)

        # Never more than the window of the streaming response in flight
        # (a new response forgives what is left of the previous one).
        assert 0 <= sender.in_flight <= window
        if current >= 0:
            in_transit = sum(1 for r, s in to_client if r == ids[current] and s is not None)
            assert in_transit <= sender.in_flight
    else:
        pytest.fail("the simulation did not finish")

    # Finished, not deadlocked: every delta of every response arrived, in order.
    assert current == len(responses) - 1
    assert sent_in_current == responses[-1]
    for rid, count in zip(ids, responses, strict=True):
        assert received.get(rid, []) == list(range(count))
