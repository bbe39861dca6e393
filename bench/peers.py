"""uamp against Robutler's reference implementation, webagents 0.3.9, serving the same agent.

Run: ``python bench/peers.py [--rounds 3] [--concurrency 16]`` (needs the
``bench`` extra; the first run installs ``webagents==0.3.9`` from the
package index into its own virtualenv under ``build/bench-cache/``, never
into this project's).

Two setups, one after the other (``--setup http|local|both``, default both).
``http``: three processes serve, a mock model (an OpenAI-compatible Chat
Completions server, ``--serve model``, on uvicorn+Starlette) and the two
agent servers whose figures are compared, both with their OpenAI provider
pointed at that mock and one server-side tool, ``lookup``:

* ``uamp``: ``uamp serve --agent peers_agent:peer`` (``bench/peers_agent.py``),
  as it ships (access log and metrics on);
* ``webagents``: a webagents ``BaseAgent`` on webagents' own server
  (FastAPI on uvicorn, ``bench/peers_webagents.py``), rate limiter and
  platform heartbeat off. As served here it writes no line per request
  (uvicorn's access log is off; ``webagents serve``'s own request log wraps
  its CLI's app, not this one) and counts nothing per request (its
  monitoring's Prometheus registry holds the server's info only);
* ``uamp-quiet`` (``--quiet``): ``uamp`` with ``--no-access-log
  --no-metrics``, the like-for-like peer of that server.

``local``: the same two servers with the model in process, so neither pays
an HTTP client per model call: uamp's agent on the ``function`` model
(``peers_agent:peer_local``), webagents' with its OpenAI skill answering in
process (``peers_webagents.py --local``). The model answers by the same
rules in every setup (``bench/peers_replies.py``): ``plain`` gets five words;
``stream N`` gets ``N`` words, one per chunk when streamed; ``tool`` gets a
call of ``lookup`` first and, once the conversation holds its result,
twenty words. The workloads, each driven by ``uamp bench`` (Chat
Completions on its lean HTTP/1.1 pool, a request in one write) at
``--concurrency`` connections, the two servers alternating round by round:

* ``plain``: a completion, not streamed;
* ``stream-200``: a 200-chunk SSE stream;
* ``tool+20``: the server-side tool round, then 20 streamed chunks.

``--rate R`` drives both servers open loop instead, ``R`` requests/s offered
to each (``uamp bench --rate``): both measured at the same load rather than
each at its own pace, since a server that waits for its client between
requests pays a wake-up per request that a saturated one shares out
(docs/performance.md, "Busy and idle").

``--callgrind`` prints instead each server's user-space instructions per
request of each workload (``valgrind --tool=callgrind``, one server at a
time, switched on for the measured requests only): steady whatever the
machine's load, and without the kernel's part of either server. Needs
valgrind; ``--only plain`` measures one workload.

Printed per workload: each server's CPU time (user + system, from ``/proc``)
per request over all rounds, requests/s (median), how busy it was (its CPU
time over the time its requests took) and the ratio webagents / uamp of
CPU per request. Then what the tool round adds: the median
end-to-end latency of ``tool+20`` minus that of a plain 20-chunk stream, one
request at a time. The mock's own CPU is not counted for either; in the
``local`` setup the model's work is each server's own.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from peers_replies import completion, stream_chunks  # noqa: E402
from transports import _server_cpu, stop_process, wait_for_port  # noqa: E402

from tests._support.peer_venv import webagents_python  # noqa: E402

VENV = ROOT / "build" / "bench-cache" / "webagents-0.3.9"

#: (name, prompt, streamed, requests per round)
# Requests per round: enough for a few hundred ms of uamp's CPU, which /proc
# counts in 10 ms ticks.
WORKLOADS = [
    ("plain", "plain", False, 2000),
    ("stream-200", "stream 200", True, 200),
    ("tool+20", "tool", True, 600),
]


# --- the mock model ----------------------------------------------------------------


def serve_model(port_file: Path) -> None:
    """The mock model: an OpenAI-compatible Chat Completions server (uvicorn+Starlette)."""
    import asyncio

    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response, StreamingResponse
    from starlette.routing import Route

    async def completions(request: Request) -> Response:
        req = orjson.loads(await request.body())
        messages = req.get("messages", [])
        if req.get("stream"):
            usage = bool((req.get("stream_options") or {}).get("include_usage"))
            parts = [b"data: " + orjson.dumps(c) + b"\n\n" for c in stream_chunks(messages, usage)]
            parts.append(b"data: [DONE]\n\n")

            async def gen() -> Any:
                for p in parts:
                    yield p

            return StreamingResponse(gen(), media_type="text/event-stream")
        return Response(orjson.dumps(completion(messages)), media_type="application/json")

    app = Starlette(
        routes=[
            Route("/v1/chat/completions", completions, methods=["POST"]),
            Route("/chat/completions", completions, methods=["POST"]),
        ]
    )
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)
    port_file.write_text(str(sock.getsockname()[1]))
    config = uvicorn.Config(app, log_level="error", access_log=False)
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


# --- the servers ------------------------------------------------------------------------


class Server:
    """One server process; ``url`` is its Chat Completions endpoint."""

    def __init__(self, argv: list[str], env: dict[str, str], path: str, port_file: Path) -> None:
        port_file.unlink(missing_ok=True)
        # The server's output goes to a file: a pipe nobody reads fills up
        # and blocks the server mid-run (the access log writes every request).
        self.log = port_file.with_suffix(".log")
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                argv, env=env, cwd=ROOT / "bench", stdout=log, stderr=subprocess.STDOUT
            )
        # (a server under valgrind takes minutes to start)
        deadline = time.monotonic() + (600 if argv[0] == "valgrind" else 60)
        while not port_file.exists() or not port_file.read_text().strip():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                tail = self.log.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"{argv[:3]} did not start: {tail}")
            time.sleep(0.05)
        self.port = int(port_file.read_text())
        self.url = f"http://127.0.0.1:{self.port}{path}"
        wait_for_port(self.port)

    def stop(self) -> None:
        # (valgrind writes its figures as the server exits: give it time)
        stop_process(self.proc, 120 if self.proc.args[0] == "valgrind" else 10)


def start_uamp(
    model_url: str | None, tmp: Path, prefix: list[str] | None = None, quiet: bool = False
) -> Server:
    """``uamp serve --agent peers_agent:peer --port 0`` (``peer_local`` without a model URL).

    ``prefix``: run it under this command (``valgrind ...``). ``quiet``: with
    ``--no-access-log --no-metrics``.
    """
    port_file = tmp / ("uamp-quiet.port" if quiet else "uamp.port")
    flags = ", '--no-access-log', '--no-metrics'" if quiet else ""
    # The checkout's uamp, whatever the interpreter has installed.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "bench"), str(ROOT)])}
    served = "peers_agent:peer_local"
    if model_url is not None:
        env["UAMP_PEERS_MODEL_URL"] = model_url
        served = "peers_agent:peer"
    code = (
        "import sys, runpy, trio\n"
        "from uamp_trio import cli\n"
        "from uamp_trio.cli import serve\n"
        # The banner goes to stdout; the port file is written once listening.
        "orig = serve.print_urls\n"
        "def urls(server, app, **kw):\n"
        f"    open({str(port_file)!r}, 'w').write(str(server.port))\n"
        "serve.print_urls = urls\n"
        f"sys.exit(cli.main(['serve', '--agent', {served!r}, '--port', '0'{flags}]))\n"
    )
    argv = [*(prefix or []), sys.executable, "-c", code]
    return Server(argv, env, "/agents/peer/v1/chat/completions", port_file)


def start_webagents(
    model_url: str | None, tmp: Path, venv: Path = VENV, prefix: list[str] | None = None
) -> Server:
    """webagents' server (``peers_webagents.py``); its model in process without a model URL."""
    python = webagents_python(venv, "import webagents.server.core.app")
    port_file = tmp / "webagents.port"
    env = {**os.environ, "PYTHONPATH": "", "HOME": str(tmp)}
    script = str(ROOT / "bench" / "peers_webagents.py")
    return Server(
        [*(prefix or []), str(python), script, model_url or "--local", str(port_file)],
        env,
        "/peer/chat/completions",
        port_file,
    )


