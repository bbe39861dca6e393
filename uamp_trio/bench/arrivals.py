"""When an open-loop run starts its requests: rates, ramps and arrival processes.

Theory of operation. A closed loop (``--concurrency`` alone) sends a request
when another ends, so a server that stalls also stalls the load and the stall
hides in the percentiles (coordinated omission). An open loop decides every
start time in advance from a rate and an arrival process, and a request
starts on schedule whatever the server does; its latency is counted from its
*scheduled* start (the *corrected* latency; the *raw* one, from when it was
actually sent, is reported beside it).

* ``--rate R``: R requests per second; ``--rate START:END:STEP`` ramps in
  steps of ``START`` requests per second, each held for ``STEP`` (a
  duration), from ``START`` up to ``END`` -- ``10:100:10s`` is 10, 20, ... 100
  per second, ten seconds each: the knee is the step where the latency
  starts to climb.
* ``--arrival``: ``constant`` gaps of exactly ``1 / R``; ``poisson``
  (exponential gaps of mean ``1 / R``); ``gamma`` with shape
  ``--burstiness B`` and the same mean (``B < 1`` bursty, ``B = 1`` Poisson,
  ``B > 1`` more even), as vLLM's serving benchmark defines it.

Pure: the random source is given, no clock is read.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator

import attrs

from ..units import parse_duration

__all__ = ["ARRIVALS", "RatePlan", "arrival_offsets", "parse_rate"]

#: The arrival processes ``--arrival`` accepts.
ARRIVALS = ("poisson", "constant", "gamma")


@attrs.frozen
class RatePlan:
    """Requests per second over time: ``rates[k]`` during step ``k`` of ``step_s`` seconds.

    A constant rate is one step that lasts for ever (``step_s`` infinite).
    """

    rates: tuple[float, ...]
    step_s: float = math.inf

    @property
    def total_s(self) -> float:
        """How long the plan lasts (infinite for a constant rate)."""
        return self.step_s * len(self.rates)

    def rate_at(self, offset: float) -> float:
        """The rate ``offset`` seconds into the run (the last step's after the plan)."""
        return self.rates[self.step_of(offset)]

    def step_of(self, offset: float) -> int:
        """Which step ``offset`` falls in."""
        if math.isinf(self.step_s):
            return 0
        return min(int(offset // self.step_s), len(self.rates) - 1)


def parse_rate(text: str) -> RatePlan:
    """``R`` or ``START:END:STEP`` (see the module docstring).

    Raises:
        ValueError: Not a positive rate, or a ramp whose end is below its start.
    """
    parts = text.split(":")
    if len(parts) == 1:
        rate = _positive(parts[0])
        return RatePlan((rate,))
    if len(parts) != 3:
        raise ValueError(f"--rate is R or START:END:STEP (e.g. 10:100:10s), not {text!r}")
    start, end = _positive(parts[0]), _positive(parts[1])
    step = parse_duration(parts[2])
    if end < start:
        raise ValueError(f"--rate {text}: the end rate is below the start rate")
    if step <= 0:
        raise ValueError(f"--rate {text}: the step must last more than 0 s")
    steps = math.floor(end / start + 1e-9)
    return RatePlan(tuple(start * (k + 1) for k in range(steps)), step)


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"not a rate in requests per second: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"a rate must be a positive number of requests per second: {text!r}")
    return value


def arrival_offsets(
    plan: RatePlan, arrival: str, rng: random.Random, *, burstiness: float = 1.0
) -> Iterator[float]:
    """Start offsets (seconds from the run's start), ascending, for as long as one asks.

    A step plan ends with its last step; a constant plan never ends (the
    caller stops at its budget).

    Raises:
        ValueError: An unknown ``arrival`` or a burstiness that is not positive.
    """
    if arrival not in ARRIVALS:
        raise ValueError(f"unknown arrival {arrival!r}: one of {', '.join(ARRIVALS)}")
    if not burstiness > 0:
        raise ValueError("--burstiness must be positive")
    offset = 0.0
    while offset < plan.total_s:
        rate = plan.rate_at(offset)
        mean = 1.0 / rate
        if arrival == "constant":
            gap = mean
        elif arrival == "poisson":
            gap = rng.expovariate(rate)
        else:
            gap = rng.gammavariate(burstiness, mean / burstiness)
        yield offset
        offset += gap
