"""``GET /metrics``: the server's counters in the Prometheus text format.

Theory of operation
-------------------
One :class:`Metrics` holds its own ``prometheus_client`` registry (two apps
in one process never share counters) and is fed from three places, all set
up by the composition root only when metrics are on:

* it is an :class:`~uamp_trio.observe.requests.Observe` listener: every
  finished request counts in ``uamp_requests_total`` and
  ``uamp_request_duration_seconds`` (an error status also in
  ``uamp_errors_total``), and streams in flight (streaming responses and
  WebSockets) in ``uamp_open_streams``;
* every hosted agent is wrapped in a :class:`MeteredAgent`, which counts the
  runs in progress (``uamp_live_responses``), the ``response.delta`` events
  the agent emits (``uamp_deltas_total``), the time from the start of the
  run to its first delta (``uamp_time_to_first_delta_seconds``) and failed
  runs by their error code; the transport of a run is the one of the request
  that started it (:data:`~uamp_trio.observe.requests.CURRENT`);
* every charge the host opens is wrapped, so what is settled adds to
  ``uamp_charged_total`` by agent and currency.

Open connections and live sessions are read when scraped, from the servers
and session hosts registered with :meth:`Metrics.watch_server` and
:meth:`Metrics.watch_sessions`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.payment import Charge
from uamp_proto.responder import Emit, Responder, TurnRequest

from ..engines.http import Request, Response
from ..hosting.agents import WrappedAgent
from .requests import CURRENT, Exchange

__all__ = ["METRICS_PATH", "UNKNOWN_AGENT", "MeteredAgent", "Metrics"]

#: Where the app serves the metrics.
METRICS_PATH = "/metrics"
#: The agent label of requests to an agent the server does not host.
UNKNOWN_AGENT = "(unknown)"

# Seconds; time to first delta is short, whole requests (streams) can be long.
_FIRST_DELTA_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
_DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class _Children:
    """A labelled instrument's children by label values, each looked up in the instrument once.

    ``labels()`` takes the instrument's lock and checks its arguments on
    every call, five times per plain request; the instrument keeps every
    child it made anyway, so keeping them here as well costs no more memory.
    """

    def __init__(self, metric: Any) -> None:
        self._metric = metric
        self._children: dict[tuple[str, ...], Any] = {}

    def labels(self, *values: str) -> Any:
        """The child for ``values``."""
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self._metric.labels(*values)
        return child


class Metrics:
    """The server's Prometheus instruments; see the module docstring."""

    def __init__(self) -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]  # creation times say nothing
        self.registry = r = CollectorRegistry(auto_describe=True)
        by_request = ["transport", "agent"]
        self.requests = Counter(
            "uamp_requests",
            "Requests answered, by transport, agent and HTTP status.",
            [*by_request, "status"],
            registry=r,
        )
        self.errors = Counter(
            "uamp_errors",
            "Errors, by transport, agent and code: HTTP error statuses and failed agent runs.",
            [*by_request, "code"],
            registry=r,
        )
        self.duration = Histogram(
            "uamp_request_duration_seconds",
            "Seconds from a request's arrival to the end of its response (streams included).",
            by_request,
            buckets=_DURATION_BUCKETS,
            registry=r,
        )
        self.first_delta = Histogram(
            "uamp_time_to_first_delta_seconds",
            "Seconds from the start of an agent run to its first response.delta.",
            by_request,
            buckets=_FIRST_DELTA_BUCKETS,
            registry=r,
        )
        self.deltas = Counter(
            "uamp_deltas", "response.delta events sent by agents.", by_request, registry=r
        )
        self.charged = Counter(
            "uamp_charged", "Amounts charged to payment tokens.", ["agent", "currency"], registry=r
        )
        self.open_streams = Gauge(
            "uamp_open_streams", "Streams and WebSockets in progress.", ["transport"], registry=r
        )
        self.live_responses = Gauge(
            "uamp_live_responses", "Agent runs in progress.", ["agent"], registry=r
        )
        self.live_sessions = Gauge(
            "uamp_live_sessions", "UAMP sessions open (WebSocket and HTTP+SSE).", registry=r
        )
        self._servers: list[Callable[[], int]] = []
        self.open_connections = Gauge(
            "uamp_open_connections", "Client connections open.", registry=r
        )
        self.open_connections.set_function(lambda: sum(count() for count in self._servers))
        # What every request counts, by its label values.
        self.requests_by = _Children(self.requests)
        self.duration_by = _Children(self.duration)
        self.first_delta_by = _Children(self.first_delta)
        self.deltas_by = _Children(self.deltas)
        self.live_responses_by = _Children(self.live_responses)
        self.open_streams_by = _Children(self.open_streams)
        #: Names of the hosted agents (:meth:`wrap_agent`).
        self._agents: set[str] = set()

    # --- what feeds it ---------------------------------------------------------------

    def watch_server(self, server: Any) -> None:
        """Count ``server``'s open connections (anything with ``connection_count``)."""
        self._servers.append(lambda: int(server.connection_count))

    def watch_sessions(self, hosts: Iterable[Any]) -> None:
        """Count the sessions of ``hosts`` (live, each with ``session_count``) when scraped."""
        self.live_sessions.set_function(lambda: sum(h.session_count for h in list(hosts)))

    def finished(self, exchange: Exchange) -> None:
        """Count a finished request (an :class:`Observe` listener).

        The agent label is a hosted agent's name or :data:`UNKNOWN_AGENT`:
        the name in a request's path is the client's to choose, and a label
        per name a client made up would grow the metrics without bound.
        """
        status = exchange.status
        agent = exchange.agent
        if agent not in self._agents and agent != "-":
            agent = UNKNOWN_AGENT
        self.requests_by.labels(exchange.transport, agent, str(status)).inc()
        self.duration_by.labels(exchange.transport, agent).observe(exchange.duration)
        if status >= 400:
            code = exchange.error or str(status)
            self.errors.labels(exchange.transport, agent, code).inc()

    def stream_opened(self, exchange: Exchange) -> None:
        """A stream starts."""
        self.open_streams_by.labels(exchange.transport).inc()

    def stream_closed(self, exchange: Exchange) -> None:
        """A stream ended."""
        self.open_streams_by.labels(exchange.transport).dec()

    def wrap_agent(self, agent: Responder) -> Responder:
        """``agent``, its runs counted (and its name a label of the request counts)."""
        self._agents.add(agent.name)
        return MeteredAgent(agent, self)

    def wrap_charge(self, charge: Charge, agent: str) -> Charge:
        """``charge``, what it settles counted in ``uamp_charged_total``."""
        return _MeteredCharge(charge, agent, self)

    # --- what it serves ----------------------------------------------------------------

    async def endpoint(self, request: Request) -> Response:
        """``GET /metrics``: every instrument in the Prometheus text format."""
        return Response(
            status=200,
            headers=[("content-type", CONTENT_TYPE_LATEST)],
            body=generate_latest(self.registry),
        )


