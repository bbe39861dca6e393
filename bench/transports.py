"""Transport throughput and latency through the full server on loopback.

Run: ``python bench/transports.py [--deltas 20000] [--rounds 3] [--only ws,sse,...]``
(the baselines need the ``bench`` extra: ``pip install -e .[bench]``).

``--against REV`` adds a ``uamp@REV`` row to the ws, sse and json rows: the
same uamp server run from the tree of git revision ``REV`` (for a before/after
ratio in one run). ``--observed`` adds ``uamp+obs``: the uamp server with
everything ``uamp serve`` observes by default on (the access log, written to
``/dev/null``, and the metrics) and traces when the ``otel`` extra is there
(spans kept in memory), to show what observation costs when it is on; the
plain ``uamp`` row is what it costs when off. ``--agent`` adds ``uamp-agent``:
a UAP agent (the runtime's loop strategy on the ``function`` model, one word
per delta, ``bench/flood_agent.py``) loaded as ``uamp serve --agent`` loads
it, on the same transports: what a real agent costs over the hand-written one.
``--only calls`` (not run by default) counts, with cProfile in the server process, the Python calls
each uamp server (``uamp``, and the ``--against`` and ``--agent`` rows)
makes per one-delta WebSocket response over ``CALLS_RESPONSES`` responses
(after a warm-up), with the functions called most: call counts do not move
with the machine's load the way timings do.
``--granian`` adds two baselines to the HTTP rows, both Granian (a Rust HTTP
server for Python) with one worker process, whose CPU is counted with its
parent's: ``granian-asgi`` serves the uvicorn baseline's Starlette app,
``granian-rsgi`` a minimal app on Granian's native RSGI interface (the least
Python a request can cost there).
``--asgi`` adds ``uamp-asgi`` and ``uamp-asgi-granian`` to the HTTP rows: the
same flood agent served by ``uamp_asgi`` (the ASGI app, docs/embedding.md)
under uvicorn and under Granian (one worker), beside ``uamp serve``'s server.

Every server runs in its own process (``--serve KIND``); the clients are the
same raw, framework-free socket loops for every server, in this process, so
the figures compare servers. Each uamp figure is measured beside its
baselines in the same run, alternating, and the median of ``--rounds``
rounds is printed with the ratio uamp / baseline:

* ``ws``: ``response.delta`` events per second delivered to one WebSocket
  client (uamp ``/agents/flood/uamp``) vs a bare trio+wsproto sender (our
  own floor: one ``send_all`` per message) and a bare ``websockets`` server
  on asyncio (what users would otherwise pick). Target: >= 1.0x websockets.
* ``sse``: ``chat.completion.chunk`` SSE events per second from uamp's Chat
  Completions endpoint vs a bare trio+h11 chunk writer and uvicorn+Starlette
  streaming. Target: >= 1.0x uvicorn+Starlette.
* ``sse-responses``: the same stream over the OpenAI Responses API
  (``response.output_text.delta`` events from ``/responses``, stored, the
  default) beside Chat Completions' chunks, both from one uamp server kind:
  ``uamp/uamp-responses`` is the rate ratio, and the server CPU per delta of
  each is the comparison the Responses transport is held to (target: at most
  1.2x Chat Completions').
* ``json``: non-streaming completions per second (sequential, keep-alive)
  vs a bare trio+h11 JSON responder and uvicorn+Starlette.
* ``ttfd``: median time to first delta (ms) after the request, WebSocket.
  Beside the baselines, ``uamp-bound``: the least a UAMP server whose
  responses run concurrently with its reader can do (see
  :func:`serve_uamp_bound`), which shows how much of the gap to the bare
  senders is the protocol's own work rather than uamp's.
* ``ttfd-sse``: the same over Chat Completions streaming (one-delta
  responses on a keep-alive connection), vs trio+h11 and uvicorn+Starlette.
* ``mux``: 100 sessions multiplexed on one uamp WebSocket, events/s overall.
* ``conns``: 100 concurrent WebSocket connections (one session each),
  events/s overall, vs 100 connections to the ``websockets`` server.
* ``anthropic`` (not run by default): Anthropic Messages SSE events per
  second (``POST /v1/messages``, ``stream: true``: one ``content_block_delta``
  per delta) beside ``uamp-chat``, the same uamp server's Chat Completions
  stream; the server CPU per event of the one over the other is the cost of
  the Messages rendering. Target: <= 1.2x the Chat Completions CPU per chunk.
* ``ai-sdk`` (not run by default): the Vercel AI SDK UI message stream
  (``POST /ai-sdk``: one ``text-delta`` chunk per delta) beside
  ``uamp-chat``'s Chat Completions chunks, as for ``anthropic``. Target:
  <= 1.2x the Chat Completions CPU per chunk.
* ``a2a`` (not run by default): A2A 1.0 JSON-RPC ``SendStreamingMessage``
  (``POST /agents/flood/a2a``: the task, one ``artifactUpdate`` per delta,
  the final ``statusUpdate``) beside ``uamp-chat``'s Chat Completions
  chunks, as for ``anthropic``. Target: <= 1.2x the Chat Completions CPU
  per chunk (issue 38). ``--only a2a-instructions`` counts instead the
  instructions per chunk of each server of the row (callgrind, one server
  at a time); so does ``ROW-instructions`` for ``sse-responses``,
  ``anthropic``, ``ai-sdk`` and ``mcp``.
* ``mcp`` (not run by default): MCP Streamable HTTP, one ``tools/call``
  of the flood agent with a ``progressToken`` (``POST /agents/flood/mcp``,
  ``Accept: text/event-stream``): one ``notifications/progress`` per delta,
  then the result, beside ``uamp-chat``'s Chat Completions chunks, as for
  ``anthropic``. Target: <= 1.2x the Chat Completions CPU per chunk.
* ``h2-json``, ``h2-sse`` (not run by default): HTTP/2 over cleartext
  (prior knowledge), 16 concurrent streams on one connection driven by
  ``uamp bench --http2``: completions/s, and chunks/s of streamed
  completions, vs hypercorn serving the Starlette app. Target: >= 1.0x.

The agent (``FloodAgent``) emits as many one-word text deltas as its input
text says. The HTTP baselines send the same bytes as uamp: the same chunk
JSON (role chunk first, finish chunk and ``[DONE]`` last), the same
completion JSON; the HTTP rows print the payload sizes of every server so
that this stays checked. The WebSocket baselines send byte-for-byte similar
JSON. The order of the servers rotates from round to round.

Each row also prints the server process's CPU time (user + system, read
from ``/proc`` on Linux) per unit of work over all rounds. On a shared
machine the wall-clock rows of sequential requests are mostly loopback
wake-ups; the CPU figure is the steadier comparison of what each server does.

``--placement`` says where the latency rows (``ttfd``, ``ttfd-sse``) run
the client and the servers: ``free`` (the default) leaves it to the
scheduler; ``split`` pins the client to the first CPU and every server to
the last (a client on another machine: the server's work runs beside the
client's, and an idle server waits for its wake-up); ``same`` pins all of
them to the first CPU (each request's time is the client's and the
server's CPU, one after the other). On a small virtual machine the free
figure moves with where the scheduler puts the two processes more than
with the server's work (docs/performance.md, "Ninth round"); the pinned
ones do not.

Keep the baselines honest: each must run as its users would deploy it. In
particular uvicorn must get a socket whose ``proto`` is TCP, or asyncio
leaves Nagle on and every non-streamed request waits for a delayed ACK.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import functools
import importlib
import os
import selectors
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
# A uamp@REV server imports uamp from REV's tree (see Running), ahead of this one.
sys.path.insert(0, os.environ.get("UAMP_BENCH_TREE") or str(ROOT))

WORD = "tok "
#: Responses per time-to-first-delta measurement.
TTFD_REPEATS = 200
#: One-delta responses profiled by ``--calls`` (after as many to warm up).
CALLS_RESPONSES = 1000
#: ``--placement``: where the latency rows run the client and the servers.
PLACEMENTS = ("free", "split", "same")
#: Where a server started by ``--calls`` writes its profile (see :func:`_profiled`).
PROFILE_ENV = "UAMP_BENCH_PROFILE"


def delta_event(i: int) -> bytes:
    return orjson.dumps(
        {
            "type": "response.delta",
            "session_id": "sess_0123456789abcdef01234567",
            "delta": {"type": "text", "text": WORD},
            "response_id": "resp_0123456789abcdef0123456789abcdef",
            "event_id": f"evt_0123456789abcdef0123456789abcdef.{i}",
        }
    )


COMPLETION_ID = "chatcmpl-" + "0123456789abcdef" * 2  # uamp's: "chatcmpl-" + 32 hex


def _chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
    """A ``chat.completion.chunk`` shaped byte for byte like uamp's."""
    return orjson.dumps(
        {
            "id": COMPLETION_ID,
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": "flood",
            "choices": [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            ],
        }
    )


