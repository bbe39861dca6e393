"""Codec errors, strictness and forward compatibility (table-driven)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import orjson
import pytest

from uamp_proto import DecodeError, codec, decode, encode
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto._hookgen import CompiledHooks


def _error(obj: Any) -> DecodeError:
    data = obj if isinstance(obj, bytes | str) else orjson.dumps(obj)
    with pytest.raises(DecodeError) as info:
        decode(data)
    return info.value


# --- not an event at all -------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "starts"),
    [
        (b"", "invalid JSON"),
        (b"{", "invalid JSON"),
        (b'{"type": "ping",}', "invalid JSON"),
        (b"\xff\xfe", "invalid JSON"),
        ('{"type": "ping"} trailing', "invalid JSON"),
        (b"[]", "an event must be a JSON object, got array"),
        (b'"ping"', "an event must be a JSON object, got string"),
        (b"5", "an event must be a JSON object, got number"),
        (b"null", "an event must be a JSON object, got null"),
        (b"{}", "an event must have a 'type' field"),
        (b'{"event_id": "e1"}', "an event must have a 'type' field"),
        (b'{"type": 5}', "an event's 'type' must be a string, got number"),
        (b'{"type": null}', "an event must have a 'type' field"),
        (b'{"type": ["ping"]}', "an event's 'type' must be a string, got array"),
        (b'{"type": {"a": 1}}', "an event's 'type' must be a string, got object"),
    ],
)
def test_not_an_event(data: bytes | str, starts: str) -> None:
    err = _error(data)
    assert err.message.startswith(starts)
    assert str(err) == err.message
    assert err.event_type is None


def test_event_id_is_carried_even_without_type() -> None:
    assert _error({"event_id": "e1"}).event_id == "e1"


# --- field errors: message, path, ids ----------------------------------------------


@pytest.mark.parametrize(
    ("obj", "message", "path"),
    [
        (
            {"type": "input.text"},
            "input.text: field 'text' is required",
            "text",
        ),
        (
            {"type": "input.text", "text": 5},
            "input.text: field 'text' must be a string, got number",
            "text",
        ),
        (
            {"type": "response.delta", "delta": {"type": "text", "text": 1}},
            "response.delta: field 'delta.text' must be a string, got number",
            "delta.text",
        ),
        (
            {"type": "response.delta", "delta": {"type": "text"}},
            "response.delta: field 'delta.text' is required",
            "delta.text",
        ),
        (
            {"type": "response.delta"},
            "response.delta: field 'delta' is required",
            "delta",
        ),
        (
            {"type": "response.delta", "delta": "text"},
            "response.delta: field 'delta' must be an object, got string",
            "delta",
        ),
        (
            {
                "type": "input.text",
                "text": "hi",
                "messages": [{"role": "user"}, {"role": 5}],
            },
            "input.text: field 'messages[1].role' must be a string, got number",
            "messages[1].role",
        ),
        (
            {"type": "input.text", "text": "hi", "messages": [{"role": "user"}, {}]},
            "input.text: field 'messages[1].role' is required",
            "messages[1].role",
        ),
        (
            {"type": "input.text", "text": "hi", "messages": {"role": "user"}},
            "input.text: field 'messages' must be an array, got object",
            "messages",
        ),
        (
            {"type": "session.create", "uamp_version": "1.0", "session": {"modalities": "text"}},
            "session.create: field 'session.modalities' must be an array, got string",
            "session.modalities",
        ),
        (
            {
                "type": "session.create",
                "uamp_version": "1.0",
                "session": {"modalities": ["text"], "tools": [{"function": {}}]},
            },
            "session.create: field 'session.tools[0].function.name' is required",
            "session.tools[0].function.name",
        ),
        (
            {
                "type": "response.done",
                "response": {"status": "completed", "output": [{"type": "text", "text": None}]},
            },
            "response.done: field 'response.output[0].text' must be a string, got null",
            "response.output[0].text",
        ),
        (
            {"type": "input.image", "image": 5},
            "input.image: field 'image' must be a string or an object with 'url', got number",
            "image",
        ),
        (
            {"type": "tool.call", "call_id": "c", "name": "n"},
            "tool.call: field 'arguments' is required",
            "arguments",
        ),
    ],
)
def test_field_errors(obj: dict[str, Any], message: str, path: str) -> None:
    err = _error(obj)
    assert err.message == message
    assert err.path == path
    assert err.event_type == obj["type"]


def test_ids_are_carried_on_field_errors() -> None:
    err = _error({"type": "input.text", "event_id": "evt_9", "session_id": "sess_2"})
    assert (err.event_type, err.event_id, err.session_id) == ("input.text", "evt_9", "sess_2")
    # Ids of the wrong type are not echoed back.
    err = _error({"type": "input.text", "event_id": 9, "session_id": ["s"]})
    assert (err.event_id, err.session_id) == (None, None)


def test_several_errors_are_all_named() -> None:
    err = _error({"type": "tool.call", "call_id": 1})
    assert err.message.startswith("tool.call: field 'call_id' must be a string, got number; ")
    assert "field 'name' is required" in err.message
    assert err.path == "call_id"


# --- strictness: no coercion ------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ({"type": "input.text", "text": 1}, "field 'text' must be a string, got number"),
        ({"type": "input.text", "text": True}, "field 'text' must be a string, got boolean"),
        ({"type": "input.text", "text": None}, "field 'text' must be a string, got null"),
        (
            {"type": "rate_limit", "limit": "5"},
            "field 'limit' must be an integer, got string",
        ),
        ({"type": "rate_limit", "limit": 5.5}, "field 'limit' must be an integer, got number"),
        ({"type": "rate_limit", "limit": True}, "field 'limit' must be an integer, got boolean"),
        (
            {"type": "rate_limit", "reset_at": True},
            "field 'reset_at' must be a number, got boolean",
        ),
        (
            {"type": "rate_limit", "reset_at": "1704067260"},
            "field 'reset_at' must be a number, got string",
        ),
        (
            {"type": "input.typing", "is_typing": "false"},
            "field 'is_typing' must be a boolean, got string",
        ),
        (
            {"type": "input.typing", "is_typing": 0},
            "field 'is_typing' must be a boolean, got number",
        ),
        (
            {"type": "response.delta", "delta": {"type": "text", "text": "x"}, "delta_seq": "1"},
            "field 'delta_seq' must be an integer, got string",
        ),
        (
            {"type": "response.delta", "delta": {"type": "text", "text": "x"}, "timestamp": False},
            "field 'timestamp' must be a number, got boolean",
        ),
        (
            {"type": "input.text", "text": "x", "context": ["a"]},
            "field 'context' must be an object, got array",
        ),
        (
            {"type": "thinking", "content": "x", "redacted": "no"},
            "field 'redacted' must be a boolean, got string",
        ),
    ],
)
def test_no_coercion(obj: dict[str, Any], message: str) -> None:
    assert _error(obj).message == f"{obj['type']}: {message}"


def test_integral_float_is_an_integer() -> None:
    """JSON has one number type: 5.0 is the integer 5 (the generic path)."""
    event = decode(b'{"type": "rate_limit", "limit": 5.0}')
    assert isinstance(event, ev.RateLimit)
    assert event.limit == 5 and type(event.limit) is int
    done = decode(
        b'{"type": "response.done", "response": {"status": "completed", "output": [],'
        b' "usage": {"input_tokens": 3.0}}}'
    )
    assert isinstance(done, ev.ResponseDone) and done.response.usage is not None
    assert type(done.response.usage.input_tokens) is int


def test_float_field_keeps_integers() -> None:
    event = decode(b'{"type": "ping", "timestamp": 1704067200000}')
    assert event.timestamp == 1704067200000 and type(event.timestamp) is int  # type: ignore[union-attr]
    assert encode(event) == b'{"type":"ping","timestamp":1704067200000}'


# --- forward compatibility (section 14.3) -----------------------------------------


def test_unknown_event_round_trips() -> None:
    raw = {"type": "analyze_emotion", "event_id": "e1", "session_id": "s", "x": [1, {"y": None}]}
    event = decode(orjson.dumps(raw))
    assert isinstance(event, ev.UnknownEvent)
    assert event.type == "analyze_emotion"
    assert (event.event_id, event.session_id) == ("e1", "s")
    assert orjson.loads(encode(event)) == raw
    assert codec.to_dict(event) == raw


def test_unknown_fields_are_kept_at_every_level() -> None:
    raw = {
        "type": "input.text",
        "text": "hi",
        "future": {"a": 1},
        "messages": [
            {
                "role": "user",
                "mood": "happy",
                "content_items": [{"type": "text", "text": "x", "lang": "en"}],
                "tool_calls": [{"id": "c", "name": "n", "arguments": "{}", "index": 0}],
            }
        ],
    }
    event = decode(orjson.dumps(raw))
    assert isinstance(event, ev.InputText) and event.messages is not None
    assert event.unknown == {"future": {"a": 1}}
    message = event.messages[0]
    assert message.unknown == {"mood": "happy"}
    assert message.content_items is not None
    assert message.content_items[0].unknown == {"lang": "en"}  # type: ignore[union-attr]
    assert message.tool_calls is not None and message.tool_calls[0].unknown == {"index": 0}
    assert orjson.loads(encode(event)) == raw


@pytest.mark.parametrize(
    "item",
    [
        {"type": "hologram", "hologram": {"url": "https://h"}, "fps": 90},
        {"type": "text", "text": "plain"},
    ],
)
def test_unknown_content_items_round_trip(item: dict[str, Any]) -> None:
    raw = {
        "type": "response.done",
        "response": {"status": "completed", "output": [item]},
    }
    event = decode(orjson.dumps(raw))
    assert isinstance(event, ev.ResponseDone)
    out = event.response.output[0]
    if item["type"] == "hologram":
        assert isinstance(out, ty.UnknownContent)
        assert out.type == "hologram" and out.raw == item
    assert orjson.loads(encode(event)) == raw
    message = codec.from_dict(ty.Message, {"role": "user", "content_items": [item]})
    assert codec.unstructure(message) == {"role": "user", "content_items": [item]}


@pytest.mark.parametrize(
    "delta",
    [
        {"type": "image_partial", "image": "AAAA", "index": 2},
        {"type": "text", "text": "x", "annotations": []},
        {"type": "audio", "audio": "UklGR"},
        {"type": "tool_call", "tool_call": {"id": "c", "arguments": "{"}},
        {"type": "tool_result", "tool_result": {"call_id": "c", "status": "ok"}},
        {"type": "tool_progress", "tool_progress": {"call_id": "c", "text": "50%"}},
    ],
)
def test_deltas_round_trip(delta: dict[str, Any]) -> None:
    raw = {"type": "response.delta", "event_id": "e", "response_id": "r", "delta": delta}
    event = decode(orjson.dumps(raw))
    assert isinstance(event, ev.ResponseDelta)
    if delta["type"] == "image_partial":
        assert isinstance(event.delta, ty.DeltaUnknown)
        assert event.delta.type == "image_partial"
    assert orjson.loads(encode(event)) == raw


def test_delta_type_must_be_a_string() -> None:
    err = _error({"type": "response.delta", "delta": {"type": 3}})
    assert err.message == "response.delta: field 'delta' must be a string, got number"


# --- OpenAI's nested tool call form (section 8.5) ----------------------------------


def test_openai_nested_tool_calls_are_accepted() -> None:
    raw = {
        "type": "input.text",
        "text": "go",
        "messages": [
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "search", "arguments": '{"q": "x"}'},
                    },
                    {"id": "call_2", "name": "flat", "arguments": "{}"},
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "result"},
        ],
    }
    event = decode(orjson.dumps(raw))
    assert isinstance(event, ev.InputText) and event.messages is not None
    calls = event.messages[0].tool_calls
    assert calls == [
        ty.ToolInvocation(id="call_1", name="search", arguments='{"q": "x"}'),
        ty.ToolInvocation(id="call_2", name="flat", arguments="{}"),
    ]
    # Written back in UAMP's flat form.
    out = orjson.loads(encode(event))
    assert out["messages"][0]["tool_calls"][0] == {
        "id": "call_1",
        "name": "search",
        "arguments": '{"q": "x"}',
    }
    direct = codec.from_dict(ty.Message, raw["messages"][0])
    assert direct.tool_calls == calls


def test_openai_nested_tool_call_without_arguments() -> None:
    message = codec.from_dict(
        ty.Message,
        {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f"}}]},
    )
    assert message.tool_calls == [ty.ToolInvocation(id="c", name="f", arguments="")]


# --- API details -----------------------------------------------------------------------


def test_absent_fields_are_not_emitted_and_type_comes_first() -> None:
    event = ev.ResponseDelta(delta=ty.DeltaText(text="hi"))
    assert encode(event) == b'{"type":"response.delta","delta":{"type":"text","text":"hi"}}'
    data = encode(ev.Ping())
    assert data == b'{"type":"ping"}'


def test_decode_object_and_from_dict_errors() -> None:
    with pytest.raises(DecodeError, match="got array"):
        codec.decode_object([])
    with pytest.raises(DecodeError) as info:
        codec.from_dict(ty.Message, {"role": 1})
    assert info.value.message == "Message: field 'role' must be a string, got number"


@pytest.mark.parametrize(
    "data", [b'{"type":"ping"}', '{"type":"ping"}', bytearray(b'{"type":"ping"}')]
)
def test_input_kinds(data: Any) -> None:
    assert decode(data) == ev.Ping()
    assert decode(memoryview(b'{"type":"ping"}')) == ev.Ping()


def test_to_dict_returns_fresh_dicts() -> None:
    event = ev.ResponseDelta(delta=ty.DeltaText(text="hi"), event_id="e", response_id="r")
    first = codec.to_dict(event)
    first["delta"]["text"] = "changed"
    first["extra"] = 1
    assert codec.to_dict(event) == {
        "type": "response.delta",
        "delta": {"type": "text", "text": "hi"},
        "event_id": "e",
        "response_id": "r",
    }


# --- the generator refuses what it has no rule for, and says why ------------


@attrs.frozen(kw_only=True)
class _Validated:
    name: str = attrs.field(validator=attrs.validators.min_len(1))
    unknown: Mapping[str, Any] = attrs.field(default=ty.EMPTY, eq=False)


@attrs.frozen(kw_only=True)
class _OddField:
    when: complex
    unknown: Mapping[str, Any] = attrs.field(default=ty.EMPTY, eq=False)


def _fresh_hooks() -> CompiledHooks:
    return CompiledHooks(
        adapters={},
        fallback_structure=lambda cls: lambda value: ("generic", cls, value),
        fallback_unstructure=lambda cls: lambda obj: ("generic", cls),
    )


@pytest.mark.parametrize(
    ("cls", "reason"),
    [(_Validated, "_Validated.name has a validator or converter"), (_OddField, "no rule for")],
)
def test_generator_refuses_with_a_reason(cls: type[Any], reason: str) -> None:
    hooks = _fresh_hooks()
    assert hooks.structure_fn(cls)({"x": 1}) == ("generic", cls, {"x": 1})
    assert hooks.unstructure_fn(cls)(None) == ("generic", cls)
    assert reason in hooks.unsupported[cls]


def test_hooks_belong_to_their_converter() -> None:
    """Two converters compile their own functions; nothing is shared."""
    a, b = _fresh_hooks(), _fresh_hooks()
    assert a.structure_fn(ev.Ping) is not b.structure_fn(ev.Ping)
    assert a.structure_fn(ev.Ping)({"type": "ping"}) == ev.Ping()


@pytest.mark.parametrize(
    ("number", "accepted"),
    [
        ("18446744073709551615", True),  # the largest unsigned 64-bit integer
        ("-9223372036854775808", True),  # the smallest signed one
        ("5.0", True),
        ("18446744073709551616", False),  # one past: orjson could not write it back
        ("123456789012345678901234567890", False),
        ("1e300", False),
    ],
)
def test_decode_accepts_exactly_the_integers_encode_can_write(number: str, accepted: bool) -> None:
    head = b'{"type":"response.delta","delta":{"type":"text","text":"x"},"delta_seq":'
    data = head + number.encode() + b"}"
    for structure in (decode, lambda d: codec.from_dict(ev.ResponseDelta, orjson.loads(d))):
        if accepted:
            event = structure(data)
            assert decode(encode(event)) == event
        else:
            with pytest.raises(DecodeError, match="delta_seq"):
                structure(data)


@pytest.mark.parametrize(
    ("extra", "unknown"),
    [
        ({}, {}),
        ({"session_id": None, "timestamp": None}, {}),  # null is absent, not unknown
        ({"session_id": None, "future": 1}, {"future": 1}),
        ({"future": None}, {"future": None}),  # an unknown key keeps its null
    ],
)
def test_null_optional_fields_leave_the_unknown_bag_as_it_is(
    extra: dict[str, Any], unknown: dict[str, Any]
) -> None:
    data = {"type": "response.delta", "delta": {"type": "text", "text": "hi"}, **extra}
    event = decode(orjson.dumps(data))
    assert isinstance(event, ev.ResponseDelta)
    assert event.session_id is None and event.timestamp is None
    assert dict(event.unknown) == unknown
    if not unknown:
        assert event.unknown is ty.EMPTY  # the shared bag, not a fresh empty dict


@pytest.mark.parametrize(
    ("delta", "message"),
    [
        ({"type": 5, "text": "hi"}, "must be a string, got number"),
        ({"text": "hi"}, "is required"),
        ({"type": "text", "text": 5}, "must be a string, got number"),
        ({"type": ["text"], "text": "hi"}, "field 'delta'"),  # the detailed path names it
    ],
)
def test_a_delta_with_a_bad_tag_or_text_is_refused(delta: dict[str, Any], message: str) -> None:
    with pytest.raises(DecodeError, match=message):
        decode(orjson.dumps({"type": "response.delta", "delta": delta}))


@attrs.frozen(kw_only=True)
class _NotedCreated(ev.ResponseCreated):
    """A subclass the codec's tables have not met before its first encode."""

    note: str | None = None


def test_an_event_subclass_is_encoded_with_its_own_fields() -> None:
    event = _NotedCreated(response_id="r1", note="n")
    expected = {"type": "response.created", "response_id": "r1", "note": "n"}
    assert orjson.loads(encode(event)) == expected
    assert codec.to_dict(event) == expected
    assert codec.to_dict(ev.ResponseCreated(response_id="r1")) == {
        "type": "response.created",
        "response_id": "r1",
    }
