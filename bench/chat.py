"""Chat rooms: fan-out latency and server memory with many participants (docs/chat.md).

Run: ``python bench/chat.py [--participants 200] [--messages 50] [--store memory|sqlite]``

One uamp server runs in its own process on loopback. ``--participants``
UAMP WebSocket clients in this process join one room (one socket each);
then one of them posts ``--messages`` messages, one at a time, each
carrying the time it was sent, and every participant notes when its
``message.created`` arrives. Printed:

* fan-out latency, p50 and p99 over every (message, participant)
  delivery, from the send to the arrival -- the whole path: the sender's
  socket, the server's core and store, every participant's socket, the
  clients' parsing (all clients share this process, so the last of 200 to
  parse a message waits for the 199 before it);
* the time for a message to reach *all* participants, p50 and p99;
* the server's resident memory (``VmRSS``) idle, with everyone joined, and
  after the messages, and per participant.

The same measures for a room of 2 in the same run are the baseline; the
ratio 200/2 is what to compare between runs (timings on a shared machine
are noisy).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import trio
from trio_websocket import WebSocketConnection, open_websocket_url

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from uamp_trio import App, DemoAgent, Server
from uamp_trio.hosting.sessions import SessionLimits
from uamp_trio.stores import Stores, open_chat_store
from uamp_trio.transports import uamp_ws

_SENT = re.compile(rb'"content":"sent (\d+) (\d+)"')


def serve(store: str, port_file: Path) -> None:
    """``--serve``: the server, in its own process."""

    async def run() -> None:
        app = App([DemoAgent()], stores=Stores(chats=open_chat_store(store)))
        limits = SessionLimits(max_sessions=4, idle_timeout=3600)
        app.mount(lambda a: uamp_ws.mount(a, uamp_ws.UampWebSocketConfig(limits=limits)))
        server = Server(app, port=0)
        async with trio.open_nursery() as nursery:
            await nursery.start(server.serve)
            port_file.write_text(str(server.port))

    trio.run(run)


def rss_kib(pid: int) -> int:
    """The resident memory of process ``pid`` in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


async def _join(ws: WebSocketConnection, name: str, room: str) -> None:
    create = {
        "type": "session.create",
        "uamp_version": "1.0",
        "chat": room,
        "session": {"modalities": ["text"], "extensions": {"chat": {"username": name}}},
    }
    await ws.send_message(orjson.dumps(create).decode())
    while True:
        if b"capabilities" in _bytes(await ws.get_message()):
            return


def _bytes(message: str | bytes) -> bytes:
    return message.encode() if isinstance(message, str) else message


async def run_room(port: int, count: int, messages: int, room: str, pid: int) -> dict[str, Any]:
    """Join ``count`` participants to ``room``, post ``messages``; the figures."""
    arrivals: list[list[float]] = [[] for _ in range(messages)]
    seen = [0] * messages
    all_in = [trio.Event() for _ in range(messages)]
    url = f"ws://127.0.0.1:{port}/agents/demo/uamp"
    sockets: list[WebSocketConnection] = []

    async def participant(n: int, task_status: Any) -> None:
        async with open_websocket_url(url, message_queue_size=4096) as ws:
            await _join(ws, f"p{n}", room)
            sockets.append(ws)
            task_status.started()
            while True:
                data = _bytes(await ws.get_message())
                if b'"message.created"' not in data:
                    continue
                now = time.perf_counter()
                found = _SENT.search(data)
                if found is None:
                    continue
                k = int(found.group(1))
                arrivals[k].append(now - int(found.group(2)) / 1e9)
                seen[k] += 1
                if seen[k] == count:
                    all_in[k].set()

    async with trio.open_nursery() as nursery:
        joined_at = time.perf_counter()
        for n in range(count):
            await nursery.start(participant, n)
        join_s = time.perf_counter() - joined_at
        await trio.sleep(0.5)  # presence events settle
        rss_joined = rss_kib(pid)
        sender = sockets[0]
        totals = []
        for k in range(messages):
            sent = time.perf_counter()
            text = f"sent {k} {int(sent * 1e9)}"
            body = {"type": "input.text", "text": text}
            await sender.send_message(orjson.dumps(body).decode())
            await all_in[k].wait()
            totals.append(time.perf_counter() - sent)
        rss_after = rss_kib(pid)
        nursery.cancel_scope.cancel()
    flat = sorted(x for per in arrivals for x in per)
    return {
        "join_s": join_s,
        "p50_ms": _pct(flat, 50) * 1e3,
        "p99_ms": _pct(flat, 99) * 1e3,
        "all_p50_ms": _pct(sorted(totals), 50) * 1e3,
        "all_p99_ms": _pct(sorted(totals), 99) * 1e3,
        "rss_joined_kib": rss_joined,
        "rss_after_kib": rss_after,
    }


def _pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    return values[min(len(values) - 1, int(len(values) * p / 100))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--participants", type=int, default=200)
    parser.add_argument("--messages", type=int, default=50)
    parser.add_argument("--store", default="memory", help="memory, or a SQLite file path")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("port_file", nargs="?", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, Path(args.port_file))
        return
    with tempfile.TemporaryDirectory() as tmp:
        store = args.store if args.store == "memory" else str(Path(tmp) / "chats.db")
        port_file = Path(tmp) / "port"
        proc = subprocess.Popen([sys.executable, __file__, "--serve", store, str(port_file)])
        try:
            while not port_file.exists() or not port_file.read_text():
                time.sleep(0.05)
            port = int(port_file.read_text())
            idle = rss_kib(proc.pid)
            base = trio.run(run_room, port, 2, args.messages, "baseline", proc.pid)
            big = trio.run(run_room, port, args.participants, args.messages, "big", proc.pid)
        finally:
            proc.kill()
            proc.wait()
    n = args.participants
    print(f"store: {args.store}; {args.messages} messages, one at a time")
    print(f"{'':28} {'room of 2':>12} {f'room of {n}':>12} {'ratio':>8}")
    for key, label in (
        ("p50_ms", "fan-out latency p50 (ms)"),
        ("p99_ms", "fan-out latency p99 (ms)"),
        ("all_p50_ms", "reach everyone p50 (ms)"),
        ("all_p99_ms", "reach everyone p99 (ms)"),
    ):
        print(f"{label:28} {base[key]:12.2f} {big[key]:12.2f} {big[key] / base[key]:7.1f}x")
    grown = big["rss_joined_kib"] - idle
    print(f"server RSS idle: {idle / 1024:.1f} MiB")
    print(
        f"server RSS with {n} joined: {big['rss_joined_kib'] / 1024:.1f} MiB "
        f"(+{grown / 1024:.1f} MiB, {grown / n:.0f} KiB per participant)"
    )
    print(f"server RSS after the messages: {big['rss_after_kib'] / 1024:.1f} MiB")
    print(f"joining {n} participants took {big['join_s']:.2f} s")


if __name__ == "__main__":
    main()
