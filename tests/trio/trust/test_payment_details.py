"""Spec 000 section 7.2 and spec 004's payment details, over real sockets on 127.0.0.1.

A client written from the documents reads ``balance_remaining`` on
``payment.accepted``, ``requirements.expires_at`` on ``payment.required``, the
``mandate_revoked`` code for a token withdrawn mid-stream, and tops a token up
with ``POST /api/payments/tokens/{id}/topup`` (the ledger's operator only).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from trio_websocket import open_websocket_url as open_ws

from tests._support.agents import TestAgent
from tests._support.wire import ask, create_session, recv, send, serving, until
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.ledger import Pricing
from uamp_proto.responder import Emit, TurnRequest
from uamp_trio import App
from uamp_trio.hosting.sessions import SessionLimits
from uamp_trio.transports import uamp_ws
from uamp_trio.trust.auth import APIKeyAuthenticator
from uamp_trio.trust.ledger import Ledger
from uamp_trio.trust.payments import LedgerPolicy

TIMEOUT = 10


class Flat(TestAgent):
    """One word, at the server's flat price."""

    name = "flat"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="ok")))


class TopUp(TestAgent):
    """Streams, then asks for a mid-stream top-up (spec 004)."""

    name = "topup"
    pricing = Pricing(per_request="0.01", hold="0.10")

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="first; ")))
        requirements = ty.PaymentRequirements(amount="0.20", currency="USD")
        await emit(ev.PaymentRequired(requirements=requirements, extra={"action": "topup"}))
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="second")))


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    with Ledger(tmp_path / "ledger.db") as book:
        yield book


def _app(ledger: Ledger, limits: SessionLimits | None = None, **policy: Any) -> App:
    app = App([Flat(), TopUp()], payment_policy=LedgerPolicy(ledger, price="0.02", **policy))
    app.mount(lambda a: uamp_ws.mount(a, uamp_ws.UampWebSocketConfig(limits=limits)))
    return app


async def test_accepted_carries_the_balance_and_required_its_expiry(ledger: Ledger) -> None:
    token = ledger.issue("0.10", "USD")
    async with serving(_app(ledger)) as server:
        with trio.fail_after(TIMEOUT):
            async with open_ws(f"ws://127.0.0.1:{server.port}/agents/flat/uamp") as ws:
                await create_session(ws)
                before = time.time()
                await ask(ws, "hi")
                required = await recv(ws)
                assert required["type"] == "payment.required"
                expires_at = required["requirements"]["expires_at"]
                # When the held response stops waiting: the session's payment wait ahead.
                assert before + 590 <= expires_at <= time.time() + 601
                await send(ws, type="payment.submit", payment={"token": token})
                accepted = await recv(ws)
                assert accepted["type"] == "payment.accepted"
                assert accepted["balance_remaining"] == "0.10"  # nothing locked yet
                balance = (await until(ws, "payment.balance"))[-1]
                assert balance["balance_remaining"] == "0.08"


async def test_a_response_nobody_pays_for_ends_when_its_quote_expires(ledger: Ledger) -> None:
    limits = SessionLimits(payment_wait=0.2)
    async with serving(_app(ledger, limits)) as server:
        with trio.fail_after(TIMEOUT):
            async with open_ws(f"ws://127.0.0.1:{server.port}/agents/flat/uamp") as ws:
                await create_session(ws)
                await ask(ws, "hi")
                assert (await recv(ws))["type"] == "payment.required"
                error = await recv(ws)
                assert error["type"] == "response.error"
                assert error["error"]["code"] == "payment_required"
                assert "expires_at" in error["error"]["message"]
    assert ledger.totals()["locked"] == 0


async def test_a_token_revoked_mid_stream_is_a_revoked_mandate(ledger: Ledger) -> None:
    token = ledger.issue("0.15", "USD")
    async with serving(_app(ledger)) as server:
        with trio.fail_after(TIMEOUT):
            async with open_ws(f"ws://127.0.0.1:{server.port}/agents/topup/uamp") as ws:
                await create_session(ws, payment_token=token)
                await ask(ws, "work")
                events = await until(ws, "payment.required")
                assert events[-1]["extra"] == {"action": "topup"}
                ledger.revoke(token)  # the operator withdraws it while the response waits
                await send(ws, type="payment.submit", payment={"token": token})
                error = await recv(ws)
                assert error["type"] == "payment.error"
                assert error["code"] == "mandate_revoked" and error["can_retry"] is True
                rid = events[0]["response_id"]
                await send(ws, type="response.cancel", response_id=rid)
                assert (await until(ws, "response.cancelled"))[-1]["response_id"] == rid
    # A fresh response with the revoked token is refused with the same code.
    async with serving(_app(ledger)) as server:
        with trio.fail_after(TIMEOUT):
            async with open_ws(f"ws://127.0.0.1:{server.port}/agents/flat/uamp") as ws:
                await create_session(ws)
                await ask(ws, "hi")
                assert (await recv(ws))["type"] == "payment.required"
                await send(ws, type="payment.submit", payment={"token": token})
                assert (await recv(ws))["code"] == "mandate_revoked"


async def test_the_operator_tops_a_token_up_over_http(ledger: Ledger) -> None:
    token = ledger.issue("0.10", "USD")
    token_id = ledger.show(token).token_id
    keys = APIKeyAuthenticator([("ops", "key-ops"), ("mallory", "key-m")])
    app = App(
        [Flat()],
        payment_policy=LedgerPolicy(ledger, operators=frozenset({"ops"})),
        authenticator=keys,
    )
    async with serving(app) as server, httpx.AsyncClient(base_url=_base(server)) as http:

        async def top_up(tid: str, key: str | None, body: Any) -> httpx.Response:
            headers = {"authorization": f"Bearer {key}"} if key else {}
            return await http.post(f"/api/payments/tokens/{tid}/topup", json=body, headers=headers)

        with trio.fail_after(TIMEOUT):
            done = await top_up(token_id, "key-ops", {"amount": "0.40"})
            assert done.status_code == 200
            assert done.json()["balance"] == "0.50" and done.json()["topped_up"] == "0.40"
            # Another principal, and an unknown id, answer alike: nothing leaks.
            theirs = await top_up(token_id, "key-m", {"amount": "1"})
            missing = await top_up("no-such-id", "key-ops", {"amount": "1"})
            assert theirs.status_code == missing.status_code == 404
            assert theirs.json() == missing.json()
            assert (await top_up(token_id, None, {"amount": "1"})).status_code == 401
            bad = await top_up(token_id, "key-ops", {"amount": "-1"})
            assert bad.status_code == 400 and bad.json()["error"]["param"] == "amount"
            assert (await top_up(token_id, "key-ops", {"sum": "1"})).status_code == 400
    assert ledger.show(token).account.balance == Decimal("0.50")


async def test_without_operators_nobody_tops_up(ledger: Ledger) -> None:
    token = ledger.issue("0.10", "USD")
    token_id = ledger.show(token).token_id
    app = App([Flat()], payment_policy=LedgerPolicy(ledger))  # loopback, anonymous
    async with serving(app) as server, httpx.AsyncClient(base_url=_base(server)) as http:
        with trio.fail_after(TIMEOUT):
            r = await http.post(f"/api/payments/tokens/{token_id}/topup", json={"amount": "1"})
            assert r.status_code == 404
    assert ledger.show(token).account.balance == Decimal("0.10")


def _base(server: Any) -> str:
    return f"http://127.0.0.1:{server.port}"
