"""The server's shortcuts for the usual turn match the general path.

``ServerConnection.next_event`` applies a client's usual ``input.text`` and a
``response.create`` on a free slot itself (``_receive_text``,
``_receive_create``), and ``send`` a ``response.done`` that names its
response in full (``_send_done``), where the tables allow them as they are.
Every test here runs the same bytes through two servers in the same state,
one with the shortcuts and one without, and compares what ``next_event``
returned or raised (or ``send`` wrote or raised), the replies owed, the ids
drawn and every piece of state of the connection and its sessions. The
tables name the shapes the shortcuts must take (so the comparison is not
vacuous) and those they must leave; hypothesis then throws sequences of
well- and ill-formed events at both. Last, ``turn_request`` (which builds the
agent's request positionally) is held to the keyword constructor.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable
from typing import Any

import attrs
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.connection import ConnectionConfig, ServerConnection
from uamp_proto.errors import LocalProtocolError, ProtocolError
from uamp_proto.ids import counter_ids
from uamp_proto.principal import Principal
from uamp_proto.responder import TurnRequest
from uamp_proto.session_request import turn_request

_SHORTCUTS = ("_receive_text", "_receive_create", "_send_done")


def _plain(value: Any) -> Any:
    """``value`` as nested builtins, every field included (``unknown`` too, which ``==`` skips)."""
    if value is None or isinstance(value, str | int | float | bool | bytes | enum.Enum):
        return value
    if isinstance(value, list | tuple | deque):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, set | frozenset):
        return sorted(map(repr, value))
    if attrs.has(type(value)):
        fields = {f.name: _plain(getattr(value, f.name)) for f in attrs.fields(type(value))}
        return (type(value).__name__, fields)
    names: list[str] = []
    for klass in type(value).__mro__:
        slots = klass.__dict__.get("__slots__", ())
        names.extend((slots,) if isinstance(slots, str) else slots)
    if hasattr(value, "__dict__"):
        names.extend(vars(value))
    return (type(value).__name__, {n: _plain(getattr(value, n)) for n in sorted(set(names))})


def _state(conn: ServerConnection) -> Any:
    """Everything the connection holds, and the next id its source gives."""
    return {
        "sessions": {sid: _plain(s) for sid, s in conn._sessions.items()},
        "ended": list(conn._ended),
        "inbox": list(conn.inbox),
        "owed": list(conn.owed),
        "last_event_id": conn.last_event_id,
        "next_event_id": next(conn._evt_ids),  # both draw one, as below
        "next_id": conn._ids("probe"),  # both draw one: the sources stay in step
    }


def _outcome(conn: ServerConnection, data: bytes) -> Any:
    """What ``next_event`` does with ``data``: the event, or the error (with its reply)."""
    conn.receive(data)
    return _result(conn.next_event)


def _result(take: Callable[[], Any]) -> Any:
    """What ``take()`` returned (the event) or raised (the error, with its reply)."""
    try:
        event = take()
    except ProtocolError as exc:
        return (
            type(exc).__name__,
            exc.code,
            exc.message,
            exc.session_id,
            exc.event_id,
            exc.field,
            _plain(exc.reply),
        )
    return (type(event).__name__, _plain(event))


def _on_busy(refuse: bool) -> Callable[[str, ev.ResponseCreate], object]:
    def on_busy(session_id: str, event: ev.ResponseCreate) -> object:
        if refuse:
            raise LocalProtocolError("busy", code="response_in_progress")
        return ("held", session_id, event.event_id)

    return on_busy


@attrs.frozen
class Setup:
    """A server's state before the message under test, built the same way for both servers."""

    accepted: bool = True  # session.created sent (ACTIVE), else CREATING
    second: bool = False  # a second session "s2"
    ended: bool = False  # a session "gone" opened and ended
    chat: bool = False  # "s1" is a chat session
    payment: bool = False  # payment.required outstanding on "s1"
    window: bool = False  # "s1" asked for a delta window
    busy: str | None = None  # None, "hold" or "refuse": the on_busy policy
    before: tuple[bytes, ...] = ()  # client messages fed first
    response: str | None = None  # "requested" or "in_progress" on "s1"


