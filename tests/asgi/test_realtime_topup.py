"""Realtime's mid-response top-up (spec 004) on both servers, one connection core.

The same scenario against ``uamp serve`` and ``uamp_asgi`` under uvicorn, with
uamp serve's SQLite ledger: the response pauses on ``payment.required``
(``extra.action: "topup"``) with nothing flowing, a refused submit keeps it
paused, a paid one locks the extra amount and the response goes on; the
ledger settles what was used.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
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
from tests.trio.trust.test_payments import MeteredTopUp
from uamp_trio.asgi_options import serve_options


@pytest.fixture(params=["uamp_asgi", "uamp serve"])
def served(
    request: pytest.FixtureRequest, tmp_path: Path, serve_app: Callable[..., Awaitable[Any]]
) -> Callable[..., Any]:
    """``async with served(agent) as (ws_base, ledger)``: its Realtime endpoint on either server."""
    kind = request.param

    @asynccontextmanager
    async def serve(agent: Any) -> AsyncIterator[Any]:
        flags = ["--ledger", str(tmp_path / "pay.db")]
        if kind == "uamp_asgi":

            def build() -> tuple[Any, Any]:
                options = serve_options(flags)
                config = uamp_asgi.Config(**{**options, "transports": ("realtime",)})
                return uamp_asgi.app([agent], config=config), options["payment_policy"].ledger

            # Built outside the test's Trio loop: the ledger's worker threads are
            # asked from uvicorn's asyncio loop.
            app, ledger = await trio.to_thread.run_sync(build)
            with uvicorn_server(app) as url:
                yield url.replace("http://", "ws://"), ledger
            return
        from uamp_trio.app import App
        from uamp_trio.transports import realtime

        policy = serve_options(flags)["payment_policy"]
        app = App([agent], payment_policy=policy)
        app.mount(realtime.mount)
        server = await serve_app(app)
        yield f"ws://127.0.0.1:{server.port}", policy.ledger

    return serve


async def test_a_top_up_pauses_the_response_until_a_token_locks_more(served: Any) -> None:
    async with served(MeteredTopUp()) as (base, ledger):
        token = await trio.to_thread.run_sync(ledger.issue, "0.15", "USD")
        with trio.fail_after(20):
            async with open_ws(f"{base}/agents/meter/realtime") as ws:
                await until(ws, "session.created")
                await send(ws, type="payment.submit", payment={"token": token})
                await until(ws, "payment.accepted")
                await send(ws, type="response.create")
                events = await until(ws, "payment.required")
                asked = events[-1]
                assert asked["extra"] == {"action": "topup"}
                assert asked["requirements"]["amount"] == "0.20"
                assert asked["response_id"] == events[0]["response"]["id"]
                assert "response.done" not in [e["type"] for e in events]
                # 0.05 left cannot pay 0.20: refused with its code, still paused.
                await send(ws, type="payment.submit", payment={"token": token})
                error = await recv(ws)
                assert error["type"] == "payment.error"
                assert error["code"] == "insufficient_balance" and error["can_retry"] is True
                await trio.to_thread.run_sync(ledger.top_up, token, "0.50")
                await send(ws, type="payment.submit", payment={"token": token})
                accepted = await recv(ws)
                assert accepted["type"] == "payment.accepted" and accepted["amount"] == "0.20"
                rest = await until(ws, "payment.balance")
                deltas = [e["delta"] for e in rest if e["type"] == "response.output_text.delta"]
                assert "".join(deltas) == "second"
                assert "response.done" in [e["type"] for e in rest]
    state = (await trio.to_thread.run_sync(ledger.show, token)).account
    assert (state.settled, state.locked) == (D("0.30"), 0)  # 300 tokens at 1.00/1k
    assert state.balance == D("0.35")


async def test_a_cancel_ends_the_wait_for_a_top_up(served: Any) -> None:
    async with served(MeteredTopUp()) as (base, ledger):
        token = await trio.to_thread.run_sync(ledger.issue, "0.15", "USD")
        with trio.fail_after(20):
            async with open_ws(f"{base}/agents/meter/realtime") as ws:
                await until(ws, "session.created")
                await send(ws, type="payment.submit", payment={"token": token})
                await until(ws, "payment.accepted")
                await send(ws, type="response.create")
                await until(ws, "payment.required")
                await send(ws, type="response.cancel")
                done = (await until(ws, "response.done"))[-1]
                assert done["response"]["status"] == "cancelled"
    state = (await trio.to_thread.run_sync(ledger.show, token)).account
    assert state.locked == 0  # nothing stays locked once the response ended
    assert state.settled <= D("0.10")  # at most the hold it started with
