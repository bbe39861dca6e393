"""Latency distributions in HDR histograms (the ``hdrhistogram`` package, ``uamp[bench]``).

Theory of operation. Each latency measure of a run (time to first delta,
inter-delta latency, end-to-end ...) is recorded into an HdrHistogram in
whole microseconds, from 1 µs to an hour, with 3 significant digits: every
value is kept to within 0.1 % of itself in a fixed few dozen kilobytes,
however long the run. Percentiles are read from the histogram (HdrHistogram's
rule: the highest value equivalent to the one at rank ``round(q * n)``), so
they are within the histogram's precision of the exact order statistics; the
mean is exact (the sum is kept beside the counts). Histograms add exactly:
``--processes N`` merges the histograms its processes send, and the result is
the histogram of all their values.

Without the ``hdrhistogram`` package (a base install) :class:`Distribution`
keeps the values themselves and interpolates linearly between ranks (numpy's
default); :data:`HDR` says which, and the summary reports it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["HDR", "QUANTILES", "Distribution", "label", "percentile"]

try:
    from hdrh.histogram import HdrHistogram
except ImportError:  # pragma: no cover - the base install
    HdrHistogram = None

#: Whether percentiles come from HDR histograms (else from the exact values).
HDR = HdrHistogram is not None

#: The percentiles of every distribution.
QUANTILES = (50.0, 90.0, 95.0, 99.0, 99.9)

#: Values are recorded in microseconds, from 1 µs to an hour, to 3 significant digits.
_UNIT = 1_000_000
_HIGHEST = 3600 * _UNIT
_DIGITS = 3


def label(q: float) -> str:
    """``p50``, ``p99.9`` ..."""
    return f"p{q:g}"


def percentile(ordered: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of ascending ``ordered``, linearly interpolated.

    Raises:
        ValueError: ``ordered`` is empty or ``q`` is outside 0..100.
    """
    if not ordered:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} outside 0..100")
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    fraction = rank - low
    return ordered[low] + (ordered[high] - ordered[low]) * fraction


class Distribution:
    """One measure's values (seconds): recorded, merged, read as percentiles and a mean."""

    def __init__(self, values: Iterable[float] = (), *, hdr: bool = HDR) -> None:
        self.hdr = hdr
        self.count = 0
        self.total = 0.0
        self._values: list[float] = []
        self._histogram: Any = HdrHistogram(1, _HIGHEST, _DIGITS) if hdr else None
        for value in values:
            self.record(value)

    def record(self, seconds: float) -> None:
        """Add one value."""
        self.count += 1
        self.total += seconds
        if self._histogram is None:
            self._values.append(seconds)
        else:
            self._histogram.record_value(min(max(0, round(seconds * _UNIT)), _HIGHEST))

    def add(self, other: Distribution) -> None:
        """Add every value of ``other`` (an exact merge)."""
        if self.hdr != other.hdr:
            raise ValueError("cannot merge an HDR distribution with an exact one")
        self.count += other.count
        self.total += other.total
        if self._histogram is None:
            self._values.extend(other._values)
        else:
            self._histogram.add(other._histogram)

    def summary(self, scale: float = 1000.0) -> dict[str, float | None]:
        """The percentiles and the mean times ``scale`` (each ``None`` with no values)."""
        if not self.count:
            return {**{label(q): None for q in QUANTILES}, "mean": None}
        out: dict[str, float | None] = {}
        if self._histogram is None:
            ordered = sorted(self._values)
            out = {label(q): percentile(ordered, q) * scale for q in QUANTILES}
        else:
            found = self._histogram.get_percentile_to_value_dict(list(QUANTILES))
            out = {label(q): found[q] / _UNIT * scale for q in QUANTILES}
        out["mean"] = self.total / self.count * scale
        return out

    def encode(self) -> dict[str, Any]:
        """A JSON-able form, for :meth:`decode` in another process."""
        if self._histogram is None:
            return {"values": list(self._values)}
        histogram = self._histogram.encode().decode() if self.count else None
        return {"count": self.count, "total": self.total, "hdr": histogram}

    @classmethod
    def decode(cls, data: dict[str, Any]) -> Distribution:
        """The distribution :meth:`encode` gave."""
        if "values" in data:
            return cls(data["values"], hdr=False)
        out = cls(hdr=True)
        out.count, out.total = data["count"], data["total"]
        if data["hdr"] is not None:
            out._histogram.decode_and_add(data["hdr"])
        return out