def chunk_event() -> bytes:
    return _chunk({"content": WORD})


def sse_stream_parts() -> tuple[bytes, bytes, bytes]:
    """The SSE frames of a streamed completion: first (role), each text chunk, last."""
    first = b"data: " + _chunk({"role": "assistant", "content": ""}) + b"\n\n"
    chunk = b"data: " + chunk_event() + b"\n\n"
    last = b"data: " + _chunk({}, "stop") + b"\n\ndata: [DONE]\n\n"
    return first, chunk, last


def completion_body(n: int) -> bytes:
    """A ``chat.completion`` shaped like uamp's (same keys, same sizes)."""
    return orjson.dumps(
        {
            "id": COMPLETION_ID,
            "object": "chat.completion",
            "created": 1700000000,
            "model": "flood",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": WORD * n, "refusal": None},
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        }
    )


# --- servers -----------------------------------------------------------------------


#: Sessions whose event logs the soak server keeps (see :func:`serve_uamp`).
SOAK_RETAINED = 2000


def flood_agent() -> Any:
    """The agent every uamp server kind serves: as many one-word deltas as its input says."""
    from uamp_proto import events as ev
    from uamp_proto import types as ty
    from uamp_proto.responder import Emit, TurnRequest

    class FloodAgent:
        name = "flood"
        #: Built once, as a real agent's is (``uamp_agents.bridge`` rebuilds it only
        #: when what it is made of changed): the server compares it around every response.
        declared = ty.Capabilities(id="flood", provider="bench", modalities=["text"])

        def capabilities(self) -> ty.Capabilities:
            return self.declared

        async def respond(self, request: TurnRequest, emit: Emit) -> None:
            text = request.messages[-1].text.strip() if request.messages else "1"
            for _ in range(int(text or "1")):
                await emit(ev.ResponseDelta(delta=ty.DeltaText(text=WORD)))

    return FloodAgent()


def asgi_app() -> Any:
    """uamp_asgi serving the flood agent (what ``--asgi`` runs under uvicorn and Granian)."""
    import uamp_asgi

    return uamp_asgi.app([flood_agent()])


def serve_asgi_uvicorn(port_file: Path) -> None:
    """uamp_asgi under uvicorn (asyncio), bound as the uvicorn baseline is."""
    import asyncio

    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)
    port_file.write_text(str(sock.getsockname()[1]))
    config = uvicorn.Config(asgi_app(), log_level="error", access_log=False, lifespan="off")
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


def serve_uamp(
    port_file: Path, observed: bool = False, agent: str | None = None, soak: bool = False
) -> None:
    """uamp's server: the hand-written ``FloodAgent``, or the agent ``module:attr`` ``agent`` names.

    ``agent`` is loaded as ``uamp serve --agent`` loads it (a UAP agent goes
    through the bridge), and served on the same transports with the same
    settings, so the two rows differ only in the agent path. ``soak``
    (``bench/soak.py``) allows 1,100 sessions a connection and an hour of
    idleness before a connection is closed, and keeps the logs of at most
    ``SOAK_RETAINED`` sessions (``uamp serve`` keeps 10,000), so a soak
    reaches the retention bound within a few rounds: growth past it is a leak.
    """
    import trio

    from uamp_trio import Server, create_app
    from uamp_trio.hosting.sessions import SessionLimits
    from uamp_trio.transports import completions, uamp_ws

    # The transports a uamp@REV may predate (``--against``): mounted when it has them.
    more = []
    for name in ("anthropic", "responses", "ai_sdk", "a2a", "mcp"):
        with contextlib.suppress(ImportError):
            more.append(importlib.import_module(f"uamp_trio.transports.{name}").mount)

    # 100 multiplexed sessions need more than the default 64 per connection.
    limits = SessionLimits(max_sessions=1100, idle_timeout=3600) if soak else None
    limits = limits or SessionLimits(max_sessions=128)
    observe: dict[str, Any] = {}
    if observed:
        observe = {"access_log": True, "metrics": True, "tracing": _memory_tracing()}
    if soak:
        from uamp_trio.stores import MemoryEventLog, Stores

        observe["stores"] = Stores(event_log=MemoryEventLog(max_sessions=SOAK_RETAINED))
    served: Any = flood_agent()
    if agent is not None:
        from uamp_trio.cli import load_agent

        served = load_agent(agent)
    app = create_app(
        [served],
        transports=[
            completions.mount,
            lambda a: uamp_ws.mount(a, uamp_ws.UampWebSocketConfig(limits=limits)),
            *more,
        ],
        **observe,
    )
    server = Server(app, port=0)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(server.serve)
            port_file.write_text(str(server.port))

    trio.run(main)


def _serve_trio(handle: Callable[[Any], Any], port_file: Path) -> None:
    """Run a bare trio server on a free loopback port; write the port to ``port_file``."""
    import trio

    async def main() -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port_file.write_text(str(listeners[0].socket.getsockname()[1]))
        await trio.serve_listeners(handle, listeners)

    trio.run(main)


def _ws_accept(key: bytes) -> bytes:
    import hashlib

    return base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())


def serve_trio_ws(port_file: Path) -> None:
    """Bare trio + wsproto: one send_all per message."""
    import trio
    from wsproto import ConnectionType, WSConnection
    from wsproto.events import AcceptConnection, Request, TextMessage

    async def handle(stream: trio.SocketStream) -> None:
        ws = WSConnection(ConnectionType.SERVER)
        try:
            while True:
                data = await stream.receive_some(65536)
                if not data:
                    return
                ws.receive_data(data)
                for event in ws.events():
                    if isinstance(event, Request):
                        await stream.send_all(ws.send(AcceptConnection()))
                    elif isinstance(event, TextMessage):
                        n = int(event.data.split()[1])
                        for i in range(n):
                            await stream.send_all(ws.send(TextMessage(delta_event(i).decode())))
                        await stream.send_all(ws.send(TextMessage('{"type":"done"}')))
        except trio.BrokenResourceError:
            return

    _serve_trio(handle, port_file)


def serve_uamp_bound(port_file: Path) -> None:
    """A lower bound for UAMP over WebSocket: the protocol's bare minimum, no checks.

    It decodes each event with orjson, keeps the session's input, and runs
    each response in a task of its own (as any server must, to keep reading
    ``response.cancel`` while the agent works); the task writes
    ``response.created`` with the first delta in one send, then
    ``response.done``. No validation, no state machine, no agent interface,
    no flow control: nothing a conforming server could skip is left in, so
    uamp's time to first delta cannot beat this one's.
    """
    import trio

    from uamp_trio.engines.ws_frames import make_engine

    def event(kind: str, sid: str, rid: str, **fields: Any) -> bytes:
        return orjson.dumps(
            {
                "type": kind,
                "session_id": sid,
                "response_id": rid,
                **fields,
                "event_id": f"evt_{os.urandom(16).hex()}",
            }
        )

    async def handle(stream: trio.SocketStream) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            head += await stream.receive_some(65536)
        head, _, rest = head.partition(b"\r\n\r\n")
        key = next(
            line.split(b":", 1)[1].strip()
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"sec-websocket-key:")
        )
        await stream.send_all(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + _ws_accept(key) + b"\r\n\r\n"
        )
        engine = make_engine(client=False, max_message_size=None, engine="websockets")
        inputs: dict[str, str] = {}

        async def respond(sid: str, n: int) -> None:
            rid = f"resp_{os.urandom(16).hex()}"
            engine.text(event("response.created", sid, rid))
            for _ in range(n):
                engine.text(event("response.delta", sid, rid, delta={"type": "text", "text": WORD}))
                await stream.send_all(engine.take())
            engine.text(
                event(
                    "response.done",
                    sid,
                    rid,
                    response={
                        "id": rid,
                        "status": "completed",
                        "output": [{"type": "text", "text": WORD * n}],
                    },
                )
            )
            await stream.send_all(engine.take())

        try:
            async with trio.open_nursery() as nursery:
                data = rest
                while True:
                    for message in engine.feed(data) if data else []:
                        e = orjson.loads(message)
                        kind, sid = e["type"], e["session_id"]
                        if kind == "session.create":
                            engine.text(
                                orjson.dumps(
                                    {
                                        "type": "session.created",
                                        "session_id": sid,
                                        "session": {},
                                        "capabilities": {},
                                    }
                                )
                            )
                            await stream.send_all(engine.take())
                        elif kind == "input.text":
                            inputs[sid] = e["text"]
                        elif kind == "response.create":
                            nursery.start_soon(respond, sid, int(inputs.pop(sid, "1")))
                    data = await stream.receive_some(65536)
                    if not data:
                        return
        except trio.BrokenResourceError:
            return

    _serve_trio(handle, port_file)


