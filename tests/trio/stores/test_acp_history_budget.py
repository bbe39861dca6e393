"""What one principal's ACP sessions keep, together, within a budget."""

from __future__ import annotations

from uamp_proto import types as ty
from uamp_proto.principal import Principal
from uamp_trio.stores.acp_sessions import AcpLimits, AcpSessionStore

ALICE = Principal(id="alice", scheme="api_key")
BOB = Principal(id="bob", scheme="api_key")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _prompted(store: AcpSessionStore, owner: Principal, text: str) -> list[ty.Message]:
    session = store.create("demo", "/", owner=owner)
    session.messages += [ty.Message(role="user", content=text), ty.Message(role="assistant")]
    store.trim_history(session)
    return session.messages


def test_past_the_budget_the_least_recently_prompted_sessions_start_afresh() -> None:
    store = AcpSessionStore(AcpLimits(max_history_bytes_per_principal=1000))
    bobs = _prompted(store, BOB, "b" * 900)
    kept = [_prompted(store, ALICE, "a" * 400) for _ in range(3)]
    got = [store.sessions[sid].messages for sid in list(store.sessions)[1:]]
    assert [len(m) for m in got] == [0, 2, 2]
    assert kept[1:] == got[1:]
    assert len(bobs) == 2 and store.history_bytes(BOB) >= 900
    assert store.history_bytes(ALICE) <= 1000


def test_an_expired_session_leaves_the_budget() -> None:
    clock = Clock()
    store = AcpSessionStore(AcpLimits(idle_timeout=10), clock=clock)
    _prompted(store, ALICE, "a" * 500)
    assert store.history_bytes(ALICE) >= 500
    clock.now = 11
    assert store.expire() == 1
    assert store.history_bytes(ALICE) == 0
