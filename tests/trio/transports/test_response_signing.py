"""Signed Chat Completions (spec 004 "Response Signing") on a real server.

The client side checks everything from what it received over the socket:
the JWKS from ``/.well-known/jwks.json``, the text from the JSON body or the
streamed chunks, and the request bytes it sent.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import orjson
import pytest
import trio
from cryptography.hazmat.primitives.asymmetric import rsa

from tests._support.agents import TestAgent
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.responder import Emit, ResponderError, TurnRequest
from uamp_proto.signing import (
    JWKS,
    Reason,
    ResponseSigner,
    SignatureError,
    request_hash,
    response_hash,
    verify_response_signature,
)
from uamp_trio.app import create_app
from uamp_trio.demo import DemoAgent

TIMEOUT = 10
NOW = 1_752_150_000


@pytest.fixture(scope="module")
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


class FailingAgent(TestAgent):
    """Streams one delta, then fails."""

    name = "broken"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="partial")))
        raise ResponderError("server_error", "backend down")


def body(text: str, *, stream: bool = False) -> bytes:
    # Exact bytes, so the test knows what the server hashed.
    return orjson.dumps(
        {"model": "demo", "messages": [{"role": "user", "content": text}], "stream": stream}
    )


def parse_sse(raw: str) -> list[tuple[str | None, str]]:
    """``[(event name or None, data)]`` of an SSE body."""
    out: list[tuple[str | None, str]] = []
    for block in raw.split("\n\n"):
        if not block.strip():
            continue
        name, data = None, []
        for line in block.split("\n"):
            if line.startswith("event: "):
                name = line[len("event: ") :]
            elif line.startswith("data: "):
                data.append(line[len("data: ") :])
        out.append((name, "\n".join(data)))
    return out


def signed_app(key: rsa.RSAPrivateKey, *agents: Any, clock: Any = None) -> Any:
    app = create_app(list(agents) or [DemoAgent()])
    app.response_signer = ResponseSigner(key, "demo-key", clock=clock or (lambda: NOW))
    return app


async def fetch_jwks(client: httpx.AsyncClient, agent: str = "demo") -> JWKS:
    r = await client.get(f"/agents/{agent}/.well-known/jwks.json")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("application/json")
    return JWKS.parse(r.content)


async def test_non_streamed_completion_carries_a_signature_header(
    serve_app: Any, rsa_key: rsa.RSAPrivateKey
) -> None:
    with trio.fail_after(TIMEOUT):
        server = await serve_app(signed_app(rsa_key))
        async with httpx.AsyncClient(base_url=server.url) as client:
            jwks = await fetch_jwks(client)
            # The response signer's key, then the envelope key (spec 003).
            assert next((k.kid, k.alg) for k in jwks.keys) == ("demo-key", "RS256")
            assert [k.alg for k in jwks.keys][1:] == ["EdDSA"]
            sent = body("sign me")
            r = await client.post(
                "/agents/demo/chat/completions",
                content=sent,
                headers={"content-type": "application/json"},
            )
            assert r.status_code == 200
            text = r.json()["choices"][0]["message"]["content"]
            assert text == "You said: sign me"
            token = r.headers["x-uamp-signature"]
            claims = verify_response_signature(token, text, sent, jwks)
            assert claims == {
                "response_hash": response_hash(text),
                "request_hash": request_hash(sent),
                "iat": NOW,
            }
            # The same signature does not cover another request or answer.
            with pytest.raises(SignatureError) as info:
                verify_response_signature(token, text, body("sign you"), jwks)
            assert info.value.reason is Reason.TAMPERED
            with pytest.raises(SignatureError) as info:
                verify_response_signature(token, text + "!", sent, jwks)
            assert info.value.reason is Reason.TAMPERED


async def test_streamed_completion_ends_with_a_signature_event(
    serve_app: Any, rsa_key: rsa.RSAPrivateKey
) -> None:
    with trio.fail_after(TIMEOUT):
        server = await serve_app(signed_app(rsa_key, clock=lambda: int(time.time())))
        async with httpx.AsyncClient(base_url=server.url) as client:
            sent = body("stream and sign", stream=True)
            r = await client.post(
                "/chat/completions", content=sent, headers={"content-type": "application/json"}
            )
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            assert "x-uamp-signature" not in r.headers
            events = parse_sse(r.text)
            # ... data: [DONE], then the one named event (spec 004).
            assert events[-2] == (None, "[DONE]")
            name, data = events[-1]
            assert name == "response_signature"
            token = json.loads(data)["signature"]
            assert all(n is None for n, _ in events[:-1])
            text = "".join(
                choice["delta"].get("content") or ""
                for _, d in events[:-2]
                for choice in json.loads(d)["choices"]
            )
            assert text == "You said: stream and sign"
            jwks = await fetch_jwks(client)
            claims = verify_response_signature(token, text, sent, jwks)
            assert abs(claims["iat"] - time.time()) < 60


async def test_without_a_signer_nothing_is_signed_and_no_jwks_is_served(
    serve_app: Any,
) -> None:
    with trio.fail_after(TIMEOUT):
        server = await serve_app(create_app([DemoAgent()]))
        async with httpx.AsyncClient(base_url=server.url) as client:
            r = await client.post("/chat/completions", content=body("hi"))
            assert r.status_code == 200 and "x-uamp-signature" not in r.headers
            r = await client.post("/chat/completions", content=body("hi", stream=True))
            assert "response_signature" not in r.text
            assert parse_sse(r.text)[-1] == (None, "[DONE]")
            r = await client.get("/agents/demo/.well-known/jwks.json")
            # Only the envelope key (spec 003): no key verifies a response signature.
            assert r.status_code == 200
            assert [k.alg for k in JWKS.parse(r.content).keys] == ["EdDSA"]


async def test_jwks_is_per_agent_path_and_unknown_agents_are_404(
    serve_app: Any, rsa_key: rsa.RSAPrivateKey
) -> None:
    with trio.fail_after(TIMEOUT):
        app = signed_app(rsa_key, DemoAgent("alice"), DemoAgent("bob"))
        server = await serve_app(app)
        async with httpx.AsyncClient(base_url=server.url) as client:
            alice = await fetch_jwks(client, "alice")
            assert alice == await fetch_jwks(client, "bob")
            r = await client.get("/agents/carol/.well-known/jwks.json")
            assert r.status_code == 404 and "carol" in r.text
            sent = orjson.dumps({"messages": [{"role": "user", "content": "x"}]})
            r = await client.post("/agents/bob/chat/completions", content=sent)
            text = r.json()["choices"][0]["message"]["content"]
            verify_response_signature(r.headers["x-uamp-signature"], text, sent, alice)


async def test_failed_responses_are_not_signed(serve_app: Any, rsa_key: rsa.RSAPrivateKey) -> None:
    with trio.fail_after(TIMEOUT):
        server = await serve_app(signed_app(rsa_key, FailingAgent()))
        async with httpx.AsyncClient(base_url=server.url) as client:
            r = await client.post("/chat/completions", content=body("x"))
            assert r.status_code >= 400 and "x-uamp-signature" not in r.headers
            r = await client.post("/chat/completions", content=body("x", stream=True))
            events = parse_sse(r.text)
            assert events[-1] == (None, "[DONE]")
            assert all(name is None for name, _ in events)
            assert "backend down" in r.text


def test_openai_sdk_reads_signed_responses(thread_server: Any, rsa_key: rsa.RSAPrivateKey) -> None:
    # The real SDK as client: it ignores the extra event after [DONE], and the
    # bytes it sent (captured by an httpx hook) verify against the signature.
    import openai

    server = thread_server(signed_app(rsa_key))
    sent: list[bytes] = []
    with httpx.Client(event_hooks={"request": [lambda req: sent.append(req.read())]}) as http:
        client = openai.OpenAI(
            base_url=f"{server.url}/agents/demo/v1",
            api_key="unused",
            http_client=http,
            max_retries=0,
            timeout=10,
        )
        raw = client.chat.completions.with_raw_response.create(
            model="demo", messages=[{"role": "user", "content": "via sdk"}]
        )
        text = raw.parse().choices[0].message.content
        assert text == "You said: via sdk"
        jwks = JWKS.parse(http.get(f"{server.url}/agents/demo/.well-known/jwks.json").content)
        verify_response_signature(raw.headers["x-uamp-signature"], text, sent[0], jwks)
        stream = client.chat.completions.create(
            model="demo", messages=[{"role": "user", "content": "streamed"}], stream=True
        )
        parts = [c.choices[0].delta.content or "" for c in stream if c.choices]
        assert "".join(parts) == "You said: streamed"
