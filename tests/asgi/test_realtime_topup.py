"""Realtime mid-response top-ups (spec 004) under ``uamp_asgi``, checked against ``uamp serve``.

The same client script runs against both servers, each on uamp serve's SQLite
ledger: the agent streams, asks for 0.20 more mid-response, and waits in its
``emit``; a token that cannot cover it is refused (``payment.error``, still
paused, nothing flows), a topped-up one locks the extra amount and the
response goes on; a cancel while paused ends it, charged within its lock.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from decimal import Decimal as D
from pathlib import Path
from typing import Any

import pytest
import trio
from trio_websocket import open_websocket_url as open_ws

import uamp_asgi
from tests._support.asgi import uvicorn_server
from tests._support.wire import recv, send, until
from tests.trio.trust.test_payments import MeteredTopUp, balanced
from uamp_trio.trust.ledger import Ledger
from uamp_trio.trust.payments import LedgerPolicy

TIMEOUT = 20


@pytest.fixture(params=["uamp_asgi", "uamp serve"])
def served(
    request: pytest.FixtureRequest, tmp_path: Path, serve_app: Callable[..., Any]
) -> Callable[..., Any]:
    """``async with served() as (ws_url, ledger)``: the metered agent's Realtime endpoint."""
    kind = request.param

    @asynccontextmanager
    async def serve() -> AsyncIterator[tuple[str, Ledger]]:
        if kind == "uamp_asgi":

            def build() -> tuple[Any, Ledger]:
                # Outside the test's Trio loop: the ledger's worker threads are
                # asked from uvicorn's asyncio loop.
                ledger = Ledger(tmp_path / "ledger.db")
                config = uamp_asgi.Config(payment_policy=LedgerPolicy(ledger))
                return uamp_asgi.app([MeteredTopUp()], config=config), ledger

            app, ledger = await trio.to_thread.run_sync(build)
            with ledger, uvicorn_server(app) as url:
                yield url.replace("http://", "ws://") + "/agents/meter/realtime", ledger
            return
        from uamp_trio import App
        from uamp_trio.transports import realtime

        with Ledger(tmp_path / "ledger.db") as ledger:
            trio_app = App([MeteredTopUp()], payment_policy=LedgerPolicy(ledger))
            trio_app.mount(realtime.mount)
            server = await serve_app(trio_app)
            yield f"ws://127.0.0.1:{server.port}/agents/meter/realtime", ledger

    return serve


async def _paused(ws: Any, token: str) -> list[dict[str, Any]]:
    """Pay for a response, start it, and read up to its top-up's ``payment.required``."""
    await until(ws, "session.created")
    await send(ws, type="payment.submit", payment={"token": token})
    await until(ws, "payment.accepted")
    await send(ws, type="response.create")
    return await until(ws, "payment.required")


async def test_a_top_up_pauses_the_response_then_locks_more(served: Callable[..., Any]) -> None:
    async with served() as (url, ledger):
        token = ledger.issue("0.15", "USD")
        with trio.fail_after(TIMEOUT):
            async with open_ws(url) as ws:
                events = await _paused(ws, token)
                asked = events[-1]
                assert asked["extra"] == {"action": "topup"}
                assert asked["requirements"]["amount"] == "0.20"
                assert asked["response_id"] == events[0]["response"]["id"]
                assert "response.done" not in [e["type"] for e in events]
                assert ledger.show(token).account.locked == D("0.10")
                # 0.05 left cannot pay 0.20: refused with its code, still paused.
                await send(ws, type="payment.submit", payment={"token": token})
                error = await recv(ws)
                assert error["type"] == "payment.error"
                assert error["code"] == "insufficient_balance" and error["can_retry"] is True
                ledger.top_up(token, "0.50")
                await send(ws, type="payment.submit", payment={"token": token})
                accepted = await recv(ws)
                assert accepted["type"] == "payment.accepted" and accepted["amount"] == "0.20"
                rest = await until(ws, "payment.balance")
                deltas = [e["delta"] for e in rest if e["type"] == "response.output_text.delta"]
                assert "".join(deltas) == "second"
                assert "response.done" in [e["type"] for e in rest]
        state = ledger.show(token).account
        # 300 tokens at 1.00/1k: three times the opening lock, so the top-up was locked.
        assert (state.settled, state.locked) == (D("0.30"), 0)
        assert state.balance == D("0.35")
        balanced(ledger)


async def test_a_cancel_while_paused_ends_the_response_within_its_lock(
    served: Callable[..., Any],
) -> None:
    async with served() as (url, ledger):
        token = ledger.issue("1.00", "USD")
        with trio.fail_after(TIMEOUT):
            async with open_ws(url) as ws:
                await _paused(ws, token)
                await send(ws, type="response.cancel")
                rest = await until(ws, "response.done")
                assert rest[-1]["response"]["status"] == "cancelled"
                # Nothing after the pause: the agent never got past its emit.
                said = [e["delta"] for e in rest if e["type"] == "response.output_text.delta"]
                assert "second" not in said
        state = ledger.show(token).account
        assert state.locked == 0 and state.settled <= D("0.10")  # within the opening lock
        balanced(ledger)
