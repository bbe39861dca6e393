"""Another principal's MCP session, A2A task or stored response answers like a missing one."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

import uamp_asgi
from tests._support.asgi import uvicorn_server
from uamp_asgi.responders import function_agent
from uamp_proto import events as ev
from uamp_proto.responder import TurnRequest
from uamp_trio.trust.auth import APIKeyAuthenticator

ALICE = {"authorization": "Bearer sk-alice"}
BOB = {"authorization": "Bearer sk-bob"}


async def echo(turn: TurnRequest) -> AsyncIterator[str | ev.Event]:
    """Says back what it was told."""
    yield f"You said: {turn.messages[-1].text}"


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    auth = APIKeyAuthenticator([("alice", "sk-alice"), ("bob", "sk-bob")])
    app = uamp_asgi.app(function_agent(echo), config=uamp_asgi.Config(authenticator=auth))
    with uvicorn_server(app) as url:
        yield f"{url}/agents/echo"


def _rpc(method: str, params: dict[str, object], rid: int = 1) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


def test_mcp_sessions_are_their_openers(base: str) -> None:
    init = _rpc(
        "initialize",
        {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    )
    opened = httpx.post(f"{base}/mcp", json=init, headers=ALICE)
    assert opened.status_code == 200
    sid = opened.headers["mcp-session-id"]
    listing = _rpc("tools/list", {}, 2)
    mine = httpx.post(f"{base}/mcp", json=listing, headers={**ALICE, "mcp-session-id": sid})
    assert mine.json()["result"]["tools"][0]["name"] == "echo"
    theirs = httpx.post(f"{base}/mcp", json=listing, headers={**BOB, "mcp-session-id": sid})
    missing = httpx.post(f"{base}/mcp", json=listing, headers={**BOB, "mcp-session-id": "nope"})
    assert theirs.status_code == missing.status_code == 404
    assert theirs.json() == missing.json()
    bare = httpx.post(f"{base}/mcp", json=listing, headers=ALICE)
    assert bare.status_code == 400


def test_a2a_tasks_are_their_creators(base: str) -> None:
    message = {"role": "user", "parts": [{"kind": "text", "text": "hi"}], "messageId": "m1"}
    sent = httpx.post(f"{base}/a2a", json=_rpc("message/send", {"message": message}), headers=ALICE)
    task = sent.json()["result"]
    assert task["status"]["state"] == "completed"
    asked = _rpc("tasks/get", {"id": task["id"]})
    assert httpx.post(f"{base}/a2a", json=asked, headers=ALICE).json()["result"]["id"] == task["id"]
    theirs = httpx.post(f"{base}/a2a", json=asked, headers=BOB).json()
    missing = httpx.post(
        f"{base}/a2a", json=_rpc("tasks/get", {"id": "task_x"}), headers=BOB
    ).json()
    assert theirs["error"]["code"] == missing["error"]["code"] == -32001


def test_stored_responses_are_their_creators(base: str) -> None:
    made = httpx.post(f"{base}/v1/responses", json={"model": "echo", "input": "hi"}, headers=ALICE)
    rid = made.json()["id"]
    assert httpx.get(f"{base}/v1/responses/{rid}", headers=ALICE).status_code == 200
    theirs = httpx.get(f"{base}/v1/responses/{rid}", headers=BOB)
    missing = httpx.get(f"{base}/v1/responses/resp_nope", headers=BOB)
    assert theirs.status_code == missing.status_code == 404


def test_the_agent_card_is_public_and_names_the_json_rpc_url(base: str) -> None:
    card = httpx.get(f"{base}/.well-known/agent-card.json").json()
    assert card["supportedInterfaces"][0]["url"] == f"{base}/a2a"
    assert httpx.post(f"{base}/a2a", json=_rpc("tasks/get", {"id": "x"})).status_code == 401


def test_acp_sessions_are_their_creators(base: str) -> None:
    opened = httpx.post(
        f"{base}/acp", json=_rpc("session/new", {"cwd": "/", "mcpServers": []}), headers=ALICE
    )
    sid = opened.json()["result"]["sessionId"]
    prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "hi"}]}
    mine = httpx.post(f"{base}/acp", json=_rpc("session/prompt", prompt), headers=ALICE).json()
    assert mine["result"]["stopReason"] == "end_turn"
    theirs = httpx.post(f"{base}/acp", json=_rpc("session/prompt", prompt), headers=BOB).json()
    other = {"sessionId": "sess_nope", "prompt": prompt["prompt"]}
    missing = httpx.post(f"{base}/acp", json=_rpc("session/prompt", other), headers=BOB).json()
    assert theirs["error"]["code"] == missing["error"]["code"]
    assert "result" not in theirs
