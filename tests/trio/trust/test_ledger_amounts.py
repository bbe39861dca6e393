"""The ledger refuses nonsense amounts before anything is written (issue 29).

Negative, NaN, infinite, past :data:`~uamp_proto.ledger.MAX_AMOUNT`, or finer
than the currency's minor unit: refused by ``parse_amount``, by the
:class:`~uamp_trio.trust.ledger.Ledger` API and by ``uamp tokens`` (one line,
no traceback), with the token's state unchanged. On cb59486 ``uamp tokens
top-up --amount 1e30`` committed the amount and then crashed, and every
``tokens show`` after it crashed too.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests._support.cli import uamp
from uamp_proto import ledger as arith
from uamp_proto.ledger import MAX_AMOUNT, format_amount, minor_units, parse_amount
from uamp_trio.trust.ledger import Ledger

D = Decimal
CURRENCIES = ["USD", "JPY", "BHD", "CLF", "EUR"]

#: Amount texts as a caller may type them: plain, exponent, huge, tiny,
#: negative, not finite, fine-grained, and anything else.
amount_texts = st.one_of(
    st.decimals(allow_nan=True, allow_infinity=True).map(str),
    st.decimals(min_value=-10, max_value=10, places=6).map(str),
    st.decimals(min_value=0, max_value=2 * MAX_AMOUNT, places=2).map(str),
    st.builds(lambda m, e: f"{m}e{e}", st.integers(-99, 99), st.integers(-40, 40)),
    st.sampled_from(["1e30", "NaN", "sNaN", "-0", "Infinity", "-inf", "0.001", "1e12", " 5 "]),
    st.text(max_size=20),
)


@settings(max_examples=400, deadline=None)
@given(text=amount_texts, currency=st.sampled_from([None, *CURRENCIES]))
def test_an_accepted_amount_is_sane_and_prints(text: str, currency: str | None) -> None:
    try:
        value = parse_amount(text, currency=currency)
    except ValueError:
        return
    assert value.is_finite() and D(0) <= value <= MAX_AMOUNT
    if currency is not None:
        step = D(1).scaleb(-minor_units(currency))
        assert value == value.quantize(step)
    assert D(format_amount(value)) == value  # prints, and reads back the same


@pytest.mark.parametrize(
    ("text", "currency", "why"),
    [
        ("-0.01", "USD", ">= 0"),
        ("NaN", "USD", "finite"),
        ("sNaN", None, "finite"),
        ("Infinity", "USD", "finite"),
        ("1e30", "USD", "at most 1,000,000,000,000"),
        ("1000000000000.01", None, "at most"),
        ("0.001", "USD", "at most 2 decimal"),
        ("1.5", "JPY", "at most 0 decimal"),
        ("1.2345", "BHD", "at most 3 decimal"),
        ("9" * 80, None, "too long"),
    ],
)
def test_nonsense_is_refused_saying_why(text: str, currency: str | None, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_amount(text, currency=currency)


@pytest.mark.parametrize(("text", "currency"), [("1.234", "BHD"), ("7", "JPY"), ("1e12", "USD")])
def test_amounts_a_currency_has_are_taken(text: str, currency: str) -> None:
    assert parse_amount(text, currency=currency) == D(text)


def test_format_never_raises_for_a_finite_amount() -> None:
    # What an older ledger file may still hold (cb59486 accepted it).
    assert format_amount(D("1e30")) == "1" + "0" * 30 + ".00"
    assert format_amount(D("1E-40")) == "0." + "0" * 39 + "1"


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    with Ledger(tmp_path / "ledger.db", clock=lambda: 1000.0) as book:
        yield book


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=amount_texts)
def test_a_refused_top_up_writes_nothing(ledger: Ledger, text: str) -> None:
    token = ledger.issue("10.00", "USD")
    before = ledger.show(token).as_json()
    try:
        ledger.top_up(token, text)
    except ValueError:
        assert ledger.show(token).as_json() == before
        return
    after = ledger.show(token)
    assert after.account.balanced()
    assert after.account.balance == D("10.00") + D(text.strip())
    assert after.account.balance <= MAX_AMOUNT


def test_top_ups_stop_at_the_maximum(ledger: Ledger) -> None:
    token = ledger.issue(MAX_AMOUNT - 1, "USD")
    with pytest.raises(ValueError, match="holds at most"):
        ledger.top_up(token, "2")
    ledger.top_up(token, "1")
    assert ledger.show(token).account.balance == MAX_AMOUNT
    with pytest.raises(ValueError, match="holds at most"):
        arith.top_up(ledger.show(token).account, D("0.01"))


def test_issue_checks_the_currency_decimals(ledger: Ledger) -> None:
    with pytest.raises(ValueError, match="JPY amounts have at most 0"):
        ledger.issue("1.5", "JPY")
    with pytest.raises(ValueError, match="3-letter"):
        ledger.issue("1", "ÄÖÜ")
    assert ledger.totals()["balance"] == 0  # nothing was issued
    token = ledger.issue("1.234", "BHD")
    assert ledger.show(token).as_json()["balance"] == "1.234"


def test_a_lock_past_the_maximum_is_an_insufficient_balance(ledger: Ledger) -> None:
    token = ledger.issue("10.00", "USD")
    with pytest.raises(arith.LedgerError) as refused:
        ledger.lock(token, "r1", "1e30")
    assert refused.value.code == "insufficient_balance"
    # A cost past the maximum settles the whole lock, no more.
    ledger.lock(token, "r2", "4.00")
    account = ledger.settle(token, "r2", D("1e30"))
    assert (account.balance, account.settled) == (D("6.00"), D("4.00"))


@pytest.mark.parametrize(
    ("amount", "status", "why"),
    [
        ("1e30", 2, "at most 1,000,000,000,000"),
        ("NaN", 2, "finite"),
        ("-5", 2, "finite"),
        ("inf", 2, "finite"),
        ("0.001", 1, "at most 2 decimal"),
    ],
)
def test_tokens_top_up_refuses_nonsense_and_commits_nothing(
    tmp_path: Path, amount: str, status: int, why: str
) -> None:
    db = str(tmp_path / "ledger.db")
    issued = uamp("tokens", "issue", "--ledger", db, "--amount", "10.00")
    assert issued.returncode == 0, issued.stderr
    token = issued.stdout.strip()
    refused = uamp("tokens", "top-up", "--ledger", db, token, f"--amount={amount}")
    assert refused.returncode == status
    assert why in refused.stderr
    assert "Traceback" not in refused.stderr
    shown = uamp("tokens", "show", "--ledger", db, token)
    assert shown.returncode == 0, shown.stderr
    assert '"balance": "10.00"' in shown.stdout
    assert '"topped_up": "0.00"' in shown.stdout
