"""What a UAMP session gathers and keeps is bounded (``uamp_proto.connection``).

A client can send input without ever asking for a response, and continue a
session turn after turn: the input gathered for the next response and the
conversation kept for the ones after are bounded in bytes (and messages),
on the shortcuts and on the general path alike.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.connection import ConnectionConfig, ServerConnection
from uamp_proto.errors import RemoteProtocolError
from uamp_proto.history import message_weight, trim, weight
from uamp_proto.ids import counter_ids
from uamp_proto.principal import ANONYMOUS
from uamp_proto.session_request import turn_request


def _server(shortcuts: bool = True, **limits: Any) -> ServerConnection:
    conn = ServerConnection(ConnectionConfig(ids=counter_ids(1), **limits))
    if not shortcuts:
        conn._receive_text = conn._receive_create = lambda event: False  # type: ignore[method-assign]
        conn._send_done = lambda event: None  # type: ignore[method-assign]
    _feed(conn, {"type": "session.create", "uamp_version": "1.0", "session_id": "s1"})
    conn.accept("s1")
    conn.data_to_send()
    return conn


def _feed(conn: ServerConnection, event: dict[str, Any]) -> Any:
    conn.receive(orjson.dumps(event))
    return conn.next_event()


def _say(conn: ServerConnection, text: str, **fields: Any) -> Any:
    return _feed(conn, {"type": "input.text", "session_id": "s1", "text": text, **fields})


def _turn(conn: ServerConnection, text: str, reply: str = "ok") -> None:
    _say(conn, text)
    _feed(conn, {"type": "response.create", "session_id": "s1"})
    tracker = conn.sessions["s1"].response
    assert tracker is not None
    rid = tracker.response_id
    conn.send(ev.ResponseCreated(session_id="s1", response_id=rid))
    conn.send(ev.ResponseDelta(delta=ty.DeltaText(text=reply)), session_id="s1")
    done = tracker.done_event().response
    conn.send(ev.ResponseDone(session_id="s1", response_id=rid, response=done))


@pytest.mark.parametrize("shortcuts", [True, False])
@pytest.mark.parametrize("context", [None, {"note": "x"}])
def test_input_past_the_bound_is_refused_and_changes_nothing(
    shortcuts: bool, context: dict[str, Any] | None
) -> None:
    conn = _server(shortcuts, max_pending_input_bytes=100)
    extra = {"context": context} if context else {}
    _say(conn, "a" * 40, **extra)
    _say(conn, "b" * 40, **extra)
    session = conn.sessions["s1"]
    before = (list(session.pending_input), session.pending_bytes)
    with pytest.raises(RemoteProtocolError) as refused:
        _say(conn, "c" * 40, **extra)
    assert refused.value.code == "invalid_request"
    assert refused.value.field == "text"
    assert b'"invalid_request"' in b"".join(conn.data_to_send())  # the client is told
    assert (list(session.pending_input), session.pending_bytes) == before == (before[0], 80)
    _say(conn, "d" * 20, **extra)  # what still fits is taken
    assert session.pending_bytes == 100
    _feed(conn, {"type": "response.create", "session_id": "s1"})
    assert session.pending_bytes == 0 and not session.pending_input
    _say(conn, "e" * 90, **extra)  # the next response's input starts afresh
    assert session.pending_bytes == 90


def test_media_input_counts_as_sent() -> None:
    conn = _server(max_pending_input_bytes=1000)
    image = {"type": "input.image", "session_id": "s1", "image": "i" * 600, "format": "png"}
    _feed(conn, image)
    with pytest.raises(RemoteProtocolError) as refused:
        _feed(conn, image)
    assert refused.value.code == "invalid_request"
    assert len(conn.sessions["s1"].pending_input) == 1


@pytest.mark.parametrize("shortcuts", [True, False])
def test_a_long_session_keeps_its_newest_turns_within_both_bounds(shortcuts: bool) -> None:
    conn = _server(shortcuts, max_history_bytes=1000, max_history_messages=10)
    session = conn.sessions["s1"]
    lists = set()
    for n in range(40):
        _turn(conn, f"{n:03d}" + "x" * 97)
        assert session.history_bytes <= 1000 and len(session.history) <= 10
        assert session.history_bytes == sum(map(weight, session.history))
        assert session.history[0].role == "user"
        lists.add(id(session.history))
    assert session.history[-2].text.startswith("039")  # the newest turn is kept
    assert len(lists) > 1  # trimmed into new lists (what reads the list incrementally sees it)
    _say(conn, "next")
    _feed(conn, {"type": "response.create", "session_id": "s1"})
    request = turn_request(
        session,
        ev.ResponseCreate(session_id="s1"),
        agent="a",
        transport="uamp",
        token=None,
        principal=ANONYMOUS,
    )
    assert request is not None and len(request.messages) <= 11  # the agent gets a bounded copy


def test_a_replaced_history_is_weighed_anew() -> None:
    conn = _server(max_history_bytes=1000, max_history_messages=100)
    session = conn.sessions["s1"]
    earlier = [ty.Message(role="user", content="m" * 300) for _ in range(5)]
    _say(
        conn,
        "now",
        messages=[
            orjson.loads(orjson.dumps({"role": "user", "content": m.content})) for m in earlier
        ],
    )
    _feed(conn, {"type": "response.create", "session_id": "s1"})
    tracker = session.response
    assert tracker is not None
    rid = tracker.response_id
    conn.send(ev.ResponseCreated(session_id="s1", response_id=rid))
    done = tracker.done_event().response
    conn.send(ev.ResponseDone(session_id="s1", response_id=rid, response=done))
    assert session.history_bytes == sum(map(weight, session.history)) <= 1000
    assert session.history[-1].text == "now"
    # The weights are handed out while they are the history's, and no longer.
    assert session.history_weights() == [message_weight(m) for m in session.history]
    session.history = [*session.history, ty.Message(role="user", content="x")]
    assert session.history_weights() is None


_TEXT = st.one_of(st.none(), st.text(max_size=20))


@given(
    st.sampled_from(["user", "assistant", "tool", "system"]),
    _TEXT,
    _TEXT,
    _TEXT,
    st.one_of(st.none(), st.lists(st.text(max_size=10), max_size=3)),
    st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=2),
)
def test_the_plain_message_weight_is_the_general_one(
    role: str,
    content: str | None,
    name: str | None,
    call: str | None,
    items: list[str] | None,
    unknown: dict[str, str],
) -> None:
    message = ty.Message(
        role=role,
        content=content,
        name=name,
        tool_call_id=call,
        content_items=None if items is None else [ty.TextContent(text=t) for t in items],
        unknown=unknown,
    )
    assert message_weight(message) == weight(message)


def test_input_taken_back_leaves_the_count() -> None:
    conn = _server(max_pending_input_bytes=1000)
    audio = {"type": "input.audio", "session_id": "s1", "audio": "a" * 600, "format": "pcm16"}
    for _ in range(5):  # a room's call: each chunk goes to the other side, not the input
        _feed(conn, audio)
        conn.sessions["s1"].drop_last_input()
    session = conn.sessions["s1"]
    assert session.pending_bytes == 0 and not session.pending_input


@given(st.lists(st.tuples(st.integers(0, 400), st.integers(0, 300)), min_size=1, max_size=40))
def test_what_a_session_keeps_is_what_trim_keeps(turns: list[tuple[int, int]]) -> None:
    conn = _server(max_history_bytes=1000, max_history_messages=12)
    session = conn.sessions["s1"]
    for asked, answered in turns:
        before = list(session.history)
        _turn(conn, "q" * asked, "a" * answered)
        joined = [*before, *session.history[-2:]] if len(session.history) >= 2 else before
        if sum(map(weight, joined)) > 1000 or len(joined) > 12:
            trim(joined, max_messages=9, max_bytes=750)  # three quarters of both
        assert session.history == joined
        assert session.history_bytes == sum(map(weight, session.history))


# --- what a server's per-principal budget asks of the core (ConnectionConfig.on_history) ---


@pytest.mark.parametrize("shortcuts", [True, False])
def test_each_turn_reports_the_sessions_kept_weight(shortcuts: bool) -> None:
    told: list[tuple[str, int]] = []
    conn = _server(shortcuts, max_history_bytes=100, on_history=lambda s, n: told.append((s, n)))
    _turn(conn, "a" * 30)
    _turn(conn, "b" * 30)
    session = conn.sessions["s1"]
    assert told == [("s1", 4 + 30 + 9 + 2), ("s1", 2 * (4 + 30 + 9 + 2))]
    _turn(conn, "c" * 30)  # 135 past the bound: trimmed to 3/4 of it, then told
    assert told[-1] == ("s1", session.history_bytes) and session.history_bytes <= 75
    assert session.history_bytes == sum(weight(m) for m in session.history)


@pytest.mark.parametrize("shortcuts", [True, False])
def test_a_forgotten_history_starts_the_next_turn_afresh(shortcuts: bool) -> None:
    told: list[tuple[str, int]] = []
    conn = _server(shortcuts, on_history=lambda s, n: told.append((s, n)))
    _turn(conn, "first")
    session = conn.sessions["s1"]
    old = session.history
    conn.forget_history("s1")
    conn.forget_history("nobody")  # an unknown session: nothing happens
    assert session.history == [] and session.history is not old  # a new list
    assert session.history_bytes == 0
    _say(conn, "second")
    _feed(conn, {"type": "response.create", "session_id": "s1"})
    request = turn_request(session, None, agent="a", transport="t", token=None, principal=ANONYMOUS)
    assert [m.text for m in request.messages] == ["second"]  # the agent sees the trimmed one
    tracker = session.response
    assert tracker is not None
    conn.send(ev.ResponseCreated(session_id="s1", response_id=tracker.response_id))
    done = tracker.done_event().response
    conn.send(ev.ResponseDone(session_id="s1", response_id=tracker.response_id, response=done))
    assert told[-1] == ("s1", weight(session.history[0]))  # the turn is counted anew


def test_a_history_replaced_from_outside_is_weighed_bounded_and_reported() -> None:
    told: list[tuple[str, int]] = []
    conn = _server(max_history_bytes=100, on_history=lambda s, n: told.append((s, n)))
    session = conn.sessions["s1"]
    session.history = [ty.Message(role="user", content="x" * 40) for _ in range(4)]  # a resume
    conn.bound_history("s1")
    conn.bound_history("nobody")
    assert told == [("s1", session.history_bytes)]
    assert session.history_bytes == sum(weight(m) for m in session.history) <= 75
