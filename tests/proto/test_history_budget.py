"""A principal's kept conversations within one budget (uamp_proto.history)."""

from __future__ import annotations

from collections import OrderedDict

import pytest
from hypothesis import given
from hypothesis import strategies as st

from uamp_proto import types as ty
from uamp_proto.history import HistoryBudget, SessionHistories, trim, weight

ALICE = ("bearer", "alice")
BOB = ("bearer", "bob")


@pytest.mark.parametrize(
    ("reports", "emptied", "totals"),
    [
        # Within the budget: nothing goes.
        ([(ALICE, "a", 40), (ALICE, "b", 50)], [[], []], {ALICE: 90}),
        # Over it: the least recently reported goes first, then the next.
        ([(ALICE, "a", 40), (ALICE, "b", 40), (ALICE, "c", 40)], [[], [], ["a"]], {ALICE: 80}),
        (
            [(ALICE, "a", 30), (ALICE, "b", 30), (ALICE, "c", 30), (ALICE, "d", 90)],
            [[], [], [], ["a", "b", "c"]],
            {ALICE: 90},
        ),
        # Reporting again makes it the most recent; its old size is replaced.
        (
            [(ALICE, "a", 40), (ALICE, "b", 40), (ALICE, "a", 45), (ALICE, "c", 30)],
            [[], [], [], ["b"]],
            {ALICE: 75},
        ),
        # The one reported is never emptied for the others, even alone over it.
        ([(ALICE, "a", 10), (ALICE, "b", 150)], [[], ["a"]], {ALICE: 150}),
        # Owners are apart: Bob's conversations never pay for Alice's.
        (
            [(ALICE, "a", 60), (BOB, "a", 60), (ALICE, "b", 60), (BOB, "b", 30)],
            [[], [], ["a"], []],
            {ALICE: 60, BOB: 90},
        ),
        # A conversation that shrinks frees its bytes.
        ([(ALICE, "a", 90), (ALICE, "a", 0), (ALICE, "b", 100)], [[], [], []], {ALICE: 100}),
    ],
)
def test_reports_and_what_goes(
    reports: list[tuple[tuple[str, str], str, int]],
    emptied: list[list[str]],
    totals: dict[tuple[str, str], int],
) -> None:
    budget = HistoryBudget(100)
    got = [budget.kept(owner, conv, size) for owner, conv, size in reports]
    assert got == emptied
    assert {owner: budget.total(owner) for owner in totals} == totals


def test_a_forgotten_conversation_frees_its_bytes() -> None:
    budget = HistoryBudget(100)
    budget.kept(ALICE, "a", 70)
    budget.kept(ALICE, "b", 20)
    budget.forget(ALICE, "a")
    budget.forget(ALICE, "never")
    budget.forget(BOB, "a")
    assert budget.total(ALICE) == 20
    assert budget.kept(ALICE, "c", 75) == []  # 95: a no longer counts
    budget.forget(ALICE, "b")
    budget.forget(ALICE, "c")
    assert budget.total(ALICE) == 0


def test_a_budget_below_one_byte_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        HistoryBudget(0)


_OPS = st.lists(
    st.tuples(
        st.sampled_from(["kept", "forget"]),
        st.sampled_from([ALICE, BOB]),
        st.sampled_from(["a", "b", "c", "d", "e"]),
        st.integers(min_value=0, max_value=120),
    ),
    max_size=60,
)


@given(_OPS)
def test_the_budget_against_a_model(ops: list[tuple[str, tuple[str, str], str, int]]) -> None:
    budget = HistoryBudget(100)
    model: dict[tuple[str, str], OrderedDict[str, int]] = {}
    for op, owner, conv, size in ops:
        mine = model.setdefault(owner, OrderedDict())
        if op == "forget":
            budget.forget(owner, conv)
            mine.pop(conv, None)
            continue
        mine.pop(conv, None)
        mine[conv] = size
        expected = []
        while sum(mine.values()) > 100 and len(mine) > 1:
            expected.append(mine.popitem(last=False)[0])
        assert budget.kept(owner, conv, size) == expected
        assert conv not in expected
        assert budget.total(owner) <= 100 or list(mine) == [conv]
        for who, kept in model.items():
            assert budget.total(who) == sum(kept.values())


def _message(role: str, text: str) -> ty.Message:
    return ty.Message(role=role, content=text)