def _create(sid: str, **extra: Any) -> bytes:
    body: dict[str, Any] = {"modalities": ["text"]}
    if extra.pop("window", False):
        body["extensions"] = {"flow": {"delta_window": 4}}
    return orjson.dumps(
        {"type": "session.create", "uamp_version": "1.0", "session_id": sid, "session": body}
        | extra
    )


def _server(setup: Setup, shortcuts: bool, taken: list[str] | None = None) -> ServerConnection:
    busy = None if setup.busy is None else _on_busy(setup.busy == "refuse")
    conn = ServerConnection(ConnectionConfig(ids=counter_ids(1), on_busy=busy))

    def feed(data: bytes) -> None:
        conn.receive(data)
        conn.next_event()
        conn.data_to_send()

    chat = {"chat": "room"} if setup.chat else {}
    feed(_create("s1", window=setup.window, **chat))
    if setup.accepted:
        conn.accept("s1")
    if setup.payment and setup.accepted:
        conn.send(
            ev.PaymentRequired(requirements=ty.PaymentRequirements(amount="1")), session_id="s1"
        )
    if setup.second:
        feed(_create("s2"))
        conn.accept("s2")
    if setup.ended:
        feed(_create("gone"))
        conn.accept("gone")
        feed(orjson.dumps({"type": "session.end", "session_id": "gone"}))
    if setup.response is not None:
        feed(orjson.dumps({"type": "input.text", "session_id": "s1", "text": "earlier"}))
        feed(orjson.dumps({"type": "response.create", "session_id": "s1"}))
        if setup.response == "in_progress":
            tracker = conn.sessions["s1"].response
            assert tracker is not None
            created = ev.ResponseCreated(session_id="s1", response_id=tracker.response_id)
            conn.send(created)
    for data in setup.before:
        try:
            feed(data)
        except ProtocolError:
            conn.data_to_send()
    for name in _SHORTCUTS:
        real = getattr(conn, name)

        def shortcut(event: Any, real: Any = real, name: str = name) -> Any:
            result = real(event) if shortcuts else None
            if result and taken is not None:
                taken.append(name)
            return result

        setattr(conn, name, shortcut)
    return conn


def _compare(setup: Setup, messages: list[bytes]) -> list[str]:
    """Feed ``messages`` to both servers, comparing after each; the shortcuts taken."""
    taken: list[str] = []
    fast, general = _server(setup, True, taken), _server(setup, False)
    assert _state(fast) == _state(general)
    for data in messages:
        assert _outcome(fast, data) == _outcome(general, data), data
        assert _state(fast) == _state(general), data
    return taken


def _text(**fields: Any) -> bytes:
    return orjson.dumps({"type": "input.text", "session_id": "s1", "text": "hi", **fields})


def _make(**fields: Any) -> bytes:
    return orjson.dumps({"type": "response.create", "session_id": "s1", **fields})


def _without_session(data: bytes) -> bytes:
    obj = orjson.loads(data)
    del obj["session_id"]
    return orjson.dumps(obj)


_MESSAGES = [{"role": "user", "content": "before"}]

TEXT, CREATE, DONE = _SHORTCUTS
#: A session with one input.text pending.
_PENDING = (_text(),)

