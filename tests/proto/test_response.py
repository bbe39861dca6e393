"""The response tracker: lifecycle and accumulation of deltas into output."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.errors import RemoteProtocolError
from uamp_proto.response import ResponseState, ResponseTracker, _add_fields, add_usage


def _text(t: str) -> ev.ResponseDelta:
    return ev.ResponseDelta(delta=ty.DeltaText(text=t))


def _frag(call_id: str, name: str | None, args: str | None) -> ev.ResponseDelta:
    return ev.ResponseDelta(
        delta=ty.DeltaToolCall(tool_call=ty.ToolCallFragment(id=call_id, name=name, arguments=args))
    )


@pytest.mark.parametrize(
    ("terminal", "state"),
    [
        (
            ev.ResponseDone(response=ty.ResponseOutput(status="completed", output=[])),
            ResponseState.COMPLETED,
        ),
        (ev.ResponseCancelled(), ResponseState.CANCELLED),
        (ev.ResponseErrorEvent(error=ty.ErrorInfo(code="x", message="y")), ResponseState.FAILED),
    ],
)
def test_lifecycle_states(terminal: ev.Event, state: ResponseState) -> None:
    t = ResponseTracker("r")
    assert t.state is ResponseState.REQUESTED and not t.is_finished
    t.apply(ev.ResponseCreated(response_id="r"))
    assert t.state is ResponseState.IN_PROGRESS
    t.apply(terminal)
    assert t.state is state and t.is_finished


def test_text_concatenates_and_items_keep_their_order() -> None:
    t = ResponseTracker("r")
    for event in (
        _text("The weather "),
        _text("is"),
        ev.Thinking(content="check ", is_delta=True),
        ev.Thinking(content="units", is_delta=True),
        _frag("c1", "search", '{"q":'),
        _text(" sunny"),
        _frag("c1", None, '"Paris"}'),
        ev.Thinking(content="a complete thought", is_delta=False),
    ):
        t.apply(event)
    assert t.output == [
        ty.TextContent(text="The weather is"),
        ty.ThinkingContent(thinking="check units"),
        ty.ToolCallContent(
            tool_call=ty.ToolInvocation(id="c1", name="search", arguments='{"q":"Paris"}')
        ),
        ty.TextContent(text=" sunny"),
        ty.ThinkingContent(thinking="a complete thought"),
    ]
    assert t.text == "The weather is sunny"
    assert t.thinking == "check unitsa complete thought"


def test_tool_calls_join_fragments_per_call_id() -> None:
    t = ResponseTracker("r")
    t.apply(_frag("a", "add", '{"x":'))
    t.apply(_frag("b", "mul", '{"y":'))
    t.apply(_frag("a", None, "1}"))
    t.apply(_frag("b", None, "2}"))
    assert t.tool_calls == [
        ty.ToolInvocation(id="a", name="add", arguments='{"x":1}'),
        ty.ToolInvocation(id="b", name="mul", arguments='{"y":2}'),
    ]


def test_server_tool_results_and_progress() -> None:
    t = ResponseTracker("r")
    t.apply(
        ev.ResponseDelta(
            delta=ty.DeltaToolProgress(
                tool_progress=ty.ToolProgress(call_id="s1", text="searching")
            )
        )
    )
    t.apply(
        ev.ResponseDelta(
            delta=ty.DeltaToolResult(
                tool_result=ty.ToolResultFragment(call_id="s1", result="42", status="ok")
            )
        )
    )
    t.apply(ev.ToolCallDone(call_id="s1"))
    assert t.tool_progress == {"s1": ["searching"]}
    assert t.output == [ty.ToolResultContent(tool_result=ty.ToolOutput(call_id="s1", result="42"))]
    assert t.completed_tool_calls == {"s1"}


def test_audio_chunks_join_into_one_item() -> None:
    t = ResponseTracker("r")
    t.apply(ev.ResponseDelta(delta=ty.DeltaAudio(audio=base64.b64encode(b"abc").decode())))
    t.apply(ev.AudioDelta(audio=base64.b64encode(b"de").decode()))
    t.apply(ev.TranscriptDelta(transcript="hel"))
    t.apply(ev.TranscriptDelta(transcript="lo"))
    (item,) = t.output
    assert isinstance(item, ty.AudioContent)
    assert base64.b64decode(item.audio) == b"abcde"  # type: ignore[arg-type]
    assert t.transcript == "hello"


def test_usage_deltas_accumulate_and_done_usage_wins() -> None:
    t = ResponseTracker("r")
    t.apply(ev.UsageDelta(delta=ty.UsageStats(input_tokens=10, cost=ty.UsageCost(total_cost=0.5))))
    t.apply(
        ev.UsageDelta(
            delta=ty.UsageStats(
                output_tokens=5, cached_tokens=2, cost=ty.UsageCost(total_cost=0.25)
            )
        )
    )
    usage = t.usage
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (10, 5, 15)
    assert usage.cached_tokens == 2 and usage.cost is not None and usage.cost.total_cost == 0.75
    final = ty.UsageStats(input_tokens=1, output_tokens=1, total_tokens=2)
    t.apply(ev.ResponseDone(response=ty.ResponseOutput(status="completed", output=[], usage=final)))
    assert t.usage == final


def test_add_usage_keeps_absent_fields_absent() -> None:
    assert add_usage(None, None) is None
    summed = add_usage(
        ty.UsageStats(input_tokens=1), ty.UsageStats(audio=ty.AudioUsage(input_seconds=1.5))
    )
    assert summed == ty.UsageStats(input_tokens=1, audio=ty.AudioUsage(input_seconds=1.5))


def test_client_tool_calls_must_be_answered_once() -> None:
    t = ResponseTracker("r")
    t.apply(ev.ToolCall(call_id="c1", name="f", arguments="{}"))
    t.apply(ev.ToolCall(call_id="c2", name="g", arguments="{}"))
    assert [c.id for c in t.pending_tool_calls] == ["c1", "c2"]
    out = t.add_tool_result("c2", '"ok"', is_error=False)
    assert out == ty.ToolOutput(call_id="c2", result='"ok"', is_error=False)
    assert [c.id for c in t.pending_tool_calls] == ["c1"]
    with pytest.raises(RemoteProtocolError, match="already answered"):
        t.add_tool_result("c2", "again")
    with pytest.raises(RemoteProtocolError, match="does not match"):
        t.add_tool_result("zzz", "x")


def test_streamed_call_then_tool_call_event_is_one_item() -> None:
    t = ResponseTracker("r")
    t.apply(_frag("c1", "f", '{"a"'))
    t.apply(ev.ToolCall(call_id="c1", name="f", arguments='{"a":1}'))
    assert t.output == [
        ty.ToolCallContent(tool_call=ty.ToolInvocation(id="c1", name="f", arguments='{"a":1}'))
    ]


def test_messages_split_at_tool_results() -> None:
    t = ResponseTracker("r")
    t.apply(_text("Let me check."))
    t.apply(ev.ToolCall(call_id="c1", name="f", arguments="{}"))
    t.add_tool_result("c1", "22")
    t.apply(_text("It is 22."))
    roles = [(m.role, m.content, m.tool_call_id) for m in t.messages()]
    assert roles == [
        ("assistant", "Let me check.", None),
        ("tool", "22", "c1"),
        ("assistant", "It is 22.", None),
    ]


def test_terminal_events_carry_the_accumulated_output() -> None:
    t = ResponseTracker("resp_1")
    t.apply(_text("partial"))
    cancelled = t.cancelled_event()
    assert cancelled.response_id == "resp_1"
    assert cancelled.partial_output == [ty.TextContent(text="partial")]
    done = t.done_event(signature="sig")
    assert done.response.output == [ty.TextContent(text="partial")]
    assert done.response.status == "completed" and done.signature == "sig"
    err = t.error_event("boom", "it broke", {"retry_after": 1})
    assert err.error.code == "boom" and err.error.details == {"retry_after": 1}


@pytest.mark.parametrize(
    ("a", "b", "total"),
    [
        (
            ty.UsageStats(input_tokens=1, output_tokens=2, cached_tokens=None),
            ty.UsageStats(input_tokens=3, cached_tokens=4),
            ty.UsageStats(input_tokens=4, output_tokens=2, cached_tokens=4),
        ),
        (
            ty.UsageStats(cost=ty.UsageCost(input_cost=0.5, currency="USD")),
            ty.UsageStats(cost=ty.UsageCost(input_cost=0.25, output_cost=1.0, currency="EUR")),
            ty.UsageStats(cost=ty.UsageCost(input_cost=0.75, output_cost=1.0, currency="USD")),
        ),
        (
            ty.UsageStats(cost=ty.UsageCost(total_cost=1.0)),
            ty.UsageStats(cost=ty.UsageCost(currency="USD")),
            ty.UsageStats(cost=ty.UsageCost(total_cost=1.0, currency="USD")),
        ),
        (
            ty.UsageStats(audio=ty.AudioUsage(input_seconds=1.0, output_seconds=2.0)),
            ty.UsageStats(audio=ty.AudioUsage(output_seconds=0.5), total_tokens=7),
            ty.UsageStats(
                audio=ty.AudioUsage(input_seconds=1.0, output_seconds=2.5), total_tokens=7
            ),
        ),
        (
            ty.UsageStats(input_tokens=1, unknown={"x": 1}),
            ty.UsageStats(input_tokens=1),
            ty.UsageStats(input_tokens=2),
        ),
    ],
)
def test_add_usage_sums_field_by_field(
    a: ty.UsageStats, b: ty.UsageStats, total: ty.UsageStats
) -> None:
    assert add_usage(a, b) == total
    assert add_usage(a, None) is a and add_usage(None, b) is b


@pytest.mark.parametrize(
    ("steps", "text", "calls"),
    [
        # restored rolls back to the last checkpoint of this response
        ([("t", "a"), ("cp", ""), ("t", "b"), ("rs", ""), ("t", "c")], "ac", []),
        # without a checkpoint, to nothing
        ([("t", "a"), ("rs", ""), ("t", "c")], "c", []),
        # a tool call made after the checkpoint is gone too
        ([("t", "a"), ("cp", ""), ("call", "x"), ("rs", ""), ("t", "b")], "ab", []),
        ([("call", "x"), ("cp", ""), ("t", "a"), ("rs", "")], "", ["x"]),
        # another response's markers change nothing
        ([("t", "a"), ("cp2", ""), ("t", "b"), ("rs2", "")], "ab", []),
    ],
)
def test_checkpoint_and_restored_table(
    steps: list[tuple[str, str]], text: str, calls: list[str]
) -> None:
    from uamp_proto import events as ev_
    from uamp_proto import types as ty_
    from uamp_proto.response import ResponseTracker

    tracker = ResponseTracker("r")
    for kind, value in steps:
        if kind == "t":
            tracker.apply(ev_.ResponseDelta(delta=ty_.DeltaText(text=value)))
        elif kind == "call":
            frag = ty_.ToolCallFragment(id=value, name="f", arguments="{}")
            tracker.apply(ev_.ResponseDelta(delta=ty_.DeltaToolCall(tool_call=frag)))
        else:
            stage = "checkpoint" if kind.startswith("cp") else "restored"
            target = "r2" if kind.endswith("2") else "r"
            tracker.apply(ev_.Progress(target="response", target_id=target, stage=stage))
    assert tracker.text == text
    assert [c.id for c in tracker.tool_calls] == calls


_COUNT = st.none() | st.integers(min_value=0, max_value=10**9) | st.booleans()
_USAGE = st.builds(
    ty.UsageStats,
    input_tokens=_COUNT,
    output_tokens=_COUNT,
    total_tokens=_COUNT,
    cached_tokens=_COUNT,
    cost=st.none() | st.builds(ty.UsageCost, input_cost=st.none() | st.floats(0, 10)),
    audio=st.none() | st.builds(ty.AudioUsage, input_seconds=st.none() | st.floats(0, 10)),
    unknown=st.sampled_from([{}, {"extra": 1}]),
)


@given(a=_USAGE, b=_USAGE)
def test_add_usage_of_token_counts_is_the_field_walk(a: ty.UsageStats, b: ty.UsageStats) -> None:
    """The shortcut for two records of token counts sums exactly as the general walk."""
    fast, walked = add_usage(a, b), _add_fields(a, b)
    assert fast == walked
    counts = ("input_tokens", "output_tokens", "total_tokens", "cached_tokens")
    assert [type(getattr(fast, f)) for f in counts] == [type(getattr(walked, f)) for f in counts]
    assert fast is not None and walked is not None and fast.unknown == walked.unknown
