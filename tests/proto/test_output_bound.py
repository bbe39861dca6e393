"""A response's output is bounded (``ResponseTracker.max_output_bytes``).

The abuse: an agent that streams without end (or a client that makes one
repeat forever) grew the tracker, and the ``response.done`` built from it,
until the server ran out of memory; a hostile server does the same to a
client. Each kind of output is weighed before it is kept: exactly at the
bound is kept, one byte more is refused with ``OutputTooLarge`` and the
tracker is left as it was.
"""

from __future__ import annotations

import base64
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.connection import ConnectionConfig, ServerConnection
from uamp_proto.errors import LocalProtocolError, OutputTooLarge, RemoteProtocolError
from uamp_proto.ids import counter_ids
from uamp_proto.outcome import conclude
from uamp_proto.response import ITEM_BYTES, MAX_OUTPUT_BYTES, PART_BYTES, ResponseTracker

from .pair import Pair


def _text(n: int) -> ev.Event:
    return ev.ResponseDelta(delta=ty.DeltaText(text="x" * n))


def _args(n: int) -> ev.Event:
    fragment = ty.ToolCallFragment(id="c1", name="f", arguments="a" * n)
    return ev.ResponseDelta(delta=ty.DeltaToolCall(tool_call=fragment))


def _audio(n: int) -> ev.Event:
    return ev.AudioDelta(audio=base64.b64encode(b"\x01" * n).decode())


def _audio_delta(n: int) -> ev.Event:
    return ev.ResponseDelta(delta=ty.DeltaAudio(audio=base64.b64encode(b"\x01" * n).decode()))


def _thinking(n: int) -> ev.Event:
    return ev.Thinking(content="t" * n)


def _progress(n: int) -> ev.Event:
    progress = ty.ToolProgress(call_id="c1", text="p" * n)
    return ev.ResponseDelta(delta=ty.DeltaToolProgress(tool_progress=progress))


def _transcript(n: int) -> ev.Event:
    return ev.TranscriptDelta(transcript="w" * n)


def _client_call(n: int) -> ev.Event:
    return ev.ToolCall(call_id="c1", name="f", arguments="a" * n)


def _result(n: int) -> ev.Event:
    result = ty.ToolResultFragment(call_id="c1", result="r" * n)
    return ev.ResponseDelta(delta=ty.DeltaToolResult(tool_result=result))


#: Each kind of output: the event carrying ``n`` (at least 1) bytes of
#: content, and what its first event weighs besides them (the piece kept,
#: the item, and the ids it keeps).
KINDS: dict[str, tuple[Callable[[int], ev.Event], int]] = {
    "text": (_text, PART_BYTES + ITEM_BYTES),
    "tool arguments": (_args, PART_BYTES + ITEM_BYTES + len("c1") + len("f")),
    "audio.delta": (_audio, PART_BYTES + ITEM_BYTES),
    "audio delta": (_audio_delta, PART_BYTES + ITEM_BYTES),
    "thinking": (_thinking, PART_BYTES + ITEM_BYTES),
    "tool progress": (_progress, PART_BYTES + ITEM_BYTES + len("c1")),
    "transcript": (_transcript, PART_BYTES),
    # The item, and the call registered for its tool.result.
    "client tool call": (_client_call, PART_BYTES + 2 * ITEM_BYTES + len("c1") + len("f")),
    "tool result": (_result, PART_BYTES + ITEM_BYTES + len("c1")),
}