#: (case, setup, message, the shortcut that must take it or None).
CASES: list[tuple[str, Setup, bytes, str | None]] = [
    # input.text
    ("text: the ttfd client's", Setup(), _text(), TEXT),
    ("text: one session, no id", Setup(), _without_session(_text()), TEXT),
    ("text: two sessions, no id", Setup(second=True), _without_session(_text()), None),
    ("text: unknown session", Setup(), _text(session_id="nope"), None),
    ("text: ended session", Setup(ended=True), _text(session_id="gone"), None),
    ("text: before session.created", Setup(accepted=False), _text(), TEXT),
    ("text: assistant role", Setup(), _text(role="assistant"), TEXT),
    ("text: empty role", Setup(), _text(role=""), TEXT),
    ("text: null fields", Setup(), _text(role=None, context=None, messages=None), TEXT),
    ("text: ids and time", Setup(), _text(event_id="e1", timestamp=1.5), TEXT),
    ("text: extra fields", Setup(), _text(x_note={"a": 1}), TEXT),
    ("text: while a response runs", Setup(response="in_progress"), _text(), TEXT),
    ("text: after another", Setup(before=(_text(text="a"),)), _text(), TEXT),
    ("text: with payment open", Setup(payment=True), _text(), TEXT),
    ("text: context", Setup(), _text(context={"k": 1}), None),
    ("text: empty context", Setup(), _text(context={}), None),
    ("text: chat context", Setup(), _text(context={"chat_id": "c"}), None),
    ("text: chat session", Setup(chat=True), _text(), None),
    ("text: messages", Setup(), _text(messages=_MESSAGES), None),
    ("text: payment token", Setup(payment=True), _text(payment_token="tok"), None),
    ("text: text not a string", Setup(), _text(text=3), None),
    ("text: no text", Setup(), orjson.dumps({"type": "input.text", "session_id": "s1"}), None),
    ("text: session id not a string", Setup(), _text(session_id=1), None),
    # response.create
    ("create: the ttfd client's", Setup(before=_PENDING), _make(), CREATE),
    ("create: no input", Setup(), _make(), CREATE),
    ("create: one session, no id", Setup(before=_PENDING), _without_session(_make()), CREATE),
    ("create: two sessions, no id", Setup(second=True), _without_session(_make()), None),
    ("create: unknown session", Setup(), _make(session_id="nope"), None),
    ("create: ended session", Setup(ended=True), _make(session_id="gone"), None),
    ("create: before session.created", Setup(accepted=False, before=_PENDING), _make(), CREATE),
    ("create: requested", Setup(response="requested"), _make(), None),
    ("create: in progress", Setup(response="in_progress"), _make(), None),
    ("create: in progress, held", Setup(response="in_progress", busy="hold"), _make(), None),
    ("create: in progress, refused", Setup(response="in_progress", busy="refuse"), _make(), None),
    ("create: free slot, busy policy", Setup(busy="hold", before=_PENDING), _make(), CREATE),
    ("create: config", Setup(before=_PENDING), _make(response={"modalities": ["text"]}), CREATE),
    ("create: config, null messages", Setup(), _make(response={"messages": None}), CREATE),
    ("create: conversation", Setup(before=_PENDING), _make(response={"messages": _MESSAGES}), None),
    ("create: format", Setup(), _make(response_format={"type": "json_object"}), CREATE),
    ("create: extra fields", Setup(), _make(response_id="r9", x_note=1), CREATE),
    ("create: ids and time", Setup(), _make(event_id="e2", timestamp=2), CREATE),
    (
        "create: context pending",
        Setup(before=(_text(context={"k": 1}),)),
        _make(),
        CREATE,
    ),
    (
        "create: stateless input pending",
        Setup(before=(_text(messages=_MESSAGES),)),
        _make(),
        CREATE,
    ),
    ("create: chat input pending", Setup(chat=True, before=_PENDING), _make(), CREATE),
    ("create: with payment open", Setup(payment=True, before=_PENDING), _make(), CREATE),
    ("create: delta window", Setup(window=True, before=_PENDING), _make(), CREATE),
    ("create: config not an object", Setup(), _make(response="x"), None),
    ("create: messages not an array", Setup(), _make(response={"messages": "x"}), None),
]


@pytest.mark.parametrize(("case", "setup", "message", "shortcut"), CASES, ids=[c[0] for c in CASES])
def test_shortcut_matches_the_general_path(
    case: str, setup: Setup, message: bytes, shortcut: str | None
) -> None:
    taken = _compare(setup, [message])
    assert taken == ([shortcut] if shortcut else [])


