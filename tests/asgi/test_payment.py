"""Paying for turns on uamp_asgi: uamp serve's ledger (SQLite, through worker threads on asyncio),
configured with uamp serve's own flags (``uamp_trio.asgi_options.serve_options``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

import uamp_asgi
from tests._support.asgi import uvicorn_server
from uamp_asgi.responders import function_agent
from uamp_proto import events as ev
from uamp_proto.responder import TurnRequest
from uamp_trio.asgi_options import serve_options

RUNS: list[str] = []


async def counted(turn: TurnRequest) -> AsyncIterator[str | ev.Event]:
    """Says back what it was told; every run is recorded."""
    RUNS.append(turn.messages[-1].text)
    yield f"You said: {turn.messages[-1].text}"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
    ledger = Path(tmp_path_factory.mktemp("ledger")) / "pay.db"
    options = serve_options(["--ledger", str(ledger), "--price", "0.05", "--api-key", "alice:sk-a"])
    with uvicorn_server(
        uamp_asgi.app(function_agent(counted), config=uamp_asgi.Config(**options))
    ) as url:
        yield url, options["payment_policy"]


def _ask(url: str, text: str, **headers: str) -> httpx.Response:
    return httpx.post(
        f"{url}/agents/counted/chat/completions",
        json={"model": "counted", "messages": [{"role": "user", "content": text}]},
        headers=headers,
        timeout=20,
    )


def test_the_flags_build_the_same_objects_as_uamp_serve(tmp_path: Path) -> None:
    options = serve_options(["--ledger", str(tmp_path / "l.db"), "--api-key", "bob:sk-b"])
    assert type(options["payment_policy"]).__name__ == "LedgerPolicy"
    assert type(options["authenticator"]).__name__ == "APIKeyAuthenticator"
    assert options["response_signer"] is None and options["sse_max_sessions"] == 64
    with pytest.raises(ValueError, match="needs --ledger"):
        serve_options(["--price", "0.10"])


def test_no_agent_runs_unpaid_and_a_paid_turn_is_settled(served: tuple[str, Any]) -> None:
    url, policy = served
    ledger = policy.ledger
    rich, poor = ledger.issue("0.10", "USD"), ledger.issue("0.01", "USD")
    RUNS.clear()
    key = {"authorization": "Bearer sk-a"}
    assert _ask(url, "no key").status_code == 401
    unpaid = _ask(url, "no token", **key)
    assert unpaid.status_code == 402
    short = _ask(url, "too poor", **key, **{"x-payment": poor})
    assert short.status_code == 402
    assert short.json()["error"]["code"] == "insufficient_balance"
    assert _ask(url, "forged", **key, **{"x-payment": poor[:-4] + "AAAA"}).status_code == 402
    assert RUNS == []  # fail closed: nothing ran for a caller that could not pay
    for n in (1, 2):
        paid = _ask(url, f"paid {n}", **key, **{"x-payment": rich})
        assert paid.status_code == 200, paid.text
        assert paid.json()["choices"][0]["message"]["content"] == f"You said: paid {n}"
    assert ledger.show(rich).account.balance == Decimal("0.00")
    assert _ask(url, "spent", **key, **{"x-payment": rich}).status_code == 402
    assert RUNS == ["paid 1", "paid 2"]
    assert ledger.show(poor).account.balance == Decimal("0.01")  # refused: untouched


# --- the refusal itself: what each protocol answers an unpaid caller, against uamp serve ----------

_SAY = [{"role": "user", "content": "hi"}]
_A2A_MESSAGE = {"role": "ROLE_USER", "messageId": "m1", "parts": [{"text": "hi"}]}
_V1 = {"a2a-version": "1.0"}
#: protocol: (path below the agent, body, headers).
REFUSED: dict[str, tuple[str, dict[str, Any], dict[str, str]]] = {
    "completions": ("/chat/completions", {"model": "demo", "messages": _SAY}, {}),
    "completions stream": (
        "/chat/completions",
        {"model": "demo", "messages": _SAY, "stream": True},
        {},
    ),
    "responses": ("/v1/responses", {"model": "demo", "input": "hi"}, {}),
    "anthropic": (
        "/v1/messages",
        {"model": "demo", "max_tokens": 10, "messages": _SAY},
        {"anthropic-version": "2023-06-01"},
    ),
    "ai sdk": (
        "/ai-sdk",
        {
            "id": "chat",
            "messages": [{"id": "m", "role": "user", "parts": [{"type": "text", "text": "hi"}]}],
            "trigger": "submit-message",
        },
        {},
    ),
    "ag-ui": (
        "/agui",
        {
            "threadId": "t",
            "runId": "r",
            "messages": [{"id": "m", "role": "user", "content": "hi"}],
            "tools": [],
            "context": [],
            "state": {},
            "forwardedProps": {},
        },
        {},
    ),
    "a2a send": (
        "/a2a",
        {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": _A2A_MESSAGE}},
        _V1,
    ),
    "a2a stream": (
        "/a2a",
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendStreamingMessage",
            "params": {"message": _A2A_MESSAGE},
        },
        _V1,
    ),
    "a2a 0.3 stream": (
        "/a2a",
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "message/stream",
            "params": {
                "message": {
                    "role": "user",
                    "messageId": "m1",
                    "kind": "message",
                    "parts": [{"kind": "text", "text": "hi"}],
                }
            },
        },
        {},
    ),
    "a2a rest send": ("/a2a/message:send", {"message": _A2A_MESSAGE}, _V1),
    "a2a rest stream": ("/a2a/message:stream", {"message": _A2A_MESSAGE}, _V1),
    "mcp": (
        "/mcp",
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "demo", "arguments": {"prompt": "hi"}},
        },
        {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-06-18"},
    ),
}
#: Members that differ between two runs of the same exchange.
_VOLATILE = frozenset({"id", "messageId", "taskId", "contextId", "timestamp", "created"})


def _shape(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items() if k not in _VOLATILE}
    if isinstance(value, list):
        return [_shape(v) for v in value]
    return value


def _answer(base: str, protocol: str) -> tuple[int, list[Any]]:
    """The status and the JSON objects (the body, or each SSE ``data``) of the refusal."""
    path, body, headers = REFUSED[protocol]
    with httpx.Client(base_url=f"{base}/agents/demo", timeout=20) as http:
        if protocol == "mcp":
            hello = {"protocolVersion": "2025-06-18", "capabilities": {}}
            hello["clientInfo"] = {"name": "t", "version": "1"}
            opened = http.post(
                path,
                json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello},
                headers=headers,
            )
            headers = {**headers, "mcp-session-id": opened.headers["mcp-session-id"]}
        answer = http.post(path, json=body, headers=headers)
    if answer.headers["content-type"].startswith("text/event-stream"):
        found = [line[6:] for line in answer.text.splitlines() if line.startswith("data: {")]
    else:
        found = [answer.text]
    return answer.status_code, [_shape(orjson.loads(item)) for item in found]


def test_an_unpaid_caller_is_refused_as_uamp_serve_refuses_it(thread_server: Any) -> None:
    """Every HTTP protocol, one table: the same status and body as ``uamp serve``'s."""
    from uamp_proto.payment import TokenPolicy
    from uamp_trio.app import create_app
    from uamp_trio.demo import DemoAgent

    policy = TokenPolicy({"paid"})
    trio_url = thread_server(create_app([DemoAgent()], payment_policy=policy)).url
    config = uamp_asgi.Config(payment_policy=policy)
    differ: dict[str, tuple[Any, Any]] = {}
    with uvicorn_server(uamp_asgi.app(DemoAgent(), config=config)) as asgi_url:
        for protocol in REFUSED:
            expected, got = _answer(trio_url, protocol), _answer(asgi_url, protocol)
            if got != expected:
                differ[protocol] = (expected, got)
            # What the caller can pay with is in it, however the protocol says it.
            said = orjson.dumps(expected[1])
            assert expected[0] in (200, 402) and b"accepts" in said and b"token" in said, protocol
    assert differ == {}
