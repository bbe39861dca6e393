"""Agents of other frameworks as UAMP responders (each needs only its framework).

* :func:`function_agent` -- any ``async def agent(turn)`` generator;
* :func:`pydantic_ai_agent` -- a pydantic-ai ``Agent`` (extra ``uamp[pydantic-ai]``);
* :func:`openai_agents_agent` -- an OpenAI Agents SDK ``Agent`` (extra ``uamp[openai-agents]``).
"""

from __future__ import annotations

from typing import Any

from .function import FunctionAgent, function_agent

__all__ = ["FunctionAgent", "function_agent", "openai_agents_agent", "pydantic_ai_agent"]


def pydantic_ai_agent(agent: Any, **options: Any) -> Any:
    """A pydantic-ai ``Agent`` as a responder (see :mod:`.pydantic_ai`)."""
    from .pydantic_ai import PydanticAIAgent

    return PydanticAIAgent(agent, **options)


def openai_agents_agent(agent: Any, **options: Any) -> Any:
    """An OpenAI Agents SDK ``Agent`` as a responder (see :mod:`.openai_agents`)."""
    from .openai_agents import OpenAIAgentsAgent

    return OpenAIAgentsAgent(agent, **options)
