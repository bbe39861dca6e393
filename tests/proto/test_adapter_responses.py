"""The Responses adapter without I/O: request parsing and the event renderer.

The renderer's promise is checked on any sequence of UAMP events (hypothesis):
the items it streams are the items :func:`output_items` gives the tracker's
finished output -- same indices, same ids -- its sequence numbers count from
0 without a gap, and rendering with ``after=N`` writes exactly the events
numbered above ``N`` of the full rendering (what a resumed stream sends).
"""

from __future__ import annotations

import re
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.adapters.completions import CompletionsError
from uamp_proto.adapters.responses import parse_request
from uamp_proto.adapters.responses_render import (
    StreamEncoder,
    output_items,
    stored_response,
    usage_object,
)
from uamp_proto.response import ResponseTracker

RID = "resp_abc"
ECHO: dict[str, Any] = {"created_at": 1, "model": "demo", "background": False}


def _parse(body: Any) -> Any:
    return parse_request(body, agent="demo", response_id=RID, session_id=RID, created_at=1)


def _frames(data: bytes) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for block in data.decode().split("\n\n"):
        if not block:
            continue
        kind = re.search(r"^event: (.*)$", block, re.M)
        payload = re.search(r"^data: (.*)$", block, re.M)
        assert kind and payload, block
        body = orjson.loads(payload.group(1))
        assert body["type"] == kind.group(1)
        out.append((kind.group(1), body))
    return out


# --- requests --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"model": "demo"}, "input", "missing_required_parameter"),
        ({"input": 5}, "input", "invalid_type"),
        ({"input": [{"role": "user", "content": "x"}] * 10_001}, "input", "invalid_value"),
        ({"input": [{"type": "web_search_call"}]}, "input[0].type", "unsupported_value"),
        ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0].type", "unsupported_value"),
        ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role", "invalid_value"),
        ({"input": [{"role": "user"}]}, "input[0].content", "missing_required_parameter"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]},
            "input[0].content[0].file_id",
            "unsupported_value",
        ),
        ({"input": [{"type": "function_call", "name": "f"}]}, "input[0].call_id",
         "missing_required_parameter"),
        ({"input": "x", "temperature": 3}, "temperature", "invalid_value"),
        ({"input": "x", "max_output_tokens": 0}, "max_output_tokens", "invalid_value"),
        ({"input": "x", "background": True, "store": False}, "store", "invalid_value"),
        ({"input": "x", "tool_choice": "required"}, "tool_choice", "invalid_value"),
        ({"input": "x", "text": {"format": {"type": "xml"}}}, "text.format.type", "invalid_value"),
        ({"input": "x", "metadata": {"k": 1}}, "metadata.k", "invalid_value"),
        ({"input": "x", "stream": "yes"}, "stream", "invalid_type"),
    ],
)  # fmt: skip
def test_bad_requests_name_their_parameter(body: dict[str, Any], param: str, code: str) -> None:
    with pytest.raises(CompletionsError) as err:
        _parse(body)
    assert (err.value.param, err.value.code, err.value.status) == (param, code, 400)


def test_items_become_the_conversation() -> None:
    parsed = _parse(
        {
            "model": "demo",
            "instructions": "be brief",
            "input": [
                {"role": "developer", "content": "rules"},
                {"role": "user", "content": [
                    {"type": "input_text", "text": "look: "},
                    {"type": "input_image", "image_url": "data:image/png;base64,AAAA"},
                ]},
                {"type": "message", "role": "assistant",
                 "content": [{"type": "output_text", "text": "calling", "annotations": []}]},
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"},
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {"type": "function_call_output", "call_id": "c1",
                 "output": [{"type": "input_text", "text": "one"}]},
                {"type": "function_call_output", "call_id": "c2", "output": "two"},
            ],
            "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
            "tool_choice": {"type": "function", "name": "f"},
            "temperature": 0.5,
            "max_output_tokens": 9,
            "reasoning": {"effort": "low"},
            "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}},
            "include": ["reasoning.encrypted_content"],  # ignored, as unknown fields are
        }
    )  # fmt: skip
    turn = parsed.turn
    assert [(m.role, m.content) for m in turn.messages] == [
        ("system", "rules"),
        ("user", "look: "),
        ("assistant", "calling"),
        ("tool", "one"),
        ("tool", "two"),
    ]
    image = turn.messages[1].content_items[1]  # type: ignore[index]
    assert isinstance(image, ty.ImageContent) and (image.image, image.format) == ("AAAA", "png")
    assert [c.id for c in turn.messages[2].tool_calls or ()] == ["c1", "c2"]
    assert turn.instructions == "be brief"
    assert turn.tool_choice == {"type": "function", "function": {"name": "f"}}
    assert turn.metadata["temperature"] == 0.5 and turn.metadata["max_tokens"] == 9
    assert turn.metadata["reasoning_effort"] == "low"
    assert turn.response_format is not None and turn.response_format.type == "json_schema"
    assert parsed.echo["tool_choice"] == {"type": "function", "name": "f"}
    # Listed input items: every item but the reasoning one, each with an id.
    assert len(parsed.input_items) == 7
    assert all(item["id"] for item in parsed.input_items)