def serve_websockets(port_file: Path) -> None:
    """A bare ``websockets`` server on asyncio."""
    import asyncio

    from websockets.asyncio.server import serve
    from websockets.exceptions import ConnectionClosed

    async def handler(ws: Any) -> None:
        try:
            async for message in ws:
                n = int(message.split()[1])
                for i in range(n):
                    await ws.send(delta_event(i).decode())
                await ws.send('{"type":"done"}')
        except ConnectionClosed:
            return

    async def main() -> None:
        async with serve(handler, "127.0.0.1", 0, compression=None, max_size=None) as server:
            port_file.write_text(str(next(iter(server.sockets)).getsockname()[1]))
            await asyncio.Future()

    asyncio.run(main())


def serve_trio_h11(port_file: Path) -> None:
    """Bare trio + h11: SSE with one send_all per chunk, JSON completions."""
    import h11
    import trio
    from h11_baseline import json_reply, read_body

    async def handle(stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    conn.receive_data(data)
                    continue
                if not isinstance(event, h11.Request):
                    return
                req = orjson.loads(await read_body(conn, stream))
                n = int(req["messages"][-1]["content"])
                if req.get("stream"):
                    # The head goes with the first chunk, then one send_all per chunk.
                    first, chunk, last = sse_stream_parts()
                    await stream.send_all(
                        conn.send(
                            h11.Response(
                                status_code=200, headers=[("content-type", "text/event-stream")]
                            )
                        )
                        + conn.send(h11.Data(data=first))
                    )
                    for _ in range(n):
                        await stream.send_all(conn.send(h11.Data(data=chunk)))
                    await stream.send_all(
                        conn.send(h11.Data(data=last)) + conn.send(h11.EndOfMessage())
                    )
                else:
                    await stream.send_all(json_reply(conn, completion_body(n)))
                conn.start_next_cycle()
        except (trio.BrokenResourceError, h11.ProtocolError):
            return

    _serve_trio(handle, port_file)


def starlette_app() -> Any:
    """The Starlette app of the uvicorn baseline (also served by Granian's ASGI)."""
    from starlette.applications import Starlette
    from starlette.requests import Request as SRequest
    from starlette.responses import Response as SResponse
    from starlette.responses import StreamingResponse as SStreaming
    from starlette.routing import Route

    async def completions(request: SRequest) -> SResponse:
        req = orjson.loads(await request.body())
        n = int(req["messages"][-1]["content"])
        if req.get("stream"):
            first, chunk, last = sse_stream_parts()

            async def gen() -> Any:
                yield first
                for _ in range(n):
                    yield chunk
                yield last

            return SStreaming(gen(), media_type="text/event-stream")
        return SResponse(completion_body(n), media_type="application/json")

    return Starlette(routes=[Route("/chat/completions", completions, methods=["POST"])])


def serve_starlette(port_file: Path) -> None:
    """uvicorn + Starlette: StreamingResponse for SSE, JSONResponse-like for JSON."""
    import asyncio

    import uvicorn

    # proto=IPPROTO_TCP as uvicorn's own bind gets it from getaddrinfo: asyncio
    # sets TCP_NODELAY only on sockets whose proto says TCP. A plain
    # socket.socket() has proto 0, so head and body (two writes) met Nagle and
    # the client's delayed ACK: 40 ms per non-streamed request.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)  # clients may connect before uvicorn accepts
    port_file.write_text(str(sock.getsockname()[1]))
    config = uvicorn.Config(starlette_app(), log_level="error", access_log=False)
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


def serve_hypercorn(port_file: Path) -> None:
    """hypercorn (HTTP/1.1 and h2c, on asyncio) serving the Starlette app: the HTTP/2 baseline."""
    import asyncio

    from hypercorn.asyncio import serve
    from hypercorn.config import Config

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)
    port = sock.getsockname()[1]
    sock.close()
    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.accesslog = None
    config.errorlog = None
    config.h2_max_concurrent_streams = 128

    async def main() -> None:
        async def started() -> None:
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    port_file.write_text(str(port))
                    return
                except OSError:
                    await asyncio.sleep(0.05)

        await asyncio.gather(serve(starlette_app(), config), started())  # type: ignore[arg-type]

    asyncio.run(main())


async def rsgi_app(scope: Any, proto: Any) -> None:
    """The same bytes on Granian's native RSGI interface: the least Python per request."""
    req = orjson.loads(await proto())
    n = int(req["messages"][-1]["content"])
    if not req.get("stream"):
        headers = [("content-type", "application/json")]
        proto.response_bytes(200, headers, completion_body(n))
        return
    first, chunk, last = sse_stream_parts()
    transport = proto.response_stream(200, [("content-type", "text/event-stream")])
    await transport.send_bytes(first)
    for _ in range(n):
        await transport.send_bytes(chunk)
    await transport.send_bytes(last)


def serve_granian(port_file: Path, interface: str, target: str | None = None) -> None:
    """Granian (a Rust HTTP server) with one worker: ``asgi`` (the Starlette app) or ``rsgi``.

    Granian runs its worker in a process of its own; the bench counts the CPU
    of this process and all its descendants. Stopping this process stops them.
    """
    import signal

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    if target is None:
        target = "transports:starlette_app" if interface == "asgi" else "transports:rsgi_app"
    argv = [sys.executable, "-m", "granian", "--interface", interface, "--workers", "1"]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--no-log", target]
    if interface == "asgi":
        argv.insert(-1, "--factory")
    child = subprocess.Popen(argv, cwd=Path(__file__).parent)

    def stop(*_: object) -> None:
        child.terminate()
        child.wait(10)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    wait_for_port(port)
    port_file.write_text(str(port))
    child.wait()


