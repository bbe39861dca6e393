"""What the relay costs: client -> relay -> daemon against the same agent served directly.

Run: ``python bench/relay.py [--repeats 300] [--deltas 20000] [--rounds 3] [--redis URL]``

Three processes besides this one, all on loopback: a plain ``uamp`` server
hosting ``FloodAgent`` (the direct path), a relay (``create_app(relay=True)``
with no agent of its own) and a daemon (:class:`uamp_trio.relay.daemon.Daemon`)
that serves the same ``FloodAgent`` to the relay. The client is the same
for both paths: uamp's own UAMP WebSocket client (:func:`uamp_trio.client.connect`),
in this process. In alternating rounds it measures:

* ``ttfd``: median time from sending a one-delta response's request to its
  first ``response.delta``, over ``--repeats`` responses each in a fresh
  session (the relay forwards the whole conversation on every turn, so a
  long-lived session would measure its length), and the relay's
  added milliseconds (relay - direct). Target: at most 1 ms added.
* ``cpu/delta``: one response of ``--deltas`` text deltas; the CPU time
  (user + system, from ``/proc``) of the relay process and of the direct
  server per delta delivered, and the daemon's. The relay does the direct
  server's work for its client plus reading the daemon's events; target:
  what it adds (relay - direct) at most the direct server's own CPU per delta.

Then the time to first delta again with everything in one trio run (no
process waits for the OS to schedule another: the work of the extra hops
alone). With ``--redis URL`` (a scratch database), once more across two relay
processes sharing that Redis: the daemon dials relay B, the client relay A
(docs/relay.md, "Several relay processes"). The order of the two paths
alternates from round to round; the medians
over ``--rounds`` rounds are printed. Timings on a shared machine are noisy:
compare the figures of one run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from transports import _server_cpu  # noqa: E402  (bench/ is on sys.path)

from uamp_proto import events as ev  # noqa: E402
from uamp_proto import types as ty  # noqa: E402
from uamp_proto.responder import Emit, TurnRequest  # noqa: E402
from uamp_trio.demo import DemoAgent  # noqa: E402

WORD = "tok "


class FloodAgent(DemoAgent):
    """Emits as many one-word text deltas as the user's text says (``"1"``: one)."""

    def __init__(self) -> None:
        super().__init__("flood")

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        count = int(request.messages[-1].text or "1")
        delta = ty.DeltaText(text=WORD)
        for _ in range(count):
            await emit(ev.ResponseDelta(delta=delta))


# --- the processes ---------------------------------------------------------------------


async def _serve(kind: str, store: str) -> None:
    from uamp_trio.app import create_app
    from uamp_trio.engines.server import Server
    from uamp_trio.stores import Stores, open_event_log

    app = create_app(
        [FloodAgent()] if kind == "direct" else [],
        relay=kind == "relay",
        stores=Stores(event_log=open_event_log(store)),
    )
    server = Server(app, port=0)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        print(server.url, flush=True)


async def _daemon(url: str) -> None:
    from uamp_trio.relay.daemon import Daemon

    daemon = Daemon(url, [FloodAgent()])
    async with trio.open_nursery() as nursery:
        nursery.start_soon(daemon.run)
        await daemon.connected.wait()
        print("registered", flush=True)


def _spawn(*args: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, __file__, *args],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line:
        raise SystemExit(f"bench/relay.py {' '.join(args)} did not start")
    return proc, line


# --- the client ------------------------------------------------------------------------


async def _ttfd(client: Any, repeats: int) -> float:
    """Median ms to the first delta, each response in a fresh session."""
    times = []
    for _ in range(repeats):
        session = await client.create_session(agent="flood")
        t0 = time.perf_counter()
        first = None
        async for event in session.respond("1"):
            if first is None and event.type == "response.delta":
                first = time.perf_counter()
            if event.type == "response.done":
                break
        assert first is not None
        times.append((first - t0) * 1000)
        await session.end()
    return statistics.median(times)


async def _flood(client: Any, deltas: int) -> int:
    session = await client.create_session(agent="flood")
    got = 0
    async for event in session.respond(str(deltas)):
        if event.type == "response.delta":
            got += 1
        if event.type == "response.done":
            break
    await session.end()
    return got


async def _rounds(
    clients: dict[str, Any],
    args: argparse.Namespace,
    then: Callable[[str, Any], Awaitable[None]] | None = None,
) -> dict[str, list[float]]:
    """``--rounds`` rounds of time to first delta on both paths, alternating which goes first.

    ``then`` runs after each round's measurements, for each path in the same order.
    """
    ttfd: dict[str, list[float]] = {name: [] for name in clients}
    for client in clients.values():  # warm up both paths
        await _ttfd(client, 20)
    for round_no in range(args.rounds):
        order = ["direct", "relay"] if round_no % 2 == 0 else ["relay", "direct"]
        for name in order:
            ttfd[name].append(await _ttfd(clients[name], args.repeats))
        if then is not None:
            for name in order:
                await then(name, clients[name])
    return ttfd


