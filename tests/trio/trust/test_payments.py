"""The ledger behind the payment policy, through real servers on 127.0.0.1.

Each response locks its price before the agent starts and settles what it used
when it ends; every refusal carries its spec 000 section 7.2 code; at every
check settled + locked + balance = issued + top-ups.
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
from uamp_proto.ledger import Pricing
from uamp_proto.responder import Emit, TurnRequest
from uamp_trio.app import create_app
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
    poor = ledger.issue("0.001", "USD")
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
                    assert body["error"] == "Payment required" and body["status_code"] == 402
                    assert body["context"]["accepts"][0]["amount"] == "0.02"
                    assert body["context"]["code"] == code, (token, stream)
            assert (
                await client.post("/v1/chat/completions", json=BODY, headers={"X-PAYMENT": poor})
            ).json()["context"]["balance_current"] == "0.001"
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