def _kept(tracker: ResponseTracker) -> tuple[object, ...]:
    """Everything a tracker shows of its output."""
    return (
        tracker.output,
        tracker.transcript,
        dict(tracker.tool_progress),
        tracker.pending_tool_calls,
        tracker.max_output_bytes - tracker._left,
    )


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("size", [1, 1000])
def test_exactly_at_the_bound_is_kept_one_byte_over_is_refused(kind: str, size: int) -> None:
    make, overhead = KINDS[kind]
    at = ResponseTracker("r", max_output_bytes=overhead + size)
    at.apply(make(size))
    assert at._left == 0
    over = ResponseTracker("r", max_output_bytes=overhead + size - 1)
    before = _kept(over)
    with pytest.raises(OutputTooLarge) as refused:
        over.apply(make(size))
    assert refused.value.code == "output_too_large"
    assert refused.value.limit == overhead + size - 1
    assert str(overhead + size - 1) in str(refused.value)
    assert _kept(over) == before  # nothing of the refused event was kept


@pytest.mark.parametrize(
    # A client tool call and a tool result are each an item of their own.
    "kind",
    [k for k in KINDS if k not in ("client tool call", "tool result")],
)
def test_a_later_event_of_the_same_item_weighs_its_content(kind: str) -> None:
    """The second event of a run (the text hot path, a thinking delta...)."""
    make, overhead = KINDS[kind]
    first = make(10)
    if kind == "thinking":
        second: ev.Event = ev.Thinking(content="t" * 5, is_delta=True)
    else:
        second = make(5)
    at = ResponseTracker("r", max_output_bytes=overhead + 10 + PART_BYTES + 5)
    at.apply(first)
    at.apply(second)
    assert at._left == 0
    over = ResponseTracker("r", max_output_bytes=overhead + 10 + PART_BYTES + 4)
    over.apply(first)
    before = _kept(over)
    with pytest.raises(OutputTooLarge):
        over.apply(second)
    assert _kept(over) == before


def test_the_default_bound_and_endless_empty_deltas() -> None:
    assert ResponseTracker("r").max_output_bytes == MAX_OUTPUT_BYTES == 32 * 1024 * 1024
    tracker = ResponseTracker("r", max_output_bytes=ITEM_BYTES + PART_BYTES + 3 + 10 * PART_BYTES)
    tracker.apply(_text(3))
    with pytest.raises(OutputTooLarge):
        for _ in range(1000):  # each keeps a piece, however short: bounded too
            tracker.apply(_text(0))
    assert len(tracker._slots[0].parts) == 11
    assert tracker.text == "xxx"


def test_one_character_deltas_are_bounded_in_memory_not_only_in_text() -> None:
    """A piece of text costs CPython about PART_BYTES besides its characters."""
    tracker = ResponseTracker("r", max_output_bytes=64 * 1024)
    with pytest.raises(OutputTooLarge):
        while True:
            tracker.apply(_text(1))
    assert len(tracker.text) == (64 * 1024 - ITEM_BYTES) // (PART_BYTES + 1)


def test_empty_items_cost_their_item() -> None:
    """Empty text and thinking in turn each make an item: bounded all the same."""
    tracker = ResponseTracker("r", max_output_bytes=10 * (ITEM_BYTES + PART_BYTES))
    with pytest.raises(OutputTooLarge):
        for _ in range(100):
            tracker.apply(_text(0))
            tracker.apply(ev.Thinking(content=""))
    assert len(tracker.output) == 10


def test_tool_call_done_ids_and_tool_results_are_weighed() -> None:
    tracker = ResponseTracker("r", max_output_bytes=3 * (ITEM_BYTES + 2))
    for i in range(3):
        tracker.apply(ev.ToolCallDone(call_id=f"c{i}"))
    tracker.apply(ev.ToolCallDone(call_id="c0"))  # known: weighs nothing
    with pytest.raises(OutputTooLarge):
        tracker.apply(ev.ToolCallDone(call_id="c3"))
    call, result = PART_BYTES + 2 * ITEM_BYTES + 3, PART_BYTES + ITEM_BYTES + 3
    answered = ResponseTracker("r", max_output_bytes=call + result)
    answered.apply(_client_call(0))
    with pytest.raises(OutputTooLarge):
        answered.add_tool_result("c1", "abcd")
    assert answered.pending_tool_calls  # still waiting
    answered.add_tool_result("c1", "abc")
    assert not answered.pending_tool_calls


