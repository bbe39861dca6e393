"""The Vercel AI SDK adapter, sans-IO: chat requests in, UI message chunks out."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests._support.fuzz import examples, shaped, words
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.adapters.ai_sdk import (
    PHASES,
    AiSdkError,
    Phase,
    StreamEncoder,
    parse_chat_request,
    replay_chunks,
    turn_request,
)
from uamp_proto.errors import LocalProtocolError
from uamp_proto.ids import counter_ids


def text(t: str) -> ev.ResponseDelta:
    return ev.ResponseDelta(delta=ty.DeltaText(text=t))


def fragment(call_id: str, name: str | None = None, args: str | None = None) -> ev.ResponseDelta:
    frag = ty.ToolCallFragment(id=call_id, name=name, arguments=args)
    return ev.ResponseDelta(delta=ty.DeltaToolCall(tool_call=frag))


def result(call_id: str, value: str, status: str = "completed") -> ev.ResponseDelta:
    res = ty.ToolResultFragment(call_id=call_id, result=value, status=status)
    return ev.ResponseDelta(delta=ty.DeltaToolResult(tool_result=res))


def step(stage: str) -> ev.Progress:
    return ev.Progress(target="response", stage=stage)


def encode(*events: ev.Event, client: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    enc = StreamEncoder("m1", counter_ids(), client_tools=client)
    out = enc.start()
    for e in events:
        out += enc.feed(e)
    return out + enc.finish()


def types(chunks: list[dict[str, Any]]) -> list[str]:
    return [c["type"] for c in chunks]


# --- the encoder's phases -------------------------------------------------------------------

ACTIONS = ("start", "event", "finish", "error")


@pytest.mark.parametrize("phase", list(Phase))
@pytest.mark.parametrize("action", ACTIONS)
def test_every_phase_and_action(phase: Phase, action: str) -> None:
    enc = StreamEncoder("m1", counter_ids())
    enc.phase = phase
    call = {
        "start": enc.start,
        "event": lambda: enc.feed(text("x")),
        "finish": enc.finish,
        "error": lambda: enc.error("boom"),
    }[action]
    expected = PHASES.get((phase, action))
    if expected is None:
        with pytest.raises(LocalProtocolError):
            call()
    else:
        call()
        assert enc.phase is expected


# --- events to chunks -------------------------------------------------------------------------


def test_text_opens_a_step_and_every_part_is_closed() -> None:
    assert types(encode(text("a"), text("b"))) == [
        "start",
        "start-step",
        "text-start",
        "text-delta",
        "text-delta",
        "text-end",
        "finish-step",
        "finish",
    ]


def test_text_after_a_tool_output_starts_a_new_step_without_step_events() -> None:
    chunks = encode(
        fragment("c1", "add", '{"a":'), fragment("c1", None, "1}"), result("c1", "1"), text("ok")
    )
    assert types(chunks) == [
        "start",
        "start-step",
        "tool-input-start",
        "tool-input-delta",
        "tool-input-delta",
        "tool-input-available",
        "tool-output-available",
        "finish-step",
        "start-step",
        "text-start",
        "text-delta",
        "text-end",
        "finish-step",
        "finish",
    ]
    available = chunks[5]
    assert available["input"] == {"a": 1}
    assert available["dynamic"] is True and available["providerExecuted"] is True


def test_parallel_tool_outputs_share_their_step() -> None:
    chunks = encode(
        fragment("c1", "t", "{}"), fragment("c2", "t", "{}"), result("c1", "1"), result("c2", "2")
    )
    assert types(chunks).count("start-step") == 1


def test_the_runtimes_step_marks_become_step_chunks() -> None:
    chunks = encode(step("step_start"), text("a"), step("step_end"), step("step_start"), text("b"))
    assert types(chunks).count("start-step") == 2
    assert types(chunks).count("finish-step") == 2


def test_a_failed_tool_is_an_output_error() -> None:
    chunks = encode(fragment("c1", "t", "{}"), result("c1", "no such city", "failed"))
    assert chunks[-3] == {
        "type": "tool-output-error",
        "toolCallId": "c1",
        "errorText": "no such city",
        "dynamic": True,
        "providerExecuted": True,
    }


def test_a_client_tool_is_static_and_finishes_with_tool_calls() -> None:
    call = ev.ToolCall(call_id="c1", name="get_weather", arguments='{"city":"Paris"}')
    chunks = encode(text("Checking."), call, client=frozenset({"get_weather"}))
    assert types(chunks)[4:] == [
        "text-end",
        "tool-input-start",
        "tool-input-available",
        "finish-step",
        "finish",
    ]
    assert chunks[6] == {
        "type": "tool-input-available",
        "toolCallId": "c1",
        "toolName": "get_weather",
        "input": {"city": "Paris"},
    }
    assert chunks[-1]["finishReason"] == "tool-calls"


def test_a_streamed_client_call_is_made_available_once() -> None:
    chunks = encode(
        fragment("c1", "get_weather", '{"city":"Paris"}'),
        ev.ToolCall(call_id="c1", name="get_weather", arguments='{"city":"Paris"}'),
        client=frozenset({"get_weather"}),
    )
    assert types(chunks).count("tool-input-available") == 1
    assert "dynamic" not in chunks[2]


def test_reasoning_parts() -> None:
    chunks = encode(
        ev.Thinking(content="hm", is_delta=True),
        ev.Thinking(content="mm", is_delta=True),
        ev.Thinking(content="whole thought"),
        text("answer"),
    )
    assert types(chunks) == [
        "start",
        "start-step",
        "reasoning-start",
        "reasoning-delta",
        "reasoning-delta",
        "reasoning-end",
        "reasoning-start",
        "reasoning-delta",
        "reasoning-end",
        "text-start",
        "text-delta",
        "text-end",
        "finish-step",
        "finish",
    ]


def test_usage_goes_into_the_finish_metadata() -> None:
    usage = ev.UsageDelta(delta=ty.UsageStats(input_tokens=3, output_tokens=4))
    enc = StreamEncoder("m1", counter_ids())
    enc.start()
    enc.feed(usage)
    enc.feed(usage)
    assert enc.finish(metadata={"signature": "s"})[-1] == {
        "type": "finish",
        "finishReason": "stop",
        "messageMetadata": {
            "usage": {"inputTokens": 6, "outputTokens": 8, "totalTokens": 14},
            "signature": "s",
        },
    }


def test_an_error_closes_what_is_open_then_errors_and_finishes() -> None:
    enc = StreamEncoder("m1", counter_ids())
    enc.start()
    enc.feed(text("half"))
    assert types(enc.error("boom")) == ["text-end", "finish-step", "error", "finish"]


# --- requests --------------------------------------------------------------------------------


def user(t: str, mid: str = "u1") -> dict[str, Any]:
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": t}]}


def test_a_tool_round_becomes_call_result_then_text() -> None:
    assistant = {
        "id": "a1",
        "role": "assistant",
        "parts": [
            {"type": "step-start"},
            {"type": "text", "text": "Let me add."},
            {
                "type": "dynamic-tool",
                "toolName": "add",
                "toolCallId": "c1",
                "state": "output-available",
                "input": {"a": 2, "b": 3},
                "output": "5",
            },
            {"type": "step-start"},
            {"type": "text", "text": "5"},
            {"type": "tool-get_weather", "toolCallId": "c2", "state": "output-available",
             "input": {"city": "Paris"}, "output": {"sky": "clear"}},
        ],
    }  # fmt: skip
    chat = parse_chat_request({"id": "chat", "messages": [user("2+3?"), assistant]})
    assert [(m.role, m.content) for m in chat.messages] == [
        ("user", "2+3?"),
        ("assistant", "Let me add."),
        ("tool", "5"),
        ("assistant", "5"),
        ("tool", '{"sky":"clear"}'),
    ]
    assert chat.messages[1].tool_calls == [
        ty.ToolInvocation(id="c1", name="add", arguments='{"a":2,"b":3}')
    ]
    assert chat.messages[3].tool_calls is not None
    assert chat.messages[3].tool_calls[0].name == "get_weather"
    assert chat.continued is assistant


def test_a_call_without_output_is_left_out() -> None:
    assistant = {
        "id": "a1",
        "role": "assistant",
        "parts": [{"type": "tool-x", "toolCallId": "c", "state": "input-available", "input": {}}],
    }
    chat = parse_chat_request({"id": "chat", "messages": [user("hi"), assistant]})
    assert [m.role for m in chat.messages] == ["user"]


def test_files_and_the_apps_body() -> None:
    message = {
        "id": "u1",
        "role": "user",
        "parts": [
            {"type": "text", "text": "look"},
            {"type": "file", "mediaType": "image/png", "url": "data:image/png;base64,AAAA"},
            {"type": "file", "mediaType": "application/pdf", "url": "https://x/y.pdf"},
        ],
    }
    body = {"id": "c", "messages": [message], "trigger": "submit-message", "temperature": 1}
    chat = parse_chat_request(body)
    items = chat.messages[0].content_items
    assert items is not None
    assert isinstance(items[1], ty.ImageContent) and items[1].image == "AAAA"
    assert isinstance(items[2], ty.FileContent)
    turn = turn_request(chat, agent="a", response_id="r")
    assert turn.session_id == "c" and turn.metadata["ai_sdk_body"] == {"temperature": 1}


@pytest.mark.parametrize(
    ("body", "names"),
    [
        ([], "body"),
        ({"messages": []}, "'id'"),
        ({"id": "x" * 300, "messages": []}, "'id'"),
        ({"id": "c"}, "'messages'"),
        ({"id": "c", "messages": [], "trigger": "resume"}, "'trigger'"),
        ({"id": "c", "messages": [{"id": "m", "role": "tool", "parts": []}]}, "role"),
        ({"id": "c", "messages": [{"id": "m", "role": "user"}]}, "parts"),
        ({"id": "c", "messages": [{"id": "m", "role": "user", "parts": [{"type": "text"}]}]},
         "text"),
        ({"id": "c", "messages": [], "tools": [{"type": "function"}]}, "tools"),
    ],
)  # fmt: skip
def test_bad_requests_name_the_field(body: Any, names: str) -> None:
    with pytest.raises(AiSdkError) as err:
        parse_chat_request(body)
    assert names in err.value.message


_part = shaped(
    {"type": words("text", "file", "step-start", "reasoning", "dynamic-tool", "tool-x")},
    {
        "text": st.text(max_size=8),
        "toolCallId": st.text(max_size=4),
        "toolName": st.text(max_size=4),
        "state": words("output-available", "output-error", "input-available"),
        "mediaType": words("image/png"),
        "url": words("data:image/png;base64,AA", "https://x"),
    },
)
_ui_message = shaped(
    {
        "id": st.text(max_size=4),
        "role": words("user", "assistant", "system"),
        "parts": st.lists(_part, max_size=3),
    }
)
_body = shaped({"id": st.text(max_size=6), "messages": st.lists(_ui_message, max_size=3)})


@settings(max_examples=examples(300), deadline=None)
@given(_body)
def test_any_body_is_a_request_or_our_error(body: Any) -> None:
    try:
        chat = parse_chat_request(body)
    except AiSdkError:
        return
    if chat.continued is not None:
        replay_chunks(chat.continued, counter_ids())


def test_replay_rebuilds_a_continued_messages_parts() -> None:
    message = {
        "id": "a1",
        "role": "assistant",
        "parts": [
            {"type": "step-start"},
            {"type": "text", "text": "hi"},
            {"type": "tool-w", "toolCallId": "c", "state": "output-available",
             "input": {}, "output": 1},
        ],
    }  # fmt: skip
    assert types(replay_chunks(message, counter_ids())) == [
        "start-step",
        "text-start",
        "text-delta",
        "text-end",
        "tool-input-available",
        "tool-output-available",
        "finish-step",
    ]


# --- the text-delta fast path ------------------------------------------------------------

_EVENTS = st.one_of(
    st.builds(text, st.text(max_size=8)),
    st.builds(lambda c, t: ev.Thinking(content=t, is_delta=c), st.booleans(), st.text(max_size=4)),
    st.builds(
        fragment, st.sampled_from(["c1", "c2"]), st.sampled_from([None, "f"]), st.text(max_size=3)
    ),
    st.builds(result, st.sampled_from(["c1", "c2"]), st.text(max_size=3)),
    st.builds(step, st.sampled_from(["step_start", "step_end"])),
)


@given(st.lists(_EVENTS, max_size=30))
@settings(max_examples=300)
def test_text_frame_is_the_frame_feed_makes(events: list[ev.Event]) -> None:
    """``text_frame`` (when it answers) gives the very bytes of ``frame(feed(...))``."""
    from uamp_proto.adapters.ai_sdk import frame

    fast = StreamEncoder("m1", counter_ids(), client_tools=frozenset({"f"}))
    slow = StreamEncoder("m1", counter_ids(), client_tools=frozenset({"f"}))
    fast_out = [frame(c) for c in fast.start()]
    slow_out = [frame(c) for c in slow.start()]
    shortcuts = 0
    for event in events:
        data = None
        if isinstance(event, ev.ResponseDelta) and isinstance(event.delta, ty.DeltaText):
            data = fast.text_frame(event.delta.text)
        if data is not None:
            shortcuts += 1
            fast_out.append(data)
        else:
            fast_out += [frame(c) for c in fast.feed(event)]
        slow_out += [frame(c) for c in slow.feed(event)]
    fast_out += [frame(c) for c in fast.finish()]
    slow_out += [frame(c) for c in slow.finish()]
    assert fast_out == slow_out
    assert shortcuts <= sum(isinstance(e, ev.ResponseDelta) for e in events)


def test_text_frame_takes_the_hot_path_only_inside_an_open_text_part() -> None:
    enc = StreamEncoder("m1", counter_ids())
    enc.start()
    assert enc.text_frame("a") is None  # no part open yet: feed opens it
    enc.feed(text("a"))
    assert enc.text_frame("b") == b'data: {"type":"text-delta","id":"txt_1","delta":"b"}\n\n'
    assert enc.text_frame("") is None
    enc.feed(fragment("c1", "t", "{}"))  # a tool call closes the text part
    assert enc.text_frame("c") is None
    after = StreamEncoder("m1", counter_ids())
    after.start()
    for event in (result("c1", ""), text("a"), result("c1", "")):
        after.feed(event)  # a known call's output: the next text opens a new step
    assert after.text_frame("b") is None
