"""The connection state machine: lifecycle, routing, order tables, errors."""

from __future__ import annotations

from typing import Any

import attrs
import orjson
import pytest

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.connection import (
    NEED_DATA,
    ClientConnection,
    ConnectionConfig,
    ResponseState,
    ServerConnection,
    SessionState,
)
from uamp_proto.errors import FlowControlError, LocalProtocolError, RemoteProtocolError
from uamp_proto.ids import counter_ids

from .pair import Pair
from .samples import MINIMAL


def _remote_error(conn: ServerConnection | ClientConnection, data: bytes) -> RemoteProtocolError:
    conn.receive(data)
    with pytest.raises(RemoteProtocolError) as info:
        conn.next_event()
    return info.value


# --- session lifecycle -------------------------------------------------------


def test_sent_events_decode_to_the_same_events_both_ways() -> None:
    pair = Pair()
    sid = pair.open(agent="demo", token="jwt")
    assert pair.server.session(sid).agent == "demo"
    assert pair.server.session(sid).token == "jwt"
    sent = ev.InputText(text="What is 2+2?", role="user", context={"chat_id": "c"})
    got = pair.client_sends(sent)
    assert isinstance(got, ev.InputText)
    assert (got.text, got.role, got.context) == (sent.text, sent.role, sent.context)
    caps = ev.CapabilitiesEvent(
        capabilities=ty.Capabilities(id="a", provider="p", modalities=["text"])
    )
    got_caps = pair.server_sends(caps)
    assert got_caps == attrs_copy(caps, got_caps)


def attrs_copy(original: ev.Event, received: ev.Event) -> ev.Event:
    """``original`` with the ids the connection stamped on ``received``."""
    import attrs

    return attrs.evolve(original, event_id=received.event_id)


def test_session_create_then_created_makes_the_session_active_on_both_sides() -> None:
    pair = Pair()
    data = pair.client.create_session(agent="a")
    assert pair.client.session().state is SessionState.CREATING
    create = pair.to_server(data)
    assert isinstance(create, ev.SessionCreate) and create.session_id == "sess_2"
    assert pair.server.session("sess_2").state is SessionState.CREATING
    created = pair.to_client(pair.server.accept("sess_2", created_at=1.0))
    assert isinstance(created, ev.SessionCreated)
    assert created.session.id == "sess_2" and created.session.status == "active"
    assert pair.server.session("sess_2").state is SessionState.ACTIVE
    assert pair.client.session("sess_2").state is SessionState.ACTIVE


def test_client_may_pipeline_input_before_session_created() -> None:
    pair = Pair()
    pair.server.receive(pair.client.create_session())
    pair.server.receive(pair.client.send(ev.InputText(text="early")))
    pair.server.receive(pair.client.send(ev.ResponseCreate()))
    events = list(pair.server)
    assert [e.type for e in events] == ["session.create", "input.text", "response.create"]
    session = pair.server.session()
    assert session.response is not None
    assert session.response.input_messages[0].content == "early"


def test_session_update_refreshes_token_and_is_confirmed() -> None:
    pair = Pair()
    sid = pair.open(token="old")
    update = pair.client_sends(ev.SessionUpdate(session_id=sid, token="new", payment_token="pt"))
    assert isinstance(update, ev.SessionUpdate)
    assert pair.server.session(sid).token == "new"
    assert pair.server.session(sid).payment.token == "pt"
    confirmed = pair.server_sends(ev.SessionUpdated(session_id=sid))
    assert confirmed.type == "session.updated"


def test_connection_level_session_update_applies_to_every_session() -> None:
    pair = Pair()
    a, b = pair.open(), pair.open()
    pair.client_sends(ev.SessionUpdate(token="everyone"))
    assert pair.server.session(a).token == pair.server.session(b).token == "everyone"


@pytest.mark.parametrize("ender", ["client", "server"])
def test_session_end_from_either_side_ends_it(ender: str) -> None:
    pair = Pair()
    sid = pair.open()
    if ender == "client":
        pair.client_sends(ev.SessionEnd(session_id=sid, reason="user_left"))
    else:
        pair.server_sends(ev.SessionEnd(session_id=sid, reason="timeout"))
    assert sid not in pair.server.sessions and sid not in pair.client.sessions
    err = _remote_error(
        pair.server, orjson.dumps({"type": "input.text", "text": "x", "session_id": sid})
    )
    assert err.code == "session_ended"


def test_ping_is_answered_with_pong_automatically() -> None:
    pair = Pair()
    pair.server.receive(orjson.dumps({"type": "ping", "event_id": "p1"}))
    assert isinstance(pair.server.next_event(), ev.Ping)
    (owed,) = pair.server.data_to_send()
    assert orjson.loads(owed)["type"] == "pong"


