"""Every JSON example of spec 000 decodes to the right class and re-encodes to
an equal JSON object (fixtures/spec_000_examples.json, table-driven)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from uamp_proto import codec, decode, encode
from uamp_proto import events as ev
from uamp_proto import types as ty

from .damage import edit, outcome, paths

FIXTURES = Path(__file__).parent / "fixtures" / "spec_000_examples.json"
EXAMPLES: list[dict[str, Any]] = [e for e in json.loads(FIXTURES.read_text()) if "json" in e]


def _id(example: dict[str, Any]) -> str:
    tag = example["json"].get("type") if example["kind"] == "event" else example["kind"]
    return f"{example['section']}-{tag}"


def test_fixture_covers_the_spec() -> None:
    events = {e["json"]["type"] for e in EXAMPLES if e["kind"] == "event"}
    kinds = {e["kind"] for e in EXAMPLES}
    assert len(EXAMPLES) >= 70
    assert {"session.create", "response.delta", "response.done", "payment.error"} <= events
    assert {"SessionConfig", "Message", "ToolDefinition", "UsageStats", "Capabilities"} <= kinds
    assert {"Session", "TextContent", "ImageContent"} <= kinds


@pytest.mark.parametrize("example", EXAMPLES, ids=_id)
def test_example_round_trips(example: dict[str, Any]) -> None:
    original = example["json"]
    data = orjson.dumps(original)
    if example["kind"] == "event":
        event = decode(data)
        tag = original["type"]
        if tag in ev.EVENT_TYPES:
            assert type(event) is ev.EVENT_TYPES[tag]
        else:  # section 4's placeholder "event.type"
            assert isinstance(event, ev.UnknownEvent)
        assert orjson.loads(encode(event)) == original
        # The generic converter agrees with whatever path decode took.
        if tag in ev.EVENT_TYPES:
            assert codec.converter.structure(original, type(event)) == event
    else:
        cls = getattr(ty, example["kind"])
        value = codec.from_dict(cls, original)
        assert type(value) is cls
        assert codec.unstructure(value) == original


def test_no_example_lands_in_unknown() -> None:
    """Known fields are modelled: no example keeps a key in an unknown bag."""

    def walk(value: Any, where: str) -> None:
        if isinstance(value, list):
            for i, item in enumerate(value):
                walk(item, f"{where}[{i}]")
        unknown = getattr(value, "unknown", None)
        if unknown is not None and hasattr(value, "__attrs_attrs__"):
            assert not unknown, f"{where} kept {dict(unknown)}"
            for field in value.__attrs_attrs__:
                if field.name != "unknown":
                    walk(getattr(value, field.name), f"{where}.{field.name}")

    for example in EXAMPLES:
        if example["kind"] == "event":
            event = decode(orjson.dumps(example["json"]))
            if not isinstance(event, ev.UnknownEvent):
                walk(event, _id(example))
        else:
            walk(codec.from_dict(getattr(ty, example["kind"]), example["json"]), _id(example))


# --- the compiled path and the generic path agree on every example ----------

_WRONG_VALUES: list[Any] = [None, 5, 1.5, True, "x", [], {}]


def _paths_for(cls: type[Any]) -> tuple[Any, Any]:
    """(compiled, generic) structure functions of ``cls``; both raise
    DecodeError, the generic one describing the cattrs failure the same way."""
    is_event = cls in ev.EVENT_TYPES.values()

    def compiled(value: Any) -> Any:
        return codec.decode_object(value) if is_event else codec.from_dict(cls, value)

    def generic(value: Any) -> Any:
        if cls is ev.SessionCreate and type(value) is dict:
            value = codec.liberal_create(value)  # decode's first step for this one type
        try:
            return codec.converter.structure(value, cls)
        except Exception:
            if is_event:
                raise codec._refused(value["type"], value) from None
            raise codec._value_error(cls, value) from None

    return compiled, generic


@pytest.mark.parametrize("example", EXAMPLES, ids=_id)
def test_compiled_and_generic_paths_agree(example: dict[str, Any]) -> None:
    """Every example, and every one-field damage of it (a key dropped, a value
    replaced by one of each JSON type), gives the same value, or the same
    DecodeError, through the compiled hooks and through the generic cattrs
    hooks; encoding gives the same bytes."""
    original = example["json"]
    if example["kind"] == "event":
        if original["type"] not in ev.EVENT_TYPES:
            return  # section 4's placeholder: no class, nothing to compare
        cls: type[Any] = ev.EVENT_TYPES[original["type"]]
    else:
        cls = getattr(ty, example["kind"])
    compiled, generic = _paths_for(cls)
    value = compiled(original)
    assert value == generic(original)
    hooks = codec._CODEC.hooks
    assert orjson.dumps(hooks.unstructure_fn(cls)(value)) == orjson.dumps(
        codec.converter.unstructure(value)
    )
    for path in paths(original):
        if path == ("type",) and example["kind"] == "event":
            continue  # the type picks the class; damaging it compares nothing
        variants = [edit(original, path, None, drop=True)]
        variants += [edit(original, path, wrong) for wrong in _WRONG_VALUES]
        for damaged in variants:
            assert outcome(compiled, damaged) == outcome(generic, damaged), (path, damaged)
