"""Signed ``response.done`` on the UAMP WebSocket and HTTP+SSE (spec 004 "Response Signing").

The client verifies from what crossed the socket: the text of the streamed
deltas, and the exact bytes of the ``response.create`` message it sent.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import orjson
import pytest
import trio
from cryptography.hazmat.primitives.asymmetric import rsa
from trio_websocket import WebSocketConnection
from trio_websocket import open_websocket_url as open_ws

from uamp_proto.signing import Reason, ResponseSigner, SignatureError, verify_response_signature
from uamp_proto.sse import SSEParser
from uamp_trio import App, DemoAgent, Server
from uamp_trio.transports import sse_events, uamp_ws

TIMEOUT = 15


@pytest.fixture(scope="module")
def signer() -> ResponseSigner:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return ResponseSigner(key=key, kid="uamp-test", clock=lambda: int(time.time()))


@asynccontextmanager
async def serving(signer: ResponseSigner | None) -> AsyncIterator[Server]:
    app = App([DemoAgent()])
    app.mount(uamp_ws.mount, sse_events.mount)
    app.response_signer = signer
    server = Server(app, port=0, shutdown_grace=0.5)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        yield server
        nursery.cancel_scope.cancel()


async def until_done(ws: WebSocketConnection) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    while not out or out[-1]["type"] != "response.done":
        out.append(orjson.loads(await ws.get_message()))
    return out


def texts(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"]["text"] for e in events if e["type"] == "response.delta")


async def open_session(ws: WebSocketConnection) -> None:
    await ws.send_message(
        orjson.dumps(
            {"type": "session.create", "uamp_version": "1.0", "session": {"modalities": ["text"]}}
        ).decode()
    )
    assert orjson.loads(await ws.get_message())["type"] == "session.created"
    assert orjson.loads(await ws.get_message())["type"] == "capabilities"


async def test_websocket_response_done_carries_a_signature_over_text_and_request(
    signer: ResponseSigner,
) -> None:
    with trio.fail_after(TIMEOUT):
        async with (
            serving(signer) as server,
            open_ws(f"ws://127.0.0.1:{server.port}/agents/demo/uamp") as ws,
        ):
            await open_session(ws)
            for text in ("hello there", "second turn"):
                await ws.send_message(orjson.dumps({"type": "input.text", "text": text}).decode())
                # The exact bytes sent: what the signature's request_hash covers.
                request = b'{"type": "response.create", "response": {"modalities": ["text"]}}'
                await ws.send_message(request.decode())
                events = await until_done(ws)
                signature = events[-1]["signature"]
                reply = texts(events)
                assert reply == f"You said: {text}"
                claims = verify_response_signature(signature, reply, request, signer.jwks())
                assert set(claims) >= {"response_hash", "request_hash", "iat"}
                with pytest.raises(SignatureError) as tampered:
                    verify_response_signature(signature, reply + "!", request, signer.jwks())
                assert tampered.value.reason is Reason.TAMPERED
                with pytest.raises(SignatureError):
                    verify_response_signature(
                        signature, reply, b'{"type":"response.create"}', signer.jwks()
                    )


async def test_no_signature_without_a_signer() -> None:
    with trio.fail_after(TIMEOUT):
        async with (
            serving(None) as server,
            open_ws(f"ws://127.0.0.1:{server.port}/agents/demo/uamp") as ws,
        ):
            await open_session(ws)
            await ws.send_message('{"type":"input.text","text":"hi"}')
            await ws.send_message('{"type":"response.create"}')
            done = (await until_done(ws))[-1]
            assert "signature" not in done


async def test_http_sse_response_done_is_signed_over_the_posted_body(
    signer: ResponseSigner,
) -> None:
    with trio.fail_after(TIMEOUT):
        async with (
            serving(signer) as server,
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as http,
        ):
            created = await http.post(
                "/agents/demo/events",
                content=orjson.dumps(
                    {
                        "type": "session.create",
                        "uamp_version": "1.0",
                        "session": {"modalities": ["text"]},
                    }
                ),
            )
            headers = {"x-session-id": created.headers["x-session-id"]}
            async with http.stream(
                "GET",
                "/agents/demo/events/stream",
                headers=headers,
                timeout=httpx.Timeout(10, read=None),
            ) as resp:
                await http.post(
                    "/agents/demo/events",
                    headers=headers,
                    content=b'{"type":"input.text","text":"over sse"}',
                )
                request = b'{ "type" : "response.create" }'  # one event per POST: the body
                await http.post("/agents/demo/events", headers=headers, content=request)
                parser = SSEParser()
                events: list[dict[str, Any]] = []
                async for chunk in resp.aiter_raw():
                    events.extend(orjson.loads(sse.data) for sse in parser.feed(chunk))
                    if events and events[-1]["type"] == "response.done":
                        break
            reply = texts(events)
            assert reply == "You said: over sse"
            verify_response_signature(events[-1]["signature"], reply, request, signer.jwks())
