"""The MCP session store: bounded peers and conversations, owned by their principal."""

from __future__ import annotations

import pytest

from uamp_proto import types as ty
from uamp_proto.principal import Principal
from uamp_trio.stores.mcp_sessions import McpLimits, McpSessionStore, TooManySessions

ALICE = Principal(id="alice", scheme="api_key")
BOB = Principal(id="bob", scheme="api_key")
ALICE_JWT = Principal(id="alice", scheme="jwt")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Busy:
    """Stands for a running call (the store only cancels it)."""

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


def test_a_peer_is_found_by_its_owner_only() -> None:
    store = McpSessionStore()
    peer = store.open("demo", ALICE, "2025-11-25")
    assert store.get("demo", peer.id, ALICE) is peer
    for agent, who in [("demo", BOB), ("demo", ALICE_JWT), ("other", ALICE)]:
        assert store.get(agent, peer.id, who) is None
    assert store.get("demo", "nope", ALICE) is None


def test_over_the_per_principal_bound_the_oldest_idle_peer_ends() -> None:
    store = McpSessionStore(McpLimits(max_peers_per_principal=2))
    first, second = store.open("demo", ALICE, "v"), store.open("demo", ALICE, "v")
    bobs = store.open("demo", BOB, "v")
    store.get("demo", first.id, ALICE)  # used: second is now the oldest
    third = store.open("demo", ALICE, "v")
    assert second.ended.is_set() and store.get("demo", second.id, ALICE) is None
    assert {p.id for p in store.peers.values()} == {first.id, third.id, bobs.id}


def test_busy_peers_are_not_evicted_and_then_new_ones_are_refused() -> None:
    store = McpSessionStore(McpLimits(max_peers_per_principal=2, max_peers=3))
    peers = [store.open("demo", ALICE, "v") for _ in range(2)]
    for peer in peers:
        peer.calls[1] = Busy()  # type: ignore[assignment]
    with pytest.raises(TooManySessions):
        store.open("demo", ALICE, "v")
    bobs = store.open("demo", BOB, "v")
    carols = store.open("demo", Principal(id="carol", scheme="api_key"), "v")
    assert bobs.ended.is_set()  # the server was full: the oldest idle peer made room
    carols.calls[1] = Busy()  # type: ignore[assignment]
    with pytest.raises(TooManySessions):  # full of busy peers
        store.open("demo", BOB, "v")


def test_idle_peers_expire_and_their_calls_are_cancelled() -> None:
    clock = Clock()
    store = McpSessionStore(McpLimits(peer_idle=10), clock=clock)
    idle = store.open("demo", ALICE, "v")
    busy = store.open("demo", ALICE, "v")
    call = Busy()
    busy.calls[1] = call  # type: ignore[assignment]
    clock.now = 11
    assert store.get("demo", idle.id, ALICE) is None and idle.ended.is_set()
    assert store.get("demo", busy.id, ALICE) is busy  # a running call keeps it
    store.close(busy.id)
    assert call.cancelled and busy.ended.is_set()


def test_conversations_are_per_principal_and_bounded() -> None:
    store = McpSessionStore(McpLimits(max_conversations_per_principal=2, max_messages=3))
    mine = store.conversation(ALICE, "demo", "s")
    assert store.conversation(ALICE, "demo", "s") is mine
    assert store.conversation(BOB, "demo", "s") is not mine
    assert store.conversation(ALICE, "other", "s") is not mine
    store.conversation(ALICE, "demo", "t")
    store.conversation(ALICE, "demo", "u")  # drops the least recently used: "s"
    assert store.conversation(ALICE, "demo", "s") is not mine
    assert len([k for k in store.conversations if k[0] == ALICE.key]) == 2


@pytest.mark.parametrize(
    ("roles", "kept"),
    [
        ("u", "u"),
        ("uaua", "aua"[1:]),  # the kept tail starts at a user message
        ("uatua", "ua"),
        ("uaaaa", ""),
    ],
)
def test_conversations_keep_their_last_turns(roles: str, kept: str) -> None:
    store = McpSessionStore(McpLimits(max_messages=3))
    conversation = store.conversation(ALICE, "demo", "s")
    names = {"u": "user", "a": "assistant", "t": "tool"}
    store.remember(conversation, [ty.Message(role=names[r], content=r) for r in roles])
    assert "".join(m.role[0] for m in conversation.messages) == kept


def _said(text: str) -> list[ty.Message]:
    return [ty.Message(role="user", content=text), ty.Message(role="assistant", content="ok")]


def test_a_principals_conversations_share_one_budget_and_others_are_apart() -> None:
    store = McpSessionStore(McpLimits(max_history_bytes_per_principal=1000))
    mine = [store.conversation(ALICE, "demo", f"c{n}") for n in range(3)]
    theirs = store.conversation(BOB, "demo", "c0")
    store.remember(theirs, _said("b" * 900))
    for conv in mine:
        store.remember(conv, _said("a" * 400))
    # Alice's third turn passed her budget: her least recently continued one went.
    assert [len(c.messages) for c in mine] == [0, 2, 2]
    assert len(theirs.messages) == 2  # Bob's is his own
    assert store.history_bytes(ALICE) <= 1000 < store.history_bytes(ALICE) + 400
    assert store.history_bytes(BOB) > 900


def test_a_dropped_conversation_leaves_the_budget() -> None:
    store = McpSessionStore(
        McpLimits(max_conversations_per_principal=2, max_history_bytes_per_principal=1000)
    )
    first = store.conversation(ALICE, "demo", "first")
    store.remember(first, _said("a" * 600))
    store.remember(store.conversation(ALICE, "demo", "second"), _said("a" * 300))
    store.conversation(ALICE, "demo", "third")  # the first is dropped for it
    assert store.history_bytes(ALICE) < 600
