"""What ``uamp bench`` prints: the live progress, the summary table, a comparison.

Tables are rich tables (plain text when the output is not a terminal). The
progress bar goes to stderr and only when stderr is a terminal, so a
redirected run prints the summary alone.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from typing import Any, TextIO

import trio
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .stats import Sample, Summary

#: A generator that used this much of a CPU over its run is likely the bottleneck.
BUSY = 0.85

__all__ = ["COMPARED", "LiveProgress", "compare_table", "print_compare", "print_summary"]

#: What ``--compare`` sets side by side: (label, JSON path, whether higher is better).
COMPARED: tuple[tuple[str, tuple[str, ...], bool], ...] = (
    ("requests/s", ("requests_per_s",), True),
    ("deltas/s", ("deltas_per_s",), True),
    ("errors", ("errors",), False),
    *(
        (f"{label} {q} (ms)", (key, q), False)
        for label, key in (("TTFD", "ttfd_ms"), ("ITL", "itl_ms"), ("E2E", "e2e_ms"))
        for q in ("p50", "p90", "p99", "mean")
    ),
    ("goodput/s", ("goodput_per_s",), True),
)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


def summary_table(summary: Summary) -> Table:
    """The end-of-run table."""
    data = summary.to_json()
    table = Table(title=f"uamp bench: {data.get('url', '')} ({data.get('transport', '')})")
    table.add_column("metric")
    columns = ("p50", "p90", "p95", "p99", "p99.9", "mean")
    for column in columns:
        table.add_column(column, justify="right")
    rows = [
        ("time to first delta (ms)", "ttfd_ms"),
        ("inter-delta latency (ms)", "itl_ms"),
        ("time per output delta (ms)", "tpot_ms"),
        ("end-to-end latency (ms)", "e2e_ms"),
    ]
    if "ttfd_raw_ms" in data:  # an open loop: the rows above count from the scheduled start
        rows += [
            ("time to first delta from send (ms)", "ttfd_raw_ms"),
            ("end-to-end from send (ms)", "e2e_raw_ms"),
        ]
    for label, key in rows:
        dist = data.get(key) or {}
        table.add_row(label, *(_ms(dist.get(q)) for q in columns))
    return table


def print_summary(summary: Summary, out: TextIO) -> None:
    """Print the totals, the latency table and the errors by kind."""
    console = Console(file=out, highlight=False)
    d = summary.to_json()
    console.print(
        f"requests {d['requests']} (ok {d['ok']}, errors {d['errors']}) in "
        f"{d['duration_s']:.2f} s, concurrency {d.get('concurrency', '-')}\n"
        f"requests/s {d['requests_per_s']:,.2f}   deltas/s {d['deltas_per_s']:,.2f}   "
        f"deltas {d['deltas']}   bytes {d['bytes']:,}"
    )
    if d.get("load") == "open":
        rate = d.get("rate")
        asked = "ramp " + "/".join(f"{r:g}" for r in rate) if isinstance(rate, list) else rate
        console.print(
            f"open loop: rate {asked} req/s ({d.get('arrival')}), sent {d['sent_per_s']:,.2f}"
            " req/s; latencies count from each request's scheduled start"
        )
    busy = [c for c in d.get("generator_cpu", ()) if c >= BUSY]
    if busy:
        console.print(
            f"warning: a load generator used {max(busy):.0%} of a CPU: it may be the "
            "bottleneck, not the server (try --processes N)"
        )
    if d.get("warmup_requests"):
        console.print(f"warm-up: {d['warmup_requests']} requests left out")
    if "good" in d:
        slo = " ".join(f"{k}:{v:g}ms" for k, v in d["slo_ms"].items())
        console.print(
            f"goodput ({slo}): {d['good']} of {d['ok']} ok requests, {d['goodput_per_s']:,.2f}/s"
        )
    calls = d.get("tool_calls")
    if calls:
        console.print(
            f"tool calls: {calls['met']} of {calls['expected']} requests called every tool "
            "their dataset line expected"
        )
    console.print(summary_table(summary))
    for step in d.get("steps", ()):
        e2e = step["e2e_ms"]
        console.print(
            f"  step {step['rate']:g} req/s: {step['ok']}/{step['requests']} ok, e2e p50 "
            f"{_ms(e2e['p50'])} p99 {_ms(e2e['p99'])} ms"
        )
    if d["errors_by_kind"]:
        errors = Table(title="errors by kind")
        errors.add_column("kind")
        errors.add_column("count", justify="right")
        for kind, count in d["errors_by_kind"].items():
            errors.add_row(kind, str(count))
        console.print(errors)


def _lookup(data: Mapping[str, Any], path: tuple[str, ...]) -> float | None:
    value: Any = data
    for key in path:
        if not isinstance(value, Mapping) or key not in value:
            return None
        value = value[key]
    return float(value) if isinstance(value, int | float) else None


def compare_table(a: Mapping[str, Any], b: Mapping[str, Any], names: tuple[str, str]) -> Table:
    """``a`` and ``b`` side by side with ``b / a`` for each compared figure."""
    table = Table(title=f"{names[0]} (a) vs {names[1]} (b)")
    table.add_column("metric")
    table.add_column("a", justify="right")
    table.add_column("b", justify="right")
    table.add_column("b/a", justify="right")
    table.add_column("better")
    for label, path, higher in COMPARED:
        va, vb = _lookup(a, path), _lookup(b, path)
        ratio = "-" if va is None or vb is None or va == 0 else f"{vb / va:.2f}x"
        better = "-"
        if va is not None and vb is not None and va != vb:
            better = "b" if (vb > va) == higher else "a"
        table.add_row(label, _ms(va), _ms(vb), ratio, better)
    return table


def print_compare(
    a: Mapping[str, Any], b: Mapping[str, Any], names: tuple[str, str], out: TextIO
) -> None:
    """Print :func:`compare_table`."""
    Console(file=out, highlight=False, width=max(100, Console(file=out).width)).print(
        compare_table(a, b, names)
    )


class LiveProgress:
    """A rich progress bar on stderr: done, current rate over the last seconds, errors.

    Use as a context manager; :meth:`add` takes each finished sample.
    """

    WINDOW = 2.0

    def __init__(self, total: int | None, duration: float | None, out: TextIO) -> None:
        self._duration = duration
        self._recent: collections.deque[float] = collections.deque()
        self._errors = 0
        self._done = 0
        self._progress = Progress(
            TextColumn("[bold]bench"),
            BarColumn(),
            TextColumn("{task.fields[done]} done"),
            TextColumn("{task.fields[rate]:>8.1f} req/s"),
            TextColumn("[red]{task.fields[errors]} errors"),
            TimeElapsedColumn(),
            console=Console(file=out),
            transient=True,
        )
        self._task = self._progress.add_task(
            "bench", total=duration if duration is not None else total, done=0, rate=0.0, errors=0
        )
        self._begin = trio.current_time()

    def __enter__(self) -> LiveProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def add(self, sample: Sample) -> None:
        """Count one finished request."""
        now = trio.current_time()
        self._done += 1
        self._errors += sample.error is not None
        self._recent.append(now)
        while self._recent and self._recent[0] < now - self.WINDOW:
            self._recent.popleft()
        span = min(self.WINDOW, now - self._begin) or self.WINDOW
        completed = now - self._begin if self._duration is not None else self._done
        self._progress.update(
            self._task,
            completed=completed,
            done=self._done,
            rate=len(self._recent) / span,
            errors=self._errors,
        )
