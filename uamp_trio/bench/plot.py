"""``--plot FILE.png``: a latency CDF and throughput over time (matplotlib, the ``bench`` extra)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from .stats import Sample

__all__ = ["plot"]


def _per_second(times: Sequence[float], origin: float, seconds: int) -> list[int]:
    bins = [0] * seconds
    for t in times:
        index = int(t - origin)
        if 0 <= index < seconds:
            bins[index] += 1
    return bins


def plot(samples: Sequence[Sample], path: str | Path, title: str = "uamp bench") -> None:
    """Write the two charts of a run's ``samples`` to ``path`` (PNG).

    Raises:
        ImportError: matplotlib is not installed (``pip install 'uamp[bench]'``).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [s for s in samples if s.error is None]
    origin = min((s.start for s in samples), default=0.0)
    seconds = max(1, math.ceil(max((s.end for s in samples), default=origin) - origin))
    figure, (cdf, rate) = plt.subplots(1, 2, figsize=(12, 4.5))
    for label, values in (
        ("time to first delta", [s.deltas[0] - s.start for s in ok if s.deltas]),
        ("end-to-end", [s.end - s.start for s in ok]),
    ):
        ordered = sorted(v * 1000 for v in values)
        if ordered:
            fractions = [(i + 1) / len(ordered) for i in range(len(ordered))]
            cdf.step(ordered, fractions, where="post", label=label)
    cdf.set_xlabel("latency (ms)")
    cdf.set_ylabel("fraction of requests")
    cdf.set_title("latency CDF")
    cdf.grid(alpha=0.3)
    cdf.legend()
    xs = list(range(seconds))
    rate.plot(xs, _per_second([s.end for s in ok], origin, seconds), label="requests/s")
    rate.plot(xs, _per_second([t for s in ok for t in s.deltas], origin, seconds), label="deltas/s")
    errors = _per_second([s.end for s in samples if s.error is not None], origin, seconds)
    if any(errors):
        rate.plot(xs, errors, label="errors/s", color="red")
    rate.set_xlabel("second of the run")
    rate.set_title("throughput over time")
    rate.grid(alpha=0.3)
    rate.legend()
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
