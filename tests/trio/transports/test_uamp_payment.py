"""Payment on the UAMP WebSocket and HTTP+SSE (UAMP 3.3, 7.2; spec 004).

A real server on 127.0.0.1; raw clients (trio-websocket, httpx) see the
exact event sequences, the project's client checks the callback path.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import httpx
import trio
from trio_websocket import WebSocketConnection
from trio_websocket import open_websocket_url as open_ws

from tests._support import wire
from tests._support.agents import Recording, TestAgent
from tests._support.wire import (
    CREATE,
    ask,
    create_session,
    open_stream,
    post,
    recv,
    send,
    texts,
    until,
)
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.payment import PaymentRequiredError, PaymentState, TokenPolicy
from uamp_proto.responder import Emit, Responder, TurnRequest
from uamp_trio import App, Server
from uamp_trio.client import connect, connect_sse
from uamp_trio.transports import sse_events, uamp_ws

TIMEOUT = 15
GOOD = "tok_ok"
TOPUP = ty.PaymentRequirements(
    amount="0.50", currency="USD", schemes=[ty.PaymentScheme(scheme="token", network="uamp")]
)
CONTENT = {"response.delta", "response.done", "tool.call", "thinking"}


def delta(text: str) -> ev.ResponseDelta:
    return ev.ResponseDelta(delta=ty.DeltaText(text=text))


class Echo(Recording):
    """Answers with the payment token it was given; records its requests."""

    name = "echo"

    async def answer(self, request: TurnRequest, emit: Emit) -> None:
        await emit(delta(f"paid with {request.payment_token}"))


class TopUp(TestAgent):
    """Streams a first half, asks for a top-up through ``emit``, streams the second half.

    ``steps`` is local state of the coroutine: it survives the pause only if
    ``emit`` returns into the same call.
    """

    name = "topup"

    def __init__(self) -> None:
        self.calls = 0
        self.resumed = trio.Event()

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        self.calls += 1
        steps = ["first half"]
        await emit(delta("first half; "))
        await emit(ev.PaymentRequired(requirements=TOPUP, extra={"action": "topup"}))
        self.resumed.set()
        steps.append("second half")
        await emit(delta(" then ".join(steps)))


class RaisingTopUp(Recording):
    """Raises PaymentRequiredError(topup=True) once, after some output; the retry finishes."""

    name = "raiser"

    def __init__(self, always: bool = False) -> None:
        super().__init__()
        self.always = always

    async def answer(self, request: TurnRequest, emit: Emit) -> None:
        if len(self.requests) == 1 or self.always:
            await emit(delta("before "))
            raise PaymentRequiredError(TOPUP, topup=True)
        # The retry sees the conversation so far, the paused output included.
        said = request.messages[-1]
        await emit(delta(f"after ({said.role}: {said.text!r})"))


def app_for(agents: list[Responder], policy: TokenPolicy | None) -> App:
    app = App(agents, payment_policy=policy)
    app.mount(uamp_ws.mount, sse_events.mount)
    return app


def serving(
    agents: list[Responder], policy: TokenPolicy | None
) -> AbstractAsyncContextManager[Server]:
    return wire.serving(app_for(agents, policy))


@asynccontextmanager
async def session_ws(
    agents: list[Responder], policy: TokenPolicy | None, agent: str, **create: Any
) -> AsyncIterator[WebSocketConnection]:
    """A server for ``agents`` under ``policy``, and a UAMP session with ``agent`` on it."""
    async with serving(agents, policy) as server, open_ws(ws_url(server, agent)) as ws:
        await create_session(ws, **create)
        yield ws


@asynccontextmanager
async def sse_http(agents: list[Responder]) -> AsyncIterator[httpx.AsyncClient]:
    """A server for ``agents`` that accepts the token ``GOOD``, and an HTTP client of it."""
    async with (
        serving(agents, TokenPolicy({GOOD})) as server,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as http,
    ):
        yield http


def ws_url(server: Server, agent: str) -> str:
    return f"ws://127.0.0.1:{server.port}/agents/{agent}/uamp"


async def quiet(ws: WebSocketConnection, seconds: float = 0.2) -> None:
    """Assert that nothing arrives for ``seconds``."""
    with trio.move_on_after(seconds):
        got = await recv(ws)
        raise AssertionError(f"expected silence, got {got}")


def done_text(done: dict[str, Any]) -> str:
    return "".join(item["text"] for item in done["response"]["output"] if item["type"] == "text")


# --- pre-flight ---------------------------------------------------------------------


async def test_preflight_holds_the_response_until_payment_is_accepted() -> None:
    agent = Echo()
    with trio.fail_after(TIMEOUT):
        async with session_ws([agent], TokenPolicy({GOOD}, amount="0.02"), "echo") as ws:
            await ask(ws, "hi")
            required = await recv(ws)
            assert required["type"] == "payment.required"
            assert required["requirements"]["amount"] == "0.02"
            assert required["response_id"].startswith("resp")
            await quiet(ws)  # held: no response.created, the agent did not run
            assert agent.requests == []
            await send(ws, type="payment.submit", payment={"scheme": "token", "token": GOOD})
            accepted = await recv(ws)
            assert accepted["type"] == "payment.accepted" and accepted["payment_id"]
            assert accepted["amount"] == "0.02"
            rest = await until(ws, "response.done")
            assert rest[0]["type"] == "response.created"
            assert rest[0]["response_id"] == required["response_id"]
            assert texts(rest) == f"paid with {GOOD}"
            assert [r.payment_token for r in agent.requests] == [GOOD]
            # Paid once with a token the policy accepts: the next turn runs at once.
            await ask(ws, "again")
            again = await until(ws, "response.done")
            assert again[0]["type"] == "response.created"
            assert not [e for e in again if e["type"].startswith("payment.")]


async def test_wrong_token_gets_payment_error_then_the_right_one_runs_the_response() -> None:
    agent = Echo()
    with trio.fail_after(TIMEOUT):
        # A bad token preloaded in session.create does not pay either.
        async with session_ws(
            [agent], TokenPolicy({GOOD}), "echo", payment_token="tok_stale"
        ) as ws:
            await ask(ws, "hi")
            assert (await recv(ws))["type"] == "payment.required"
            await send(ws, type="payment.submit", payment={"token": "tok_bad"})
            error = await recv(ws)
            assert error["type"] == "payment.error"
            assert error["code"] == "token_invalid" and error["can_retry"] is True
            await quiet(ws)
            assert agent.requests == []
            # session.update carrying payment_token answers the payment.required too.
            await send(ws, type="session.update", payment_token=GOOD)
            assert (await recv(ws))["type"] == "session.updated"
            assert (await recv(ws))["type"] == "payment.accepted"
            events = await until(ws, "response.done")
            assert texts(events) == f"paid with {GOOD}"


async def test_a_preloaded_token_pays_without_any_payment_event() -> None:
    with trio.fail_after(TIMEOUT):
        async with session_ws([Echo()], TokenPolicy({GOOD}), "echo") as ws:
            # input.text may carry the token for the response it starts.
            await ask(ws, "hi", payment_token=GOOD)
            events = await until(ws, "response.done")
            assert [e["type"] for e in events] == [
                "response.created",
                "response.delta",
                "response.done",
            ]
            assert texts(events) == f"paid with {GOOD}"


async def test_cancel_while_held_ends_the_response_without_running_the_agent() -> None:
    agent = Echo()
    with trio.fail_after(TIMEOUT):
        async with session_ws([agent], TokenPolicy({GOOD}), "echo") as ws:
            await ask(ws, "hi")
            required = await recv(ws)
            assert required["type"] == "payment.required"
            await send(ws, type="response.cancel")
            cancelled = await recv(ws)
            assert cancelled["type"] == "response.cancelled"
            assert cancelled["response_id"] == required["response_id"]
            assert agent.requests == []
            # The open payment.required is still open: a bad token on the
            # next response is refused and that response is held again ...
            await send(ws, type="input.text", text="now", payment_token="tok_bad")
            assert (await recv(ws))["type"] == "payment.error"
            await send(ws, type="response.create")
            again = await recv(ws)
            assert again["type"] == "payment.required"
            assert again["response_id"] != required["response_id"]
            await send(ws, type="payment.submit", payment={"token": GOOD})
            assert (await recv(ws))["type"] == "payment.accepted"
            assert texts(await until(ws, "response.done")) == f"paid with {GOOD}"
            assert len(agent.requests) == 1


async def test_a_token_in_input_text_settles_an_open_payment_required() -> None:
    agent = Echo()
    with trio.fail_after(TIMEOUT):
        async with session_ws([agent], TokenPolicy({GOOD}), "echo") as ws:
            await ask(ws, "hi")
            assert (await recv(ws))["type"] == "payment.required"
            await send(ws, type="response.cancel")
            assert (await recv(ws))["type"] == "response.cancelled"
            # The token rides on the next input (UAMP 5.6) and settles it.
            await send(ws, type="input.text", text="now", payment_token=GOOD)
            assert (await recv(ws))["type"] == "payment.accepted"
            await send(ws, type="response.create")
            events = await until(ws, "response.done")
            assert events[0]["type"] == "response.created"
            assert texts(events) == f"paid with {GOOD}"


async def test_a_free_app_sends_no_payment_events() -> None:
    with trio.fail_after(TIMEOUT):
        async with session_ws([Echo()], None, "echo") as ws:
            await ask(ws, "hi")
            events = await until(ws, "response.done")
            assert [e["type"] for e in events] == [
                "response.created",
                "response.delta",
                "response.done",
            ]
            assert texts(events) == "paid with None"
            # A token submitted with nothing outstanding is recorded and accepted.
            await send(ws, type="payment.submit", payment={"token": "tok_any"})
            assert (await recv(ws))["type"] == "payment.accepted"
            await ask(ws, "again")
            assert texts(await until(ws, "response.done")) == "paid with tok_any"


# --- mid-stream top-up --------------------------------------------------------------


def assert_paused_correctly(events: list[dict[str, Any]]) -> None:
    """payment.required (topup) ... payment.accepted with no content in between."""
    types = [e["type"] for e in events]
    start, end = types.index("payment.required"), types.index("payment.accepted")
    assert start < end
    assert events[start]["extra"] == {"action": "topup"}
    assert not CONTENT & set(types[start:end]), types
    assert types.count("response.created") == 1


async def test_mid_stream_top_up_over_websocket_keeps_the_agent_state_and_the_output() -> None:
    agent = TopUp()
    with trio.fail_after(TIMEOUT):
        async with session_ws(
            [agent], TokenPolicy({GOOD, "tok_refreshed"}), "topup", payment_token=GOOD
        ) as ws:
            await ask(ws, "work")
            events = await until(ws, "payment.required")
            assert texts(events) == "first half; "
            assert events[-1]["response_id"] == events[0]["response_id"]
            assert events[-1]["requirements"]["amount"] == "0.50"
            await quiet(ws)  # paused
            assert not agent.resumed.is_set()
            await send(ws, type="payment.submit", payment={"token": "tok_refreshed"})
            events += await until(ws, "response.done")
            assert_paused_correctly(events)
            assert agent.calls == 1  # resumed, not retried
            whole = "first half; first half then second half"
            assert texts(events) == whole
            assert done_text(events[-1]) == whole


async def test_cancel_during_a_top_up_returns_the_partial_output() -> None:
    agent = TopUp()
    with trio.fail_after(TIMEOUT):
        async with session_ws([agent], TokenPolicy({GOOD}), "topup", payment_token=GOOD) as ws:
            await ask(ws, "work")
            await until(ws, "payment.required")
            await send(ws, type="response.cancel")
            cancelled = await recv(ws)
            assert cancelled["type"] == "response.cancelled"
            partial = cancelled["partial_output"]
            assert [p["text"] for p in partial] == ["first half; "]
            assert not agent.resumed.is_set()


async def test_a_raised_top_up_holds_the_response_and_retries_with_the_output_so_far() -> None:
    agent = RaisingTopUp()
    with trio.fail_after(TIMEOUT):
        async with session_ws([agent], TokenPolicy({GOOD}), "raiser", payment_token=GOOD) as ws:
            await ask(ws, "work")
            events = await until(ws, "payment.required")
            assert events[-1]["extra"] == {"action": "topup"}
            await send(ws, type="payment.submit", payment={"token": GOOD})
            events += await until(ws, "response.done")
            assert_paused_correctly(events)
            whole = "before after (assistant: 'before ')"
            assert texts(events) == whole and done_text(events[-1]) == whole
            assert len(agent.requests) == 2


async def test_an_agent_that_keeps_asking_fails_with_payment_required() -> None:
    with trio.fail_after(TIMEOUT):
        async with session_ws(
            [RaisingTopUp(always=True)], TokenPolicy({GOOD}), "raiser", payment_token=GOOD
        ) as ws:
            await ask(ws, "work")
            rounds = 0
            while True:
                event = await recv(ws)
                if event["type"] == "payment.required":
                    rounds += 1
                    await send(ws, type="payment.submit", payment={"token": GOOD})
                elif event["type"] == "response.error":
                    break
            assert rounds == 3
            assert event["error"]["code"] == "payment_required"
            assert event["error"]["details"]["accepts"][0]["amount"] == "0.50"


async def test_mid_stream_top_up_over_http_sse() -> None:
    agent = TopUp()
    with trio.fail_after(TIMEOUT):
        async with sse_http([agent]) as http:
            created = await post(
                http, {**CREATE, "payment_token": GOOD}, path="/agents/topup/events"
            )
            sid = created.headers["x-session-id"]
            async with open_stream(http, sid, "/agents/topup/events/stream") as stream:
                posted = await post(
                    http,
                    [{"type": "input.text", "text": "work"}, {"type": "response.create"}],
                    sid,
                    "/agents/topup/events",
                )
                assert posted.json()["accepted"] == 2
                events = await stream.until("payment.required")
                assert texts(events) == "first half; "
                await trio.sleep(0.2)
                assert not agent.resumed.is_set()
                paid = await post(
                    http,
                    {"type": "payment.submit", "payment": {"token": GOOD}},
                    sid,
                    "/agents/topup/events",
                )
                assert paid.status_code == 200
                events += await stream.until("response.done")
            assert_paused_correctly(events)
            whole = "first half; first half then second half"
            assert texts(events) == whole and done_text(events[-1]) == whole


async def test_preflight_over_http_sse_wrong_then_right_token() -> None:
    agent = Echo()
    with trio.fail_after(TIMEOUT):
        async with sse_http([agent]) as http:
            created = await post(http, CREATE, path="/agents/echo/events")
            sid = created.headers["x-session-id"]
            async with open_stream(http, sid, "/agents/echo/events/stream") as stream:
                await post(
                    http,
                    [{"type": "input.text", "text": "hi"}, {"type": "response.create"}],
                    sid,
                    "/agents/echo/events",
                )
                seen = await stream.until("payment.required")
                assert seen[-1]["requirements"]["amount"] == "0.01"
                for token in ("tok_bad", GOOD):
                    await post(
                        http,
                        {"type": "payment.submit", "payment": {"token": token}},
                        sid,
                        "/agents/echo/events",
                    )
                seen += await stream.until("payment.error")
                assert seen[-1]["code"] == "token_invalid"
                seen += await stream.until("response.done")
            types = [e["type"] for e in seen]
            assert (
                types.index("payment.error")
                < types.index("payment.accepted")
                < types.index("response.created")
            )
            assert texts(seen) == f"paid with {GOOD}"


# --- the project's client -------------------------------------------------------------


async def test_client_callback_pays_automatically_over_websocket_and_sse() -> None:
    asked: list[ev.PaymentRequired] = []

    async def pay(required: ev.PaymentRequired) -> str:
        asked.append(required)
        await trio.sleep(0)
        return GOOD

    with trio.fail_after(TIMEOUT):
        async with serving([Echo(), TopUp()], TokenPolicy({GOOD})) as server:
            async with connect(f"ws://127.0.0.1:{server.port}/ws") as client:
                session = await client.create_session("echo", on_payment_required=pay)
                seen = [e.type async for e in session.respond("hi")]
                assert seen[:3] == ["payment.required", "payment.accepted", "response.created"]
                assert seen[-1] == "response.done"
                assert session.payment is not None
                assert session.payment.state is PaymentState.ACCEPTED
                # Top-up with a sync callback: ask() returns the whole output.
                topup = await client.create_session(
                    "topup", on_payment_required=lambda r: GOOD, payment_token=GOOD
                )
                result = await topup.ask("work")
                assert result.text == "first half; first half then second half"
            async with connect_sse(f"http://127.0.0.1:{server.port}") as sse:
                session = await sse.create_session("topup", on_payment_required=pay)
                stream = session.respond("work")
                types = [e.type async for e in stream]
                assert types.count("payment.required") == 2  # pre-flight and top-up
                assert stream.result is not None
                assert stream.result.text == "first half; first half then second half"
            assert len(asked) == 3
            assert [r.is_topup for r in asked] == [False, False, True]


async def test_client_without_callback_sees_the_events_and_pays_by_hand() -> None:
    with trio.fail_after(TIMEOUT):
        async with (
            serving([Echo()], TokenPolicy({GOOD})) as server,
            connect(f"ws://127.0.0.1:{server.port}/agents/echo/uamp") as client,
        ):
            declined: list[str] = []
            session = await client.create_session(
                on_payment_required=lambda r: declined.append(r.requirements.amount)
            )
            stream = session.respond("hi")
            async for event in stream:
                if event.type == "payment.required":
                    await session.pay("tok_bad")
                elif event.type == "payment.error":
                    assert isinstance(event, ev.PaymentErrorEvent) and event.can_retry
                    await session.pay(GOOD)
            assert declined == ["0.01"]  # the callback returned None: nothing was sent for it
            assert stream.result is not None and stream.result.text == f"paid with {GOOD}"
