"""The Anthropic Messages adapter: request parsing, the stream encoder, stop sequences."""

from __future__ import annotations

import itertools
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.adapters import anthropic as wire


def parse(**body: Any) -> wire.MessagesRequest:
    body.setdefault("model", "m")
    body.setdefault("max_tokens", 10)
    body.setdefault("messages", [{"role": "user", "content": "hi"}])
    return wire.parse_request(body, agent="a", response_id="msg_1", session_id="s")


def test_a_full_request_becomes_a_turn() -> None:
    parsed = parse(
        system=[{"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}],
        messages=[
            {"role": "user", "content": "weather?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "x"},
                    {"type": "text", "text": "Let me look."},
                    {"type": "tool_use", "id": "t1", "name": "w", "input": {"city": "Paris"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "18C"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "t2",
                        "is_error": True,
                        "content": [{"type": "text", "text": "down"}],
                    },
                ],
            },
        ],
        tools=[{"name": "w", "input_schema": {"type": "object"}}],
        tool_choice={"type": "any"},
        temperature=0.5,
        thinking={"type": "enabled", "budget_tokens": 1024},
        metadata={"user_id": "u1"},
        stop_sequences=["END"],
        stream=True,
    )
    turn = parsed.turn
    assert turn.instructions == "Be brief."
    assert [(m.role, m.text) for m in turn.messages] == [
        ("user", "weather?"),
        ("assistant", "Let me look."),
        ("tool", "18C"),
        ("tool", "Error: down"),
    ]
    call = turn.messages[1].tool_calls[0]  # type: ignore[index]
    assert (call.id, call.name, orjson.loads(call.arguments)) == ("t1", "w", {"city": "Paris"})
    assert [m.tool_call_id for m in turn.messages[2:]] == ["t1", "t2"]
    assert turn.tool_choice == "required" and turn.tools[0].function.name == "w"
    assert turn.metadata == {
        "model": "m",
        "max_tokens": 10,
        "temperature": 0.5,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "user": "u1",
    }
    assert (parsed.stream, parsed.thinking, parsed.stop_sequences) == (True, True, ("END",))


def test_media_blocks() -> None:
    content = [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}},
        {"type": "image", "source": {"type": "url", "url": "https://x/i.png"}},
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBE"},
            "title": "a.pdf",
        },
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "hi"}},
    ]
    (message,) = parse(messages=[{"role": "user", "content": content}]).turn.messages
    items = message.content_items or []
    assert items[0] == ty.ImageContent(image="AA==", format="png")
    assert items[1] == ty.ImageContent(image=ty.MediaURL(url="https://x/i.png"))
    assert items[2] == ty.FileContent(file="JVBE", filename="a.pdf", mime_type="application/pdf")
    assert items[3] == ty.FileContent(file="aGk=", filename="document", mime_type="text/plain")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"max_tokens": None}, "max_tokens: Field required"),
        ({"max_tokens": True}, "max_tokens: must be an integer of at least 1"),
        ({"model": 3}, "body.model: expected a string, got a number"),
        ({"messages": "hi"}, "messages: Field required (an array of messages)"),
        (
            {"messages": [{"role": "system", "content": "x"}]},
            "messages.0.role: must be 'user' or 'assistant', got 'system'",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "video"}]}]},
            "messages.0.content.0.type: 'video' is not supported; use 'text', 'image', "
            "'document', 'tool_use' or 'tool_result'",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "tool_use", "id": "i", "name": "n"}]}
                ]
            },
            "messages.0.content.0.type: 'tool_use' blocks belong in assistant messages",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "image",
                                "source": {
                                    "type": "base64",
                                    "media_type": "image/tiff",
                                    "data": "",
                                },
                            }
                        ],
                    }
                ]
            },
            "messages.0.content.0.source.media_type: must be one of image/gif, image/jpeg, "
            "image/png, image/webp",
        ),
        (
            {"tools": [{"type": "web_search_20250305", "name": "web_search"}]},
            "tools.0.type: 'web_search_20250305' is a server tool, which is not supported here; "
            "declare client tools (name, description, input_schema)",
        ),
        (
            {"tools": [{"name": "a b", "input_schema": {}}]},
            "tools.0.name: must be 1-128 letters, digits, '_' or '-'",
        ),
        ({"tool_choice": {"type": "tool", "name": "x"}}, "tool_choice.name: 'x' is not in 'tools'"),
        ({"tool_choice": {"type": "any"}}, "tool_choice: 'any' needs at least one tool in 'tools'"),
        ({"temperature": 1.5}, "temperature: must be a number from 0 to 1"),
        (
            {"thinking": {"type": "sometimes"}},
            "thinking.type: must be 'enabled', 'adaptive' or 'disabled', got 'sometimes'",
        ),
        ({"stop_sequences": [""]}, "stop_sequences: expected an array of non-empty strings"),
        ({"stream": "yes"}, "stream: expected a boolean"),
        ({"messages": []}, "messages: at least one message is required"),
        # What a client can make the stop-sequence scan cost is bounded.
        (
            {"stop_sequences": ["s"] * 17},
            "stop_sequences: at most 16 sequences of at most 256 characters",
        ),
        (
            {"stop_sequences": ["s" * 257]},
            "stop_sequences: at most 16 sequences of at most 256 characters",
        ),
    ],
)
def test_bad_requests_name_the_field(change: dict[str, Any], message: str) -> None:
    body: dict[str, Any] = {
        "model": "m",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": "hi"}],
    }
    for key, value in change.items():
        if value is None:
            body.pop(key)
        else:
            body[key] = value
    with pytest.raises(wire.AnthropicError) as caught:
        wire.parse_request(body, agent="a", response_id="r", session_id="s")
    assert caught.value.message == message
    assert caught.value.body() == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": message},
    }


