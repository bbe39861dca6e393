"""A cluster of ``uamp serve`` nodes: what a node costs per delta, and how fast a client resumes.

Run: ``python bench/cluster.py [--nodes 1,2,3] [--clients 2] [--turns 3] [--deltas 2000]
[--short-turns 50] [--idle 100] [--resumers 30] [--json]``

The topology of ``deploy/compose.yaml`` on 127.0.0.1, started the way the
cluster test starts it (``tests/_support/cluster.py``): a real
``redis-server`` (sessions and event logs), a real PostgreSQL (the payment
ledger), N ``uamp serve`` nodes each in its own folder, and haproxy with the
project's ``deploy/haproxy.cfg`` in front (round-robin, no stickiness).
Every response is paid: it locks its price in PostgreSQL when it starts
and settles it when it ends. CPU time is user + system from ``/proc`` (10
ms ticks: the phases are long enough for that). For each N of ``--nodes``:

* **quiet**: 3 s with nothing to do: the CPU each node, Redis and
  PostgreSQL spend per second on heartbeats and polling.
* **stream**: ``--clients`` x N UAMP WebSocket clients through haproxy,
  each asking ``--turns`` responses of ``--deltas`` one-word deltas (the
  ``flood`` agent, ``bench/cluster_agent.py``, emits them back to back).
  Reported: the deltas per second all clients received (wall clock), the
  CPU time per delta of the nodes, ``redis-server`` and haproxy, and the
  Redis memory the event logs grew by per delta. ``1e6 /`` a node's
  microseconds per delta is what one node streams on a core of its own,
  with Redis and PostgreSQL on the path.
* **turns**: the same clients, ``--short-turns`` responses of 10 deltas
  each: the CPU per paid response of the nodes, Redis and PostgreSQL (the
  postmaster and its backends: the lock and the settlement).
* **idle**: ``--idle`` x N sessions opened and left quiet: the node memory
  (RSS) and Redis memory each holds.
* **resume** (N >= 2): ``--resumers`` clients through haproxy each stream a
  5-second response of the ``ticker`` agent; then the first node is killed
  with ``SIGKILL``. Each client whose connection went with it dials haproxy
  again and resumes its session (``session.create`` with
  ``extensions.resume_from``). Reported, from the kill, p50 and p99 of:
  *resumed*, its ``session.created`` (a node took the session over and
  replayed what was missed), and *goes on*, the first event of its response
  after the resume: the response carried on or ended ``interrupted`` by a
  survivor, which first waits for the dead node's heartbeat (3 s) to
  expire.

On a machine whose cores are shared with other work the wall-clock rates
measure the machine as much as uamp; the CPU time per delta barely moves
with the load. Compare the growth from 1 to N nodes measured in one run.
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import statistics
import sys
import tempfile
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

import orjson
import trio
from trio_websocket import ConnectionClosed, HandshakeError, open_websocket_url

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests._support.cluster import Node, cluster, cpu_seconds
from tests._support.postgres_server import create_database, running_postgres
from tests._support.redis_server import free_port, start_redis, stop_redis

PRICE = "0.01"
#: The ticker's response of the resume phase: 100 ticks, one per 50 ms.
TICKS = 100
#: The deltas of a response of the turns phase (what a turn costs besides its deltas).
SHORT = 10


def _session_create(token: str, **extra: Any) -> str:
    create = {
        "type": "session.create",
        "uamp_version": "1.0",
        "session": {"modalities": ["text"]},
        "payment_token": token,
        **extra,
    }
    return orjson.dumps(create).decode()


def _turn(sid: str, text: str) -> list[str]:
    return [
        orjson.dumps({"type": "input.text", "session_id": sid, "text": text}).decode(),
        orjson.dumps({"type": "response.create", "session_id": sid}).decode(),
    ]


async def _created(ws: Any) -> dict[str, Any]:
    while True:
        event = orjson.loads(await ws.get_message())
        if event["type"] == "session.created":
            return event  # type: ignore[no-any-return]
        if event["type"] == "session.error":
            raise RuntimeError(f"session refused: {event}")


async def _stream(url: str, token: str, turns: int, deltas: int, counted: list[int]) -> None:
    """One client: ``turns`` responses of ``deltas`` deltas; adds what it got to ``counted``."""
    async with open_websocket_url(f"{url}/agents/flood/uamp", max_message_size=2**24) as ws:
        await ws.send_message(_session_create(token))
        sid = (await _created(ws))["session_id"]
        for _ in range(turns):
            for message in _turn(sid, str(deltas)):
                await ws.send_message(message)
            while True:
                message = await ws.get_message()
                if '"response.delta"' in message:
                    counted.append(1)
                elif '"response.done"' in message or '"response.error"' in message:
                    break


def _stream_phase(
    url: str, token: str, clients: int, turns: int, deltas: int, procs: dict[str, Any]
) -> dict[str, Any]:
    """``clients`` x ``turns`` responses of ``deltas``: rates and CPU per delta and response."""
    counted: list[int] = []
    before, redis_before = _cpu(procs), _redis_memory(procs["redis_port"])
    start = time.perf_counter()

    async def run() -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(clients):
                nursery.start_soon(_stream, url, token, turns, deltas, counted)

    trio.run(run)
    wall = time.perf_counter() - start
    spent = {k: v - before[k] for k, v in _cpu(procs).items()}
    redis_grew = _redis_memory(procs["redis_port"]) - redis_before
    got, responses = len(counted), clients * turns
    nodes_cpu = [spent[f"node{i}"] for i in range(len(procs["nodes"]))]
    return {
        "clients": clients,
        "responses": responses,
        "deltas": got,
        "expected": responses * deltas,
        "wall_s": wall,
        "deltas_per_s": got / wall,
        "responses_per_s": responses / wall,
        "node_cpu_us_per_delta": sum(nodes_cpu) / got * 1e6,
        "node_cpu_ms_per_response": sum(nodes_cpu) / responses * 1e3,
        "node_cpu_share": [round(c / max(sum(nodes_cpu), 1e-9), 3) for c in nodes_cpu],
        "redis_cpu_us_per_delta": spent["redis"] / got * 1e6,
        "redis_cpu_ms_per_response": spent["redis"] / responses * 1e3,
        "redis_bytes_per_delta": redis_grew / got,
        "postgres_cpu_ms_per_response": spent["postgres"] / responses * 1e3,
        "haproxy_cpu_us_per_delta": spent["haproxy"] / got * 1e6,
    }


def _quiet_phase(procs: dict[str, Any], seconds: float = 3.0) -> dict[str, Any]:
    """What the processes spend per second with nothing to do (heartbeats, polls)."""
    before = _cpu(procs)
    time.sleep(seconds)
    spent = {k: (v - before[k]) / seconds * 1e3 for k, v in _cpu(procs).items()}
    nodes = [spent[f"node{i}"] for i in range(len(procs["nodes"]))]
    return {
        "node_cpu_ms_per_s": sum(nodes) / len(nodes),
        "redis_cpu_ms_per_s": spent["redis"],
        "postgres_cpu_ms_per_s": spent["postgres"],
    }


async def _idle(url: str, token: str, opened: list[int], done: trio.Event) -> None:
    """Open a session and hold it, saying nothing, until ``done``."""
    async with open_websocket_url(f"{url}/agents/flood/uamp") as ws:
        await ws.send_message(_session_create(token))
        await _created(ws)
        opened.append(1)
        await done.wait()


def _idle_phase(url: str, token: str, count: int, procs: dict[str, Any]) -> dict[str, Any]:
    """``count`` open, quiet sessions: what each holds in the nodes' and Redis's memory."""
    before_rss = sum(_rss(n.proc.pid) for n in procs["nodes"])
    before_redis = _redis_memory(procs["redis_port"])

    async def run() -> dict[str, float]:
        opened: list[int] = []
        done = trio.Event()
        async with trio.open_nursery() as nursery:
            for _ in range(count):
                nursery.start_soon(_idle, url, token, opened, done)
            while len(opened) < count:
                await trio.sleep(0.1)
            await trio.sleep(0.5)
            held = {
                "node_kb_per_session": (sum(_rss(n.proc.pid) for n in procs["nodes"]) - before_rss)
                / count
                / 1024,
                "redis_kb_per_session": (_redis_memory(procs["redis_port"]) - before_redis)
                / count
                / 1024,
            }
            done.set()
        return held

    return {"sessions": count, **trio.run(run)}


def _rss(pid: int) -> int:
    """Resident memory of ``pid``, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _redis_memory(port: int) -> int:
    """``used_memory`` of the Redis on ``port``, in bytes."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"INFO memory\r\n")
        data = b""
        while b"used_memory:" not in data or not data.endswith(b"\r\n"):
            data += sock.recv(65536)
    return int(re.search(rb"used_memory:(\d+)", data).group(1))  # type: ignore[union-attr]


async def _resumer(url: str, token: str, killed: trio.Event, out: list[dict[str, Any]]) -> None:
    """Stream a ticker response; after losing the connection, resume through haproxy."""
    record: dict[str, Any] = {"dropped": False}
    out.append(record)
    ws_url = f"{url}/agents/ticker/uamp"
    last: str | None = None
    async with open_websocket_url(ws_url) as ws:
        await ws.send_message(_session_create(token))
        sid = (await _created(ws))["session_id"]
        for message in _turn(sid, str(TICKS)):
            await ws.send_message(message)
        try:
            while True:
                event = orjson.loads(await ws.get_message())
                last = event.get("event_id") or last
                if event["type"] in ("response.done", "response.error"):
                    record["state"] = event["type"]
                    return
        except ConnectionClosed:
            pass
    record["dropped"] = True
    await killed.wait()
    while True:
        try:
            async with open_websocket_url(ws_url) as ws:
                resume = {"session_id": sid, "extensions": {"resume_from": last}}
                await ws.send_message(_session_create(token, **resume))
                await _created(ws)
                record["resumed"] = trio.current_time() - record["kill"]
                while True:
                    event = orjson.loads(await ws.get_message())
                    if event["type"].startswith("response.") and "goes_on" not in record:
                        record["goes_on"] = trio.current_time() - record["kill"]
                    if event["type"] in ("response.done", "response.error"):
                        record["state"] = event.get("error", {}).get("code") or "completed"
                        return
        except (ConnectionClosed, HandshakeError, OSError):
            await trio.sleep(0.1)


def _resume_phase(url: str, token: str, args: argparse.Namespace, victim: Node) -> dict[str, Any]:
    out: list[dict[str, Any]] = []

    async def run() -> None:
        killed = trio.Event()
        async with trio.open_nursery() as nursery:
            for _ in range(args.resumers):
                nursery.start_soon(_resumer, url, token, killed, out)
                await trio.sleep(0.01)
            await trio.sleep(1.5)  # every response is streaming
            victim.proc.kill()
            at = trio.current_time()
            for record in out:
                record["kill"] = at
            killed.set()
            nursery.cancel_scope.deadline = at + 60  # a client that never resumes

    trio.run(run)
    victim.proc.wait(15)
    dropped = [r for r in out if r["dropped"]]
    return {
        "clients": len(out),
        "dropped": len(dropped),
        "resumed_ms": _percentiles([r["resumed"] for r in dropped if "resumed" in r]),
        "goes_on_ms": _percentiles([r["goes_on"] for r in dropped if "goes_on" in r]),
        "outcomes": sorted({r.get("state", "none") for r in dropped}),
    }


def _percentiles(seconds: list[float]) -> dict[str, float]:
    if not seconds:
        return {}
    ordered = sorted(s * 1000 for s in seconds)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {"p50": statistics.median(ordered), "p99": p99, "n": len(ordered)}


def _pids_named(word: str, port: int, where: str = "cmdline") -> list[int]:
    """Processes whose command line names ``word`` and whose ``where`` names ``port``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            named = (entry / where).read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if cmd.split(" ")[0].endswith(word) and re.search(rf"\b{port}\b", named):
            found.append(int(entry.name))
    return found


