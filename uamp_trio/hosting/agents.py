"""The agent registry: the agents a server hosts, by name, and which one a request addresses.

See docs/architecture.md.
"""

from __future__ import annotations

import re

from uamp_proto.responder import Responder

from ..engines.http import HTTPError

__all__ = ["AgentRegistry"]

_AGENT_NAME = re.compile(r"^[A-Za-z0-9_.~-]+$")


class AgentRegistry(dict[str, Responder]):
    """Hosted agents by name (a ``dict``), with the rules for adding and finding one."""

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
            return agent
        if model is not None and model in self:
            return self[model]
        if len(self) == 1:
            return next(iter(self.values()))
        if not self:
            raise HTTPError(404, "This server hosts no agent.", code="agent_not_found")
        names = ", ".join(sorted(self))
        raise HTTPError(
            404,
            f"This server hosts several agents ({names}); address one under /agents/{{name}}/.",
            code="agent_not_found",
        )
