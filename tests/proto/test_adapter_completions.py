"""The sans-IO Chat Completions adapter: request parsing, errors, response shapes."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.adapters.completions import (
    SSE_DONE,
    ChunkEncoder,
    CompletionsError,
    completion_response,
    finish_reason_for,
    outcome_reply,
    output_items,
    parse_request,
    sse_data,
    usage_object,
)
from uamp_proto.outcome import ResponseOutcome
from uamp_proto.principal import Principal
from uamp_proto.responder import TurnRequest
from uamp_proto.response import ResponseTracker


def parse(body: Any):  # type: ignore[no-untyped-def]
    return parse_request(body, agent="demo", response_id="chatcmpl-1", session_id="sess_1")


def test_full_request_maps_to_a_turn() -> None:
    body = {
        "model": "demo",
        "messages": [
            {"role": "developer", "content": "rules"},
            {
                "role": "user",
                "name": "ann",
                "content": [
                    {"type": "text", "text": "see "},
                    {"type": "text", "text": "this"},
                    {"type": "image_url", "image_url": {"url": "https://x/i.png", "detail": "low"}},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                    {"type": "input_audio", "input_audio": {"data": "UklG", "format": "wav"}},
                    {
                        "type": "file",
                        "file": {
                            "file_data": "data:application/pdf;base64,JVBE",
                            "filename": "a.pdf",
                        },
                    },
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "42"}]},
        ],
        "tools": [
            {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
        ],
        "tool_choice": {"type": "function", "function": {"name": "f"}},
        "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": {}}},
        "temperature": 0.5,
        "max_tokens": 7,
        "n": 1,
        "stream": True,
        "stream_options": {"include_usage": True},
        "some_future_field": 1,
    }
    req = parse(orjson.dumps(body))
    turn = req.turn
    assert (req.model, req.stream, req.include_usage, req.max_tokens) == ("demo", True, True, 7)
    assert turn.response_id == "chatcmpl-1" and turn.session_id == "sess_1" and turn.agent == "demo"
    system, user, assistant, tool = turn.messages
    assert system == ty.Message(role="system", content="rules")
    assert user.content == "see this" and user.name == "ann"
    assert user.content_items == [
        ty.TextContent(text="see "),
        ty.TextContent(text="this"),
        ty.ImageContent(image=ty.MediaURL(url="https://x/i.png"), detail="low"),
        ty.ImageContent(image="AAAA", format="png"),
        ty.AudioContent(audio="UklG", format="wav"),
        ty.FileContent(file="JVBE", filename="a.pdf", mime_type="application/pdf"),
    ]
    assert assistant.tool_calls == [ty.ToolInvocation(id="c1", name="f", arguments="{}")]
    assert tool == ty.Message(role="tool", content="42", tool_call_id="c1")
    assert turn.tools[0].function.name == "f"
    assert turn.tool_choice == {"type": "function", "function": {"name": "f"}}
    assert turn.response_format == ty.ResponseFormat(
        type="json_schema", json_schema={"name": "s", "schema": {}}
    )
    assert turn.metadata == {"model": "demo", "temperature": 0.5, "max_tokens": 7}


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        (b"{oops", None, "invalid_json"),
        ([], None, "invalid_type"),
        ({}, "messages", "missing_required_parameter"),
        ({"messages": None}, "messages", "missing_required_parameter"),
        ({"messages": "hi"}, "messages", "invalid_type"),
        ({"messages": []}, "messages", "invalid_value"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role", "invalid_value"),
        ({"messages": [{"role": "user"}]}, "messages[0].content", "missing_required_parameter"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content", "invalid_type"),
        (
            {"messages": [{"role": "user", "content": [{"type": "video", "video": "x"}]}]},
            "messages[0].content[0].type",
            "invalid_value",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "file", "file": {"file_id": "f"}}]}
                ]
            },
            "messages[0].content[0].file.file_id",
            "unsupported_value",
        ),
        (
            {"messages": [{"role": "tool", "content": "x"}]},
            "messages[0].tool_call_id",
            "missing_required_parameter",
        ),
        (
            {"messages": [{"role": "assistant", "tool_calls": [{"id": "c", "function": {}}]}]},
            "messages[0].tool_calls[0].function.name",
            "missing_required_parameter",
        ),
        ({"messages": [{"role": "user", "content": "x"}], "n": 2}, "n", "unsupported_value"),
        (
            {"messages": [{"role": "user", "content": "x"}], "temperature": 3},
            "temperature",
            "invalid_value",
        ),
        (
            {"messages": [{"role": "user", "content": "x"}], "max_tokens": 0},
            "max_tokens",
            "invalid_value",
        ),
        (
            {"messages": [{"role": "user", "content": "x"}], "stream": "yes"},
            "stream",
            "invalid_type",
        ),
        (
            {"messages": [{"role": "user", "content": "x"}], "stream_options": {}},
            "stream_options",
            "invalid_value",
        ),
        (
            {"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"},
            "tool_choice",
            "invalid_value",
        ),
        (
            {
                "messages": [{"role": "user", "content": "x"}],
                "tools": [{"function": {"name": "a b"}}],
            },
            "tools[0].function.name",
            "invalid_value",
        ),
        (
            {
                "messages": [{"role": "user", "content": "x"}],
                "tools": [{"type": "function", "function": {"name": "a"}}],
                "tool_choice": {"type": "function", "function": {"name": "b"}},
            },
            "tool_choice.function.name",
            "invalid_value",
        ),
        (
            {"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "xml"}},
            "response_format.type",
            "invalid_value",
        ),
    ],
)
def test_bad_requests_raise_with_openai_error(body: Any, param: str | None, code: str) -> None:
    with pytest.raises(CompletionsError) as info:
        parse(body)
    err = info.value
    assert err.status == 400
    assert (err.param, err.code) == (param, code)
    assert err.body() == {
        "error": {
            "message": err.message,
            "type": "invalid_request_error",
            "param": param,
            "code": code,
        }
    }
    assert err.message


def test_completion_response_shape() -> None:
    usage = ty.UsageStats(input_tokens=3, output_tokens=4, cached_tokens=1)
    call = ty.ToolInvocation(id="c1", name="f", arguments='{"a":1}')
    body = completion_response(
        completion_id="chatcmpl-1",
        created=99,
        model="m",
        text="",
        tool_calls=[call],
        finish_reason="tool_calls",
        usage=usage,
    )
    assert body["object"] == "chat.completion" and body["created"] == 99
    message = body["choices"][0]["message"]
    assert message["content"] is None
    assert message["tool_calls"] == [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}
    ]
    assert body["usage"] == {
        "prompt_tokens": 3,
        "completion_tokens": 4,
        "total_tokens": 7,
        "prompt_tokens_details": {"cached_tokens": 1},
    }
    assert usage_object(None) == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}


def test_finish_reasons() -> None:
    call = ty.ToolInvocation(id="c", name="f", arguments="")
    used = ty.UsageStats(output_tokens=5)
    assert finish_reason_for([call], used, 5) == "tool_calls"
    assert finish_reason_for([], used, 5) == "length"
    assert finish_reason_for([], used, 6) == "stop"
    assert finish_reason_for([], used, None) == "stop"


def test_chunk_encoder_streams_text_and_tool_calls() -> None:
    enc = ChunkEncoder(completion_id="chatcmpl-1", created=5, model="m", include_usage=True)
    start = enc.start()
    assert start["choices"][0]["delta"]["role"] == "assistant" and start["usage"] is None
    assert enc.feed(ev.ResponseCreated(response_id="r")) == []
    [text] = enc.feed(ev.ResponseDelta(delta=ty.DeltaText(text="hi")))
    assert text["choices"][0]["delta"] == {"content": "hi"}
    first, args = enc.feed(ev.ToolCall(call_id="c1", name="f", arguments='{"x":1}'))
    assert first["choices"][0]["delta"]["tool_calls"] == [
        {"index": 0, "id": "c1", "type": "function", "function": {"name": "f", "arguments": ""}}
    ]
    assert args["choices"][0]["delta"]["tool_calls"] == [
        {"index": 0, "function": {"arguments": '{"x":1}'}}
    ]
    second = enc.feed(ev.ToolCall(call_id="c2", name="g", arguments=""))
    assert len(second) == 1 and second[0]["choices"][0]["delta"]["tool_calls"][0]["index"] == 1
    [think] = enc.feed(ev.Thinking(content="hmm"))
    assert think["choices"][0]["delta"] == {"reasoning_content": "hmm"}
    finish, usage = enc.finish("tool_calls", ty.UsageStats(input_tokens=1, output_tokens=2))
    assert finish["choices"][0] == {
        "index": 0,
        "delta": {},
        "logprobs": None,
        "finish_reason": "tool_calls",
    }
    assert usage["choices"] == [] and usage["usage"]["total_tokens"] == 3
    plain = ChunkEncoder(completion_id="x", created=1, model="m")
    assert "usage" not in plain.start() and len(plain.finish("stop", None)) == 1


def test_sse_framing() -> None:
    assert sse_data({"a": 1}) == b'data: {"a":1}\n\n'
    assert SSE_DONE == b"data: [DONE]\n\n"


def test_text_chunk_template_renders_the_same_bytes_as_the_generic_path() -> None:
    texts = ["tok ", "", 'quote " back \\ slash', "line\nbreak\r\n", "é 😀 \u2028"]
    texts.append("\x00uamp-text\x00")  # the template's own probe
    for include_usage in (False, True):
        for model in ("m", 'odd "\x00uamp-text\x00" model', "\u2028"):
            enc = ChunkEncoder(
                completion_id="chatcmpl-1", created=5, model=model, include_usage=include_usage
            )
            for text in texts:
                event = ev.ResponseDelta(delta=ty.DeltaText(text=text))
                generic = b"".join(sse_data(c) for c in enc.feed(event))
                assert enc.sse(event) == generic
                if text:
                    assert enc.text_sse(text) == generic


def test_sse_of_other_events_joins_their_chunks() -> None:
    enc = ChunkEncoder(completion_id="chatcmpl-1", created=5, model="m")
    call = ev.ToolCall(call_id="c1", name="f", arguments='{"a": 1}')
    twin = ChunkEncoder(completion_id="chatcmpl-1", created=5, model="m")
    assert enc.sse(call) == b"".join(sse_data(c) for c in twin.feed(call))
    assert enc.sse(ev.Progress(target="tool", message="working")) == b""


@pytest.mark.parametrize("role", ["system", "developer", "user", "assistant"])
@pytest.mark.parametrize("content", ["", "hello", "ünïcode\n"])
def test_plain_messages_parse_as_the_general_path_does(role: str, content: str) -> None:
    # Two keys take the shortcut; an explicit "name": null takes every check.
    def parsed(message: dict[str, object]) -> list[ty.Message]:
        return parse_request(
            {"messages": [message]}, agent="a", response_id="r", session_id="s"
        ).turn.messages

    plain = parsed({"role": role, "content": content})
    assert plain == parsed({"role": role, "content": content, "name": None})
    assert plain[0].role == ("system" if role == "developer" else role)


@pytest.mark.parametrize(
    ("message", "param"),
    [
        ({"role": "tool", "content": "x"}, "messages[0].tool_call_id"),
        ({"role": "robot", "content": "x"}, "messages[0].role"),
        ({"role": {}, "content": "x"}, "messages[0].role"),
        ({"role": [], "content": "x"}, "messages[0].role"),
        ({"role": "user", "content": 5}, "messages[0].content"),
        ({"role": "user", "content": None}, "messages[0].content"),
    ],
)
def test_two_key_messages_outside_the_shortcut_are_still_checked(
    message: dict[str, object], param: str
) -> None:
    with pytest.raises(CompletionsError) as info:
        parse_request({"messages": [message]}, agent="a", response_id="r", session_id="s")
    assert info.value.param == param


# --- the short ways of a plain request and a text-only reply -----------------------

_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-2, 2), st.text(max_size=4), st.just([]), st.just({})
)
_PLAIN = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "system", "developer", "assistant"]), "content": st.text()}
)
_MESSAGES = st.lists(
    st.one_of(
        _PLAIN,
        _PLAIN,
        st.fixed_dictionaries(
            {"role": st.sampled_from(["user", "assistant", "tool", "robot"])},
            optional={"content": st.one_of(st.text(max_size=4), _VALUES), "name": _VALUES},
        ),
        _VALUES,
    ),
    max_size=3,
)

_CALLER = Principal(id="p", scheme="api_key")


def _parsed_or_error(body: dict[str, Any]) -> Any:
    try:
        return parse_request(body, agent="a", response_id="r", session_id="s", principal=_CALLER)
    except CompletionsError as exc:
        return (exc.message, exc.param, exc.code, exc.status)


@settings(max_examples=300, deadline=None)
@given(
    messages=st.one_of(_MESSAGES, _VALUES),
    extra=st.fixed_dictionaries(
        {}, optional={"model": _VALUES, "stream": _VALUES, "x_other": _VALUES}
    ),
)
def test_a_plain_request_parses_as_the_general_path_does(
    messages: Any, extra: dict[str, Any]
) -> None:
    """No tools, format, n, options or tuning: the short way, held to every check.

    A ``"tools": null`` key, which changes nothing, makes the request take the long way.
    """
    body = {"messages": messages, **extra}
    short = _parsed_or_error(body)
    assert short == _parsed_or_error({**body, "tools": None})
    if not isinstance(short, tuple):
        assert type(short.turn) is TurnRequest and short.turn.principal is _CALLER


def _reference_reply(outcome: ResponseOutcome, request: Any) -> dict[str, Any]:
    """outcome_reply's general way: every field read off the tracker."""
    tracker, calls = outcome.tracker, outcome.pending_tool_calls
    return completion_response(
        completion_id="chatcmpl-1",
        created=7,
        model=request.model or request.turn.agent,
        text=tracker.text,
        tool_calls=calls,
        finish_reason=finish_reason_for(calls, tracker.usage, request.max_tokens),
        usage=tracker.usage,
        reasoning=tracker.thinking or None,
        content_items=output_items(tracker.output),
    )


