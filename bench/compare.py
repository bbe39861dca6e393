"""uamp against two other agent servers, with ``uamp bench`` itself, open loop at several rates.

Run: ``python bench/compare.py`` (the figures and plots under
``build/bench-compare/``; ``--publish`` also writes the plots to
``docs/img/`` and the tables into the Comparison section of
``docs/bench.md``). The first run installs the peers from the package index,
each into a virtualenv of its own under ``build/bench-cache/`` (never into
this project's): ``webagents==0.3.9`` (Robutler's reference implementation)
and ``pydantic-ai-slim[ag-ui]==2.78.0`` with ``fasta2a==2.1.1`` and uvicorn.

Three servers on 127.0.0.1, one agent logic: one tool, ``lookup``, and a
model in process answering by the same rules (``bench/peers_replies.py``:
``stream N`` gets N words, one a chunk; ``tool`` gets a call of ``lookup``,
then twenty words):

* ``uamp``: ``uamp serve --agent peers_agent:peer_local`` as it ships
  (access log and metrics on), the ``function`` model;
* ``webagents``: a ``BaseAgent`` on webagents' own FastAPI server
  (``bench/peers_webagents.py --local``);
* ``pydantic-ai``: an ``Agent`` on a ``FunctionModel``, served on uvicorn over
  A2A by FastA2A's ``agent_to_a2a`` and over AG-UI by
  ``AGUIAdapter.dispatch_request`` (``bench/peers_pydantic_ai.py``).

Each pair is driven over the protocols both speak: Chat Completions for uamp
and webagents, AG-UI and A2A (1.0, JSON-RPC) for uamp and pydantic-ai. For each workload
(``stream-50``, ``tool+20``) and server: a short closed-loop warm-up, then
``uamp bench --rate R`` (Poisson arrivals, a fixed seed) for each rate of
``--rates``, then a closed-loop row (``-c``), the servers alternating run by
run. Each run is the real command line in a process of its own; its JSON
summary is kept. The server's CPU time (user + system of its processes, from
``/proc``) over the run, divided by the requests it ended, is its CPU per
request. Latencies count from each request's scheduled start (corrected for
coordinated omission); the generator's own CPU share and the machine's load
average are recorded beside them, since the generator and the servers share
the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from peers import Server, start_uamp, start_webagents  # noqa: E402
from transports import _server_cpu  # noqa: E402

from tests._support.peer_venv import (  # noqa: E402
    PYDANTIC_AI,
    WEBAGENTS,
    pydantic_ai_python,
)

CACHE = ROOT / "build" / "bench-cache"
OUT = ROOT / "build" / "bench-compare"
DOC = ROOT / "docs" / "bench.md"
BEGIN, END = "<!-- compare:begin -->", "<!-- compare:end -->"

#: (name, prompt)
WORKLOADS = {"stream-50": "stream 50", "tool+20": "tool"}
#: (protocol, ``uamp bench --transport``, the servers compared over it)
PROTOCOLS = [
    ("Chat Completions", "openai", ("uamp", "webagents")),
    ("AG-UI", "agui", ("uamp", "pydantic-ai")),
    ("A2A", "a2a", ("uamp", "pydantic-ai")),
]


def slug(text: str) -> str:
    """``Chat Completions`` -> ``chat-completions``."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


# --- the servers ------------------------------------------------------------------------


def start_pydantic_ai(cache: Path, tmp: Path) -> Server:
    """pydantic-ai's AG-UI app on uvicorn (``peers_pydantic_ai.py``), in its own virtualenv."""
    probe = "import pydantic_ai.ui.ag_ui, fasta2a.pydantic_ai, uvicorn"
    python = pydantic_ai_python(cache / "pydantic-ai-2.78.0", probe)
    port_file = tmp / "pydantic-ai.port"
    env = {**os.environ, "PYTHONPATH": "", "HOME": str(tmp)}
    script = str(ROOT / "bench" / "peers_pydantic_ai.py")
    return Server([str(python), script, str(port_file)], env, "", port_file)


