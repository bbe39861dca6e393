"""Spec 003 as a client written from the document alone sees it.

* section 5 + section 7: the consumer acknowledges "via progress" with only
  ``POST /v1/messages`` and ``GET /v1/stream/{id}``: a ``progress``
  envelope whose ``reply_to`` is the ask and whose ``delta_seq`` is in
  ``ext`` or a JSON body; without ``delta_seq`` it is 4.09;
* section 9: a WebSocket message over the server's limit is a 4.13 error
  envelope, then the close (4413);
* section 10: a peer's ``error`` envelope ends the stream with an ``error``
  frame; a ``cancel`` of a running ask with a ``cancel`` frame, on HTTP, the
  WebSocket and gRPC.

The HTTP client here is httpx and hand-built envelopes, not uamp's client.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import httpx
import orjson
import pytest
import trio
import trio_websocket
from cryptography.hazmat.primitives.asymmetric import ed25519

from tests._support.agents import TestAgent, Words
from tests._support.envelopes import envelope
from tests.trio.envelope.test_intents import BINDINGS, binding, eventually, while_streaming
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.adapters.envelope import prefix_frame, read_error, split_frames
from uamp_proto.envelope import (
    Body,
    Delta,
    DeltaType,
    Envelope,
    ExchangeState,
    decode_delta,
    decode_envelope,
    encode_envelope,
)
from uamp_proto.principal import ANONYMOUS
from uamp_proto.responder import Emit, TurnRequest
from uamp_proto.signing import sign_envelope
from uamp_trio.app import create_app

TIMEOUT = 15
UAMP_JSON = {"content-type": "application/uamp+json;v=1"}


class Stuck(TestAgent):
    """Says it starts, then waits until stopped."""

    name = "stuck"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="started")))
        await trio.sleep_forever()


@pytest.fixture
async def server(serve_app: Callable[..., Awaitable[Any]]) -> Any:
    app = create_app([Words("five", "a ", "b ", "c ", "d ", "e", pause=0), Stuck()])
    return await serve_app(app, websocket_max_message_size=64 * 1024)


def _progress(
    ask: Envelope, *, ext: dict[str, Any] | None = None, body: Body | None = None
) -> bytes:
    """A signed ``progress`` envelope about ``ask``'s stream, built field by field."""
    unsigned = envelope(
        "progress", "", to=ask.to[0], reply_to=ask.id, stream_id=ask.stream_id, sign=False
    )
    unsigned = attrs.evolve(unsigned, ext=ext, body=body or unsigned.body)
    return encode_envelope(
        sign_envelope(unsigned, ed25519.Ed25519PrivateKey.generate(), embed_jwk=True)
    )


async def _read_acking_by_envelope(
    server: Any, ask: Envelope, ack: Callable[[Envelope, int], bytes]
) -> list[Delta]:
    """POST ``ask`` (window 1), read its SSE, acknowledge each frame with a posted envelope."""
    frames: list[Delta] = []
    async with httpx.AsyncClient(base_url=server.url, timeout=TIMEOUT) as http:
        r = await http.post(
            "/agents/five/v1/messages", content=encode_envelope(ask), headers=UAMP_JSON
        )
        assert r.status_code == 202
        async with http.stream("GET", r.headers["location"]) as stream:
            async for line in stream.aiter_lines():
                if not line.startswith("data:"):
                    continue
                frame = decode_delta(line[5:].strip().encode())
                frames.append(frame)
                posted = await http.post(
                    "/agents/five/v1/messages", content=ack(ask, frame.delta_seq), headers=UAMP_JSON
                )
                assert posted.status_code == 202, posted.content
                if frame.type is DeltaType.DONE:
                    break
    return frames


@pytest.mark.parametrize("where", ["ext", "body"])
async def test_a_progress_envelope_acknowledges_so_a_window_of_one_does_not_stall(
    server: Any, where: str
) -> None:
    ask = envelope("ask", "go", to="urn:uamp:agent:five", window=1, stream_id="str-42")

    def ack(ask: Envelope, seq: int) -> bytes:
        if where == "ext":
            return _progress(ask, ext={"delta_seq": seq})
        content = orjson.dumps({"delta_seq": seq}).decode()
        return _progress(ask, body=Body(type="application/json", content=content))

    with trio.fail_after(TIMEOUT):
        frames = await _read_acking_by_envelope(server, ask, ack)
    assert [f.delta_seq for f in frames] == list(range(6))
    assert [f.type for f in frames] == [DeltaType.CHUNK] * 5 + [DeltaType.DONE]
    assert {f.stream_id for f in frames} == {"str-42"}
    assert frames[-1].payload is not None and frames[-1].payload["text"] == "a b c d e"
    # Acks only: the agent saw no "update".
    assert server.app.envelopes.find(ask.id, ANONYMOUS).updates == []


