"""Memory of many sessions and many idle connections, and whether it stays flat over time.

Run: ``python bench/soak.py [--minutes 10] [--sessions 1000] [--connections 10000]``

One uamp server (the bench's ``FloodAgent``, ``bench/transports.py``; 1,100
sessions allowed per connection, idle connections kept for an hour) in a
process of its own; its resident memory (``VmRSS``) is read from ``/proc``.

* ``mux``: ``--sessions`` sessions multiplexed on one WebSocket. Memory per
  session is the growth from creating them, over their number. Then, for
  ``--minutes``, rounds of: every session runs one turn (a one-delta
  response), ends, and a fresh session takes its place -- the steady state of
  a server whose sessions come and go. Memory is sampled after each round.
  The server keeps ended sessions' event logs for resuming, up to its
  retention (the soak server keeps 2,000 sessions' logs, ``uamp serve``
  10,000), so memory first grows to that bound, then must stay flat.
* ``idle``: ``--connections`` WebSocket connections opened and left idle for
  ``--minutes`` (the server pings each every 30 s; the client answers).
  Memory per connection is the growth from opening them, over their number;
  then it is sampled every ten seconds.

Printed: memory per session and per connection, and for each phase the
samples' first and last value, the largest, and the slope of a least-squares
line over the second half of the phase (MB per minute; about 0 when flat).
"""

from __future__ import annotations

import argparse
import selectors
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import orjson  # noqa: E402
from transports import Running, WSClient, uamp_start  # noqa: E402

from uamp_trio.engines.ws_frames import WebSocketClosed  # noqa: E402

PATH = "/agents/flood/uamp"


def rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def await_count(client: WSClient, marker: bytes, count: int) -> None:
    """Read until ``count`` messages containing ``marker`` arrived."""
    seen = 0
    while seen < count:
        for message in client.messages():
            if marker in message:
                seen += 1
            elif b'"session.error"' in message:
                raise RuntimeError(message.decode())


#: Sessions created (or ended) per batch: the server drops a peer whose
#: unread replies pile up over its queue limit, so creations go in batches.
BATCH = 100


def open_sessions(client: WSClient, ids: list[str], ending: list[str] | None = None) -> None:
    """End the sessions ``ending`` and create ``ids``, a batch at a time."""
    ending = ending or []
    for i in range(0, max(len(ids), len(ending)), BATCH):
        ends = [
            orjson.dumps({"type": "session.end", "session_id": sid})
            for sid in ending[i : i + BATCH]
        ]
        creates = [uamp_start(sid, 1)[0] for sid in ids[i : i + BATCH]]
        client.send(*ends, *creates)
        await_count(client, b'"session.created"', len(creates))


def slope(samples: list[tuple[float, float]]) -> float:
    """MB per minute of a least-squares line through the second half of ``samples``."""
    half = samples[len(samples) // 2 :]
    if len(half) < 2:
        return 0.0
    xs = [t / 60 for t, _ in half]
    ys = [m for _, m in half]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den if den else 0.0


def report(name: str, samples: list[tuple[float, float]]) -> None:
    values = [m for _, m in samples]
    print(
        f"  {name}: {len(samples)} samples over {samples[-1][0] / 60:.1f} min: "
        f"first {values[0]:.1f} MB, last {values[-1]:.1f} MB, max {max(values):.1f} MB, "
        f"slope of the second half {slope(samples):+.2f} MB/min"
    )


def mux(server: Running, sessions: int, seconds: float) -> None:
    pid = server.proc.pid
    client = WSClient(server.port, PATH)
    base = rss_mb(pid)
    ids = [f"sess_{i}" for i in range(sessions)]
    open_sessions(client, ids)
    grown = rss_mb(pid) - base
    print(f"mux: {sessions} sessions on one WebSocket: +{grown:.1f} MB, "
          f"{grown * 1024 / sessions:.1f} KB per session")  # fmt: skip
    start, rounds, samples = time.monotonic(), 0, []
    generation = 0
    while time.monotonic() - start < seconds:
        turns = []
        for sid in ids:
            turns.extend(uamp_start(sid, 1, create=False))
        client.send(*turns)
        await_count(client, b'"response.done"', sessions)
        # Sessions come and go: end each, open a fresh one in its place.
        generation += 1
        ended, ids = ids, [f"sess_{generation}_{i}" for i in range(sessions)]
        open_sessions(client, ids, ended)
        rounds += 1
        samples.append((time.monotonic() - start, rss_mb(pid)))
    print(f"  {rounds} rounds, {rounds * sessions:,} turns and sessions")
    report("mux", samples)
    client.close()


def _service(selector: selectors.BaseSelector, timeout: float) -> int:
    """Read what arrived on the idle connections and answer pings; returns how many closed."""
    closed = 0
    for key, _ in selector.select(timeout=timeout):
        c = key.data
        try:
            data = c.sock.recv(65536)
        except BlockingIOError:
            continue
        try:
            if not data:
                raise WebSocketClosed(1006, "")
            c.engine.feed(data)
        except WebSocketClosed as why:
            print(f"  the server closed a connection: {why}")
            selector.unregister(c.sock)
            closed += 1
            continue
        owed = c.engine.take()  # pongs
        if owed:
            c.sock.setblocking(True)
            c.sock.sendall(owed)
            c.sock.setblocking(False)
    return closed


def idle(server: Running, connections: int, seconds: float) -> None:
    pid = server.proc.pid
    base = rss_mb(pid)
    selector = selectors.DefaultSelector()
    clients = []
    closed = 0
    for i in range(connections):
        c = WSClient(server.port, PATH)
        c.sock.setblocking(False)
        selector.register(c.sock, selectors.EVENT_READ, c)
        clients.append(c)
        if i % 200 == 0:  # opening them all takes a while: answer the pings meanwhile
            closed += _service(selector, 0)
    grown = rss_mb(pid) - base
    print(f"idle: {connections} WebSocket connections: +{grown:.1f} MB, "
          f"{grown * 1024 / connections:.1f} KB per connection")  # fmt: skip
    start, samples = time.monotonic(), []
    next_sample = 0.0
    while (now := time.monotonic() - start) < seconds:
        closed += _service(selector, 1)
        if now >= next_sample:
            samples.append((now, rss_mb(pid)))
            next_sample = now + 10
    samples.append((time.monotonic() - start, rss_mb(pid)))
    print(f"  connections the server closed meanwhile: {closed}")
    report("idle", samples)
    for c in clients:
        c.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="per phase")
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--connections", type=int, default=10_000)
    parser.add_argument("--only", default="mux,idle")
    args = parser.parse_args()
    only = set(args.only.split(","))
    print(f"uamp soak: {args.minutes:g} min per phase")
    for phase in ("mux", "idle"):
        if phase not in only:
            continue
        server = Running("uamp-soak")
        try:
            print(f"  server at start: {rss_mb(server.proc.pid):.1f} MB")
            if phase == "mux":
                mux(server, args.sessions, args.minutes * 60)
            else:
                idle(server, args.connections, args.minutes * 60)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
