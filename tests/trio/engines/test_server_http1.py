"""The server over HTTP/1.1: keep-alive, limits, errors, streaming, WebSocket, shutdown."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import trio
import trio_websocket

from uamp_trio.app import Router
from uamp_trio.engines.http import HTTPError, Request, Response, StreamingResponse, json_response
from uamp_trio.engines.server import Server
from uamp_trio.engines.websocket import ConnectionClosed, WebSocketRequest

TIMEOUT = 10


def make_router() -> tuple[Router, dict[str, trio.Event]]:
    router = Router()
    events = {"release": trio.Event(), "started": trio.Event()}

    async def echo(request: Request) -> Response:
        return json_response(
            {
                "method": request.method,
                "path": request.path,
                "query": request.query,
                "params": request.path_params,
                "body": request.body.decode(),
                "version": request.http_version,
            }
        )

    async def boom(request: Request) -> Response:
        raise RuntimeError("endpoint bug")

    async def teapot(request: Request) -> Response:
        raise HTTPError(418, "short and stout", code="teapot")

    async def gated_stream(request: Request) -> StreamingResponse:
        async def chunks() -> AsyncIterator[bytes]:
            yield b"first;"
            events["started"].set()
            await events["release"].wait()
            yield b"second;"

        return StreamingResponse.from_iterable(chunks(), headers=[("content-type", "text/plain")])

    async def ws_echo(pending: WebSocketRequest) -> None:
        ws = await pending.accept()
        try:
            while True:
                message = await ws.receive()
                await ws.send(message)
        except ConnectionClosed:
            pass

    async def ws_refuse(pending: WebSocketRequest) -> None:
        await pending.reject(401, b'{"error": "no"}')

    router.add(["GET", "POST"], "/echo/{name}", echo)
    router.add("GET", "/boom", boom)
    router.add("GET", "/teapot", teapot)
    router.add("GET", "/stream", gated_stream)
    router.add_websocket("/ws/{room}", ws_echo)
    router.add_websocket("/refuse", ws_refuse)
    return router, events


async def raw_exchange(port: int, data: bytes, *, until_close: bool = True) -> bytes:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(data)
        out = b""
        while True:
            chunk = await stream.receive_some(65536)
            if not chunk:
                return out
            out += chunk
            if not until_close and b"\r\n\r\n" in out:
                return out


def body_of(raw: bytes) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(raw.split(b"\r\n\r\n", 1)[1])
    return body


async def test_keep_alive_serves_several_requests_on_one_connection(serve_app) -> None:  # type: ignore[no-untyped-def]
    with trio.fail_after(TIMEOUT):
        router, _ = make_router()
        server = await serve_app(router)
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        async with stream:
            for i in range(3):
                body = f"hello {i}".encode()
                await stream.send_all(
                    b"POST /echo/a.b-c?x=1 HTTP/1.1\r\nHost: t\r\n"
                    + f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                raw = b""
                while b"}" not in raw:
                    raw += await stream.receive_some(65536)
                head, payload = raw.split(b"\r\n\r\n", 1)
                assert head.startswith(b"HTTP/1.1 200")
                assert b"connection: close" not in head.lower()
                data = json.loads(payload)
                assert data["body"] == f"hello {i}"
                assert data["params"] == {"name": "a.b-c"}
                assert data["query"] == "x=1"


async def test_pipelined_requests_close_and_http10_get_h11_identical_heads(serve_app) -> None:  # type: ignore[no-untyped-def]
    # Plain responses skip h11's send path: the head must be h11's, pipelined
    # requests must each get their answer, and close / HTTP/1.0 must close.
    with trio.fail_after(TIMEOUT):
        router, _ = make_router()
        server = await serve_app(router)
        req = b"GET /echo/p HTTP/1.1\r\nHost: t\r\n\r\n"
        raw = await raw_exchange(
            server.port, req + req + b"GET /echo/q HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
        )
        parts = raw.split(b"HTTP/1.1 200 OK\r\n")
        assert len(parts) == 4 and parts[0] == b""
        heads = [p.split(b"\r\n\r\n", 1)[0] for p in parts[1:]]
        length = len(parts[1].split(b"\r\n\r\n", 1)[1])
        assert (
            heads[0]
            == heads[1]
            == (b"content-type: application/json\r\nserver: uamp\r\ncontent-length: %d" % length)
        )
        assert b"connection: close" in heads[2].lower()
        assert body_of(b"HTTP/1.1 200 OK\r\n" + parts[3])["path"] == "/echo/q"
        old = await raw_exchange(server.port, b"GET /echo/r HTTP/1.0\r\n\r\n")
        assert old.startswith(b"HTTP/1.1 200 ") and b"connection: close" in old.lower()


async def test_connection_close_requests_are_answered_as_h11_answers_them(serve_app) -> None:  # type: ignore[no-untyped-def]
    # A request with Connection: close (a health checker's) takes the fast
    # path; its answer, plain or streamed, must be byte for byte what h11
    # writes for the same request (here: its head split across two reads,
    # which only h11 reads), then the connection ends, a pipelined request
    # after it unanswered.
    router, _ = make_router()

    async def words(request: Request) -> StreamingResponse:
        async def chunks() -> AsyncIterator[bytes]:
            for word in (b"one ", b"two ", b"three"):
                yield word
                await trio.sleep(0.01)

        return StreamingResponse.from_iterable(chunks(), headers=[("content-type", "text/plain")])

    router.add("GET", "/words", words)
    with trio.fail_after(TIMEOUT):
        server = await serve_app(router)
        for path, body in ((b"/echo/c", b'"path":"/echo/c"'), (b"/words", b"one ")):
            req = b"GET %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n" % path
            after = b"GET /echo/d HTTP/1.1\r\nHost: t\r\n\r\n"
            fast = await raw_exchange(server.port, req + after)
            stream = await trio.open_tcp_stream("127.0.0.1", server.port)
            async with stream:
                await stream.send_all(req[:12])
                await trio.sleep(0.05)  # the server has read a part of the head
                await stream.send_all(req[12:] + after)
                slow = b""
                while chunk := await stream.receive_some(65536):
                    slow += chunk
            assert fast == slow
            assert fast.count(b"HTTP/1.1 200 OK") == 1 and b"/echo/d" not in fast
            assert b"\r\nConnection: close\r\n" in fast.split(b"\r\n\r\n")[0] + b"\r\n"
            assert body in fast


async def test_bad_http_gets_400_json(serve_app) -> None:  # type: ignore[no-untyped-def]
    with trio.fail_after(TIMEOUT):
        router, _ = make_router()
        server = await serve_app(router)
        raw = await raw_exchange(server.port, b"THIS IS NOT HTTP\r\n\r\n")
        assert raw.startswith(b"HTTP/1.1 400")
        error = body_of(raw)["error"]
        assert error["type"] == "invalid_request_error"
        assert error["code"] == "bad_request"
        assert error["message"]


async def test_content_length_over_limit_gets_413_without_reading_body(serve_app) -> None:  # type: ignore[no-untyped-def]
    with trio.fail_after(TIMEOUT):
        router, _ = make_router()
        server = await serve_app(router, max_body_size=100)
        raw = await raw_exchange(
            server.port, b"POST /echo/x HTTP/1.1\r\nHost: t\r\nContent-Length: 101\r\n\r\n"
        )
        assert raw.startswith(b"HTTP/1.1 413")
        assert body_of(raw)["error"]["code"] == "request_too_large"


async def test_body_sent_after_an_early_413_is_drained_so_the_answer_arrives(serve_app) -> None:  # type: ignore[no-untyped-def]
    """A client that sends its whole body before reading still reads the 413, then EOF.

    The server answers from the declared length and drops the body the client
    goes on sending (on Linux in the kernel, without copying it); had it
    closed with the body unread, the kernel would reset the connection and
    the client would lose the answer.
    """
    with trio.fail_after(TIMEOUT):
        router, _ = make_router()
        server = await serve_app(router, max_body_size=100)
        size = 900 * 1024  # more than the socket buffers hold unread
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        async with stream:
            await stream.send_all(
                b"POST /echo/x HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % size
            )
            await stream.send_all(b"x" * size)  # blocks unless the server reads it
            raw = b""
            while chunk := await stream.receive_some(65536):
                raw += chunk
        assert raw.startswith(b"HTTP/1.1 413")
        assert body_of(raw)["error"]["code"] == "request_too_large"


async def test_a_body_in_pieces_then_a_pipelined_request_are_both_served(serve_app) -> None:  # type: ignore[no-untyped-def]
    """The rest of a body read in many small reads, and the next request after it, intact."""
    with trio.fail_after(TIMEOUT):
        router, _ = make_router()
        server = await serve_app(router)
        body = bytes(range(97, 123)) * 8000  # 208,000 bytes, more than one read
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        async with stream:
            await stream.send_all(
                b"POST /echo/a HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % len(body)
                + body[:1000]
            )
            await trio.sleep(0.05)  # the server has read the head and waits for the rest
            pieces = [body[i : i + 50_000] for i in range(1000, len(body), 50_000)]
            for piece in pieces[:-1]:
                await stream.send_all(piece)
                await trio.sleep(0.01)
            await stream.send_all(
                pieces[-1] + b"GET /echo/b HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
            )
            raw = b""
            while chunk := await stream.receive_some(65536):
                raw += chunk
        first, second = raw.split(b"HTTP/1.1 200", 2)[1:]
        assert json.loads(first.split(b"\r\n\r\n", 1)[1])["body"] == body.decode()
        assert json.loads(second.split(b"\r\n\r\n", 1)[1])["path"] == "/echo/b"


async def test_chunked_body_over_limit_gets_413(serve_app) -> None:  # type: ignore[no-untyped-def]
    with trio.fail_after(TIMEOUT):
        router, _ = make_router()
        server = await serve_app(router, max_body_size=100)
        chunk = b"x" * 80
        req = (
            b"POST /echo/x HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
            + b"50\r\n"
            + chunk
            + b"\r\n"
            + b"50\r\n"
            + chunk
            + b"\r\n0\r\n\r\n"
        )
        raw = await raw_exchange(server.port, req)
        assert raw.startswith(b"HTTP/1.1 413")
        # At the limit exactly is fine.
        ok = (
            b"POST /echo/x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n64\r\n" + b"y" * 100 + b"\r\n0\r\n\r\n"
        )
        raw = await raw_exchange(server.port, ok)
        assert raw.startswith(b"HTTP/1.1 200")
        assert body_of(raw)["body"] == "y" * 100


async def test_idle_keep_alive_connection_is_closed(serve_app) -> None:  # type: ignore[no-untyped-def]
    with trio.fail_after(TIMEOUT):
        router, _ = make_router()
        server = await serve_app(router, idle_timeout=0.3)
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        async with stream:
            await stream.send_all(b"GET /echo/x HTTP/1.1\r\nHost: t\r\n\r\n")
            raw = await stream.receive_some(65536)
            assert raw.startswith(b"HTTP/1.1 200")
            start = trio.current_time()
            assert await stream.receive_some(65536) == b""  # closed by the server
            assert trio.current_time() - start >= 0.25


async def test_slow_request_head_gets_408(serve_app) -> None:  # type: ignore[no-untyped-def]
    with trio.fail_after(TIMEOUT):
        router, _ = make_router()
        server = await serve_app(router, header_timeout=0.3)
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        async with stream:
            await stream.send_all(b"GET /echo/x HTTP/1.1\r\nHo")
            raw = b""
            while True:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    break
                raw += chunk
        assert raw.startswith(b"HTTP/1.1 408")
        assert body_of(raw)["error"]["code"] == "request_timeout"


async def test_routing_errors_and_endpoint_failures_are_json(serve_app) -> None:  # type: ignore[no-untyped-def]
    with trio.fail_after(TIMEOUT):
        router, _ = make_router()
        server = await serve_app(router)
        async with httpx.AsyncClient(base_url=server.url) as client:
            r = await client.get("/nowhere")
            assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
            r = await client.delete("/echo/x")
            assert r.status_code == 405
            assert r.headers["allow"] == "GET, POST"
            r = await client.get("/teapot")
            assert r.status_code == 418 and r.json()["error"]["message"] == "short and stout"
            r = await client.get("/boom")
            assert r.status_code == 500
            assert r.json()["error"] == {
                "message": "The server failed while handling the request.",
                "type": "server_error",
                "param": None,
                "code": "internal_error",
            }
            r = await client.get("/echo/still-alive")  # the server survived
            assert r.status_code == 200 and r.json()["params"] == {"name": "still-alive"}


async def test_streaming_response_is_chunked_and_incremental(serve_app) -> None:  # type: ignore[no-untyped-def]
    with trio.fail_after(TIMEOUT):
        router, events = make_router()
        server = await serve_app(router)
        async with (
            httpx.AsyncClient(base_url=server.url) as client,
            client.stream("GET", "/stream") as r,
        ):
            assert r.headers["transfer-encoding"] == "chunked"
            parts = r.aiter_raw()
            first = await parts.__anext__()
            # The first chunk arrived while the endpoint is still blocked.
            assert first == b"first;"
            assert not events["release"].is_set()
            events["release"].set()
            rest = b"".join([chunk async for chunk in parts])
            assert rest == b"second;"


async def test_websocket_hand_over_echoes(serve_app) -> None:  # type: ignore[no-untyped-def]
    with trio.fail_after(TIMEOUT):
        router, _ = make_router()
        server = await serve_app(router)
        url = f"ws://127.0.0.1:{server.port}/ws/lobby"
        async with trio_websocket.open_websocket_url(url) as ws:
            await ws.send_message("hello")
            assert await ws.get_message() == "hello"
            await ws.send_message(b"\x00\x01binary")
            assert await ws.get_message() == b"\x00\x01binary"
            big = "x" * 200_000  # several reads, one message
            await ws.send_message(big)
            assert await ws.get_message() == big


async def test_websocket_rejections(serve_app) -> None:  # type: ignore[no-untyped-def]
    with trio.fail_after(TIMEOUT):
        router, _ = make_router()
        server = await serve_app(router)
        with pytest.raises(trio_websocket.ConnectionRejected) as info:
            async with trio_websocket.open_websocket_url(f"ws://127.0.0.1:{server.port}/refuse"):
                pass
        assert info.value.status_code == 401
        with pytest.raises(trio_websocket.ConnectionRejected) as info:
            async with trio_websocket.open_websocket_url(f"ws://127.0.0.1:{server.port}/nope"):
                pass
        assert info.value.status_code == 404


async def test_graceful_shutdown_lets_in_flight_request_finish() -> None:
    with trio.fail_after(TIMEOUT):
        router, events = make_router()
        server = Server(router, port=0, shutdown_grace=5)
        async with trio.open_nursery() as nursery:
            port = await nursery.start(server.serve)
            # An idle keep-alive connection, closed at once by the shutdown.
            idle = await trio.open_tcp_stream("127.0.0.1", port)
            async with (
                httpx.AsyncClient(base_url=server.url) as client,
                client.stream("GET", "/stream") as r,
            ):
                parts = r.aiter_raw()
                assert await parts.__anext__() == b"first;"
                server.shutdown()
                assert await idle.receive_some(100) == b""
                with pytest.raises(OSError):
                    await trio.open_tcp_stream("127.0.0.1", port)
                events["release"].set()
                assert b"".join([c async for c in parts]) == b"second;"
        # serve() returned on its own: the nursery is done.
        await idle.aclose()


async def test_grace_period_over_cancels_stuck_requests() -> None:
    with trio.fail_after(TIMEOUT):
        router, events = make_router()
        server = Server(router, port=0, shutdown_grace=0.3)
        async with trio.open_nursery() as nursery:
            port = await nursery.start(server.serve)
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            await stream.send_all(b"GET /stream HTTP/1.1\r\nHost: t\r\n\r\n")
            await events["started"].wait()
            start = trio.current_time()
            server.shutdown()
        assert trio.current_time() - start < 3
        data = b""
        while chunk := await stream.receive_some(65536):
            data += chunk
        assert b"first;" in data and b"second;" not in data
        await stream.aclose()


async def test_cancelling_serve_stops_everything() -> None:
    with trio.fail_after(TIMEOUT):
        router, events = make_router()
        server = Server(router, port=0)
        async with trio.open_nursery() as nursery:
            port = await nursery.start(server.serve)
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            await stream.send_all(b"GET /stream HTTP/1.1\r\nHost: t\r\n\r\n")
            await events["started"].wait()
            nursery.cancel_scope.cancel()
        with pytest.raises(OSError):
            await trio.open_tcp_stream("127.0.0.1", port)
        await stream.aclose()
