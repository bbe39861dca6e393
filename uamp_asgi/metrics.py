"""``GET /metrics`` of the ASGI app (``Config.metrics``): ``uamp serve``'s counters.

The instruments carry the names, labels and meaning of ``uamp serve``'s
(:mod:`uamp_trio.observe.metrics`, docs/operations.md), so one dashboard
reads either server: ``uamp_requests_total`` and
``uamp_request_duration_seconds`` by transport, agent (and status) for every
request the app answers, WebSockets included (status 101);
``uamp_errors_total`` for error statuses and failed agent runs;
``uamp_open_streams`` (streamed responses and WebSockets in progress);
``uamp_live_responses``, ``uamp_deltas_total`` and
``uamp_time_to_first_delta_seconds`` from every hosted agent, wrapped
(:meth:`Metrics.wrap_agent`); ``uamp_charged_total`` from every charge
settled. Connections are the ASGI server's and not counted here.

The agent label is a hosted agent's name, ``-`` for a request to no agent,
or ``(unknown)``: names in paths are the client's to choose, and a label per
made-up name would grow without bound. Needs ``prometheus-client``.
"""

from __future__ import annotations

import time

import prometheus_client
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    generate_latest,
)

from uamp_proto.metering import InstrumentMeter, MeteredAgent, MeteredCharge
from uamp_proto.payment import Charge
from uamp_proto.responder import Responder

from .http import TRANSPORT

__all__ = ["TRANSPORT", "UNKNOWN_AGENT", "Metrics"]

#: The agent label of requests to an agent the app does not host.
UNKNOWN_AGENT = "(unknown)"


class Metrics(InstrumentMeter):
    """The app's Prometheus instruments, in a registry of their own."""

    def __init__(self) -> None:
        self.create_instruments(prometheus_client)
        self.agents: set[str] = set()

    def agent_label(self, name: str | None) -> str:
        """``name`` if hosted, ``-`` for none, else :data:`UNKNOWN_AGENT`."""
        if name is None:
            return "-"
        return name if name in self.agents else UNKNOWN_AGENT

    def finished(
        self, transport: str, agent: str, status: int, seconds: float, code: str | None
    ) -> None:
        """Count one answered request."""
        self.requests.labels(transport, agent, str(status)).inc()
        self.duration.labels(transport, agent).observe(seconds)
        if status >= 400:
            self.errors.labels(transport, agent, code or str(status)).inc()

    def wrap_agent(self, agent: Responder) -> Responder:
        """``agent``, its runs counted."""
        self.agents.add(agent.name)
        return MeteredAgent(agent, self, transport=TRANSPORT.get, clock=time.perf_counter)

    def wrap_charge(self, charge: Charge, agent: str) -> Charge:
        """``charge``, what it settles counted."""
        return MeteredCharge(charge, agent, self.charged_to)

    def render(self) -> tuple[bytes, str]:
        """The text format and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
