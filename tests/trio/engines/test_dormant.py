"""Connections that send nothing at first wait without a task (engines.dormant).

Each path of a waiting connection: it sends later (in one piece or a byte
at a time, HTTP/1.1 or HTTP/2), it hangs up, it idles out, the server shuts
down, it counts against ``max_connections``; and a crowd of them hanging up
at once, more than one wake-up's batch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import h2.config
import h2.connection
import h2.events
import trio

from uamp_trio.app import Router
from uamp_trio.engines.dormant import BATCH
from uamp_trio.engines.http import Request, Response, json_response
from uamp_trio.engines.server import Server

TIMEOUT = 10
GET = b"GET /ping HTTP/1.1\r\nHost: t\r\n\r\n"


def _router() -> Router:
    router = Router()

    async def ping(request: Request) -> Response:
        return json_response({"pong": True})

    router.add("GET", "/ping", ping)
    return router


async def _until(check: Callable[[], bool]) -> None:
    while not check():
        await trio.sleep(0.01)


async def _answer(stream: trio.SocketStream) -> bytes:
    """Bytes up to the end of one small response's body."""
    data = b""
    while b'{"pong":true}' not in data:
        chunk = await stream.receive_some(65536)
        assert chunk, data
        data += chunk
    return data


async def test_a_connection_that_sends_later_is_served_and_kept_alive(serve_app: Any) -> None:
    with trio.fail_after(TIMEOUT):
        server: Server = await serve_app(_router())
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        async with stream:
            await trio.sleep(0.2)  # waiting, without a task
            assert server.connection_count == 1
            await stream.send_all(GET)
            assert (await _answer(stream)).startswith(b"HTTP/1.1 200 OK\r\n")
            await stream.send_all(GET)  # the same connection serves on
            assert (await _answer(stream)).startswith(b"HTTP/1.1 200 OK\r\n")


async def test_a_head_sent_a_byte_at_a_time_after_waiting_is_served(serve_app: Any) -> None:
    with trio.fail_after(TIMEOUT):
        server: Server = await serve_app(_router())
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        async with stream:
            await trio.sleep(0.1)
            for i in range(len(GET)):
                await stream.send_all(GET[i : i + 1])
                await trio.sleep(0.002)
            assert (await _answer(stream)).startswith(b"HTTP/1.1 200 OK\r\n")


async def test_http2_after_waiting_with_the_preface_in_pieces(serve_app: Any) -> None:
    with trio.fail_after(TIMEOUT):
        server: Server = await serve_app(_router())
        h2conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        h2conn.initiate_connection()
        h2conn.send_headers(
            1,
            [(":method", "GET"), (":path", "/ping"), (":scheme", "http"), (":authority", "t")],
            end_stream=True,
        )
        out = h2conn.data_to_send()
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        async with stream:
            await trio.sleep(0.1)
            await stream.send_all(out[:5])  # part of the preface: h11 or h2 is not known yet
            await trio.sleep(0.05)
            await stream.send_all(out[5:])
            body, status = b"", None
            while status is None or not body.endswith(b"}"):
                data = await stream.receive_some(65536)
                assert data
                for event in h2conn.receive_data(data):
                    if isinstance(event, h2.events.ResponseReceived):
                        status = dict(event.headers)[b":status"]
                    elif isinstance(event, h2.events.DataReceived):
                        body += event.data
                await stream.send_all(h2conn.data_to_send())
        assert (status, body) == (b"200", b'{"pong":true}')


async def test_more_than_a_batch_hanging_up_at_once_are_all_closed(serve_app: Any) -> None:
    with trio.fail_after(TIMEOUT):
        server: Server = await serve_app(_router())
        crowd = [await trio.open_tcp_stream("127.0.0.1", server.port) for _ in range(BATCH * 3)]
        await _until(lambda: server.connection_count == len(crowd))
        for stream in crowd:
            stream.socket.close()
        await _until(lambda: server.connection_count == 0)
        # And the server answers on.
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        async with stream:
            await stream.send_all(GET)
            assert (await _answer(stream)).startswith(b"HTTP/1.1 200 OK\r\n")


async def test_a_waiting_connection_is_closed_by_the_idle_timeout(serve_app: Any) -> None:
    with trio.fail_after(TIMEOUT):
        server: Server = await serve_app(_router(), idle_timeout=0.3)
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        async with stream:
            start = trio.current_time()
            assert await stream.receive_some(10) == b""  # closed by the server
            assert trio.current_time() - start >= 0.3
        await _until(lambda: server.connection_count == 0)


async def test_shutdown_closes_waiting_connections_at_once(nursery: trio.Nursery) -> None:
    server = Server(_router(), host="127.0.0.1", port=0, shutdown_grace=30)
    done = trio.Event()

    async def serve() -> None:
        await server.serve()
        done.set()

    with trio.fail_after(TIMEOUT):
        await nursery.start(_started, server, serve)
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        async with stream:
            await _until(lambda: server.connection_count == 1)
            server.shutdown()
            assert await stream.receive_some(10) == b""
            with trio.fail_after(2):  # not the 30 s grace: nothing was being served
                await done.wait()


async def _started(server: Server, serve: Callable[[], Any], task_status: Any) -> None:
    async with trio.open_nursery() as inner:
        inner.start_soon(serve)
        await _until(lambda: bool(server.addresses))
        task_status.started()


async def test_waiting_connections_count_against_max_connections(serve_app: Any) -> None:
    with trio.fail_after(TIMEOUT):
        server: Server = await serve_app(_router(), max_connections=2)
        first = await trio.open_tcp_stream("127.0.0.1", server.port)
        second = await trio.open_tcp_stream("127.0.0.1", server.port)
        await _until(lambda: server.connection_count == 2)
        third = await trio.open_tcp_stream("127.0.0.1", server.port)
        async with first, second, third:
            await third.send_all(GET)
            data = b""
            while chunk := await third.receive_some(65536):
                data += chunk
            assert data.startswith(b"HTTP/1.1 503 ")
            first.socket.close()
            await _until(lambda: server.connection_count == 1)
            await second.send_all(GET)
            assert (await _answer(second)).startswith(b"HTTP/1.1 200 OK\r\n")
