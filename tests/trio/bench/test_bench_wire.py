"""What ``uamp bench``'s HTTP requests look like on the wire, seen by a raw server on 127.0.0.1.

HTTP/1.1 goes over the lean pool (:mod:`uamp_agents.http1_pool`): each
request arrives whole in the server's first read, names the generator, and
takes the encodings httpx takes (a gzipped answer is read like a plain one).
Over TLS the certificate is checked unless ``--insecure``. A proxy set in
the environment sends the requests through httpx to the proxy, as before.
"""

from __future__ import annotations

import contextlib
import gzip
import ssl
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import h11
import orjson
import pytest
import trio

from tests._support.tls import make_ca
from uamp_trio.bench import BenchConfig, run_bench

REPLY = orjson.dumps({"choices": [{"message": {"role": "assistant", "content": "hello there"}}]})


@attrs.define
class Seen:
    """What the raw server saw: per request, its target, headers and the reads it took."""

    targets: list[bytes] = attrs.field(factory=list)
    headers: list[dict[bytes, bytes]] = attrs.field(factory=list)
    reads: list[int] = attrs.field(factory=list)
    connections: int = 0


async def _serve_connection(
    stream: trio.abc.Stream, seen: Seen, answer: Callable[[h11.Request], tuple[list[Any], bytes]]
) -> None:
    seen.connections += 1
    conn = h11.Connection(h11.SERVER)
    async with stream:
        while True:
            reads = 0
            request: h11.Request | None = None
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    reads += 1
                    conn.receive_data(data)
                elif isinstance(event, h11.Request):
                    request = event
                elif isinstance(event, h11.EndOfMessage):
                    break
                elif isinstance(event, h11.ConnectionClosed):
                    return
            assert request is not None
            seen.targets.append(request.target)
            seen.headers.append(dict(request.headers))
            seen.reads.append(reads)
            headers, body = answer(request)
            out = conn.send(h11.Response(status_code=200, headers=headers))
            out += conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage())
            await stream.send_all(out)
            conn.start_next_cycle()


def _plain(request: h11.Request) -> tuple[list[Any], bytes]:
    return [("content-type", "application/json"), ("content-length", str(len(REPLY)))], REPLY


def _gzipped(request: h11.Request) -> tuple[list[Any], bytes]:
    assert b"gzip" in dict(request.headers).get(b"accept-encoding", b"")
    body = gzip.compress(REPLY)
    headers = [("content-type", "application/json"), ("content-encoding", "gzip")]
    return [*headers, ("content-length", str(len(body)))], body


async def _raw_server(
    nursery: trio.Nursery,
    answer: Callable[[h11.Request], tuple[list[Any], bytes]],
    tls: ssl.SSLContext | None = None,
) -> tuple[Seen, int]:
    seen = Seen()

    async def connection(stream: trio.SocketStream) -> None:
        if tls is None:
            await _serve_connection(stream, seen, answer)
            return
        wrapped = trio.SSLStream(stream, tls, server_side=True)
        with contextlib.suppress(trio.BrokenResourceError):
            await wrapped.do_handshake()
            await _serve_connection(wrapped, seen, answer)

    serve = partial(trio.serve_tcp, host="127.0.0.1")
    listeners = await nursery.start(serve, connection, 0)
    return seen, listeners[0].socket.getsockname()[1]


@pytest.fixture
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    return monkeypatch


@pytest.mark.parametrize(("answer", "prompt"), [(_plain, "hi"), (_gzipped, "x" * 3000)])
async def test_each_request_arrives_whole_and_is_read(
    no_proxy: pytest.MonkeyPatch, answer: Any, prompt: str
) -> None:
    async with trio.open_nursery() as nursery:
        seen, port = await _raw_server(nursery, answer)
        config = BenchConfig(
            url=f"http://127.0.0.1:{port}/agents/raw",
            concurrency=3,
            requests=12,
            prompt=prompt,
            stream=False,
            headers=(("Authorization", "Bearer k"),),
        )
        summary, samples = await run_bench(config)
        nursery.cancel_scope.cancel()
    data = summary.to_json()
    assert data["ok"] == 12 and data["errors"] == 0
    assert [s.text for s in samples] == [len("hello there")] * 12
    # The decoded body is what is counted, as the dialect read it.
    assert data["bytes"] == 12 * len(REPLY)
    assert data["protocols"] == ["HTTP/1.1"]
    # Head and body in one write: the server has the whole request after its
    # first read, every time (httpx writes them apart).
    assert seen.reads == [1] * 12
    assert seen.targets == [b"/agents/raw/v1/chat/completions"] * 12
    assert 1 <= seen.connections <= 3  # kept alive
    for headers in seen.headers:
        assert headers[b"user-agent"].startswith(b"uamp-bench/")
        assert headers[b"authorization"] == b"Bearer k"
        assert headers[b"content-type"] == b"application/json"


async def test_a_proxy_in_the_environment_is_used(no_proxy: pytest.MonkeyPatch) -> None:
    async with trio.open_nursery() as nursery:
        seen, port = await _raw_server(nursery, _plain)
        # The raw server is the proxy: httpx sends it the request's absolute URL.
        no_proxy.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
        config = BenchConfig(
            url="http://agents.invalid/agents/raw", concurrency=2, requests=4, stream=False
        )
        data = (await run_bench(config))[0].to_json()
        nursery.cancel_scope.cancel()
    assert data["ok"] == 4, data["errors_by_kind"]
    assert seen.targets == [b"http://agents.invalid/agents/raw/v1/chat/completions"] * 4
    assert all(not h[b"user-agent"].startswith(b"uamp-bench/") for h in seen.headers)


async def test_tls_checks_the_certificate_unless_insecure(
    no_proxy: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    ca = make_ca(tmp_path)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(ca.server.certfile, ca.server.keyfile)
    async with trio.open_nursery() as nursery:
        seen, port = await _raw_server(nursery, _plain, tls)
        config = BenchConfig(
            url=f"https://127.0.0.1:{port}/agents/raw", concurrency=2, requests=4, stream=False
        )
        # The throwaway CA is nobody's: the handshake fails, no request is sent.
        refused = (await run_bench(config))[0].to_json()
        insecure = (await run_bench(attrs.evolve(config, insecure=True)))[0].to_json()
        nursery.cancel_scope.cancel()
    assert refused["errors_by_kind"] == {"connect": 4} and refused["ok"] == 0
    assert insecure["ok"] == 4 and insecure["protocols"] == ["HTTP/1.1"]
    assert seen.reads == [1] * 4  # one TLS record, one read


async def test_the_user_s_headers_win(no_proxy: pytest.MonkeyPatch) -> None:
    async with trio.open_nursery() as nursery:
        seen, port = await _raw_server(nursery, _plain)
        config = BenchConfig(
            url=f"http://127.0.0.1:{port}/agents/raw",
            requests=2,
            stream=False,
            headers=(("User-Agent", "mine/1"), ("Accept-Encoding", "identity")),
        )
        data = (await run_bench(config))[0].to_json()
        nursery.cancel_scope.cancel()
    assert data["ok"] == 2
    for headers in seen.headers:
        assert headers[b"user-agent"] == b"mine/1"
        assert headers[b"accept-encoding"] == b"identity"
