"""Signed ``response.done`` on the UAMP WebSocket and HTTP+SSE (spec 004 "Response Signing").

The client verifies from what crossed the socket: the text of the streamed
deltas, and the exact bytes of the ``response.create`` message it sent.
"""

from __future__ import annotations

import time
from contextlib import AbstractAsyncContextManager

import httpx
import orjson
import pytest
import trio
from cryptography.hazmat.primitives.asymmetric import rsa
from trio_websocket import open_websocket_url as open_ws

from tests._support import wire
from tests._support.wire import CREATE, create_session, open_stream, post, texts, until
from uamp_proto.signing import Reason, ResponseSigner, SignatureError, verify_response_signature
from uamp_trio import App, DemoAgent, Server
from uamp_trio.transports import sse_events, uamp_ws

TIMEOUT = 15


@pytest.fixture(scope="module")
def signer() -> ResponseSigner:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return ResponseSigner(key=key, kid="uamp-test", clock=lambda: int(time.time()))


def serving(signer: ResponseSigner | None) -> AbstractAsyncContextManager[Server]:
    app = App([DemoAgent()])
    app.mount(uamp_ws.mount, sse_events.mount)
    app.response_signer = signer
    return wire.serving(app)


async def test_websocket_response_done_carries_a_signature_over_text_and_request(
    signer: ResponseSigner,
) -> None:
    with trio.fail_after(TIMEOUT):
        async with (
            serving(signer) as server,
            open_ws(f"ws://127.0.0.1:{server.port}/agents/demo/uamp") as ws,
        ):
            await create_session(ws)
            for text in ("hello there", "second turn"):
                await ws.send_message(orjson.dumps({"type": "input.text", "text": text}).decode())
                # The exact bytes sent: what the signature's request_hash covers.
                request = b'{"type": "response.create", "response": {"modalities": ["text"]}}'
                await ws.send_message(request.decode())
                events = await until(ws, "response.done")
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
            await create_session(ws)
            await ws.send_message('{"type":"input.text","text":"hi"}')
            await ws.send_message('{"type":"response.create"}')
            done = (await until(ws, "response.done"))[-1]
            assert "signature" not in done


async def test_http_sse_response_done_is_signed_over_the_posted_body(
    signer: ResponseSigner,
) -> None:
    with trio.fail_after(TIMEOUT):
        async with (
            serving(signer) as server,
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as http,
        ):
            created = await post(http, CREATE, path="/agents/demo/events")
            sid = created.headers["x-session-id"]
            async with open_stream(http, sid, "/agents/demo/events/stream") as stream:
                await post(
                    http, {"type": "input.text", "text": "over sse"}, sid, "/agents/demo/events"
                )
                request = b'{ "type" : "response.create" }'  # one event per POST: the body
                await http.post(
                    "/agents/demo/events", headers={"x-session-id": sid}, content=request
                )
                events = await stream.until("response.done")
            reply = texts(events)
            assert reply == "You said: over sse"
            verify_response_signature(events[-1]["signature"], reply, request, signer.jwks())
