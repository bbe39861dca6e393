"""The agent boundary's helpers."""

from __future__ import annotations

import json

import pytest

from uamp_proto import types as ty
from uamp_proto.responder import Responder, TurnRequest, placeholder_arguments


def _tool(parameters: dict[str, object] | None) -> ty.ToolDefinition:
    return ty.ToolDefinition(function=ty.FunctionDefinition(name="t", parameters=parameters))


@pytest.mark.parametrize(
    ("parameters", "expected"),
    [
        (None, {"query": "héllo"}),
        ({"type": "object", "properties": {}}, {"query": "héllo"}),
        (
            {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer"},
                    "metric": {"type": ["boolean", "null"]},
                    "tags": {"type": "array"},
                    "opts": {"type": "object"},
                    "free": {},
                },
                "required": ["city", "days", "metric", "tags", "opts", "free"],
            },
            {"city": "héllo", "days": 0, "metric": False, "tags": [], "opts": {}, "free": "héllo"},
        ),
    ],
)
def test_placeholder_arguments(parameters: dict[str, object] | None, expected: object) -> None:
    text = placeholder_arguments(_tool(parameters), "héllo")
    assert json.loads(text) == expected
    assert " " not in text and "héllo" in text  # compact, UTF-8 kept


def test_turn_request_defaults_and_protocol() -> None:
    request = TurnRequest(agent="a", session_id="s", response_id="r", messages=[])
    assert request.tools == [] and request.modalities == ["text"] and request.metadata == {}

    class Minimal:
        name = "m"

        def capabilities(self) -> ty.Capabilities:
            return ty.Capabilities(id="m", provider="p", modalities=["text"])

        async def respond(self, request: TurnRequest, emit: object) -> None:
            return None

    assert isinstance(Minimal(), Responder)
    assert not isinstance(object(), Responder)


def test_with_ids_fills_only_what_is_missing() -> None:
    from uamp_proto import events as ev

    delta = ev.ResponseDelta(delta=ty.DeltaText(text="x"), event_id="e1")
    filled = ev.with_ids(delta, session_id="s", response_id="r")
    assert (filled.session_id, filled.response_id, filled.event_id) == ("s", "r", "e1")
    assert filled.delta is delta.delta
    own = ev.ResponseDelta(delta=ty.DeltaText(text="x"), session_id="mine", response_id="r0")
    assert ev.with_ids(own, session_id="s", response_id="r") is own
    pong = ev.with_ids(ev.Pong(), session_id="s", response_id="r")
    assert pong == ev.Pong(session_id="s")  # Pong has no response_id field
    usage = ev.UsageDelta(delta=ty.UsageStats(output_tokens=1))
    assert ev.with_ids(usage, session_id=None, response_id="r").response_id == "r"
