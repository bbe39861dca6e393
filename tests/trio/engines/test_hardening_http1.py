"""HTTP/1.1 under hostile heads: smuggling framing, bad methods, the exact head limit, reasons."""

from __future__ import annotations

import contextlib
import json

import pytest
import trio

from tests._support.raw import receive_or_eof
from uamp_trio.app import Router
from uamp_trio.engines.http import Request, Response, json_response

TIMEOUT = 10


def make_router() -> tuple[Router, list[str]]:
    router = Router()
    seen: list[str] = []

    async def echo(request: Request) -> Response:
        seen.append(request.method)
        return json_response({"method": request.method, "body": request.body.decode()})

    router.add(["GET", "POST"], "/echo", echo)
    return router, seen


async def exchange(port: int, data: bytes) -> tuple[bytes, bool]:
    """Send ``data``; the bytes received and whether the server closed the connection."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        with contextlib.suppress(trio.BrokenResourceError):
            await stream.send_all(data)
        out = b""
        while True:
            chunk = await receive_or_eof(stream)
            if not chunk:
                return out, True
            out += chunk
            head, sep, rest = out.partition(b"\r\n\r\n")
            if sep and b"content-length:" in head.lower():
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                if len(rest) >= length and b"connection: close" not in head.lower():
                    return out, False  # a whole response on a connection kept open


async def test_content_length_with_transfer_encoding_is_400_and_closed(serve_app) -> None:  # type: ignore[no-untyped-def]
    # RFC 9112 section 6.3: both framings at once is the request smuggling
    # shape; the request must not reach the endpoint and the connection closes.
    with trio.fail_after(TIMEOUT):
        router, seen = make_router()
        server = await serve_app(router)
        raw, closed = await exchange(
            server.port,
            b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
        )
        assert raw.startswith(b"HTTP/1.1 400 Bad Request\r\n")
        assert json.loads(raw.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "bad_request"
        assert closed and seen == []


@pytest.mark.parametrize(
    ("request_line", "status"),
    [
        (b"head /echo HTTP/1.1", b"501 Not Implemented"),
        (b"get /echo HTTP/1.1", b"501 Not Implemented"),
        (b"BREW /echo HTTP/1.1", b"501 Not Implemented"),
        (b"G(T /echo HTTP/1.1", b"400 Bad Request"),
        (b"GET /echo HTTP/9.9", b"505 HTTP Version Not Supported"),
        (b"GET  /echo HTTP/1.1", b"400 Bad Request"),
        (b"GET /ec\x00ho HTTP/1.1", b"400 Bad Request"),
    ],
)
async def test_malformed_or_unknown_heads_are_answered_and_closed(  # type: ignore[no-untyped-def]
    serve_app, request_line: bytes, status: bytes
) -> None:
    # Methods are case-sensitive (RFC 9110 section 9.1): "head" is not HEAD
    # but an unknown method, 501; a head that is not HTTP gets 400.
    with trio.fail_after(TIMEOUT):
        router, seen = make_router()
        server = await serve_app(router)
        raw, closed = await exchange(server.port, request_line + b"\r\nHost: t\r\n\r\n")
        assert raw.startswith(b"HTTP/1.1 " + status + b"\r\n"), raw[:60]
        assert closed and seen == []


@pytest.mark.parametrize("limit", [1024, 8192, 200_000, 1 << 20])
async def test_head_limit_is_exact(serve_app, limit: int) -> None:  # type: ignore[no-untyped-def]
    with trio.fail_after(TIMEOUT):
        router, seen = make_router()
        server = await serve_app(router, max_header_size=limit)

        def head(size: int) -> bytes:
            start = b"GET /echo HTTP/1.1\r\nHost: t\r\nX-Pad: "
            return start + b"a" * (size - len(start) - 4) + b"\r\n\r\n"

        ok, _ = await exchange(server.port, head(limit))
        assert ok.startswith(b"HTTP/1.1 200 OK\r\n"), ok[:60]
        big, closed = await exchange(server.port, head(limit + 1))
        assert big.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"), big[:60]
        assert closed and seen == ["GET"]


async def test_status_lines_carry_reason_phrases(serve_app) -> None:  # type: ignore[no-untyped-def]
    with trio.fail_after(TIMEOUT):
        router, _ = make_router()
        server = await serve_app(router)
        # fast path, h11 path (HTTP/1.0) and an error from the router
        fast, _ = await exchange(server.port, b"GET /echo HTTP/1.1\r\nHost: t\r\n\r\n")
        old, _ = await exchange(server.port, b"GET /echo HTTP/1.0\r\n\r\n")
        missing, _ = await exchange(server.port, b"GET /nowhere HTTP/1.1\r\nHost: t\r\n\r\n")
        assert fast.startswith(b"HTTP/1.1 200 OK\r\n")
        assert old.startswith(b"HTTP/1.1 200 OK\r\n")
        assert missing.startswith(b"HTTP/1.1 404 Not Found\r\n")


async def test_reason_phrases_are_rfc_9110s(serve_app) -> None:  # type: ignore[no-untyped-def]
    """413 is "Content Too Large" (RFC 9110 section 15.5.14), not RFC 7231's name."""
    with trio.fail_after(TIMEOUT):
        router, _ = make_router()
        server = await serve_app(router, max_body_size=10)
        big, _ = await exchange(
            server.port, b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 11\r\n\r\n"
        )
        assert big.startswith(b"HTTP/1.1 413 Content Too Large\r\n"), big[:60]
