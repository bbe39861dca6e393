"""Every transport closes a finished response's interrupt port: no garbage cycle.

A response's request holds its interrupt port, the port's ``emit`` holds the
response's runner, and the runner holds the request: until the port is
closed these form a cycle that only the garbage collector frees, walking
the request's whole conversation each time (docs/performance.md, "Time to
first delta on WebSocket"). The UAMP WebSocket host closes its ports
(``test_uamp_ws_garbage.py``); here the other places a port is made:
``open_response`` and the parked turns (Chat Completions' approvals, ACP,
AG-UI), and MCP, A2A and the AI SDK, which run their own runner. With the
collector off, each request is freed once its response has ended.
"""

from __future__ import annotations

from contextlib import aclosing
from typing import Any

import httpx
import pytest
import trio

from tests._support.garbage import Keeps, collector_off
from tests._support.rpc import a2a_message, rpc
from uamp_proto import events as ev
from uamp_proto.adapters.mcp import tool_name
from uamp_proto.principal import ANONYMOUS
from uamp_proto.responder import TurnRequest, with_interrupts
from uamp_trio.app import create_app
from uamp_trio.hosting.interrupts import Interrupts
from uamp_trio.hosting.parked import ParkedTurns, turn_key
from uamp_trio.hosting.turns import open_response
from uamp_trio.transports import a2a as a2a_transport
from uamp_trio.transports import ai_sdk, mcp

TIMEOUT = 30


def _request() -> TurnRequest:
    return TurnRequest(agent="keeps", session_id="s1", response_id="r1", messages=[])


async def test_open_response_closes_the_port_it_was_given() -> None:
    agent, host = Keeps(), Interrupts()
    with collector_off(), trio.fail_after(TIMEOUT):
        request = _request()
        port = host.port(request)
        request = with_interrupts(request, port)
        async with open_response(agent, request, port=port) as turn:
            said = [e async for e in turn]
        assert any(isinstance(e, ev.ResponseDelta) for e in said)
        del request, turn, said
        assert len(agent.requests) == 1 and agent.freed() and None not in agent.ports


async def test_a_parked_turn_closes_the_port_it_was_given() -> None:
    agent, host, lot = Keeps(), Interrupts(), ParkedTurns(linger=0.01)
    with collector_off(), trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            request = _request()
            port = host.port(request)
            request = with_interrupts(request, port)
            key = turn_key("keeps", "s1", ANONYMOUS)
            turn = lot.start(nursery.start_soon, agent, request, key=key, port=port)
            async with aclosing(turn.read()) as events:
                said = [e async for e in events]
            assert any(isinstance(e, ev.ResponseDelta) for e in said)
        del request, turn, said
        assert len(agent.requests) == 1 and agent.freed() and None not in agent.ports


async def _mcp(http: httpx.AsyncClient) -> None:
    url = "/agents/keeps/mcp"
    hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t"}}
    r = await http.post(url, json=rpc("initialize", hello))
    session = {"Mcp-Session-Id": r.headers["mcp-session-id"]}
    await http.post(
        url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session
    )
    call = {"name": tool_name("keeps"), "arguments": {"prompt": "hello"}}
    r = await http.post(url, json=rpc("tools/call", call, 2), headers=session)
    assert '"hi "' in r.text  # the agent's answer, as the tool's text


async def _a2a(http: httpx.AsyncClient) -> None:
    r = await http.post(
        "/agents/keeps/a2a", json=rpc("message/send", {"message": a2a_message("x")})
    )
    assert r.json()["result"]["status"]["state"] == "completed"


async def _ai_sdk(http: httpx.AsyncClient) -> None:
    user = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hello"}]}
    r = await http.post("/agents/keeps/ai-sdk", json={"id": "c1", "messages": [user]})
    assert b"hi " in r.content and r.content.endswith(b"data: [DONE]\n\n")


@pytest.mark.parametrize(
    ("mount", "ask"),
    [(mcp.mount, _mcp), (a2a_transport.mount, _a2a), (ai_sdk.mount, _ai_sdk)],
    ids=["mcp", "a2a", "ai-sdk"],
)
async def test_a_finished_responses_request_is_freed_without_the_collector(
    serve_app: Any, mount: Any, ask: Any
) -> None:
    agent = Keeps()
    server = await serve_app(create_app([agent], transports=[mount]))
    with collector_off(), trio.fail_after(TIMEOUT):
        for n in range(1, 3):
            # A connection of its own: a kept-alive one may hold its last
            # response until the next request, which is not a cycle.
            async with httpx.AsyncClient(base_url=server.url) as http:
                await ask(http)
            # The response's task may end just after the answer's last byte.
            while not (len(agent.requests) == n and agent.freed()):
                await trio.sleep(0.01)
    assert None not in agent.ports  # each had a port, and it was closed
