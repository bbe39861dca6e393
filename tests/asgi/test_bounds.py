"""What a client can make the ASGI app keep is bounded, per principal and in all."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

import uamp_asgi
from tests._support.asgi import uvicorn_server
from uamp_asgi.bounded import OwnedLRU
from uamp_asgi.responders import function_agent
from uamp_proto import events as ev
from uamp_proto.principal import Principal
from uamp_proto.responder import TurnRequest
from uamp_stores import MemoryEventLog
from uamp_trio.trust.auth import APIKeyAuthenticator

ALICE, BOB = Principal(id="alice", scheme="t"), Principal(id="bob", scheme="t")


# --- the store -------------------------------------------------------------------------

CASES = [
    # (per_owner, total, puts as (owner, key), expected keys left as (owner, key))
    (2, 10, [(ALICE, "a"), (ALICE, "b"), (ALICE, "c")], {("alice", "b"), ("alice", "c")}),
    (
        2,
        10,
        [(BOB, "x"), (ALICE, "a"), (ALICE, "b"), (ALICE, "c")],
        {("bob", "x"), ("alice", "b"), ("alice", "c")},
    ),
    (5, 2, [(BOB, "x"), (ALICE, "a"), (ALICE, "b")], {("alice", "a"), ("alice", "b")}),
    (2, 10, [(ALICE, "a"), (ALICE, "a"), (ALICE, "b")], {("alice", "a"), ("alice", "b")}),
]


@pytest.mark.parametrize(("per_owner", "total", "puts", "left"), CASES)
def test_owned_lru_evicts_the_owners_own_oldest_first(
    per_owner: int, total: int, puts: list[tuple[Principal, str]], left: set[tuple[str, str]]
) -> None:
    store: OwnedLRU[int] = OwnedLRU(per_owner=per_owner, total=total)
    for i, (owner, key) in enumerate(puts):
        store.put(owner, key, i)
    kept = {(o.id, k) for o in (ALICE, BOB) for k in "abcx" if store.get(o, k) is not None}
    assert kept == left


def test_another_owners_key_is_missing() -> None:
    store: OwnedLRU[int] = OwnedLRU(per_owner=2, total=4)
    store.put(ALICE, "a", 1)
    assert store.get(BOB, "a") is None and store.pop(BOB, "a") is None
    assert store.get(ALICE, "a") == 1


@given(st.lists(st.tuples(st.sampled_from([ALICE, BOB]), st.sampled_from("abcdef")), max_size=60))
def test_owned_lru_never_exceeds_its_caps(puts: list[tuple[Principal, str]]) -> None:
    store: OwnedLRU[int] = OwnedLRU(per_owner=3, total=5)
    for i, (owner, key) in enumerate(puts):
        store.put(owner, key, i)
        assert len(store) <= 5
        assert store.held_by(ALICE) <= 3 and store.held_by(BOB) <= 3
        assert store.held_by(ALICE) + store.held_by(BOB) == len(store)
        assert store.get(owner, key) == i  # what was just put is there


# --- over the wire -------------------------------------------------------------------------


async def echo(turn: TurnRequest) -> AsyncIterator[str | ev.Event]:
    """Says back what it was told."""
    yield f"You said: {turn.messages[-1].text}"


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    auth = APIKeyAuthenticator([("alice", "sk-alice"), ("bob", "sk-bob")])
    # Stored responses live in the event log: its per-principal cap bounds them.
    log = MemoryEventLog(max_sessions_per_principal=3)
    config = uamp_asgi.Config(authenticator=auth, max_body_size=4096, max_sessions=2, event_log=log)
    app = uamp_asgi.app(function_agent(echo), config=config)
    with uvicorn_server(app) as url:
        yield url


def test_a_body_over_the_limit_is_refused_before_any_agent_runs(base: str) -> None:
    big = {"model": "echo", "messages": [{"role": "user", "content": "x" * 5000}]}
    headers = {"authorization": "Bearer sk-alice"}
    resp = httpx.post(f"{base}/agents/echo/chat/completions", json=big, headers=headers)
    assert resp.status_code == 413
    assert resp.json()["error"]["code"] == "body_too_large"


def test_one_principals_stored_responses_never_push_out_anothers(base: str) -> None:
    url = f"{base}/agents/echo/v1/responses"
    alice, bob = {"authorization": "Bearer sk-alice"}, {"authorization": "Bearer sk-bob"}
    kept = httpx.post(url, json={"model": "echo", "input": "mine"}, headers=bob).json()["id"]
    made = [
        httpx.post(url, json={"model": "echo", "input": str(i)}, headers=alice).json()["id"]
        for i in range(10)
    ]
    assert httpx.get(f"{url}/{kept}", headers=bob).status_code == 200
    held = [httpx.get(f"{url}/{rid}", headers=alice).status_code for rid in made]
    assert held == [404] * 7 + [200] * 3  # alice's own oldest went


def test_sessions_on_one_websocket_are_capped_and_it_stays_open(base: str) -> None:
    from websockets.sync.client import connect as ws_connect

    url = base.replace("http://", "ws://") + "/agents/echo/uamp"
    create = json.dumps(
        {"type": "session.create", "uamp_version": "1.0", "session": {"modalities": ["text"]}}
    )
    auth = {"authorization": "Bearer sk-alice"}
    with ws_connect(url, additional_headers=auth, open_timeout=10) as ws:

        def next_of(kind: str) -> dict[str, object]:
            while True:
                event = json.loads(ws.recv(timeout=10))
                if event["type"] == kind:
                    return event

        for _ in range(2):
            ws.send(create)
            next_of("session.created")
        ws.send(create)
        refused = next_of("session.error")
        assert refused["error"]["code"] == "too_many_sessions"  # type: ignore[index]
        ws.send(json.dumps({"type": "ping"}))
        next_of("pong")  # the connection is still served
