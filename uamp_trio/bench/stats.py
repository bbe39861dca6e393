"""From timed samples to the summary ``uamp bench`` prints and saves.

Percentiles come from HDR histograms (:mod:`.hdr`: within 0.1 % of the
exact order statistic; without the ``hdrhistogram`` package, exact and
linearly interpolated between ranks as numpy's default does). Times inside a
run are seconds on one monotonic clock; the summary speaks milliseconds.

The measures, for successful requests:

* ``ttfd`` -- time to first delta: request sent to the first piece of
  content (a non-empty ``delta.content`` chunk; the whole body when not
  streamed);
* ``itl`` -- inter-delta latency: the gaps between consecutive deltas of one
  response, all responses pooled;
* ``e2e`` -- request sent to the end of the response;
* ``tpot`` -- time per output delta: ``(e2e - ttfd) / (deltas - 1)`` of each
  response with two deltas or more.

In an open-loop run (``--rate``) a request has a *scheduled* start as well as
the moment it was sent; ``ttfd`` and ``e2e`` count from the scheduled start
(corrected for coordinated omission, :mod:`.arrivals`) and ``ttfd_raw`` /
``e2e_raw`` from the send. In a closed loop both are the same and only the
first are reported. Requests of the warm-up are left out of every figure.
*Goodput* is the rate of successful requests that met every SLO given
(``--goodput ttft:MS tpot:MS e2e:MS``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import attrs

from .hdr import HDR, QUANTILES, Distribution, percentile

__all__ = [
    "MEASURES",
    "QUANTILES",
    "SCHEMA_VERSION",
    "Sample",
    "Summary",
    "distribution",
    "meets",
    "percentile",
    "summarize",
]

#: Bumped when a field of :meth:`Summary.to_json` changes meaning (2: p95, p99.9, tpot,
#: the open loop's raw latencies, goodput, warm-up; 3: percentiles from HDR histograms,
#: ``percentiles`` says which).
SCHEMA_VERSION = 3

#: The distributions of a summary, by their JSON name.
MEASURES = ("ttfd_ms", "itl_ms", "e2e_ms", "tpot_ms", "ttfd_raw_ms", "e2e_raw_ms")


def distribution(values: Sequence[float], scale: float = 1000.0) -> dict[str, float | None]:
    """``{"p50", "p90", "p95", "p99", "p99.9", "mean"}`` of ``values`` times ``scale``.

    Every figure is ``None`` when there are no values.
    """
    return Distribution(values).summary(scale)


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
    #: When an open loop scheduled it (``None`` in a closed loop: it is ``start``).
    scheduled: float | None = None
    #: Part of the warm-up: left out of the figures.
    warmup: bool = False
    #: The conversation it was a turn of (its id), and which turn (0 first).
    conversation: str | None = None
    turn: int | None = None
    #: The names of the tools the agent called during it, in order.
    tool_calls: list[str] = attrs.field(factory=list)
    #: Which generator process sent it (``--processes``; 0 with one).
    process: int = 0
    #: The prompt's words, and the output length it asked for (``--output-len``).
    prompt_words: int | None = None
    output_asked: int | None = None
    #: The tools the dataset expected the agent to call during it (``None``: none said).
    tools_expected: list[str] | None = None

    @property
    def tool_ok(self) -> bool | None:
        """Whether every expected tool was called (``None`` without an expectation)."""
        if self.tools_expected is None:
            return None
        return self.error is None and set(self.tools_expected) <= set(self.tool_calls)

    @property
    def origin(self) -> float:
        """Where its latencies count from: the scheduled start if any, else the send."""
        return self.start if self.scheduled is None else self.scheduled

    def tpot(self) -> float | None:
        """Seconds per output delta after the first (``None`` with fewer than two)."""
        if len(self.deltas) < 2:
            return None
        return (self.end - self.deltas[0]) / (len(self.deltas) - 1)

    def record(self) -> dict[str, Any]:
        """One line of ``--save-requests`` (times in seconds on the run's clock)."""
        return {
            "scheduled": self.scheduled,
            "start": self.start,
            "end": self.end,
            "ttfd": self.deltas[0] - self.origin if self.deltas else None,
            "e2e": self.end - self.origin,
            "deltas": len(self.deltas),
            "bytes": self.bytes,
            "chars": self.text,
            "error": self.error,
            "warmup": self.warmup,
            "conversation": self.conversation,
            "turn": self.turn,
            "tool_calls": list(self.tool_calls),
            "process": self.process,
            "prompt_words": self.prompt_words,
            "output_asked": self.output_asked,
            "tools_expected": self.tools_expected,
            "tool_ok": self.tool_ok,
        }


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
    tpot: tuple[float, ...] = ()
    #: An open loop's latencies from the send (``None`` in a closed loop).
    ttfd_raw: tuple[float, ...] | None = None
    e2e_raw: tuple[float, ...] | None = None
    #: Successful requests that met every SLO (``None`` without ``--goodput``).
    good: int | None = None
    #: The SLOs, in milliseconds, by name (``ttft``, ``tpot``, ``e2e``).
    slo_ms: dict[str, float] = attrs.field(factory=dict)
    #: Requests of the warm-up, left out of every other figure.
    warmup: int = 0
    #: Distributions merged from several processes (by :data:`MEASURES` name),
    #: used instead of the values above for the percentiles.
    merged: dict[str, Distribution] | None = None
    #: Requests with expected tool calls, and those that made every one (``--dataset``).
    tools_expected: int = 0
    tools_met: int = 0

    def distributions(self) -> dict[str, Distribution]:
        """Each measure's distribution (an open loop's raw ones too), by JSON name."""
        if self.merged is not None:
            return dict(self.merged)
        values: dict[str, tuple[float, ...] | None] = {
            "ttfd_ms": self.ttfd,
            "itl_ms": self.itl,
            "e2e_ms": self.e2e,
            "tpot_ms": self.tpot,
            "ttfd_raw_ms": self.ttfd_raw,
            "e2e_raw_ms": self.e2e_raw,
        }
        return {name: Distribution(v) for name, v in values.items() if v is not None}

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
        dists = {name: d.summary() for name, d in self.distributions().items()}
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
            **dists,
            "percentiles": "hdr" if HDR else "exact",
            "warmup_requests": self.warmup,
            **(
                {}
                if self.good is None
                else {
                    "slo_ms": dict(self.slo_ms),
                    "good": self.good,
                    "goodput_per_s": self.good / self.duration_s if self.duration_s > 0 else 0.0,
                }
            ),
            **(
                {"tool_calls": {"expected": self.tools_expected, "met": self.tools_met}}
                if self.tools_expected
                else {}
            ),
        }