class MeteredAgent(WrappedAgent):
    """A hosted agent whose runs feed :class:`Metrics`."""

    def __init__(self, agent: Responder, metrics: Metrics) -> None:
        super().__init__(agent)
        self._metrics = metrics

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        """Run the agent, counting its deltas and timing the first."""
        metrics = self._metrics
        exchange = CURRENT.get()
        transport = exchange.transport if exchange is not None else "-"
        agent = self.agent.name
        began = time.perf_counter()
        deltas = 0

        async def counted(event: ev.Event) -> None:
            nonlocal deltas
            if type(event) is ev.ResponseDelta:
                if not deltas:
                    metrics.first_delta_by.labels(transport, agent).observe(
                        time.perf_counter() - began
                    )
                deltas += 1
            await emit(event)

        live = metrics.live_responses_by.labels(agent)
        live.inc()
        try:
            await self.agent.respond(request, counted)
        except Exception as exc:
            code = getattr(exc, "code", None)
            metrics.errors.labels(transport, agent, str(code or "internal_error")).inc()
            raise
        finally:
            live.dec()
            if deltas:
                metrics.deltas_by.labels(transport, agent).inc(deltas)


class _MeteredCharge:
    """A charge whose settled amount is counted."""

    def __init__(self, charge: Charge, agent: str, metrics: Metrics) -> None:
        self.inner = charge
        self.agent = agent
        self.metrics = metrics

    async def settle(self, usage: ty.UsageStats | None, *, used: bool) -> ev.PaymentBalance | None:
        """Settle, then count what was charged (when the charge knows its pricing)."""
        balance = await self.inner.settle(usage, used=used)
        pricing = getattr(self.inner, "pricing", None)
        if balance is not None and pricing is not None:
            cost = pricing.cost(usage, used=used)
            self.metrics.charged.labels(self.agent, pricing.currency).inc(float(cost))
        return balance

    async def extend(self, token: str | None, amount: str) -> None:
        """Lock more for the response."""
        await self.inner.extend(token, amount)
