"""What a wake-up costs: server CPU per request back to back, and the same requests spaced out.

Run: ``python bench/wakeup.py [--rate 100] [--paced 800] [--back 3000]`` (the
``bench`` extra; the first run installs webagents 0.3.9 into its own
virtualenv under ``build/bench-cache/``, as ``bench/peers.py`` does).

One client, one keep-alive connection, each request written in one ``send``:
first ``--back`` requests back to back (the next one written as soon as the
answer is read, so the server is idle only for the client's turn-around),
then ``--paced`` requests at ``--rate`` a second (the server idle between
them, as a server at light load is). Printed per server: its CPU time (user
+ system, ``/proc``) per request both ways, how many times it slept per
request, and how much more a spaced-out request costs.

The servers, each answering the same way every time:

* ``asyncio``: an ``asyncio.Protocol`` writing a fixed reply, the least an
  asyncio server does per request;
* ``trio``: a trio task that waits for the socket, reads it and writes a
  fixed reply (``wait_readable``, ``os.read``, ``os.write``), the least a trio
  server does per request;
* ``uamp GET /models``: ``uamp serve`` (``bench/peers_agent.py``'s
  in-process agent, as shipped: access log and metrics on), a bare route;
* ``uamp plain`` and ``uamp-quiet plain`` (access log and metrics off): the
  same server's plain Chat Completions turn, ``bench/peers.py``'s ``plain``;
* ``webagents plain``: webagents 0.3.9 with its model in process
  (``bench/peers.py``'s ``local`` setup), the same turn.

On this project's virtual machine a process that slept for ten milliseconds
runs its next request several times slower than one that did not, and the
smaller the request the larger the factor: the wake-up, not the request's
own work, is most of what a lightly loaded uamp server spends
(docs/performance.md, "What a wake-up costs").
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

import peers
from transports import _server_cpu

_REPLY = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: application/json\r\n\r\n{}"


# --- the bare servers ----------------------------------------------------------------


def serve_asyncio(port_file: Path) -> None:
    """The asyncio row: a protocol that answers every read with the fixed reply."""

    class Reply(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            assert isinstance(transport, asyncio.Transport)
            self.transport = transport

        def data_received(self, data: bytes) -> None:
            self.transport.write(_REPLY)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(Reply, "127.0.0.1", 0)
        port_file.write_text(str(server.sockets[0].getsockname()[1]))
        await server.serve_forever()

    asyncio.run(main())


def serve_trio(port_file: Path) -> None:
    """The trio row: a task per connection that waits, reads and writes the fixed reply."""
    import trio

    async def handle(stream: trio.SocketStream) -> None:
        fd = stream.socket.fileno()
        while True:
            await trio.lowlevel.wait_readable(fd)
            if not os.read(fd, 65536):
                return
            os.write(fd, _REPLY)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            serve = functools.partial(trio.serve_tcp, handle, 0, host="127.0.0.1")
            listeners = await nursery.start(serve)
            port_file.write_text(str(listeners[0].socket.getsockname()[1]))

    trio.run(main)


def start_bare(kind: str, tmp: Path) -> peers.Server:
    """``python bench/wakeup.py --serve KIND``."""
    port_file = tmp / f"{kind}.port"
    argv = [sys.executable, __file__, "--serve", kind, "--port-file", str(port_file)]
    return peers.Server(argv, dict(os.environ), "/", port_file)


# --- the client -------------------------------------------------------------------------


def _request(path: str, body: bytes | None) -> bytes:
    if body is None:
        return f"GET {path} HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer bench\r\n\r\n".encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer bench\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def _answer(sock: socket.socket) -> None:
    """Read one response whose length its head gives."""
    buf = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        buf += chunk
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            continue
        head = buf[:end].lower()
        at = head.find(b"content-length:")
        length = int(head[at + 15 :].split(b"\r\n", 1)[0]) if at >= 0 else 0
        if len(buf) >= end + 4 + length:
            return


def _sleeps(pid: int) -> int:
    """Voluntary context switches of all of ``pid``'s threads so far."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        for line in (task / "status").read_text().splitlines():
            if line.startswith("voluntary_ctxt_switches"):
                total += int(line.split()[1])
    return total


