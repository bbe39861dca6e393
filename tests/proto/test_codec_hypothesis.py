"""Property tests of the codec: round trips, compiled path = generic path, fuzz."""

from __future__ import annotations

from typing import Any

import attrs
import orjson
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from uamp_proto import DecodeError, codec, decode, encode
from uamp_proto import events as ev

from . import strategies as S
from .damage import edit, outcome, paths

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
#: Per-class tests run once for each event class: fewer examples each.
PER_CLASS = settings(SETTINGS, max_examples=25)

EVENT_CLASSES = sorted(ev.EVENT_TYPES.values(), key=lambda cls: cls.type)
HOOKS = codec._CODEC.hooks


def assert_same(a: Any, b: Any, where: str = "") -> None:
    """``a == b`` and, recursively, equal ``unknown`` bags (they are eq=False),
    and no unset slot anywhere (a hook that forgot one)."""
    assert type(a) is type(b), where
    if isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{i}]")
        return
    if not attrs.has(type(a)):
        assert a == b, where
        return
    for f in attrs.fields(type(a)):
        x, y = getattr(a, f.name), getattr(b, f.name)  # AttributeError: unset slot
        if f.name == "unknown":
            assert dict(x) == dict(y), f"{where}.unknown"
        else:
            assert_same(x, y, f"{where}.{f.name}")
    assert a == b, where


@SETTINGS
@given(S.events())
def test_round_trip(event: Any) -> None:
    decoded = decode(encode(event))
    assert_same(decoded, event, event.type)


@SETTINGS
@given(S.events())
def test_text_and_bytes_input_agree(event: Any) -> None:
    data = encode(event)
    assert_same(decode(data.decode()), decode(data))


def test_every_class_is_compiled() -> None:
    """No class falls back to the generic hooks: the generator refuses none."""
    assert HOOKS.unsupported == {}


@pytest.mark.parametrize("cls", EVENT_CLASSES, ids=lambda c: c.type)
@PER_CLASS
@given(data=st.data())
def test_compiled_hooks_match_generic(cls: type[Any], data: st.DataObject) -> None:
    """Both halves of each compiled hook give what the generic cattrs hooks give."""
    event = data.draw(S.instances(cls))
    generic_out = codec.converter.get_unstructure_hook(cls)(event)
    compiled_out = HOOKS.unstructure_fn(cls)(event)
    # Same bytes: same keys, values and key order ("type" first).
    assert orjson.dumps(compiled_out) == orjson.dumps(generic_out)
    assert next(iter(compiled_out)) == "type"
    wire = orjson.loads(orjson.dumps(generic_out))
    from_compiled = HOOKS.structure_fn(cls)(wire)
    from_generic = codec.converter.get_structure_hook(cls)(wire, cls)
    assert_same(from_compiled, from_generic, cls.type)
    assert type(from_compiled) is cls


@pytest.mark.parametrize("cls", EVENT_CLASSES, ids=lambda c: c.type)
@PER_CLASS
@given(data=st.data())
def test_compiled_hooks_read_keys_in_any_order_with_nulls(
    cls: type[Any], data: st.DataObject
) -> None:
    """A compiled structure function stops looking up optional keys once it
    has counted every key of the object: whatever the keys' order, optional
    keys held as null and unknown keys, it reads what the generic hook reads."""
    event = data.draw(S.instances(cls))
    wire = orjson.loads(encode(event))
    optional = [f.name for f in attrs.fields(cls) if f.default is None]
    for name in data.draw(st.lists(st.sampled_from(optional), unique=True)) if optional else []:
        wire[name] = None  # null is absent
    wire = {key: wire[key] for key in data.draw(st.permutations(list(wire)))}
    from_compiled = HOOKS.structure_fn(cls)(wire)
    from_generic = codec.converter.get_structure_hook(cls)(wire, cls)
    assert_same(from_compiled, from_generic, cls.type)


_FAILED = object()


