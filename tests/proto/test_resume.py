"""The sans-IO parts of resumable sessions: where a resume starts and how its sources merge."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from uamp_proto.resume import (
    LogEntry,
    LogWindow,
    Positions,
    ResumeError,
    ResumeState,
    ResumeStream,
    Retention,
    event_id_of,
    resume_from,
    start_after,
)


def entry(n: int) -> LogEntry:
    return LogEntry(n, f"evt_{n}", b'{"n":%d}' % n)


def positions(entries: object) -> list[int]:
    assert isinstance(entries, (list, tuple))
    return [e.position for e in entries]


# --- where a resume starts ------------------------------------------------------

START_CASES = [
    # window (first, last), found, expected start or error code
    ((1, 10), 4, 4),
    ((1, 10), 10, 10),
    ((1, 0), None, "unknown_event"),
    ((1, 10), None, "unknown_event"),
    ((5, 10), None, "beyond_retention"),
    ((5, 10), 7, 7),
    ((5, 10), 2, "beyond_retention"),
    ((5, 10), 11, "beyond_retention"),
    ((11, 10), None, "beyond_retention"),
]


@pytest.mark.parametrize(("window", "found", "expected"), START_CASES)
def test_start_after(window: tuple[int, int], found: int | None, expected: int | str) -> None:
    log = LogWindow(*window)
    if isinstance(expected, int):
        assert start_after(log, found, "evt_x") == expected
    else:
        with pytest.raises(ResumeError) as caught:
            start_after(log, found, "evt_x")
        assert caught.value.code == expected
        assert "evt_x" in caught.value.message


RESUME_FROM_CASES = [
    (None, None),
    ({}, None),
    ({"flow": {}}, None),
    ({"resume_from": "evt_1"}, "evt_1"),
    ({"resume_from": ""}, "invalid_event"),
    ({"resume_from": 3}, "invalid_event"),
    ({"resume_from": None}, "invalid_event"),
]


@pytest.mark.parametrize(("extensions", "expected"), RESUME_FROM_CASES)
def test_resume_from_reads_the_extension(extensions: object, expected: str | None) -> None:
    if expected == "invalid_event":
        with pytest.raises(ResumeError) as caught:
            resume_from(extensions)
        assert caught.value.code == "invalid_event"
    else:
        assert resume_from(extensions) == expected


# --- the merge: a table of (operation, argument) steps ---------------------------

# ops: ("b", [positions]) backfill piece, ("done",) end of backfill, ("l", n) live entry.
# expected per op: the positions sent, and the fetch asked for (or None).
MERGE_CASES = {
    "plain replay then live": (
        0,
        [("b", [1, 2, 3]), ("done",), ("l", 4), ("l", 5)],
        [([1, 2, 3], None), ([], None), ([4], None), ([5], None)],
    ),
    "start in the middle skips what the client has": (
        2,
        [("b", [1, 2, 3, 4]), ("done",), ("l", 5)],
        [([3, 4], None), ([], None), ([5], None)],
    ),
    "live entries during the replay are held, then sent once": (
        0,
        [("l", 3), ("b", [1, 2]), ("l", 4), ("b", [3]), ("done",), ("l", 5)],
        [([], None), ([1, 2], None), ([], None), ([3], None), ([4], None), ([5], None)],
    ),
    "overlap of backfill and live is a duplicate": (
        0,
        [("l", 1), ("l", 2), ("b", [1, 2]), ("done",), ("l", 2), ("l", 3)],
        [([], None), ([], None), ([1, 2], None), ([], None), ([], None), ([3], None)],
    ),
    "a live duplicate after going live is dropped": (
        0,
        [("b", []), ("done",), ("l", 1), ("l", 1), ("l", 2)],
        [([], None), ([], None), ([1], None), ([], None), ([2], None)],
    ),
    "a gap in the live stream asks for a fetch": (
        0,
        [("b", [1]), ("done",), ("l", 4), ("b", [2, 3]), ("done",), ("l", 5)],
        [([1], None), ([], None), ([], 1), ([2, 3], None), ([4], None), ([5], None)],
    ),
    "held entries with a gap after the backfill ask for a fetch": (
        0,
        [("l", 5), ("b", [1, 2]), ("done",), ("b", [3, 4, 5]), ("done",)],
        [([], None), ([1, 2], None), ([], 2), ([3, 4, 5], None), ([], None)],
    ),
    "held entries arrive out of order": (
        0,
        [("l", 3), ("l", 2), ("b", [1]), ("done",)],
        [([], None), ([], None), ([1], None), ([2, 3], None)],
    ),
    "a stale live entry while replaying is ignored": (
        5,
        [("l", 3), ("b", [6]), ("done",), ("l", 7)],
        [([], None), ([6], None), ([], None), ([7], None)],
    ),
}


@pytest.mark.parametrize("name", list(MERGE_CASES))
def test_merge_table(name: str) -> None:
    after, ops, expected = MERGE_CASES[name]
    stream = ResumeStream(after)
    for op, (sent, fetch) in zip(ops, expected, strict=True):
        if op[0] == "b":
            step = stream.backfill(entry(n) for n in op[1])
        elif op[0] == "done":
            step = stream.backfill_done()
        else:
            step = stream.live(entry(op[1]))
        assert (positions(step.send), step.fetch_after) == (sent, fetch), op


def test_a_hole_in_the_backfill_is_beyond_retention() -> None:
    stream = ResumeStream(2)
    with pytest.raises(ResumeError) as caught:
        stream.backfill([entry(5), entry(6)])
    assert caught.value.code == "beyond_retention"
    assert "3 to 4" in caught.value.message


def test_too_many_held_entries_are_let_go_and_fetched() -> None:
    stream = ResumeStream(0, max_held=2)
    for n in (2, 3, 4):
        assert stream.live(entry(n)).send == ()
    step = stream.backfill([entry(1)])
    assert positions(step.send) == [1]
    step = stream.backfill_done()
    assert (positions(step.send), step.fetch_after) == ([], 1)
    assert stream.state is ResumeState.REPLAYING
    assert positions(stream.backfill([entry(2), entry(3), entry(4)]).send) == [2, 3, 4]
    assert stream.backfill_done().send == []
    assert stream.state is ResumeState.LIVE


@given(
    after=st.integers(0, 20),
    total=st.integers(0, 40),
    split=st.integers(0, 40),
    live_from=st.integers(1, 41),
    dup=st.lists(st.integers(1, 40), max_size=10),
    data=st.data(),
)
def test_every_position_after_the_start_is_sent_once_in_order(
    after: int, total: int, split: int, live_from: int, dup: list[int], data: st.DataObject
) -> None:
    """Whatever the interleaving, the output is exactly after+1 .. total, once each."""
    stream = ResumeStream(after, max_held=data.draw(st.integers(1, 50)))
    log = [entry(n) for n in range(1, total + 1)]
    live = [e for e in log if e.position >= live_from] + [entry(n) for n in dup if n <= total]
    live = data.draw(st.permutations(live))
    sent: list[int] = []
    split = min(split, total)

    def run(step: object) -> None:
        from uamp_proto.resume import Step

        assert isinstance(step, Step)
        sent.extend(positions(step.send))
        while step.fetch_after is not None:
            step = stream.backfill(e for e in log if e.position > step.fetch_after)
            sent.extend(positions(step.send))
            step = stream.backfill_done()
            sent.extend(positions(step.send))

    # Some live entries come before and during the backfill, the rest after it.
    cut = data.draw(st.integers(0, len(live)))
    for e in live[:cut]:
        run(stream.live(e))
    run(stream.backfill(log[:split]))
    run(stream.backfill(log[split:]))
    run(stream.backfill_done())
    for e in live[cut:]:
        run(stream.live(e))
    # Entries the live source never carried are only in the log: a final read.
    run(stream.backfill(log))
    assert sent == list(range(after + 1, total + 1))


# --- positions and retention ------------------------------------------------------


def test_positions_count_from_the_last() -> None:
    fresh, restarted = Positions(), Positions(41)
    assert [fresh.next(), fresh.next()] == [1, 2]
    assert restarted.next() == 42


RETENTION_CASES = [
    # max_events, last, first kept
    (10, 0, 1),
    (10, 5, 1),
    (3, 5, 3),
    (1, 5, 5),
    (5, 5, 1),
]


@pytest.mark.parametrize(("count", "last", "first"), RETENTION_CASES)
def test_retention_first_kept(count: int, last: int, first: int) -> None:
    assert Retention(count).first_kept(last) == first


AGE_CASES = [
    # updated, now, expired, forgotten (max_age 10)
    (100.0, 105.0, False, False),
    (100.0, 110.0, False, False),
    (100.0, 110.5, True, False),
    (100.0, 120.0, True, False),
    (100.0, 120.5, True, True),
]


@pytest.mark.parametrize(("updated", "now", "expired", "forgotten"), AGE_CASES)
def test_retention_age(updated: float, now: float, expired: bool, forgotten: bool) -> None:
    retention = Retention(max_age=10.0)
    assert retention.expired(updated, now) is expired
    assert retention.forgotten(updated, now) is forgotten


@pytest.mark.parametrize(("count", "age"), [(0, 1.0), (1, 0.0), (1, -1.0)])
def test_retention_refuses_nonsense(count: int, age: float) -> None:
    with pytest.raises(ValueError):
        Retention(count, age)


def test_event_id_of_reads_the_top_level_id() -> None:
    data = b'{"type":"response.delta","delta":{"text":"\\"event_id\\":\\"x\\""},"event_id":"e.7"}'
    assert event_id_of(data) == "e.7"
    assert event_id_of(b'{"type":"ping"}') == ""


EVENT_ID_CASES = [
    (b'{"type":"ping","event_id":"e.1"}', "e.1"),
    (b'{"event_id":"e.2"}', "e.2"),
    (b'{"type":"x","event_id":"e.3","timestamp":5}', "e.3"),
    (b'{"type":"x","text":"a,\\"event_id\\":\\"fake\\""}', ""),
    (b'{"type":"x","event_id":"e.9","text":"a,\\"event_id\\":\\"fake\\""}', "e.9"),
    (b'{"event_id":"e.4","session_id":"s"}', "e.4"),
    (b'{"type":"x","event_id":"e\\"5"}', 'e"5'),
    (b'{"type":"x","event_id":7}', ""),
    ('{"type":"x","event_id":"e.8"}', "e.8"),
]


@pytest.mark.parametrize(("data", "expected"), EVENT_ID_CASES)
def test_event_id_of_fast_and_slow_paths_agree(data: bytes | str, expected: str) -> None:
    assert event_id_of(data) == expected


# --- where an orphaned response goes on (node loss) ------------------------------

R = "resp_1"


def _ev(kind: str, value: str = "") -> bytes:
    """One logged event of response :data:`R`, in a short notation."""
    from uamp_proto import events as ev_
    from uamp_proto import types as ty_
    from uamp_proto.codec import encode

    event: ev_.Event
    if kind == "text":
        event = ev_.ResponseDelta(response_id=R, delta=ty_.DeltaText(text=value))
    elif kind == "call":
        frag = ty_.ToolCallFragment(id=value, name="f", arguments="{}")
        event = ev_.ResponseDelta(response_id=R, delta=ty_.DeltaToolCall(tool_call=frag))
    elif kind == "result":
        res = ty_.ToolResultFragment(call_id=value, result="ok", status="completed")
        event = ev_.ResponseDelta(response_id=R, delta=ty_.DeltaToolResult(tool_result=res))
    elif kind in ("checkpoint", "restored"):
        event = ev_.Progress(target="response", target_id=R, stage=kind, message=value)
    elif kind == "other":  # another response's checkpoint: not this one's
        event = ev_.Progress(target="response", target_id="resp_2", stage="checkpoint")
    elif kind == "done":
        event = ev_.ResponseDone(
            response_id=R, response=ty_.ResponseOutput(id=R, status="completed", output=[])
        )
    else:
        raise AssertionError(kind)
    return encode(event)


@pytest.mark.parametrize(
    ("log", "checkpoint", "text", "superseded"),
    [
        # No checkpoint: nothing to go on from (ends ``interrupted``).
        ([("text", "a")], None, None, None),
        ([("other", "")], None, None, None),
        # Ended already: nothing to carry on.
        ([("checkpoint", "c1"), ("text", "a"), ("done", "")], None, None, None),
        # From the last checkpoint; what came after it is superseded.
        ([("text", "a"), ("checkpoint", "c1"), ("text", "b")], "c1", "a", 1),
        ([("checkpoint", "c1"), ("text", "a"), ("checkpoint", "c2")], "c2", "a", 0),
        # Carried on once already: from the restore, the superseded part gone.
        (
            [("text", "a"), ("checkpoint", "c1"), ("text", "b"), ("restored", "c1"), ("text", "c")],
            "c1",
            "a",
            1,
        ),
        (
            [
                ("checkpoint", "c1"),
                ("text", "b"),
                ("restored", "c1"),
                ("text", "c"),
                ("checkpoint", "c2"),
                ("text", "d"),
            ],
            "c2",
            "c",
            1,
        ),
    ],
)
def test_resume_point_table(
    log: list[tuple[str, str]], checkpoint: str | None, text: str | None, superseded: int | None
) -> None:
    from uamp_proto.resume import resume_point

    point = resume_point(R, [_ev(*e) for e in log])
    if checkpoint is None:
        assert point is None
        return
    assert point is not None
    assert (point.checkpoint, point.tracker.text, point.superseded) == (
        checkpoint,
        text,
        superseded,
    )


def test_resume_point_keeps_completed_tool_results_as_conversation() -> None:
    from uamp_proto.resume import resume_point

    logged = [_ev("call", "c"), _ev("result", "c"), _ev("checkpoint", "k"), _ev("text", "x")]
    point = resume_point(R, logged)
    assert point is not None
    roles = [(m.role, m.tool_call_id) for m in point.tracker.messages()]
    assert roles == [("assistant", None), ("tool", "c")]
