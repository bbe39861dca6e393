"""Payment asked for mid-response on the UAMP WebSocket (spec 004 "Mid-Stream Token Top-Up").

Every test runs twice, against ``uamp serve`` (Trio) and ``uamp_asgi`` under
uvicorn, with uamp serve's SQLite ledger and uamp's own client: the two
servers must answer alike. An agent priced per output token streams, emits
``payment.required`` (or raises ``PaymentRequiredError``) and goes on once
paid; unpaid, the response stops and is charged within its lock.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import trio

import uamp_asgi
from tests._support.asgi import uvicorn_server
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.ledger import Pricing
from uamp_proto.payment import PaymentRequiredError
from uamp_proto.responder import PAID_TOKEN, Emit, Responder, TurnRequest
from uamp_trio.asgi_options import serve_options
from uamp_trio.client import connect

TIMEOUT = 30
TOPUP = ty.PaymentRequirements(
    amount="0.50", currency="USD", schemes=[ty.PaymentScheme(scheme="token", network="uamp")]
)
#: What no payment.required ... payment.accepted pause may let through.
CONTENT = {"response.delta", "response.done", "tool.call", "thinking", "usage.delta"}
#: 1 USD a thousand output tokens; 0.05 locked before the agent starts.
PRICING = Pricing(currency="USD", output_per_1k="1", hold="0.05")


def _delta(text: str) -> ev.ResponseDelta:
    return ev.ResponseDelta(delta=ty.DeltaText(text=text))


def _used(tokens: int) -> ev.UsageDelta:
    return ev.UsageDelta(delta=ty.UsageStats(output_tokens=tokens))


class Meter:
    """40 tokens, a top-up asked through ``emit``, then 160 more (0.20 USD in all).

    ``steps`` is the coroutine's own state: it survives the pause only if
    ``emit`` returns into the same call. The agent runs in uvicorn's thread.
    """

    name = "meter"
    pricing = PRICING

    def __init__(self) -> None:
        self.calls = 0
        self.resumed = threading.Event()
        self.paid_with: str | None = None

    def capabilities(self) -> ty.Capabilities:
        return ty.Capabilities(id=self.name, provider="test", modalities=["text"])

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        self.calls += 1
        steps = ["first half"]
        await emit(_delta("first half; "))
        await emit(_used(40))
        await emit(ev.PaymentRequired(requirements=TOPUP, extra={"action": "topup"}))
        self.resumed.set()
        self.paid_with = request.metadata.get(PAID_TOKEN)
        steps.append("second half")
        await emit(_delta(" then ".join(steps)))
        await emit(_used(160))


class Raiser:
    """Raises PaymentRequiredError(topup) after some output; once (or ``always``)."""

    pricing = PRICING

    def __init__(self, name: str, *, always: bool = False) -> None:
        self.name = name
        self.always = always
        self.requests: list[TurnRequest] = []

    def capabilities(self) -> ty.Capabilities:
        return ty.Capabilities(id=self.name, provider="test", modalities=["text"])

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        self.requests.append(request)
        if len(self.requests) == 1 or self.always:
            await emit(_delta("before "))
            raise PaymentRequiredError(TOPUP, topup=True)
        said = request.messages[-1]  # the conversation so far: the output before the raise
        await emit(_delta(f"after ({said.role}: {said.text!r})"))


Serve = Callable[[list[Responder], float], Any]


@pytest.fixture(params=["uamp_asgi", "uamp serve"])
def served(
    request: pytest.FixtureRequest, tmp_path: Path, serve_app: Callable[..., Awaitable[Any]]
) -> Callable[..., Any]:
    """``async with served(agents, payment_wait) as (ws_base, ledger)``, on either server."""
    kind = request.param

    @asynccontextmanager
    async def serve(agents: list[Any], payment_wait: float = 600.0) -> AsyncIterator[Any]:
        flags = ["--ledger", str(tmp_path / "pay.db"), "--price", "0.05"]
        if kind == "uamp_asgi":

            def build() -> tuple[Any, Any]:
                options = serve_options(flags)
                config = uamp_asgi.Config(**{**options, "payment_wait": payment_wait})
                return uamp_asgi.app(agents, config=config), options["payment_policy"].ledger

            # Built outside the test's Trio loop: the ledger's worker threads are
            # asked from uvicorn's asyncio loop.
            app, ledger = await trio.to_thread.run_sync(build)
            with uvicorn_server(app) as url:
                yield url.replace("http://", "ws://"), ledger
            return
        policy = serve_options(flags)["payment_policy"]
        from uamp_trio.app import App
        from uamp_trio.hosting.sessions import SessionLimits
        from uamp_trio.transports import uamp_ws

        app = App(agents, payment_policy=policy)
        limits = SessionLimits(payment_wait=payment_wait)
        app.mount(lambda host: uamp_ws.mount(host, uamp_ws.UampWebSocketConfig(limits=limits)))
        server = await serve_app(app)
        yield f"ws://127.0.0.1:{server.port}", policy.ledger

    return serve


def _paused_once(types: list[str]) -> None:
    """One top-up pause (payment.required ... payment.accepted), no content inside it."""
    start, end = types.index("payment.required"), types.index("payment.accepted")
    assert start < end, types
    assert not CONTENT & set(types[start:end]), types
    assert types.count("response.created") == 1


async def test_a_paid_top_up_resumes_the_agent_where_it_was_and_is_charged(
    served: Callable[..., Any],
) -> None:
    agent = Meter()
    async with served([agent]) as (base, ledger):
        token = ledger.issue("1.00", "USD")
        asked: list[ev.PaymentRequired] = []

        def pay(required: ev.PaymentRequired) -> str:
            asked.append(required)
            return token

        with trio.fail_after(TIMEOUT):
            async with connect(f"{base}/agents/meter/uamp") as client:
                session = await client.create_session(payment_token=token, on_payment_required=pay)
                stream = session.respond("work")
                seen = [e async for e in stream]
                while not any(isinstance(p, ev.PaymentBalance) for p in session.payments):
                    await trio.sleep(0.01)  # it follows response.done
        types = [e.type for e in seen]
        _paused_once(types)
        [required] = [e for e in seen if isinstance(e, ev.PaymentRequired)]
        assert required.is_topup and required.requirements.amount == "0.50"
        assert required.response_id == stream.response_id
        assert [r.is_topup for r in asked] == [True]
        assert agent.calls == 1  # resumed, not run again
        assert agent.paid_with == token
        whole = "first half; first half then second half"
        assert stream.result is not None and stream.result.text == whole
        # 200 output tokens at 1 USD a thousand: more than the opening lock of
        # 0.05, within it plus the top-up's 0.50.
        account = ledger.show(token).account
        assert (account.settled, account.locked) == (Decimal("0.20"), 0)
        assert account.balance == Decimal("0.80")


async def test_an_unpaid_top_up_stops_the_response_within_its_lock(
    served: Callable[..., Any],
) -> None:
    agent = Meter()
    async with served([agent], 0.5) as (base, ledger):
        token = ledger.issue("1.00", "USD")
        with trio.fail_after(TIMEOUT):
            async with connect(f"{base}/agents/meter/uamp") as client:
                session = await client.create_session(payment_token=token)  # pays nothing more
                stream = session.respond("work")
                seen = [e async for e in stream]
        types = [e.type for e in seen]
        assert types[-2:] == ["payment.required", "response.error"], types
        error = seen[-1]
        assert isinstance(error, ev.ResponseErrorEvent)
        assert error.error.code == "payment_required"
        assert not agent.resumed.is_set()  # the agent never went past its emit
        # Charged what it used before the pause (40 tokens), within the opening lock.
        account = ledger.show(token).account
        assert (account.settled, account.locked) == (Decimal("0.04"), 0)
        assert account.balance == Decimal("0.96")


async def test_cancel_during_a_top_up_returns_the_partial_output(
    served: Callable[..., Any],
) -> None:
    agent = Meter()
    async with served([agent]) as (base, ledger):
        token = ledger.issue("1.00", "USD")
        with trio.fail_after(TIMEOUT):
            async with connect(f"{base}/agents/meter/uamp") as client:
                session = await client.create_session(payment_token=token)
                stream = session.respond("work")
                seen = []
                async for event in stream:
                    seen.append(event)
                    if event.type == "payment.required":
                        await session.cancel()
        cancelled = seen[-1]
        assert isinstance(cancelled, ev.ResponseCancelled), [e.type for e in seen]
        assert [p.text for p in cancelled.partial_output or []] == ["first half; "]
        assert not agent.resumed.is_set()
        assert ledger.show(token).account.settled == Decimal("0.04")


async def test_a_raised_top_up_is_held_then_run_again_on_the_output_so_far(
    served: Callable[..., Any],
) -> None:
    agent = Raiser("raiser")
    async with served([agent]) as (base, ledger):
        token = ledger.issue("1.00", "USD")
        with trio.fail_after(TIMEOUT):
            async with connect(f"{base}/agents/raiser/uamp") as client:
                session = await client.create_session(
                    payment_token=token, on_payment_required=lambda required: token
                )
                stream = session.respond("work")
                seen = [e async for e in stream]
        _paused_once([e.type for e in seen])
        whole = "before after (assistant: 'before ')"
        assert stream.result is not None and stream.result.text == whole
        assert len(agent.requests) == 2
        assert agent.requests[1].response_id == agent.requests[0].response_id


async def test_an_agent_that_keeps_raising_fails_after_three_payments(
    served: Callable[..., Any],
) -> None:
    agent = Raiser("greedy", always=True)
    async with served([agent]) as (base, ledger):
        token = ledger.issue("1.00", "USD")
        with trio.fail_after(TIMEOUT):
            async with connect(f"{base}/agents/greedy/uamp") as client:
                session = await client.create_session(
                    payment_token=token, on_payment_required=lambda required: token
                )
                seen = [e async for e in session.respond("work")]
        types = [e.type for e in seen]
        assert types.count("payment.required") == 3 and types[-1] == "response.error", types
        error = seen[-1]
        assert isinstance(error, ev.ResponseErrorEvent)
        assert error.error.code == "payment_required"
        assert len(agent.requests) == 4
