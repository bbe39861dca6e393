"""The Completions tool-round store: owned by the caller, bounded, and spliced back in place."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from uamp_proto.adapters.completions import server_rounds, splice_server_rounds
from uamp_proto.principal import ANONYMOUS, Principal
from uamp_proto.types import Message, ToolInvocation
from uamp_trio.stores import Stores, ToolRoundStore

ALICE = Principal(scheme="bearer", id="alice")
BOB = Principal(scheme="bearer", id="bob")


def call(cid: str, name: str = "f") -> ToolInvocation:
    return ToolInvocation(id=cid, name=name, arguments="{}")


ROUND = (
    Message(role="assistant", tool_calls=[call("own")]),
    Message(role="tool", content="5", tool_call_id="own"),
)


def test_another_callers_call_id_is_like_an_unknown_one() -> None:
    store = ToolRoundStore()
    store.remember(ALICE, ["c1"], ROUND)
    assert store.recall(ALICE, "c1") == ROUND
    assert store.recall(BOB, "c1") is None
    assert store.recall(ANONYMOUS, "c1") is None
    assert store.recall(ALICE, "c2") is None


@given(st.lists(st.text(min_size=1, max_size=4), max_size=60), st.integers(1, 8))
def test_the_store_stays_bounded_and_keeps_the_newest(ids: list[str], bound: int) -> None:
    store = ToolRoundStore(max_rounds=bound)
    for cid in ids:
        store.remember(ALICE, [cid], ROUND)
    assert len(store) <= bound
    newest = list(dict.fromkeys(reversed(ids)))[:bound]
    assert all(store.recall(ALICE, cid) == ROUND for cid in newest)


def test_bad_bound_and_empty_rounds() -> None:
    with pytest.raises(ValueError):
        ToolRoundStore(max_rounds=0)
    store = ToolRoundStore()
    store.remember(ALICE, ["c1"], ())
    assert len(store) == 0
    assert isinstance(Stores().tool_rounds, ToolRoundStore)


def test_server_rounds_drop_the_client_calls_and_the_text() -> None:
    produced = [
        Message(
            role="assistant",
            content="thinking aloud",
            tool_calls=[call("own", "add"), call("c1", "lookup")],
        ),
        Message(role="tool", content="5", tool_call_id="own"),
    ]
    assert server_rounds(produced, ["c1"]) == [
        Message(role="assistant", tool_calls=[call("own", "add")]),
        Message(role="tool", content="5", tool_call_id="own"),
    ]
    assert (
        server_rounds([Message(role="assistant", content="hi", tool_calls=[call("c1")])], ["c1"])
        == []
    )


def test_splice_puts_the_rounds_before_the_clients_copy_once() -> None:
    user = Message(role="user", content="q")
    asked = Message(role="assistant", tool_calls=[call("c1", "lookup")])
    answer = Message(role="tool", content="a word", tool_call_id="c1")
    kept = {"c1": ROUND}
    spliced = splice_server_rounds([user, asked, answer], kept.get)
    assert spliced == [user, *ROUND, asked, answer]
    # A client that kept them itself: nothing is added twice.
    assert splice_server_rounds(spliced, kept.get) == spliced
    # Nothing kept: the conversation as it came.
    assert splice_server_rounds([user, asked, answer], {}.get) == [user, asked, answer]
