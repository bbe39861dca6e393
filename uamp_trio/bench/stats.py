"""From timed samples to the summary ``uamp bench`` prints and saves.

Percentiles interpolate linearly between the two nearest ranks (numpy's
default, which vLLM's serving benchmark and llmperf report), so the figures
line up with theirs. Times inside a run are seconds on one monotonic clock;
the summary speaks milliseconds.

The measures, for successful requests:

* ``ttfd`` -- time to first delta: request sent to the first piece of
  content (a non-empty ``delta.content`` chunk; the whole body when not
  streamed);
* ``itl`` -- inter-delta latency: the gaps between consecutive deltas of one
  response, all responses pooled;
* ``e2e`` -- request sent to the end of the response.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

import attrs

__all__ = ["SCHEMA_VERSION", "Sample", "Summary", "distribution", "percentile", "summarize"]

#: Bumped when a field of :meth:`Summary.to_json` changes meaning.
SCHEMA_VERSION = 1


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


def distribution(values: Sequence[float], scale: float = 1000.0) -> dict[str, float | None]:
    """``{"p50", "p90", "p99", "mean"}`` of ``values`` times ``scale`` (None when empty)."""
    if not values:
        return {"p50": None, "p90": None, "p99": None, "mean": None}
    ordered = sorted(values)
    return {
        "p50": percentile(ordered, 50) * scale,
        "p90": percentile(ordered, 90) * scale,
        "p99": percentile(ordered, 99) * scale,
        "mean": math.fsum(ordered) / len(ordered) * scale,
    }


@attrs.define
class Sample:
    """One request: when it started and ended, when its deltas came, what went wrong.

    Attributes:
        start: When the request was sent (seconds, the run's clock).
        end: When the response ended, or the request failed.
        deltas: When each delta arrived.
        bytes: Response body bytes received.
        error: The kind of failure (``http_429``, ``timeout``, ``connect`` ...), or None.
        text: The characters of content received.
    """

    start: float
    end: float = 0.0
    deltas: list[float] = attrs.field(factory=list)
    bytes: int = 0
    error: str | None = None
    text: int = 0


@attrs.frozen
class Summary:
    """The figures of one run; :meth:`to_json` is what ``--json`` writes."""

    requests: int
    ok: int
    errors: int
    errors_by_kind: dict[str, int]
    duration_s: float
    deltas: int
    bytes: int
    ttfd: tuple[float, ...]
    itl: tuple[float, ...]
    e2e: tuple[float, ...]
    meta: dict[str, Any] = attrs.field(factory=dict)

    @property
    def requests_per_s(self) -> float:
        """Successful requests per second of the run."""
        return self.ok / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def deltas_per_s(self) -> float:
        """Deltas of successful requests per second of the run."""
        return self.deltas / self.duration_s if self.duration_s > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        """The machine-readable summary (latencies in milliseconds)."""
        return {
            "schema": SCHEMA_VERSION,
            **self.meta,
            "requests": self.requests,
            "ok": self.ok,
            "errors": self.errors,
            "errors_by_kind": dict(sorted(self.errors_by_kind.items())),
            "duration_s": self.duration_s,
            "requests_per_s": self.requests_per_s,
            "deltas": self.deltas,
            "deltas_per_s": self.deltas_per_s,
            "bytes": self.bytes,
            "bytes_per_s": self.bytes / self.duration_s if self.duration_s > 0 else 0.0,
            "ttfd_ms": distribution(self.ttfd),
            "itl_ms": distribution(self.itl),
            "e2e_ms": distribution(self.e2e),
        }


def summarize(samples: Sequence[Sample], duration_s: float, **meta: Any) -> Summary:
    """The :class:`Summary` of a run's samples; ``meta`` goes into the JSON as is."""
    ok = [s for s in samples if s.error is None]
    kinds = Counter(s.error for s in samples if s.error is not None)
    itl = [b - a for s in ok for a, b in zip(s.deltas, s.deltas[1:], strict=False)]
    return Summary(
        requests=len(samples),
        ok=len(ok),
        errors=len(samples) - len(ok),
        errors_by_kind={str(k): v for k, v in kinds.items()},
        duration_s=duration_s,
        deltas=sum(len(s.deltas) for s in ok),
        bytes=sum(s.bytes for s in samples),
        ttfd=tuple(s.deltas[0] - s.start for s in ok if s.deltas),
        itl=tuple(itl),
        e2e=tuple(s.end - s.start for s in ok),
        meta=meta,
    )
