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
  that started it (:data:`~uamp_trio.observe.requests.CURRENT`). The turn
  driver counts the runs it drives itself (its ``emit`` counts the deltas)
  and calls the agent inside without the wrapper's frame;
* every charge the host opens is wrapped, so what is settled adds to
  ``uamp_charged_total`` by agent and currency.

Open connections and live sessions are read when scraped, from the servers
and session hosts registered with :meth:`Metrics.watch_server` and
:meth:`Metrics.watch_sessions`.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable, Iterable
from typing import Any

import prometheus_client
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    Gauge,
    generate_latest,
)

from uamp_proto.metering import InstrumentMeter, MeteredAgent, MeteredCharge
from uamp_proto.payment import Charge
from uamp_proto.plain_instruments import CounterSeries, HistogramSeries
from uamp_proto.responder import Responder

from ..engines.http import Request, Response
from .requests import CURRENT, Exchange

__all__ = ["METRICS_PATH", "UNKNOWN_AGENT", "MeteredAgent", "Metrics"]

#: Where the app serves the metrics.
METRICS_PATH = "/metrics"
#: The agent label of requests to an agent the server does not host.
UNKNOWN_AGENT = "(unknown)"


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


def _transport() -> str:
    """The transport of the request being served (``-`` outside one)."""
    exchange = CURRENT.get()
    return exchange.transport if exchange is not None else "-"


class Metrics(InstrumentMeter):
    """The server's Prometheus instruments; see the module docstring."""

    def __init__(self) -> None:
        self.create_instruments(prometheus_client)
        r = self.registry
        self.live_sessions = Gauge(
            "uamp_live_sessions", "UAMP sessions open (WebSocket and HTTP+SSE).", registry=r
        )
        self._servers: list[Callable[[], int]] = []
        self.open_connections = Gauge(
            "uamp_open_connections", "Client connections open.", registry=r
        )
        self.open_connections.set_function(lambda: sum(count() for count in self._servers))
        self.open_streams_by = _Children(self.open_streams)
        #: A finished request's counter and histogram series, by transport,
        #: agent label and status (all of them bounded: the agent label is a
        #: hosted agent's name or UNKNOWN_AGENT), looked up once per request.
        self._per_request: dict[tuple[str, str, int], tuple[CounterSeries, HistogramSeries]] = {}
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
        key = (exchange.transport, agent, status)
        series = self._per_request.get(key)
        if series is None:
            series = self._per_request[key] = (
                self.requests.labels(exchange.transport, agent, str(status)),
                self.duration.labels(exchange.transport, agent),
            )
        count, duration = series
        count.value += 1  # (plain numbers, exported when scraped)
        seconds = exchange.duration
        duration.counts[bisect_left(duration.bounds, seconds)] += 1
        duration.sum += seconds
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
        return MeteredAgent(agent, self, transport=_transport, clock=time.perf_counter)

    def wrap_charge(self, charge: Charge, agent: str) -> Charge:
        """``charge``, what it settles counted in ``uamp_charged_total``."""
        return MeteredCharge(charge, agent, self.charged_to)

    # --- what it serves ----------------------------------------------------------------

    async def endpoint(self, request: Request) -> Response:
        """``GET /metrics``: every instrument in the Prometheus text format."""
        return Response(
            status=200,
            headers=[("content-type", CONTENT_TYPE_LATEST)],
            body=generate_latest(self.registry),
        )
