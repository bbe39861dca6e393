"""Labelled counters and histograms in plain numbers, made Prometheus metrics when scraped.

Theory of operation
-------------------
A ``prometheus_client`` counter or histogram takes a lock for every update,
and a histogram observation walks its buckets in Python and takes two: on a
short request the servers' metrics cost as much as a fifth of the request's
own work. These instruments keep each labelled series in a small object of
plain numbers that the caller updates inline (``series.value += 1``,
``series.counts[bisect_left(series.bounds, seconds)] += 1``), and build the
samples only when the registry is collected (a scrape): each instrument is a
collector registered in the registry in its place, with the name, help,
type, labels, bucket bounds and sample values ``prometheus_client``'s own
instrument would have (a differential test holds them to it).

Updates are plain arithmetic without a lock: they are made on the event
loop's thread (the servers update them from the request's task). A scrape
reads them as they are; a count it misses by a moment is in the next one.

The ``prometheus_client`` module is handed in (this package does not
depend on it); series are made on a label combination's first use, as
``labels()`` makes a child.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from typing import Any

__all__ = ["CounterSeries", "HistogramSeries", "PlainCounter", "PlainHistogram"]


class CounterSeries:
    """One labelled series of a :class:`PlainCounter`: ``value`` counts up."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value: float = 0

    def inc(self, amount: float = 1) -> None:
        """Add ``amount`` (never negative: a counter only counts up)."""
        if amount < 0:
            raise ValueError("Counters can only be incremented by non-negative amounts.")
        self.value += amount


class HistogramSeries:
    """One labelled series of a :class:`PlainHistogram`.

    ``counts[i]`` is how many observations fell in bucket ``i`` alone (not
    cumulative): the first bound at or above the value, the last bound being
    infinity, so ``bisect_left(bounds, value)`` is its index.
    """

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * len(bounds)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        """Count ``value``."""
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value


class _Plain:
    """What both instruments share: the name, help, labels and series by label values."""

    _type = ""

    def __init__(
        self,
        prometheus: Any,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        registry: Any,
        buckets: Sequence[float] = (),
    ) -> None:
        """``buckets``: a histogram's upper bounds (``+Inf`` is added)."""
        self._prepare(prometheus, buckets)
        self._metric = prometheus.metrics_core.Metric
        self._name = name
        self._documentation = documentation
        self._labelnames = tuple(labelnames)
        self._series: dict[tuple[Any, ...], Any] = {}
        #: The label values of each series, as exported (strings), in order of first use.
        self._labels: list[tuple[tuple[str, ...], Any]] = []
        registry.register(self)

    def labels(self, *values: Any) -> Any:
        """The series of these label values (made on first use)."""
        series = self._series.get(values)
        if series is None:
            series = self._new_series(values)
        return series

    def _new_series(self, values: tuple[Any, ...]) -> Any:
        if len(values) != len(self._labelnames):
            raise ValueError(f"{self._name}: {len(self._labelnames)} label values expected")
        key = tuple(str(v) for v in values)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = self._make()
            self._labels.append((key, series))
        self._series[values] = series
        return series

    def _prepare(self, prometheus: Any, buckets: Sequence[float]) -> None:
        """What an instrument sets up before its series (the histogram: its bounds)."""

    def _make(self) -> Any:
        raise NotImplementedError

    def describe(self) -> list[Any]:
        """The metric without samples (what the registry checks names with)."""
        return [self._metric(self._name, self._documentation, self._type)]


class PlainCounter(_Plain):
    """A labelled counter (``<name>_total``); see the module docstring."""

    _type = "counter"

    def _make(self) -> CounterSeries:
        return CounterSeries()

    def collect(self) -> list[Any]:
        """The counter with one ``_total`` sample per series."""
        metric = self._metric(self._name, self._documentation, self._type)
        total, names = self._name + "_total", self._labelnames
        for values, series in list(self._labels):
            metric.add_sample(total, dict(zip(names, values, strict=True)), float(series.value))
        return [metric]


class PlainHistogram(_Plain):
    """A labelled histogram (``_bucket``, ``_count``, ``_sum``); see the module docstring."""

    _type = "histogram"

    bounds: tuple[float, ...]

    def _prepare(self, prometheus: Any, buckets: Sequence[float]) -> None:
        bounds = [float(b) for b in buckets]
        if not bounds or bounds[-1] != float("inf"):
            bounds.append(float("inf"))
        self.bounds = tuple(bounds)
        self._le = [prometheus.utils.floatToGoString(b) for b in bounds]

    def _make(self) -> HistogramSeries:
        return HistogramSeries(self.bounds)

    def collect(self) -> list[Any]:
        """The histogram: cumulative buckets, then the count and the sum, per series."""
        metric = self._metric(self._name, self._documentation, self._type)
        name, names, le = self._name, self._labelnames, self._le
        with_sum = self.bounds[0] >= 0
        for values, series in list(self._labels):
            labels = dict(zip(names, values, strict=True))
            counts, acc = list(series.counts), 0.0
            for bound, count in zip(le, counts, strict=True):
                acc += count
                metric.add_sample(name + "_bucket", {**labels, "le": bound}, acc)
            metric.add_sample(name + "_count", labels, acc)
            if with_sum:  # (as prometheus_client: no sum when a bucket is negative)
                metric.add_sample(name + "_sum", labels, series.sum)
        return [metric]
