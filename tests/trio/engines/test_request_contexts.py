"""Each HTTP/1.1 request on a kept-alive connection runs in a context of its own.

One task serves a connection's requests in turn. What a handler, a
streamed body or middleware sets in a context variable and never resets
must not be seen by the next request on the connection (behind a proxy
that reuses connections, another client's), as it is not on HTTP/2, where
each stream has a task. What was set before the server started is seen.
"""

from __future__ import annotations

import contextvars
from collections.abc import AsyncIterator
from typing import Any

import h11
import httpx
import trio

from uamp_trio import DemoAgent, create_app
from uamp_trio.app import Router
from uamp_trio.engines.http import Request, Response, StreamingResponse, json_response
from uamp_trio.engines.websocket import WebSocketRequest

TIMEOUT = 10

#: What a request's code sets and never resets (a user, a tenant, a span).
MARK: contextvars.ContextVar[str | None] = contextvars.ContextVar("test_request_mark", default=None)
#: Set before the server starts: every request sees it.
BASE: contextvars.ContextVar[str] = contextvars.ContextVar("test_request_base", default="unset")


def marking_router(seen: list[tuple[str, str | None, str]]) -> Router:
    """Endpoints that note the mark and the base they find, then set their own mark."""

    def note(where: str) -> None:
        seen.append((where, MARK.get(), BASE.get()))
        MARK.set(where)

    async def plain(request: Request) -> Response:
        note(request.path_params["name"])
        return json_response({"ok": True})

    async def streamed(request: Request) -> StreamingResponse:
        async def body() -> AsyncIterator[bytes]:
            yield b"one;"
            note(request.path_params["name"])  # in the body, as an agent's turn runs
            yield b"two;"

        return StreamingResponse.from_iterable(body(), headers=[("content-type", "text/plain")])

    async def ws(pending: WebSocketRequest) -> None:
        note("ws")
        await pending.reject(403)

    router = Router()
    router.add(["GET", "POST", "HEAD"], "/mark/{name}", plain)
    router.add("GET", "/stream/{name}", streamed)
    router.add_websocket("/ws", ws)
    return router


async def exchange(
    stream: trio.SocketStream, conn: h11.Connection, request: h11.Request, body: bytes = b""
) -> tuple[int, bytes]:
    """Send ``request`` and ``body`` on ``stream``; the response's status and body."""
    data = conn.send(request) or b""
    if body:
        data += conn.send(h11.Data(data=body)) or b""
    data += conn.send(h11.EndOfMessage()) or b""
    await stream.send_all(data)
    status, got = 0, b""
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await stream.receive_some(65536))
        elif isinstance(event, h11.Response):
            status = event.status_code
        elif isinstance(event, h11.Data):
            got += event.data
        elif isinstance(event, h11.EndOfMessage):
            conn.start_next_cycle()
            return status, got


def head(method: str, target: str, *extra: tuple[str, str]) -> h11.Request:
    return h11.Request(method=method, target=target, headers=[("host", "t"), *extra])


async def test_a_request_does_not_see_what_the_one_before_it_set(serve_app) -> None:  # type: ignore[no-untyped-def]
    seen: list[tuple[str, str | None, str]] = []
    BASE.set("before the server")
    with trio.fail_after(TIMEOUT):
        server = await serve_app(marking_router(seen))
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        async with stream:
            conn = h11.Connection(h11.CLIENT)
            # The fast path (a length, a streamed body), then h11's (a
            # chunked body, HEAD), then the fast path again.
            sized = head("POST", "/mark/sized", ("content-length", "2"))
            assert (await exchange(stream, conn, sized, b"{}"))[0] == 200
            assert await exchange(stream, conn, head("GET", "/stream/body")) == (200, b"one;two;")
            chunked = head("POST", "/mark/chunked", ("transfer-encoding", "chunked"))
            assert (await exchange(stream, conn, chunked, b"{}"))[0] == 200
            assert (await exchange(stream, conn, head("HEAD", "/mark/head")))[0] == 200
            assert (await exchange(stream, conn, head("GET", "/mark/last")))[0] == 200
            upgrade = head(
                "GET",
                "/ws",
                ("connection", "upgrade"),
                ("upgrade", "websocket"),
                ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
                ("sec-websocket-version", "13"),
            )
            assert (await exchange(stream, conn, upgrade))[0] == 403
    assert [where for where, _, _ in seen] == ["sized", "body", "chunked", "head", "last", "ws"]
    assert [mark for _, mark, _ in seen] == [None] * 6
    assert {base for _, _, base in seen} == {"before the server"}


async def test_http2_streams_agree(serve_app) -> None:  # type: ignore[no-untyped-def]
    # Each HTTP/2 stream has a task, so a context, of its own: the same answers.
    seen: list[tuple[str, str | None, str]] = []
    with trio.fail_after(TIMEOUT):
        server = await serve_app(marking_router(seen))

        def client() -> None:
            with httpx.Client(http1=False, http2=True) as c:
                for path in ("/mark/one", "/stream/two", "/mark/three"):
                    assert c.get(f"http://127.0.0.1:{server.port}{path}").status_code == 200

        await trio.to_thread.run_sync(client)
    assert [(where, mark) for where, mark, _ in seen] == [
        ("one", None),
        ("two", None),
        ("three", None),
    ]


async def test_the_access_record_names_no_agent_an_earlier_request_resolved(serve_app) -> None:  # type: ignore[no-untyped-def]
    # A root path resolves its agent into a context variable the access
    # record reads; the next request on the connection resolves none.
    records: list[tuple[str, str]] = []

    class Listener:
        def finished(self, exchange: Any) -> None:
            records.append((exchange.path, exchange.agent))

        def stream_opened(self, exchange: Any) -> None: ...

        def stream_closed(self, exchange: Any) -> None: ...

    app = create_app([DemoAgent()], metrics=True)
    assert app.observe is not None
    app.observe.listeners.append(Listener())
    with trio.fail_after(TIMEOUT):
        server = await serve_app(app)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as http:
            body = {"messages": [{"role": "user", "content": "hi"}]}
            assert (await http.post("/chat/completions", json=body)).status_code == 200
            assert (await http.get("/no/such/route")).status_code == 404
    assert records == [("/chat/completions", "demo"), ("/no/such/route", "-")]
