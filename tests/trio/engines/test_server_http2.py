"""The server over HTTP/2: h2c prior knowledge, TLS + ALPN, flow control, limits."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator

import httpx
import trio

from uamp_trio.app import Router
from uamp_trio.engines.http import Request, Response, StreamingResponse, json_response
from uamp_trio.engines.server import Server

TIMEOUT = 15
BIG = 3 * 1024 * 1024  # well past h2's default 64 KiB windows


def make_router() -> Router:
    router = Router()

    async def echo(request: Request) -> Response:
        return json_response(
            {
                "method": request.method,
                "path": request.path,
                "params": request.path_params,
                "size": len(request.body),
                "version": request.http_version,
                "scheme": request.scheme,
                "host": request.headers.get("host"),
            }
        )

    async def big(request: Request) -> StreamingResponse:
        async def chunks() -> AsyncIterator[bytes]:
            block = bytes(range(256)) * 256  # 64 KiB
            for _ in range(BIG // len(block)):
                yield block

        return StreamingResponse.from_iterable(chunks())

    async def slow(request: Request) -> Response:
        await trio.sleep(0.2)
        return json_response({"path": request.path})

    router.add(["GET", "POST"], "/echo/{name}", echo)
    router.add("GET", "/big", big)
    router.add("GET", "/slow/{n}", slow)
    return router


def h2c_client(server: Server) -> httpx.AsyncClient:
    # http1=False + http2=True on http:// is "prior knowledge" h2c.
    return httpx.AsyncClient(base_url=server.url, http1=False, http2=True)


async def test_h2c_prior_knowledge_round_trip(serve_app) -> None:  # type: ignore[no-untyped-def]
    with trio.fail_after(TIMEOUT):
        server = await serve_app(make_router())
        async with h2c_client(server) as client:
            r = await client.post("/echo/alice.my-bot.helper?q=1", content=b"x" * 1000)
            assert r.http_version == "HTTP/2"
            assert r.status_code == 200
            data = r.json()
            assert data == {
                "method": "POST",
                "path": "/echo/alice.my-bot.helper",
                "params": {"name": "alice.my-bot.helper"},
                "size": 1000,
                "version": "2",
                "scheme": "http",
                "host": f"127.0.0.1:{server.port}",
            }
            r = await client.get("/missing")
            assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


async def test_h2_streams_run_concurrently_on_one_connection(serve_app) -> None:  # type: ignore[no-untyped-def]
    with trio.fail_after(TIMEOUT):
        server = await serve_app(make_router())
        results: dict[int, str] = {}
        async with h2c_client(server) as client:
            start = trio.current_time()

            async def one(i: int) -> None:
                r = await client.get(f"/slow/{i}")
                assert r.http_version == "HTTP/2"
                results[i] = r.json()["path"]

            async with trio.open_nursery() as nursery:
                for i in range(10):
                    nursery.start_soon(one, i)
            elapsed = trio.current_time() - start
        assert results == {i: f"/slow/{i}" for i in range(10)}
        assert elapsed < 1.5  # ten 0.2 s requests did not run one after another


async def test_h2_large_streamed_response_respects_flow_control(serve_app) -> None:  # type: ignore[no-untyped-def]
    with trio.fail_after(TIMEOUT):
        server = await serve_app(make_router())
        async with h2c_client(server) as client, client.stream("GET", "/big") as r:
            assert r.http_version == "HTTP/2"
            total = 0
            async for chunk in r.aiter_bytes():
                total += len(chunk)
                await trio.sleep(0)  # a slow-ish reader
        assert total == BIG


async def test_h2_large_request_body_and_limit(serve_app) -> None:  # type: ignore[no-untyped-def]
    with trio.fail_after(TIMEOUT):
        server = await serve_app(make_router(), max_body_size=500_000)
        async with h2c_client(server) as client:
            r = await client.post("/echo/x", content=b"y" * 400_000)
            assert r.status_code == 200 and r.json()["size"] == 400_000
            r = await client.post("/echo/x", content=b"y" * 600_000)
            assert r.status_code == 413
            assert r.json()["error"]["code"] == "request_too_large"
            # Without Content-Length (a streamed body) the limit still holds.

            async def body() -> AsyncIterator[bytes]:
                for _ in range(10):
                    yield b"z" * 60_000

            r = await client.post("/echo/x", content=body())
            assert r.status_code == 413
            r = await client.get("/echo/after")  # the connection is still usable
            assert r.status_code == 200


async def test_tls_alpn_negotiates_h2_and_http11(serve_app, tls_files) -> None:  # type: ignore[no-untyped-def]
    certfile, keyfile = tls_files
    with trio.fail_after(TIMEOUT):
        server = await serve_app(make_router(), certfile=certfile, keyfile=keyfile)
        assert server.url.startswith("https://")
        ctx = ssl.create_default_context(cafile=certfile)
        async with httpx.AsyncClient(base_url=server.url, http2=True, verify=ctx) as client:
            r = await client.get("/echo/tls")
            assert r.http_version == "HTTP/2"
            assert r.json()["scheme"] == "https"
        async with httpx.AsyncClient(base_url=server.url, verify=ctx) as client:
            r = await client.get("/echo/tls")
            assert r.http_version == "HTTP/1.1"
            assert r.json()["version"] == "1.1"
        async with (
            httpx.AsyncClient(base_url=server.url, http2=True, verify=ctx) as client,
            client.stream("GET", "/big") as r,
        ):
            assert r.http_version == "HTTP/2"
            assert sum([len(c) async for c in r.aiter_bytes()]) == BIG


async def test_h2_graceful_shutdown_finishes_streams_then_goaway() -> None:
    with trio.fail_after(TIMEOUT):
        server = Server(make_router(), port=0, shutdown_grace=5)
        async with trio.open_nursery() as nursery:
            await nursery.start(server.serve)
            async with h2c_client(server) as client:

                async def request() -> None:
                    r = await client.get("/slow/last")
                    assert r.status_code == 200 and r.json()["path"] == "/slow/last"
                    done.set()

                done = trio.Event()
                nursery.start_soon(request)
                await trio.sleep(0.05)
                server.shutdown()
                await done.wait()
