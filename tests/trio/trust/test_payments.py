"""The ledger behind the payment policy, through real servers on 127.0.0.1.

Each response locks its price before the agent starts and settles what it used
when it ends; every refusal carries its spec 000 section 7.2 code; at every
check settled + locked + balance = issued + top-ups.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import trio
from trio_websocket import open_websocket_url as open_ws

from tests._support.agents import TestAgent, Words
from tests._support.paying import mid_response, start_server
from tests._support.rpc import agui_run
from tests._support.wire import ask, create_session, recv, send, serving, texts, until
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.ledger import Pricing
from uamp_proto.responder import Emit, TurnRequest
from uamp_trio import App
from uamp_trio.app import create_app
from uamp_trio.transports import a2a as a2a_transport
from uamp_trio.transports import realtime as realtime_transport
from uamp_trio.transports import uamp_ws
from uamp_trio.trust.ledger import Ledger
from uamp_trio.trust.payments import LedgerPolicy

D = Decimal
BODY: dict[str, Any] = {"messages": [{"role": "user", "content": "pay me"}]}


class Metered:
    """Answers with usage: 1000 input tokens (400 of them cached), 500 output tokens."""

    name = "metered"
    pricing = Pricing(
        per_request="0.01",
        input_per_1k="0.10",
        output_per_1k="0.20",
        cache_read_per_1k="0.05",
        hold="1.00",
    )

    def capabilities(self) -> ty.Capabilities:
        return ty.Capabilities(id="metered", provider="test", modalities=["text"])

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="counted")))
        usage = ty.UsageStats(input_tokens=1000, cached_tokens=400, output_tokens=500)
        await emit(ev.UsageDelta(delta=usage))


class Flat:
    """Says one word; priced by the server's flat --price."""

    name = "flat"

    def capabilities(self) -> ty.Capabilities:
        return ty.Capabilities(id="flat", provider="test", modalities=["text"])

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="ok")))


class Failing:
    """Fails before emitting anything: owes nothing."""

    name = "failing"

    def capabilities(self) -> ty.Capabilities:
        return ty.Capabilities(id="failing", provider="test", modalities=["text"])

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        raise RuntimeError("boom")


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    with Ledger(tmp_path / "ledger.db") as book:
        yield book


def balanced(ledger: Ledger) -> dict[str, Decimal]:
    t = ledger.totals()
    assert t["settled"] + t["locked"] + t["balance"] == t["issued"] + t["topped_up"]
    return t


def test_pricing_cost_follows_section_8_7() -> None:
    usage = ty.UsageStats(input_tokens=1000, cached_tokens=400, output_tokens=500)
    # 0.01 + 600 * 0.10/1k + 400 * 0.05/1k + 500 * 0.20/1k
    assert Metered.pricing.cost(usage) == D("0.01") + D("0.06") + D("0.02") + D("0.10")
    # No cache rate: cached tokens cost input tokens.
    plain = Pricing(input_per_1k="0.10")
    assert plain.cost(usage) == D("0.10")
    # Anthropic's convention: input_tokens excludes the cached ones.
    anthropic = Pricing(input_per_1k="0.10", cache_read_per_1k="0.01", input_includes_cached=False)
    assert anthropic.cost(usage) == D("0.10") + D("0.004")
    # A response that never ran owes no fee.
    assert Pricing.flat("0.05").cost(None, used=False) == 0
    assert Pricing.flat("0.05").hold_amount() == D("0.05")


async def test_completions_402_before_any_stream_with_the_section_7_2_code(
    serve_app: Any, ledger: Ledger
) -> None:
    rich = ledger.issue("1.00", "USD")
    poor = ledger.issue("0.01", "USD")
    expired = ledger.issue("1.00", "USD", expires_in=-1)
    euros = ledger.issue("1.00", "EUR")
    app = create_app([Flat()], payment_policy=LedgerPolicy(ledger, price="0.02"))
    server = await serve_app(app)
    cases = [
        (None, "payment_required"),
        ("garbage", "token_invalid"),
        (rich[:-3] + "AAA", "token_invalid"),
        (poor, "insufficient_balance"),
        (expired, "token_expired"),
        (euros, "token_invalid"),
    ]
    with trio.fail_after(10):
        async with httpx.AsyncClient(base_url=server.url) as client:
            for token, code in cases:
                for stream in (False, True):
                    headers = {"X-PAYMENT": token} if token else {}
                    refused = await client.post(
                        "/v1/chat/completions", json={**BODY, "stream": stream}, headers=headers
                    )
                    assert refused.status_code == 402, (token, stream)
                    assert refused.headers["content-type"].startswith("application/json")
                    body = refused.json()
                    assert body["error"]["type"] == "payment_required"
                    assert body["error"]["accepts"][0]["amount"] == "0.02"
                    assert body["error"]["code"] == code, (token, stream)
            assert (
                await client.post("/v1/chat/completions", json=BODY, headers={"X-PAYMENT": poor})
            ).json()["error"]["balance_current"] == "0.01"
            for stream in (False, True):
                paid = await client.post(
                    "/v1/chat/completions",
                    json={**BODY, "stream": stream},
                    headers={"X-PAYMENT": rich},
                )
                assert paid.status_code == 200
    state = ledger.show(rich).account
    assert (state.balance, state.locked, state.settled) == (D("0.96"), 0, D("0.04"))
    balanced(ledger)


