"""UAMP 6.17 ``rate_limit`` events, as a client written from the spec receives them.

The server tells a client how much of a limit is left once a tenth or less
is (and when it is hit): the sessions of one connection, the server's
connections (``--limit-concurrency``), payment tokens presented per
principal (past it, ``payment.error`` ``rate_limited``). Chat posts per
principal are covered in ``test_chat_abuse.py``.
"""

from __future__ import annotations

import time
from typing import Any

import trio
from trio_websocket import open_websocket_url as open_ws

from tests._support.agents import TestAgent
from tests._support.wire import ask, create_session, recv, send, serving
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.ratelimit import SlidingWindow
from uamp_proto.responder import Emit, TurnRequest
from uamp_trio import App
from uamp_trio.hosting.sessions import SessionLimits
from uamp_trio.transports import uamp_ws
from uamp_trio.trust.ledger import Ledger
from uamp_trio.trust.payments import LedgerPolicy

TIMEOUT = 10


class Word(TestAgent):
    name = "word"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="ok")))


def _app(limits: SessionLimits | None = None, **options: Any) -> App:
    app = App([Word()], **options)
    app.mount(lambda a: uamp_ws.mount(a, uamp_ws.UampWebSocketConfig(limits=limits)))
    return app


async def _quiet(ws: Any) -> list[dict[str, Any]]:
    await send(ws, type="ping", event_id="probe")
    out = []
    while (event := await recv(ws))["type"] != "pong":
        out.append(event)
    return out


async def test_the_last_sessions_of_a_connection_are_announced() -> None:
    async with serving(_app(SessionLimits(max_sessions=3))) as server:
        with trio.fail_after(TIMEOUT):
            async with open_ws(f"ws://127.0.0.1:{server.port}/ws") as ws:
                await create_session(ws)
                assert await _quiet(ws) == []  # two of three left: nothing to say
                second = await create_session(ws)
                warned = await recv(ws)
                assert warned == {
                    **warned,
                    "type": "rate_limit",
                    "session_id": second,
                    "limit": 3,
                    "remaining": 1,
                }
                await create_session(ws)
                assert (await recv(ws))["remaining"] == 0
                await send(ws, type="session.create", uamp_version="1.0", session={})
                assert (await recv(ws))["error"]["code"] == "too_many_sessions"


async def test_a_server_near_its_connection_cap_says_so() -> None:
    async with serving(_app(), max_connections=2) as server:
        with trio.fail_after(TIMEOUT):
            async with open_ws(f"ws://127.0.0.1:{server.port}/ws") as ws:
                sid = await create_session(ws)
                warned = await recv(ws)
                assert (warned["type"], warned["session_id"]) == ("rate_limit", sid)
                assert (warned["limit"], warned["remaining"]) == (2, 1)


async def test_payment_tokens_past_the_rate_are_refused_rate_limited(tmp_path: Any) -> None:
    with Ledger(tmp_path / "ledger.db") as ledger:
        app = _app(payment_policy=LedgerPolicy(ledger, price="0.01"))
        app.payment_attempts = SlidingWindow(3)
        async with serving(app) as server:
            with trio.fail_after(TIMEOUT):
                async with open_ws(f"ws://127.0.0.1:{server.port}/ws") as ws:
                    await create_session(ws)
                    await ask(ws, "hi")
                    assert (await recv(ws))["type"] == "payment.required"
                    seen: list[tuple[Any, ...]] = []
                    for _ in range(4):
                        await send(ws, type="payment.submit", payment={"token": "guess"})
                        while True:
                            event = await recv(ws)
                            if event["type"] == "rate_limit":
                                seen.append(("rate_limit", event["remaining"]))
                                assert event["reset_at"] > time.time()
                                continue
                            seen.append((event["type"], event["code"]))
                            break
                    assert seen == [
                        ("payment.error", "token_invalid"),
                        ("rate_limit", 1),
                        ("payment.error", "token_invalid"),
                        ("rate_limit", 0),
                        ("payment.error", "token_invalid"),
                        ("rate_limit", 0),
                        ("payment.error", "rate_limited"),
                    ]
                    # The response is still held: a real token later still pays.
                    good = ledger.issue("1.00", "USD")
                    app.payment_attempts = SlidingWindow(3)  # the minute has passed
                    await send(ws, type="payment.submit", payment={"token": good})
                    assert (await recv(ws))["type"] == "payment.accepted"
                    assert (await recv(ws))["type"] == "response.created"