def _generic_decode(wire: dict[str, Any]) -> Any:
    """``decode_object`` as the generic cattrs hooks alone would do it."""
    cls = ev.EVENT_TYPES[wire["type"]]
    if cls is ev.SessionCreate:
        wire = codec.liberal_create(wire)  # decode's first step for this one type
    try:
        return codec.converter.get_structure_hook(cls)(wire, cls)
    except Exception:
        raise codec._refused(wire["type"], wire) from None


@pytest.mark.parametrize("cls", EVENT_CLASSES, ids=lambda c: c.type)
@PER_CLASS
@given(data=st.data())
def test_compiled_and_generic_agree_on_damaged_input(cls: type[Any], data: st.DataObject) -> None:
    """On damaged input the compiled path accepts exactly what the generic
    one accepts, with equal values, and refuses with the same DecodeError."""
    event = data.draw(S.instances(cls))
    wire = orjson.loads(encode(event))
    # The event's own "type" picks the hook; damaging it tests nothing here.
    places = [p for p in paths(wire) if p != ("type",)]
    assume(places)  # a bare {"type": "ping"} has nothing else to damage
    path = data.draw(st.sampled_from(places))
    if data.draw(st.booleans()):
        damaged = edit(wire, path, drop=True)
    else:
        damaged = edit(wire, path, data.draw(S.json_values))
    generic = outcome(_generic_decode, damaged)
    compiled = outcome(codec.decode_object, damaged)
    if isinstance(generic, tuple):
        assert compiled == generic
    else:
        assert_same(compiled, generic, cls.type)


# --- fuzz: any input gives an event or a DecodeError, nothing else ------------


def _decodes_or_decode_error(data: Any) -> None:
    try:
        result = decode(data)
    except DecodeError as exc:
        assert isinstance(exc.message, str)
        return
    assert isinstance(result, ev.Event | ev.UnknownEvent)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_fuzz_bytes(data: bytes) -> None:
    _decodes_or_decode_error(data)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=64))
def test_fuzz_text(data: str) -> None:
    _decodes_or_decode_error(data)


@settings(max_examples=200, deadline=None)
@given(S.json_values)
def test_fuzz_json_values(value: Any) -> None:
    _decodes_or_decode_error(orjson.dumps(value))


def _field_soup(cls: type[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Objects tagged as ``cls`` whose declared keys hold random JSON."""
    names = [f.name for f in attrs.fields(cls) if f.name != "unknown"]
    return st.fixed_dictionaries(
        {"type": st.just(cls.type)},
        optional={name: S.json_values for name in names},
    )


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(list(ev.EVENT_TYPES.values())).flatmap(_field_soup))
def test_fuzz_known_types_with_random_fields(obj: dict[str, Any]) -> None:
    _decodes_or_decode_error(orjson.dumps(obj))


@settings(max_examples=200, deadline=None)
@given(S.events(), st.data())
def test_fuzz_truncated_and_damaged_bytes(event: Any, data: st.DataObject) -> None:
    raw = encode(event)
    cut = data.draw(st.integers(0, len(raw)))
    _decodes_or_decode_error(raw[:cut])
    if raw:
        i = data.draw(st.integers(0, len(raw) - 1))
        byte = data.draw(st.integers(0, 255))
        _decodes_or_decode_error(raw[:i] + bytes([byte]) + raw[i + 1 :])


@pytest.mark.parametrize("levels", [10, 100, 300])
def test_deeply_nested_input_is_a_decode_error_or_event(levels: int) -> None:
    """Tool results nest content items: deep nesting (300 levels run past
    Python's recursion limit) still gives an event or a DecodeError."""
    head = '{"type":"tool_result","tool_result":{"call_id":"c","result":"r","content_items":['
    item = head * levels + '{"type":"text","text":"x"}' + "]}}" * levels
    event = '{"type":"response.done","response":{"status":"completed","output":[' + item + "]}}"
    _decodes_or_decode_error(event.encode())
    _decodes_or_decode_error(b"[" * 5000 + b"]" * 5000)