async def test_per_token_pricing_settles_the_usage_and_frees_the_rest(
    serve_app: Any, ledger: Ledger
) -> None:
    token = ledger.issue("5.00", "USD")
    app = create_app([Metered(), Failing()], payment_policy=LedgerPolicy(ledger, price="0.02"))
    server = await serve_app(app)
    with trio.fail_after(10):
        async with httpx.AsyncClient(base_url=server.url) as client:
            headers = {"X-PAYMENT": token}
            paid = await client.post("/agents/metered/chat/completions", json=BODY, headers=headers)
            assert paid.status_code == 200
            failed = await client.post(
                "/agents/failing/chat/completions", json=BODY, headers=headers
            )
            assert failed.status_code == 500
    state = ledger.show(token).account
    assert state.settled == D("0.19") and state.locked == 0
    assert state.balance == D("4.81")
    balanced(ledger)


# --- UAMP WebSocket ------------------------------------------------------------------


#: Two words with a pause between: responses of many sessions overlap.
PACED = Words("paced", "one ", "two", pause=0.05)


class MeteredTopUp(TestAgent):
    """Streams, asks for a top-up mid-response (spec 004), then reports 300 output tokens."""

    name = "meter"
    pricing = Pricing(output_per_1k="1.00", hold="0.10")

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="first; ")))
        requirements = ty.PaymentRequirements(amount="0.20", currency="USD")
        await emit(ev.PaymentRequired(requirements=requirements, extra={"action": "topup"}))
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="second")))
        await emit(ev.UsageDelta(delta=ty.UsageStats(output_tokens=300)))


def uamp_app(agents: list[Any], ledger: Ledger, price: str = "0.02") -> App:
    app = App(agents, payment_policy=LedgerPolicy(ledger, price=price))
    app.mount(uamp_ws.mount)
    return app


async def test_uamp_submit_twice_charges_once_and_the_balance_follows(ledger: Ledger) -> None:
    token = ledger.issue("0.10", "USD")
    async with serving(uamp_app([PACED], ledger)) as server:
        url = f"ws://127.0.0.1:{server.port}/agents/paced/uamp"
        with trio.fail_after(10):
            async with open_ws(url) as ws:
                await create_session(ws)
                await ask(ws, "hi")
                required = await recv(ws)
                assert required["type"] == "payment.required"
                assert required["requirements"]["amount"] == "0.02"
                submit = {"scheme": "token", "token": token}
                await send(ws, type="payment.submit", payment=submit)
                await send(ws, type="payment.submit", payment=submit)
                events = await until(ws, "payment.balance")
                types = [e["type"] for e in events]
                assert types.count("response.done") == 1
                assert types.index("response.done") < types.index("payment.balance")
                balance = events[-1]
                assert balance["balance"] == "0.08" and balance["currency"] == "USD"
                assert balance["low_balance_warning"] is True  # under 5 responses left
                assert balance["estimated_remaining"] == 4
                # A bad token is refused with its 7.2 code; the session goes on.
                await send(ws, type="session.update", payment_token="tok_bad")
                assert (await recv(ws))["type"] == "session.updated"
                await ask(ws, "again")
                assert (await recv(ws))["type"] == "payment.required"
                await send(ws, type="payment.submit", payment={"token": "tok_bad"})
                error = await recv(ws)
                assert error["type"] == "payment.error" and error["code"] == "token_invalid"
                await send(ws, type="payment.submit", payment=submit)
                assert (await recv(ws))["type"] == "payment.accepted"
                await until(ws, "payment.balance")
    state = ledger.show(token).account
    assert (state.settled, state.locked, state.balance) == (D("0.04"), 0, D("0.06"))
    balanced(ledger)


