"""The HTTP/1.1 fast path over real sockets: framing, fallbacks to h11, timeouts, shutdown."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import trio
from wsproto import WSConnection
from wsproto.connection import ConnectionType
from wsproto.events import AcceptConnection, BytesMessage, TextMessage
from wsproto.events import Request as WSRequest

from uamp_trio.app import Router
from uamp_trio.engines.http import Request, Response, SendChunk, StreamingResponse, json_response
from uamp_trio.engines.server import Server
from uamp_trio.engines.websocket import ConnectionClosed, WebSocketRequest

TIMEOUT = 10


def make_router(slow_started: trio.Event | None = None) -> Router:
    router = Router()

    async def echo(request: Request) -> Response:
        return json_response(
            {
                "method": request.method,
                "path": request.path,
                "query": request.query,
                "body": request.body.decode("latin-1"),
                "version": request.http_version,
                "headers": request.headers.items(),
            }
        )

    async def chunks(request: Request) -> StreamingResponse:
        async def produce(send: SendChunk) -> None:
            for i in range(int(request.query or "3")):
                await send(b"part %d;" % i)
                await trio.sleep(0)

        return StreamingResponse(producer=produce, headers=[("content-type", "text/plain")])

    async def empty(request: Request) -> Response:
        return Response(status=204)

    async def closing(request: Request) -> Response:
        return Response(headers=[("connection", "close")], body=b"bye")

    async def slow(request: Request) -> Response:
        if slow_started is not None:
            slow_started.set()
        await trio.sleep(float(request.query))
        return Response(body=b"slept")

    async def ws_echo(pending: WebSocketRequest) -> None:
        ws = await pending.accept()
        try:
            while True:
                await ws.send(await ws.receive())
        except ConnectionClosed:
            pass

    router.add(["GET", "POST", "PUT", "HEAD"], "/echo", echo)
    router.add(["GET", "POST", "HEAD"], "/chunks", chunks)
    router.add(["GET", "POST"], "/empty", empty)
    router.add("GET", "/closing", closing)
    router.add("GET", "/slow", slow)
    router.add_websocket("/ws", ws_echo)
    return router


class Client:
    """A raw HTTP/1.1 client that reads responses one by one off one connection."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buf = b""

    @classmethod
    async def connect(cls, port: int) -> Client:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        stream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)
        return cls(stream)

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def _fill(self) -> None:
        chunk = await self.stream.receive_some(65536)
        if not chunk:
            raise EOFError(self.buf)
        self.buf += chunk

    async def _take(self, size: int) -> bytes:
        while len(self.buf) < size:
            await self._fill()
        out, self.buf = self.buf[:size], self.buf[size:]
        return out

    async def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            await self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    async def response(self, *, head_only: bool = False) -> tuple[int, dict[bytes, bytes], bytes]:
        """``(status, headers, body)`` of the next response (chunked bodies joined)."""
        status = int((await self._line()).split(b" ")[1])
        headers: dict[bytes, bytes] = {}
        while line := await self._line():
            name, _, value = line.partition(b":")
            headers[name.lower()] = value.strip()
        if head_only or status < 200 or status in (204, 304):
            return status, headers, b""
        if headers.get(b"transfer-encoding") == b"chunked":
            body = b""
            while size := int(await self._line(), 16):
                body += await self._take(size)
                assert await self._take(2) == b"\r\n"
            assert await self._take(2) == b"\r\n"  # no trailers
            return status, headers, body
        return status, headers, await self._take(int(headers[b"content-length"]))

    async def json(self) -> dict[str, Any]:
        status, _, body = await self.response()
        assert status == 200, body
        data: dict[str, Any] = json.loads(body)
        return data

    async def raw_until_close(self) -> bytes:
        with pytest.raises(EOFError) as info:
            while True:
                await self._fill()
        rest: bytes = info.value.args[0]
        return rest

    async def aclose(self) -> None:
        await self.stream.aclose()


Serve = Callable[..., Any]


@pytest.fixture
async def client(serve_app: Serve) -> AsyncIterator[Client]:
    """A raw connection to a server of :func:`make_router`'s routes, closed after the test."""
    server = await serve_app(make_router())
    connection = await Client.connect(server.port)
    yield connection
    await connection.aclose()


def post(body: bytes, path: bytes = b"/echo", extra: bytes = b"") -> bytes:
    return b"POST %s HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n%s\r\n%s" % (
        path,
        len(body),
        extra,
        body,
    )


