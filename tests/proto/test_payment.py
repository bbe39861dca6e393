"""Payment negotiation: the transition table, exhaustively, and its rules."""

from __future__ import annotations

import pytest

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.payment import TRANSITIONS, PaymentNegotiation, PaymentState

EVENTS: dict[str, ev.Event] = {
    "payment.required": ev.PaymentRequired(requirements=ty.PaymentRequirements(amount="1.00")),
    "payment.submit": ev.PaymentSubmit(payment=ty.PaymentSubmission(scheme="token", token="t1")),
    "payment.accepted": ev.PaymentAccepted(payment_id="p1"),
    "payment.error": ev.PaymentErrorEvent(code="token_invalid", message="bad"),
}

_PATHS = {
    PaymentState.NONE: [],
    PaymentState.REQUIRED: ["payment.required"],
    PaymentState.SUBMITTED: ["payment.required", "payment.submit"],
    PaymentState.ACCEPTED: ["payment.required", "payment.submit", "payment.accepted"],
    PaymentState.FAILED: ["payment.required", "payment.submit", "payment.error"],
}


def _in(state: PaymentState) -> PaymentNegotiation:
    p = PaymentNegotiation()
    for etype in _PATHS[state]:
        p.apply(EVENTS[etype])
    assert p.state is state
    return p


@pytest.mark.parametrize("state", list(PaymentState))
@pytest.mark.parametrize("etype", sorted(EVENTS))
def test_transition_table(state: PaymentState, etype: str) -> None:
    p = _in(state)
    expected = TRANSITIONS.get((state, etype))
    if expected is None:
        assert not p.can_apply(EVENTS[etype])
        with pytest.raises(ValueError, match="not allowed"):
            p.apply(EVENTS[etype])
        assert p.state is state
    else:
        assert p.can_apply(EVENTS[etype])
        p.apply(EVENTS[etype])
        assert p.state is expected


@pytest.mark.parametrize(
    ("state", "blocks"),
    [
        (PaymentState.NONE, False),
        (PaymentState.REQUIRED, True),
        (PaymentState.SUBMITTED, True),
        (PaymentState.ACCEPTED, False),
        (PaymentState.FAILED, False),
    ],
)
def test_content_is_blocked_only_while_payment_is_outstanding(
    state: PaymentState, blocks: bool
) -> None:
    assert _in(state).blocks_content is blocks


def test_retryable_error_goes_back_to_required() -> None:
    p = _in(PaymentState.SUBMITTED)
    p.apply(ev.PaymentErrorEvent(code="insufficient_balance", message="m", can_retry=True))
    assert p.state is PaymentState.REQUIRED and p.blocks_content
    assert p.last_error is not None and p.last_error.code == "insufficient_balance"


def test_topup_pauses_the_active_response_and_acceptance_resumes_it() -> None:
    p = PaymentNegotiation(token="preloaded")
    p.apply(
        ev.PaymentRequired(
            requirements=ty.PaymentRequirements(amount="0.10"), extra={"action": "topup"}
        ),
        active_response="resp_1",
    )
    assert p.topup and p.paused_response == "resp_1" and p.token == "preloaded"
    p.apply(EVENTS["payment.submit"])
    assert p.token == "t1"
    p.apply(EVENTS["payment.accepted"])
    assert p.paused_response is None and not p.topup and not p.blocks_content


def test_balance_updates_are_recorded_in_any_state() -> None:
    p = _in(PaymentState.SUBMITTED)
    p.apply(ev.PaymentBalance(balance="0.20", low_balance_warning=True))
    assert p.low_balance and p.state is PaymentState.SUBMITTED


def test_token_policy_requires_payment_without_a_valid_token() -> None:
    from uamp_proto.payment import PaymentRequiredError, TokenPolicy

    policy = TokenPolicy({"tok_ok"}, amount="0.05", agents={"paid"})
    assert policy.check("free", None) is None
    assert policy.check("paid", "tok_ok") is None
    req = policy.check("paid", "tok_bad")
    assert req is not None and req.amount == "0.05"
    err = PaymentRequiredError(req, topup=True)
    assert err.accepts() == [
        {"scheme": "token", "amount": "0.05", "network": "uamp", "currency": "USD"}
    ]
    event = err.event("resp_1")
    assert event.is_topup and event.response_id == "resp_1"
