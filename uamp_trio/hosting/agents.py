"""The agent registry: the agents a server hosts, by name, and which one a request addresses.

:class:`ServedAgent` is one of them on the terms a connection serves it:
which payment policy charges for it, who signs its answers and the turn
options its turns run on.

See docs/architecture.md.
"""

from __future__ import annotations

import re
from contextvars import ContextVar
from typing import TYPE_CHECKING

import attrs

from uamp_proto.metering import WrappedAgent
from uamp_proto.payment import (
    Charge,
    PaymentPolicy,
    PaymentRequiredError,
    balance_of,
    open_charge,
    pricing_of,
)
from uamp_proto.payment import refusal as _refusal
from uamp_proto.principal import Principal
from uamp_proto.responder import Responder

from ..engines.http import HTTPError
from .turns import DEFAULT_TURN_OPTIONS, TurnOptions

if TYPE_CHECKING:
    from uamp_proto.signing import ResponseSigner

__all__ = [
    "AGENT_OFFLINE",
    "RESOLVED_AGENT",
    "AgentRegistry",
    "ServedAgent",
    "WrappedAgent",
    "unwrapped",
]

#: The agent a request at a root path (``/v1/chat/completions`` on a
#: single-agent server) was resolved to, for that request's access line and
#: metrics (:mod:`uamp_trio.observe.requests` reads it; set in the request's task).
RESOLVED_AGENT: ContextVar[str | None] = ContextVar("uamp_resolved_agent", default=None)


def unwrapped(agent: Responder) -> Responder:
    """The agent inside any :class:`WrappedAgent` layers (what to test ``isinstance`` on)."""
    while isinstance(agent, WrappedAgent):
        agent = agent.agent
    return agent


_AGENT_NAME = re.compile(r"^[A-Za-z0-9_.~-]+$")


#: The code of an agent that is registered but cannot answer now (spec 000 section 6.3).
AGENT_OFFLINE = "agent_offline"

#: UAMP 6.3 lists no "agent not found": a ``session.error`` for an agent that is
#: not hosted carries the spec's ``agent_offline`` ("target agent is
#: unavailable"), the precise code going along as ``details.reason``.
SPEC_SESSION_CODES: dict[str, str] = {"agent_not_found": AGENT_OFFLINE}


class AgentRegistry(dict[str, Responder]):
    """Hosted agents by name (a ``dict``), with the rules for adding and finding one.

    An agent whose name is in :attr:`offline` (a daemon's agent while its
    daemon is away, docs/relay.md) stays listed but is not served: finding
    it answers 503 ``agent_offline``.
    """

    def __init__(self) -> None:
        super().__init__()
        #: Names of agents that are registered but cannot answer now.
        self.offline: set[str] = set()

    def available(self, agent: Responder) -> Responder:
        """``agent`` itself, unless it is offline.

        Raises:
            HTTPError: 503 ``agent_offline``.
        """
        if agent.name in self.offline:
            raise HTTPError(
                503,
                f"Agent {agent.name!r} is offline: its daemon is not connected.",
                code=AGENT_OFFLINE,
            )
        return agent

    def add(self, agent: Responder) -> None:
        """Host ``agent`` under its name.

        Raises:
            ValueError: The name is empty, holds a character that is not
                allowed in one path segment, or is taken.
        """
        name = agent.name
        if not _AGENT_NAME.match(name):
            raise ValueError(f"agent name {name!r} must match {_AGENT_NAME.pattern}")
        if name in self:
            raise ValueError(f"an agent named {name!r} is already hosted")
        self[name] = agent

    def resolve(self, path_params: dict[str, str], *, model: str | None = None) -> Responder:
        """The agent a request addresses.

        Args:
            path_params: The matched route's parameters (``agent`` if present).
            model: A name the request carries (Chat Completions ``model``);
                used at root paths when several agents are hosted.

        Raises:
            HTTPError: 404 ``agent_not_found``.
        """
        name = path_params.get("agent")
        if name is not None:
            agent = self.get(name)
            if agent is None:
                raise HTTPError(
                    404, f"No agent named {name!r} is hosted here.", code="agent_not_found"
                )
            return self.available(agent)
        if model is not None and model in self:
            RESOLVED_AGENT.set(model)
            return self.available(self[model])
        if len(self) == 1:
            RESOLVED_AGENT.set(next(iter(self)))
            return self.available(next(iter(self.values())))
        if not self:
            raise HTTPError(404, "This server hosts no agent.", code="agent_not_found")
        names = ", ".join(sorted(self))
        raise HTTPError(
            404,
            f"This server hosts several agents ({names}); address one under /agents/{{name}}/.",
            code="agent_not_found",
        )


@attrs.frozen
class ServedAgent:
    """An agent on the terms a connection serves it (ACP, Realtime).

    Attributes:
        agent: The agent.
        payment_policy: Consulted before every response (``None``: free).
        signer: Signs the answers (``None``: unsigned).
        turns: What its turns run on (the host's :attr:`Host.turns
            <uamp_trio.hosting.host.Host.turns>`; the defaults on stdio).
    """

    agent: Responder
    payment_policy: PaymentPolicy | None = None
    signer: ResponseSigner | None = None
    turns: TurnOptions = DEFAULT_TURN_OPTIONS

    async def refusal(self, token: str | None) -> PaymentRequiredError | None:
        """Why ``token`` cannot pay for a response now, or ``None`` (locks nothing)."""
        return await _refusal(self.payment_policy, self.agent.name, token, pricing_of(self.agent))

    async def balance(self, token: str | None) -> str | None:
        """What ``token`` has left to spend, where the policy keeps balances."""
        return await balance_of(self.payment_policy, token)

    async def open_charge(
        self, token: str | None, response_id: str, caller: Principal
    ) -> Charge | None:
        """Hold the price of one response of ``caller`` before it runs (a ledger locks it).

        Raises:
            PaymentRequiredError: The response may not run until paid.
        """
        name, price = self.agent.name, pricing_of(self.agent)
        return await open_charge(
            self.payment_policy, name, token, response_id, price, principal=caller.id
        )