@given(
    st.lists(
        st.tuples(st.sampled_from(["user", "assistant", "tool"]), st.text(max_size=40)),
        max_size=30,
    ),
    st.integers(min_value=0, max_value=12),
    st.integers(min_value=0, max_value=400),
)
def test_trim_reports_what_it_kept(
    pairs: list[tuple[str, str]], max_messages: int, max_bytes: int
) -> None:
    messages = [_message(role, text) for role, text in pairs]
    kept = trim(messages, max_messages=max_messages, max_bytes=max_bytes)
    assert kept == sum(weight(m) for m in messages)
    assert kept <= max_bytes and len(messages) <= max_messages
    assert not messages or messages[0].role == "user"


class Keeper:
    """What keeps sessions (a connection): notes what the budget empties."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.emptied: list[str] = []

    def forget_history(self, session_id: str) -> None:
        self.emptied.append(session_id)

    def __repr__(self) -> str:
        return self.name


def test_sessions_on_two_connections_share_their_owners_budget() -> None:
    one, two = Keeper("one"), Keeper("two")
    histories = SessionHistories(100)
    histories.kept(ALICE, one, "s1", 40)
    histories.kept(ALICE, two, "s1", 40)  # the same id on another connection: another session
    histories.kept(BOB, one, "s2", 90)
    assert histories.total(ALICE) == 80 and histories.total(BOB) == 90
    histories.kept(ALICE, two, "s3", 40)  # 120: alice's least recent goes, on its connection
    assert (one.emptied, two.emptied) == (["s1"], [])
    assert histories.total(ALICE) == 80 and histories.total(BOB) == 90
    histories.ended(one, "s1")  # already emptied and forgotten: nothing more
    histories.ended(two, "s3")
    assert histories.total(ALICE) == 40
    histories.closed(two)
    histories.closed(two)
    assert histories.total(ALICE) == 0 and histories.total(BOB) == 90
    histories.closed(one)
    assert histories.total(BOB) == 0 and not histories._owners


_SESSION_OPS = st.lists(
    st.tuples(
        st.sampled_from(["kept", "kept", "kept", "ended", "closed"]),
        st.sampled_from([ALICE, BOB]),
        st.integers(min_value=0, max_value=2),  # which connection
        st.sampled_from(["s1", "s2", "s3"]),
        st.integers(min_value=0, max_value=60),
    ),
    max_size=80,
)


@given(_SESSION_OPS)
def test_session_histories_against_a_model(
    ops: list[tuple[str, tuple[str, str], int, str, int]],
) -> None:
    """Totals, what is emptied and where, against live sessions as a model keeps them.

    A session has one owner all its life (a session id is reused on a
    connection only after it ended), as on both servers.
    """
    keepers = [Keeper(f"c{n}") for n in range(3)]
    histories = SessionHistories(100)
    #: (connection, session) -> (owner, size), least recently reported first.
    live: OrderedDict[tuple[int, str], tuple[tuple[str, str], int]] = OrderedDict()
    for op, owner, c, sid, size in ops:
        keeper = keepers[c]
        if op == "closed":
            histories.closed(keeper)
            for key in [k for k in live if k[0] == c]:
                del live[key]
        elif op == "ended":
            histories.ended(keeper, sid)
            live.pop((c, sid), None)
        else:
            if (c, sid) in live and live[(c, sid)][0] != owner:
                histories.ended(keeper, sid)  # the old session ended first
                del live[(c, sid)]
            live.pop((c, sid), None)
            live[(c, sid)] = (owner, size)
            before = [list(k.emptied) for k in keepers]
            histories.kept(owner, keeper, sid, size)
            expected: list[tuple[int, str]] = []
            mine = [k for k, (who, _) in live.items() if who == owner]
            total = sum(live[k][1] for k in mine)
            while total > 100 and len(mine) > 1:
                oldest = mine.pop(0)
                total -= live.pop(oldest)[1]
                expected.append(oldest)
            got = [(n, s) for n, k in enumerate(keepers) for s in k.emptied[len(before[n]) :]]
            assert sorted(got) == sorted(expected)
            assert (c, sid) not in got
        for who in (ALICE, BOB):
            assert histories.total(who) == sum(n for o, n in live.values() if o == who)
            alone = [k for k, (o, _) in live.items() if o == who]
            assert histories.total(who) <= 100 or len(alone) == 1