def wait_for_port(port: int, timeout: float = 30) -> None:
    """Return once something accepts connections on loopback ``port``.

    Raises:
        RuntimeError: Nothing did within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def _memory_tracing() -> Any:
    """Tracing into memory, or ``None`` without the ``otel`` extra (or before tracing existed)."""
    import logging

    from uamp_trio.observe.logs import configure

    configure("warning", "text", stream=open(os.devnull, "w"))  # noqa: SIM115 - for the process
    logging.getLogger("uamp.access").setLevel(logging.INFO)
    try:
        from uamp_trio.observe.tracing import Tracing
    except ImportError:
        return None
    return Tracing.in_memory()


SERVERS: dict[str, Callable[[Path], None]] = {
    "uamp": serve_uamp,
    "uamp+obs": functools.partial(serve_uamp, observed=True),
    # A UAP agent (loop strategy, function model, one word per delta) via the bridge.
    "uamp-agent": functools.partial(serve_uamp, agent="flood_agent:flood"),
    "uamp-soak": functools.partial(serve_uamp, soak=True),
    # The same server as "uamp": a second row of the same work on another route.
    "uamp-chat": serve_uamp,
    "uamp-bound": serve_uamp_bound,
    # The same server as "uamp", measured on its Responses endpoint (sse-responses).
    "uamp-responses": serve_uamp,
    "trio-ws": serve_trio_ws,
    "websockets": serve_websockets,
    "trio-h11": serve_trio_h11,
    "starlette": serve_starlette,
    "hypercorn": serve_hypercorn,
    "granian-asgi": functools.partial(serve_granian, interface="asgi"),
    "granian-rsgi": functools.partial(serve_granian, interface="rsgi"),
    # uamp_asgi (the ASGI app, no Trio) under uvicorn and under Granian.
    "uamp-asgi": serve_asgi_uvicorn,
    "uamp-asgi-granian": functools.partial(
        serve_granian, interface="asgi", target="transports:asgi_app"
    ),
}


def _profiled(serve: Callable[[Path], None], port_file: Path, out: str) -> None:
    """Run ``serve`` with cProfile switched on by SIGUSR1 and off (stats to ``out``) by SIGUSR2.

    The handlers run on the main thread, which is the one trio's loop and
    every task of the server run on.
    """
    import cProfile
    import signal

    profile = cProfile.Profile()

    def start(*_: object) -> None:
        profile.enable()

    def stop(*_: object) -> None:
        profile.disable()
        profile.dump_stats(out + ".part")
        os.replace(out + ".part", out)

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    serve(port_file)


class Running:
    """A server subprocess (``profile``: a path for :func:`_profiled`)."""

    def __init__(
        self, kind: str, profile: Path | None = None, prefix: tuple[str, ...] = ()
    ) -> None:
        self.kind = kind
        port_file = Path(f"/tmp/uamp-bench-{os.getpid()}-{kind.replace('/', '_')}.port")
        port_file.unlink(missing_ok=True)
        env = None
        if kind in REVISIONS:  # uamp@REV: the same server, imported from REV's tree
            env = {**os.environ, "UAMP_BENCH_TREE": str(REVISIONS[kind])}
            kind = "uamp"
        if profile is not None:
            env = {**(env or os.environ), PROFILE_ENV: str(profile)}
        self.proc = subprocess.Popen(
            [*prefix, sys.executable, __file__, "--serve", kind, "--port-file", str(port_file)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL if prefix else None,
            env=env,
        )
        # Under valgrind (``prefix``) start-up takes some fifty times as long.
        self.port = port_from_file(port_file, self.proc, 600 if prefix else 20, f"server {kind}")
        time.sleep(0.05)
        port_file.unlink(missing_ok=True)

    def stop(self) -> None:
        stop_process(self.proc)


def port_from_file(
    port_file: Path, proc: subprocess.Popen[Any], timeout: float = 30, what: str = "the server"
) -> int:
    """The port a server subprocess writes to ``port_file`` once it listens.

    Raises:
        RuntimeError: The process exited, or wrote no port within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while not port_file.exists() or not port_file.read_text().strip():
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError(f"{what} did not start")
        time.sleep(0.02)
    return int(port_file.read_text())


def stop_process(proc: subprocess.Popen[Any], grace: float = 5) -> None:
    """Terminate a server process; kill it if it is still there after ``grace`` seconds."""
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()


# --- raw clients ----------------------------------------------------------------------


class WSClient:
    """A blocking WebSocket client on the ``websockets`` sans-IO core."""

    def __init__(self, port: int, path: str) -> None:
        from uamp_trio.engines.ws_frames import make_engine

        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        key = base64.b64encode(os.urandom(16))
        self.sock.sendall(
            b"GET " + path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Key: " + key + b"\r\n"
            b"Sec-WebSocket-Version: 13\r\n\r\n"
        )
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.sock.recv(65536)
        head, _, rest = head.partition(b"\r\n\r\n")
        if b" 101 " not in head.split(b"\r\n", 1)[0] or _ws_accept(key) not in head:
            raise RuntimeError(f"handshake failed: {head!r}")
        self.engine = make_engine(client=True, max_message_size=None, engine="websockets")
        self.pending: list[bytes] = self.engine.feed(rest) if rest else []

    def send(self, *messages: bytes) -> None:
        for m in messages:
            self.engine.text(m)
        self.sock.sendall(self.engine.take())

    def messages(self) -> list[bytes]:
        if self.pending:
            out, self.pending = self.pending, []
            return out
        data = self.sock.recv(262144)
        if not data:
            raise RuntimeError("closed")
        out = self.engine.feed(data)
        owed = self.engine.take()  # pongs
        if owed:
            self.sock.sendall(owed)
        return out

    def close(self) -> None:
        self.sock.close()


def uamp_start(sid: str, n: int, create: bool = True) -> list[bytes]:
    msgs = []
    if create:
        msgs.append(
            orjson.dumps(
                {
                    "type": "session.create",
                    "uamp_version": "1.0",
                    "session_id": sid,
                    "session": {"modalities": ["text"]},
                }
            )
        )
    msgs.append(orjson.dumps({"type": "input.text", "session_id": sid, "text": str(n)}))
    msgs.append(orjson.dumps({"type": "response.create", "session_id": sid}))
    return msgs


def _is_uamp(kind: str) -> bool:
    """Whether ``kind`` is a uamp server (``uamp``, ``uamp-agent``, ``uamp@REV`` ...).

    All of them speak UAMP at the agent path.
    """
    return kind in ("uamp", "uamp+obs", "uamp-agent", "uamp-soak") or kind.startswith("uamp@")


def ws_rate(kind: str, port: int, n: int) -> float:
    """Deltas per second for one response of ``n`` deltas."""
    if _is_uamp(kind):
        client = WSClient(port, "/agents/flood/uamp")
        start_msgs, done = uamp_start("sess_bench", n), b'"response.done"'
    else:
        client = WSClient(port, "/")
        start_msgs, done = [f"go {n}".encode()], b'"done"'
    count = 0
    t0 = time.perf_counter()
    client.send(*start_msgs)
    while True:
        batch = client.messages()
        finished = False
        for m in batch:
            if b'"response.delta"' in m:
                count += 1
            elif done in m:
                finished = True
        if finished:
            break
    elapsed = time.perf_counter() - t0
    client.close()
    assert count == n, (kind, count, n)
    return n / elapsed


def ws_ttfd(kind: str, port: int, repeats: int = TTFD_REPEATS) -> float:
    """Median milliseconds from request to the first delta (one-delta responses)."""
    speaks_uamp = _is_uamp(kind) or kind == "uamp-bound"
    client = WSClient(port, "/agents/flood/uamp" if speaks_uamp else "/")
    if speaks_uamp:
        client.send(*uamp_start("sess_ttfd", 0, create=True)[:1])
        while not any(b'"capabilities"' in m for m in client.messages()):
            pass
    samples = []
    for _ in range(repeats):
        msgs = uamp_start("sess_ttfd", 1, create=False) if speaks_uamp else [b"go 1"]
        done = b'"response.done"' if speaks_uamp else b'"done"'
        t0 = time.perf_counter()
        client.send(*msgs)
        first = None
        finished = False
        while not finished:
            for m in client.messages():
                if first is None and b'"response.delta"' in m:
                    first = time.perf_counter()
                if done in m:
                    finished = True
        assert first is not None
        samples.append(first - t0)
    client.close()
    return statistics.median(samples) * 1000


def _ttfd_responses(client: WSClient, sid: str, count: int) -> None:
    """Run ``count`` one-delta responses one after another on session ``sid``."""
    for _ in range(count):
        client.send(*uamp_start(sid, 1, create=False))
        while not any(b'"response.done"' in m for m in client.messages()):
            pass


def _call_group(path: str) -> str:
    """Which package a profiled function's file belongs to (``builtins`` for C functions)."""
    if path == "~":
        return "builtins"
    parts = Path(path).parts
    for name in ("uamp_proto", "uamp_trio", "uamp_agents", "trio", "websockets", "wsproto"):
        if name in parts:
            return name
    return "other"