def endpoint(server: str, transport: str, running: Server) -> str:
    """The URL ``uamp bench`` is given for ``server`` over ``transport``."""
    if server == "uamp":  # one agent serves every transport: its base URL
        return f"http://127.0.0.1:{running.port}/agents/peer"
    if server == "pydantic-ai":  # AG-UI at /agui, A2A at /a2a
        return f"http://127.0.0.1:{running.port}/{transport}"
    return running.url


@contextmanager
def servers(cache: Path) -> Iterator[dict[str, Server]]:
    """The three servers, running; stopped on the way out."""
    tmp = Path(tempfile.mkdtemp(prefix="uamp-compare-"))
    running: dict[str, Server] = {}
    try:
        running["uamp"] = start_uamp(None, tmp)
        running["webagents"] = start_webagents(None, tmp, cache / "webagents-0.3.9")
        running["pydantic-ai"] = start_pydantic_ai(cache, tmp)
        yield running
    finally:
        for s in running.values():
            s.stop()


# --- driving ----------------------------------------------------------------------------


def bench(
    url: str, transport: str, prompt: str, out: Path, *, load: list[str], timeout: float
) -> dict[str, Any]:
    """One ``uamp bench`` run (``load``: its ``--rate``/``-c``/``-d``/``-n`` flags); its JSON."""
    argv = [
        sys.executable, "-m", "uamp", "bench", url, "--transport", transport, "--prompt", prompt,
        *load, "--timeout", f"{timeout:g}", "--no-progress", "--json", str(out),
        # webagents refuses a request without a credential header (any will do);
        # the other two, without auth configured, ignore it.
        "--api-key", "bench",
    ]  # fmt: skip
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
    if not out.exists():
        raise RuntimeError(f"uamp bench failed ({done.returncode}): {done.stderr.decode()[-2000:]}")
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def measure(
    name: str,
    running: Server,
    url: str,
    transport: str,
    prompt: str,
    out: Path,
    load: list[str],
    timeout: float,
) -> dict[str, Any]:
    """One run with the server's CPU time over it; the run's figures, trimmed."""
    c0 = _server_cpu(running.proc.pid)
    load_avg = os.getloadavg()[0]
    result = bench(url, transport, prompt, out, load=load, timeout=timeout)
    c1 = _server_cpu(running.proc.pid)
    ended = max(1, result["requests"])
    cpu = (c1 - c0) / ended * 1e3 if c0 is not None and c1 is not None else None
    return {
        "server": name,
        "requests": result["requests"],
        "ok": result["ok"],
        "errors_by_kind": result["errors_by_kind"],
        "duration_s": result["duration_s"],
        "requests_per_s": result["requests_per_s"],
        "sent_per_s": result.get("sent_per_s"),
        "late_ms": result.get("late_ms"),
        "ttfd_ms": result["ttfd_ms"],
        "e2e_ms": result["e2e_ms"],
        "e2e_raw_ms": result.get("e2e_raw_ms"),
        "server_cpu_ms_per_request": cpu,
        "generator_cpu": max(result.get("generator_cpu") or [0.0]),
        "load_average": round((load_avg + os.getloadavg()[0]) / 2, 2),
        "summary": out.name,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every protocol, workload, load and server; the figures."""
    out = args.out
    (out / "runs").mkdir(parents=True, exist_ok=True)
    for path in (out / "runs").glob("*.json"):
        path.unlink()
    figures: dict[str, Any] = {
        "machine": machine(),
        "versions": versions(args.cache),
        "settings": {
            "rates": args.rates,
            "duration": args.duration,
            "closed_concurrency": args.concurrency,
            "cap": args.cap,
            "arrival": "poisson",
            "seed": args.seed,
            "workloads": args.workloads,
        },
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "runs": [],
    }
    loads: list[tuple[str, list[str]]] = [
        (f"{r:g}/s", ["--rate", f"{r:g}", "-d", args.duration, "-c", str(args.cap),
                      "--seed", str(args.seed)])
        for r in args.rates
    ]  # fmt: skip
    loads.append(
        (f"closed c={args.concurrency}", ["-c", str(args.concurrency), "-d", args.duration])
    )
    with servers(args.cache) as running:
        step = 0
        for protocol, transport, names in PROTOCOLS:
            for workload in args.workloads:
                prompt = WORKLOADS[workload]
                for name in names if args.warmup else ():  # warm up, and check it answers
                    url = endpoint(name, transport, running[name])
                    warm = bench(
                        url,
                        transport,
                        prompt,
                        out / "runs" / "warmup.json",
                        load=["-c", "4", "-n", str(args.warmup)],
                        timeout=args.timeout,
                    )
                    if warm["errors"]:
                        raise RuntimeError(f"{name} failed {workload}: {warm['errors_by_kind']}")
                for label, load in loads:
                    order = list(names) if step % 2 == 0 else list(reversed(names))
                    step += 1
                    for name in order:
                        url = endpoint(name, transport, running[name])
                        file = (
                            out / "runs" / f"{slug(protocol)}_{workload}_{slug(label)}_{name}.json"
                        )
                        row = measure(
                            name, running[name], url, transport, prompt, file, load, args.timeout
                        )
                        row.update(protocol=protocol, workload=workload, load=label)
                        row["rate"] = float(label[:-2]) if label.endswith("/s") else None
                        figures["runs"].append(row)
                        print(line(row), flush=True)
    figures["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return figures


def line(row: dict[str, Any]) -> str:
    """One run, for the console."""
    cpu = row["server_cpu_ms_per_request"]
    return (
        f"{row['protocol']:<16} {row['workload']:<9} {row['load']:<11} {row['server']:<11} "
        f"{row['requests_per_s']:7.1f} req/s  p50 {ms(row['e2e_ms']['p50']):>9}  "
        f"p99 {ms(row['e2e_ms']['p99']):>9}  cpu {'-' if cpu is None else f'{cpu:.2f}'} ms/req  "
        f"errors {row['requests'] - row['ok']}  gen {row['generator_cpu']:.0%}  "
        f"load {row['load_average']}"
    )


def ms(value: float | None) -> str:
    """A latency for a table: ``12.3 ms``, ``1.42 s``, or ``-``."""
    if value is None:
        return "-"
    return f"{value / 1000:.2f} s" if value >= 1000 else f"{value:.1f} ms"


# --- what it ran on ---------------------------------------------------------------------


def machine() -> dict[str, Any]:
    """CPUs, model name, Python, the load average at the start."""
    model = ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for text in cpuinfo.read_text().splitlines():
            if text.startswith("model name"):
                model = text.split(":", 1)[1].strip()
                break
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "python": platform.python_version(),
        "system": f"{platform.system()} {platform.release()}",
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def versions(cache: Path) -> dict[str, str]:
    """The servers' versions (uamp's own, and the peers' pins)."""
    from importlib.metadata import version

    return {
        "uamp": version("uamp"),
        "webagents": WEBAGENTS[0].split("==")[1],
        "pydantic-ai-slim": PYDANTIC_AI[0].split("==")[1],
        "fasta2a": PYDANTIC_AI[1].split("==")[1],
        "uvicorn (pydantic-ai's server)": PYDANTIC_AI[2].split("==")[1],
    }


# --- the report -------------------------------------------------------------------------


def table(figures: dict[str, Any]) -> str:
    """The figures as markdown: one table per protocol, a row per workload and load."""
    parts = []
    for protocol, _, names in PROTOCOLS:
        rows = [r for r in figures["runs"] if r["protocol"] == protocol]
        if not rows:
            continue
        head = ["workload", "load"]
        for name in names:
            head += [f"{name} ok/s", "p50", "p99", "CPU/req"]
        head.append("CPU ratio")
        parts.append(
            f"**{protocol}** (end-to-end latency from the scheduled start; server CPU "
            "ms per request)\n"
        )
        parts.append("| " + " | ".join(head) + " |")
        parts.append("| --- | --- | " + " | ".join("---:" for _ in head[2:]) + " |")
        keys = dict.fromkeys((r["workload"], r["load"]) for r in rows)
        for workload, load in keys:
            cells = [workload, load]
            cpu: dict[str, float | None] = {}
            for name in names:
                r = next(
                    (
                        x
                        for x in rows
                        if (x["workload"], x["load"], x["server"]) == (workload, load, name)
                    ),
                    None,
                )
                if r is None:
                    cells += ["-"] * 4
                    continue
                kinds = ", ".join(f"{n} {k}" for k, n in r["errors_by_kind"].items())
                rate = f"{r['requests_per_s']:.1f}" + (f" ({kinds})" if kinds else "")
                cpu[name] = r["server_cpu_ms_per_request"]
                c = cpu[name]
                cells += [
                    rate,
                    ms(r["e2e_ms"]["p50"]),
                    ms(r["e2e_ms"]["p99"]),
                    "-" if c is None else f"{c:.2f}",
                ]
            base, other = cpu.get(names[0]), cpu.get(names[1])
            cells.append(f"{other / base:.1f}x" if base and other else "-")
            parts.append("| " + " | ".join(cells) + " |")
        parts.append("")
    return "\n".join(parts)


def about(figures: dict[str, Any]) -> str:
    """Where, when and with what the figures were made."""
    m, v, s = figures["machine"], figures["versions"], figures["settings"]
    loads = [r["load_average"] for r in figures["runs"]]
    gen = max((r["generator_cpu"] for r in figures["runs"]), default=0.0)
    return (
        f"Made {figures['started_at']} to {figures['finished_at']} on {m['cpus']} CPUs "
        f"({m['cpu_model'] or 'unknown model'}), {m['system']}, Python {m['python']}, "
        f"the load average {min(loads, default=0):.1f} to {max(loads, default=0):.1f} over "
        f"the runs (the machine is shared: other work ran meanwhile). Versions: "
        + ", ".join(f"{k} {val}" for k, val in v.items())
        + f". Rates {', '.join(f'{r:g}' for r in s['rates'])} requests/s (Poisson, seed "
        f"{s['seed']}, at most {s['cap']} in flight), {s['duration']} each; closed loop "
        f"at {s['closed_concurrency']} connections for {s['duration']}. The busiest "
        f"generator process used {gen:.0%} of a CPU.\n"
    )


def plot(figures: dict[str, Any], folder: Path) -> list[Path]:
    """One PNG per protocol: latency, throughput and CPU per request against the rate."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    colours = {"uamp": "tab:blue", "webagents": "tab:orange", "pydantic-ai": "tab:green"}
    for protocol, _, names in PROTOCOLS:
        rows = [r for r in figures["runs"] if r["protocol"] == protocol and r["rate"] is not None]
        workloads = list(dict.fromkeys(r["workload"] for r in rows))
        if not workloads:
            continue
        fig, axes = plt.subplots(
            3, len(workloads), figsize=(5.5 * len(workloads), 10), squeeze=False
        )
        for col, workload in enumerate(workloads):
            lat, thr, cpu = axes[0][col], axes[1][col], axes[2][col]
            for name in names:
                mine = sorted(
                    (r for r in rows if r["workload"] == workload and r["server"] == name),
                    key=lambda r: r["rate"],
                )
                rates = [r["rate"] for r in mine]
                c = colours.get(name)
                lat.plot(
                    rates, [r["e2e_ms"]["p50"] for r in mine], "o-", color=c, label=f"{name} p50"
                )
                lat.plot(
                    rates, [r["e2e_ms"]["p99"] for r in mine], "s--", color=c, label=f"{name} p99"
                )
                thr.plot(rates, [r["requests_per_s"] for r in mine], "o-", color=c, label=name)
                cpu.plot(
                    rates, [r["server_cpu_ms_per_request"] for r in mine], "o-", color=c, label=name
                )
            offered = sorted({r["rate"] for r in rows})
            thr.plot(offered, offered, ":", color="grey", label="offered")
            lat.set_yscale("log")
            thr.set_yscale("log", base=2)
            thr.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
            for ax in (lat, thr, cpu):
                ax.set_xscale("log", base=2)
                ax.set_xticks(sorted({r["rate"] for r in rows}))
                ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
            lat.set_title(f"{protocol}: {workload}")
            lat.set_ylabel("end-to-end latency (ms, log)")
            thr.set_ylabel("successful requests/s (log)")
            cpu.set_ylabel("server CPU ms / request")
            cpu.set_xlabel("offered rate (requests/s, Poisson)")
            for ax in (lat, thr, cpu):
                ax.grid(True, alpha=0.3)
                ax.legend(fontsize=8)
            cpu.set_ylim(bottom=0)
        fig.tight_layout()
        path = folder / f"bench-compare-{slug(protocol)}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        written.append(path)
    return written


def publish(figures: dict[str, Any], plots: Sequence[Path], doc: Path) -> None:
    """Copy the plots to ``docs/img/`` and put the tables between the markers of ``doc``."""
    images = doc.parent / "img"
    for path in plots:
        (images / path.name).write_bytes(path.read_bytes())
    text = doc.read_text()
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    block = "\n" + about(figures) + "\n" + table(figures)
    block += "".join(f"\n![{p.stem}](img/{p.name})\n" for p in plots) + "\n"
    doc.write_text(text[:start] + block + text[end:])


# --- the command line -------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rates",
        type=lambda s: [float(x) for x in s.split(",")],
        default=[5.0, 10.0, 20.0, 40.0, 80.0],
        help="open-loop rates, requests/s, comma-separated (default 5,10,20,40,80)",
    )
    parser.add_argument("--duration", default="10s", help="each run's length (default 10s)")
    parser.add_argument(
        "--concurrency",
        "-c",
        type=int,
        default=4,
        help="connections of the closed-loop row (default 4)",
    )
    parser.add_argument(
        "--cap", type=int, default=64, help="open loop: most requests in flight (default 64)"
    )
    parser.add_argument("--warmup", type=int, default=20, help="warm-up requests per server")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=30.0, help="per request (default 30)")
    parser.add_argument(
        "--workloads",
        type=lambda s: s.split(","),
        default=list(WORKLOADS),
        help=f"comma-separated, of {', '.join(WORKLOADS)}",
    )
    parser.add_argument("--out", type=Path, default=OUT, help=f"default {OUT.relative_to(ROOT)}")
    parser.add_argument(
        "--cache",
        type=Path,
        default=CACHE,
        help="the peers' virtualenvs (default build/bench-cache)",
    )
    parser.add_argument(
        "--publish",
        action="store_true",
        help="also write the plots to docs/img/ and the tables to docs/bench.md",
    )
    parser.add_argument(
        "--doc",
        type=Path,
        default=DOC,
        help="the page --publish writes to (its plots go to img/ beside it)",
    )
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument(
        "--report",
        action="store_true",
        help="run nothing: the tables and plots (and --publish) of the saved compare.json",
    )
    args = parser.parse_args(argv)
    unknown = set(args.workloads) - set(WORKLOADS)
    if unknown:
        parser.error(f"unknown workloads {sorted(unknown)}; known: {', '.join(WORKLOADS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    saved = args.out / "compare.json"
    if args.report:
        figures = json.loads(saved.read_text())
    else:
        figures = run(args)
        saved.write_text(json.dumps(figures, indent=2))
    report = about(figures) + "\n" + table(figures)
    (args.out / "compare.md").write_text(report)
    print("\n" + report)
    plots = [] if args.no_plot else plot(figures, args.out)
    if args.publish:
        publish(figures, plots, args.doc)
    print(f"figures in {args.out}")


if __name__ == "__main__":
    main()
