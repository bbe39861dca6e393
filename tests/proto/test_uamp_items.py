"""Spec 000 item by item where the connection tests do not pin a rule on their own."""

from __future__ import annotations

import orjson
import pytest

from uamp_proto import decode, encode
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.connection import ServerConnection
from uamp_proto.errors import RemoteProtocolError, UampError
from uamp_proto.events import PAYMENT_ERROR_CODES
from uamp_proto.payment import PaymentRequiredError
from uamp_proto.types import PaymentRequirements

from .pair import Pair


def _refused(server: ServerConnection, obj: dict[str, object]) -> RemoteProtocolError:
    server.receive(orjson.dumps(obj))
    with pytest.raises(RemoteProtocolError) as info:
        server.next_event()
    return info.value


def test_an_event_without_event_id_is_read_and_every_sent_event_has_one() -> None:
    pair = Pair()
    sid = pair.open()
    got = pair.to_server(orjson.dumps({"type": "input.text", "text": "hi", "session_id": sid}))
    assert isinstance(got, ev.InputText) and got.event_id is None
    sent = orjson.loads(pair.server.send(ev.SessionUpdated(session_id=sid)))
    assert sent["event_id"]


def test_a_session_create_without_version_or_config_is_a_1_0_text_session() -> None:
    server = ServerConnection()
    server.receive(orjson.dumps({"type": "session.create"}))
    create = server.next_event()
    assert isinstance(create, ev.SessionCreate)
    assert create.uamp_version == "1.0" and create.session.modalities == ["text"]


@pytest.mark.parametrize("kind", ["system.stop", "system.error", "system.ping", "system.cancel"])
def test_system_events_never_cross_a_connection(kind: str) -> None:
    pair = Pair()
    sid = pair.open()
    err = _refused(pair.server, {"type": kind, "session_id": sid})
    assert err.code == "invalid_event" and "internal" in err.message
    assert pair.to_server(orjson.dumps({"type": "ping"})).type == "ping"  # the connection goes on


@pytest.mark.parametrize(
    "obj",
    [
        {"type": "response.delta", "delta": {"type": "text", "text": "x"}},
        {"type": "session.created", "uamp_version": "1.0", "session": {"id": "s"}},
        {"type": "payment.accepted", "payment_id": "p"},
        {"type": "tool.call", "call_id": "c", "name": "f", "arguments": "{}"},
    ],
)
def test_a_client_may_not_send_what_only_a_server_sends(obj: dict[str, object]) -> None:
    pair = Pair()
    sid = pair.open()
    err = _refused(pair.server, {**obj, "session_id": sid})
    assert err.code == "invalid_event"


def test_session_created_echoes_the_agent_and_the_chat() -> None:
    pair = Pair()
    created = pair.to_server(pair.client.create_session(agent="weather-bot", chat="chat_abc"))
    assert isinstance(created, ev.SessionCreate) and created.session_id is not None
    reply = orjson.loads(pair.server.accept(created.session_id, created_at=1704067200.0))
    assert reply["uamp_version"] == "1.0" and reply["session_id"] == created.session_id
    assert (reply["agent"], reply["chat"]) == ("weather-bot", "chat_abc")
    assert reply["session"]["id"] == created.session_id
    assert reply["session"]["created_at"] == 1704067200 and reply["session"]["status"] == "active"
    assert reply["session"]["config"]["modalities"] == ["text"]


@pytest.mark.parametrize(
    ("code", "sent"),
    [
        ("insufficient_balance", "insufficient_balance"),
        ("token_expired", "token_expired"),
        ("token_invalid", "token_invalid"),
        ("rate_limited", "rate_limited"),
        ("mandate_revoked", "mandate_revoked"),
        ("ledger_unreachable", "payment_failed"),  # any other cause is the spec's catch-all
        ("payment_required", "payment_failed"),
    ],
)
def test_payment_error_codes_are_the_spec_s_six(code: str, sent: str) -> None:
    error = PaymentRequiredError(PaymentRequirements(amount="0.05"), code=code, reason="no")
    event = orjson.loads(encode(error.error_event("s1")))
    assert event["code"] == sent and sent in PAYMENT_ERROR_CODES
    assert (event["balance_required"], event["can_retry"], event["message"]) == ("0.05", True, "no")


REQUIRED: list[tuple[dict[str, object], str]] = [
    # (a valid event, the field the spec's table marks required)
    ({"type": "input.text", "text": "hi"}, "text"),
    ({"type": "input.audio", "audio": "AAAA", "format": "pcm16"}, "audio"),
    ({"type": "input.audio", "audio": "AAAA", "format": "pcm16"}, "format"),
    ({"type": "input.image", "image": {"url": "https://x/y.png"}}, "image"),
    ({"type": "input.video", "video": {"url": "https://x/y.mp4"}}, "video"),
    (
        {"type": "input.file", "file": "AA", "filename": "a.pdf", "mime_type": "application/pdf"},
        "file",
    ),
    (
        {"type": "input.file", "file": "AA", "filename": "a.pdf", "mime_type": "application/pdf"},
        "filename",
    ),
    (
        {"type": "input.file", "file": "AA", "filename": "a.pdf", "mime_type": "application/pdf"},
        "mime_type",
    ),
    ({"type": "tool.result", "call_id": "c", "result": "{}"}, "call_id"),
    ({"type": "tool.result", "call_id": "c", "result": "{}"}, "result"),
    ({"type": "tool.call", "call_id": "c", "name": "f", "arguments": "{}"}, "call_id"),
    ({"type": "tool.call", "call_id": "c", "name": "f", "arguments": "{}"}, "name"),
    ({"type": "progress", "target": "tool"}, "target"),
    ({"type": "thinking", "content": "hmm"}, "content"),
    ({"type": "session.created", "uamp_version": "1.0", "session": {"id": "s"}}, "session"),
]


@pytest.mark.parametrize(
    ("event", "field"), REQUIRED, ids=[f"{e['type']}-{f}" for e, f in REQUIRED]
)
def test_a_required_field_is_required(event: dict[str, object], field: str) -> None:
    decode(orjson.dumps(event))
    broken = {k: v for k, v in event.items() if k != field}
    with pytest.raises(UampError, match=field):
        decode(orjson.dumps(broken))


def test_a_failed_tool_result_stays_failed_in_the_output_and_the_history() -> None:
    pair = Pair()
    sid = pair.open()
    pair.start_response(sid, "weather?")
    pair.server_sends(ev.ToolCall(call_id="call_1", name="search", arguments="{}"))
    pair.client_sends(ev.ToolResult(call_id="call_1", result='"no network"', is_error=True))
    tracker = pair.server.session(sid).response
    assert tracker is not None
    done = pair.server_sends(tracker.done_event())
    assert isinstance(done, ev.ResponseDone)
    [result] = [i for i in done.response.output if isinstance(i, ty.ToolResultContent)]
    assert result.tool_result.is_error is True
    [tool] = [m for m in pair.server.session(sid).history if m.role == "tool"]
    assert tool.tool_call_id == "call_1" and tool.content_items is not None
    [item] = tool.content_items
    assert isinstance(item, ty.ToolResultContent) and item.tool_result.is_error is True