@settings(max_examples=300, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=8),
        lambda inner: st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                ["input", "type", "role", "content", "text", "call_id", "name", "output",
                 "tools", "tool_choice", "stream", "store", "background", "metadata",
                 "image_url", "arguments", "format", "max_output_tokens", "temperature"]
            ),
            inner,
            max_size=5,
        ),
        max_leaves=20,
    )
)  # fmt: skip
def test_any_body_is_a_request_or_a_400(body: Any) -> None:
    try:
        _parse(body)
    except CompletionsError as exc:
        assert exc.status == 400 and exc.message


# --- rendering ---------------------------------------------------------------------


def _text(t: str) -> ev.Event:
    return ev.ResponseDelta(delta=ty.DeltaText(text=t))


_EVENTS = st.one_of(
    st.sampled_from(["a", "bc", ""]).map(_text),
    st.builds(
        lambda c, d, r: ev.Thinking(content=c, is_delta=d, redacted=r),
        st.sampled_from(["hm", ""]),
        st.booleans(),
        st.sampled_from([None, True]),
    ),
    st.sampled_from(["s1", "s2"]).map(
        lambda i: ev.ResponseDelta(
            delta=ty.DeltaToolCall(tool_call=ty.ToolCallFragment(id=i, name="own", arguments="{}"))
        )
    ),
    st.sampled_from(["s1", "s2"]).map(
        lambda i: ev.ResponseDelta(
            delta=ty.DeltaToolResult(tool_result=ty.ToolResultFragment(call_id=i, result="r"))
        )
    ),
    st.sampled_from(["k1", "k2", "k3"]).map(
        lambda i: ev.ToolCall(call_id=i, name="client", arguments='{"q":1}')
    ),
    st.just(ev.AudioDelta(audio="AAAA")),
    st.just(ev.UsageDelta(delta=ty.UsageStats(input_tokens=2, output_tokens=3))),
)


def _render(events: list[ev.Event], after: int = -1) -> tuple[bytes, ResponseTracker]:
    tracker = ResponseTracker(RID)
    encoder = StreamEncoder(RID, ECHO, after=after)
    out = encoder.sse(ev.ResponseCreated(response_id=RID))
    client_calls: set[str] = set()
    for event in events:
        if isinstance(event, ev.ToolCall):
            if event.call_id in client_calls:
                continue  # a call is asked once
            client_calls.add(event.call_id)
        tracker.apply(event)
        out += encoder.sse(event)
    out += encoder.sse(tracker.done_event())
    assert encoder.finished
    return out, tracker