async def test_a_progress_envelope_without_delta_seq_is_4_09(server: Any) -> None:
    ask = envelope("ask", "go", to="urn:uamp:agent:five", window=1)
    with trio.fail_after(TIMEOUT):
        async with httpx.AsyncClient(base_url=server.url) as http:
            r = await http.post(
                "/agents/five/v1/messages", content=encode_envelope(ask), headers=UAMP_JSON
            )
            assert r.status_code == 202
            bodies = [
                _progress(ask),  # text, no delta_seq
                _progress(ask, ext={"delta_seq": "3"}),  # not an integer
                _progress(ask, body=Body(type="application/json", content='{"seq": 0}')),
                _progress(ask, ext={"delta_seq": 7}),  # never sent
            ]
            answers = [
                await http.post("/agents/five/v1/messages", content=b, headers=UAMP_JSON)
                for b in bodies
            ]
    assert [a.status_code for a in answers] == [409] * 4
    assert {read_error(decode_envelope(a.content))[0] for a in answers} == {"4.09"}


async def test_a_websocket_message_over_the_limit_gets_4_13_before_the_close(server: Any) -> None:
    url = server.url.replace("http://", "ws://") + "/agents/five/uamp/1/ws"
    big = prefix_frame(b"x" * (100 * 1024))  # the server takes messages up to 64 KiB
    codes: list[str] = []
    closed: int | None = None
    with trio.fail_after(TIMEOUT):
        async with trio_websocket.open_websocket_url(url, max_message_size=1 << 20) as ws:
            await ws.send_message(big)
            try:
                while True:
                    message = await ws.get_message()
                    assert isinstance(message, bytes)
                    for part in split_frames(message, 1 << 20):
                        codes.append(read_error(decode_envelope(part))[0])
            except trio_websocket.ConnectionClosed as exc:
                closed = exc.reason.code
    assert (codes, closed) == (["4.13"], 4413)


@binding
async def test_a_peer_error_envelope_ends_the_stream_with_an_error_frame(
    server: Any, bind: str
) -> None:
    async with BINDINGS[bind](server, "stuck") as client:
        ask = client.signer.make("ask", "go", to=client.to)

        async def steps(frames: trio.MemoryReceiveChannel[Delta]) -> None:
            await frames.receive()  # "started": it runs
            failure = orjson.dumps({"code": "disk_full", "message": "no room"}).decode()
            report = client.signer.make(
                "error", failure, to=client.to, reply_to=ask.id, body_type="application/json"
            )
            await client.send_only(report)

        reply = await while_streaming(client, ask, steps)
    final = reply.final
    assert final is not None and final.type is DeltaType.ERROR
    assert final.payload is not None
    assert (final.payload["code"], final.payload["message"]) == ("disk_full", "no room")
    exchange = server.app.envelopes.find(ask.id, ANONYMOUS)
    await eventually(lambda: exchange.finished)
    assert exchange.state is ExchangeState.ERROR


@binding
async def test_cancel_ends_a_running_ask_with_a_cancel_frame(server: Any, bind: str) -> None:
    async with BINDINGS[bind](server, "stuck") as client:
        ask = client.signer.make("ask", "go", to=client.to)

        async def steps(frames: trio.MemoryReceiveChannel[Delta]) -> None:
            await frames.receive()
            await client.reply("cancel", ask)

        reply = await while_streaming(client, ask, steps)
    assert reply.final is not None and reply.final.type is DeltaType.CANCEL
    assert reply.final.payload == {"text": "started"}
    assert server.app.envelopes.find(ask.id, ANONYMOUS).state is ExchangeState.CANCELLED


@binding
async def test_a_progress_envelope_with_delta_seq_is_taken_on_every_binding(
    server: Any, bind: str
) -> None:
    async with BINDINGS[bind](server, "five") as client:
        ask = client.signer.make("ask", "go", to=client.to, window=1)
        seen: list[int] = []

        async def steps(frames: trio.MemoryReceiveChannel[Delta]) -> None:
            async for frame in frames:
                seen.append(frame.delta_seq)
                await client.tell("progress", "", reply_to=ask, ext={"delta_seq": frame.delta_seq})
                if frame.type is DeltaType.DONE:
                    return

        reply = await while_streaming(client, ask, steps)
    assert seen == list(range(6))  # no ack was refused (a refusal raises on every binding)
    assert reply.text == "a b c d e"


async def test_over_the_websocket_progress_envelopes_alone_move_a_window_of_one(
    server: Any,
) -> None:
    url = server.url.replace("http://", "ws://") + "/agents/five/uamp/1/ws"
    ask = envelope("ask", "go", to="urn:uamp:agent:five", window=1)
    frames: list[Delta] = []
    with trio.fail_after(TIMEOUT):
        async with trio_websocket.open_websocket_url(url) as ws:
            await ws.send_message(prefix_frame(encode_envelope(ask)))
            while not frames or frames[-1].type is not DeltaType.DONE:
                message = await ws.get_message()
                assert isinstance(message, bytes)
                for part in split_frames(message, 1 << 20):
                    assert "intent" not in orjson.loads(part), part  # no error envelope
                    frames.append(decode_delta(part))
                ack = _progress(ask, ext={"delta_seq": frames[-1].delta_seq})
                await ws.send_message(prefix_frame(ack))
    assert [f.delta_seq for f in frames] == list(range(6))