def ws_calls(kind: str, top: int = 25) -> None:
    """Print the Python calls a uamp server makes per one-delta WebSocket response.

    The server runs under cProfile (:func:`_profiled`), switched on for
    ``CALLS_RESPONSES`` responses after as many to warm up, on one session
    of one connection -- the ``ttfd`` row's traffic.
    """
    import pstats
    import signal
    import tempfile

    out = Path(tempfile.mkdtemp(prefix="uamp-bench-calls-")) / "server.prof"
    server = Running(kind, profile=out)
    try:
        client = WSClient(server.port, "/agents/flood/uamp")
        client.send(*uamp_start("sess_calls", 0, create=True)[:1])
        while not any(b'"capabilities"' in m for m in client.messages()):
            pass
        _ttfd_responses(client, "sess_calls", CALLS_RESPONSES)
        os.kill(server.proc.pid, signal.SIGUSR1)
        _ttfd_responses(client, "sess_calls", CALLS_RESPONSES)
        os.kill(server.proc.pid, signal.SIGUSR2)
        deadline = time.monotonic() + 30
        while not out.exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"server {kind} wrote no profile")
            time.sleep(0.05)
        client.close()
    finally:
        server.stop()
    stats = pstats.Stats(str(out))
    raw: Any = stats.stats  # type: ignore[attr-defined]  # {func: (cc, nc, tt, ct, callers)}
    total = sum(nc for _, nc, _, _, _ in raw.values())
    print(f"\n{kind}: {total / CALLS_RESPONSES:,.1f} Python calls per one-delta response")
    groups: dict[str, int] = {}
    for (path, _, _), (_, nc, _, _, _) in raw.items():
        group = _call_group(path)
        groups[group] = groups.get(group, 0) + nc
    print(
        "  by package: "
        + ", ".join(
            f"{g} {c / CALLS_RESPONSES:.0f}" for g, c in sorted(groups.items(), key=lambda i: -i[1])
        )
    )
    ranked = sorted(raw.items(), key=lambda item: -item[1][1])[:top]
    for (path, line, name), (_, nc, _, _, _) in ranked:
        where = f"{Path(path).name}:{line}" if line else path
        print(f"  {nc / CALLS_RESPONSES:>7.2f}  {name}  ({where})")


#: One-delta responses per block of ``--only instructions`` (after as many to warm up).
INSTRUCTIONS_BLOCK = 200
#: Where ``--only instructions`` measures its late block: after this many responses.
INSTRUCTIONS_LATE = 1000


def _one_delta(kind: str, client: WSClient, count: int) -> None:
    """``count`` one-delta responses, one after another, on ``client`` (the ``ttfd`` traffic)."""
    if _is_uamp(kind) or kind == "uamp-bound":
        _ttfd_responses(client, "sess_cg", count)
        return
    for _ in range(count):
        client.send(b"go 1")
        while not any(b'"done"' in m for m in client.messages()):
            pass


def _under_callgrind(kind: str, out: Path) -> Running:
    """A ``kind`` server under callgrind, counting nothing until ``callgrind_control -i on``."""
    prefix = ("valgrind", "--tool=callgrind", "--instr-atstart=no")
    return Running(kind, prefix=(*prefix, f"--callgrind-out-file={out}"))


def ws_instructions(kinds: list[str]) -> dict[str, list[float]]:
    """Print each server's instructions per one-delta WebSocket response (callgrind).

    Each server runs alone under ``valgrind --tool=callgrind`` with
    instrumentation switched on (``callgrind_control``) only for the
    measured responses, on one session of one connection: responses
    ``INSTRUCTIONS_BLOCK + 1`` to twice that (the ``ttfd`` row's session
    length), and for a uamp server a second block after
    ``INSTRUCTIONS_LATE`` responses, which shows what a long session adds
    per response. User-space instructions only (the kernel's socket work,
    the same for every server, is left out); the machine's load does not
    move them.
    """
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix="uamp-bench-cg-"))
    figures: dict[str, list[float]] = {}
    block = INSTRUCTIONS_BLOCK
    print(f"\nInstructions per one-delta WebSocket response (callgrind, {block} responses)")
    for kind in kinds:
        out = tmp / f"{kind.replace('/', '_')}.cg"
        server = _under_callgrind(kind, out)
        pid = str(server.proc.pid)

        def counted(
            count: int, client: WSClient, kind: str = kind, pid: str = pid, out: Path = out
        ) -> float:
            subprocess.run(["callgrind_control", "-i", "on", pid], check=True, capture_output=True)
            _one_delta(kind, client, count)
            subprocess.run(["callgrind_control", "-i", "off", pid], check=True, capture_output=True)
            before = set(tmp.glob(out.name + ".*"))
            subprocess.run(["callgrind_control", "-d", pid], check=True, capture_output=True)
            deadline = time.monotonic() + 60
            while not (dumped := set(tmp.glob(out.name + ".*")) - before):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"callgrind wrote no dump for {kind}")
                time.sleep(0.1)
            time.sleep(0.5)  # the dump is written in one go; let it finish
            text = next(iter(dumped)).read_text()
            # A dump's "summary:" line says 0; its "totals:" line has the count.
            total = next(
                int(line.split()[1]) for line in text.splitlines() if line.startswith("totals:")
            )
            return total / count

        try:
            speaks_uamp = _is_uamp(kind) or kind == "uamp-bound"
            client = WSClient(server.port, "/agents/flood/uamp" if speaks_uamp else "/")
            if speaks_uamp:
                client.send(*uamp_start("sess_cg", 0, create=True)[:1])
                while not any(b'"capabilities"' in m for m in client.messages()):
                    pass
            _one_delta(kind, client, block)
            figures[kind] = [counted(block, client)]
            if _is_uamp(kind):
                _one_delta(kind, client, INSTRUCTIONS_LATE - 2 * block)
                figures[kind].append(counted(block, client))
            client.close()
        finally:
            server.stop()
        late = figures[kind][1:]
        line = f"  {kind:<14} {figures[kind][0]:>11,.0f}"
        if late:
            line += f"   after {INSTRUCTIONS_LATE}: {late[0]:>11,.0f}"
        print(line, flush=True)
    if "websockets" in figures:
        base = figures["websockets"][0]
        for kind, values in figures.items():
            if kind != "websockets":
                print(f"  {kind}/websockets = {values[0] / base:.2f}x")
    return figures


