"""``payment.balance`` (with ``low_balance_warning``) on every transport that can carry it.

Each case spends 0.02 of a 0.05 token through a real server on 127.0.0.1 and
finds the update in that transport's own form: 0.03 left, under five
responses' worth, so the warning is on and one more response is estimated.
The form per transport is documented in docs/security.md ("Payments").
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import trio
from trio_websocket import open_websocket_url as open_ws

from tests._support.agents import TestAgent
from tests._support.rpc import agui_run
from tests._support.wire import CREATE, open_stream, post, send, serving, until
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.responder import Emit, TurnRequest
from uamp_trio.app import create_app
from uamp_trio.trust.ledger import Ledger
from uamp_trio.trust.payments import LedgerPolicy

D = Decimal
EXPECTED = {
    "balance": "0.03",
    "balance_remaining": "0.03",
    "currency": "USD",
    "low_balance_warning": True,
    "estimated_remaining": 1,
    "threshold": "0.10",
}


class Flat(TestAgent):
    """Says one word; costs the server's flat price."""

    name = "flat"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="ok")))


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    with Ledger(tmp_path / "ledger.db") as book:
        yield book


def _sse_data(text: str) -> list[dict[str, Any]]:
    return [orjson.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]


async def _realtime(base: str, token: str) -> dict[str, Any]:
    async with open_ws(base.replace("http", "ws") + "/agents/flat/realtime") as ws:
        await until(ws, "session.created")
        await send(ws, type="payment.submit", payment={"token": token})
        await until(ws, "payment.accepted")
        await send(ws, type="response.create")
        events = await until(ws, "payment.balance")
        assert "response.done" in [e["type"] for e in events]  # the balance comes after it
        balance = events[-1]
        assert balance["event_id"]
        return {k: v for k, v in balance.items() if k not in ("type", "event_id")}


async def _sse_events(base: str, token: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=base) as http:
        created = await post(http, {**CREATE, "payment_token": token}, path="/agents/flat/events")
        sid = created.json()["session_id"]
        async with open_stream(http, sid, "/agents/flat/events/stream") as events:
            await events.until("capabilities")
            await post(http, {"type": "response.create"}, sid, path="/agents/flat/events")
            got = await events.until("payment.balance")
            assert "response.done" in [e["type"] for e in got]
            balance = got[-1]
            assert balance["session_id"] == sid
            return {k: v for k, v in balance.items() if k not in ("type", "session_id", "event_id")}


async def _agui(base: str, token: str) -> dict[str, Any]:
    run = agui_run("hi")
    async with httpx.AsyncClient(base_url=base) as http:
        reply = await http.post("/agents/flat/agui", json=run, headers={"X-PAYMENT": token})
    events = _sse_data(reply.text)
    assert events[-1]["type"] == "RUN_FINISHED"
    [custom] = [e for e in events if e["type"] == "CUSTOM" and e["name"] == "payment.balance"]
    value: dict[str, Any] = custom["value"]
    return value


async def _acp(base: str, token: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=base) as http:
        new = await http.post(
            "/agents/flat/acp",
            json={"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/"}},
        )
        sid = new.json()["result"]["sessionId"]
        prompt = {
            "sessionId": sid,
            "prompt": [{"type": "text", "text": "hi"}],
            "payment_token": token,
        }
        reply = await http.post(
            "/agents/flat/acp",
            json={"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": prompt},
        )
    result = reply.json()["result"]
    assert result["stopReason"] == "end_turn"
    value: dict[str, Any] = result["_meta"]["payment.balance"]
    return value


async def _a2a(base: str, token: str) -> dict[str, Any]:
    message = {"role": "user", "parts": [{"kind": "text", "text": "hi"}], "messageId": "m1"}
    async with httpx.AsyncClient(base_url=base) as http:
        reply = await http.post(
            "/agents/flat/a2a",
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "message/stream",
                "params": {"message": message},
            },
            headers={"X-PAYMENT": token},
        )
    results = [e["result"] for e in _sse_data(reply.text)]
    final = results[-1]
    assert final["kind"] == "status-update" and final["final"] is True
    value: dict[str, Any] = final["metadata"]["payment.balance"]
    return value


