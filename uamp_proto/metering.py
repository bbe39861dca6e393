"""Agents and charges that report what they do to a meter: the servers' metrics, loop-free.

Both servers (``uamp serve``'s :mod:`uamp_trio.observe.metrics`, the ASGI
app's :mod:`uamp_asgi.metrics`) wrap every hosted agent in a
:class:`MeteredAgent` and every charge in a :class:`MeteredCharge`; what is
counted where (Prometheus instruments) is theirs, behind :class:`RunMeter`.
The clock and the current request's transport are injected: this module
reads neither.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from . import events as ev
from . import types as ty
from .payment import Charge
from .plain_instruments import CounterSeries, HistogramSeries, PlainCounter, PlainHistogram
from .responder import Emit, Responder, TurnRequest

__all__ = [
    "InstrumentMeter",
    "LiveRuns",
    "MeteredAgent",
    "MeteredCharge",
    "MeteredRun",
    "RunMeter",
    "RunSeries",
    "WrappedAgent",
]


class WrappedAgent:
    """An agent around another: same name and capabilities, every other attribute read through.

    Subclasses define ``respond``; registries, agent cards and pricing
    lookups see the wrapped agent's attributes (``description``, ``pricing``...).
    """

    def __init__(self, agent: Responder) -> None:
        self.agent = agent
        #: The wrapped agent's name (an attribute: read several times per request).
        self.name = agent.name

    @property
    def pricing(self) -> Any:
        """The wrapped agent's ``pricing``, ``None`` when it declares none.

        Read on every request's payment pre-flight: through
        :meth:`__getattr__` an agent without one cost an ``AttributeError``
        raised and caught each time.
        """
        return getattr(self.agent, "pricing", None)

    def capabilities(self) -> ty.Capabilities:
        """The wrapped agent's capabilities."""
        return self.agent.capabilities()

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.agent, attr)


class RunSeries:
    """What a :class:`MeteredAgent` updates for the runs of one agent on one transport.

    Plain numbers, updated inline by the run (no call per update): ``live``
    the agent's runs in progress (shared by its transports), ``first_delta``
    the time to first delta, ``deltas`` the deltas sent; the last two are
    made at the first delta (:meth:`delta_series`), so an agent that never
    sent one on a transport has no series there, as before.
    """

    __slots__ = ("_make", "deltas", "first_delta", "live")

    def __init__(
        self, live: LiveRuns, make: Callable[[], tuple[HistogramSeries, CounterSeries]]
    ) -> None:
        self.live = live
        self._make = make
        self.first_delta: HistogramSeries | None = None
        self.deltas: CounterSeries | None = None

    def delta_series(self) -> tuple[HistogramSeries, CounterSeries]:
        """The time-to-first-delta and delta count series (made on first use)."""
        first, deltas = self.first_delta, self.deltas
        if first is None or deltas is None:
            first, deltas = self.first_delta, self.deltas = self._make()
        return first, deltas