def test_the_ttfd_turn_takes_both_shortcuts_every_time() -> None:
    """The bench's traffic: input.text and response.create, response after response."""
    taken: list[str] = []
    conn = _server(Setup(), True, taken)
    for _ in range(3):
        for data in (_text(), _make()):
            conn.receive(data)
            conn.next_event()
        tracker = conn.sessions["s1"].response
        assert tracker is not None
        assert tracker.input_messages == [ty.Message(role="user", content="hi")]
        conn.send(ev.ResponseCreated(response_id=tracker.response_id), session_id="s1")
        conn.send(tracker.done_event(session_id="s1"), session_id="s1")
    assert taken == list(_SHORTCUTS) * 3
    assert not conn.owed


# --- hypothesis: any sequence of events, well-formed or not ----------------------

_ABSENT: Any = object()


def _maybe(*values: Any) -> st.SearchStrategy[Any]:
    """Absent half the time (so plain events, the shortcuts' own, come often), else a value."""
    return st.sampled_from([_ABSENT] * len(values) + list(values))


def _mostly(usual: bool) -> st.SearchStrategy[bool]:
    return st.sampled_from([usual, usual, usual, not usual])


_TEXT_FIELDS = {
    "session_id": st.sampled_from(["s1", "s1", "s1", _ABSENT, "s2", "gone", "nope", None, 5]),
    "event_id": _maybe("e1", 7),
    "timestamp": _maybe(1.5, "t"),
    "text": st.sampled_from(["hi", "hi", "hi", "", 3, None, _ABSENT]),
    "role": _maybe("user", "assistant", "", None, 1),
    "messages": _maybe(None, [], _MESSAGES, [{"role": 1}], "x"),
    "context": _maybe(None, {}, {"chat_id": "c1"}, {"k": 1}, {"chat_id": 5}, []),
    "payment_token": _maybe(None, "tok", 9),
    "x_extra": _maybe(1, {"a": []}),
}
_CREATE_FIELDS = {
    "session_id": _TEXT_FIELDS["session_id"],
    "event_id": _TEXT_FIELDS["event_id"],
    "timestamp": _TEXT_FIELDS["timestamp"],
    "response": _maybe(
        None, {}, {"modalities": ["text"]}, {"messages": _MESSAGES}, {"messages": None}, "bad"
    ),
    "response_format": _maybe({"type": "json_object"}, 3),
    "response_id": _maybe("r1"),
    "x_extra": _TEXT_FIELDS["x_extra"],
}
#: Other events that move the state the shortcuts look at.
_OTHERS = [
    {"type": "response.cancel", "session_id": "s1"},
    {"type": "session.end", "session_id": "s2"},
    {"type": "input.typing", "session_id": "s1", "chat_id": "room2"},
    {"type": "session.update", "session_id": "s1", "payment_token": "tok2"},
]


def _event(kind: str, fields: dict[str, Any]) -> bytes:
    return orjson.dumps({"type": kind} | {k: v for k, v in fields.items() if v is not _ABSENT})


