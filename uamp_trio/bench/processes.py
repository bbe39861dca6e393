"""``uamp bench --processes N``: N load generators, one event loop each, one report.

Theory of operation. One Python process drives a few thousand small
requests per second at most; a multi-worker server outruns it, and then the
benchmark measures its own generator. With ``--processes N`` the run is split
into N parts, each run by :func:`~.runner.run_bench` in a process of its own
(``multiprocessing``'s ``spawn``: no state is inherited): the request budget
and the rate are divided between them (a Poisson process split N ways is N
Poisson processes of a Nth of the rate), the concurrency cap too, each gets
its own seed, and a dataset's conversations are dealt out between them
(:func:`~.workload.share`: disjoint shares drawn from the seed, so no
conversation is split across processes). Each part sends back its
latency distributions (HDR histograms, :mod:`.hdr`) and its samples, their
times moved so that each part starts at 0 (every process has a clock of its
own). The histograms are added into the summary's percentiles (an exact
merge: those of every sample together, not an average of percentiles); the
samples give the counts, the goodput, ``--save-requests`` and ``--plot``.

Every process also reports the CPU time it used; the summary carries the
generators' CPU per second of run (``generator_cpu``), and the report warns
when one of them was busy most of the run: then the generator, not the
server, is likely the bottleneck.
"""

from __future__ import annotations

import math
import multiprocessing
import resource
from typing import Any

import attrs
import trio

from .arrivals import RatePlan
from .config import BenchConfig
from .hdr import Distribution
from .runner import run_bench
from .stats import Sample, Summary, summarize
from .workload import share

__all__ = ["cpu_seconds", "merge", "run_processes", "split"]


def cpu_seconds() -> float:
    """CPU time (user and system) this process has used."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def split(config: BenchConfig, parts: int) -> list[BenchConfig]:
    """``config`` divided into ``parts`` runs that together make the same load."""
    out = []
    for i in range(parts):
        requests = None
        if config.requests is not None:
            requests = config.requests // parts + (1 if i < config.requests % parts else 0)
        rate = None
        if config.rate is not None:
            rate = RatePlan(tuple(r / parts for r in config.rate.rates), config.rate.step_s)
        out.append(
            attrs.evolve(
                config,
                requests=requests,
                rate=rate,
                concurrency=max(1, math.ceil(config.concurrency / parts)),
                seed=None if config.seed is None else config.seed + i,
                warmup_requests=math.ceil(config.warmup_requests / parts),
                dataset=share(config.dataset, parts, i, config.seed) if config.dataset else (),
            )
        )
    return [c for c in out if c.requests is None or c.requests > 0]


_Part = tuple[list[Sample], dict[str, Any], float, float, dict[str, dict[str, Any]]]


def _part(job: tuple[int, BenchConfig]) -> _Part:
    """Process ``index``'s run: its samples (times from its own start), meta, duration, CPU
    and its encoded distributions."""
    index, config = job

    async def run() -> tuple[Summary, list[Sample], float]:
        origin = trio.current_time()
        summary, samples = await run_bench(config)
        return summary, samples, origin

    cpu = cpu_seconds()
    summary, samples, origin = trio.run(run)
    for sample in samples:
        sample.process = index
        sample.start -= origin
        sample.end -= origin
        sample.deltas = [t - origin for t in sample.deltas]
        if sample.scheduled is not None:
            sample.scheduled -= origin
    dists = {name: d.encode() for name, d in summary.distributions().items()}
    return samples, summary.meta, summary.duration_s, cpu_seconds() - cpu, dists


def run_processes(config: BenchConfig, parts: int) -> tuple[Summary, list[Sample]]:
    """Run ``config`` split over ``parts`` processes; the merged summary and samples."""
    configs = split(config, parts)
    context = multiprocessing.get_context("spawn")
    with context.Pool(len(configs)) as pool:
        results = pool.map(_part, list(enumerate(configs)))
    samples = [s for part, *_ in results for s in part]
    metas = [meta for _, meta, *_ in results]
    duration = max(d for _, _, d, *_ in results)
    merged = merge([dists for *_, dists in results])
    meta = dict(metas[0])
    meta["concurrency"] = config.concurrency
    meta["processes"] = len(configs)
    meta["protocols"] = sorted({p for m in metas for p in m.get("protocols", ())})
    if config.rate is not None:
        meta["sent_per_s"] = sum(m.get("sent_per_s", 0.0) for m in metas)
        meta["late_ms"] = max(m.get("late_ms", 0.0) for m in metas)
        rates = config.rate.rates
        meta["rate"] = list(rates) if len(rates) > 1 else rates[0]
        meta.pop("steps", None)  # per-step figures are per process; the merge has none
    meta["generator_cpu"] = [cpu / d if d > 0 else 0.0 for _, _, d, cpu, _ in results]
    summary = summarize(samples, duration, slo=config.slo or None, merged=merged, **meta)
    return summary, samples


def merge(parts: list[dict[str, dict[str, Any]]]) -> dict[str, Distribution]:
    """The processes' encoded distributions, decoded and added by measure."""
    merged: dict[str, Distribution] = {}
    for part in parts:
        for name, encoded in part.items():
            dist = Distribution.decode(encoded)
            if name in merged:
                merged[name].add(dist)
            else:
                merged[name] = dist
    return merged
