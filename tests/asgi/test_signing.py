"""Responses the ASGI app signs verify against the JWKS it publishes (spec 004)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

import uamp_asgi
from tests._support.asgi import uvicorn_server
from uamp_asgi.responders import function_agent
from uamp_proto import events as ev
from uamp_proto.responder import TurnRequest
from uamp_proto.signing import JWKS, ResponseSigner, SignatureError, verify_response_signature


async def echo(turn: TurnRequest) -> AsyncIterator[str | ev.Event]:
    """Says back what it was told."""
    yield "You said: "
    yield turn.messages[-1].text


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    signer = ResponseSigner(key, "asgi-key", clock=lambda: int(time.time()))
    config = uamp_asgi.Config(response_signer=signer)
    with uvicorn_server(uamp_asgi.app(function_agent(echo), config=config)) as url:
        yield f"{url}/agents/echo"


def _body(text: str, **more: object) -> bytes:
    return json.dumps(
        {"model": "echo", "messages": [{"role": "user", "content": text}], **more}
    ).encode()


def test_a_completion_is_signed_over_its_text_and_request(base: str) -> None:
    jwks = JWKS.parse(httpx.get(f"{base}/.well-known/jwks.json").content)
    sent = _body("sign me")
    reply = httpx.post(
        f"{base}/chat/completions", content=sent, headers={"content-type": "application/json"}
    )
    text = reply.json()["choices"][0]["message"]["content"]
    token = reply.headers["x-uamp-signature"]
    claims = verify_response_signature(token, text, sent, jwks)
    assert set(claims) >= {"response_hash", "request_hash"}
    with pytest.raises(SignatureError):
        verify_response_signature(token, text + "!", sent, jwks)


def test_a_stream_ends_with_its_signature(base: str) -> None:
    jwks = JWKS.parse(httpx.get(f"{base}/.well-known/jwks.json").content)
    sent = _body("stream me", stream=True)
    raw = httpx.post(
        f"{base}/chat/completions", content=sent, headers={"content-type": "application/json"}
    ).text
    blocks = [b for b in raw.split("\n\n") if b.strip()]
    assert blocks[-1].startswith("event: response_signature")
    token = json.loads(blocks[-1].split("data: ", 1)[1])["signature"]
    text = "".join(
        json.loads(b[6:])["choices"][0]["delta"].get("content") or ""
        for b in blocks
        if b.startswith("data: {") and json.loads(b[6:]).get("choices")
    )
    assert text == "You said: stream me"
    verify_response_signature(token, text, sent, jwks)
