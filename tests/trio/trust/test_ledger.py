"""The SQLite ledger: invariants under a state machine, concurrent spenders and a kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from uamp_proto import ledger as arith
from uamp_proto.ledger import Account, LedgerError
from uamp_trio.trust.ledger import Ledger
from uamp_trio.trust.ledger_sql import SqlLedger

D = Decimal


@pytest.mark.parametrize(
    ("account", "amount", "now", "code"),
    [
        (Account.new(D("1.00"), "USD"), D("1.01"), 0.0, "insufficient_balance"),
        (Account.new(D("1.00"), "USD", expires_at=10.0), D("0.10"), 10.0, "token_expired"),
        (
            Account(currency="USD", issued=D(1), balance=D(1), revoked=True),
            D("0.1"),
            0.0,
            "mandate_revoked",
        ),
    ],
)
def test_lock_refusals_carry_the_spec_codes(
    account: Account, amount: Decimal, now: float, code: str
) -> None:
    with pytest.raises(LedgerError) as info:
        arith.lock(account, amount, now)
    assert info.value.code == code


def test_lock_settle_release_keep_the_sum() -> None:
    a = arith.lock(Account.new(D("10.00"), "USD"), D("4.00"), 0.0)
    assert (a.balance, a.locked) == (D("6.00"), D("4.00"))
    a = arith.settle(a, D("4.00"), D("1.25"))
    assert (a.balance, a.locked, a.settled) == (D("8.75"), D(0), D("1.25"))
    a = arith.release(arith.lock(a, D("8.75"), 0.0), D("8.75"))
    assert (a.balance, a.locked) == (D("8.75"), D(0))
    a = arith.top_up(a, D("1.25"))
    assert a.balance == D(10) and a.balanced()
    # A cost above the lock charges the lock and no more.
    a = arith.settle(arith.lock(a, D(1), 0.0), D(1), D(5))
    assert (a.balance, a.settled) == (D(9), D("2.25"))


@pytest.mark.parametrize("text", ["-1", "NaN", "Infinity", "abc", ""])
def test_bad_amounts(text: str) -> None:
    with pytest.raises(ValueError):
        arith.parse_amount(text)


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    with Ledger(tmp_path / "ledger.db", clock=lambda: 1000.0) as book:
        yield book  # type: ignore[misc]


def test_a_token_is_verified_before_it_is_looked_up(ledger: Ledger, tmp_path: Path) -> None:
    token = ledger.issue("5.00", "usd")
    assert ledger.show(token).as_json()["balance"] == "5.00"
    assert ledger.show(token).account.currency == "USD"
    header, payload, sig = token.split(".")
    flipped = sig[:-2] + ("A" if sig[-2] != "A" else "B") + sig[-1]
    with Ledger(tmp_path / "other.db") as other:
        foreign = other.issue("5.00", "USD")
    for bad in (f"{header}.{payload}.{flipped}", foreign, "not-a-token"):
        with pytest.raises(LedgerError) as info:
            ledger.lock(bad, "r1", "1")
        assert info.value.code == "token_invalid"


def test_expired_tokens_lock_nothing(tmp_path: Path) -> None:
    now = [1000.0]
    with Ledger(tmp_path / "l.db", clock=lambda: now[0]) as book:
        token = book.issue("5", "USD", expires_in=60)
        book.lock(token, "r1", "1")
        now[0] += 61
        with pytest.raises(LedgerError) as info:
            book.lock(token, "r2", "1")
        assert info.value.code == "token_expired"


def test_the_same_response_is_charged_once(ledger: Ledger) -> None:
    token = ledger.issue("10", "USD")
    ledger.lock(token, "resp_1", "2")
    ledger.lock(token, "resp_1", "2")
    assert ledger.show(token).account.locked == D(2)
    ledger.settle(token, "resp_1", "1.5")
    ledger.settle(token, "resp_1", "1.5")
    ledger.release(token, "resp_1")
    account = ledger.show(token).account
    assert (account.balance, account.locked, account.settled) == (D("8.5"), D(0), D("1.5"))


def test_insufficient_balance_reports_both_amounts(ledger: Ledger) -> None:
    token = ledger.issue("1", "USD")
    with pytest.raises(LedgerError) as info:
        ledger.lock(token, "r", "2")
    assert (info.value.code, info.value.balance_required, info.value.balance_current) == (
        "insufficient_balance",
        D(2),
        D(1),
    )


_SPENDER = textwrap.dedent(
    """
    import sys
    from uamp_trio.trust.ledger import Ledger, LedgerError
    path, token, worker, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    won = 0
    with Ledger(path) as book:
        for n in range(count):
            try:
                book.lock(token, f"{worker}-{n}", "1")
            except LedgerError as exc:
                assert exc.code == "insufficient_balance", exc.code
            else:
                book.settle(token, f"{worker}-{n}", "1")
                won += 1
    print(won)
    """
)


def test_concurrent_processes_never_overdraw(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    with Ledger(path) as book:
        token = book.issue("50", "USD")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _SPENDER, str(path), token, f"w{i}", "25"],
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(4)
    ]
    won = [int(p.communicate(timeout=120)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sum(won) == 50
    with Ledger(path) as book:
        account = book.show(token).account
        assert (account.balance, account.locked, account.settled) == (D(0), D(0), D(50))


_DIES_HOLDING_LOCKS = textwrap.dedent(
    """
    import os, signal, sys
    from uamp_trio.trust.ledger import Ledger
    book = Ledger(sys.argv[1])
    for n in range(3):
        book.lock(sys.argv[2], f"r{n}", "2.5")
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_a_killed_process_leaves_no_lock_after_recover(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    with Ledger(path) as book:
        token = book.issue("10", "USD")
    proc = subprocess.run([sys.executable, "-c", _DIES_HOLDING_LOCKS, str(path), token])
    assert proc.returncode == -signal.SIGKILL
    with Ledger(path) as book:
        assert book.show(token).account.locked == D("7.5")
        assert book.recover() == 3
        account = book.show(token).account
        assert (account.balance, account.locked, account.settled) == (D(10), D(0), D(0))
        assert book.recover() == 0
    assert os.path.exists(path)


class LedgerMachine(RuleBasedStateMachine):
    """Random issues, top-ups, locks and settlements against a model of the sums."""

    def __init__(self) -> None:
        super().__init__()
        self.book = self.open_book()
        self.tokens: list[str] = []
        self.open: list[tuple[str, str, Decimal]] = []
        self.issued = D(0)
        self.counter = 0

    def open_book(self) -> SqlLedger:
        """The ledger under test (a subclass tests another backend)."""
        import tempfile

        self._dir = tempfile.TemporaryDirectory()
        return Ledger(Path(self._dir.name) / "l.db", clock=lambda: 0.0)

    def close_book(self) -> None:
        self.book.close()
        self._dir.cleanup()

    amounts = st.decimals(min_value=0, max_value=100, places=2)

    @rule(amount=amounts)
    def issue(self, amount: Decimal) -> None:
        self.tokens.append(self.book.issue(amount, "USD"))
        self.issued += amount

    @precondition(lambda self: self.tokens)
    @rule(data=st.data(), amount=amounts)
    def lock(self, data: st.DataObject, amount: Decimal) -> None:
        token = data.draw(st.sampled_from(self.tokens))
        before = self.book.show(token).account.balance
        self.counter += 1
        rid = f"r{self.counter}"
        try:
            self.book.lock(token, rid, amount)
        except LedgerError as exc:
            assert exc.code == "insufficient_balance" and amount > before
        else:
            self.open.append((token, rid, amount))

    @precondition(lambda self: self.open)
    @rule(data=st.data(), cost=amounts)
    def settle(self, data: st.DataObject, cost: Decimal) -> None:
        token, rid, _ = self.open.pop(data.draw(st.integers(0, len(self.open) - 1)))
        self.book.settle(token, rid, cost)

    @precondition(lambda self: self.tokens)
    @rule(data=st.data(), amount=amounts.filter(lambda a: a > 0))
    def top_up(self, data: st.DataObject, amount: Decimal) -> None:
        self.book.top_up(data.draw(st.sampled_from(self.tokens)), amount)
        self.issued += amount

    @invariant()
    def sums_hold(self) -> None:
        t = self.book.totals()
        assert t["balance"] + t["locked"] + t["settled"] == self.issued
        assert t["locked"] == sum((a for _, _, a in self.open), D(0))
        assert min(t["balance"], t["locked"], t["settled"]) >= 0

    def teardown(self) -> None:
        self.close_book()


TestLedgerMachine = LedgerMachine.TestCase
TestLedgerMachine.settings = settings(max_examples=30, stateful_step_count=25, deadline=None)
