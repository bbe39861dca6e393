"""HTTP/3 over QUIC, served by the engine on trio UDP, driven by aioquic's own client.

The server runs in its own thread with a certificate from a CA made in the
test; aioquic's asyncio client (tests/_support/h3client.py) trusts only that
CA. The routes are the app's own: a Chat Completions stream (SSE) is served
over HTTP/3 exactly as over TCP.
"""

from __future__ import annotations

import re
import signal
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import trio

from tests._support.agents import Words
from tests._support.cli import spawn_serve
from tests._support.h3client import H3Request, h3_requests
from tests._support.tls import ThrowawayCA, make_ca
from uamp_trio.app import create_app
from uamp_trio.engines.http import Request, Response, StreamingResponse
from uamp_trio.engines.server import ServerConfig


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> ThrowawayCA:
    return make_ca(Path(tmp_path_factory.mktemp("ca")))


def app() -> Any:
    built = create_app([Words("poet", "roses ", "are ", "red", pause=0.05)])

    async def echo(request: Request) -> Response:
        return Response(
            headers=[("content-type", "text/plain"), ("x-version", request.http_version)],
            body=request.body,
        )

    async def trailing(request: Request) -> StreamingResponse:
        async def produce(send: Any) -> None:
            await send(b"part")
            response.trailers = [("x-done", "yes")]

        response = StreamingResponse(producer=produce, lazy_head=True)
        return response

    async def hang(request: Request) -> Response:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    built.router.add("POST", "/echo", echo)
    built.router.add("GET", "/hang", hang)
    built.router.add("GET", "/trailing", trailing)
    return built


def serve(thread_server: Callable[..., Any], ca: ThrowawayCA, **config: Any) -> Any:
    return thread_server(
        app(), certfile=ca.server.certfile, keyfile=ca.server.keyfile, http3=True, **config
    )


def test_routes_and_sse_streams_over_http3(
    thread_server: Callable[..., Any], ca: ThrowawayCA
) -> None:
    server = serve(thread_server, ca)
    chat = {"model": "poet", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    healthz, echoed, completion = h3_requests(
        server.port,
        [
            H3Request("GET", "/healthz"),
            H3Request("POST", "/echo", [("content-type", "text/plain")], b"x" * 200_000),
            H3Request(
                "POST",
                "/v1/chat/completions",
                [("content-type", "application/json")],
                orjson.dumps(chat),
            ),
        ],
        cafile=ca.cafile,
    )
    assert healthz.status == 200
    assert echoed.status == 200 and echoed.body == b"x" * 200_000
    assert echoed.headers["x-version"] == "3"
    assert completion.status == 200
    assert completion.headers["content-type"].startswith("text/event-stream")
    events = [
        orjson.loads(line[6:])
        for line in completion.body.decode().splitlines()
        if line.startswith("data: {")
    ]
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])
    assert text == "roses are red"
    # The stream came as it was produced (50 ms apart), not as one piece.
    assert len(completion.pieces) >= 3
    assert completion.body.decode().rstrip().endswith("data: [DONE]")


def test_concurrent_requests_on_one_connection(
    thread_server: Callable[..., Any], ca: ThrowawayCA
) -> None:
    server = serve(thread_server, ca)
    requests = [H3Request("POST", "/echo", [], str(i).encode() * 1000) for i in range(20)]
    responses = h3_requests(server.port, requests, cafile=ca.cafile, concurrent=True)
    assert [r.body for r in responses] == [r.body for r in requests]
    # Each request had a QUIC stream of its own: client bidi streams 0, 4, 8...
    assert sorted(r.stream_id for r in responses) == [4 * i for i in range(20)]


def test_trailers_and_limits(thread_server: Callable[..., Any], ca: ThrowawayCA) -> None:
    server = serve(thread_server, ca, max_body_size=1000, response_head_timeout=0.3)
    trailing, too_big, missing, late = h3_requests(
        server.port,
        [
            H3Request("GET", "/trailing"),
            H3Request("POST", "/echo", [], b"y" * 5000),
            H3Request("GET", "/nowhere"),
            H3Request("GET", "/hang"),
        ],
        cafile=ca.cafile,
    )
    assert late.status == 504
    assert trailing.body == b"part" and trailing.trailers == {"x-done": "yes"}
    assert too_big.status == 413
    assert orjson.loads(too_big.body)["error"]["code"] == "request_too_large"
    assert missing.status == 404