async def test_uamp_mid_stream_top_up_locks_more_and_settles_the_usage(ledger: Ledger) -> None:
    token = ledger.issue("0.15", "USD")
    async with serving(uamp_app([MeteredTopUp()], ledger)) as server:
        url = f"ws://127.0.0.1:{server.port}/agents/meter/uamp"
        with trio.fail_after(10):
            async with open_ws(url) as ws:
                await create_session(ws, payment_token=token)
                await ask(ws, "work")
                events = await until(ws, "payment.required")
                assert events[-1]["extra"] == {"action": "topup"}
                assert ledger.show(token).account.locked == D("0.10")
                # 0.05 left cannot pay: refused with its code, the response stays paused.
                await send(ws, type="payment.submit", payment={"token": token})
                error = await recv(ws)
                assert error["type"] == "payment.error"
                assert error["code"] == "insufficient_balance" and error["can_retry"] is True
                assert error["balance_current"] == "0.05"
                ledger.top_up(token, "0.50")
                await send(ws, type="payment.submit", payment={"token": token})
                events = await until(ws, "payment.balance")
                assert texts(events) == "second"
    state = ledger.show(token).account
    assert (state.settled, state.locked) == (D("0.30"), 0)  # 300 tokens at 1.00/1k
    assert state.balance == D("0.35")
    balanced(ledger)


async def test_a_hundred_sessions_spending_one_token_never_drive_it_below_zero(
    ledger: Ledger, tmp_path: Path
) -> None:
    token = ledger.issue("1.00", "USD")  # pays 50 responses at 0.02
    outcomes: list[str] = []
    checks = 0
    with Ledger(tmp_path / "ledger.db") as watcher:
        async with serving(uamp_app([PACED], ledger)) as server:
            url = f"ws://127.0.0.1:{server.port}/agents/paced/uamp"

            async def spend() -> None:
                async with open_ws(url) as ws:
                    await create_session(ws, payment_token=token)
                    await ask(ws, "hi")
                    while True:
                        event = await recv(ws)
                        if event["type"] in ("response.done", "payment.required"):
                            outcomes.append(event["type"])
                            return

            async def watch() -> None:
                nonlocal checks
                while True:
                    t = balanced(watcher)
                    assert t["balance"] >= 0 and t["locked"] >= 0
                    checks += 1
                    await trio.sleep(0.005)

            with trio.fail_after(60):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(watch)
                    async with trio.open_nursery() as spenders:
                        for _ in range(100):
                            spenders.start_soon(spend)
                    nursery.cancel_scope.cancel()
    state = ledger.show(token).account
    assert outcomes.count("response.done") == 50
    assert outcomes.count("payment.required") == 50
    assert (state.balance, state.locked, state.settled) == (0, 0, D("1.00"))
    assert checks > 0
    balanced(ledger)


# --- A2A -----------------------------------------------------------------------------


class AsksOnce(TestAgent):
    """Asks the client for one tool result, then answers with it."""

    name = "asks"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        if request.messages[-1].role != "tool":
            await emit(ev.ToolCall(call_id="call_1", name="lookup", arguments="{}"))
            return
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="thanks")))


async def test_a2a_resumed_task_is_charged_like_a_new_one(serve_app: Any, ledger: Ledger) -> None:
    token = ledger.issue("1.00", "USD")
    agent = AsksOnce()
    app = create_app(
        [agent], transports=[a2a_transport.mount], payment_policy=LedgerPolicy(ledger, price="0.02")
    )
    server = await serve_app(app)

    def send_message(text: str, rid: int, **extra: Any) -> dict[str, Any]:
        message = {
            "role": "user",
            "parts": [{"kind": "text", "text": text}],
            "messageId": f"m{rid}",
            **extra,
        }
        return {
            "jsonrpc": "2.0",
            "id": rid,
            "method": "message/send",
            "params": {"message": message},
        }

    with trio.fail_after(10):
        async with httpx.AsyncClient(base_url=server.url) as http:
            first = await http.post(
                "/a2a", json=send_message("go", 1), headers={"X-PAYMENT": token}
            )
            task = first.json()["result"]
            assert task["status"]["state"] == "input-required"
            resume = send_message("42", 2, taskId=task["id"], contextId=task["contextId"])
            unpaid = (await http.post("/a2a", json=resume)).json()
            assert unpaid["error"]["code"] == -32402
            assert unpaid["error"]["data"]["code"] == "payment_required"
            got = (
                await http.post(
                    "/a2a",
                    json={
                        "jsonrpc": "2.0",
                        "id": 3,
                        "method": "tasks/get",
                        "params": {"id": task["id"]},
                    },
                )
            ).json()
            assert got["result"]["status"]["state"] == "input-required"  # untouched
            paid = (await http.post("/a2a", json=resume, headers={"X-PAYMENT": token})).json()
            assert paid["result"]["status"]["state"] == "completed"
    state = ledger.show(token).account
    assert (state.settled, state.locked) == (D("0.04"), 0)
    balanced(ledger)