def test_ping_in_a_session_gets_a_pong_in_that_session() -> None:
    pair = Pair()
    a, b = pair.open(), pair.open()
    pair.server.receive(pair.client.send(ev.Ping(session_id=b)))
    pair.server.next_event()
    (owed,) = pair.server.data_to_send()
    assert orjson.loads(owed) == {
        "type": "pong",
        "session_id": b,
        "event_id": orjson.loads(owed)["event_id"],
    }
    assert a != b


def test_capabilities_query_and_client_capabilities() -> None:
    pair = Pair()
    sid = pair.open()
    query = pair.client_sends(ev.CapabilitiesQuery(session_id=sid, model="m"))
    assert isinstance(query, ev.CapabilitiesQuery) and query.model == "m"
    caps = ty.Capabilities(id="web", provider="x", modalities=["text", "image"])
    pair.client_sends(ev.ClientCapabilities(session_id=sid, capabilities=caps))
    assert pair.server.session(sid).client_capabilities == caps


def test_next_event_returns_need_data_when_empty() -> None:
    assert ServerConnection().next_event() is NEED_DATA


# --- multiplexing ------------------------------------------------------------


def test_multiplexed_sessions_route_events_and_keep_their_own_context() -> None:
    pair = Pair()
    alice = pair.open(agent="alice", token="jwt-a")
    bob = pair.open(agent="bob", token="jwt-b")
    assert alice != bob
    pair.client_sends(ev.InputText(session_id=alice, text="Hi Alice"))
    pair.client_sends(ev.InputText(session_id=bob, text="Hi Bob"))
    assert pair.server.session(alice).pending_input[0][1] == ty.TextContent(text="Hi Alice")
    assert pair.server.session(bob).pending_input[0][1] == ty.TextContent(text="Hi Bob")
    assert (pair.server.session(alice).agent, pair.server.session(bob).token) == ("alice", "jwt-b")


def test_event_without_session_id_in_multiplexed_mode_is_refused() -> None:
    pair = Pair()
    pair.open(), pair.open()
    err = _remote_error(
        pair.server, orjson.dumps({"type": "input.text", "text": "who?", "event_id": "e9"})
    )
    assert err.code == "session_id_required"
    assert isinstance(err.reply, ev.SessionErrorEvent) and err.reply.error.details == {
        "event_id": "e9",
        "event_type": "input.text",
    }
    with pytest.raises(LocalProtocolError):
        pair.client.send(ev.InputText(text="who?"))


def test_unknown_session_gets_session_error_and_never_reaches_a_neighbour() -> None:
    pair = Pair()
    a = pair.open()
    pair.client_sends(ev.InputText(session_id=a, text="mine"))
    err = _remote_error(
        pair.server, orjson.dumps({"type": "input.text", "session_id": "nope", "text": "x"})
    )
    assert err.code == "unknown_session"
    (owed,) = pair.server.data_to_send()
    reply = orjson.loads(owed)
    assert reply["type"] == "session.error" and reply["error"]["code"] == "unknown_session"
    assert [i for _, i in pair.server.session(a).pending_input] == [ty.TextContent(text="mine")]
    # The connection keeps working for the neighbour.
    assert pair.client_sends(ev.InputText(session_id=a, text="still here")).type == "input.text"


def test_bad_event_in_one_session_leaves_the_other_untouched() -> None:
    pair = Pair()
    a, b = pair.open(), pair.open()
    rid = pair.start_response(b)
    err = _remote_error(pair.server, orjson.dumps({"type": "response.create", "session_id": b}))
    assert err.code == "response_in_progress" and err.session_id == b
    assert pair.server.session(a).phase is ResponseState.IDLE
    assert pair.server.session(b).response is not None
    assert pair.server.session(b).response.response_id == rid


def test_no_session_yet_is_refused() -> None:
    err = _remote_error(ServerConnection(), orjson.dumps({"type": "input.text", "text": "x"}))
    assert err.code == "no_session"


def test_max_sessions_per_connection() -> None:
    server = ServerConnection(ConnectionConfig(max_sessions=2))
    client = ClientConnection()
    for _ in range(2):
        server.receive(client.create_session())
        server.next_event()
    err = _remote_error(
        server,
        orjson.dumps(
            {"type": "session.create", "uamp_version": "1.0", "session": {"modalities": ["text"]}}
        ),
    )
    assert err.code == "too_many_sessions"
    # A proposed id is named in the refusal: the client fails that opening.
    proposed = client.create_session(session_id="third")
    err = _remote_error(server, proposed)
    assert err.code == "too_many_sessions" and err.session_id == "third"
    assert isinstance(err.reply, ev.SessionErrorEvent) and err.reply.session_id == "third"
    client.receive(server.data_to_send()[-1])
    refused = client.next_event()
    assert isinstance(refused, ev.SessionErrorEvent) and "third" not in client.sessions


