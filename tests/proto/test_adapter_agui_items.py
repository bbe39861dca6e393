"""Spec 001 item by item where the run encoder's scenarios do not pin a field rule."""

from __future__ import annotations

from ag_ui.core import Event
from pydantic import TypeAdapter

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.adapters.agui import RunEncoder
from uamp_proto.ids import counter_ids

EVENT = TypeAdapter(Event)


def _encoder() -> RunEncoder:
    encoder = RunEncoder("t", "r", counter_ids())
    encoder.start()
    return encoder


def test_an_activity_updated_twice_is_one_message_replaced() -> None:
    encoder = _encoder()
    [first] = encoder.feed(ev.Progress(target="search", stage="running", percent=10.0))
    [second] = encoder.feed(ev.Progress(target="search", stage="running", percent=60.0))
    [other] = encoder.feed(ev.Progress(target="fetch", stage="running"))
    assert first["messageId"] == second["messageId"] != other["messageId"]
    assert second["content"]["percent"] == 60.0 and second["activityType"] == "PROGRESS"
    assert "replace" not in second  # the default, true: the new content replaces the old
    for event in (first, second, other):
        EVENT.validate_python(event)


def test_raw_keeps_the_original_event_and_names_its_source() -> None:
    original = {"type": "x-vendor.delta", "bytes": 3}
    [raw] = _encoder().feed(ev.ResponseDelta(delta=ty.DeltaUnknown(raw=original)))
    assert raw == {"type": "RAW", "event": original, "source": "uamp"}
    EVENT.validate_python(raw)


def test_custom_names_the_event_and_carries_its_value() -> None:
    [custom] = _encoder().feed(ev.RateLimit(limit=10, remaining=0))
    assert custom["type"] == "CUSTOM" and custom["name"] == "rate_limit"
    assert custom["value"]["limit"] == 10 and custom["value"]["remaining"] == 0


def test_run_error_has_message_and_code_and_ends_the_run() -> None:
    encoder = _encoder()
    encoder.feed(ev.ResponseDelta(delta=ty.DeltaText(text="half")))
    *closing, error = encoder.error("the model went away", "provider_error")
    assert [e["type"] for e in closing] == ["TEXT_MESSAGE_END"]
    assert error == {
        "type": "RUN_ERROR",
        "message": "the model went away",
        "code": "provider_error",
    }
    EVENT.validate_python(error)


def test_content_deltas_concatenate_to_the_message_and_share_its_id() -> None:
    encoder = _encoder()
    out = [
        e
        for t in ("Hel", "lo", "", "!")
        for e in encoder.feed(ev.ResponseDelta(delta=ty.DeltaText(text=t)))
    ]
    start, *contents = out
    assert start["type"] == "TEXT_MESSAGE_START" and start["role"] == "assistant"
    assert {c["messageId"] for c in contents} == {start["messageId"]}
    assert all(c["delta"] for c in contents)  # never an empty chunk
    assert "".join(c["delta"] for c in contents) == "Hello!"