def _children(pid: int) -> list[int]:
    kids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
            if int(stat[1]) == pid:
                kids.append(int(entry.name))
    return kids


def _cpu(procs: dict[str, Any]) -> dict[str, float]:
    """CPU seconds so far of every process on the path."""
    out = {f"node{i}": cpu_seconds(n.proc.pid) for i, n in enumerate(procs["nodes"])}
    out["redis"] = cpu_seconds(procs["redis"])
    out["haproxy"] = sum(cpu_seconds(p) for p in procs["haproxy"])
    master = procs["postgres"]
    backends = 0.0
    for kid in _children(master):
        with suppress(OSError):  # it ended meanwhile: the master's children's time has it
            backends += cpu_seconds(kid)
    out["postgres"] = cpu_seconds(master, children=True) + backends
    return out


def measure(args: argparse.Namespace, tmp: Path) -> list[dict[str, Any]]:
    from uamp_trio.trust.ledger_postgres import PostgresLedger, migrate

    redis_port = free_port()
    redis = start_redis(tmp, redis_port)
    try:
        with running_postgres() as server:
            ledger = create_database(server)
            migrate(ledger)
            master = _pids_named("postgres", int(server.rsplit(":", 1)[1].split("/")[0]))
            with PostgresLedger(ledger) as book:
                token = book.issue("1000000", "USD")
            flags = (
                *("--agent", "bench.cluster_agent:Flood"),
                *("--agent", "tests._support.agents:Ticker"),
                *("--store", f"redis://127.0.0.1:{redis_port}/0"),
                *("--ledger", ledger, "--price", PRICE),
                *("--no-access-log", "--log-level", "warning"),
            )
            rows = []
            for count in args.nodes:
                folder = tmp / f"n{count}"
                folder.mkdir()
                with cluster(folder, flags, count) as (url, nodes):
                    haproxy_port = int(url.rsplit(":", 1)[1])
                    procs = {
                        "nodes": nodes,
                        "redis": redis.pid,
                        "redis_port": redis_port,
                        "postgres": master[0],
                        "haproxy": _pids_named("haproxy", haproxy_port, "environ"),
                    }
                    ws = url.replace("http://", "ws://")
                    row: dict[str, Any] = {"nodes": count}
                    clients = args.clients * count
                    row["quiet"] = _quiet_phase(procs)
                    row["stream"] = _stream_phase(
                        ws, token, clients, args.turns, args.deltas, procs
                    )
                    row["turns"] = _stream_phase(ws, token, clients, args.short_turns, SHORT, procs)
                    if args.idle:
                        row["idle"] = _idle_phase(ws, token, args.idle * count, procs)
                    if count >= 2 and args.resumers:
                        row["resume"] = _resume_phase(ws, token, args, nodes[0])
                    rows.append(row)
            return rows
    finally:
        stop_redis(redis)