def test_client_proposed_session_id_is_used_and_duplicates_refused() -> None:
    pair = Pair()
    created = pair.to_server(pair.client.create_session(session_id="mine"))
    assert created.session_id == "mine"
    err = _remote_error(
        pair.server,
        orjson.dumps(
            {
                "type": "session.create",
                "session_id": "mine",
                "uamp_version": "1.0",
                "session": {"modalities": ["text"]},
            }
        ),
    )
    assert err.code == "duplicate_session"


# --- versions ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "ok"),
    [("1.0", True), ("1.1", True), ("1.9.3", True), ("2.0", False), ("0.9", False), ("x", False)],
)
def test_version_negotiation(version: str, ok: bool) -> None:
    server = ServerConnection()
    server.receive(
        orjson.dumps(
            {"type": "session.create", "uamp_version": version, "session": {"modalities": ["text"]}}
        )
    )
    if ok:
        assert server.next_event().type == "session.create"  # type: ignore[union-attr]
        return
    with pytest.raises(RemoteProtocolError) as info:
        server.next_event()
    assert info.value.code == "version_mismatch"
    reply = orjson.loads(server.data_to_send()[0])
    assert reply["type"] == "response.error"
    assert reply["error"]["code"] == "version_mismatch"
    assert reply["error"]["details"]["supported"] == ["1.0"]
    assert not server.sessions


# --- input accumulation (section 8.5.1) ---------------------------------------


def test_inputs_accumulate_into_one_user_message_with_content_items() -> None:
    pair = Pair()
    sid = pair.open()
    pair.client_sends(ev.InputText(text="Describe these"))
    pair.client_sends(
        ev.InputImage(image=ty.MediaURL(url="/api/content/1"), detail="low", content_id="img-1")
    )
    pair.client_sends(ev.InputAudio(audio="AAAA", format="wav"))
    pair.client_sends(ev.InputVideo(video=ty.MediaURL(url="v.mp4"), format="mp4"))
    pair.client_sends(ev.InputFile(file="AAAA", filename="r.pdf", mime_type="application/pdf"))
    pair.client_sends(ev.ResponseCreate())
    tracker = pair.server.session(sid).response
    assert tracker is not None
    (message,) = tracker.input_messages
    assert message.role == "user" and message.content == "Describe these"
    assert message.content_items is not None
    kinds = [item.type for item in message.content_items]
    assert kinds == ["text", "image", "audio", "video", "file"]
    image = message.content_items[1]
    assert isinstance(image, ty.ImageContent) and image.content_id == "img-1"
    # Absent content ids come from the injected id source.
    assigned = [getattr(i, "content_id", None) for i in message.content_items[2:]]
    assert all(cid and cid.startswith("content_") for cid in assigned)
    assert len(set(assigned)) == 3
    assert pair.server.session(sid).pending_input == []


def test_stateless_messages_replace_history_without_duplicating_the_input() -> None:
    pair = Pair()
    sid = pair.open()
    history = [
        ty.Message(role="system", content="Be brief."),
        ty.Message(role="user", content="Paris?"),
    ]
    pair.client_sends(ev.InputText(text="Paris?", messages=history))
    pair.client_sends(ev.ResponseCreate())
    session = pair.server.session(sid)
    assert session.history == history
    assert session.response is not None and session.response.input_messages == []
    assert [m.role for m in session.conversation()] == ["system", "user"]


# --- response lifecycle and tools --------------------------------------------


def test_full_response_with_a_client_tool_round_trip_builds_history() -> None:
    pair = Pair()
    sid = pair.open()
    rid = pair.start_response(sid, "weather?")
    pair.server_sends(ev.ToolCall(call_id="call_1", name="search", arguments='{"q":"w"}'))
    tracker = pair.server.session(sid).response
    assert tracker is not None and [c.id for c in tracker.pending_tool_calls] == ["call_1"]
    pair.client_sends(ev.ToolResult(call_id="call_1", result='{"t":22}'))
    assert tracker.pending_tool_calls == []
    for chunk in ("It is ", "22C"):
        pair.server_sends(ev.ResponseDelta(response_id=rid, delta=ty.DeltaText(text=chunk)))
    pair.server_sends(ev.UsageDelta(delta=ty.UsageStats(input_tokens=3, output_tokens=4)))
    done = pair.server_sends(tracker.done_event())
    assert isinstance(done, ev.ResponseDone)
    assert [i.type for i in done.response.output] == ["tool_call", "tool_result", "text"]
    assert done.response.usage is not None and done.response.usage.total_tokens == 7
    for side in (pair.server, pair.client):
        session = side.session(sid)
        assert session.phase is ResponseState.IDLE and session.response is None
        assert [m.role for m in session.history] == ["user", "assistant", "tool", "assistant"]
        assert session.history[-1].content == "It is 22C"


