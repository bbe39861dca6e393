"""What a short turn costs inside uamp: a UAP agent's turn against the demo responder's request.

Run: ``python bench/turn.py [--rounds 3] [--requests 400]`` (the server CPU of
each row, per request, the rows alternating round by round in one run);
``--calls`` instead counts the Python calls per request with cProfile in
the server process, and prints the functions called most (call counts do
not move with the machine's load the way timings do); ``--callgrind``
counts the server's instructions per request under ``valgrind
--tool=callgrind`` (instrumentation on for the measured requests only);
``--in-process`` measures the turn without sockets or a server (see
:func:`in_process`): the runtime's and the bridge's own part.

Every row is one sequential keep-alive connection posting non-streamed Chat
Completions (``/chat/completions``) to a server of ``bench/transports.py``
with access log and metrics off, so the ratios measure the runtime:

* ``models``: ``GET /models`` on the demo server: a bare route, what any
  request costs before a transport does anything;
* ``demo``: the hand-written responder (``FloodAgent``): five words;
* ``agent``: a UAP agent (loop strategy, ``function`` model,
  ``bench/flood_agent.py``'s ``tooled``): the same five words;
* ``tool-1``, ``tool-2``: the same agent, one or two server-side rounds of
  its ``lookup`` tool before the five words.

Printed: server CPU per request of each row and its ratio to ``demo`` (and
``demo``'s to ``models``); then what each extra tool round adds, over
``demo``. Targets (issue 38): ``agent`` <= 1.5x ``demo``, each tool round
<= 1x ``demo``, ``demo`` <= 2x ``models``.
"""

from __future__ import annotations

import argparse
import os
import pstats
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from transports import (
    PROFILE_ENV,
    SERVERS,
    _call_group,
    _http_post,
    _server_cpu,
    port_from_file,
    serve_uamp,
    stop_process,
)

#: row -> (server kind, method, body)
ROWS: dict[str, tuple[str, str, bytes]] = {
    "models": ("uamp", "GET", b""),
    "demo": ("uamp", "POST", b"5"),
    "agent": ("uamp-tooled", "POST", b"5"),
    "tool-1": ("uamp-tooled", "POST", b"tools 1"),
    "tool-2": ("uamp-tooled", "POST", b"tools 2"),
}


def _serve_tooled(port_file: Path) -> None:
    serve_uamp(port_file, agent="flood_agent:tooled")


SERVERS["uamp-tooled"] = _serve_tooled


def _get(sock: socket.socket, buf: bytearray) -> tuple[bytes, bytes]:
    """``GET /models`` on a keep-alive socket; (status, body)."""
    import h11

    conn = h11.Connection(h11.CLIENT)
    sock.sendall(conn.send(h11.Request(method="GET", target="/models", headers=[("host", "x")])))
    sock.sendall(conn.send(h11.EndOfMessage()))
    if buf:
        conn.receive_data(bytes(buf))
        buf.clear()
    status, parts = b"", []
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(sock.recv(65536))
        elif isinstance(event, h11.Response):
            status = str(event.status_code).encode()
        elif isinstance(event, h11.Data):
            parts.append(bytes(event.data))
        elif isinstance(event, h11.EndOfMessage):
            buf.extend(conn.trailing_data[0])
            return status, b"".join(parts)


def requester(row: str, port: int) -> Callable[[int], None]:
    """A function that sends ``n`` requests of ``row`` on one keep-alive connection."""
    _, method, prompt = ROWS[row]
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = bytearray()
    ask = {"role": "user", "content": prompt.decode()}
    body = orjson.dumps({"model": "flood", "messages": [ask]})

    def send(n: int) -> None:
        for _ in range(n):
            if method == "GET":
                status, raw = _get(sock, buf)
                assert status == b"200" and b'"flood"' in raw, raw[:200]
            else:
                status, raw = _http_post(sock, body, buf)
                assert status == b"200" and b"tok tok tok tok tok" in raw, raw[:300]

    return send


