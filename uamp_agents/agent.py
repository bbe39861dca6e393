"""The agent: :func:`agent` and :class:`Agent` (UAP section 4).

An :class:`Agent` is configuration only -- model, tools, system prompt,
strategy -- and each call to :meth:`Agent.run` or :meth:`Agent.stream` is
its own run (STYLE section 6).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from uamp_proto.types import ContentItem, Message, TextContent

from .providers.base import ModelRequest, Provider
from .turn import Turn

__all__ = ["Agent", "AgentInput", "agent", "to_message"]

#: What a run takes as the user's input.
AgentInput = str | Message | Sequence[ContentItem]


def to_message(value: AgentInput) -> Message:
    """Turn a run's input (text, a message, or content items) into a message."""
    if isinstance(value, str):
        return Message(role="user", content=value)
    if isinstance(value, Message):
        return value
    items = list(value)
    if len(items) == 1 and isinstance(items[0], TextContent):
        return Message(role="user", content=items[0].text)
    return Message(role="user", content_items=items)


class Agent:
    """An agent definition (UAP section 4.3). Build it with :func:`agent`."""

    def __init__(
        self,
        *,
        model: Provider | None = None,
        params: dict[str, Any] | None = None,
        config: dict[str, Any] | None = None,
        execution: Any = None,
        tools: Sequence[Any] = (),
        system: str | None = None,
        structure: Any = None,
        middleware: Sequence[Any] = (),
        strategy: Any = None,
        name: str | None = None,
        description: str | None = None,
    ) -> None:
        self.id = str(uuid.uuid4())
        self.model = model
        self.params = dict(params or {})
        self.config = dict(config or {})
        self.execution = execution
        self.tools = list(tools)
        self.system = system
        self.structure = structure
        self.middleware = list(middleware)
        self.strategy = strategy
        self.name = name
        self.description = description

    async def run(self, history_or_input: Any, input: AgentInput | None = None) -> Turn:
        """Run the agent on ``input`` and return the resulting turn.

        Call it as ``run(input)`` or ``run(history, input)``; ``history`` is a
        list of messages or any object with a ``history()`` method returning
        one (a thread).
        """
        if input is None:
            history: list[Message] = []
            user = to_message(history_or_input)
        else:
            history = _history_of(history_or_input)
            user = to_message(input)
        assert self.model is not None
        messages = ([Message(role="system", content=self.system)] if self.system else [])
        response = await self.model.generate(
            ModelRequest(messages=[*messages, *history, user], params=self.params)
        )
        return Turn(messages=[user, response.message], response=response.message, steps=1)


def _history_of(value: Any) -> list[Message]:
    if hasattr(value, "history") and callable(value.history):
        return list(value.history())
    return list(value)


def agent(
    *,
    model: Provider | None = None,
    params: dict[str, Any] | None = None,
    config: dict[str, Any] | None = None,
    execution: Any = None,
    tools: Sequence[Any] = (),
    system: str | None = None,
    structure: Any = None,
    middleware: Sequence[Any] = (),
    strategy: Any = None,
    name: str | None = None,
    description: str | None = None,
) -> Agent:
    """Create an :class:`Agent` (UAP section 4.1). See :class:`Agent`."""
    return Agent(
        model=model,
        params=params,
        config=config,
        execution=execution,
        tools=tools,
        system=system,
        structure=structure,
        middleware=middleware,
        strategy=strategy,
        name=name,
        description=description,
    )
