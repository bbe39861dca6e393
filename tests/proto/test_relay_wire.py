"""The relay wire as pure functions: the daemon's URL rule, the reconnect delay, spec 004's
multiplexed ``session.create`` and a turn's round trip through ``input.text``."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from uamp_proto import codec
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.principal import Principal
from uamp_proto.relay import (
    RECEIPT_SCHEME,
    backoff_delay,
    daemon_event,
    daemon_url,
    for_daemon,
    receipt,
    turn_input,
    turn_request,
)
from uamp_proto.responder import TurnRequest


@pytest.mark.parametrize(
    ("given_url", "dialled"),
    [
        ("https://relay.example", "wss://relay.example/ws"),
        ("http://127.0.0.1:8765", "ws://127.0.0.1:8765/ws"),
        ("http://127.0.0.1:8765/", "ws://127.0.0.1:8765/ws"),
        ("wss://relay.example/agents/connect", "wss://relay.example/agents/connect"),
        ("ws://h:1/ws?x=1", "ws://h:1/ws?x=1"),
        ("HTTPS://relay.example/custom", "wss://relay.example/custom"),
    ],
)
def test_daemon_url(given_url: str, dialled: str) -> None:
    assert daemon_url(given_url) == dialled


@pytest.mark.parametrize("bad", ["ftp://x", "relay.example", "http://", ""])
def test_daemon_url_refuses(bad: str) -> None:
    with pytest.raises(ValueError, match="not a ws://"):
        daemon_url(bad)


@pytest.mark.parametrize(
    ("attempt", "jitter", "delay"),
    [(0, 0.5, 0.0), (1, 0.0, 0.25), (1, 1.0, 0.5), (2, 0.0, 0.5), (4, 0.5, 3.0), (40, 0.0, 15.0)],
)
def test_backoff_delay(attempt: int, jitter: float, delay: float) -> None:
    assert backoff_delay(attempt, base=0.5, cap=30.0, jitter=jitter) == pytest.approx(delay)


@given(st.integers(min_value=1, max_value=10_000), st.floats(min_value=0, max_value=0.999))
def test_backoff_stays_within_half_and_whole_of_its_ceiling(attempt: int, jitter: float) -> None:
    delay = backoff_delay(attempt, base=0.5, cap=30.0, jitter=jitter)
    ceiling = min(30.0, 0.5 * 2 ** min(attempt - 1, 62))
    assert ceiling / 2 <= delay <= ceiling


def test_the_multiplexed_session_create_of_spec_004_decodes() -> None:
    event = codec.decode(
        b'{"type":"session.create","uamp_version":"1.0","session":{"agent":"a","token":"t"}}'
    )
    assert isinstance(event, ev.SessionCreate)
    assert (event.agent, event.token, event.session.modalities) == ("a", "t", ["text"])
    assert "token" not in event.session.unknown  # never echoed back in session.created
    top = codec.decode(
        b'{"type":"session.create","uamp_version":"1.0","agent":"top",'
        b'"session":{"modalities":["text"],"agent":"inner"}}'
    )
    assert isinstance(top, ev.SessionCreate) and top.agent == "top"


def test_a_turn_survives_the_trip_through_input_text() -> None:
    tool = ty.ToolDefinition(
        type="function", function=ty.FunctionDefinition(name="f", parameters={"type": "object"})
    )
    request = TurnRequest(
        agent="alpha",
        session_id="relay-side",
        response_id="resp_1",
        messages=[
            ty.Message(role="user", content="first"),
            ty.Message(role="assistant", content="ok"),
            ty.Message(role="user", content="second"),
        ],
        instructions="be brief",
        tools=[tool],
        tool_choice="auto",
        payment_token="pay",
        principal=Principal(id="u1", scheme="jwt"),
    )
    sent = codec.decode(codec.encode(turn_input(request, "rly_1")))
    assert isinstance(sent, ev.InputText)
    assert (sent.session_id, sent.text, sent.unknown["agent"]) == ("rly_1", "second", "alpha")
    assert sent.unknown["caller"] == {"user_id": "jwt:u1", "tier": "user"}
    assert sent.payment_token == "pay"  # between relay processes, not to a daemon:
    to_daemon = codec.decode(codec.encode(for_daemon(sent, paid=True)))
    assert isinstance(to_daemon, ev.InputText)
    assert b"pay" not in codec.encode(to_daemon).replace(b'"paid"', b"")
    back = turn_request(to_daemon, "alpha", "resp_1")
    assert back.messages == request.messages
    assert (back.tools, back.tool_choice, back.instructions) == ([tool], "auto", "be brief")
    assert (back.payment_token, back.session_id) == (None, "rly_1")
    assert back.metadata["caller"]["user_id"] == "jwt:u1"
    assert back.metadata["paid"] is True
    unpaid = turn_request(for_daemon(sent, paid=False), "alpha", "resp_1")
    assert "paid" not in unpaid.metadata


def test_a_receipt_names_the_amount_and_no_token() -> None:
    required = ty.PaymentRequirements(amount="0.50", currency="USD")
    submit = codec.decode(codec.encode(receipt("rly_1", required, "rcpt_1")))
    assert isinstance(submit, ev.PaymentSubmit)
    assert submit.session_id == "rly_1"
    assert (submit.payment.scheme, submit.payment.token) == (RECEIPT_SCHEME, "rcpt_1")
    assert submit.payment.amount == "0.50"
    assert submit.payment.unknown == {"currency": "USD"}


def test_a_bare_input_text_is_one_user_message() -> None:
    back = turn_request(ev.InputText(session_id="s", text="hi"), "a", "r")
    assert back.messages == [ty.Message(role="user", content="hi")]
    with pytest.raises(codec.DecodeError, match="tools"):
        turn_request(ev.InputText(session_id="s", text="hi", unknown={"tools": 3}), "a", "r")


@pytest.mark.parametrize(
    ("frame", "expected"),
    [
        (
            {"type": "response.done", "session_id": "s", "response_id": "r"},
            ev.ResponseDone(
                session_id="s",
                response_id="r",
                response=ty.ResponseOutput(status="completed", output=[]),
            ),
        ),
        (
            {"type": "response.error", "session_id": "s"},
            ev.ResponseErrorEvent(
                session_id="s", error=ty.ErrorInfo(code="agent_error", message="The agent failed.")
            ),
        ),
        (
            {"type": "response.error", "error": {"code": "x", "message": "y"}},
            ev.ResponseErrorEvent(error=ty.ErrorInfo(code="x", message="y")),
        ),
    ],
)
def test_a_daemons_bare_terminal_event_still_ends_the_turn(
    frame: dict[str, object], expected: ev.Event
) -> None:
    assert daemon_event(frame) == expected


def test_other_daemon_events_decode_strictly() -> None:
    with pytest.raises(codec.DecodeError):
        daemon_event({"type": "response.delta", "session_id": "s"})
