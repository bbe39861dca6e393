"""Floods a stranger can send to uamp_asgi (uvicorn, real sockets), reproduced against their bounds.

JSON bodies that are cheap to send and dear to parse (more values, or deeper
nesting, than ``uamp_proto.jsonbounds`` lets be parsed: 413
``json_too_complex`` before the parser runs, as under ``uamp serve``), MCP
sessions opened and never ended, UAMP WebSocket sessions left in the event
log past its per-principal cap, and Realtime ``response.create`` piled on busy
conversations past ``busy_max_queued`` and ``busy_max_queued_per_principal``,
and A2A tasks left running past the task store's per-principal cap.
Each flood comes from one principal and leaves another's work alone.
``bench/attacks.py`` has the ``asgi_`` rows that measure them.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import httpx
import pytest
from websockets.sync.client import ClientConnection
from websockets.sync.client import connect as ws_connect

import uamp_asgi
from tests._support.asgi import uvicorn_server
from uamp_asgi.responders import function_agent
from uamp_proto import events as ev
from uamp_proto.jsonbounds import DEFAULT_MAX_VALUES, MAX_DEPTH
from uamp_proto.responder import TurnRequest
from uamp_stores import MemoryEventLog, MemoryTaskStore
from uamp_trio.trust.auth import APIKeyAuthenticator

TIMEOUT = 10
ALICE, BOB = {"authorization": "Bearer sk-alice"}, {"authorization": "Bearer sk-bob"}
RUNS: list[str] = []


async def holder(turn: TurnRequest) -> AsyncIterator[str | ev.Event]:
    """Counts its runs; ``hold`` waits until cancelled, anything else is answered ``ok``."""
    text = next((m.text for m in reversed(turn.messages) if m.role == "user"), "")
    RUNS.append(text)
    if text == "hold":
        await anyio.sleep_forever()
    yield "ok"


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    config = uamp_asgi.Config(
        authenticator=APIKeyAuthenticator([("alice", "sk-alice"), ("bob", "sk-bob")]),
        event_log=MemoryEventLog(max_sessions_per_principal=3),
        busy_max_queued=2,
        busy_max_queued_per_principal=3,
        a2a_tasks=MemoryTaskStore(max_tasks=100, max_per_principal=2),
    )
    with uvicorn_server(uamp_asgi.app(function_agent(holder), config=config)) as url:
        yield url


# --- JSON bodies ---------------------------------------------------------------------------


def _wide() -> bytes:
    """A Completions body of more members than the parser takes (well under 4 MiB)."""
    keys = b",".join(b'"k%d":0' % i for i in range(DEFAULT_MAX_VALUES + 10))
    return b'{"model":"holder","messages":[{"role":"user","content":"hi"}],"x":{' + keys + b"}}"


def _deep() -> bytes:
    """A valid Completions body with a value nested deeper than the parser takes."""
    deep = "[" * (MAX_DEPTH + 10) + "]" * (MAX_DEPTH + 10)
    return b'{"model":"holder","messages":[{"role":"user","content":"hi"}],"x":%b}' % deep.encode()


@pytest.mark.parametrize("path", ["chat/completions", "v1/responses", "agui", "ai-sdk"])
@pytest.mark.parametrize("make", [_wide, _deep], ids=["wide", "deep"])
def test_a_json_body_over_the_bounds_is_refused_unparsed(base: str, path: str, make: Any) -> None:
    runs = len(RUNS)
    resp = httpx.post(
        f"{base}/agents/holder/{path}",
        content=make(),
        headers={**ALICE, "content-type": "application/json"},
        timeout=TIMEOUT,
    )
    assert resp.status_code == 413, resp.text
    assert "json_too_complex" in resp.text
    assert len(RUNS) == runs  # no agent ran


def test_a_body_within_the_bounds_still_runs(base: str) -> None:
    body = {"model": "holder", "messages": [{"role": "user", "content": "hi"}], "x": [[[]]]}
    resp = httpx.post(
        f"{base}/agents/holder/chat/completions", json=body, headers=ALICE, timeout=TIMEOUT
    )
    assert resp.status_code == 200, resp.text


# --- MCP sessions --------------------------------------------------------------------------


def test_mcp_sessions_opened_and_left_evict_only_their_owners_oldest(base: str) -> None:
    from uamp_asgi.transports.mcp import MAX_SESSIONS_PER_PRINCIPAL

    endpoint = f"{base}/agents/holder/mcp"
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "x"}}

    def opened(who: dict[str, str]) -> str:
        resp = httpx.post(endpoint, json=init, headers=who, timeout=TIMEOUT)
        assert resp.status_code == 200
        return resp.headers["mcp-session-id"]

    bobs = opened(BOB)
    alices = [opened(ALICE) for _ in range(MAX_SESSIONS_PER_PRINCIPAL + 6)]
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}

    def status(who: dict[str, str], session: str) -> int:
        headers = {**who, "mcp-session-id": session}
        return httpx.post(endpoint, json=ping, headers=headers, timeout=TIMEOUT).status_code

    assert [status(ALICE, s) for s in alices] == [404] * 6 + [200] * MAX_SESSIONS_PER_PRINCIPAL
    assert status(BOB, bobs) == 200


# --- UAMP WebSocket sessions in the event log ------------------------------------------------


def _ws(base: str, path: str, who: dict[str, str]) -> ClientConnection:
    url = base.replace("http://", "ws://") + path
    return ws_connect(url, additional_headers=who, open_timeout=TIMEOUT)


def _next(ws: ClientConnection, *kinds: str) -> dict[str, Any]:
    while True:
        event: dict[str, Any] = json.loads(ws.recv(timeout=TIMEOUT))
        if event["type"] in kinds:
            return event


def _create(ws: ClientConnection, **extra: Any) -> dict[str, Any]:
    event = {"type": "session.create", "uamp_version": "1.0", "session": {"modalities": ["text"]}}
    ws.send(json.dumps({**event, **extra}))
    return _next(ws, "session.created", "session.error")


def test_sessions_left_in_the_event_log_past_the_cap_forget_the_owners_oldest(base: str) -> None:
    made: dict[str, list[tuple[str, str]]] = {"alice": [], "bob": []}
    for name, who, count in (("bob", BOB, 1), ("alice", ALICE, 5)):
        for _ in range(count):  # a socket each, left at once
            with _ws(base, "/agents/holder/uamp", who) as ws:
                created = _create(ws)
                made[name].append((created["session_id"], created["event_id"]))

    def resumed(who: dict[str, str], sid: str, after: str) -> str:
        with _ws(base, "/agents/holder/uamp", who) as ws:
            got = _create(ws, session_id=sid, extensions={"resume_from": after})
        return "resumed" if got["type"] == "session.created" else got["error"]["code"]

    assert [resumed(ALICE, *s) for s in made["alice"]] == ["unknown_session"] * 2 + ["resumed"] * 3
    assert resumed(BOB, *made["bob"][0]) == "resumed"  # alice's flood pushed out none of bob's


# --- Realtime responses queued on busy conversations ----------------------------------------


def _say(ws: ClientConnection, text: str) -> None:
    content = [{"type": "input_text", "text": text}]
    item = {"type": "message", "role": "user", "content": content}
    ws.send(json.dumps({"type": "conversation.item.create", "item": item}))


def _busy(ws: ClientConnection, creates: int) -> int:
    """Hold a response, then ``creates`` more: how many were refused ``queue_full``."""
    _next(ws, "session.created")
    _say(ws, "hold")
    ws.send(json.dumps({"type": "response.create"}))
    _next(ws, "response.created")
    _say(ws, "after")
    for _ in range(creates):
        ws.send(json.dumps({"type": "response.create"}))
    ws.send(json.dumps({"type": "conversation.item.retrieve", "item_id": "none"}))
    refused = 0
    while True:  # the retrieve's error comes after every refusal of the creates before it
        error = _next(ws, "error")["error"]
        if error["code"] != "queue_full":
            return refused
        refused += 1


def test_responses_queued_on_busy_conversations_are_bounded_per_conversation_and_principal(
    base: str,
) -> None:
    path = "/agents/holder/realtime"
    with (
        _ws(base, path, ALICE) as first,
        _ws(base, path, ALICE) as second,
        _ws(base, path, BOB) as third,
    ):
        runs = len(RUNS)
        assert _busy(first, 4) == 2  # 2 wait: busy_max_queued
        assert _busy(second, 3) == 2  # 1 waits: alice's third, busy_max_queued_per_principal
        assert _busy(third, 2) == 0  # bob's wait as usual
        for ws, queued in ((first, 2), (second, 1), (third, 2)):
            ws.send(json.dumps({"type": "response.cancel"}))
            done = [_next(ws, "response.done")["response"]["status"] for _ in range(1 + queued)]
            assert done == ["cancelled"] + ["completed"] * queued
        assert sorted(RUNS[runs:]) == ["after"] * 5 + ["hold"] * 3


# --- A2A tasks left running ------------------------------------------------------------------


def _rpc(base: str, who: dict[str, str], method: str, params: dict[str, Any]) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    headers = {**who, "a2a-version": "1.0"}
    resp = httpx.post(f"{base}/agents/holder/a2a", json=body, headers=headers, timeout=TIMEOUT)
    assert resp.status_code == 200, resp.text
    answer: dict[str, Any] = resp.json()
    return answer


def _held_task(base: str, who: dict[str, str]) -> dict[str, Any]:
    message = {"role": "ROLE_USER", "parts": [{"text": "hold"}], "messageId": "m"}
    params = {"message": message, "configuration": {"returnImmediately": True}}
    return _rpc(base, who, "SendMessage", params)


def test_unfinished_a2a_tasks_are_capped_per_principal(base: str) -> None:
    first, second = (_held_task(base, ALICE)["result"]["task"]["id"] for _ in range(2))
    refused = _held_task(base, ALICE)
    assert refused["error"]["code"] == -32029, refused  # the third waits for none
    assert "result" in _held_task(base, BOB)  # bob's own quota
    _rpc(base, ALICE, "CancelTask", {"id": first})
    assert "result" in _held_task(base, ALICE)  # a finished task makes room
    _rpc(base, ALICE, "CancelTask", {"id": second})