def many_rate(kind: str, port: int, n: int, sessions: int, multiplex: bool) -> float:
    """Events per second overall for ``sessions`` concurrent responses."""
    per = max(1, n // sessions)
    sel = selectors.DefaultSelector()
    clients: list[WSClient] = []
    remaining = sessions
    if multiplex:
        c = WSClient(port, "/agents/flood/uamp")
        clients.append(c)
    else:
        for _ in range(sessions):
            clients.append(WSClient(port, "/agents/flood/uamp" if _is_uamp(kind) else "/"))
    for c in clients:
        c.sock.setblocking(False)
        sel.register(c.sock, selectors.EVENT_READ, c)
    done = b'"response.done"' if _is_uamp(kind) else b'"done"'
    count = 0
    t0 = time.perf_counter()
    if multiplex:
        msgs = []
        for i in range(sessions):
            msgs.extend(uamp_start(f"sess_{i}", per))
        clients[0].sock.setblocking(True)
        clients[0].send(*msgs)
        clients[0].sock.setblocking(False)
    else:
        for i, c in enumerate(clients):
            c.sock.setblocking(True)
            c.send(*(uamp_start(f"sess_{i}", per) if _is_uamp(kind) else [f"go {per}".encode()]))
            c.sock.setblocking(False)
    while remaining:
        for key, _ in sel.select():
            c = key.data
            try:
                data = c.sock.recv(262144)
            except BlockingIOError:
                continue
            for m in c.engine.feed(data):
                if b'"response.delta"' in m:
                    count += 1
                elif done in m:
                    remaining -= 1
                elif b'"session.error"' in m:
                    raise RuntimeError(m.decode())
            owed = c.engine.take()  # pongs
            if owed:
                c.sock.setblocking(True)
                c.sock.sendall(owed)
                c.sock.setblocking(False)
    elapsed = time.perf_counter() - t0
    for c in clients:
        c.close()
    assert count == per * sessions, (count, per * sessions)
    return count / elapsed


def _http_post(
    sock: socket.socket,
    body: bytes,
    buf: bytearray,
    on_data: Callable[[bytes], None] | None = None,
    target: str = "/chat/completions",
    headers: tuple[tuple[str, str], ...] = (),
) -> tuple[bytes, bytes]:
    """One POST ``target`` on a keep-alive socket; returns (head, raw body).

    ``on_data`` sees every piece of the body as it arrives.
    """
    import h11

    conn = h11.Connection(h11.CLIENT)
    sock.sendall(
        conn.send(
            h11.Request(
                method="POST",
                target=target,
                headers=[
                    ("host", "127.0.0.1"),
                    ("content-type", "application/json"),
                    ("content-length", str(len(body))),
                    *headers,
                ],
            )
        )
        + conn.send(h11.Data(data=body))
        + conn.send(h11.EndOfMessage())
    )
    if buf:  # b"" would mean end of stream to h11
        conn.receive_data(bytes(buf))
        buf.clear()
    parts: list[bytes] = []
    head = b""
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            data = sock.recv(262144)
            if not data:
                raise RuntimeError("the server closed the connection")
            conn.receive_data(data)
        elif isinstance(event, h11.Response):
            head = str(event.status_code).encode()
        elif isinstance(event, h11.Data):
            parts.append(bytes(event.data))
            if on_data is not None:
                on_data(parts[-1])
        elif isinstance(event, h11.EndOfMessage):
            buf.extend(conn.trailing_data[0])
            return head, b"".join(parts)
        else:
            raise RuntimeError(f"unexpected {event!r}")


def sse_rate(kind: str, port: int, n: int) -> float:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    body = orjson.dumps(
        {"model": "flood", "stream": True, "messages": [{"role": "user", "content": str(n)}]}
    )
    t0 = time.perf_counter()
    status, raw = _http_post(sock, body, bytearray())
    elapsed = time.perf_counter() - t0
    sock.close()
    chunks = raw.count(b'"content":"tok "')
    assert status == b"200" and chunks == n and raw.endswith(b"data: [DONE]\n\n"), (kind, chunks)
    return n / elapsed


def anthropic_rate(kind: str, port: int, n: int) -> float:
    """Anthropic Messages SSE events/s (``uamp``), or Chat Completions chunks/s (``uamp-chat``)."""
    if kind == "uamp-chat":
        return sse_rate(kind, port, n)
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    ask = {"role": "user", "content": str(n)}
    body = orjson.dumps({"model": "flood", "max_tokens": 10**9, "stream": True, "messages": [ask]})
    version = (("anthropic-version", "2023-06-01"),)
    t0 = time.perf_counter()
    status, raw = _http_post(sock, body, bytearray(), target="/v1/messages", headers=version)
    elapsed = time.perf_counter() - t0
    sock.close()
    events = raw.count(b'"text":"tok "')
    assert status == b"200" and events == n and raw.endswith(b"event: message_stop\n"
                                                            b'data: {"type":"message_stop"}\n\n'
                                                            ), (kind, events)  # fmt: skip
    return n / elapsed


def ai_sdk_rate(kind: str, port: int, n: int) -> float:
    """AI SDK ``text-delta`` chunks/s (``uamp``), or Chat Completions chunks/s (``uamp-chat``)."""
    if kind == "uamp-chat":
        return sse_rate(kind, port, n)
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    user = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": str(n)}]}
    body = orjson.dumps({"id": f"chat-{os.urandom(6).hex()}", "messages": [user]})
    t0 = time.perf_counter()
    status, raw = _http_post(sock, body, bytearray(), target="/ai-sdk")
    elapsed = time.perf_counter() - t0
    sock.close()
    deltas = raw.count(b'"delta":"tok "')
    assert status == b"200" and deltas == n and raw.endswith(b"data: [DONE]\n\n"), (kind, deltas)
    return n / elapsed


def a2a_rate(kind: str, port: int, n: int) -> float:
    """A2A 1.0 ``SendStreamingMessage`` artifact updates/s (``uamp``), or Chat Completions chunks/s.

    One JSON-RPC streaming send: the task snapshot, one artifact update per
    delta, the final status update (``uamp-chat``: Chat Completions chunks).
    """
    if kind == "uamp-chat":
        return sse_rate(kind, port, n)
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    message = {
        "messageId": os.urandom(8).hex(),
        "role": "ROLE_USER",
        "parts": [{"text": str(n)}],
    }
    body = orjson.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendStreamingMessage",
            "params": {"message": message},
        }
    )
    version = (("a2a-version", "1.0"),)
    t0 = time.perf_counter()
    status, raw = _http_post(sock, body, bytearray(), target="/agents/flood/a2a", headers=version)
    elapsed = time.perf_counter() - t0
    sock.close()
    updates = raw.count(b'"text":"tok "')
    assert status == b"200" and updates == n and b"TASK_STATE_COMPLETED" in raw, (kind, updates)
    return n / elapsed


def chunk_instructions(row: str, kinds: list[str], n: int) -> dict[str, float]:
    """Print each server's instructions per chunk of one stream of a per-chunk ``row`` (callgrind).

    ``row`` is one of :data:`CHUNK_ROWS` (``a2a``, ``ai-sdk`` ...); its
    last kind is the Chat Completions server the others are compared with
    (``uamp-chat``; ``uamp`` for ``sse-responses``), measured as the row
    measures it. Each server runs alone under ``valgrind --tool=callgrind``,
    instrumentation switched on (``callgrind_control``) for one stream of
    ``n`` deltas after a stream of as many to warm up; the count is every
    instruction of the server process meanwhile (the request's own work
    spread over its chunks), user space only, so the machine's load does
    not move it.
    """
    import tempfile

    rate = CHUNK_ROWS[row]
    chat = kinds[-1]
    tmp = Path(tempfile.mkdtemp(prefix="uamp-bench-chunk-cg-"))
    figures: dict[str, float] = {}
    print(f"\nInstructions per chunk of one {n}-delta stream (callgrind; {row} row)")
    for kind in kinds:
        out = tmp / f"{kind.replace('/', '_')}.cg"
        server = _under_callgrind(kind, out)
        pid = str(server.proc.pid)
        try:
            rate(kind, server.port, n)
            subprocess.run(["callgrind_control", "-i", "on", pid], check=True, capture_output=True)
            rate(kind, server.port, n)
            subprocess.run(["callgrind_control", "-i", "off", pid], check=True, capture_output=True)
        finally:
            stop_process(server.proc, grace=300)  # callgrind writes its counts on the way out
        lines = out.read_text().splitlines()
        total = next(int(line.split()[1]) for line in lines if line.startswith("totals:"))
        figures[kind] = total / n
        print(f"  {kind:<14} {figures[kind]:>9,.0f}", flush=True)
    for kind, value in figures.items():
        if kind != chat:
            print(f"  {kind}/{chat} = {value / figures[chat]:.3f}x")
    return figures


def _mcp_session(port: int) -> str:
    """An MCP session on the flood agent (``initialize``, then ``notifications/initialized``)."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port)
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "bench", "version": "0"},
        },
    }
    conn.request("POST", "/agents/flood/mcp", orjson.dumps(init), headers)
    answer = conn.getresponse()
    answer.read()
    session = answer.getheader("mcp-session-id")
    assert answer.status == 200 and session, answer.status
    done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    conn.request(
        "POST", "/agents/flood/mcp", orjson.dumps(done), {**headers, "mcp-session-id": session}
    )
    answer = conn.getresponse()
    answer.read()
    conn.close()
    return session


def mcp_rate(kind: str, port: int, n: int) -> float:
    """MCP ``notifications/progress``/s of one streamed ``tools/call`` (``uamp``), or Chat chunks/s.

    MCP Streamable HTTP: a ``tools/call`` with a ``progressToken`` from a
    client that accepts SSE is answered as an SSE stream of one
    ``notifications/progress`` per text delta, then the call's result
    (``uamp-chat``: Chat Completions chunks). The session's ``initialize``
    is not timed.
    """
    if kind == "uamp-chat":
        return sse_rate(kind, port, n)
    session = _mcp_session(port)
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "flood", "arguments": {"prompt": str(n)}, "_meta": {"progressToken": 7}},
    }
    headers = (("accept", "application/json, text/event-stream"), ("mcp-session-id", session))
    t0 = time.perf_counter()
    status, raw = _http_post(
        sock, orjson.dumps(call), bytearray(), target="/agents/flood/mcp", headers=headers
    )
    elapsed = time.perf_counter() - t0
    sock.close()
    notes = raw.count(b'"message":"tok "')
    assert status == b"200" and notes == n and b'"id":1,"result"' in raw, (kind, notes, raw[-300:])
    return n / elapsed


def responses_rate(kind: str, port: int, n: int) -> float:
    """``response.output_text.delta`` events/s of one streamed Responses API response."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    body = orjson.dumps({"model": "flood", "stream": True, "input": str(n)})
    t0 = time.perf_counter()
    status, raw = _http_post(sock, body, bytearray(), target="/v1/responses")
    elapsed = time.perf_counter() - t0
    sock.close()
    deltas = raw.count(b'"delta":"tok "')
    ended = b"event: response.completed\n" in raw
    assert status == b"200" and deltas == n and ended, (kind, deltas, raw[-300:])
    return n / elapsed