async def test_tcp_responses_advertise_http3(
    thread_server: Callable[..., Any], ca: ThrowawayCA
) -> None:
    server = serve(thread_server, ca)
    async with httpx.AsyncClient(verify=ssl.create_default_context(cafile=ca.cafile)) as client:
        reply = await client.get(f"https://127.0.0.1:{server.port}/healthz")
    assert reply.status_code == 200
    assert reply.headers["alt-svc"] == f'h3=":{server.port}"; ma=86400'
    # The UDP listener is on the same port number.
    assert [q.socket.getsockname()[1] for q in server.http3_listeners] == [server.port]


def test_no_alt_svc_without_http3(thread_server: Callable[..., Any], ca: ThrowawayCA) -> None:
    server = thread_server(app(), certfile=ca.server.certfile, keyfile=ca.server.keyfile)
    trusted = ssl.create_default_context(cafile=ca.cafile)
    reply = httpx.get(f"https://127.0.0.1:{server.port}/healthz", verify=trusted)
    assert reply.status_code == 200 and "alt-svc" not in reply.headers
    assert server.http3_listeners == []


def test_http3_needs_a_certificate() -> None:
    with pytest.raises(ValueError, match="certificate"):
        ServerConfig(http3=True)


def test_a_client_that_does_not_trust_the_ca_is_refused(
    thread_server: Callable[..., Any], ca: ThrowawayCA, tmp_path: Path
) -> None:
    other = make_ca(tmp_path, "another CA")
    server = serve(thread_server, ca)
    with pytest.raises(ConnectionError):  # aioquic: the handshake failed on our side
        h3_requests(server.port, [H3Request("GET", "/healthz")], cafile=other.cafile, timeout=3)
    # The server is unaffected.
    (ok,) = h3_requests(server.port, [H3Request("GET", "/healthz")], cafile=ca.cafile)
    assert ok.status == 200


def test_uamp_serve_http3(ca: ThrowawayCA) -> None:
    proc = spawn_serve("--certfile", ca.server.certfile, "--keyfile", ca.server.keyfile, "--http3")
    assert proc.stdout is not None
    try:
        seen: list[str] = []
        url = None
        while url is None and len(seen) < 200:
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(line)
            found = re.search(r"serving on https://127\.0\.0\.1:(\d+)", line)
            url = found and int(found.group(1))
        assert url, "".join(seen)
        assert f"HTTP/3 (QUIC, UDP port {url})" in seen[-1]
        port = int(url)
        trusted = ssl.create_default_context(cafile=ca.cafile)
        tcp = httpx.get(f"https://127.0.0.1:{port}/healthz", verify=trusted, timeout=5)
        assert tcp.headers["alt-svc"] == f'h3=":{port}"; ma=86400'
        (quic,) = h3_requests(port, [H3Request("GET", "/v1/models")], cafile=ca.cafile)
        assert quic.status == 200
        assert [m["id"] for m in orjson.loads(quic.body)["data"]] == ["demo"]
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(15) == 0