def test_a_restored_checkpoint_gives_back_what_it_rolled_back() -> None:
    tracker = ResponseTracker("r", max_output_bytes=ITEM_BYTES + 2 * PART_BYTES + 10)
    tracker.apply(_text(4))
    tracker.apply(ev.Progress(target="response", target_id="r", stage="checkpoint"))
    tracker.apply(_text(6))
    with pytest.raises(OutputTooLarge):
        tracker.apply(_text(1))
    tracker.apply(ev.Progress(target="response", target_id="r", stage="restored"))
    tracker.apply(_text(6))  # the rolled-back six bytes are free again
    assert tracker.text == "x" * 10


@given(
    st.integers(min_value=1, max_value=800),
    st.lists(
        st.tuples(st.sampled_from(["text", "thinking", "tool arguments"]), st.integers(0, 60)),
        max_size=40,
    ),
)
def test_the_bound_against_a_model(bound: int, events: list[tuple[str, int]]) -> None:
    """What is kept never passes the bound; an event is refused exactly when it would."""
    tracker = ResponseTracker("r", max_output_bytes=bound)
    used = 0
    last: str | None = None
    called = False
    for kind, size in events:
        if kind == "thinking":
            event: ev.Event = ev.Thinking(content="t" * size, is_delta=True)
            cost = size + PART_BYTES + (ITEM_BYTES if last != "thinking" else 0)
        elif kind == "text":
            event = _text(size)
            cost = size + PART_BYTES + (ITEM_BYTES if last != "text" else 0)
        else:
            event = _args(size)  # always call c1: one item, weighed once with its ids
            cost = (size + PART_BYTES if size else 0) + (ITEM_BYTES + 3 if not called else 0)
        if used + cost > bound:
            before = _kept(tracker)
            with pytest.raises(OutputTooLarge):
                tracker.apply(event)
            assert _kept(tracker) == before
            continue
        tracker.apply(event)
        used += cost
        if kind != "tool arguments":
            last = kind
        elif not called:  # later fragments join that item, wherever it is
            called, last = True, kind
        assert tracker.max_output_bytes - tracker._left == used <= bound


def test_a_turn_past_the_bound_ends_output_too_large() -> None:
    tracker = ResponseTracker("r", max_output_bytes=100)
    with pytest.raises(OutputTooLarge) as refused:
        tracker.apply(_text(101))
    status, final, unexpected = conclude(tracker, refused.value, False, session_id="s")
    assert (status, unexpected) == ("failed", False)
    assert isinstance(final, ev.ResponseErrorEvent)
    assert final.error.code == "output_too_large"
    assert final.error.details == {"max_output_bytes": 100}


# --- the connection ---------------------------------------------------------------


def _server(bound: int) -> tuple[ServerConnection, str]:
    conn = ServerConnection(ConnectionConfig(ids=counter_ids(1), max_response_output_bytes=bound))
    conn.receive(b'{"type":"session.create","uamp_version":"1.0","session_id":"s1"}')
    conn.next_event()
    conn.accept("s1")
    conn.receive(b'{"type":"input.text","session_id":"s1","text":"go"}')
    conn.next_event()
    conn.receive(b'{"type":"response.create","session_id":"s1"}')
    conn.next_event()
    tracker = conn.sessions["s1"].response
    assert tracker is not None and tracker.max_output_bytes == bound
    conn.send(ev.ResponseCreated(session_id="s1", response_id=tracker.response_id))
    conn.data_to_send()
    return conn, tracker.response_id