def test_count_tokens_needs_no_max_tokens() -> None:
    body = {"model": "m", "system": "one two", "messages": [{"role": "user", "content": "a b c"}]}
    parsed = wire.parse_request(body, agent="a", response_id="r", session_id="s", counting=True)
    assert parsed.max_tokens is None and wire.word_count(parsed.turn) == 5


@pytest.mark.parametrize(
    ("status", "answered", "kind"),
    [
        (400, 400, "invalid_request_error"),
        (401, 401, "authentication_error"),
        (402, 402, "billing_error"),
        (403, 403, "permission_error"),
        (404, 404, "not_found_error"),
        (405, 405, "invalid_request_error"),
        (413, 413, "request_too_large"),
        (429, 429, "rate_limit_error"),
        (500, 500, "api_error"),
        (503, 529, "overloaded_error"),
        (504, 504, "timeout_error"),
    ],
)
def test_error_types(status: int, answered: int, kind: str) -> None:
    assert wire.error_status(status) == answered
    assert wire.error_type_for(answered) == kind


def _events(frames: bytes) -> list[dict[str, Any]]:
    out = []
    for frame in frames.decode().split("\n\n"):
        if frame:
            name, data = frame.split("\n")
            obj = orjson.loads(data.removeprefix("data: "))
            assert obj["type"] == name.removeprefix("event: ")
            out.append(obj)
    return out


def text(t: str) -> ev.ResponseDelta:
    return ev.ResponseDelta(delta=ty.DeltaText(text=t))