class Server:
    """A server of ``bench/transports.py`` (``--serve KIND``), optionally under a profiler."""

    def __init__(self, kind: str, env: dict[str, str] | None = None, prefix: list[str] = ()):  # type: ignore[assignment]
        port_file = Path(tempfile.mkdtemp(prefix="uamp-turn-")) / "port"
        here = Path(__file__).resolve().parent
        argv = [*prefix, sys.executable, str(here / "turn.py"), "--serve", kind]
        self.proc = subprocess.Popen(
            [*argv, "--port-file", str(port_file)], env=env, stdout=subprocess.DEVNULL
        )
        self.port = port_from_file(port_file, self.proc, 600 if prefix else 30, kind)

    def stop(self) -> None:
        stop_process(self.proc, 30)


def cpu(rows: list[str], rounds: int, requests: int) -> dict[str, float]:
    """Server CPU (µs) per request of each row, alternating round by round."""
    kinds = {ROWS[r][0] for r in rows}
    servers = {k: Server(k) for k in sorted(kinds)}
    spent = dict.fromkeys(rows, 0.0)
    try:
        senders = {r: requester(r, servers[ROWS[r][0]].port) for r in rows}
        for r in rows:  # warm up
            senders[r](max(50, requests // 4))
        for i in range(rounds):
            for r in rows[i % len(rows) :] + rows[: i % len(rows)]:
                pid = servers[ROWS[r][0]].proc.pid
                c0 = _server_cpu(pid)
                senders[r](requests)
                c1 = _server_cpu(pid)
                assert c0 is not None and c1 is not None, "needs /proc"
                spent[r] += c1 - c0
    finally:
        for s in servers.values():
            s.stop()
    return {r: spent[r] / (rounds * requests) * 1e6 for r in rows}


def report(per: dict[str, float], unit: str) -> None:
    demo = per.get("demo")
    for row, value in per.items():
        line = f"  {row:<8} {value:>12,.1f} {unit}/request"
        if demo and row != "demo":
            line += f"   {value / demo:5.2f}x demo"
        elif demo and "models" in per:
            line += f"   {demo / per['models']:5.2f}x models"
        print(line)
    if demo and "agent" in per:
        before = per["agent"]
        for row in ("tool-1", "tool-2"):
            if row in per:
                added = per[row] - before
                print(f"  {row} adds {added:,.1f} {unit}: {added / demo:.2f}x demo")
                before = per[row]


def calls(rows: list[str], requests: int, top: int) -> dict[str, float]:
    """Python calls per request of each row (cProfile in the server, switched on by signal)."""
    per: dict[str, float] = {}
    for row in rows:
        out = Path(tempfile.mkdtemp(prefix="uamp-turn-calls-")) / "server.prof"
        server = Server(ROWS[row][0], env={**os.environ, PROFILE_ENV: str(out)})
        try:
            send = requester(row, server.port)
            send(requests)
            os.kill(server.proc.pid, signal.SIGUSR1)
            send(requests)
            os.kill(server.proc.pid, signal.SIGUSR2)
            deadline = time.monotonic() + 30
            while not out.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            server.stop()
        raw: Any = pstats.Stats(str(out)).stats  # type: ignore[attr-defined]
        total = sum(nc for _, nc, _, _, _ in raw.values())
        per[row] = total / requests
        groups: dict[str, int] = {}
        for (path, _, _), (_, nc, _, _, _) in raw.items():
            groups[_call_group(path)] = groups.get(_call_group(path), 0) + nc
        print(
            f"\n{row}: {per[row]:,.0f} Python calls per request ({out}); by package: "
            + ", ".join(
                f"{g} {c / requests:.0f}" for g, c in sorted(groups.items(), key=lambda i: -i[1])
            )
        )
        ranked = sorted(raw.items(), key=lambda item: -item[1][1])[:top]
        for (path, line, name), (_, nc, _, _, _) in ranked:
            where = f"{Path(path).name}:{line}" if line else path
            print(f"  {nc / requests:>7.2f}  {name}  ({where})")
    return per


def instructions(rows: list[str], requests: int) -> dict[str, float]:
    """Server instructions per request of each row (callgrind, toggled by ``callgrind_control``)."""
    if not shutil.which("valgrind"):
        raise SystemExit("--callgrind needs valgrind (apt-get install valgrind)")
    per: dict[str, float] = {}
    for row in rows:
        folder = Path(tempfile.mkdtemp(prefix="uamp-turn-cg-"))
        out = folder / "callgrind.out"
        prefix = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={out}",
        ]
        server = Server(ROWS[row][0], prefix=prefix)
        try:
            send = requester(row, server.port)
            send(max(20, requests // 4))
            subprocess.run(
                ["callgrind_control", "-i", "on", str(server.proc.pid)],
                check=True,
                capture_output=True,
            )
            send(requests)
            subprocess.run(
                ["callgrind_control", "-i", "off", str(server.proc.pid)],
                check=True,
                capture_output=True,
            )
        finally:
            server.stop()
        total = 0
        for line in out.read_text().splitlines():
            if line.startswith("summary:") or line.startswith("totals:"):
                total = int(line.split()[1])
        per[row] = total / requests
    return per


def in_process(rounds: int, turns: int) -> dict[str, float]:
    """CPU (us, ``time.process_time``) per turn in this process, no sockets; least of ``rounds``.

    ``bare``: the turn driver (``run_response``, no sink, as a non-streamed
    Chat Completion runs it) with a responder that emits five words;
    ``agent``: the same driver with ``tooled`` through the bridge;
    ``tool-1``: with one tool round; ``runtime``: the runtime alone
    (``Agent.stream(...).drive`` into a consumer that does nothing).
    """
    import flood_agent
    import trio

    from uamp_agents.bridge import serve_agent
    from uamp_proto import events as ev
    from uamp_proto import types as ty
    from uamp_proto.responder import TurnRequest
    from uamp_trio.hosting.turns import run_response

    endpoint = serve_agent(flood_agent.tooled)

    class Bare:
        name = "flood"

        async def respond(self, request: TurnRequest, emit: Any) -> None:
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text=flood_agent.WORD * 5)))

    async def nothing(event: Any) -> None:
        pass

    async def run(kind: str, n: int) -> None:
        text = "tools 1" if kind == "tool-1" else "5"
        for i in range(n):
            ask = ty.Message(role="user", content=text)
            if kind == "runtime":
                await flood_agent.tooled.stream([], ask, stream_model=False).drive(nothing)
                continue
            request = TurnRequest(
                agent="flood", session_id="sess_1", response_id=f"resp_{i}", messages=[ask],
                streamed=False,
            )  # fmt: skip
            outcome = await run_response(Bare() if kind == "bare" else endpoint, request, None)
            assert outcome.status == "completed", outcome

    best: dict[str, float] = {}
    for _ in range(rounds):
        for kind in ("bare", "agent", "tool-1", "runtime"):
            trio.run(run, kind, 100)
            t0 = time.process_time()
            trio.run(run, kind, turns)
            spent = (time.process_time() - t0) / turns * 1e6
            best[kind] = min(best.get(kind, spent), spent)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=400, help="requests per row and round")
    parser.add_argument("--only", default=",".join(ROWS), help="rows, comma-separated")
    parser.add_argument("--calls", action="store_true", help="Python calls per request (cProfile)")
    parser.add_argument("--top", type=int, default=30, help="functions listed by --calls")
    parser.add_argument("--callgrind", action="store_true", help="instructions per request")
    parser.add_argument(
        "--in-process", action="store_true", help="the turn without sockets (least of rounds)"
    )
    parser.add_argument("--serve", choices=sorted(SERVERS))
    parser.add_argument("--port-file", type=Path)
    args = parser.parse_args()
    if args.serve:
        from transports import _profiled

        profile = os.environ.get(PROFILE_ENV)
        if profile:
            _profiled(SERVERS[args.serve], args.port_file, profile)
        else:
            SERVERS[args.serve](args.port_file)
        return
    rows = [r for r in args.only.split(",") if r]
    if args.in_process:
        print(f"CPU per turn in process, least of {args.rounds} rounds of {args.requests}:")
        for kind, value in in_process(args.rounds, args.requests).items():
            print(f"  {kind:<8} {value:8.1f} us/turn")
    elif args.calls:
        print("Python calls per request (cProfile):")
        report(calls(rows, args.requests, args.top), "calls")
    elif args.callgrind:
        print("server instructions per request (callgrind):")
        report(instructions(rows, args.requests), "instr")
    else:
        cpus = os.cpu_count()
        print(f"server CPU per request, {args.rounds} rounds of {args.requests}; {cpus} CPUs")
        report(cpu(rows, args.rounds, args.requests), "us")


if __name__ == "__main__":
    main()
