"""Agents and charges that report what they do to a meter: the servers' metrics, loop-free.

Both servers (``uamp serve``'s :mod:`uamp_trio.observe.metrics`, the ASGI
app's :mod:`uamp_asgi.metrics`) wrap every hosted agent in a
:class:`MeteredAgent` and every charge in a :class:`MeteredCharge`; what is
counted where (Prometheus instruments) is theirs, behind :class:`RunMeter`.
The clock and the current request's transport are injected: this module
reads neither.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from . import events as ev
from . import types as ty
from .payment import Charge
from .responder import Emit, Responder, TurnRequest

__all__ = ["InstrumentMeter", "MeteredAgent", "MeteredCharge", "RunMeter", "WrappedAgent"]


class WrappedAgent:
    """An agent around another: same name and capabilities, every other attribute read through.

    Subclasses define ``respond``; registries, agent cards and pricing
    lookups see the wrapped agent's attributes (``description``, ``pricing``...).
    """

    def __init__(self, agent: Responder) -> None:
        self.agent = agent

    @property
    def name(self) -> str:
        """The wrapped agent's name."""
        return self.agent.name

    def capabilities(self) -> ty.Capabilities:
        """The wrapped agent's capabilities."""
        return self.agent.capabilities()

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.agent, attr)


class RunMeter(Protocol):
    """What a :class:`MeteredAgent` reports (labels: transport, agent)."""

    def run_started(self, agent: str) -> None:
        """A run began."""

    def run_ended(self, agent: str) -> None:
        """A run ended, however."""

    def saw_first_delta(self, transport: str, agent: str, seconds: float) -> None:
        """A run's first ``response.delta`` came ``seconds`` after it began."""

    def sent_deltas(self, transport: str, agent: str, count: int) -> None:
        """A run sent ``count`` deltas (reported once it ended)."""

    def run_failed(self, transport: str, agent: str, code: str) -> None:
        """A run raised (``code``: the error's, else ``internal_error``)."""


#: Seconds; time to first delta is short, whole requests (streams) can be long.
FIRST_DELTA_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class InstrumentMeter:
    """Both servers' Prometheus instruments (one registry each), and a :class:`RunMeter` over them.

    :meth:`create_instruments` is given the ``prometheus_client`` module (an
    optional dependency this package does not import) and makes the
    instruments the servers share, under their published names.
    """

    registry: Any
    requests: Any
    errors: Any
    duration: Any
    first_delta: Any
    deltas: Any
    charged: Any
    open_streams: Any
    live_responses: Any
    _children: dict[tuple[Any, tuple[str, ...]], Any]
    _live: dict[str, int]

    def create_instruments(self, prometheus: Any) -> None:
        """A registry of its own (two apps never share counters), and the instruments."""
        prometheus.disable_created_metrics()  # creation times say nothing
        self._children = {}
        self._live = {}
        self.registry = r = prometheus.CollectorRegistry(auto_describe=True)
        counter, gauge, histogram = prometheus.Counter, prometheus.Gauge, prometheus.Histogram
        by = ["transport", "agent"]
        self.requests = counter(
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
        self.duration = histogram(
            "uamp_request_duration_seconds",
            "Seconds from a request's arrival to the end of its response (streams included).",
            by,
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.first_delta = histogram(
            "uamp_time_to_first_delta_seconds",
            "Seconds from the start of an agent run to its first response.delta.",
            by,
            buckets=FIRST_DELTA_BUCKETS,
            registry=r,
        )
        self.deltas = counter(
            "uamp_deltas", "response.delta events sent by agents.", by, registry=r
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

    def _child(self, metric: Any, *labels: str) -> Any:
        """``metric.labels(*labels)``, looked up once: every label here is bounded (a
        hosted agent's name, a transport), and a lookup per run cost as much as its
        update."""
        key = (metric, labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def run_started(self, agent: str) -> None:
        """A run began.

        The runs in progress are counted in a plain dictionary that the
        gauge reads when scraped: a gauge's own ``inc`` and ``dec`` take a
        lock each, twice per run.
        """
        live = self._live
        count = live.get(agent)
        if count is None:
            count = 0
            self.live_responses.labels(agent).set_function(lambda: live[agent])
        live[agent] = count + 1

    def run_ended(self, agent: str) -> None:
        """A run ended."""
        self._live[agent] -= 1

    def saw_first_delta(self, transport: str, agent: str, seconds: float) -> None:
        """A run's first delta."""
        self._child(self.first_delta, transport, agent).observe(seconds)

    def sent_deltas(self, transport: str, agent: str, count: int) -> None:
        """A run's deltas."""
        self._child(self.deltas, transport, agent).inc(count)

    def run_failed(self, transport: str, agent: str, code: str) -> None:
        """A run raised."""
        self.errors.labels(transport, agent, code).inc()

    def charged_to(self, agent: str, currency: str, amount: float) -> None:
        """A settled charge (:class:`MeteredCharge`'s ``charged``)."""
        self.charged.labels(agent, currency).inc(amount)


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

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        """Run the agent, counting its deltas and timing the first."""
        meter, agent, transport = self._meter, self.agent.name, self._transport()
        began = self._clock()
        deltas = 0

        async def counted(event: ev.Event) -> None:
            nonlocal deltas
            if type(event) is ev.ResponseDelta:
                if not deltas:
                    meter.saw_first_delta(transport, agent, self._clock() - began)
                deltas += 1
            await emit(event)

        meter.run_started(agent)
        try:
            await self.agent.respond(request, counted)
        except Exception as exc:
            meter.run_failed(transport, agent, str(getattr(exc, "code", None) or "internal_error"))
            raise
        finally:
            meter.run_ended(agent)
            if deltas:
                meter.sent_deltas(transport, agent, deltas)


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