async def _measure(urls: dict[str, str], pids: dict[str, int], args: argparse.Namespace) -> None:
    from uamp_trio.client import connect

    cpu: dict[str, list[float]] = {"direct": [], "relay": [], "daemon": []}

    async def flood(name: str, client: Any) -> None:
        watched = [name] if name == "direct" else ["relay", "daemon"]
        before = {w: _server_cpu(pids[w]) or 0.0 for w in watched}
        got = await _flood(client, args.deltas)
        assert got == args.deltas, (name, got)
        for w in watched:
            cpu[w].append(((_server_cpu(pids[w]) or 0.0) - before[w]) / got * 1e6)

    async with connect(urls["direct"] + "/ws") as direct, connect(urls["relay"] + "/ws") as relay:
        clients = {"direct": direct, "relay": relay}
        for client in clients.values():
            await _flood(client, 1000)
        ttfd = await _rounds(clients, args, flood)
    direct_ms, relay_ms = statistics.median(ttfd["direct"]), statistics.median(ttfd["relay"])
    print(f"relay bench: {args.rounds} rounds, medians; {os.cpu_count()} CPUs; loopback")
    print(f"time to first delta, UAMP WebSocket ({args.repeats} one-delta responses a round):")
    print(f"  direct  {direct_ms:7.3f} ms")
    print(f"  relay   {relay_ms:7.3f} ms   added {relay_ms - direct_ms:+.3f} ms (target <= 1 ms)")
    d, r, m = (statistics.median(cpu[k]) for k in ("direct", "relay", "daemon"))
    print(f"server CPU per delta ({args.deltas} deltas in one response):")
    print(f"  direct server   {d:6.2f} us")
    added = f"adds {r - d:+.2f} us = {(r - d) / d:.2f}x direct"
    print(f"  relay process   {r:6.2f} us   {added} (target <= 1.0x)")
    print(f"  daemon process  {m:6.2f} us   (the agent's own side, beside the relay)")


async def _in_process(args: argparse.Namespace) -> None:
    """The same time to first delta with the servers, the daemon and the client in one trio run.

    Nothing waits for the OS to schedule another process, so this is the
    work of the extra hops themselves (the daemon's included, on the same
    thread); the difference to the row above is scheduling.
    """
    from uamp_trio.app import create_app
    from uamp_trio.client import connect
    from uamp_trio.engines.server import Server
    from uamp_trio.relay.daemon import Daemon

    async with trio.open_nursery() as nursery:
        direct = Server(create_app([FloodAgent()]), port=0)
        relay = Server(create_app([], relay=True), port=0)
        await nursery.start(direct.serve)
        await nursery.start(relay.serve)
        daemon = Daemon(relay.url, [FloodAgent()])
        nursery.start_soon(daemon.run)
        await daemon.connected.wait()
        urls = [server.url.replace("http", "ws") + "/ws" for server in (direct, relay)]
        async with connect(urls[0]) as a, connect(urls[1]) as b:
            ttfd = await _rounds({"direct": a, "relay": b}, args)
        daemon.stop()
        nursery.cancel_scope.cancel()
    d, r = statistics.median(ttfd["direct"]), statistics.median(ttfd["relay"])
    print("time to first delta, all in one process (no scheduling between processes):")
    print(f"  direct  {d:7.3f} ms")
    print(f"  relay   {r:7.3f} ms   added {r - d:+.3f} ms (the relay's and the daemon's work)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=300)
    parser.add_argument("--deltas", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--redis",
        metavar="URL",
        help="also measure two relay processes sharing this Redis (the daemon on one, the "
        "client on the other); it must be a scratch database",
    )
    parser.add_argument("--serve", choices=["direct", "relay"], help=argparse.SUPPRESS)
    parser.add_argument("--store", default="memory", help=argparse.SUPPRESS)
    parser.add_argument("--daemon", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        trio.run(_serve, args.serve, args.store)
        return
    if args.daemon:
        trio.run(_daemon, args.daemon)
        return
    procs: list[subprocess.Popen[str]] = []
    try:
        direct, direct_url = _spawn("--serve", "direct")
        relay, relay_url = _spawn("--serve", "relay")
        daemon, _ = _spawn("--daemon", relay_url)
        procs = [direct, relay, daemon]
        ws = {
            k: u.replace("http://", "ws://")
            for k, u in (("direct", direct_url), ("relay", relay_url))
        }
        pids = {"direct": direct.pid, "relay": relay.pid, "daemon": daemon.pid}
        trio.run(_measure, ws, pids, args)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(10)
    trio.run(_in_process, args)
    if args.redis:
        _across_redis(args)


def _across_redis(args: argparse.Namespace) -> None:
    """Time to first delta through relay A -> Redis -> relay B -> daemon, against direct."""
    import httpx

    procs: list[subprocess.Popen[str]] = []
    try:
        direct, direct_url = _spawn("--serve", "direct")
        a, a_url = _spawn("--serve", "relay", "--store", args.redis)
        b, b_url = _spawn("--serve", "relay", "--store", args.redis)
        daemon, _ = _spawn("--daemon", b_url)
        procs = [direct, a, b, daemon]
        deadline = time.monotonic() + 30
        while not any(
            x["name"] == "flood" and x["state"] == "online"
            for x in httpx.get(a_url.replace("ws://", "http://") + "/agents").json()["agents"]
        ):
            assert time.monotonic() < deadline, "relay A never saw the daemon's agent"
            time.sleep(0.1)

        async def measure() -> dict[str, list[float]]:
            from uamp_trio.client import connect

            urls = [u.replace("http://", "ws://") + "/ws" for u in (direct_url, a_url)]
            async with connect(urls[0]) as d, connect(urls[1]) as r:
                return await _rounds({"direct": d, "relay": r}, args)

        ttfd = trio.run(measure)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(10)
    d, r = statistics.median(ttfd["direct"]), statistics.median(ttfd["relay"])
    print("time to first delta, client -> relay A -> Redis -> relay B -> daemon:")
    print(f"  direct  {d:7.3f} ms")
    print(f"  relays  {r:7.3f} ms   added {r - d:+.3f} ms")


if __name__ == "__main__":
    main()