@pytest.mark.parametrize(
    ("thinking", "events", "shape"),
    [
        (False, [text("a"), text("b")], ["start:text", "text:a", "text:b", "stop"]),
        (
            True,
            [ev.Thinking(content="hm"), text("a"), ev.Thinking(content="again")],
            [
                "start:thinking",
                "thinking:hm",
                "stop",
                "start:text",
                "text:a",
                "stop",
                "start:thinking",
                "thinking:again",
                "stop",
            ],
        ),
        (False, [ev.Thinking(content="hidden"), text("a")], ["start:text", "text:a", "stop"]),
        (
            False,
            [
                text("a"),
                ev.ToolCall(call_id="c", name="w", arguments='{"x":1}'),
                ev.ToolCall(call_id="d", name="w", arguments=""),
            ],
            [
                "start:text",
                "text:a",
                "stop",
                "start:tool_use",
                'json:{"x":1}',
                "stop",
                "start:tool_use",
                "stop",
            ],
        ),
        (False, [text(""), ev.UsageDelta(delta=ty.UsageStats(output_tokens=1))], []),
    ],
)
def test_stream_blocks(thinking: bool, events: list[Any], shape: list[str]) -> None:
    encoder = wire.StreamEncoder(message_id="msg_1", model="m", thinking=thinking)
    head = _events(encoder.start())
    assert head[0]["message"]["content"] == [] and head[0]["message"]["id"] == "msg_1"
    body = _events(b"".join(encoder.feed(e) for e in events))
    tail = _events(encoder.finish("end_turn", ty.UsageStats(input_tokens=2, output_tokens=3)))
    seen = []
    index = -1
    for e in body + tail[:-2]:
        if e["type"] == "content_block_start":
            index += 1
            assert e["index"] == index
            seen.append(f"start:{e['content_block']['type']}")
        elif e["type"] == "content_block_delta":
            assert e["index"] == index
            d = e["delta"]
            seen.append(
                {"text_delta": "text:", "thinking_delta": "thinking:", "input_json_delta": "json:"}[
                    d["type"]
                ]
                + (d.get("text") or d.get("thinking") or d.get("partial_json"))
            )
        else:
            assert e == {"type": "content_block_stop", "index": index}
            seen.append("stop")
    assert seen == shape
    assert tail[-2]["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert tail[-2]["usage"]["output_tokens"] == 3 and tail[-1] == {"type": "message_stop"}


def test_a_text_delta_frame_is_the_encoded_event() -> None:
    encoder = wire.StreamEncoder(message_id="m", model="m")
    encoder.text("first")
    frame = encoder.text('quote " and \n newline')
    assert _events(frame) == [
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": 'quote " and \n newline'},
        }
    ]


@given(
    st.text(alphabet="ab\n", max_size=30),
    st.lists(st.text(alphabet="ab", min_size=1, max_size=4), min_size=1, max_size=3),
    st.lists(st.integers(min_value=0, max_value=30), max_size=6),
)
def test_stop_scanner_cuts_where_a_whole_text_would(
    reply: str, sequences: list[str], cuts: list[int]
) -> None:
    first = min(
        ((reply.find(s), s) for s in sequences if s in reply), default=None, key=lambda p: p[0]
    )
    points = sorted({c for c in cuts if c <= len(reply)} | {0, len(reply)})
    scanner = wire.StopScanner(sequences)
    shown = "".join(scanner.feed(reply[a:b]) for a, b in itertools.pairwise(points))
    shown += scanner.flush()
    if first is None:
        assert (shown, scanner.matched) == (reply, None)
    else:
        at = first[0]
        assert shown == reply[:at]
        assert scanner.matched is not None and reply[at:].startswith(scanner.matched)


@pytest.mark.parametrize(
    ("sequences", "pieces", "shown", "matched"),
    [
        # "a" is whole after "ba", but "baa" starts earlier and may still come.
        (["a", "baa"], ["ba", "a"], "", "baa"),
        (["a", "baa"], ["ba", "c"], "b", "a"),
        (["a", "baa"], ["ba"], "b", "a"),  # the reply ends: the flush decides
        (["a", "baa"], ["xba", "ab"], "x", "baa"),
        (["END"], ["E", "N", "D!"], "", "END"),
        (["END"], ["EN", "d"], "ENd", None),
    ],
)
def test_stop_scanner_waits_for_a_sequence_starting_earlier(
    sequences: list[str], pieces: list[str], shown: str, matched: str | None
) -> None:
    scanner = wire.StopScanner(sequences)
    text = "".join(scanner.feed(p) for p in pieces) + scanner.flush()
    assert (text, scanner.matched) == (shown, matched)


def test_message_object() -> None:
    calls = [ty.ToolInvocation(id="c", name="w", arguments="not json")]
    obj = wire.message_object(
        message_id="msg_1",
        model="m",
        text="",
        tool_calls=calls,
        stop_reason=wire.stop_reason_for(calls, None, 10),
        usage=None,
        thinking="hm",
    )
    assert obj["content"] == [
        {"type": "thinking", "thinking": "hm", "signature": ""},
        {"type": "tool_use", "id": "c", "name": "w", "input": {"arguments": "not json"}},
    ]
    assert obj["stop_reason"] == "tool_use"
    usage = ty.UsageStats(output_tokens=10)
    assert wire.stop_reason_for([], usage, 10) == "max_tokens"
    assert wire.stop_reason_for([], usage, 11) == "end_turn"
    assert wire.stop_reason_for(calls, usage, 10, "X") == "stop_sequence"