def sse_ttfd(kind: str, port: int, repeats: int = TTFD_REPEATS) -> float:
    """Median milliseconds from a streamed request to its first text chunk."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    body = orjson.dumps(
        {"model": "flood", "stream": True, "messages": [{"role": "user", "content": "1"}]}
    )
    buf = bytearray()
    samples = []
    for _ in range(repeats):
        first: list[float] = []

        def on_data(data: bytes, first: list[float] = first) -> None:
            if not first and b'"content":"tok "' in data:
                first.append(time.perf_counter())

        t0 = time.perf_counter()
        status, raw = _http_post(sock, body, buf, on_data)
        assert status == b"200" and first and raw.endswith(b"data: [DONE]\n\n"), (kind, raw)
        samples.append(first[0] - t0)
    sock.close()
    return statistics.median(samples) * 1000


class Measured(float):
    """A rate that also says how many units of work it measured (for CPU per unit).

    For a measurement whose wall time includes more than the work (the
    HTTP/2 rows start a client process).
    """

    units: float

    def __new__(cls, value: float, units: float) -> Measured:
        made = super().__new__(cls, value)
        made.units = units
        return made

    @property
    def value(self) -> float:
        """The rate, as a plain float."""
        return float(self)


#: Requests in flight on the HTTP/2 rows.
H2_CONCURRENCY = 16


def h2_rate(kind: str, port: int, n: int, stream: bool) -> float:
    """Over h2c (prior knowledge), ``H2_CONCURRENCY`` streams: requests/s, or chunks/s streamed.

    The load comes from ``uamp bench --http2`` (httpx with h2) in a process of
    its own, the same client for every server.
    """
    import json
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        argv = [sys.executable, "-m", "uamp", "bench", f"http://127.0.0.1:{port}/chat/completions"]
        argv += ["--http2", "--model", "flood", "-c", str(H2_CONCURRENCY), "--no-progress"]
        argv += ["--prompt", str(n if stream else 5), "--json", out.name]
        argv += ["-n", str(max(H2_CONCURRENCY, 20 if stream else 400))]
        argv += ["--stream" if stream else "--no-stream"]
        ran = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
        if ran.returncode != 0:
            raise RuntimeError(f"uamp bench against {kind} failed: {ran.stdout[-1500:]}")
        result = json.loads(Path(out.name).read_text())
    assert result["errors"] == 0 and result["protocols"] == ["HTTP/2"], (kind, result)
    if stream:
        return Measured(result["deltas_per_s"], result["deltas"])
    return Measured(result["requests_per_s"], result["requests"])


def payload_sizes(port: int) -> tuple[int, int]:
    """(bytes of a 100-chunk SSE body, bytes of a 5-word completion) from one server."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = bytearray()
    _, sse = _http_post(
        sock,
        orjson.dumps(
            {"model": "flood", "stream": True, "messages": [{"role": "user", "content": "100"}]}
        ),
        buf,
    )
    _, plain = _http_post(
        sock, orjson.dumps({"model": "flood", "messages": [{"role": "user", "content": "5"}]}), buf
    )
    sock.close()
    return len(sse), len(plain)


def json_rate(kind: str, port: int, seconds: float = 1.0) -> float:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    body = orjson.dumps({"model": "flood", "messages": [{"role": "user", "content": "5"}]})
    buf = bytearray()
    count = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        status, raw = _http_post(sock, body, buf)
        assert status == b"200" and b"tok tok tok tok tok" in raw, raw[:200]
        count += 1
    elapsed = time.perf_counter() - t0
    sock.close()
    return count / elapsed


# --- driver ---------------------------------------------------------------------------


def _server_cpu(pid: int) -> float | None:
    """User + system CPU seconds so far of process ``pid`` and its descendants (Linux).

    ``None`` without ``/proc``. Descendants count because some servers work
    in child processes (Granian's worker).
    """
    stats: dict[int, tuple[int, float]] = {}  # pid -> (parent, cpu seconds)
    tick = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        stats[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick)
    if pid not in stats:
        return None
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        total += stats[current][1]
        todo.extend(p for p, (parent, _) in stats.items() if parent == current)
    return total


def measure(
    title: str,
    unit: str,
    runs: dict[str, Callable[[int], float]],
    rounds: int,
    higher_is_better: bool = True,
    http: bool = False,
    cpu_unit: str = "",
    placement: str = "free",
) -> dict[str, float]:
    """Alternate the measurements ``rounds`` times; print medians and ratios.

    ``placement`` pins this process and the servers to CPUs (see
    ``--placement`` in the module docstring) for the row, and no longer.

    Beside each median goes the server's CPU time (user + system, from
    ``/proc``) per unit of work over all rounds: per ``cpu_unit`` (a rate
    row's unit of work, or one response of a latency row). Wall-clock rows
    of sequential requests are mostly loopback wake-ups on this kind of
    machine; the CPU figure is the steadier comparison of the servers' work.
    """
    results: dict[str, list[float]] = {k: [] for k in runs}
    cpu = dict.fromkeys(runs, 0.0)
    work = dict.fromkeys(runs, 0.0)
    servers = {k: Running(k) for k in runs}
    order = list(runs)
    mine = os.sched_getaffinity(0)
    try:
        _place(placement, [s.proc.pid for s in servers.values()])
        if http:
            sizes = {k: payload_sizes(servers[k].port) for k in order}
            print(f"\n  payload bytes (100-chunk SSE body, 5-word completion): {sizes}")
        for k, fn in runs.items():  # warm up
            fn(servers[k].port)
        for r in range(rounds):
            # Alternate, and rotate who goes first, so no server always
            # follows the same one (caches, CPU frequency, the other core).
            for k in order[r % len(order) :] + order[: r % len(order)]:
                pid = servers[k].proc.pid
                c0, t0 = _server_cpu(pid), time.perf_counter()
                value = runs[k](servers[k].port)
                t1, c1 = time.perf_counter(), _server_cpu(pid)
                done: float | None = None
                if isinstance(value, Measured):
                    value, done = value.value, value.units
                results[k].append(value)
                if c0 is not None and c1 is not None:
                    cpu[k] += c1 - c0
                    if done is None:
                        done = value * (t1 - t0) if higher_is_better else TTFD_REPEATS
                    work[k] += done
    finally:
        os.sched_setaffinity(0, mine)
        for s in servers.values():
            s.stop()
    med = {k: statistics.median(v) for k, v in results.items()}
    print(f"\n{title}" + (f", placement {placement}" if placement != "free" else ""))
    for k, v in med.items():
        line = f"  {k:<12} {v:>12,.{3 if unit == 'ms' else 1}f} {unit}"
        if k != "uamp" and "uamp" in med:
            # uamp's figure over this one: a rate (above 1 is faster) or a
            # time (above 1 is slower), as the unit says.
            kind = "rate" if higher_is_better else "time"
            line += f"   uamp/{k} = {med['uamp'] / v:.2f}x {kind}"
        if work[k]:
            per = cpu[k] / work[k] * 1e6
            line = f"{line:<64} server CPU {per:,.{2 if per < 10 else 0}f} us/{cpu_unit}"
        print(line)
    return med


def _place(placement: str, servers: list[int]) -> None:
    """Pin this process (the client) and the ``servers`` processes as ``placement`` says."""
    if placement == "free":
        return
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2 and placement == "split":
        raise SystemExit("--placement split needs two CPUs")
    client = cpus[0]
    server = cpus[-1] if placement == "split" else client
    os.sched_setaffinity(0, {client})
    todo = list(servers)
    while todo:  # each server's threads, and its children's (Granian's workers)
        pid = todo.pop()
        for task in os.listdir(f"/proc/{pid}/task"):
            os.sched_setaffinity(int(task), {server})
            children = Path(f"/proc/{pid}/task/{task}/children").read_text().split()
            todo.extend(int(c) for c in children)


def _by_kind(fn: Callable[[str, int, int], float], kind: str, n: int, port: int) -> float:
    """``fn(kind, port, n)``: a measurement bound to its server kind and size."""
    return fn(kind, port, n)


def _h2(kind: str, n: int, stream: bool, port: int) -> float:
    return h2_rate(kind, port, n, stream)


def _many(kind: str, n: int, multiplex: bool, port: int) -> float:
    return many_rate(kind, port, n, 100, multiplex=multiplex)


#: ``uamp@REV`` row names -> the exported tree of that revision.
REVISIONS: dict[str, Path] = {}


