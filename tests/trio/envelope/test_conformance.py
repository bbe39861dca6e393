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

import base64
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
from uamp_proto import jsonpatch
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


PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 64


class Painter(TestAgent):
    """Streams binary output (a "PNG") in base64 pieces, as an agent streams audio."""

    name = "painter"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        data = base64.b64encode(PNG).decode()
        for i in range(0, len(data), 4096):
            await emit(ev.AudioDelta(audio=data[i : i + 4096]))


class Forecaster(TestAgent):
    """Writes a JSON forecast a few characters at a time when asked for JSON, else prose."""

    name = "forecaster"
    FORECAST = '{"city": "Paris", "days": [{"t": 21}, {"t": 23}, {"t": 19}], "note": "dry"}'

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        fmt = request.response_format
        text = self.FORECAST if fmt is not None and fmt.type == "json_object" else "dry in Paris"
        for i in range(0, len(text), 7):
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text=text[i : i + 7])))


@pytest.fixture
async def server(serve_app: Callable[..., Awaitable[Any]]) -> Any:
    app = create_app(
        [Words("five", "a ", "b ", "c ", "d ", "e", pause=0), Stuck(), Painter(), Forecaster()]
    )
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


async def _sse_frames(server: Any, agent: str, ask: Envelope) -> list[Delta]:
    """POST ``ask`` and read its whole SSE stream (a window of 1024: no ack needed here)."""
    frames: list[Delta] = []
    async with httpx.AsyncClient(base_url=server.url, timeout=TIMEOUT) as http:
        r = await http.post(
            f"/agents/{agent}/v1/messages", content=encode_envelope(ask), headers=UAMP_JSON
        )
        assert r.status_code == 202, r.content
        async with http.stream("GET", r.headers["location"]) as stream:
            async for line in stream.aiter_lines():
                if line.startswith("data:"):
                    frames.append(decode_delta(line[5:].strip().encode()))
    return frames


def _signed(unsigned: Envelope) -> Envelope:
    return sign_envelope(unsigned, ed25519.Ed25519PrivateKey.generate(), embed_jwk=True)


async def test_binary_output_streams_as_chunk_b64_frames_and_a_done_with_the_mime(
    server: Any,
) -> None:
    ask = envelope("ask", "512x512 cat", to="urn:uamp:agent:painter", window=1024)
    with trio.fail_after(TIMEOUT):
        frames = await _sse_frames(server, "painter", ask)
    chunks, done = frames[:-1], frames[-1]
    assert chunks and {f.type for f in chunks} == {DeltaType.CHUNK}
    # Appendix C.2: the client reassembles chunk_b64 frames into the file.
    data = b"".join(base64.b64decode(f.payload["chunk_b64"]) for f in chunks if f.payload)
    assert data == PNG
    assert done.type is DeltaType.DONE and done.payload is not None
    assert done.payload["mime"] == "audio/pcm"


@pytest.mark.parametrize("fmt", [None, {"type": "json_object"}])
async def test_structured_output_streams_as_json_patch_frames(
    server: Any, fmt: dict[str, Any] | None
) -> None:
    unsigned = envelope("ask", "forecast", to="urn:uamp:agent:forecaster", sign=False)
    ask = _signed(attrs.evolve(unsigned, ext=None if fmt is None else {"response_format": fmt}))
    with trio.fail_after(TIMEOUT):
        frames = await _sse_frames(server, "forecaster", ask)
    done = frames[-1]
    assert done.type is DeltaType.DONE and done.payload is not None
    if fmt is None:  # prose: text chunks, as before
        assert {f.type for f in frames[:-1]} == {DeltaType.CHUNK}
        assert done.payload["text"] == "dry in Paris" and "json" not in done.payload
        return
    patches = frames[:-1]
    assert len(patches) > 3 and {f.type for f in patches} == {DeltaType.PATCH}
    doc: Any = None  # RFC 6902 applied in order rebuilds the value
    for frame in patches:
        assert frame.payload is not None
        doc = jsonpatch.apply(doc, frame.payload["ops"])
    assert doc == orjson.loads(Forecaster.FORECAST) == done.payload["json"]
    # The array grows by "add" of its new items, never a replace of the whole array.
    ops = [op for f in patches if f.payload for op in f.payload["ops"]]
    assert any(op["op"] == "add" and op["path"] == "/days/2" for op in ops)
    assert not any(op["path"] == "/days" and op["op"] == "replace" for op in ops)


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
