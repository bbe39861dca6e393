"""Keep ``concurrency`` requests in flight until the budget is spent.

A closed-loop load (oha's and h2load's default): ``concurrency`` workers,
each sending its next request as soon as the last one ended. The budget is
either a number of requests (shared by the workers) or a duration: no
request starts after it, and requests still running ``timeout`` seconds past
it are cut off and counted as ``aborted``. Each request also has its own
``timeout``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import trio

from .config import BenchConfig
from .drivers import Send, open_driver
from .stats import Sample, Summary, summarize

__all__ = ["run_bench"]


async def run_bench(
    config: BenchConfig, *, on_sample: Callable[[Sample], None] | None = None
) -> tuple[Summary, list[Sample]]:
    """Run the benchmark ``config`` describes; its summary and every sample.

    ``on_sample`` is called as each request ends (the progress display).
    """
    samples: list[Sample] = []
    started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    issued = 0
    begin = trio.current_time()
    deadline = None if config.duration is None else begin + config.duration

    def may_start() -> bool:
        nonlocal issued
        if deadline is not None:
            return trio.current_time() < deadline
        assert config.requests is not None
        if issued >= config.requests:
            return False
        issued += 1
        return True

    async def one(send: Send) -> None:
        sample = Sample(start=trio.current_time())
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

    async with open_driver(config) as driver:

        async def worker() -> None:
            async with driver.worker() as send:
                while may_start():
                    await one(send)

        workers = config.concurrency
        if config.requests is not None and deadline is None:
            workers = min(workers, config.requests)
        with trio.CancelScope() as limit:
            if deadline is not None:
                limit.deadline = deadline + config.timeout
            async with trio.open_nursery() as nursery:
                for _ in range(workers):
                    nursery.start_soon(worker)
        endpoint = driver.endpoint
        protocols = sorted(driver.protocols)
    duration = trio.current_time() - begin
    summary = summarize(
        samples,
        duration,
        transport=config.transport,
        url=endpoint,
        concurrency=config.concurrency,
        stream=config.stream,
        http2=config.http2,
        protocols=protocols,
        started_at=started_at,
    )
    return summary, samples
