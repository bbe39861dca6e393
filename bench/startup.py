"""How fast ``uamp`` starts: wall time per command, and what its imports cost.

Run: ``python bench/startup.py [--runs 5] [--top 12]``

For ``uamp --version``, ``uamp --help``, ``uamp chat --help`` and
``uamp serve --help`` it prints the median wall time of ``--runs`` runs and
the import time Python reports (``python -X importtime``: the sum of the
top-level imports' cumulative microseconds). For ``uamp serve`` it prints
the median wall time from starting the process to the first ``200`` of
``GET /v1/models`` (the banner is not enough: the server must answer), and
the ``--top`` modules by cumulative import time, which is where to look
when it grows. Beside each wall time it prints the CPU time the process used
(user + system, from ``/proc``; for ``serve``, up to its first answer): on a
shared machine the wall time grows with the load, the CPU time much less, so
the CPU time is the figure to compare with the target there (a quiet
machine's wall time is about its CPU time). Targets (issue 32):
``--version``/``--help`` under 0.3 s, ``serve`` to its first answer under
1.5 s, on a quiet 2-core machine --
the figures depend on the machine's load, so this is a benchmark, never a
test.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
UAMP = [sys.executable, "-m", "uamp_trio"]
ENV = {**os.environ, "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}"}
#: The commands that must answer at once, with their target in seconds.
QUICK = [
    (["--version"], 0.3),
    (["--help"], 0.3),
    (["chat", "--help"], None),
    (["serve", "--help"], None),
]
_IMPORT_LINE = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \|( +)(\S+)$")


def import_costs(stderr: str) -> tuple[int, list[tuple[int, str]]]:
    """From ``-X importtime`` output: the total microseconds and (cumulative, module) rows."""
    total = 0
    rows: list[tuple[int, str]] = []
    for line in stderr.splitlines():
        found = _IMPORT_LINE.match(line)
        if found is None:
            continue
        cumulative, indent, name = int(found.group(2)), len(found.group(3)), found.group(4)
        rows.append((cumulative, name))
        if indent == 1:  # a top-level import: its cumulative time covers its children
            total += cumulative
    return total, sorted(rows, reverse=True)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds process ``pid`` has used so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def quick(args: list[str], runs: int) -> tuple[float, float, int]:
    """Median wall and CPU seconds of ``uamp ARGS``, and its import microseconds."""
    walls, cpus = [], []
    for _ in range(runs):
        began = time.perf_counter()
        before = os.times()
        subprocess.run([*UAMP, *args], capture_output=True, env=ENV, check=False)
        walls.append(time.perf_counter() - began)
        after = os.times()
        cpus.append(
            after.children_user
            - before.children_user
            + after.children_system
            - before.children_system
        )
    traced = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "uamp_trio", *args],
        capture_output=True,
        text=True,
        env=ENV,
        check=False,
    )
    return statistics.median(walls), statistics.median(cpus), import_costs(traced.stderr)[0]


def serve_once(importtime: bool) -> tuple[float, float, str]:
    """Wall and CPU seconds from starting ``uamp serve`` to its first answer; its stderr."""
    flags = ["-X", "importtime"] if importtime else []
    began = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, *flags, "-m", "uamp_trio", "serve", "--port", "0", "--no-access-log"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    try:
        assert proc.stdout is not None
        url = None
        for line in proc.stdout:
            found = re.search(r"serving on (http://[\d.]+:\d+)", line)
            if found:
                url = found.group(1)
                break
        if url is None:
            raise SystemExit("uamp serve printed no address")
        while True:
            try:
                if httpx.get(url + "/v1/models", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.01)
        elapsed = time.perf_counter() - began
        cpu = _cpu_seconds(proc.pid)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    return elapsed, cpu, err


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    load = os.getloadavg()[0]
    print(f"load average {load:.1f} on {os.cpu_count()} CPUs")
    print(
        f"{'command':<22} {'wall (median)':>14} {'CPU (median)':>13} {'imports':>10} {'target':>8}"
    )
    for command, target in QUICK:
        wall, cpu, imports = quick(command, args.runs)
        goal = f"{target:.1f} s" if target else "-"
        name = "uamp " + " ".join(command)
        print(
            f"{name:<22} {wall * 1000:>11.0f} ms {cpu * 1000:>10.0f} ms "
            f"{imports / 1000:>7.0f} ms {goal:>8}"
        )
    runs = [serve_once(False) for _ in range(args.runs)]
    traced = serve_once(True)[2]
    total, rows = import_costs(traced)
    print(
        f"{'uamp serve (1st 200)':<22} {statistics.median(r[0] for r in runs) * 1000:>11.0f} ms "
        f"{statistics.median(r[1] for r in runs) * 1000:>10.0f} ms "
        f"{total / 1000:>7.0f} ms {'1.5 s':>8}"
    )
    print(f"\nuamp serve: the {args.top} costliest imports (cumulative ms)")
    for cumulative, name in rows[: args.top]:
        print(f"  {cumulative / 1000:>8.1f}  {name}")


if __name__ == "__main__":
    main()
