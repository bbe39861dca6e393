"""Per-request CPU of the HTTP/1.1 connection loop, in process, no sockets.

Run: ``python bench/http1.py [--requests 20000] [--rounds 5]``

``serve_http1`` is driven over an in-memory stream that hands out one
keep-alive request per ``receive_some`` (a checkpoint each, like a socket
that has data) and swallows what is sent, so the figure is the server's own
cost per request: parsing, the idle/header/body timeouts, dispatch to a
trivial endpoint and the response framing. Rows:

* ``json``: a POST shaped like the openai SDK's (14 headers, 200-byte JSON
  body in the same read) answered by a small JSON :class:`Response`.
* ``json-split``: the same with the body in a read of its own (httpx writes
  the head and the body separately).
* ``get``: a bare ``GET`` with three headers.
* ``stream``: the POST answered by a three-chunk :class:`StreamingResponse`.
* ``h11``: a bare trio+h11 loop (as ``serve_trio_h11`` in
  ``bench/transports.py``) on the same stream and request, for reference.

The median of ``--rounds`` rounds is printed, in microseconds per request.
``--against REV`` also loads ``uamp_trio/engines/http1.py`` as of git revision
``REV`` and runs every uamp row with it too, rounds alternating, so that
both figures see the same machine load.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from types import ModuleType

import h11
import trio
from h11_baseline import json_reply, read_body

from uamp_trio.app import Router
from uamp_trio.engines.http import Request, Response, SendChunk, StreamingResponse
from uamp_trio.engines.http1 import serve_http1
from uamp_trio.engines.server import ConnectionTracker, Server

BODY = b'{"model":"flood","messages":[{"role":"user","content":"3"}],"stream":false}' + b" " * 125
POST_HEAD = (
    b"POST /v1/chat/completions HTTP/1.1\r\n"
    b"Host: 127.0.0.1:8765\r\n"
    b"Accept-Encoding: gzip, deflate\r\n"
    b"Connection: keep-alive\r\n"
    b"Accept: application/json\r\n"
    b"Content-Type: application/json\r\n"
    b"User-Agent: OpenAI/Python 1.40.0\r\n"
    b"X-Stainless-Lang: python\r\n"
    b"X-Stainless-Package-Version: 1.40.0\r\n"
    b"X-Stainless-OS: Linux\r\n"
    b"X-Stainless-Arch: x64\r\n"
    b"X-Stainless-Runtime: CPython\r\n"
    b"X-Stainless-Runtime-Version: 3.11.9\r\n"
    b"Authorization: Bearer sk-test\r\n"
    b"Content-Length: %d\r\n\r\n" % len(BODY)
)
GET = b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1:8765\r\nAccept: */*\r\nUser-Agent: b\r\n\r\n"
ANSWER = b'{"id":"chatcmpl-1","object":"chat.completion","choices":[]}'


class FakeStream(trio.abc.Stream):
    """Hands out the given reads, then EOF; counts the bytes written."""

    def __init__(self, reads: Iterator[bytes]) -> None:
        self.reads = reads
        self.sent = 0

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        await trio.lowlevel.checkpoint()
        return next(self.reads, b"")

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await trio.lowlevel.checkpoint()
        self.sent += len(data)

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def send_eof(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


def make_server() -> Server:
    router = Router()

    async def complete(request: Request) -> Response:
        return Response(headers=[("content-type", "application/json")], body=ANSWER)

    async def stream(request: Request) -> StreamingResponse:
        async def produce(send: SendChunk) -> None:
            for _ in range(3):
                await send(b"data: " + ANSWER + b"\n\n")

        return StreamingResponse(producer=produce, headers=[("content-type", "text/event-stream")])

    router.add("POST", "/v1/chat/completions", complete)
    router.add("POST", "/v1/stream", stream)
    router.add("GET", "/v1/models", complete)
    return Server(router, port=0)


def reads_for(kind: str, n: int) -> list[bytes]:
    if kind == "json-split":
        return [POST_HEAD, BODY] * n
    if kind == "get":
        return [GET] * n
    if kind == "stream":
        return [POST_HEAD.replace(b"chat/completions", b"stream") + BODY] * n
    return [POST_HEAD + BODY] * n


Serve = Callable[[Server, trio.abc.Stream, ConnectionTracker, bytes, None], Awaitable[None]]


def load_revision(rev: str) -> ModuleType:
    """``uamp_trio/engines/http1.py`` as of git revision ``rev``, as a module of the package."""
    root = Path(__file__).resolve().parent.parent
    source = subprocess.run(
        ["git", "show", f"{rev}:uamp_trio/engines/http1.py"],
        cwd=root,
        check=True,
        capture_output=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "_http1_rev.py"
    path.write_bytes(source)
    spec = importlib.util.spec_from_file_location("uamp_trio.engines._http1_rev", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def run_uamp(kind: str, n: int, serve: Serve = serve_http1) -> float:
    server = make_server()
    reads = reads_for(kind, n)
    stream = FakeStream(iter(reads[1:]))
    start = time.perf_counter()
    await serve(server, stream, ConnectionTracker(), reads[0], None)
    elapsed = time.perf_counter() - start
    assert stream.sent > n * 60, stream.sent
    return elapsed


async def run_h11(kind: str, n: int, serve: Serve = serve_http1) -> float:
    stream = FakeStream(iter(reads_for("json", n)))
    start = time.perf_counter()
    conn = h11.Connection(h11.SERVER)
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            data = await stream.receive_some(65536)
            conn.receive_data(data)
            continue
        if not isinstance(event, h11.Request):
            break
        await read_body(conn, stream)
        await stream.send_all(json_reply(conn, ANSWER))
        conn.start_next_cycle()
    return time.perf_counter() - start


RUNNERS: dict[str, Callable[[str, int, Serve], Awaitable[float]]] = {
    "json": run_uamp,
    "json-split": run_uamp,
    "get": run_uamp,
    "stream": run_uamp,
    "h11": run_h11,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", default=",".join(RUNNERS))
    parser.add_argument("--against", metavar="REV", help="also time engines/http1.py as of REV")
    args = parser.parse_args()
    impls: dict[str, Serve] = {"": serve_http1}
    if args.against:
        impls[f"@{args.against}"] = load_revision(args.against).serve_http1
    for kind in args.only.split(","):
        runner = RUNNERS[kind]
        rows = {label: serve for label, serve in impls.items() if kind != "h11" or not label}
        figures: dict[str, list[float]] = {label: [] for label in rows}
        for _ in range(args.rounds):
            for label, serve in rows.items():
                elapsed = trio.run(runner, kind, args.requests, serve)
                figures[label].append(elapsed / args.requests * 1e6)
        for label, values in figures.items():
            name = kind + label
            print(f"{name:20s} {statistics.median(values):7.1f} us/request (min {min(values):.1f})")


if __name__ == "__main__":
    main()
