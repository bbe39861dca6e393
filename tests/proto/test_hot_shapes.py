"""The usual ``input.text`` and ``response.create`` decode as the compiled structure functions do.

``uamp_proto.codec`` takes the two in their usual shape (the type, the
session's id, the text) itself and builds them positionally, leaving
anything else to the compiled functions (``GENERAL_STRUCTURE``). Each test
decodes the same object both ways and compares the event, every field and
the ``unknown`` bag included, or the refusal. Hypothesis draws objects from
the events' own keys and a stranger, with values of every JSON type.
"""

from __future__ import annotations

from typing import Any

import attrs
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from uamp_proto.codec import (
    _BY_TAG,
    _DELTA_HOOK,
    GENERAL_STRUCTURE,
    DecodeError,
    _hot_input_text,
    _hot_response_create,
    decode,
    decode_object,
)


def _either(structure: Any, obj: dict[str, Any]) -> Any:
    try:
        event = structure(dict(obj))
    except Exception as exc:
        return type(exc).__name__
    fields = {f.name: getattr(event, f.name) for f in attrs.fields(type(event))}
    return type(event).__name__, fields


_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=5),
    st.lists(st.text(max_size=3), max_size=2),
    st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2),
)
_KEYS = {
    "input.text": ["session_id", "text", "event_id", "role", "timestamp", "context", "x"],
    "response.create": ["session_id", "event_id", "response", "timestamp", "x"],
}


@settings(max_examples=400, deadline=None)
@given(
    tag=st.sampled_from(sorted(_KEYS)),
    data=st.data(),
)
def test_any_object_decodes_as_the_compiled_function_does(tag: str, data: st.DataObject) -> None:
    keys = data.draw(st.lists(st.sampled_from(_KEYS[tag]), unique=True, max_size=4))
    obj = {"type": tag, **{k: data.draw(_VALUES, label=k) for k in keys}}
    assert _either(_BY_TAG[tag], obj) == _either(GENERAL_STRUCTURE[tag], obj)


#: The shapes the hot functions take (so the comparison above is not vacuous).
_TAKEN = [
    {"type": "input.text", "session_id": "s", "text": "hi"},
    {"type": "input.text", "text": "hi"},
    {"type": "response.create", "session_id": "s"},
    {"type": "response.create"},
]
#: Near misses they leave to the compiled functions.
_LEFT = [
    {"type": "input.text", "session_id": None, "text": "hi"},
    {"type": "input.text", "session_id": "s", "text": 1},
    {"type": "input.text", "session_id": "s", "role": "user"},
    {"type": "input.text", "event_id": "e", "text": "hi"},
    {"type": "input.text", "text": None},
    {"type": "input.text"},
    {"type": "response.create", "session_id": 3},
    {"type": "response.create", "event_id": "e"},
    {"type": "response.create", "session_id": "s", "x": 1},
]


@pytest.mark.parametrize("obj", _TAKEN + _LEFT)
def test_the_usual_shapes_and_their_near_misses(obj: dict[str, Any]) -> None:
    tag = obj["type"]
    assert _either(_BY_TAG[tag], obj) == _either(GENERAL_STRUCTURE[tag], obj)
    if obj in _LEFT and _either(GENERAL_STRUCTURE[tag], obj) == "KeyError":
        with pytest.raises(DecodeError):
            decode_object(obj)


@pytest.mark.parametrize("obj", _TAKEN)
def test_the_usual_shapes_never_reach_the_compiled_function(obj: dict[str, Any]) -> None:
    def refuse(d: Any) -> Any:
        raise AssertionError("took the compiled function")

    hot = {"input.text": _hot_input_text, "response.create": _hot_response_create}
    tag = obj["type"]
    assert _either(hot[tag](refuse), obj) == _either(GENERAL_STRUCTURE[tag], obj)


def _decoded(decoder: Any, obj: Any) -> Any:
    try:
        event = decoder(obj)
    except DecodeError as exc:
        return "DecodeError", str(exc)
    fields = {f.name: getattr(event, f.name) for f in attrs.fields(type(event))}
    return type(event).__name__, fields


_DELTA_KEYS = ["delta", "session_id", "response_id", "event_id", "delta_seq", "timestamp", "x"]


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_decode_reaches_response_delta_as_the_table_does(data: st.DataObject) -> None:
    # decode() compares the tag with "response.delta" before the table: the
    # same function, the same event or refusal as decode_object (the table's way).
    assert _DELTA_HOOK is _BY_TAG["response.delta"]
    tag = data.draw(st.sampled_from(["response.delta", "response.delta", "response.done", 5, None]))
    keys = data.draw(st.lists(st.sampled_from(_DELTA_KEYS), unique=True, max_size=5))
    values = _VALUES.filter(lambda v: type(v) is not int or -(2**63) <= v < 2**64)
    obj: dict[str, Any] = {k: data.draw(values, label=k) for k in keys}
    if data.draw(st.booleans()):
        obj["delta"] = {"type": "text", "text": data.draw(st.text(max_size=5))}
    if tag is not None:
        obj["type"] = tag
    raw = orjson.dumps(obj)
    assert _decoded(decode, raw) == _decoded(decode_object, orjson.loads(raw))