# --- driving ----------------------------------------------------------------------------


def drive(
    url: str, prompt: str, stream: bool, requests: int, concurrency: int, rate: float | None = None
) -> dict[str, Any]:
    """One ``uamp bench`` run; its JSON summary. ``rate``: open loop, requests/s offered."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        argv = [
            sys.executable, "-m", "uamp", "bench", url, "--model", "peer",
            "--prompt", prompt, "-c", str(concurrency), "-n", str(requests),
            "--stream" if stream else "--no-stream", "--no-progress", "--json", out.name,
            # webagents' server refuses a request without a credential header
            # (it only checks that there is one); uamp serve without auth ignores it.
            "--api-key", "bench",
        ]  # fmt: skip
        if rate is not None:
            argv += ["--rate", f"{rate:g}"]
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
        result: dict[str, Any] = json.loads(Path(out.name).read_text())
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", "-c", type=int, default=16)
    parser.add_argument("--scale", type=float, default=1.0, help="requests per round x this")
    parser.add_argument("--json", type=Path, help="write the figures as JSON")
    parser.add_argument(
        "--callgrind",
        action="store_true",
        help="instructions per request of each server (valgrind), instead of CPU from /proc",
    )
    parser.add_argument("--only", help="workloads, comma-separated (default all)")
    parser.add_argument(
        "--rate",
        type=float,
        help="open loop: offer each server this many requests/s (default: closed loop, as fast"
        " as --concurrency connections go), so both are measured at the same load",
    )
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="a third server: uamp with access log and metrics off, as webagents' logs none",
    )
    parser.add_argument("--serve", choices=["model"])
    parser.add_argument("--port-file", type=Path)
    parser.add_argument(
        "--setup",
        choices=["http", "local", "both"],
        default="both",
        help="the model over HTTP (a mock server), in process, or both, one after the other",
    )
    args = parser.parse_args()
    if args.serve:
        serve_model(args.port_file)
        return
    figures: dict[str, Any] = {}
    for setup in ("http", "local") if args.setup == "both" else (args.setup,):
        figures[setup] = instructions(setup, args) if args.callgrind else compare(setup, args)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


def start_model(tmp: Path) -> Server:
    """The mock model server of the ``http`` setup (``--serve model``)."""
    port_file = tmp / "model.port"
    argv = [sys.executable, __file__, "--serve", "model", "--port-file", str(port_file)]
    return Server(argv, dict(os.environ), "/v1", port_file)


def _workloads(args: argparse.Namespace) -> list[tuple[str, str, bool, int]]:
    only = set(args.only.split(",")) if args.only else None
    return [w for w in WORKLOADS if only is None or w[0] in only]


def instructions(setup: str, args: argparse.Namespace) -> dict[str, Any]:
    """Each server's user-space instructions per request of each workload (callgrind).

    One server at a time under ``valgrind --tool=callgrind``, instrumentation
    switched on (``callgrind_control``) for the measured requests only: a
    figure that the machine's load does not move, and that leaves out the
    kernel's part (the socket calls) of both servers.
    """
    tmp = Path(tempfile.mkdtemp(prefix="uamp-peers-cg-"))
    model = start_model(tmp) if setup == "http" else None
    model_url = model.url if model is not None else None
    figures: dict[str, Any] = {}
    print(f"\n== {setup}: instructions per request (callgrind), {args.concurrency} connections")
    try:
        for name, prompt, stream, n in _workloads(args):
            n = max(1, int(n * args.scale))
            figures[name] = {}
            for kind, start in (("uamp", start_uamp), ("webagents", start_webagents)):
                out = tmp / f"{kind}-{name}.callgrind"
                prefix = [
                    "valgrind",
                    "--tool=callgrind",
                    "--instr-atstart=no",
                    f"--callgrind-out-file={out}",
                ]
                server = start(model_url, tmp, prefix=prefix)
                try:
                    warm = max(args.concurrency, n // 4)
                    drive(server.url, prompt, stream, warm, args.concurrency)
                    toggle = ["callgrind_control", "-i"]
                    pid = str(server.proc.pid)
                    subprocess.run([*toggle, "on", pid], check=True, capture_output=True)
                    result = drive(server.url, prompt, stream, n, args.concurrency)
                    subprocess.run([*toggle, "off", pid], check=True, capture_output=True)
                finally:
                    server.stop()
                total = 0
                for line in out.read_text().splitlines():
                    if line.startswith(("summary:", "totals:")):
                        total = int(line.split()[1])
                figures[name][kind] = total / max(1, result["requests"])
            ratio = figures[name]["webagents"] / figures[name]["uamp"]
            figures[name]["ratio_webagents_over_uamp"] = ratio
            print(
                f"  {name:<11} uamp {figures[name]['uamp'] / 1e3:9,.0f} k   webagents "
                f"{figures[name]['webagents'] / 1e3:9,.0f} k   webagents / uamp = {ratio:.2f}x"
            )
    finally:
        if model is not None:
            model.stop()
    return figures


def compare(setup: str, args: argparse.Namespace) -> dict[str, Any]:
    """Both servers in one setup (``http``: the mock model server; ``local``: in process)."""
    tmp = Path(tempfile.mkdtemp(prefix="uamp-peers-"))
    model = start_model(tmp) if setup == "http" else None
    model_url = model.url if model is not None else None
    servers: dict[str, Server] = {}
    try:
        servers["uamp"] = start_uamp(model_url, tmp)
        servers["webagents"] = start_webagents(model_url, tmp)
        if args.quiet:
            servers["uamp-quiet"] = start_uamp(model_url, tmp, quiet=True)
        load = f"{args.rate:g} requests/s offered" if args.rate else "closed loop"
        print(
            f"\n== {setup}: uamp vs webagents 0.3.9, the model "
            f"{'over HTTP' if model else 'in process'}: {args.concurrency} connections, "
            f"{load}, {args.rounds} rounds; {os.cpu_count()} CPUs"
        )
        figures: dict[str, Any] = {}
        for name, prompt, stream, n in _workloads(args):
            n = max(1, int(n * args.scale))
            cpu = dict.fromkeys(servers, 0.0)
            wall = dict.fromkeys(servers, 0.0)
            done = dict.fromkeys(servers, 0)
            rates: dict[str, list[float]] = {k: [] for k in servers}
            errors = dict.fromkeys(servers, 0)
            for k, s in servers.items():  # warm up (and check that it answers)
                warm = drive(s.url, prompt, stream, args.concurrency, args.concurrency)
                if warm["errors"]:
                    raise RuntimeError(f"{k} failed on {name}: {warm.get('errors_by_kind')}")
            order = list(servers)
            for r in range(args.rounds):
                for k in order[r % 2 :] + order[: r % 2]:
                    pid = servers[k].proc.pid
                    c0 = _server_cpu(pid)
                    result = drive(servers[k].url, prompt, stream, n, args.concurrency, args.rate)
                    c1 = _server_cpu(pid)
                    if c0 is not None and c1 is not None:
                        cpu[k] += c1 - c0
                        if result["requests_per_s"]:
                            wall[k] += result["requests"] / result["requests_per_s"]
                    done[k] += result["requests"]
                    errors[k] += result["errors"]
                    rates[k].append(result["requests_per_s"])
            per = {k: cpu[k] / max(1, done[k]) * 1e3 for k in servers}
            rate = {k: statistics.median(v) for k, v in rates.items()}
            ratio = per["webagents"] / per["uamp"] if per["uamp"] else float("nan")
            # How busy each server was while driven (its CPU over the time its
            # requests took; the CPU's count also has the client's start-up and
            # warm-up, a few ms): a server that waits
            # for its client between requests pays a wake-up per request that
            # a saturated one shares out (docs/performance.md, "Busy and idle").
            busy = {k: cpu[k] / wall[k] if wall[k] else float("nan") for k in servers}
            figures[name] = {
                "cpu_ms_per_request": per,
                "requests_per_s": rate,
                "errors": errors,
                "server_busy": busy,
                "rate_offered": args.rate,
            }
            figures[name]["cpu_ratio_webagents_over_uamp"] = ratio
            print(f"\n{name}: server CPU per request, requests/s (median)")
            for k in servers:
                print(
                    f"  {k:<10} {per[k]:8.2f} ms CPU/request {rate[k]:9.1f} req/s"
                    f"   busy {busy[k]:4.0%}   errors {errors[k]}"
                )
            print(f"  webagents / uamp CPU per request = {ratio:.1f}x")
            if per.get("uamp-quiet"):
                quiet = per["webagents"] / per["uamp-quiet"]
                figures[name]["cpu_ratio_webagents_over_uamp_quiet"] = quiet
                print(f"  webagents / uamp-quiet CPU per request = {quiet:.1f}x")
        # What the tool round adds: tool+20 against a plain 20-chunk stream, one at a time.
        print("\ntool round: median end-to-end latency, one request at a time")
        figures["tool_round"] = {}
        for k, s in servers.items():
            e2e = {}
            for label, prompt in (("stream-20", "stream 20"), ("tool+20", "tool")):
                e2e[label] = drive(s.url, prompt, True, 50, 1)["e2e_ms"]["p50"]
            added = e2e["tool+20"] - e2e["stream-20"]
            figures["tool_round"][k] = {**e2e, "added_ms": added}
            print(
                f"  {k:<10} stream-20 {e2e['stream-20']:7.2f} ms   tool+20 {e2e['tool+20']:7.2f} ms"
                f"   the tool round adds {added:7.2f} ms"
            )
        return figures
    finally:
        for s in servers.values():
            s.stop()
        if model is not None:
            model.stop()


if __name__ == "__main__":
    main()