@pytest.mark.parametrize("plain", [True, False], ids=["hot path", "general path"])
def test_a_server_send_past_the_bound_raises_and_changes_nothing(plain: bool) -> None:
    conn, rid = _server(ITEM_BYTES + PART_BYTES + 10)
    ids = {"session_id": "s1", "response_id": rid}
    conn.send(ev.ResponseDelta(delta=ty.DeltaText(text="x" * 10)), **ids)
    over = ev.ResponseDelta(delta=ty.DeltaText(text="y"))
    if not plain:
        over = ev.ResponseDelta(delta=ty.DeltaText(text="y"), timestamp=1)
    # Not a LocalProtocolError: a binding that drops refused events must not drop this.
    assert not issubclass(OutputTooLarge, LocalProtocolError)
    with pytest.raises(OutputTooLarge):
        conn.send(over, **ids)
    with pytest.raises(OutputTooLarge):
        conn.send(ev.Thinking(content="z"), **ids)
    tracker = conn.sessions["s1"].response
    assert tracker is not None and tracker.text == "x" * 10
    # The response ends with response.error, and the session goes on.
    conn.send(tracker.error_event("output_too_large", "past the bound", session_id="s1"))
    assert conn.sessions["s1"].response is None
    conn.receive(b'{"type":"input.text","session_id":"s1","text":"again"}')
    conn.next_event()
    conn.receive(b'{"type":"response.create","session_id":"s1"}')
    conn.next_event()
    assert conn.sessions["s1"].response is not None


def test_a_server_past_the_clients_bound_is_a_remote_error_and_a_cancel() -> None:
    pair = Pair(max_response_output_bytes=ITEM_BYTES + PART_BYTES + 10)
    sid = pair.open()
    rid = pair.start_response(sid)
    pair.server_sends(
        ev.ResponseDelta(session_id=sid, response_id=rid, delta=ty.DeltaText(text="a" * 10))
    )
    data = pair.server.send(
        ev.ResponseDelta(session_id=sid, response_id=rid, delta=ty.DeltaText(text="b"))
    )
    pair.client.receive(data)
    with pytest.raises(RemoteProtocolError) as refused:
        pair.client.next_event()
    assert refused.value.code == "output_too_large"
    assert refused.value.session_id == sid
    # The client ended the response there, and owes the server its cancel.
    assert pair.client.session(sid).response is None
    owed = pair.client.data_to_send()
    assert len(owed) == 1
    cancel = pair.to_server(owed[0])
    assert isinstance(cancel, ev.ResponseCancel) and cancel.response_id == rid
    # More of that response is refused, not kept.
    pair.client.receive(
        pair.server.send(
            ev.ResponseDelta(session_id=sid, response_id=rid, delta=ty.DeltaText(text="c"))
        )
    )
    with pytest.raises(RemoteProtocolError):
        pair.client.next_event()


@given(
    st.integers(min_value=1, max_value=300),
    st.lists(
        st.tuples(st.sampled_from(["text", "thinking", "tool arguments"]), st.integers(0, 40)),
        max_size=12,
    ),
)
def test_a_new_text_item_as_the_general_path_makes_it(
    bound: int, events: list[tuple[str, int]]
) -> None:
    """The delta's inline new text item (the first delta) against ``_last``, the general path.

    Same output, same bytes left, same refusal (message and all).
    """
    fast = ResponseTracker("r", max_output_bytes=bound)
    slow = ResponseTracker("r", max_output_bytes=bound)
    for kind, size in events:
        event = {"text": _text, "thinking": _thinking, "tool arguments": _args}[kind](size)
        general = kind == "text" and not (slow._slots and slow._slots[-1].kind == "text")
        outcomes: list[str | None] = []
        for tracker, via_last in ((fast, False), (slow, general)):
            try:
                if via_last:
                    tracker._last("text", size + PART_BYTES).parts.append("x" * size)
                else:
                    tracker.apply(event)
                outcomes.append(None)
            except OutputTooLarge as exc:
                outcomes.append(str(exc))
        assert outcomes[0] == outcomes[1]
        assert _kept(fast) == _kept(slow)
