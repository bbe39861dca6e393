"""Spec 004 items over the wire where no other test pins them."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
import trio

from tests.trio.transports.test_completions_payment import BODY, TokenEcho
from uamp_proto.payment import TokenPolicy
from uamp_trio.app import create_app


@pytest.mark.parametrize("path", ["/agents/echo/chat/completions", "/agents/echo/v1/responses"])
async def test_the_402_body_carries_spec_004_members_and_openai_s_error(
    serve_app: Any, path: str
) -> None:
    app = create_app([TokenEcho()], payment_policy=TokenPolicy({"tok_ok"}, amount="0.02"))
    server = await serve_app(app)
    body: dict[str, Any] = BODY if "chat" in path else {"input": "pay me"}
    with trio.fail_after(10):
        async with httpx.AsyncClient(base_url=server.url) as client:
            refused = await client.post(path, json=body)
    assert refused.status_code == 402
    got = refused.json()
    assert got["status_code"] == 402
    assert got["context"]["accepts"] == got["error"]["accepts"]
    assert got["context"]["accepts"][0]["amount"] == "0.02"
    assert got["error"]["type"] == "payment_required"


async def test_the_openai_sdk_still_reads_the_402_as_its_error(serve_app: Any) -> None:
    app = create_app([TokenEcho()], payment_policy=TokenPolicy({"tok_ok"}, amount="0.02"))
    server = await serve_app(app)
    sdk = openai.AsyncOpenAI(base_url=f"{server.url}/agents/echo", api_key="unused", max_retries=0)
    with trio.fail_after(10):
        with pytest.raises(openai.APIStatusError) as caught:
            await sdk.chat.completions.create(model="echo", messages=BODY["messages"])
    assert caught.value.status_code == 402
    assert caught.value.code == "payment_required"
