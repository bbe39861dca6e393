"""What the relay costs: client -> relay -> daemon against the same agent served directly.

Run: ``python bench/relay.py [--repeats 300] [--deltas 20000] [--rounds 3]``

Three processes besides this one, all on loopback: a plain ``uamp`` server
hosting ``FloodAgent`` (the direct path), a relay (``create_app(relay=True)``
with no agent of its own) and a daemon (:class:`uamp_trio.relay.daemon.Daemon`)
that serves the same ``FloodAgent`` to the relay. The client is the same
for both paths: uamp's own UAMP WebSocket client (:func:`uamp_trio.client.connect`),
one session per path, in this process. In alternating rounds it measures:

* ``ttfd``: median time from sending a one-delta response's request to its
  first ``response.delta``, over ``--repeats`` responses, and the relay's
  added milliseconds (relay - direct). Target: at most 1 ms added.
* ``cpu/delta``: one response of ``--deltas`` text deltas; the CPU time
  (user + system, from ``/proc``) of the relay process and of the direct
  server per delta delivered, and the daemon's. Target: the relay's CPU per
  delta at most the direct server's own.

The order of the two paths alternates from round to round; the medians
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
from pathlib import Path

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


async def _serve(kind: str) -> None:
    from uamp_trio.app import create_app
    from uamp_trio.engines.server import Server

    app = create_app([FloodAgent()] if kind == "direct" else [], relay=kind == "relay")
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


async def _ttfd(session: object, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        first = None
        async for event in session.respond("1"):  # type: ignore[attr-defined]
            if first is None and event.type == "response.delta":
                first = time.perf_counter()
            if event.type == "response.done":
                break
        assert first is not None
        times.append((first - t0) * 1000)
    return statistics.median(times)


async def _flood(session: object, deltas: int) -> int:
    got = 0
    async for event in session.respond(str(deltas)):  # type: ignore[attr-defined]
        if event.type == "response.delta":
            got += 1
        if event.type == "response.done":
            break
    return got


async def _measure(urls: dict[str, str], pids: dict[str, int], args: argparse.Namespace) -> None:
    from uamp_trio.client import connect

    ttfd: dict[str, list[float]] = {"direct": [], "relay": []}
    cpu: dict[str, list[float]] = {"direct": [], "relay": [], "daemon": []}
    async with connect(urls["direct"] + "/ws") as direct, connect(urls["relay"] + "/ws") as relay:
        sessions = {
            "direct": await direct.create_session(agent="flood"),
            "relay": await relay.create_session(agent="flood"),
        }
        for session in sessions.values():  # warm up both paths
            await _ttfd(session, 20)
            await _flood(session, 1000)
        for round_no in range(args.rounds):
            order = ["direct", "relay"] if round_no % 2 == 0 else ["relay", "direct"]
            for name in order:
                ttfd[name].append(await _ttfd(sessions[name], args.repeats))
            for name in order:
                watched = [name] if name == "direct" else ["relay", "daemon"]
                before = {w: _server_cpu(pids[w]) or 0.0 for w in watched}
                got = await _flood(sessions[name], args.deltas)
                assert got == args.deltas, (name, got)
                for w in watched:
                    spent = (_server_cpu(pids[w]) or 0.0) - before[w]
                    cpu[w].append(spent / got * 1e6)
    direct_ms, relay_ms = statistics.median(ttfd["direct"]), statistics.median(ttfd["relay"])
    print(f"relay bench: {args.rounds} rounds, medians; {os.cpu_count()} CPUs; loopback")
    print(f"time to first delta, UAMP WebSocket ({args.repeats} one-delta responses a round):")
    print(f"  direct  {direct_ms:7.3f} ms")
    print(f"  relay   {relay_ms:7.3f} ms   added {relay_ms - direct_ms:+.3f} ms (target <= 1 ms)")
    d, r, m = (statistics.median(cpu[k]) for k in ("direct", "relay", "daemon"))
    print(f"server CPU per delta ({args.deltas} deltas in one response):")
    print(f"  direct server   {d:6.2f} us")
    print(f"  relay process   {r:6.2f} us   {r / d:.2f}x the direct server (target <= 1.0x)")
    print(f"  daemon process  {m:6.2f} us   (the agent's own side, beside the relay)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=300)
    parser.add_argument("--deltas", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--serve", choices=["direct", "relay"], help=argparse.SUPPRESS)
    parser.add_argument("--daemon", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        trio.run(_serve, args.serve)
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


if __name__ == "__main__":
    main()