@settings(max_examples=300, deadline=None)
@given(st.lists(_EVENTS, max_size=25))
def test_streamed_items_are_the_final_items(events: list[ev.Event]) -> None:
    calls = {e.call_id for e in events if isinstance(e, ev.ToolCall)}
    fragments = {
        e.delta.tool_call.id
        for e in events
        if isinstance(e, ev.ResponseDelta) and isinstance(e.delta, ty.DeltaToolCall)
    }
    results = {
        e.delta.tool_result.call_id
        for e in events
        if isinstance(e, ev.ResponseDelta) and isinstance(e.delta, ty.DeltaToolResult)
    }
    if calls & fragments or fragments - results:
        # A client call streamed as fragments first (its slot comes earlier),
        # or an own tool call with no result in a response that completed:
        # neither comes out of the agent runtime.
        return
    data, tracker = _render(events)
    frames = _frames(data)
    assert [f["sequence_number"] for _, f in frames] == list(range(len(frames)))
    done = [f["item"] for kind, f in frames if kind == "response.output_item.done"]
    final = frames[-1][1]["response"]
    assert frames[-1][0] == "response.completed"
    assert done == output_items(RID, tracker.output) == final["output"]
    assert [f["output_index"] for kind, f in frames if kind == "response.output_item.added"] == (
        list(range(len(done)))
    )
    text = "".join(f["delta"] for kind, f in frames if kind == "response.output_text.delta")
    assert text == tracker.text
    assert all(f["logprobs"] == [] for kind, f in frames if kind.startswith("response.output_t"))
    # The stored object says the same as the stream's last event.
    stored = stored_response(RID, ECHO, [ev.ResponseCreated(response_id=RID), tracker.done_event()])
    assert stored == final


@settings(max_examples=100, deadline=None)
@given(st.lists(_EVENTS, max_size=15), st.integers(min_value=-1, max_value=40))
def test_after_writes_exactly_the_later_events(events: list[ev.Event], after: int) -> None:
    full, _ = _render(events)
    resumed, _ = _render(events, after)
    later = [f for f in _frames(full) if f[1]["sequence_number"] > after]
    assert _frames(resumed) == later


@pytest.mark.parametrize(
    ("final", "status", "last"),
    [
        (ev.ResponseCancelled(response_id=RID), "cancelled", "response.failed"),
        (
            ev.ResponseErrorEvent(
                response_id=RID, error=ty.ErrorInfo(code="interrupted", message="lost")
            ),
            "incomplete",
            "response.incomplete",
        ),
        (
            ev.ResponseErrorEvent(
                response_id=RID, error=ty.ErrorInfo(code="rate_limited", message="slow down")
            ),
            "failed",
            "response.failed",
        ),
    ],
)
def test_how_a_response_that_did_not_complete_ends(final: ev.Event, status: str, last: str) -> None:
    encoder = StreamEncoder(RID, ECHO)
    data = encoder.sse(ev.ResponseCreated(response_id=RID)) + encoder.sse(_text("part"))
    frames = _frames(data + encoder.sse(final))
    assert frames[-1][0] == last
    response = frames[-1][1]["response"]
    assert response["status"] == status
    assert [i["content"][0]["text"] for i in response["output"]] == ["part"]
    assert response["output"][0]["status"] == "incomplete"
    if status == "failed":
        assert frames[-2][0] == "error" and frames[-2][1]["code"] == "rate_limited"
        assert response["error"] == {"code": "rate_limit_exceeded", "message": "slow down"}
    stored = stored_response(RID, ECHO, [ev.ResponseCreated(response_id=RID), _text("part"), final])
    assert stored["status"] == status


def test_max_output_tokens_reached_is_incomplete() -> None:
    echo = {**ECHO, "max_output_tokens": 3}
    done = ev.ResponseDone(
        response_id=RID,
        response=ty.ResponseOutput(
            id=RID,
            status="completed",
            output=[ty.TextContent(text="a b c")],
            usage=ty.UsageStats(input_tokens=1, output_tokens=3),
        ),
    )
    frames = _frames(StreamEncoder(RID, echo).sse(done))
    assert frames[-1][0] == "response.incomplete"
    response = frames[-1][1]["response"]
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert response["usage"] == usage_object(ty.UsageStats(input_tokens=1, output_tokens=3))
    assert response["usage"]["input_tokens_details"] == {
        "cached_tokens": 0,
        "cache_write_tokens": 0,
    }


def test_queued_then_in_progress() -> None:
    background = {**ECHO, "background": True}
    assert stored_response(RID, background, [])["status"] == "queued"
    running = stored_response(RID, background, [ev.ResponseCreated(response_id=RID), _text("x")])
    assert running["status"] == "in_progress" and running["usage"] is None
    assert running["output"][0]["content"][0]["text"] == "x"