_EVENTS = st.lists(
    st.one_of(
        st.builds(lambda t: ev.ResponseDelta(delta=ty.DeltaText(text=t)), st.text(max_size=3)),
        st.builds(lambda t: ev.Thinking(content=t, is_delta=True), st.text(max_size=3)),
        st.builds(
            lambda i: ev.ToolCall(call_id=f"c{i}", name="f", arguments="{}"), st.integers(0, 2)
        ),
        st.builds(
            lambda n: ev.UsageDelta(delta=ty.UsageStats(input_tokens=n, output_tokens=n)),
            st.integers(0, 9),
        ),
        st.just(ev.ResponseDelta(delta=ty.DeltaAudio(audio="AAAA"))),
    ),
    max_size=6,
)


@settings(max_examples=300, deadline=None)
@given(events=_EVENTS, max_tokens=st.sampled_from([None, 1, 100]))
def test_a_text_only_reply_is_the_general_reply(events: list[Any], max_tokens: Any) -> None:
    tracker = ResponseTracker("chatcmpl-1")
    for event in events:
        tracker.apply(event)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    request = parse(body)
    outcome = ResponseOutcome(status="completed", tracker=tracker, final=None)
    reply = outcome_reply(outcome, request, completion_id="chatcmpl-1", created=7)
    # The same bytes on the wire: key order too.
    assert orjson.dumps(reply) == orjson.dumps(_reference_reply(outcome, request))
    plain = tracker.plain_text
    only_text = all(type(i) is ty.TextContent for i in tracker.output)
    assert (plain is not None) == (only_text and not tracker.pending_tool_calls)
    if plain is not None:
        assert plain == tracker.text
