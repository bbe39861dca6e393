"""``--plot FILE.png``: a latency CDF and throughput over time (matplotlib, the ``bench`` extra)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from .stats import Sample

__all__ = ["bin_width", "check_plot", "plot"]


#: Bins of the throughput chart: at least this many, each a whole second once
#: the run is long enough (a sub-second run gets bins of a few milliseconds).
MIN_BINS = 20


def check_plot(path: str | Path) -> None:
    """Fail before a run whose ``--plot`` could not be drawn (checks no more than that).

    Raises:
        ValueError: matplotlib is missing, or the file's directory does not exist.
    """
    try:
        import matplotlib  # noqa: F401 - imported again to draw
    except ImportError as exc:
        raise ValueError(
            f"--plot needs matplotlib ({exc}): pip install matplotlib (or the bench extra: "
            "pip install 'uamp[bench]')"
        ) from None
    folder = Path(path).resolve().parent
    if not folder.is_dir():
        raise ValueError(f"--plot {path}: the directory {folder} does not exist")


def bin_width(span: float) -> float:
    """Seconds per throughput bin for a run lasting ``span`` seconds."""
    if span >= MIN_BINS:
        return 1.0
    return max(span, 0.001) / MIN_BINS


def _rates(times: Sequence[float], origin: float, width: float, bins: int) -> list[float]:
    """Events per second in each bin of ``width`` seconds from ``origin``."""
    counts = [0] * bins
    for t in times:
        index = int((t - origin) / width)
        if 0 <= index < bins:
            counts[index] += 1
        elif index == bins:  # the very last instant belongs to the last bin
            counts[-1] += 1
    return [count / width for count in counts]


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
    span = max((s.end for s in samples), default=origin) - origin
    width = bin_width(span)
    bins = max(1, math.ceil(span / width))
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
    # Steps over bin edges: each bin's rate is drawn across its whole width,
    # so even a run of one bin shows a level line, never a lone point.
    edges = [i * width for i in range(bins + 1)]

    def draw(values: list[float], **style: str) -> None:
        rate.stairs(values, edges, **style)

    draw(_rates([s.end for s in ok], origin, width, bins), label="requests/s")
    draw(_rates([t for s in ok for t in s.deltas], origin, width, bins), label="deltas/s")
    errors = _rates([s.end for s in samples if s.error is not None], origin, width, bins)
    if any(errors):
        draw(errors, label="errors/s", color="red")
    rate.set_xlim(0, edges[-1])
    rate.set_ylim(bottom=0)
    rate.set_xlabel(
        "seconds into the run" + (f" ({width * 1000:.3g} ms bins)" if width < 1 else "")
    )
    rate.set_title("throughput over time")
    rate.grid(alpha=0.3)
    rate.legend()
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