# --- kill -9 mid-response, then a restart on the same ledger -------------------------


def test_kill_9_mid_response_then_restart_leaves_no_lock_and_loses_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ledger.db"
    with Ledger(path) as book:
        token = book.issue("1.00", "USD")
    proc, url = start_server(path)
    try:
        body = {**BODY, "stream": True}
        with mid_response(url, token, body):  # the agent is mid-response: its lock is held
            with Ledger(path) as book:
                held = book.show(token).account
                assert held.locked == D("0.25") and held.balance == D("0.75")
                balanced(book)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    with Ledger(path) as book:
        assert book.show(token).account.locked == D("0.25")  # left by the dead process
    proc, url = start_server(path)
    try:
        with Ledger(path) as book:
            state = book.show(token).account
            assert (state.locked, state.balance, state.settled) == (0, D("1.00"), 0)
            balanced(book)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=15)


# --- Realtime ------------------------------------------------------------------------


async def test_realtime_holds_then_charges_the_submitted_token(ledger: Ledger) -> None:
    token = ledger.issue("1.00", "USD")
    app = App([Flat()], payment_policy=LedgerPolicy(ledger, price="0.02"))
    app.mount(realtime_transport.mount)
    async with serving(app) as server:
        url = f"ws://127.0.0.1:{server.port}/agents/flat/realtime"
        with trio.fail_after(10):
            async with open_ws(url) as ws:
                assert (await recv(ws))["type"] == "session.created"
                await send(ws, type="response.create")
                required = await until(ws, "payment.required")
                assert required[-1]["requirements"]["amount"] == "0.02"
                await send(ws, type="payment.submit", payment={"token": "tok_bad"})
                error = await until(ws, "payment.error")
                assert error[-1]["code"] == "token_invalid"
                await send(ws, type="payment.submit", payment={"token": token})
                await until(ws, "payment.accepted")
                await until(ws, "response.done")
    state = ledger.show(token).account
    assert (state.settled, state.locked) == (D("0.02"), 0)
    balanced(ledger)


async def test_agui_locks_before_the_run_and_settles_when_it_ends(
    serve_app: Any, ledger: Ledger
) -> None:
    token = ledger.issue("0.05", "USD")
    app = create_app([Flat()], payment_policy=LedgerPolicy(ledger, price="0.02"))
    server = await serve_app(app)
    run = agui_run("pay me")

    def kinds(text: str) -> list[dict[str, Any]]:
        lines = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
        return [orjson.loads(line) for line in lines]

    with trio.fail_after(10):
        async with httpx.AsyncClient(base_url=server.url) as client:
            for headers, code in (
                ({}, "payment_required"),
                ({"X-PAYMENT": "junk"}, "token_invalid"),
            ):
                refused = kinds((await client.post("/agui", json=run, headers=headers)).text)
                error = [e for e in refused if e["type"] == "RUN_ERROR"]
                assert error and error[0]["code"] == code
                assert not any(e["type"] == "TEXT_MESSAGE_CONTENT" for e in refused)
            for _ in range(2):
                paid = kinds(
                    (await client.post("/agui", json=run, headers={"X-PAYMENT": token})).text
                )
                assert paid[-1]["type"] == "RUN_FINISHED"
            broke = kinds((await client.post("/agui", json=run, headers={"X-PAYMENT": token})).text)
            assert [e["code"] for e in broke if e["type"] == "RUN_ERROR"] == [
                "insufficient_balance"
            ]
    state = ledger.show(token).account
    assert (state.balance, state.locked, state.settled) == (D("0.01"), 0, D("0.04"))
    balanced(ledger)


# The Realtime mid-response top-up runs against uamp serve and uamp_asgi alike:
# tests/asgi/test_realtime_topup.py (MeteredTopUp above).
