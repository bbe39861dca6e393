"""Run the load: a closed loop of ``concurrency`` workers, or an open loop at a rate.

*Closed loop* (oha's and h2load's default, and what runs without ``--rate``):
``concurrency`` workers, each sending its next request as soon as the last
one ended. *Open loop* (``--rate``, :mod:`.arrivals`): every request's start is
scheduled in advance and it starts on time whatever the server does; its
latency counts from that scheduled time. ``concurrency`` then caps what is in
flight: a request that finds every connection busy waits for one, and the
wait is part of its latency (that is the point of the correction).

The budget is a number of requests or a duration (no request starts, or is
scheduled, after it; requests still running ``timeout`` seconds past it are
cut off and counted as ``aborted``); a ramp (``--rate START:END:STEP``) lasts
its steps. The warm-up (``--warmup N`` requests or a duration) runs first, on
the same connections, and is left out of the figures. Each request also has
its own ``timeout``.
"""

from __future__ import annotations

import datetime as dt
import math
import random
from collections.abc import Callable, Iterator
from contextlib import AsyncExitStack
from typing import Any

import trio

from .arrivals import RatePlan, arrival_offsets
from .config import BenchConfig
from .drivers import Driver, Send
from .driving import open_driver
from .stats import Sample, Summary, distribution, summarize

__all__ = ["run_bench"]


async def _one(
    config: BenchConfig, send: Send, sample: Sample, samples: list[Sample], on_sample: Any
) -> None:
    try:
        with trio.move_on_after(config.timeout) as scope:
            await send(sample)
        if scope.cancelled_caught:
            sample.error = "timeout"
            sample.end = trio.current_time()
    except trio.Cancelled:
        sample.error = "aborted"
        sample.end = trio.current_time()
        raise
    finally:
        samples.append(sample)
        if on_sample is not None:
            on_sample(sample)


async def run_bench(
    config: BenchConfig, *, on_sample: Callable[[Sample], None] | None = None
) -> tuple[Summary, list[Sample]]:
    """Run the benchmark ``config`` describes; its summary and every sample.

    ``on_sample`` is called as each request ends (the progress display).
    """
    samples: list[Sample] = []
    released: list[tuple[float, float]] = []
    started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    begin = trio.current_time()
    async with open_driver(config) as driver:
        with trio.CancelScope() as limit:
            if config.rate is None:
                await _closed_loop(config, driver, samples, on_sample, begin, limit)
            else:
                begin = await _open_loop(config, driver, samples, on_sample, begin, limit, released)
        endpoint = driver.endpoint
        protocols = sorted(driver.protocols)
    end = trio.current_time()
    measured = [s for s in samples if not s.warmup]
    warm = config.warmup_requests or config.warmup_s
    since = min((s.origin for s in measured), default=begin) if warm else begin
    meta: dict[str, Any] = {
        "transport": config.transport,
        "url": endpoint,
        "concurrency": config.concurrency,
        "stream": config.stream,
        "http2": config.http2,
        "protocols": protocols,
        "started_at": started_at,
        "load": "closed" if config.rate is None else "open",
    }
    if config.rate is not None:
        meta.update(_open_loop_meta(config, config.rate, measured, begin, released))
    summary = summarize(samples, end - since, slo=config.slo or None, **meta)
    return summary, samples


async def _closed_loop(
    config: BenchConfig,
    driver: Driver,
    samples: list[Sample],
    on_sample: Callable[[Sample], None] | None,
    begin: float,
    limit: trio.CancelScope,
) -> None:
    warm_n, warm_s = config.warmup_requests, config.warmup_s
    begin = trio.current_time()  # the driver is open: the budget starts now
    deadline = None if config.duration is None else begin + warm_s + config.duration
    issued = 0

    def may_start() -> bool:
        nonlocal issued
        if deadline is not None:
            return trio.current_time() < deadline
        assert config.requests is not None
        if issued >= config.requests + warm_n:
            return False
        issued += 1
        return True

    started = 0

    async def worker() -> None:
        nonlocal started
        async with driver.worker() as send:
            while may_start():
                now = trio.current_time()
                started += 1
                sample = Sample(start=now, warmup=started <= warm_n or now < begin + warm_s)
                await _one(config, send, sample, samples, on_sample)

    workers = config.concurrency
    if config.requests is not None and deadline is None:
        workers = min(workers, config.requests + warm_n)
    if deadline is not None:
        limit.deadline = deadline + config.timeout
    async with trio.open_nursery() as nursery:
        for _ in range(workers):
            nursery.start_soon(worker)


