"""Resumable sessions: what the event log costs, and how fast a resume is.

Run: ``python bench/resume.py [--deltas 20000] [--rounds 3] [--redis redis://127.0.0.1:6379/0]``
(without ``--redis`` a throwaway ``redis-server`` is started on a free port,
installed with apt-get when missing, as the tests do).

For each store -- ``memory`` (the default) and ``redis`` (Redis Streams) --
one uamp server runs in its own process on loopback with an agent that emits
``--deltas`` one-word deltas as fast as it can, and clients in this process
measure:

* ``ws``: ``response.delta`` events per second to one UAMP WebSocket client;
* ``sse``: the same over UAMP HTTP+SSE (``/events/stream``);
* ``resume``: milliseconds from sending the resuming ``session.create``
  (after a dropped connection, the last 100 events missed) to the first
  replayed event.

and, for ``ws`` and ``sse``, the server process's CPU time (user + system,
from ``/proc``) per delta, in microseconds, with what it means: the deltas
per second one process streams on a core of its own (``1e6 / cpu_us``;
``redis-server`` runs in its own process and is not counted). Wall-clock
rates on a loaded machine measure the machine's load as much as uamp; CPU
time per delta barely moves with it.

The median of ``--rounds`` rounds is printed, with the ratio redis / memory
measured in the same run (timings on a shared machine are noisy; compare
ratios). Target (issue 15): >= 20,000 deltas/s with the Redis store.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import orjson
import trio
from trio_websocket import open_websocket_url

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.transports import port_from_file
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.responder import Emit, TurnRequest
from uamp_trio import App, Server
from uamp_trio.stores import Stores, open_event_log
from uamp_trio.transports import sse_events, uamp_ws

CREATE = {"type": "session.create", "uamp_version": "1.0", "session": {"modalities": ["text"]}}


class Flood:
    """Emits ``count`` one-word deltas, as fast as the server takes them."""

    name = "flood"

    def __init__(self, count: int) -> None:
        self.count = count

    def capabilities(self) -> ty.Capabilities:
        return ty.Capabilities(id=self.name, provider="bench", modalities=["text"])

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        for _ in range(self.count):
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text="w ")))


def ws_rate(port: int) -> float:
    """Deltas per second to a raw WebSocket client (bench/transports.py's)."""
    from bench.transports import WSClient, uamp_start

    client = WSClient(port, "/agents/flood/uamp")
    n, start = 0, time.perf_counter()
    client.send(*uamp_start(f"sess_{time.monotonic_ns()}", 1))
    while True:
        for message in client.messages():
            if b'"response.delta"' in message:
                n += 1
            elif b'"response.done"' in message:
                client.close()
                return n / (time.perf_counter() - start)


async def sse_rate(port: int) -> float:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
        sid = (await http.post("/agents/flood/events", json=CREATE)).headers["x-session-id"]
        headers = {"x-session-id": sid}
        async with http.stream("GET", "/agents/flood/events/stream", headers=headers) as stream:
            start = time.perf_counter()
            body = [{"type": "input.text", "text": "go"}, {"type": "response.create"}]
            await http.post("/agents/flood/events", json=body, headers=headers)
            n = 0
            async for line in stream.aiter_lines():
                if line.startswith("data:") and '"response.delta"' in line:
                    n += 1
                elif line.startswith("data:") and '"response.done"' in line:
                    return n / (time.perf_counter() - start)
    raise RuntimeError("the stream ended early")


async def resume_ms(port: int) -> float:
    url = f"ws://127.0.0.1:{port}/agents/flood/uamp"
    async with open_websocket_url(url, max_message_size=2**24) as ws:
        await ws.send_message(orjson.dumps(CREATE).decode())
        sid = orjson.loads(await ws.get_message())["session_id"]
        await ws.get_message()
        await ws.send_message(orjson.dumps({"type": "input.text", "text": "go"}).decode())
        await ws.send_message(orjson.dumps({"type": "response.create", "session_id": sid}).decode())
        recent: list[str] = []
        while True:
            message = await ws.get_message()
            recent = [*recent[-99:], orjson.loads(message)["event_id"]]
            if '"response.done"' in message:
                break
    async with open_websocket_url(url, max_message_size=2**24) as ws:
        # The client missed the last 100 events.
        resume = {**CREATE, "session_id": sid, "extensions": {"resume_from": recent[0]}}
        start = time.perf_counter()
        await ws.send_message(orjson.dumps(resume).decode())
        await ws.get_message()  # session.created (resumed)
        await ws.get_message()  # the first missed event
        return (time.perf_counter() - start) * 1000


def serve(where: str, deltas: int, port_file: Path) -> None:
    """``--serve``: one server with the store ``where``, in its own process."""

    async def run() -> None:
        log = open_event_log(where)
        app = App([Flood(deltas)], stores=Stores(event_log=log))
        app.mount(uamp_ws.mount, sse_events.mount)
        server = Server(app, port=0)
        async with trio.open_nursery() as nursery:
            await nursery.start(server.serve)
            port_file.write_text(str(server.port))

    trio.run(run)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(where: str, deltas: int, rounds: int, tmp: Path) -> dict[str, float]:
    import subprocess

    port_file = tmp / f"port-{time.monotonic_ns()}"
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", where, "--deltas", str(deltas), str(port_file)]
    )
    try:
        port = port_from_file(port_file, proc)
        out: dict[str, list[float]] = {
            "ws": [], "ws_cpu": [], "sse": [], "sse_cpu": [], "resume": []
        }  # fmt: skip
        for _ in range(rounds):
            before = cpu_seconds(proc.pid)
            out["ws"].append(ws_rate(port))
            out["ws_cpu"].append((cpu_seconds(proc.pid) - before) / deltas * 1e6)
            before = cpu_seconds(proc.pid)
            out["sse"].append(trio.run(sse_rate, port))
            out["sse_cpu"].append((cpu_seconds(proc.pid) - before) / deltas * 1e6)
            out["resume"].append(trio.run(resume_ms, port))
        return {k: statistics.median(v) for k, v in out.items()}
    finally:
        proc.kill()
        proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deltas", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--redis", help="redis://HOST:PORT/DB (default: start a throwaway one)")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("port_file", nargs="?", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.deltas, Path(args.port_file))
        return
    with tempfile.TemporaryDirectory() as tmp:
        if args.redis:
            results = _run(args, args.redis, Path(tmp))
        else:
            from tests._support.redis_server import running_redis

            with running_redis(Path(tmp)) as url:
                results = _run(args, url, Path(tmp))
    memory, redis = results["memory"], results["redis"]
    print(f"{'':8} {'memory':>12} {'redis':>12} {'redis/memory':>13}")
    rows = (
        ("ws", "ws", "deltas/s"),
        ("ws_cpu", "ws cpu", "us of server CPU per delta"),
        ("sse", "sse", "deltas/s"),
        ("sse_cpu", "sse cpu", "us of server CPU per delta"),
        ("resume", "resume", "ms"),
    )
    for name, label, unit in rows:
        ratio = redis[name] / memory[name]
        print(f"{label:8} {memory[name]:12,.1f} {redis[name]:12,.1f} {ratio:12.2f}x  {unit}")
    for name in ("ws", "sse"):
        print(
            f"{name} on a core of its own (1e6 / cpu): memory "
            f"{1e6 / memory[name + '_cpu']:,.0f}, redis {1e6 / redis[name + '_cpu']:,.0f} deltas/s"
        )


def _run(args: argparse.Namespace, redis_url: str, tmp: Path) -> dict[str, dict[str, float]]:
    return {
        label: measure(where, args.deltas, args.rounds, tmp)
        for label, where in (("memory", "memory"), ("redis", redis_url))
    }


if __name__ == "__main__":
    main()
