"""The UAP agent ``bench/transports.py`` serves as ``uamp-agent``.

A runtime agent (:func:`uamp_agents.agent`, the default loop strategy) on
the ``function`` model: the model answers ``N`` words ``"tok "`` when the
last user message is the number ``N``, and the ``function`` model streams
one word per delta. Loaded the way ``uamp serve --agent
flood_agent:flood`` loads it (``uamp_trio.cli.load_agent``), so the bench
measures the same path: model stream, the runtime's stream, the bridge,
the turn driver and the transport.
"""

from __future__ import annotations

from typing import Any

from uamp_agents import agent
from uamp_agents.providers import function

WORD = "tok "


def _reply(messages: list[Any], tools: list[Any]) -> str:
    """``WORD`` repeated as often as the last user message says (1 when it is no number)."""
    text = messages[-1].text.strip() if messages else ""
    return WORD * int(text) if text.isdigit() else WORD


flood = agent(model=function(_reply), name="flood")