@pytest.mark.parametrize(
    ("call_id", "answer_twice", "code"),
    [("unknown", False, "invalid_tool_result"), ("call_1", True, "invalid_tool_result")],
)
def test_bad_tool_results_are_refused(call_id: str, answer_twice: bool, code: str) -> None:
    pair = Pair()
    sid = pair.open()
    pair.start_response(sid)
    pair.server_sends(ev.ToolCall(call_id="call_1", name="f", arguments="{}"))
    if answer_twice:
        pair.client_sends(ev.ToolResult(call_id="call_1", result="1"))
    err = _remote_error(
        pair.server, orjson.dumps({"type": "tool.result", "call_id": call_id, "result": "2"})
    )
    assert err.code == code and call_id in err.message
    assert pair.server.session(sid).phase is ResponseState.IN_PROGRESS


def test_cancel_yields_partial_output_and_frees_the_slot() -> None:
    pair = Pair()
    sid = pair.open()
    rid = pair.start_response(sid)
    pair.server_sends(ev.ResponseDelta(delta=ty.DeltaText(text="The weather in")))
    cancel = pair.client_sends(ev.ResponseCancel(response_id=rid))
    assert isinstance(cancel, ev.ResponseCancel)
    tracker = pair.server.session(sid).response
    assert tracker is not None
    cancelled = pair.server_sends(tracker.cancelled_event())
    assert isinstance(cancelled, ev.ResponseCancelled)
    assert cancelled.partial_output == [ty.TextContent(text="The weather in")]
    assert pair.server.session(sid).phase is ResponseState.IDLE
    # A late cancel for the finished response is harmless; a new response can start.
    assert pair.client_sends(ev.ResponseCancel(response_id=rid)).type == "response.cancel"
    pair.start_response(sid, "again")


def test_cancel_naming_another_response_is_refused() -> None:
    pair = Pair()
    sid = pair.open()
    pair.start_response(sid)
    err = _remote_error(
        pair.server, orjson.dumps({"type": "response.cancel", "response_id": "resp_other"})
    )
    assert err.code == "unknown_response"


def test_local_violation_changes_nothing() -> None:
    pair = Pair()
    sid = pair.open()
    with pytest.raises(LocalProtocolError) as info:
        pair.server.send(ev.ResponseDelta(delta=ty.DeltaText(text="too early")))
    assert "response" in info.value.message
    assert pair.server.session(sid).phase is ResponseState.IDLE
    with pytest.raises(LocalProtocolError):
        pair.client.send(ev.ResponseDelta(delta=ty.DeltaText(text="a client never sends this")))
    with pytest.raises(LocalProtocolError):
        pair.server.send(ev.SystemStop())


# The order tables are walked exhaustively in test_state_walk.py.

# --- payment ------------------------------------------------------------------------


def test_no_content_while_payment_is_required_then_resume_after_acceptance() -> None:
    pair = Pair()
    sid = pair.open()
    rid = pair.start_response(sid)
    pair.server_sends(ev.ResponseDelta(delta=ty.DeltaText(text="Part one. ")))
    pair.server_sends(
        ev.PaymentRequired(
            response_id=rid,
            requirements=ty.PaymentRequirements(amount="0.50", currency="USD"),
            extra={"action": "topup"},
        )
    )
    session = pair.server.session(sid)
    assert session.payment.blocks_content and session.payment.paused_response == rid
    for blocked in (
        ev.ResponseDelta(delta=ty.DeltaText(text="leak")),
        ev.ToolCall(call_id="c", name="f", arguments="{}"),
        ev.Thinking(content="leak"),
        session.response.done_event(),  # type: ignore[union-attr]
    ):
        with pytest.raises(LocalProtocolError) as info:
            pair.server.send(blocked)
        assert info.value.code == "payment_required"
    # A misbehaving server is caught on the client side too.
    pair.client.receive(
        orjson.dumps({"type": "response.delta", "delta": {"type": "text", "text": "leak"}})
    )
    with pytest.raises(RemoteProtocolError):
        pair.client.next_event()
    pair.client_sends(ev.PaymentSubmit(payment=ty.PaymentSubmission(scheme="token", token="tok2")))
    assert session.payment.token == "tok2"
    pair.server_sends(ev.PaymentAccepted(payment_id="pay_1"))
    pair.server_sends(ev.ResponseDelta(delta=ty.DeltaText(text="Part two.")))
    done = pair.server_sends(session.response.done_event())  # type: ignore[union-attr]
    assert isinstance(done, ev.ResponseDone)
    assert done.response.output == [ty.TextContent(text="Part one. Part two.")]