_messages = st.one_of(
    st.fixed_dictionaries(_TEXT_FIELDS).map(lambda f: _event("input.text", f)),
    st.fixed_dictionaries(_CREATE_FIELDS).map(lambda f: _event("response.create", f)),
    st.sampled_from(_OTHERS).map(orjson.dumps),
    st.sampled_from([b"{", b"[]", b'{"type": 1}', b'{"type": "input.text"}']),
)
_setups = st.builds(
    Setup,
    accepted=_mostly(True),
    second=_mostly(False),
    ended=st.booleans(),
    chat=_mostly(False),
    payment=_mostly(False),
    window=_mostly(False),
    busy=st.sampled_from([None, "hold", "refuse"]),
    response=st.sampled_from([None, "requested", "in_progress"]),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(setup=_setups, messages=st.lists(_messages, min_size=1, max_size=6))
def test_any_sequence_answers_as_the_general_path(setup: Setup, messages: list[bytes]) -> None:
    if setup.response is not None and not setup.accepted:
        setup = attrs.evolve(setup, accepted=True)  # a response needs an active session
    _compare(setup, messages)


def _received(conn: ServerConnection, data: bytes) -> Any:
    """What ``receive_event`` does with ``data``, in ``_outcome`` 's terms."""
    return _result(lambda: conn.receive_event(data))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    setup=_setups,
    queued=st.lists(_messages, max_size=2),
    messages=st.lists(_messages, min_size=1, max_size=5),
)
def test_receive_event_is_receive_then_next_event(
    setup: Setup, queued: list[bytes], messages: list[bytes]
) -> None:
    """``receive_event(data)`` returns, raises and changes what ``receive`` + ``next_event`` do.

    Both servers take the shortcuts; ``queued`` messages wait in the inbox
    first (``receive_event`` then returns the oldest, ``data`` behind them).
    """
    if setup.response is not None and not setup.accepted:
        setup = attrs.evolve(setup, accepted=True)
    one, two = _server(setup, True), _server(setup, True)
    for data in queued:
        one.receive(data)
        two.receive(data)
    for data in messages:
        assert _received(one, data) == _outcome(two, data), data
        assert _state(one) == _state(two), data


def test_receive_event_refuses_a_full_queue_as_receive_does() -> None:
    one = ServerConnection(ConnectionConfig(ids=counter_ids(1), max_queued=1))
    two = ServerConnection(ConnectionConfig(ids=counter_ids(1), max_queued=1))
    one.receive(_create("s1"))
    two.receive(_create("s1"))
    with pytest.raises(LocalProtocolError) as refused:
        one.receive_event(_create("s2"))
    with pytest.raises(LocalProtocolError) as expected:
        two.receive(_create("s2"))
    assert (refused.value.code, refused.value.message) == (
        expected.value.code,
        expected.value.message,
    )
    assert refused.value.code == "queue_full"
    assert list(one.inbox) == list(two.inbox) == [_create("s1")]
    # An empty queue never refuses, whatever the bound.
    assert isinstance(one.next_event(), ev.SessionCreate)
    assert isinstance(one.receive_event(_create("s2")), ev.SessionCreate)
    assert not one.inbox


# --- response.done ------------------------------------------------------------

#: How the server's response.done is sent, and whether the shortcut takes it.
DONE_CASES: list[tuple[str, Setup, bool]] = [
    ("both ids on the event", Setup(response="in_progress"), True),
    ("session id passed", Setup(response="in_progress"), False),  # the general path stamps it
    ("response id passed", Setup(response="in_progress"), False),
    ("another response id", Setup(response="in_progress"), False),
    ("unknown session", Setup(response="in_progress"), False),
    ("extra fields", Setup(response="in_progress"), False),
    ("a chat's response", Setup(response="in_progress"), False),
    ("before response.created", Setup(response="requested"), False),
    ("no response", Setup(), False),
    ("while payment is open", Setup(response="in_progress", payment=True), False),
    ("delta window", Setup(response="in_progress", window=True), True),
    ("output and usage", Setup(response="in_progress"), True),
    ("signed", Setup(response="in_progress"), True),
    ("rolled back", Setup(response="in_progress"), True),
    ("after a conversation", Setup(response="in_progress"), True),
]


