"""Attack tokens against every transport, over real sockets, table-driven.

Each attack (:meth:`Issuer.attacks`, plus no token at all) is sent to every
transport with a request that, were it admitted, would run the agent: Chat
Completions, models, Realtime (WebSocket), A2A JSON-RPC and REST, ACP over
HTTP and WebSocket, AG-UI, UAMP over HTTP+SSE, the UAMP WebSocket (token on
the upgrade, and token per ``session.create``). Every one is refused in the
transport's own style and the counting agent never runs. The same probes
with a valid token run the agent once each, so a probe that could not reach
the agent would fail here.

"A token of principal A refreshed into principal B's session" applies where
a session takes a new token in-band: UAMP WebSocket and HTTP+SSE
``session.update``. (Reusing another principal's A2A task, ACP or SSE
session id is the ownership suite's matter.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import orjson
import pytest
import trio
import trio_websocket

from tests._support.rpc import a2a_message, agui_run, rpc

from .agents import CountingAgent
from .issuer import Issuer

ISSUER = Issuer()
ATTACKS = {"no_token": None, **ISSUER.attacks()}
TIMEOUT = 10

CHAT = {"model": "demo", "messages": [{"role": "user", "content": "hi"}]}
A2A_SEND = rpc("message/send", {"message": a2a_message("hi")})
A2A_REST = {"message": {"role": "user", "parts": [{"type": "text", "text": "hi"}]}}
ACP_SUBMIT = {
    "jsonrpc": "2.0",
    "id": 7,
    "method": "prompt/submit",
    "params": {"messages": [{"role": "user", "content": "hi"}]},
}
AGUI_RUN = agui_run("hi")
CREATE = {"type": "session.create", "uamp_version": "1.0", "session": {"modalities": ["text"]}}


class Refused(Exception):
    """The transport refused the call; ``style`` says how it looked."""

    def __init__(self, style: str, status: int | None = None) -> None:
        super().__init__(style)
        self.style = style
        self.status = status


def _headers(token: str | None) -> dict[str, str]:
    return {} if token is None else {"authorization": f"Bearer {token}"}


def _check_http(response: httpx.Response, style: str) -> None:
    if response.status_code != 401:
        return
    assert response.headers["www-authenticate"] == 'Bearer realm="uamp", error="invalid_token"'
    body = response.json()
    if style == "openai":
        assert body["error"]["code"] == "unauthorized"
    elif style == "jsonrpc":
        assert body["jsonrpc"] == "2.0" and body["error"]["data"]["code"] == "unauthorized"
    else:
        assert body["type"] == "session.error" and body["error"]["code"] == "unauthorized"
    raise Refused(style, 401)


@asynccontextmanager
async def _ws(
    url: str, token: str | None, style: str
) -> AsyncIterator[trio_websocket.WebSocketConnection]:
    headers = [(b"authorization", f"Bearer {token}".encode())] if token is not None else []
    try:
        async with trio_websocket.open_websocket_url(url, extra_headers=headers) as ws:
            yield ws
    except trio_websocket.ConnectionRejected as rejected:
        assert rejected.status_code == 401
        assert rejected.body is not None
        body = orjson.loads(rejected.body)
        if style == "openai":
            assert body["error"]["code"] == "unauthorized"
        elif style == "jsonrpc":
            assert body["error"]["data"]["code"] == "unauthorized"
        else:
            assert body["error"]["code"] == "unauthorized"
        raise Refused(style, 401) from None


async def _recv(ws: trio_websocket.WebSocketConnection) -> dict[str, Any]:
    return orjson.loads(await ws.get_message())  # type: ignore[no-any-return]


async def _until(ws: trio_websocket.WebSocketConnection, *kinds: str) -> dict[str, Any]:
    while True:
        event = await _recv(ws)
        if event.get("type") in kinds:
            return event


Probe = Callable[[Any, httpx.AsyncClient, str | None], Awaitable[None]]


def _post(path: str, body: Any, style: str) -> Probe:
    """A probe that POSTs ``body`` to ``path``; a refusal is answered in ``style``."""

    async def probe(server: Any, http: httpx.AsyncClient, token: str | None) -> None:
        _check_http(await http.post(path, json=body, headers=_headers(token)), style)

    return probe


completions = _post("/v1/chat/completions", CHAT, "openai")
a2a_rpc = _post("/agents/demo/a2a", A2A_SEND, "jsonrpc")
a2a_rest = _post("/agents/demo/tasks", A2A_REST, "openai")
acp_http = _post("/agents/demo/acp", ACP_SUBMIT, "jsonrpc")
agui = _post("/agents/demo/agui", AGUI_RUN, "openai")
sse_events = _post(
    "/agents/demo/events",
    [CREATE, {"type": "input.text", "text": "hi"}, {"type": "response.create"}],
    "uamp",
)


async def models(server: Any, http: httpx.AsyncClient, token: str | None) -> None:
    response = await http.get("/v1/models", headers=_headers(token))
    _check_http(response, "openai")
    assert response.status_code == 200
    # Listing models runs no agent; the completion below is what the control counts.
    await completions(server, http, token)


async def realtime(server: Any, http: httpx.AsyncClient, token: str | None) -> None:
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
    async with _ws(f"ws://127.0.0.1:{server.port}/agents/demo/realtime", token, "openai") as ws:
        await _until(ws, "session.created")
        create = {"type": "conversation.item.create", "item": item}
        await ws.send_message(orjson.dumps(create).decode())
        await ws.send_message(orjson.dumps({"type": "response.create"}).decode())
        await _until(ws, "response.done")


async def acp_ws(server: Any, http: httpx.AsyncClient, token: str | None) -> None:
    async with _ws(f"ws://127.0.0.1:{server.port}/agents/demo/acp/stream", token, "jsonrpc") as ws:
        await ws.send_message(orjson.dumps(ACP_SUBMIT).decode())
        while (await _recv(ws)).get("id") != 7:
            pass


async def _uamp_turn(ws: trio_websocket.WebSocketConnection, token: str | None) -> None:
    create = dict(CREATE, session_id="s1", **({} if token is None else {"token": token}))
    await ws.send_message(orjson.dumps(create).decode())
    first = await _until(ws, "session.created", "session.error")
    if first["type"] == "session.error":
        assert first["session_id"] == "s1" and first["error"]["code"] == "unauthorized"
        raise Refused("uamp")
    for event in ({"type": "input.text", "text": "hi"}, {"type": "response.create"}):
        await ws.send_message(orjson.dumps(dict(event, session_id="s1")).decode())
    await _until(ws, "response.done")


async def uamp_ws_upgrade(server: Any, http: httpx.AsyncClient, token: str | None) -> None:
    """The token on the upgrade; the session brings none (so none means per-session auth)."""
    async with _ws(f"ws://127.0.0.1:{server.port}/agents/demo/uamp", token, "uamp") as ws:
        await _uamp_turn(ws, None)


async def uamp_ws_session(server: Any, http: httpx.AsyncClient, token: str | None) -> None:
    """No token on the upgrade; the token in ``session.create``."""
    async with _ws(f"ws://127.0.0.1:{server.port}/agents/demo/uamp", None, "uamp") as ws:
        await _uamp_turn(ws, token)


PROBES: dict[str, Probe] = {
    "completions": completions,
    "models": models,
    "realtime": realtime,
    "a2a_jsonrpc": a2a_rpc,
    "a2a_rest": a2a_rest,
    "acp_http": acp_http,
    "acp_ws": acp_ws,
    "agui": agui,
    "sse_events": sse_events,
    "uamp_ws_upgrade": uamp_ws_upgrade,
    "uamp_ws_session": uamp_ws_session,
}


async def _settle(agent: CountingAgent, count: int) -> None:
    """Wait (bounded) for background turns (A2A tasks, SSE) to reach ``count`` runs."""
    with trio.move_on_after(2):
        while len(agent.runs) < count:
            await trio.sleep(0.01)


@pytest.mark.parametrize("probe", sorted(PROBES))
async def test_every_attack_is_refused_on_every_transport(
    probe: str, served: Any, agent: CountingAgent
) -> None:
    run = PROBES[probe]
    styles = set()
    with trio.fail_after(TIMEOUT * len(ATTACKS)):
        async with httpx.AsyncClient(base_url=served.url, timeout=TIMEOUT) as http:
            for name, token in ATTACKS.items():
                with pytest.raises(Refused) as refused:
                    await run(served, http, token)
                styles.add(refused.value.style)
                await trio.sleep(0.05)  # anything that slipped through would run now
                assert agent.runs == [], (probe, name)
            # The control: the same probe with a valid token reaches the agent.
            await run(served, http, ISSUER.token("alice"))
            await _settle(agent, 1)
    assert [p.id for p in agent.runs] == ["alice"]
    assert len(styles) == 1


async def _uamp_ws_refresh(served: Any, http: httpx.AsyncClient) -> list[dict[str, Any]]:
    async with _ws(f"ws://127.0.0.1:{served.port}/agents/demo/uamp", None, "uamp") as ws:
        create = dict(CREATE, session_id="b", token=ISSUER.token("bob"))
        await ws.send_message(orjson.dumps(create).decode())
        await _until(ws, "session.created")
        update = {"type": "session.update", "session_id": "b", "token": ISSUER.token("alice")}
        await ws.send_message(orjson.dumps(update).decode())
        reply = await _until(ws, "session.error", "session.updated")
        for event in ({"type": "input.text", "text": "hi"}, {"type": "response.create"}):
            await ws.send_message(orjson.dumps(dict(event, session_id="b")).decode())
        done = await _until(ws, "response.done", "response.error")
    return [reply, done]


async def _sse_refresh(served: Any, http: httpx.AsyncClient) -> list[dict[str, Any]]:
    bob = _headers(ISSUER.token("bob"))
    created = await http.post("/agents/demo/events", json=CREATE, headers=bob)
    assert created.status_code == 200, created.text
    sid = created.json()["session_id"]
    headers = {**bob, "x-session-id": sid}
    update = {"type": "session.update", "token": ISSUER.token("alice")}
    assert (await http.post("/agents/demo/events", json=update, headers=headers)).status_code == 200
    turn = [{"type": "input.text", "text": "hi"}, {"type": "response.create"}]
    assert (await http.post("/agents/demo/events", json=turn, headers=headers)).status_code == 200
    seen: list[dict[str, Any]] = []
    async with http.stream("GET", "/agents/demo/events/stream", headers=headers) as stream:
        async for line in stream.aiter_lines():
            if line.startswith("data:"):
                seen.append(orjson.loads(line[5:]))
                if seen[-1]["type"] in ("response.done", "response.error"):
                    break
    reply = next(e for e in seen if e["type"] in ("session.error", "session.updated"))
    return [reply, seen[-1]]


@pytest.mark.parametrize("transport", ["uamp_ws", "sse_events"])
async def test_a_token_of_principal_a_refreshed_into_bs_session_is_refused(
    transport: str, served: Any, agent: CountingAgent
) -> None:
    refresh = _uamp_ws_refresh if transport == "uamp_ws" else _sse_refresh
    with trio.fail_after(TIMEOUT):
        async with httpx.AsyncClient(base_url=served.url, timeout=TIMEOUT) as http:
            reply, done = await refresh(served, http)
    assert reply["type"] == "session.error"
    assert reply["error"]["code"] == "unauthorized"
    # The session goes on as bob: the refused token changed nothing.
    assert done["type"] == "response.done"
    assert [p.id for p in agent.runs] == ["bob"]


async def test_an_sse_session_create_token_is_verified_too(
    served: Any, agent: CountingAgent
) -> None:
    bob = _headers(ISSUER.token("bob"))
    with trio.fail_after(TIMEOUT):
        async with httpx.AsyncClient(base_url=served.url, timeout=TIMEOUT) as http:
            for token in ISSUER.attacks().values():
                body = [dict(CREATE, token=token), {"type": "response.create"}]
                refused = await http.post("/agents/demo/events", json=body, headers=bob)
                assert refused.status_code == 401
                assert refused.json()["error"]["code"] == "unauthorized"
    assert agent.runs == []