async def test_keep_alive_requests_on_one_connection_see_normalised_headers(
    client: Client,
) -> None:
    with trio.fail_after(TIMEOUT):
        for i in range(5):
            body = b'{"n": %d}' % i
            await client.send(
                b"POST /echo?i=%d HTTP/1.1\r\nHOST: t\r\nX-Pad: \t spaced  out \t\r\n"
                b"Connection: keep-alive\r\nContent-Length: %d\r\n\r\n%s" % (i, len(body), body)
            )
            status, headers, raw = await client.response()
            assert status == 200 and b"connection" not in headers
            data = json.loads(raw)
            assert data["body"] == body.decode() and data["query"] == f"i={i}"
            assert data["method"] == "POST" and data["version"] == "1.1"
            assert data["headers"] == [
                ["host", "t"],
                ["x-pad", "spaced  out"],
                ["connection", "keep-alive"],
                ["content-length", str(len(body))],
            ]


async def test_pipelined_fast_and_deferred_requests_in_one_write(client: Client) -> None:
    with trio.fail_after(TIMEOUT):
        chunked = (
            b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
        )
        await client.send(
            post(b"one") + chunked + post(b"three") + b"GET /echo?four HTTP/1.1\r\nHost: t\r\n\r\n"
        )
        assert (await client.json())["body"] == "one"
        assert (await client.json())["body"] == "abcde"
        assert (await client.json())["body"] == "three"
        assert (await client.json())["query"] == "four"


async def test_requests_split_byte_by_byte(client: Client) -> None:
    with trio.fail_after(TIMEOUT):
        for _ in range(2):
            for byte in post(b"slowly"):
                await client.send(bytes([byte]))
                await trio.sleep(0.001)
            assert (await client.json())["body"] == "slowly"
        await client.send(post(b"whole"))  # and the fast path again
        assert (await client.json())["body"] == "whole"


async def test_body_in_writes_of_its_own(client: Client) -> None:
    with trio.fail_after(TIMEOUT):
        body = b"x" * 200_000  # several reads
        request = post(body)
        head_size = len(request) - len(body)
        await client.send(request[:head_size])
        await trio.sleep(0.05)
        await client.send(body[:10])
        await trio.sleep(0.05)
        await client.send(body[10:] + post(b"next"))
        assert (await client.json())["body"] == body.decode()
        assert (await client.json())["body"] == "next"


