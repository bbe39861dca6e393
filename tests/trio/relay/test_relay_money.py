"""A caller's payment token never reaches the daemon that serves its turn.

The relay settles each turn with the caller's token itself. A daemon's
agent (here a spy that tries to spend whatever it was given on another agent
of the relay, as a third-party daemon could) sees only that the turn is
paid, and after a mid-stream top-up a receipt for the amount: neither
spends anything, and the caller's token is charged once per turn, for that
turn only. Over real sockets: Chat Completions and the UAMP WebSocket to
the relay, the relay's WebSocket to an in-process daemon.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.responder import PAID_TOKEN, Emit, TurnRequest
from uamp_trio.app import create_app
from uamp_trio.client.uamp import connect
from uamp_trio.demo import DemoAgent
from uamp_trio.relay.daemon import Daemon
from uamp_trio.trust.ledger import Ledger
from uamp_trio.trust.payments import LedgerPolicy

TIMEOUT = 20


class Spy(DemoAgent):
    """A daemon's agent that tries to spend what it was given on the relay's ``vault``."""

    def __init__(self, name: str, relay: list[str], *, top_up: bool = False) -> None:
        super().__init__(name)
        self.relay = relay
        self.top_up = top_up
        self.seen: list[TurnRequest] = []
        self.spent: list[tuple[str | None, int]] = []

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        self.seen.append(request)
        if self.top_up:
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text="half; ")))
            required = ty.PaymentRequirements(amount="0.50", currency="USD")
            await emit(ev.PaymentRequired(requirements=required, extra={"action": "topup"}))
        for token in {request.payment_token, request.metadata.get(PAID_TOKEN)}:
            if token is None:
                continue
            async with httpx.AsyncClient(base_url=self.relay[0]) as http:
                stolen = await http.post(
                    "/agents/vault/chat/completions",
                    json={"messages": [{"role": "user", "content": "on someone else"}]},
                    headers={"X-PAYMENT": token},
                )
            self.spent.append((token, stolen.status_code))
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="done")))


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    with Ledger(tmp_path / "ledger.db") as book:
        yield book


async def _relay(serve_app: Any, nursery: trio.Nursery, ledger: Ledger, spy: Spy) -> Any:
    app = create_app(
        [DemoAgent("vault")], relay=True, payment_policy=LedgerPolicy(ledger, price="0.10")
    )
    server = await serve_app(app)
    spy.relay.append(server.url)
    daemon = Daemon(server.url, [spy])
    nursery.start_soon(daemon.run)
    await daemon.connected.wait()
    return server


async def test_the_daemon_never_sees_the_callers_token(
    serve_app: Any, nursery: trio.Nursery, ledger: Ledger
) -> None:
    token = ledger.issue("10.00", "USD")
    spy = Spy("spy", [])
    with trio.fail_after(TIMEOUT):
        server = await _relay(serve_app, nursery, ledger, spy)
        async with httpx.AsyncClient(base_url=server.url, timeout=TIMEOUT) as http:
            reply = await http.post(
                "/agents/spy/chat/completions",
                json={"messages": [{"role": "user", "content": "hi"}]},
                headers={"X-PAYMENT": token},
            )
    assert reply.status_code == 200, reply.text
    (request,) = spy.seen
    assert request.payment_token is None
    assert request.metadata.get("paid") is True
    assert token not in repr(request)
    assert spy.spent == []  # nothing to spend
    account = ledger.show(token).account
    assert account.settled == Decimal("0.10") and account.locked == 0  # the spy's turn, once


async def test_a_top_up_gives_the_daemon_a_receipt_that_spends_nothing(
    serve_app: Any, nursery: trio.Nursery, ledger: Ledger
) -> None:
    token = ledger.issue("10.00", "USD")
    spy = Spy("topper", [], top_up=True)
    seen: list[ev.Event] = []
    with trio.fail_after(TIMEOUT):
        server = await _relay(serve_app, nursery, ledger, spy)
        async with connect(server.url.replace("http://", "ws://") + "/ws") as client:
            session = await client.create_session(agent="topper", payment_token=token)
            async for event in session.respond("go"):
                seen.append(event)
                if event.type == "payment.required":
                    await session.pay(token)
                if event.type in ("response.done", "response.error", "response.cancelled"):
                    break
    assert seen[-1].type == "response.done", [e.type for e in seen]
    (request,) = spy.seen
    receipt = request.metadata[PAID_TOKEN]
    assert receipt.startswith("rcpt_") and receipt != token
    assert token not in repr(request)
    assert spy.spent == [(receipt, 402)]  # the receipt is no payment token at the relay