async def test_the_trio_h3_client_through_httpx(
    serve_app: Callable[..., Any], ca: ThrowawayCA
) -> None:
    from uamp_trio.client.h3 import open_h3

    server = await serve_app(
        app(), certfile=ca.server.certfile, keyfile=ca.server.keyfile, http3=True
    )
    chat = {"model": "poet", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    url = f"https://127.0.0.1:{server.port}"
    async with (
        open_h3(url, verify=ca.cafile) as h3,
        httpx.AsyncClient(transport=h3.transport(), base_url=h3.base_url) as http,
    ):
        echoed = await http.post("/echo", content=b"z" * 100_000)
        assert echoed.status_code == 200 and echoed.content == b"z" * 100_000
        assert echoed.headers["x-version"] == "3"
        assert echoed.http_version == "HTTP/3"
        pieces = []
        async with http.stream("POST", "/v1/chat/completions", json=chat) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            async for piece in stream.aiter_bytes():
                pieces.append(piece)
        text = b"".join(pieces).decode()
        assert "roses" in text and text.rstrip().endswith("data: [DONE]")
        assert len(pieces) >= 3  # as produced, not in one piece
        assert (await http.get("/nowhere")).status_code == 404


def test_spec_003_envelopes_over_http3_with_aioquic(
    thread_server: Callable[..., Any], ca: ThrowawayCA
) -> None:
    from tests._support.envelopes import envelope
    from uamp_proto.adapters.envelope import read_error
    from uamp_proto.envelope import decode_delta, decode_envelope, encode_envelope

    server = serve(thread_server, ca)
    ask = envelope(text="roses", to="urn:uamp:agent:poet")
    content = [("content-type", "application/uamp+json;v=1")]
    accepted, stream, replayed = h3_requests(
        server.port,
        [
            H3Request("POST", "/agents/poet/v1/messages", content, encode_envelope(ask)),
            H3Request("GET", f"/agents/poet/v1/stream/{ask.id}"),
            H3Request("POST", "/agents/poet/v1/messages", content, encode_envelope(ask)),
        ],
        cafile=ca.cafile,
    )
    assert accepted.status == 202
    assert accepted.headers["location"] == f"/agents/poet/v1/stream/{ask.id}"
    frames = [
        decode_delta(line[6:])
        for line in stream.body.decode().splitlines()
        if line.startswith("data: ")
    ]
    assert [f.delta_seq for f in frames] == list(range(len(frames)))
    assert frames[-1].type.value == "done" and frames[-1].payload["text"] == "roses are red"
    assert replayed.status == 403
    assert read_error(decode_envelope(replayed.body))[0] == "4.03"


def test_an_oversize_envelope_is_refused_from_its_declared_length_over_http3(
    thread_server: Callable[..., Any], ca: ThrowawayCA
) -> None:
    from tests._support.envelopes import envelope
    from uamp_proto.adapters.envelope import read_error
    from uamp_proto.envelope import decode_envelope, encode_envelope
    from uamp_trio.envelope.service import EnvelopeLimits

    built = create_app(
        [Words("poet", "roses", pause=0)], envelope_limits=EnvelopeLimits(max_size=1024)
    )
    server = thread_server(
        built, certfile=ca.server.certfile, keyfile=ca.server.keyfile, http3=True
    )
    content = ("content-type", "application/uamp+json;v=1")
    path = "/agents/poet/v1/messages"
    ask = encode_envelope(envelope(text="roses", to="urn:uamp:agent:poet"))
    declared, streamed, fine = h3_requests(
        server.port,
        [
            # The head declares 10 MB and the body never comes: the answer cannot wait for it.
            H3Request("POST", path, [content, ("content-length", "10000000")], head_only=True),
            # No declared length: refused once the DATA passes the limit.
            H3Request("POST", path, [content], b"x" * 5000),
            H3Request("POST", path, [content], ask),  # the connection goes on
        ],
        cafile=ca.cafile,
    )
    for refused in (declared, streamed):
        assert refused.status == 413
        assert read_error(decode_envelope(refused.body))[0] == "4.13"
    assert "1024" in read_error(decode_envelope(declared.body))[1]
    assert fine.status == 202


def test_over_http3_the_frames_name_the_quic_stream_that_carries_them(
    thread_server: Callable[..., Any], ca: ThrowawayCA
) -> None:
    from tests._support.envelopes import envelope
    from uamp_proto.adapters.envelope import read_error
    from uamp_proto.envelope import Delta, decode_delta, decode_envelope, encode_delta
    from uamp_proto.envelope import encode_envelope as encode

    server = serve(thread_server, ca)
    ask = envelope(text="roses", to="urn:uamp:agent:poet")
    path = f"/agents/poet/v1/stream/{ask.id}"

    def ack(stream_id: str, seq: int) -> H3Request:
        frame = Delta(
            delta_seq=seq, stream_id=stream_id, ts="2025-01-01T00:00:00Z", type="progress"
        )
        return H3Request("POST", path, [], encode_delta(frame))

    # Client-initiated bidirectional QUIC streams are 0, 4, 8...: the GET is stream 4.
    posted, stream, by_quic, by_own, unknown = h3_requests(
        server.port,
        [
            H3Request(
                "POST",
                "/agents/poet/v1/messages",
                [("content-type", "application/uamp+json;v=1")],
                encode(ask),
            ),
            H3Request("GET", path),
            ack("4", 0),
            ack(ask.id, 1),  # the exchange's own stream_id still names it
            ack("999", 2),
        ],
        cafile=ca.cafile,
    )
    assert posted.status == 202 and stream.stream_id == 4
    frames = [
        decode_delta(line[6:])
        for line in stream.body.decode().splitlines()
        if line.startswith("data: ")
    ]
    assert {f.stream_id for f in frames} == {"4"}  # spec 003 section 7: QUIC stream-ID == stream_id
    assert frames[-1].type.value == "done" and frames[-1].payload["text"] == "roses are red"
    assert (by_quic.status, by_own.status) == (204, 204)
    assert unknown.status == 404 and read_error(decode_envelope(unknown.body))[0] == "4.04"
