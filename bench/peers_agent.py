"""The agents ``bench/peers.py`` serves with ``uamp serve --agent peers_agent:...``.

``peer``: a UAP agent on the ``openai`` provider pointed at the bench's mock
model server (``$UAMP_PEERS_MODEL_URL``), with one server-side tool,
``lookup``: the same model, tool and replies the webagents peer gets
(``bench/peers_webagents.py``), so the two servers differ only in
themselves.

``peer_local``: the same agent with its model in process (the ``function``
model answering by the same rules, ``bench/peers_replies.py``), beside the
webagents peer's in-process LLM skill (``peers_webagents.py --local``).
"""

from __future__ import annotations

import os
from typing import Any

from peers_replies import mock_reply

from uamp_agents import agent, tool
from uamp_agents.providers import function, openai


def lookup(key: str) -> str:
    """Look ``key`` up (the bench's server-side tool)."""
    return f"value-{key}"


def _local_reply(messages: list[Any], tools: list[Any]) -> Any:
    """``mock_reply`` on the run's messages: the text, or the ``lookup`` call."""
    text, calls = mock_reply([{"role": m.role, "content": m.text} for m in messages])
    if calls:
        return [("lookup", call["function"]["arguments"]) for call in calls]
    return text


def _peer() -> Any:
    url = os.environ.get("UAMP_PEERS_MODEL_URL")
    if url is None:  # (only peer_local is asked for)
        return None
    model = openai("mock", api_key="unused", base_url=url)
    return agent(model=model, tools=[tool(lookup, thread=False)], name="peer")


peer = _peer()
peer_local = agent(model=function(_local_reply), tools=[tool(lookup, thread=False)], name="peer")
