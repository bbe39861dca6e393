"""Agents that ask a person, for the human-in-the-loop protocol tests (issue 30)."""

from __future__ import annotations

from typing import Any

from uamp_agents import agent
from uamp_agents.bridge import demo_agent, serve_agent


def approving(name: str = "demo") -> Any:
    """The demo agent, asking before it runs ``add`` ("what is 2+3?" pauses)."""
    base = demo_agent()
    return serve_agent(
        agent(model=base.model, tools=base.tools, system=base.system, name=name, approve={"add"})
    )