def test_session_update_payment_token_answers_payment_required() -> None:
    pair = Pair()
    sid = pair.open()
    pair.server_sends(ev.PaymentRequired(requirements=ty.PaymentRequirements(amount="1")))
    pair.client_sends(ev.SessionUpdate(session_id=sid, payment_token="fresh"))
    session = pair.server.session(sid)
    assert session.payment.token == "fresh" and session.payment.state.value == "submitted"


# --- delta windows ------------------------------------------------------------------


def test_delta_window_numbers_deltas_and_refuses_past_the_window() -> None:
    pair = Pair(delta_window=3)
    sid = pair.open()
    session = pair.server.session(sid)
    assert session.send_window is not None and session.send_window.available == 3
    assert pair.client.session(sid).receive_window is not None
    rid = pair.start_response(sid)
    seqs = []
    for i in range(3):
        data = pair.server.send(ev.ResponseDelta(response_id=rid, delta=ty.DeltaText(text=str(i))))
        seqs.append(orjson.loads(data)["delta_seq"])
    assert seqs == [0, 1, 2]
    with pytest.raises(FlowControlError):
        pair.server.send(ev.ResponseDelta(response_id=rid, delta=ty.DeltaText(text="x")))
    ack = ev.Progress(target="response", target_id=rid, stage="ack", delta_seq=2)
    pair.client_sends(ack)
    assert session.send_window.available == 3
    data = pair.server.send(ev.ResponseDelta(response_id=rid, delta=ty.DeltaText(text="3")))
    assert orjson.loads(data)["delta_seq"] == 3


def test_client_acknowledges_automatically_and_detects_gaps() -> None:
    pair = Pair(delta_window=4)
    sid = pair.open()
    rid = pair.start_response(sid)
    for i in range(4):
        pair.server_sends(ev.ResponseDelta(response_id=rid, delta=ty.DeltaText(text=str(i))))
    # The client's owed acks were delivered by Pair.to_client: the window is open.
    assert pair.server.session(sid).send_window.available == 4  # type: ignore[union-attr]
    gap = {
        "type": "response.delta",
        "response_id": rid,
        "delta_seq": 9,
        "delta": {"type": "text", "text": "?"},
    }
    err = _remote_error(pair.client, orjson.dumps(gap))
    assert err.code == "4.09"


def test_sessions_that_did_not_opt_in_see_plain_uamp() -> None:
    pair = Pair()
    sid = pair.open()
    rid = pair.start_response(sid)
    data = pair.server.send(ev.ResponseDelta(response_id=rid, delta=ty.DeltaText(text="x")))
    assert "delta_seq" not in orjson.loads(data)
    assert pair.server.session(sid).send_window is None


# --- malformed input and limits ------------------------------------------------


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b"{not json", "invalid JSON"),
        (b"[1,2]", "JSON object"),
        (b'{"event_id": "e1"}', "'type'"),
        (b'{"type": "input.text", "event_id": "e2"}', "input.text: field 'text' is required"),
    ],
)
def test_malformed_input_gets_session_error_and_connection_survives(
    data: bytes, fragment: str
) -> None:
    pair = Pair()
    sid = pair.open()
    err = _remote_error(pair.server, data)
    assert fragment in err.message
    (owed,) = pair.server.data_to_send()
    reply = orjson.loads(owed)
    assert reply["type"] == "session.error" and reply["error"]["code"] == "invalid_event"
    assert fragment in reply["error"]["message"]
    assert pair.client_sends(ev.InputText(session_id=sid, text="fine")).type == "input.text"


def test_unknown_event_types_pass_through_without_error() -> None:
    pair = Pair()
    pair.open()
    event = pair.to_server(b'{"type": "x.custom", "event_id": "u1", "n": 1}')
    assert isinstance(event, ev.UnknownEvent) and event.raw["n"] == 1


def test_oversized_message_is_refused() -> None:
    server = ServerConnection(ConnectionConfig(max_event_size=64))
    err = _remote_error(server, b'{"type":"ping","pad":"' + b"x" * 100 + b'"}')
    assert err.code == "message_too_large"


def test_receive_queue_is_bounded() -> None:
    server = ServerConnection(ConnectionConfig(max_queued=2))
    server.receive(b"{}")
    server.receive(b"{}")
    with pytest.raises(LocalProtocolError):
        server.receive(b"{}")


def test_clock_and_ids_are_injected() -> None:
    server = ServerConnection(ConnectionConfig(ids=counter_ids(7), clock=lambda: 1704067200.5))
    data = orjson.loads(server.send(ev.Pong()))
    assert data == {"type": "pong", "event_id": "evt_7.1", "timestamp": 1704067200500}