def _report(rows: list[dict[str, Any]]) -> None:
    base, base_turns = rows[0]["stream"], rows[0]["turns"]
    print("stream: long responses (x: against 1 node, this run)")
    print(
        f"{'nodes':>5} {'deltas/s':>10} {'x':>5} {'node us/delta':>14} {'x':>5} "
        f"{'1e6/us':>8} {'redis us/delta':>15} {'redis B/delta':>14} {'haproxy us/delta':>17}"
    )
    for row in rows:
        s = row["stream"]
        per = s["node_cpu_us_per_delta"]
        print(
            f"{row['nodes']:>5} {s['deltas_per_s']:>10,.0f} "
            f"{s['deltas_per_s'] / base['deltas_per_s']:>5.2f} {per:>14.1f} "
            f"{per / base['node_cpu_us_per_delta']:>5.2f} {1e6 / per:>8,.0f} "
            f"{s['redis_cpu_us_per_delta']:>15.1f} {s['redis_bytes_per_delta']:>14.0f} "
            f"{s['haproxy_cpu_us_per_delta']:>17.1f}"
        )
    print(f"turns: responses of {SHORT} deltas, each paid (lock + settle in PostgreSQL)")
    print(
        f"{'nodes':>5} {'resp/s':>8} {'x':>5} {'node ms/resp':>13} {'x':>5} "
        f"{'redis ms/resp':>14} {'pg ms/resp':>11}"
    )
    for row in rows:
        t = row["turns"]
        per = t["node_cpu_ms_per_response"]
        print(
            f"{row['nodes']:>5} {t['responses_per_s']:>8,.0f} "
            f"{t['responses_per_s'] / base_turns['responses_per_s']:>5.2f} {per:>13.2f} "
            f"{per / base_turns['node_cpu_ms_per_response']:>5.2f} "
            f"{t['redis_cpu_ms_per_response']:>14.2f} {t['postgres_cpu_ms_per_response']:>11.2f}"
        )
    for row in rows:
        q = row["quiet"]
        print(
            f"{row['nodes']} nodes, nothing to do: {q['node_cpu_ms_per_s']:.1f} ms of CPU per "
            f"second per node, Redis {q['redis_cpu_ms_per_s']:.1f}, "
            f"PostgreSQL {q['postgres_cpu_ms_per_s']:.1f}"
        )
    for row in rows:
        if "idle" in row:
            i = row["idle"]
            print(
                f"{row['nodes']} nodes, {i['sessions']} quiet sessions: "
                f"{i['node_kb_per_session']:.1f} KB of node memory (RSS) and "
                f"{i['redis_kb_per_session']:.1f} KB of Redis memory each"
            )
    for row in rows:
        if "resume" in row:
            r = row["resume"]
            res, on = r["resumed_ms"], r["goes_on_ms"]
            print(
                f"{row['nodes']} nodes, {r['dropped']}/{r['clients']} clients lost their node: "
                f"resumed p50 {res.get('p50', 0):,.0f} ms p99 {res.get('p99', 0):,.0f} ms; "
                f"response goes on p50 {on.get('p50', 0):,.0f} ms p99 {on.get('p99', 0):,.0f} ms "
                f"({', '.join(r['outcomes'])})"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", default="1,2,3", help="node counts to measure (default 1,2,3)")
    parser.add_argument("--clients", type=int, default=2, help="stream clients per node")
    parser.add_argument("--turns", type=int, default=3, help="responses per stream client")
    parser.add_argument("--deltas", type=int, default=2000, help="deltas per response")
    parser.add_argument(
        "--short-turns", type=int, default=50, help=f"responses of {SHORT} deltas per client"
    )
    parser.add_argument("--idle", type=int, default=100, help="quiet sessions per node")
    parser.add_argument("--resumers", type=int, default=30, help="clients of the resume phase")
    parser.add_argument("--json", action="store_true", help="one JSON line per node count")
    args = parser.parse_args()
    args.nodes = [int(n) for n in args.nodes.split(",")]
    with tempfile.TemporaryDirectory(prefix="uamp-cluster-bench-") as tmp:
        rows = measure(args, Path(tmp))
    if args.json:
        for row in rows:
            print(json.dumps(row))
    else:
        _report(rows)


if __name__ == "__main__":
    main()
