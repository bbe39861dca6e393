"""Payment on uamp_asgi's UAMP WebSocket (UAMP 3.3, 7.2; spec 004), as under ``uamp serve``.

uvicorn serves the ASGI app with uamp serve's SQLite ledger (asked from
worker threads); uamp's own client answers ``payment.required`` with a token
(``on_payment_required``) or pays by hand.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import trio

import uamp_asgi
from tests._support.asgi import uvicorn_server
from uamp_asgi.responders import function_agent
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.payment import PaymentState
from uamp_proto.responder import Emit, TurnRequest
from uamp_trio.asgi_options import serve_options
from uamp_trio.client import connect

TIMEOUT = 30
runs: list[tuple[str, str | None]] = []


async def billed(turn: TurnRequest) -> AsyncIterator[str | ev.Event]:
    """Says back what it was told; every run is recorded with the token that paid it."""
    runs.append((turn.messages[-1].text, turn.payment_token))
    yield f"You said: {turn.messages[-1].text}"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
    ledger = Path(tmp_path_factory.mktemp("ledger")) / "pay.db"
    options = serve_options(["--ledger", str(ledger), "--price", "0.05"])
    app = uamp_asgi.app([function_agent(billed)], config=uamp_asgi.Config(**options))
    with uvicorn_server(app) as url:
        yield url.replace("http://", "ws://"), options["payment_policy"].ledger


async def test_an_unpaid_turn_is_held_and_a_token_runs_it_and_is_charged_once(
    served: tuple[str, Any],
) -> None:
    url, ledger = served
    token = ledger.issue("0.10", "USD")
    asked: list[ev.PaymentRequired] = []

    async def pay(required: ev.PaymentRequired) -> str:
        asked.append(required)
        return token

    runs.clear()
    with trio.fail_after(TIMEOUT):
        async with connect(f"{url}/agents/billed/uamp") as client:
            session = await client.create_session(on_payment_required=pay)
            stream = session.respond("hello")
            seen = [e async for e in stream]
            while not any(p.type == "payment.balance" for p in session.payments):
                await trio.sleep(0.01)  # it follows response.done, as under uamp serve
    types = [e.type for e in seen]
    assert types[:3] == ["payment.required", "payment.accepted", "response.created"], types
    assert types[-1] == "response.done"
    required = seen[0]
    assert isinstance(required, ev.PaymentRequired)
    assert required.requirements.amount == "0.05"
    assert required.requirements.expires_at is not None  # Config.payment_wait away
    assert required.response_id == seen[2].response_id  # the held response is the one run
    assert stream.result is not None and stream.result.text == "You said: hello"
    assert [r.requirements.amount for r in asked] == ["0.05"]
    assert session.payment is not None and session.payment.state is PaymentState.ACCEPTED
    assert runs == [("hello", token)]
    # Charged once: the response's lock, settled; the client is told what is left.
    assert ledger.show(token).account.balance == Decimal("0.05")
    [balance] = [p for p in session.payments if isinstance(p, ev.PaymentBalance)]
    assert balance.session_id == session.id and Decimal(balance.balance) == Decimal("0.05")


async def test_a_bad_token_is_refused_and_nothing_runs_until_a_good_one(
    served: tuple[str, Any],
) -> None:
    url, ledger = served
    good, poor = ledger.issue("0.10", "USD"), ledger.issue("0.01", "USD")
    runs.clear()
    errors: list[str] = []
    with trio.fail_after(TIMEOUT):
        async with connect(f"{url}/ws") as client:
            session = await client.create_session("billed")
            stream = session.respond("hi")
            async for event in stream:
                if event.type == "payment.required":
                    await session.pay(good[:-4] + "AAAA")  # forged
                elif isinstance(event, ev.PaymentErrorEvent):
                    assert event.can_retry
                    errors.append(event.code)
                    assert runs == []  # still held: the agent has not run
                    await session.pay(poor if len(errors) == 1 else good)
    assert errors == ["token_invalid", "insufficient_balance"]
    assert stream.result is not None and stream.result.text == "You said: hi"
    assert runs == [("hi", good)]
    assert ledger.show(poor).account.balance == Decimal("0.01")  # refused: untouched
    assert ledger.show(good).account.balance == Decimal("0.05")


async def test_an_unpaid_caller_runs_nothing_and_can_cancel_the_held_response(
    served: tuple[str, Any],
) -> None:
    url, _ = served
    runs.clear()
    with trio.fail_after(TIMEOUT):
        async with connect(f"{url}/agents/billed/uamp") as client:
            session = await client.create_session()  # no token, no callback
            stream = session.respond("free lunch")
            seen = []
            async for event in stream:
                seen.append(event.type)
                if event.type == "payment.required":
                    await session.cancel()
    assert seen == ["payment.required", "response.cancelled"]
    assert runs == []


async def test_a_held_response_not_paid_by_its_expiry_ends_payment_required(
    tmp_path: Path,
) -> None:
    options = serve_options(["--ledger", str(tmp_path / "pay.db"), "--price", "0.05"])
    config = uamp_asgi.Config(**{**options, "payment_wait": 0.5})
    runs.clear()
    with uvicorn_server(uamp_asgi.app([function_agent(billed)], config=config)) as base:
        with trio.fail_after(TIMEOUT):
            async with connect(base.replace("http://", "ws://") + "/uamp") as client:
                session = await client.create_session()
                seen = [e async for e in session.respond("later")]
    assert [e.type for e in seen] == ["payment.required", "response.error"]
    error = seen[-1]
    assert isinstance(error, ev.ResponseErrorEvent) and error.error.code == "payment_required"
    assert runs == []


class _AsksOnce:
    """Asks the client for one tool result, then answers with it (two rounds, one response)."""

    name = "asks"

    def capabilities(self) -> ty.Capabilities:
        return ty.Capabilities(id=self.name, provider="test", modalities=["text"])

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        runs.append(("round", request.payment_token))
        if request.messages[-1].role != "tool":
            await emit(ev.ToolCall(call_id="call_1", name="lookup", arguments="{}"))
            return
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text=f"got {request.messages[-1].text}")))


async def _client_tool_response(url: str, token: str) -> list[str]:
    with trio.fail_after(TIMEOUT):
        async with connect(url) as client:
            lookup = ty.ToolDefinition(function=ty.FunctionDefinition(name="lookup"))
            session = await client.create_session(
                "asks",
                tools=[lookup],
                on_tool_call=lambda call: "42",
                on_payment_required=lambda required: token,
            )
            stream = session.respond("look it up")
            seen = [e.type async for e in stream]
    assert stream.result is not None and stream.result.text == "got 42", seen
    return seen


@pytest.fixture
def asks_served(tmp_path: Path) -> Iterator[tuple[str, Any]]:
    """The asking agent under uvicorn with a ledger (built outside any running loop)."""
    options = serve_options(["--ledger", str(tmp_path / "pay.db"), "--price", "0.05"])
    app = uamp_asgi.app([_AsksOnce()], config=uamp_asgi.Config(**options))
    with uvicorn_server(app) as base:
        yield base.replace("http://", "ws://") + "/uamp", options["payment_policy"]


def _charged_once(ledger: Any, token: str, seen: list[str]) -> None:
    assert len(runs) == 2  # the agent ran its two rounds
    assert seen.count("response.done") == 1
    state = ledger.show(token).account
    assert (state.settled, state.locked, state.balance) == (Decimal("0.05"), 0, Decimal("0.95"))


async def test_a_response_with_a_client_tool_round_is_charged_once(
    asks_served: tuple[str, Any],
) -> None:
    """Two rounds of the agent (before and after the client's tool result) are one response."""
    url, policy = asks_served
    token = policy.ledger.issue("1.00", "USD")
    runs.clear()
    seen = await _client_tool_response(url, token)
    _charged_once(policy.ledger, token, seen)


async def test_uamp_serve_charges_a_client_tool_round_once_too(
    tmp_path: Path, serve_app: Any
) -> None:
    from uamp_trio.app import create_app

    options = serve_options(["--ledger", str(tmp_path / "pay.db"), "--price", "0.05"])
    policy = options["payment_policy"]
    token = policy.ledger.issue("1.00", "USD")
    runs.clear()
    served = await serve_app(create_app([_AsksOnce()], payment_policy=policy))
    seen = await _client_tool_response(served.url.replace("http://", "ws://") + "/uamp", token)
    _charged_once(policy.ledger, token, seen)