def test_config_is_validated() -> None:
    with pytest.raises(ValueError, match="max_sessions"):
        ConnectionConfig(max_sessions=0)


def test_ack_without_delta_seq_is_an_invalid_event() -> None:
    pair = Pair(delta_window=2)
    sid = pair.open()
    rid = pair.start_response(sid)
    err = _remote_error(
        pair.server,
        orjson.dumps({"type": "progress", "target": "response", "target_id": rid, "stage": "ack"}),
    )
    assert err.code == "invalid_event"
    assert pair.server.session(sid).send_window.available == 2  # type: ignore[union-attr]


def test_client_refuses_a_window_larger_than_it_asked_for() -> None:
    client = ClientConnection(ConnectionConfig(delta_window=4))
    client.create_session(session_id="s")
    client.receive(
        orjson.dumps(
            {
                "type": "session.created",
                "uamp_version": "1.0",
                "session_id": "s",
                "session": {
                    "id": "s",
                    "status": "active",
                    "config": {
                        "modalities": ["text"],
                        "extensions": {"flow": {"delta_window": 99}},
                    },
                },
            }
        )
    )
    with pytest.raises(RemoteProtocolError) as info:
        client.next_event()
    assert "99" in info.value.message


def test_input_text_payment_token_answers_payment_required() -> None:
    pair = Pair()
    sid = pair.open()
    pair.server_sends(ev.PaymentRequired(requirements=ty.PaymentRequirements(amount="1")))
    pair.client_sends(ev.InputText(session_id=sid, text="here", payment_token="tok_in_text"))
    session = pair.server.session(sid)
    assert session.payment.token == "tok_in_text"
    assert session.payment.state.value == "submitted"


@pytest.mark.parametrize("terminal", ["response.cancelled", "response.error"])
def test_a_response_that_ends_before_it_starts_is_named_by_the_server(terminal: str) -> None:
    pair = Pair()
    sid = pair.open()
    pair.client_sends(ev.InputText(session_id=sid, text="x"))
    pair.client_sends(ev.ResponseCreate(session_id=sid))
    server_id = pair.server.session(sid).response.response_id  # type: ignore[union-attr]
    assert pair.client.session(sid).response.response_id != server_id  # type: ignore[union-attr]
    extra = {"response_id": server_id, "session_id": sid}
    got = pair.to_client(orjson.dumps({"type": terminal, **MINIMAL[terminal], **extra}))
    assert got.type == terminal
    assert pair.client.session(sid).phase is ResponseState.IDLE


def test_delta_hot_path_matches_the_general_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server's response.delta shortcut decides and writes what the tables do."""

    def run(shortcut: bool) -> tuple[list[bytes], list[ty.ContentItem]]:
        pair = Pair()
        taken: list[bool] = []
        real = pair.server._send_delta

        def spy(
            event: ev.ResponseDelta, sid: str | None = None, rid: str | None = None
        ) -> bytes | None:
            result = real(event, sid, rid) if shortcut else None
            taken.append(result is not None)
            return result

        monkeypatch.setattr(pair.server, "_send_delta", spy)
        sid = pair.open(session_id="s1")
        rid = pair.start_response(sid)
        sent = [
            pair.server.send(ev.ResponseDelta(response_id=rid, delta=ty.DeltaText(text=t)))
            for t in ("a", "b")
        ]
        sent.append(
            pair.server.send(ev.ResponseDelta(session_id=sid, delta=ty.DeltaText(text="c")))
        )
        with pytest.raises(LocalProtocolError) as info:
            pair.server.send(ev.ResponseDelta(response_id="other", delta=ty.DeltaText(text="x")))
        assert info.value.code == "unknown_response"
        tracker = pair.server.session(sid).response
        assert tracker is not None
        assert taken == [shortcut] * 3 + [False]
        return sent, tracker.output

    fast, general = run(True), run(False)
    assert fast == general
    assert fast[1] == [ty.TextContent(text="abc")]


#: How a server's response.created is sent, and whether the shortcut takes it.
CREATED_CASES = [
    ("ids on the event", True),
    ("session id passed", True),
    ("no session id", False),  # routed to the only session by the general path
    ("another response id", False),
    ("a second created", False),  # the tables refuse it
    ("delta window", False),  # the window's stream starts
    ("extra fields", False),
    ("while payment is open", True),  # created is no content: payment does not block it
]