def export_revision(rev: str) -> Path:
    """The tracked files of git revision ``rev`` in a temporary folder."""
    import tempfile

    root = Path(__file__).resolve().parents[1]
    folder = Path(tempfile.mkdtemp(prefix="uamp-bench-rev-"))
    archive = subprocess.run(
        ["git", "archive", rev], cwd=root, check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder


#: The per-chunk rows whose instructions ``--only ROW-instructions`` counts
#: (:func:`chunk_instructions`): each measurement, by server kind.
CHUNK_ROWS: dict[str, Callable[[str, int, int], float]] = {
    "sse-responses": lambda kind, port, n: (
        responses_rate(kind, port, n) if kind == "uamp-responses" else sse_rate(kind, port, n)
    ),
    "anthropic": anthropic_rate,
    "ai-sdk": ai_sdk_rate,
    "a2a": a2a_rate,
    "mcp": mcp_rate,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deltas", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default="ws,sse,sse-responses,json,ttfd,ttfd-sse,mux,conns")
    parser.add_argument(
        "--placement",
        choices=PLACEMENTS,
        default="free",
        help="where the latency rows run the client and the servers (module docstring)",
    )
    parser.add_argument("--serve", choices=sorted(SERVERS))
    parser.add_argument("--port-file", type=Path)
    parser.add_argument("--against", metavar="REV", help="add uamp as of git revision REV")
    parser.add_argument("--observed", action="store_true", help="add uamp with observation on")
    parser.add_argument(
        "--agent", action="store_true", help="add uamp-agent: a UAP agent through the bridge"
    )
    parser.add_argument(
        "--granian", action="store_true", help="add granian-asgi and granian-rsgi to the HTTP rows"
    )
    parser.add_argument(
        "--asgi",
        action="store_true",
        help="add uamp-asgi (uamp_asgi under uvicorn) and uamp-asgi-granian to the HTTP rows",
    )
    args = parser.parse_args()
    if args.serve:
        profile = os.environ.get(PROFILE_ENV)
        if profile:
            _profiled(SERVERS[args.serve], args.port_file, profile)
        else:
            SERVERS[args.serve](args.port_file)
        return
    n = args.deltas
    only = set(args.only.split(","))
    extra: list[str] = []
    if args.against:
        REVISIONS[f"uamp@{args.against}"] = export_revision(args.against)
        extra.append(f"uamp@{args.against}")
    if args.observed:
        extra.append("uamp+obs")
    if args.agent:
        extra.append("uamp-agent")
    print(
        f"uamp transport benchmarks: {n} deltas per response, {args.rounds} rounds, "
        f"median; {os.cpu_count()} CPUs"
    )
    ws_kinds = ("uamp", *extra, "websockets", "trio-ws")
    if "calls" in only:
        for kind in ("uamp", *extra):
            ws_calls(kind)
    if "instructions" in only:
        ws_instructions(["websockets", "uamp", *extra, "uamp-bound", "trio-ws"])
    revisions = [k for k in extra if k.startswith("uamp@")]
    for row in CHUNK_ROWS:
        if f"{row}-instructions" in only:
            if row == "sse-responses":
                chunk_instructions(row, ["uamp-responses", "uamp"], n)
            else:
                chunk_instructions(row, ["uamp", *revisions, "uamp-chat"], n)
    granian = ("granian-asgi", "granian-rsgi") if args.granian else ()
    asgi = ("uamp-asgi", "uamp-asgi-granian") if args.asgi else ()
    http_kinds = ("uamp", *extra, *asgi, "starlette", *granian, "trio-h11")
    # (--only name, title, unit, the measurement for one server kind, the kinds, options)
    rows: list[tuple[str, str, str, Callable[[str], Callable[[int], float]], Any, Any]] = [
        (
            "ws",
            "WebSocket: response.delta events/s to one client",
            "events/s",
            lambda k: functools.partial(_by_kind, ws_rate, k, n),
            ws_kinds,
            {"cpu_unit": "delta"},
        ),
        (
            "sse",
            "SSE: chat.completion.chunk events/s",
            "chunks/s",
            lambda k: functools.partial(_by_kind, sse_rate, k, n),
            http_kinds,
            {"http": True, "cpu_unit": "chunk"},
        ),
        (
            "sse-responses",
            "SSE: Responses API output_text.delta events/s (uamp-responses) vs Chat Completions",
            "deltas/s",
            lambda k: functools.partial(
                _by_kind, responses_rate if k == "uamp-responses" else sse_rate, k, n
            ),
            ("uamp", "uamp-responses"),
            {"cpu_unit": "delta"},
        ),
        (
            "json",
            "Non-streaming completions/s (sequential, keep-alive)",
            "req/s",
            lambda k: functools.partial(json_rate, k),
            http_kinds,
            {"cpu_unit": "request"},
        ),
        (
            "ttfd-sse",
            "Time to first delta (Chat Completions SSE, median)",
            "ms",
            lambda k: functools.partial(sse_ttfd, k),
            http_kinds,
            {"higher_is_better": False, "cpu_unit": "response"},
        ),
        (
            "ttfd",
            "Time to first delta (WebSocket, median)",
            "ms",
            lambda k: functools.partial(ws_ttfd, k),
            ("uamp", "uamp-bound", *ws_kinds[1:]),
            {"higher_is_better": False, "cpu_unit": "response"},
        ),
        (
            "mux",
            "100 sessions multiplexed on one uamp WebSocket",
            "events/s",
            lambda k: functools.partial(_many, k, n, True),
            ("uamp",),
            {"cpu_unit": "event"},
        ),
        (
            "conns",
            "100 concurrent WebSocket connections",
            "events/s",
            lambda k: functools.partial(_many, k, n, False),
            ws_kinds,
            {"cpu_unit": "event"},
        ),
    ]
    rows.append(
        (
            "anthropic",
            "SSE: Anthropic Messages events/s (uamp) vs Chat Completions chunks/s (uamp-chat)",
            "events/s",
            lambda k: functools.partial(_by_kind, anthropic_rate, k, n),
            ("uamp", "uamp-chat"),
            {"cpu_unit": "event"},
        )
    )
    rows.append(
        (
            "ai-sdk",
            "SSE: AI SDK text-delta chunks/s (uamp) vs Chat Completions chunks/s (uamp-chat)",
            "chunks/s",
            lambda k: functools.partial(_by_kind, ai_sdk_rate, k, n),
            ("uamp", *(k for k in extra if k.startswith("uamp@")), "uamp-chat"),
            {"cpu_unit": "chunk"},
        )
    )
    rows.append(
        (
            "a2a",
            "SSE: A2A 1.0 artifact updates/s (uamp) vs Chat Completions chunks/s (uamp-chat)",
            "chunks/s",
            lambda k: functools.partial(_by_kind, a2a_rate, k, n),
            ("uamp", *(k for k in extra if k.startswith("uamp@")), "uamp-chat"),
            {"cpu_unit": "chunk"},
        )
    )
    rows.append(
        (
            "mcp",
            "SSE: MCP tools/call progress notifications/s (uamp) vs Chat Completions chunks/s",
            "chunks/s",
            lambda k: functools.partial(_by_kind, mcp_rate, k, n),
            ("uamp", *(k for k in extra if k.startswith("uamp@")), "uamp-chat"),
            {"cpu_unit": "chunk"},
        )
    )
    h2_kinds = ("uamp", *extra, "hypercorn")
    rows += [
        (
            "h2-json",
            f"HTTP/2 (h2c): non-streamed completions/s, {H2_CONCURRENCY} streams",
            "req/s",
            lambda k: functools.partial(_h2, k, n, False),
            h2_kinds,
            {"cpu_unit": "request"},
        ),
        (
            "h2-sse",
            f"HTTP/2 (h2c): streamed chunks/s, {H2_CONCURRENCY} streams",
            "chunks/s",
            lambda k: functools.partial(_h2, k, min(n, 1000), True),
            h2_kinds,
            {"cpu_unit": "chunk"},
        ),
    ]
    for name, title, unit, run, kinds, options in rows:
        if name in only:
            if options.get("higher_is_better") is False:  # the latency rows
                options = {**options, "placement": args.placement}
            measure(title, unit, {k: run(k) for k in kinds}, args.rounds, **options)


if __name__ == "__main__":
    main()