_ASK = {"messages": [{"role": "user", "content": "hi"}]}


async def _completions(base: str, token: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=base) as http:
        reply = await http.post(
            "/agents/flat/v1/chat/completions", json=_ASK, headers={"X-PAYMENT": token}
        )
    assert reply.json()["choices"][0]["message"]["content"] == "ok"
    value: dict[str, Any] = orjson.loads(reply.headers["x-uamp-payment-balance"])
    return value


async def _completions_stream(base: str, token: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=base) as http:
        reply = await http.post(
            "/agents/flat/v1/chat/completions",
            json={**_ASK, "stream": True},
            headers={"X-PAYMENT": token},
        )
    # After [DONE], where OpenAI clients stop reading: its own named event.
    done, _, after = reply.text.partition("data: [DONE]\n\n")
    assert done and after.startswith("event: payment.balance\n")
    [value] = _sse_data(after)
    return value


_CLAUDE = {"model": "flat", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
_CLAUDE_HEADERS = {"anthropic-version": "2023-06-01"}


async def _anthropic(base: str, token: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=base) as http:
        reply = await http.post(
            "/agents/flat/v1/messages",
            json=_CLAUDE,
            headers={**_CLAUDE_HEADERS, "X-PAYMENT": token},
        )
    assert reply.json()["content"] == [{"type": "text", "text": "ok"}]
    value: dict[str, Any] = orjson.loads(reply.headers["x-uamp-payment-balance"])
    return value


async def _responses(base: str, token: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=base) as http:
        reply = await http.post(
            "/agents/flat/v1/responses", json={"input": "hi"}, headers={"X-PAYMENT": token}
        )
    assert reply.json()["output"][0]["content"][0]["text"] == "ok"
    value: dict[str, Any] = orjson.loads(reply.headers["x-uamp-payment-balance"])
    return value


async def _anthropic_stream(base: str, token: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=base) as http:
        reply = await http.post(
            "/agents/flat/v1/messages",
            json={**_CLAUDE, "stream": True},
            headers={**_CLAUDE_HEADERS, "X-PAYMENT": token},
        )
    # A member of message_stop, which the anthropic SDK keeps as it is.
    stop = _sse_data(reply.text)[-1]
    assert stop["type"] == "message_stop"
    value: dict[str, Any] = stop["payment_balance"]
    return value


async def _responses_stream(base: str, token: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=base) as http:
        reply = await http.post(
            "/agents/flat/v1/responses",
            json={"input": "hi", "stream": True},
            headers={"X-PAYMENT": token},
        )
    done, _, after = reply.text.partition("data: [DONE]\n\n")
    assert "event: response.completed\n" in done and after.startswith("event: payment.balance\n")
    [value] = _sse_data(after)
    return value


CASES: dict[str, Callable[[str, str], Awaitable[dict[str, Any]]]] = {
    "anthropic": _anthropic,
    "anthropic-stream": _anthropic_stream,
    "completions": _completions,
    "completions-stream": _completions_stream,
    "responses": _responses,
    "responses-stream": _responses_stream,
    "realtime": _realtime,
    "sse-events": _sse_events,
    "agui": _agui,
    "acp": _acp,
    "a2a": _a2a,
}


@pytest.mark.parametrize("transport", list(CASES))
async def test_payment_balance_with_its_warning_on_each_transport(
    ledger: Ledger, transport: str
) -> None:
    token = ledger.issue("0.05", "USD")
    app = create_app([Flat()], payment_policy=LedgerPolicy(ledger, price="0.02"))
    async with serving(app) as server:
        with trio.fail_after(15):
            got = await CASES[transport](f"http://127.0.0.1:{server.port}", token)
    assert got == EXPECTED
    state = ledger.show(token).account
    assert (state.balance, state.locked, state.settled) == (D("0.03"), 0, D("0.02"))