@pytest.mark.parametrize(("case", "taken"), CREATED_CASES)
def test_created_hot_path_matches_the_general_path(
    monkeypatch: pytest.MonkeyPatch, case: str, taken: bool
) -> None:
    """The server's response.created shortcut decides and writes what the tables do."""

    def run(shortcut: bool) -> tuple[object, ...]:
        pair = Pair(delta_window=4) if case == "delta window" else Pair()
        took: list[bool] = []
        real = pair.server._send_created

        def spy(event: ev.ResponseCreated, sid: str | None = None) -> bytes | None:
            result = real(event, sid) if shortcut else None
            took.append(result is not None)
            return result

        monkeypatch.setattr(pair.server, "_send_created", spy)
        sid = pair.open(session_id="s1")
        if case == "while payment is open":
            pair.server_sends(ev.PaymentRequired(requirements=ty.PaymentRequirements(amount="1")))
        pair.client_sends(ev.InputText(session_id=sid, text="hi"))
        pair.client_sends(ev.ResponseCreate(session_id=sid))
        tracker = pair.server.session(sid).response
        assert tracker is not None
        rid = tracker.response_id
        event = ev.ResponseCreated(session_id=sid, response_id=rid)
        kwargs: dict[str, str] = {}
        if case == "session id passed":
            event = ev.ResponseCreated(response_id=rid)
            kwargs = {"session_id": sid}
        elif case == "no session id":
            event = ev.ResponseCreated(response_id=rid)
        elif case == "another response id":
            event = ev.ResponseCreated(session_id=sid, response_id="resp_other")
        elif case == "extra fields":
            event = attrs.evolve(event, unknown={"x_note": 1})
        if case == "a second created":
            pair.server.send(event)
            took.clear()
        try:
            out: object = pair.server.send(event, **kwargs)
        except LocalProtocolError as exc:
            out = exc.code
        session = pair.server.session(sid)
        tracker = session.response
        assert tracker is not None
        window = session.send_window
        return (
            out,
            took,
            tracker.state,
            tracker.response_id,
            session.state,
            pair.server.last_event_id,
            None if window is None else window.__dict__,
        )

    fast, general = run(True), run(False)
    assert fast[1] == [taken] and general[1] == [False]
    assert fast[0] == general[0] and fast[2:] == general[2:]


def test_send_with_ids_writes_what_a_stamped_copy_writes() -> None:
    """``send(..., session_id=, response_id=)`` routes and encodes like an evolved copy."""

    def run(override: bool) -> list[bytes]:
        pair = Pair()
        sid = pair.open(session_id="s1")
        pair.open(session_id="s2")  # two sessions: an event without session_id is ambiguous
        rid = pair.start_response(sid)
        events: list[ev.Event] = [
            ev.ResponseDelta(delta=ty.DeltaText(text="a")),
            ev.Thinking(content="hm"),
            ev.ResponseDelta(delta=ty.DeltaText(text="b"), response_id=rid),
        ]
        out = []
        for event in events:
            if override:
                out.append(pair.server.send(event, session_id=sid, response_id=rid))
            else:
                changes: dict[str, str] = {"session_id": sid}
                if getattr(event, "response_id", "") is None:
                    changes["response_id"] = rid
                out.append(pair.server.send(attrs.evolve(event, **changes)))  # type: ignore[arg-type]
        with pytest.raises(LocalProtocolError) as info:
            pair.server.send(
                ev.ResponseDelta(delta=ty.DeltaText(text="x")), session_id=sid, response_id="other"
            )
        assert info.value.code == "unknown_response"
        tracker = pair.server.session(sid).response
        assert tracker is not None and tracker.text == "ab"
        return out

    # The same JSON (key order may differ when the event carried one id itself).
    assert [orjson.loads(m) for m in run(True)] == [orjson.loads(m) for m in run(False)]


def test_random_ids_are_prefixed_128_bit_hex_and_content_ids_are_uuids() -> None:
    import uuid

    from uamp_proto.ids import random_ids

    made = [random_ids("resp") for _ in range(200)]
    assert len(set(made)) == len(made)
    for rid in made:
        prefix, _, digits = rid.partition("_")
        assert prefix == "resp" and len(digits) == 32 and int(digits, 16) >= 0
    content = random_ids("content")
    assert str(uuid.UUID(content)) == content  # section 8.5.4: a bare UUID string