def _done_outcome(conn: ServerConnection, case: str) -> Any:
    session = conn.sessions["s1"]
    tracker = session.response
    rid = tracker.response_id if tracker is not None else "resp_none"
    if case == "output and usage":
        conn.send(ev.ResponseDelta(delta=ty.DeltaText(text="out")), session_id="s1")
        usage = ty.UsageStats(input_tokens=3, output_tokens=1, total_tokens=4)
        conn.send(ev.UsageDelta(delta=usage), session_id="s1")
    if case == "rolled back":
        session.drop_response = rid
    if case == "after a conversation":
        session.history.append(ty.Message(role="user", content="long ago"))
    output = ty.ResponseOutput(id=rid, status="completed", output=[])
    if tracker is not None:
        output = tracker.done_event().response
    event = ev.ResponseDone(session_id="s1", response_id=rid, response=output)
    kwargs: dict[str, str] = {}
    if case == "session id passed":
        event, kwargs = attrs.evolve(event, session_id=None), {"session_id": "s1"}
    elif case == "response id passed":
        event, kwargs = attrs.evolve(event, response_id=None), {"response_id": rid}
    elif case == "another response id":
        event = attrs.evolve(event, response_id="resp_other")
    elif case == "unknown session":
        event = attrs.evolve(event, session_id="nope")
    elif case == "extra fields":
        event = attrs.evolve(event, unknown={"x_note": 1})
    elif case == "a chat's response":
        event = attrs.evolve(event, unknown={"chat_id": "room"})
    elif case == "signed":
        event = attrs.evolve(event, signature="sig")
    try:
        out: Any = conn.send(event, **kwargs)
    except LocalProtocolError as exc:
        out = (exc.code, exc.message, exc.session_id, exc.event_id, _plain(exc.reply))
    return out


@pytest.mark.parametrize(("case", "setup", "taken"), DONE_CASES, ids=[c[0] for c in DONE_CASES])
def test_done_shortcut_matches_the_general_path(case: str, setup: Setup, taken: bool) -> None:
    took: list[str] = []
    fast, general = _server(setup, True, took), _server(setup, False)
    assert _done_outcome(fast, case) == _done_outcome(general, case)
    assert _state(fast) == _state(general)
    assert took == ([DONE] if taken else [])


# --- the agent's request -------------------------------------------------------


def test_turn_request_fills_every_field_as_the_keyword_constructor() -> None:
    """``turn_request`` builds its TurnRequest positionally: each value lands in its field."""
    conn = _server(Setup(), True)
    tool = ty.ToolDefinition(function=ty.FunctionDefinition(name="lookup"))
    session = conn.sessions["s1"]
    session.config = ty.SessionConfig(
        modalities=["text", "audio"],
        instructions="be brief",
        tools=[tool],
        voice="alloy",
        extensions={"flow": {"delta_window": 4}, "x_opt": 1},
        response_format=ty.ResponseFormat(type="json_object"),
    )
    session.payment_token = "tok"
    session.payment.preload("tok")
    session.client_capabilities = ty.Capabilities(id="c", provider="p", modalities=["text"])
    for data in (_text(context={"k": 1}), _make()):
        conn.receive(data)
        conn.next_event()
    create = ev.ResponseCreate(session_id="s1", response=ty.ResponseConfig(instructions="shorter"))
    principal = Principal(id="alice", scheme="api_key")
    port = object()
    made = turn_request(
        session,
        create,
        agent="flood",
        transport="uamp-websocket",
        token="jwt",
        principal=principal,
        interrupts=port,  # type: ignore[arg-type]
    )
    tracker = session.response
    assert made is not None and tracker is not None
    expected = TurnRequest(
        agent="flood",
        session_id="s1",
        response_id=tracker.response_id,
        messages=[ty.Message(role="user", content="hi")],
        instructions="shorter",
        tools=[tool],
        response_format=ty.ResponseFormat(type="json_object"),
        modalities=["text", "audio"],
        token="jwt",
        payment_token="tok",
        extensions={"x_opt": 1},
        metadata={"transport": "uamp-websocket", "voice": "alloy"},
        principal=principal,
        client_capabilities=session.client_capabilities,
        context={"k": 1},
        interrupts=port,  # type: ignore[arg-type]
    )
    assert _plain(made) == _plain(expected)
    assert made.interrupts is port and made.context is tracker.context
    assert made.tools is not session.config.tools  # the agent's own lists
    assert (
        made.mcp_servers == []
        and made.mcp_servers
        is not turn_request(
            session, None, agent="a", transport="t", token=None, principal=principal
        ).mcp_servers
    )  # type: ignore[union-attr]