class LiveRuns:
    """An agent's runs in progress (read by its gauge when scraped)."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


class RunMeter(Protocol):
    """What a :class:`MeteredAgent` reports to (labels: transport, agent)."""

    def run_series(self, transport: str, agent: str) -> RunSeries:
        """The series a run of ``agent`` on ``transport`` updates."""

    def run_failed(self, transport: str, agent: str, code: str) -> None:
        """A run raised (``code``: the error's, else ``internal_error``)."""


#: Seconds; time to first delta is short, whole requests (streams) can be long.
FIRST_DELTA_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class InstrumentMeter:
    """Both servers' Prometheus instruments (one registry each), and a :class:`RunMeter` over them.

    :meth:`create_instruments` is given the ``prometheus_client`` module (an
    optional dependency this package does not import) and makes the
    instruments the servers share, under their published names. What every
    request or run updates (``requests``, ``duration``, ``first_delta``,
    ``deltas``) is kept in plain numbers and exported when scraped
    (:mod:`~uamp_proto.plain_instruments`); the rest are
    ``prometheus_client``'s own.
    """

    registry: Any
    requests: PlainCounter
    errors: Any
    duration: PlainHistogram
    first_delta: PlainHistogram
    deltas: PlainCounter
    charged: Any
    open_streams: Any
    live_responses: Any
    _runs: dict[tuple[str, str], RunSeries]
    _live: dict[str, LiveRuns]

    def create_instruments(self, prometheus: Any) -> None:
        """A registry of its own (two apps never share counters), and the instruments."""
        prometheus.disable_created_metrics()  # creation times say nothing
        self._runs = {}
        self._live = {}
        self.registry = r = prometheus.CollectorRegistry(auto_describe=True)
        counter, gauge = prometheus.Counter, prometheus.Gauge
        by = ["transport", "agent"]
        self.requests = PlainCounter(
            prometheus,
            "uamp_requests",
            "Requests answered, by transport, agent and HTTP status.",
            [*by, "status"],
            registry=r,
        )
        self.errors = counter(
            "uamp_errors",
            "Errors, by transport, agent and code: HTTP error statuses and failed agent runs.",
            [*by, "code"],
            registry=r,
        )
        self.duration = PlainHistogram(
            prometheus,
            "uamp_request_duration_seconds",
            "Seconds from a request's arrival to the end of its response (streams included).",
            by,
            registry=r,
            buckets=DURATION_BUCKETS,
        )
        self.first_delta = PlainHistogram(
            prometheus,
            "uamp_time_to_first_delta_seconds",
            "Seconds from the start of an agent run to its first response.delta.",
            by,
            registry=r,
            buckets=FIRST_DELTA_BUCKETS,
        )
        self.deltas = PlainCounter(
            prometheus, "uamp_deltas", "response.delta events sent by agents.", by, registry=r
        )
        self.charged = counter(
            "uamp_charged", "Amounts charged to payment tokens.", ["agent", "currency"], registry=r
        )
        self.open_streams = gauge(
            "uamp_open_streams", "Streams and WebSockets in progress.", ["transport"], registry=r
        )
        self.live_responses = gauge(
            "uamp_live_responses", "Agent runs in progress.", ["agent"], registry=r
        )

    def run_series(self, transport: str, agent: str) -> RunSeries:
        """The series of ``agent``'s runs on ``transport`` (made on first use).

        The runs in progress are counted in a plain number that the gauge
        reads when scraped: a gauge's own ``inc`` and ``dec`` take a lock
        each, twice per run.
        """
        series = self._runs.get((transport, agent))
        if series is None:
            labels = (transport, agent)
            series = self._runs[labels] = RunSeries(
                self._live_runs(agent),
                lambda: (self.first_delta.labels(*labels), self.deltas.labels(*labels)),
            )
        return series

    def _live_runs(self, agent: str) -> LiveRuns:
        live = self._live.get(agent)
        if live is None:
            live = self._live[agent] = LiveRuns()
            self.live_responses.labels(agent).set_function(lambda: live.count)
        return live

    def run_started(self, agent: str) -> None:
        """A run began (what :class:`MeteredAgent` does inline)."""
        self._live_runs(agent).count += 1

    def run_ended(self, agent: str) -> None:
        """A run ended."""
        self._live_runs(agent).count -= 1

    def saw_first_delta(self, transport: str, agent: str, seconds: float) -> None:
        """A run's first delta."""
        self.run_series(transport, agent).delta_series()[0].observe(seconds)

    def sent_deltas(self, transport: str, agent: str, count: int) -> None:
        """A run's deltas."""
        self.run_series(transport, agent).delta_series()[1].inc(count)

    def run_failed(self, transport: str, agent: str, code: str) -> None:
        """A run raised."""
        self.errors.labels(transport, agent, code).inc()

    def charged_to(self, agent: str, currency: str, amount: float) -> None:
        """A settled charge (:class:`MeteredCharge`'s ``charged``)."""
        self.charged.labels(agent, currency).inc(amount)


class MeteredRun:
    """One run of a :class:`MeteredAgent` being counted (:meth:`MeteredAgent.start_run`).

    Whoever drives the run calls :meth:`delta` for each ``response.delta``
    the agent emits and :meth:`end` once it is over, however it ended: the
    turn driver does so itself for a metered agent it runs (no wrapper
    frame per run, no call per event other than a delta's), and
    :meth:`MeteredAgent.respond` for any other caller.
    """

    __slots__ = ("_agent", "_began", "_series", "_transport", "deltas")

    def __init__(
        self, agent: MeteredAgent, series: RunSeries, transport: str, began: float
    ) -> None:
        self._agent = agent
        self._series = series
        self._transport = transport
        self._began = began
        #: The deltas counted so far.
        self.deltas = 0

    def delta(self) -> None:
        """The agent emitted a ``response.delta`` (the first one is timed)."""
        if not self.deltas:
            seconds = self._agent._clock() - self._began
            series = self._series
            first = series.first_delta or series.delta_series()[0]
            first.counts[bisect_left(first.bounds, seconds)] += 1
            first.sum += seconds
        self.deltas += 1

    def end(self, error: BaseException | None) -> None:
        """The run is over; ``error``: what the agent raised (an ``Exception`` counts as failed)."""
        series = self._series
        series.live.count -= 1
        if self.deltas:
            (series.deltas or series.delta_series()[1]).value += self.deltas
        if isinstance(error, Exception):
            code = str(getattr(error, "code", None) or "internal_error")
            self._agent._meter.run_failed(self._transport, self._agent.name, code)


class MeteredAgent(WrappedAgent):
    """A hosted agent whose runs are reported to ``meter``.

    Args:
        transport: The transport of the request being served (read when a run starts).
        clock: Seconds, monotonic.
    """

    def __init__(
        self,
        agent: Responder,
        meter: RunMeter,
        *,
        transport: Callable[[], str],
        clock: Callable[[], float],
    ) -> None:
        super().__init__(agent)
        self._meter = meter
        self._transport = transport
        self._clock = clock
        #: The meter's series of this agent's runs, by transport (a handful).
        self._series: dict[str, RunSeries] = {}

    def start_run(self) -> MeteredRun:
        """Count a run starting now; the caller runs :attr:`agent` and reports to the result."""
        transport = self._transport()
        series = self._series.get(transport)
        if series is None:
            series = self._series[transport] = self._meter.run_series(transport, self.name)
        series.live.count += 1
        return MeteredRun(self, series, transport, self._clock())

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        """Run the agent, counting its deltas and timing the first."""
        run = self.start_run()

        # Not a coroutine of its own: it counts, then hands back emit's
        # awaitable for the agent to await.
        def counted(event: ev.Event) -> Awaitable[None]:
            if type(event) is ev.ResponseDelta:
                run.delta()
            return emit(event)

        error: BaseException | None = None
        try:
            await self.agent.respond(request, counted)
        except Exception as exc:
            error = exc
            raise
        finally:
            run.end(error)
            error = None  # (a caught error's traceback would hold this frame)


class MeteredCharge:
    """A charge whose settled amount is reported: ``charged(agent, currency, amount)``."""

    def __init__(
        self, charge: Charge, agent: str, charged: Callable[[str, str, float], None]
    ) -> None:
        self.inner = charge
        self.agent = agent
        self._charged = charged

    async def settle(self, usage: ty.UsageStats | None, *, used: bool) -> ev.PaymentBalance | None:
        """Settle, then report what was charged (when the charge knows its pricing)."""
        balance = await self.inner.settle(usage, used=used)
        pricing = getattr(self.inner, "pricing", None)
        if balance is not None and pricing is not None:
            cost = pricing.cost(usage, used=used)
            self._charged(self.agent, pricing.currency, float(cost))
        return balance

    async def extend(self, token: str | None, amount: str) -> None:
        """Lock more for the response."""
        await self.inner.extend(token, amount)