def meets(sample: Sample, slo: dict[str, float]) -> bool:
    """Whether a successful ``sample`` met every SLO (seconds by ``ttft``, ``tpot``, ``e2e``)."""
    limit = slo.get("ttft")
    if limit is not None and (not sample.deltas or sample.deltas[0] - sample.origin > limit):
        return False
    limit = slo.get("tpot")
    tpot = sample.tpot()
    if limit is not None and tpot is not None and tpot > limit:
        return False
    limit = slo.get("e2e")
    return limit is None or sample.end - sample.origin <= limit


def summarize(
    samples: Sequence[Sample],
    duration_s: float,
    *,
    slo: dict[str, float] | None = None,
    merged: dict[str, Distribution] | None = None,
    **meta: Any,
) -> Summary:
    """The :class:`Summary` of a run's samples; ``meta`` goes into the JSON as is.

    ``slo``: seconds by ``ttft``/``tpot``/``e2e`` for the goodput (none: no goodput);
    ``merged``: the distributions of several processes, added (``--processes``).
    """
    warm = sum(1 for s in samples if s.warmup)
    if warm:
        samples = [s for s in samples if not s.warmup]
    ok = [s for s in samples if s.error is None]
    kinds = Counter(s.error for s in samples if s.error is not None)
    itl = [b - a for s in ok for a, b in zip(s.deltas, s.deltas[1:], strict=False)]
    open_loop = any(s.scheduled is not None for s in samples)
    tpots = [t for t in (s.tpot() for s in ok) if t is not None]
    return Summary(
        requests=len(samples),
        ok=len(ok),
        errors=len(samples) - len(ok),
        errors_by_kind={str(k): v for k, v in kinds.items()},
        duration_s=duration_s,
        deltas=sum(len(s.deltas) for s in ok),
        bytes=sum(s.bytes for s in samples),
        ttfd=tuple(s.deltas[0] - s.origin for s in ok if s.deltas),
        itl=tuple(itl),
        e2e=tuple(s.end - s.origin for s in ok),
        meta=meta,
        tpot=tuple(tpots),
        ttfd_raw=tuple(s.deltas[0] - s.start for s in ok if s.deltas) if open_loop else None,
        e2e_raw=tuple(s.end - s.start for s in ok) if open_loop else None,
        good=None if not slo else sum(1 for s in ok if meets(s, slo)),
        slo_ms={k: v * 1000 for k, v in (slo or {}).items()},
        warmup=warm,
        merged=merged,
        tools_expected=sum(1 for s in samples if s.tools_expected is not None),
        tools_met=sum(1 for s in samples if s.tool_ok),
    )
