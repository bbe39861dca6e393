"""A server's ``response.created`` and text deltas written from parts match the general path.

``Connection.send`` writes the two events on every response's way to its
first delta from fixed parts and the JSON of each string
(``uamp_proto.codec.TEXT_DELTA_HEAD`` ...) when the event carries nothing but
what the server gives it. Every test here sends the same events through two
servers in the same state, one allowed to write from parts and one not
(``_plain_ids`` off: the dict and ``orjson.dumps``), and compares the bytes,
the event id each records, and the tracker. Hypothesis picks the session
id (a client proposes it), the response id (any id source's), the text and
the event ids' stem, escapes and all.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.codec import json_text
from uamp_proto.connection import ConnectionConfig, ServerConnection
from uamp_proto.types import EMPTY


def _ids(response_id: str, stem: str) -> Callable[[str], str]:
    counter = itertools.count(1)

    def make(prefix: str) -> str:
        if prefix == "resp":
            return response_id
        if prefix == "evt":
            return stem
        return f"{prefix}_{next(counter)}"

    return make


def _server(sid: str, rid: str, stem: str, parts: bool, clock: bool = False) -> ServerConnection:
    config = ConnectionConfig(ids=_ids(rid, stem), clock=(lambda: 12.5) if clock else None)
    conn = ServerConnection(config)
    conn.receive(
        orjson.dumps(
            {"type": "session.create", "uamp_version": "1.0", "session_id": sid, "session": {}}
        )
    )
    conn.next_event()
    conn.accept(sid)
    conn.receive(orjson.dumps({"type": "input.text", "session_id": sid, "text": "hi"}))
    conn.receive(orjson.dumps({"type": "response.create", "session_id": sid}))
    conn.next_event()
    conn.next_event()
    if not parts:
        conn._plain_ids = False
    return conn


def _sent(conn: ServerConnection, event: Any, **ids: str | None) -> Any:
    try:
        data: Any = conn.send(event, **ids)
    except Exception as exc:  # the same refusal, or the same encoder error
        data = (type(exc).__name__, str(exc))
    tracker = conn.sessions[next(iter(conn.sessions))].response
    state = None if tracker is None else (tracker.state, tracker.text, tracker.output)
    return data, conn.last_event_id, state


def _both(sid: str, rid: str, stem: str, clock: bool = False) -> list[ServerConnection]:
    return [_server(sid, rid, stem, parts, clock) for parts in (True, False)]


_TEXTS = st.text(st.characters(codec="utf-8") | st.sampled_from('"\\\n\x00\u2028é😀'), max_size=12)
_IDS = st.text(max_size=10)  # lone surrogates too: orjson refuses them either way


@settings(max_examples=300, deadline=None)
@given(sid=_IDS, rid=_IDS, texts=st.lists(_TEXTS, min_size=1, max_size=3), stem=_IDS)
def test_created_then_deltas_write_the_general_paths_bytes(
    sid: str, rid: str, texts: list[str], stem: str
) -> None:
    parts, general = _both(sid, rid, stem)
    created = ev.ResponseCreated(response_id=rid, session_id=sid)
    assert _sent(parts, created, session_id=sid) == _sent(general, created, session_id=sid)
    for text in texts:
        delta = ev.ResponseDelta(delta=ty.DeltaText(text=text))
        first = _sent(parts, delta, session_id=sid, response_id=rid)
        assert first == _sent(general, delta, session_id=sid, response_id=rid)


def _delta(**fields: Any) -> ev.ResponseDelta:
    return ev.ResponseDelta(delta=ty.DeltaText(text="a"), **fields)


#: Deltas the parts must leave to the general path, with the ids send is given.
_LEFT: dict[str, tuple[ev.Event, dict[str, str | None]]] = {
    "own session id": (_delta(session_id="s"), {"response_id": "r"}),
    "own response id": (_delta(response_id="r"), {"session_id": "s"}),
    "own event id": (_delta(event_id="e1"), {"session_id": "s", "response_id": "r"}),
    "timestamp": (_delta(timestamp=3.0), {"session_id": "s", "response_id": "r"}),
    "unknown keys": (_delta(unknown={"x": 1}), {"session_id": "s", "response_id": "r"}),
    "an empty bag of its own": (_delta(unknown={}), {"session_id": "s", "response_id": "r"}),
    "no response id": (_delta(), {"session_id": "s"}),
    "tool call": (
        ev.ResponseDelta(delta=ty.DeltaToolCall(tool_call=ty.ToolCallFragment(id="c"))),
        {"session_id": "s", "response_id": "r"},
    ),
    "unknown keys in the text": (
        ev.ResponseDelta(delta=ty.DeltaText(text="a", unknown={"y": 2})),
        {"session_id": "s", "response_id": "r"},
    ),
}


@pytest.mark.parametrize("case", sorted(_LEFT))
def test_other_deltas_take_the_general_path_and_agree(case: str) -> None:
    event, ids = _LEFT[case]
    parts, general = _both("s", "r", "evt_1")
    assert _sent(parts, event, **ids) == _sent(general, event, **ids)
    assert parts._delta_tail is None  # not written from parts


def test_a_clock_or_an_id_to_escape_takes_the_general_path() -> None:
    for sid, stem, clock in (("s", "evt_1", True), ("s", 'e"v', False), ("s", "e\\v", False)):
        parts, general = _both(sid, "r", stem, clock)
        for event, ids in (
            (ev.ResponseCreated(response_id="r", session_id=sid), {"session_id": sid}),
            (_delta(), {"session_id": sid, "response_id": "r"}),
        ):
            assert _sent(parts, event, **ids) == _sent(general, event, **ids)
        assert parts._delta_tail is None


def test_the_usual_events_are_written_from_parts() -> None:
    conn = _server("sess_1", "resp_1", "evt_1", parts=True)
    created = conn.send(ev.ResponseCreated(response_id="resp_1", session_id="sess_1"))
    assert created == (
        b'{"type":"response.created","response_id":"resp_1","session_id":"sess_1",'
        b'"event_id":"evt_1.2"}'
    )
    delta = conn.send(_delta(), session_id="sess_1", response_id="resp_1")
    assert delta == (
        b'{"type":"response.delta","delta":{"type":"text","text":"a"},"session_id":"sess_1",'
        b'"response_id":"resp_1","event_id":"evt_1.3"}'
    )
    assert conn._delta_tail is not None and conn.last_event_id == "evt_1.3"
    assert _delta().unknown is EMPTY and ty.DeltaText(text="a").unknown is EMPTY


@pytest.mark.parametrize(
    ("value", "plain"),
    [
        ("evt_1.", True),
        ("0e63df0c-", True),
        ("é", True),
        ('a"', False),
        ("a\\", False),
        ("a\n", False),
        ("\ud800", False),
    ],
)
def test_json_text(value: str, plain: bool) -> None:
    assert json_text(value) is plain
