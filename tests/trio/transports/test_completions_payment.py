"""Payment over Chat Completions (spec 004): 402 pre-flight, X-PAYMENT retry."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
import trio

from tests._support.agents import TestAgent
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.payment import PaymentRequiredError, TokenPolicy
from uamp_proto.responder import Emit, TurnRequest
from uamp_trio.app import create_app
from uamp_trio.demo import DemoAgent

BODY: dict[str, Any] = {"messages": [{"role": "user", "content": "pay me"}]}


class TokenEcho(TestAgent):
    """Replies with the payment token it was given."""

    name = "echo"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text=f"paid with {request.payment_token}")))


async def test_402_before_any_stream_then_the_retry_with_x_payment_succeeds(
    serve_app: Any,
) -> None:
    app = create_app([TokenEcho()], payment_policy=TokenPolicy({"tok_ok"}, amount="0.02"))
    server = await serve_app(app)
    with trio.fail_after(10):
        async with httpx.AsyncClient(base_url=server.url) as client:
            for stream in (False, True):
                refused = await client.post(
                    "/agents/echo/chat/completions", json={**BODY, "stream": stream}
                )
                assert refused.status_code == 402
                assert refused.headers["content-type"].startswith("application/json")
                body = refused.json()
                assert body["error"]["type"] == "payment_required"
                assert body["error"]["accepts"][0]["amount"] == "0.02"
            bad = await client.post(
                "/agents/echo/chat/completions", json=BODY, headers={"X-PAYMENT": "tok_bad"}
            )
            assert bad.status_code == 402
            paid = await client.post(
                "/agents/echo/chat/completions", json=BODY, headers={"X-PAYMENT": "tok_ok"}
            )
            assert paid.status_code == 200
            assert paid.json()["choices"][0]["message"]["content"] == "paid with tok_ok"


async def _complete(server: Any) -> httpx.Response:
    """POST the test's Chat Completions request to ``server``'s root endpoint."""
    with trio.fail_after(10):
        async with httpx.AsyncClient(base_url=server.url) as client:
            return await client.post("/v1/chat/completions", json=BODY)


async def test_free_app_needs_no_payment(serve_app: Any) -> None:
    response = await _complete(await serve_app(create_app([DemoAgent()])))
    assert response.status_code == 200


class MidStreamTopUp(TestAgent):
    """Streams a little, then needs a top-up that Completions cannot negotiate."""

    name = "topup"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="first part")))
        raise PaymentRequiredError(ty.PaymentRequirements(amount="1.00"), topup=True)


def test_openai_sdk_sees_402_as_an_api_error_and_pays_on_retry(thread_server: Any) -> None:
    app = create_app([TokenEcho()], payment_policy=TokenPolicy({"tok_ok"}))
    server = thread_server(app)
    client = openai.OpenAI(base_url=f"{server.url}/agents/echo", api_key="x", max_retries=0)
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(model="echo", messages=BODY["messages"])
    assert info.value.status_code == 402
    paying = openai.OpenAI(
        base_url=f"{server.url}/agents/echo",
        api_key="x",
        max_retries=0,
        default_headers={"X-PAYMENT": "tok_ok"},
    )
    reply = paying.chat.completions.create(model="echo", messages=BODY["messages"])
    assert reply.choices[0].message.content == "paid with tok_ok"


async def test_mid_stream_topup_on_completions_ends_with_a_payment_error(serve_app: Any) -> None:
    response = await _complete(await serve_app(create_app([MidStreamTopUp()])))
    assert response.status_code == 402
    error = response.json()["error"]
    assert error["code"] == "payment_required"
