"""The agent ``bench/peers.py`` serves with ``uamp serve --agent peers_agent:peer``.

A UAP agent on the ``openai`` provider pointed at the bench's mock model
server (``$UAMP_PEERS_MODEL_URL``), with one server-side tool, ``lookup``:
the same model, tool and replies the webagents peer gets
(``bench/peers_webagents.py``), so the two servers differ only in
themselves.
"""

from __future__ import annotations

import os

from uamp_agents import agent, tool
from uamp_agents.providers import openai


def lookup(key: str) -> str:
    """Look ``key`` up (the bench's server-side tool)."""
    return f"value-{key}"


peer = agent(
    model=openai("mock", api_key="unused", base_url=os.environ["UAMP_PEERS_MODEL_URL"]),
    tools=[tool(lookup, thread=False)],
    name="peer",
)
