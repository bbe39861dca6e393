"""The UAP agent ``bench/transports.py`` serves as ``uamp-agent``.

A runtime agent (:func:`uamp_agents.agent`, the default loop strategy) on
the ``function`` model: the model answers ``N`` words ``"tok "`` when the
last user message is (or starts with) the number ``N`` -- as ``uamp bench
--output-len`` prompts do -- and the ``function`` model streams
one word per delta. Loaded the way ``uamp serve --agent
flood_agent:flood`` loads it (``uamp_trio.cli.load_agent``), so the bench
measures the same path: model stream, the runtime's stream, the bridge,
the turn driver and the transport.
"""

from __future__ import annotations

from typing import Any

from uamp_agents import agent, tool
from uamp_agents.providers import function

WORD = "tok "


def _reply(messages: list[Any], tools: list[Any]) -> str:
    """``WORD`` as often as the last user message's first word says (1 when it is no number)."""
    words = messages[-1].text.split() if messages else []
    return WORD * int(words[0]) if words and words[0].isdigit() else WORD


flood = agent(model=function(_reply), name="flood")


def lookup(key: str) -> str:
    """Look ``key`` up (the server-side tool of ``tooled``)."""
    return f"value-{key}"


def _tool_rounds(messages: list[Any], tools: list[Any]) -> Any:
    """``tools N``: ``N`` server-side rounds of ``lookup``, then five words; else as ``_reply``."""
    asked = next((m.text.split() for m in reversed(messages) if m.role == "user"), [])
    if len(asked) == 2 and asked[0] == "tools" and asked[1].isdigit():
        done = sum(1 for m in messages if m.role == "tool")
        return [("lookup", {"key": "k"})] if done < int(asked[1]) else WORD * 5
    return _reply(messages, tools)


#: ``flood`` with one server-side tool (``bench/turn.py``'s tool rounds).
tooled = agent(model=function(_tool_rounds), tools=[tool(lookup, thread=False)], name="flood")