def measure(
    pid: int, port: int, request: bytes, count: int, rate: float | None
) -> tuple[float, float]:
    """Server CPU µs and sleeps per request over ``count`` requests (``rate``: per second)."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(50):  # warm up
            sock.sendall(request)
            _answer(sock)
        cpu0, sleeps0 = _server_cpu(pid), _sleeps(pid)
        start = time.perf_counter()
        for i in range(count):
            sock.sendall(request)
            _answer(sock)
            if rate:
                wait = start + (i + 1) / rate - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
        cpu1, sleeps1 = _server_cpu(pid), _sleeps(pid)
    if cpu0 is None or cpu1 is None:
        raise RuntimeError("needs /proc")
    return (cpu1 - cpu0) / count * 1e6, (sleeps1 - sleeps0) / count


def _ratio(a: float, b: float) -> float:
    """``a / b``; NaN when ``b`` is 0 (too few requests for ``/proc``'s 10 ms ticks)."""
    return a / b if b else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=100.0, help="paced requests per second")
    parser.add_argument("--paced", type=int, default=800, help="requests at --rate")
    parser.add_argument("--back", type=int, default=3000, help="requests back to back")
    parser.add_argument("--json", type=Path, help="write the figures as JSON")
    parser.add_argument(
        "--cache",
        type=Path,
        default=peers.VENV.parent,
        help="the peers' virtualenvs (default build/bench-cache)",
    )
    parser.add_argument("--serve", choices=["asyncio", "trio"])
    parser.add_argument("--port-file", type=Path)
    args = parser.parse_args()
    if args.serve:
        (serve_asyncio if args.serve == "asyncio" else serve_trio)(args.port_file)
        return
    tmp = Path(tempfile.mkdtemp(prefix="uamp-wakeup-"))
    plain = json.dumps({"model": "peer", "messages": [{"role": "user", "content": "plain"}]})
    completions = "/agents/peer/v1/chat/completions"
    rows: list[tuple[str, str, bytes]] = [
        ("asyncio", "asyncio", _request("/", None)),
        ("trio", "trio", _request("/", None)),
        ("uamp GET /models", "uamp", _request("/agents/peer/v1/models", None)),
        ("uamp plain", "uamp", _request(completions, plain.encode())),
        ("uamp-quiet plain", "uamp-quiet", _request(completions, plain.encode())),
        ("webagents plain", "webagents", _request("/peer/chat/completions", plain.encode())),
    ]
    servers: dict[str, peers.Server] = {}
    figures: dict[str, dict[str, float]] = {}
    print(
        f"server CPU per request, one connection: {args.back} back to back, then "
        f"{args.paced} at {args.rate:g}/s; {os.cpu_count()} CPUs"
    )
    print(f"  {'':<18} {'back to back':>14} {'spaced out':>14} {'x':>6}   sleeps per request")
    try:
        for label, kind, request in rows:
            if kind not in servers:
                if kind in ("asyncio", "trio"):
                    servers[kind] = start_bare(kind, tmp)
                elif kind == "webagents":
                    servers[kind] = peers.start_webagents(None, tmp, args.cache / peers.VENV.name)
                else:
                    servers[kind] = peers.start_uamp(None, tmp, quiet=kind == "uamp-quiet")
            server = servers[kind]
            pid = server.proc.pid
            back, back_sleeps = measure(pid, server.port, request, args.back, None)
            paced, paced_sleeps = measure(pid, server.port, request, args.paced, args.rate)
            figures[label] = {"back_us": back, "paced_us": paced, "back_sleeps": back_sleeps,
                              "paced_sleeps": paced_sleeps}  # fmt: skip
            print(
                f"  {label:<18} {back:11.0f} µs {paced:11.0f} µs {_ratio(paced, back):5.1f}x"
                f"   {back_sleeps:.2f} / {paced_sleeps:.2f}"
            )
        for label in ("uamp plain", "uamp-quiet plain"):
            ours, theirs = figures[label], figures["webagents plain"]
            print(
                f"  webagents / {label}: {_ratio(theirs['back_us'], ours['back_us']):.1f}x back"
                f" to back, {_ratio(theirs['paced_us'], ours['paced_us']):.1f}x spaced out"
            )
    finally:
        for server in servers.values():
            server.stop()
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