async def test_a_body_after_its_head_is_waited_for_not_read_first(
    serve_app: Serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first read of a late body waits for the socket: no read that finds nothing yet."""
    server = await serve_app(make_router())
    client = await Client.connect(server.port)
    reads: list[int] = []  # the server's reads through trio's read-first path
    receive_some = trio.SocketStream.receive_some

    async def counted(self: trio.SocketStream, max_bytes: int | None = None) -> Any:
        data = await receive_some(self, max_bytes)
        if self.socket.getsockname()[1] == server.port:
            reads.append(len(data))
        return data

    monkeypatch.setattr(trio.SocketStream, "receive_some", counted)
    with trio.fail_after(TIMEOUT):
        request = post(b"late body")
        await client.send(request[: -len(b"late body")])
        await trio.sleep(0.05)
        await client.send(b"late body")
        assert (await client.json())["body"] == "late body"
    assert reads == []  # (trio's read-first would have been called, failed and retried)
    await client.aclose()


async def test_body_over_the_limit_gets_413(serve_app: Serve) -> None:
    with trio.fail_after(TIMEOUT):
        server = await serve_app(make_router(), max_body_size=10)
        client = await Client.connect(server.port)
        await client.send(post(b"0123456789"))  # at the limit
        assert (await client.json())["body"] == "0123456789"
        await client.send(post(b"0123456789a"))
        status, headers, body = await client.response()
        assert status == 413 and headers[b"connection"] == b"close"
        assert json.loads(body)["error"]["code"] == "request_too_large"
        assert await client.raw_until_close() == b""


async def test_slow_body_gets_408_and_slow_head_gets_408(serve_app: Serve) -> None:
    with trio.fail_after(TIMEOUT):
        server = await serve_app(make_router(), body_timeout=0.3, header_timeout=0.3)
        client = await Client.connect(server.port)
        await client.send(post(b"fine"))
        assert (await client.json())["body"] == "fine"
        start = trio.current_time()
        await client.send(post(b"0123456789")[:-4])  # whole head, part of the body
        status, headers, body = await client.response()
        assert trio.current_time() - start >= 0.25
        assert status == 408 and headers[b"connection"] == b"close"
        assert json.loads(body)["error"]["code"] == "request_timeout"
        assert "body" in json.loads(body)["error"]["message"]
        assert await client.raw_until_close() == b""

        client = await Client.connect(server.port)
        await client.send(post(b"fine"))
        assert (await client.json())["body"] == "fine"
        await client.send(b"GET /echo HTTP/1.1\r\nHo")
        status, _, body = await client.response()
        assert status == 408 and "head" in json.loads(body)["error"]["message"]
        assert await client.raw_until_close() == b""


async def test_peer_closing_mid_body_ends_the_connection(serve_app: Serve) -> None:
    with trio.fail_after(TIMEOUT):
        server = await serve_app(make_router())
        client = await Client.connect(server.port)
        await client.send(post(b"0123456789")[:-4])
        await client.stream.send_eof()
        rest = await client.raw_until_close()
        assert b"200" not in rest
        client = await Client.connect(server.port)  # the server is still there
        await client.send(post(b"ok"))
        assert (await client.json())["body"] == "ok"
        await client.aclose()


async def test_deferred_requests_between_fast_ones(client: Client) -> None:
    with trio.fail_after(TIMEOUT):
        await client.send(post(b"fast"))
        assert (await client.json())["body"] == "fast"
        await client.send(
            b"PUT /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"4\r\nbody\r\n0\r\n\r\n"
        )
        assert (await client.json())["body"] == "body"
        await client.send(post(b"fast again"))
        assert (await client.json())["body"] == "fast again"
        await client.send(post(b"expected", extra=b"Expect: 100-continue\r\n")[:-8])
        assert (await client.response())[0] == 100
        await client.send(b"expected")
        assert (await client.json())["body"] == "expected"
        await client.send(b"HEAD /echo HTTP/1.1\r\nHost: t\r\n\r\n")
        status, headers, body = await client.response(head_only=True)
        assert status == 200 and int(headers[b"content-length"]) > 0
        await client.send(post(b"then fast"))
        assert (await client.json())["body"] == "then fast"
        await client.send(b"GET /echo?old HTTP/1.0\r\n\r\n")
        status, headers, body = await client.response()
        assert status == 200 and headers[b"connection"] == b"close"
        assert json.loads(body)["version"] == "1.0"
        assert await client.raw_until_close() == b""


async def test_streaming_response_is_framed_as_h11_frames_it(serve_app: Serve) -> None:
    with trio.fail_after(TIMEOUT):
        server = await serve_app(make_router())
        client = await Client.connect(server.port)
        fast = b"GET /chunks?4 HTTP/1.1\r\nHost: t\r\n\r\n"
        # A chunked (empty) request body sends this one through h11.
        slow = b"POST /chunks?4 HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
        raw: list[bytes] = []
        for request in (fast, slow, fast):
            await client.send(request)
            status, headers, body = await client.response()
            assert status == 200 and body == b"part 0;part 1;part 2;part 3;"
            assert headers[b"transfer-encoding"] == b"chunked"
            assert client.buf == b""
            # Read the same response again as raw bytes: the fast path writes
            # exactly what h11 writes (head included), batches aside.
            await client.send(request.replace(b"?4", b"?1"))
            while not client.buf.endswith(b"0\r\n\r\n"):
                await client._fill()
            raw.append(client.buf)
            client.buf = b""
        assert raw[0] == raw[1] == raw[2]
        assert raw[0] == (
            b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\nserver: uamp\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n7\r\npart 0;\r\n0\r\n\r\n"
        )
        await client.send(b"HEAD /chunks HTTP/1.1\r\nHost: t\r\n\r\n")
        status, headers, _ = await client.response(head_only=True)
        assert status == 200 and headers[b"transfer-encoding"] == b"chunked"
        await client.send(post(b"after"))
        assert client.buf == b""
        assert (await client.json())["body"] == "after"
        await client.aclose()


async def test_responses_the_templates_leave_to_h11(client: Client) -> None:
    with trio.fail_after(TIMEOUT):
        await client.send(b"GET /empty HTTP/1.1\r\nHost: t\r\n\r\n")
        status, headers, _ = await client.response()
        assert status == 204 and b"content-length" not in headers
        await client.send(post(b"still open"))
        assert (await client.json())["body"] == "still open"
        # h11 is handed this request's bytes alone, also when its body came
        # later and a request before it shared its first read.
        late = post(b"late body", path=b"/empty")
        await client.send(post(b"before") + late[:-4])
        assert (await client.json())["body"] == "before"
        await trio.sleep(0.05)
        await client.send(late[-4:])
        status, headers, _ = await client.response()
        assert status == 204 and b"content-length" not in headers
        await client.send(post(b"open"))
        assert (await client.json())["body"] == "open"
        await client.send(b"GET /closing HTTP/1.1\r\nHost: t\r\n\r\n" + post(b"never read"))
        status, headers, body = await client.response()
        assert status == 200 and body == b"bye" and headers[b"connection"] == b"close"
        assert await client.raw_until_close() == b""


async def test_websocket_upgrade_after_fast_requests(client: Client) -> None:
    with trio.fail_after(TIMEOUT):
        await client.send(post(b"first"))
        assert (await client.json())["body"] == "first"
        ws = WSConnection(ConnectionType.CLIENT)
        await client.send(ws.send(WSRequest(host="t", target="/ws")))
        while True:
            await client._fill()
            ws.receive_data(client.buf)
            client.buf = b""
            events = list(ws.events())
            if events:
                break
        assert isinstance(events[0], AcceptConnection)
        await client.send(ws.send(TextMessage(data="hello")) + ws.send(BytesMessage(data=b"\x00")))
        got: list[str | bytes] = []
        while len(got) < 2:
            ws.receive_data(await client.stream.receive_some(65536))
            got += [e.data for e in ws.events() if isinstance(e, TextMessage | BytesMessage)]
        assert got == ["hello", b"\x00"]


async def test_the_body_timeout_holds_when_it_is_the_only_finite_timeout(serve_app: Serve) -> None:
    """The server's sweeper ends a slow fast-path body (no deadline of its own): it must run."""
    inf = float("inf")
    with trio.fail_after(TIMEOUT):
        server = await serve_app(
            make_router(),
            body_timeout=0.3,
            idle_timeout=inf,
            response_timeout=inf,
            response_idle_timeout=inf,
            response_head_timeout=inf,
        )
        client = await Client.connect(server.port)
        start = trio.current_time()
        await client.send(post(b"0123456789")[:-4])  # whole head, part of the body
        status, _, body = await client.response()
        assert trio.current_time() - start >= 0.25
        assert status == 408 and json.loads(body)["error"]["code"] == "request_timeout"


async def test_long_endpoint_and_body_outlive_the_idle_timeout(serve_app: Serve) -> None:
    # The connection's cancel scope has the idle deadline only while idle.
    with trio.fail_after(TIMEOUT):
        server = await serve_app(make_router(), idle_timeout=0.3, body_timeout=3)
        client = await Client.connect(server.port)
        await client.send(b"GET /slow?0.6 HTTP/1.1\r\nHost: t\r\n\r\n")
        assert (await client.response())[2] == b"slept"
        await client.send(post(b"a")[:-1])
        await trio.sleep(0.6)
        await client.send(b"a")
        assert (await client.json())["body"] == "a"
        start = trio.current_time()
        assert await client.raw_until_close() == b""  # idle: closed without a word
        assert trio.current_time() - start >= 0.25


async def test_shutdown_closes_idle_fast_connections_and_marks_busy_ones() -> None:
    with trio.fail_after(TIMEOUT):
        started = trio.Event()
        server = Server(make_router(started), port=0, shutdown_grace=5)
        async with trio.open_nursery() as nursery:
            port = await nursery.start(server.serve)
            idle = await Client.connect(port)
            await idle.send(post(b"x"))
            assert (await idle.json())["body"] == "x"
            busy = await Client.connect(port)
            await busy.send(b"GET /slow?0.3 HTTP/1.1\r\nHost: t\r\n\r\n" + post(b"y"))
            await started.wait()
            server.shutdown()
            start = trio.current_time()
            assert await idle.raw_until_close() == b""
            assert trio.current_time() - start < 1  # at once, not after the grace
            status, headers, body = await busy.response()
            assert status == 200 and body == b"slept" and headers[b"connection"] == b"close"
            assert await busy.raw_until_close() == b""  # the pipelined one is not served
        await idle.aclose()
        await busy.aclose()