@pytest.mark.parametrize(
    ("inputs", "expected"),
    [
        # One input.text: the shortcut.
        ([("hi", None)], [ty.Message(role="user", content="hi")]),
        ([("", None)], [ty.Message(role="user", content="")]),
        ([("be brief", "system")], [ty.Message(role="system", content="be brief")]),
        # Several: the general assembly, one message per run of a role.
        (
            [("a", None), ("b", None)],
            [
                ty.Message(
                    role="user",
                    content="ab",
                    content_items=[ty.TextContent(text="a"), ty.TextContent(text="b")],
                )
            ],
        ),
        (
            [("s", "system"), ("u", None)],
            [ty.Message(role="system", content="s"), ty.Message(role="user", content="u")],
        ),
    ],
)
def test_input_becomes_the_responses_input_messages(
    inputs: list[tuple[str, str | None]], expected: list[ty.Message]
) -> None:
    pair = Pair()
    sid = pair.open()
    for text, role in inputs:
        pair.client_sends(ev.InputText(session_id=sid, text=text, role=role))
    pair.client_sends(ev.ResponseCreate(session_id=sid))
    tracker = pair.server.session(sid).response
    assert tracker is not None and tracker.input_messages == expected


@pytest.mark.parametrize(
    ("deltas", "expected"),
    [
        (["tok ", "tok"], [ty.Message(role="assistant", content="tok tok")]),
        ([""], [ty.Message(role="assistant", content="")]),
        ([], []),
    ],
)
def test_a_text_reply_joins_the_history_as_one_assistant_message(
    deltas: list[str], expected: list[ty.Message]
) -> None:
    pair = Pair()
    sid = pair.open()
    rid = pair.start_response(sid, text="q")
    for text in deltas:
        pair.server_sends(ev.ResponseDelta(session_id=sid, delta=ty.DeltaText(text=text)))
    tracker = pair.server.session(sid).response
    assert tracker is not None
    assert tracker.messages() == expected
    pair.server_sends(tracker.done_event(session_id=sid))
    assert pair.server.session(sid).history == [ty.Message(role="user", content="q"), *expected]
    assert rid in pair.server.session(sid).finished_responses


# --- a busy session: held response.create (docs/busy.md) ---------------------


def _held_pair(decide: Any) -> tuple[Pair, str]:
    pair = Pair()
    pair.server = ServerConnection(ConnectionConfig(ids=counter_ids(1), on_busy=decide))
    return pair, pair.open()


def _raw(**event: Any) -> bytes:
    return orjson.dumps(event)


def test_a_busy_create_is_held_with_the_input_it_came_with() -> None:
    asked: list[tuple[str, Any]] = []

    def decide(sid: str, create: ev.ResponseCreate) -> object:
        asked.append((sid, create.unknown.get("uamp.on_busy")))
        return f"token-{len(asked)}"

    pair, sid = _held_pair(decide)
    first = pair.start_response(sid, "one")
    session = pair.server.session(sid)
    pair.server.receive(_raw(type="input.text", text="two"))
    assert isinstance(pair.server.next_event(), ev.InputText)
    pair.server.receive(_raw(type="response.create", **{"uamp.on_busy": "enqueue"}))
    held_create = pair.server.next_event()
    assert isinstance(held_create, ev.ResponseCreate)  # handed on, not refused
    assert asked == [(sid, "enqueue")]
    assert [h.token for h in session.held] == ["token-1"]
    assert [m.text for m in session.held[0].messages] == ["two"]
    assert session.response is not None and session.response.response_id == first
    with pytest.raises(LocalProtocolError) as busy:  # not while the slot is busy
        pair.server.start_held(sid, "token-1")
    assert busy.value.code == "response_in_progress"
    pair.server.send(session.response.done_event(session_id=sid))
    assert pair.server.start_held(sid, "token-1") is held_create
    assert session.held == [] and session.phase is ResponseState.REQUESTED
    assert [m.text for m in pair.server.session(sid).conversation()] == ["one", "two"]
    with pytest.raises(LocalProtocolError):
        pair.server.start_held(sid, "token-1")  # started once


def test_the_decision_may_refuse_a_busy_create_keeping_its_input() -> None:
    def refuse(sid: str, create: ev.ResponseCreate) -> object:
        raise LocalProtocolError("queue is full", code="queue_full")

    pair, sid = _held_pair(refuse)
    pair.start_response(sid, "one")
    pair.server.receive(_raw(type="input.text", text="two"))
    pair.server.next_event()
    err = _remote_error(pair.server, _raw(type="response.create"))
    assert err.code == "queue_full"
    session = pair.server.session(sid)
    assert session.held == [] and [i.text for _, i in session.pending_input] == ["two"]


def test_drop_held_and_a_rolled_back_response() -> None:
    pair, sid = _held_pair(lambda sid, create: object())
    first = pair.start_response(sid, "one")
    pair.server.receive(_raw(type="response.create"))
    pair.server.next_event()
    session = pair.server.session(sid)
    token = session.held[0].token
    pair.server.drop_held(sid, token)
    assert session.held == []
    session.drop_response = first  # rolled back: its turn leaves no trace
    assert session.response is not None
    pair.server.send(session.response.cancelled_event(session_id=sid))
    assert session.history == [] and session.drop_response is None