async def _open_loop(
    config: BenchConfig,
    driver: Driver,
    samples: list[Sample],
    on_sample: Callable[[Sample], None] | None,
    begin: float,
    limit: trio.CancelScope,
    released: list[tuple[float, float]],
) -> float:
    """Start requests on schedule; ``released`` gets (scheduled, actual) of each start.

    Returns the schedule's origin (its offset 0 on the run's clock).
    """
    plan = config.rate
    assert plan is not None
    rng = random.Random(config.seed)
    warm_n, warm_s = config.warmup_requests, config.warmup_s

    def schedule() -> Iterator[float]:
        """The warm-up's arrivals at the first rate, then the plan's, after it."""
        burst = config.burstiness
        if warm_s > 0:
            first = RatePlan((plan.rates[0],))
            for offset in arrival_offsets(first, config.arrival, rng, burstiness=burst):
                if offset >= warm_s:
                    break
                yield offset
        for offset in arrival_offsets(plan, config.arrival, rng, burstiness=burst):
            yield warm_s + offset

    duration = config.duration
    if duration is None and config.requests is None:
        duration = plan.total_s
    stop_at = math.inf if duration is None else warm_s + duration
    total = math.inf if config.requests is None else config.requests + warm_n
    free_send, free = trio.open_memory_channel[Send](config.concurrency)
    origin = begin

    async def request(index: int, scheduled: float) -> None:
        sample = Sample(start=scheduled, scheduled=scheduled)
        sample.warmup = index < warm_n or scheduled < origin + warm_s
        send = await free.receive()  # every connection busy: wait (counted)
        try:
            sample.start = trio.current_time()
            await _one(config, send, sample, samples, on_sample)
        finally:
            free_send.send_nowait(send)

    async with AsyncExitStack() as connections, trio.open_nursery() as nursery:
        for _ in range(config.concurrency):
            free_send.send_nowait(await connections.enter_async_context(driver.worker()))
        # The schedule starts once the connections are set up: its first request
        # is not late by their setup, which no figure measures.
        origin = trio.current_time()
        if math.isfinite(stop_at):
            limit.deadline = origin + stop_at + config.timeout
        for index, offset in enumerate(schedule()):
            if index >= total or offset >= stop_at:
                break
            await trio.sleep_until(origin + offset)
            if offset >= warm_s and index >= warm_n:
                released.append((origin + offset, trio.current_time()))
            nursery.start_soon(request, index, origin + offset)
    return origin


def _open_loop_meta(
    config: BenchConfig,
    plan: RatePlan,
    measured: list[Sample],
    begin: float,
    released: list[tuple[float, float]],
) -> dict[str, Any]:
    """The open loop's own figures: the rate asked for and sent, lateness, each ramp step.

    ``sent_per_s`` is the rate at which the generator actually started requests
    (past the warm-up) and ``late_ms`` how far behind its schedule it fell at
    worst: a generator that falls behind measures itself, not the server.
    """
    times = [actual for _, actual in released]
    sent = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else 0.0
    late = max((actual - planned for planned, actual in released), default=0.0)
    meta: dict[str, Any] = {
        "rate": list(plan.rates) if len(plan.rates) > 1 else plan.rates[0],
        "arrival": config.arrival,
        "sent_per_s": sent,
        "late_ms": late * 1000,
    }
    if config.arrival == "gamma":
        meta["burstiness"] = config.burstiness
    if len(plan.rates) > 1:
        steps = []
        for k, rate in enumerate(plan.rates):
            inside = [
                s
                for s in measured
                if s.scheduled is not None
                and plan.step_of(s.scheduled - begin - config.warmup_s) == k
            ]
            ok = [s for s in inside if s.error is None]
            steps.append(
                {
                    "rate": rate,
                    "requests": len(inside),
                    "ok": len(ok),
                    "e2e_ms": distribution([s.end - s.origin for s in ok]),
                    "ttfd_ms": distribution([s.deltas[0] - s.origin for s in ok if s.deltas]),
                }
            )
        meta["steps"] = steps
    return meta
