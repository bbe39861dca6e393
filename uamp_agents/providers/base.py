"""The provider interface: how the agent runtime talks to a model.

A provider turns a :class:`ModelRequest` (uamp_proto messages and tool
definitions, used as they are) into a :class:`ModelResponse`, either at once
(``generate``) or as a stream (``stream``). A stream yields the provider's
events as UAMP events, unchanged in meaning -- text and tool-call fragments
as :class:`~uamp_proto.events.ResponseDelta`, reasoning as
:class:`~uamp_proto.events.Thinking`, usage as
:class:`~uamp_proto.events.UsageDelta` -- and ends with exactly one
:class:`ModelResponse`, the assembled result.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, ClassVar, Protocol, runtime_checkable

import attrs

from uamp_proto.events import Event
from uamp_proto.types import Message, ResponseFormat, ToolDefinition, UsageStats

from ..errors import ProviderError

__all__ = [
    "ModelRequest",
    "ModelResponse",
    "NamedProvider",
    "Provider",
    "ProviderError",
    "ProviderEvent",
]


@attrs.frozen(kw_only=True)
class ModelRequest:
    """One call to a model.

    Attributes:
        messages: The conversation, oldest first (system prompt included as a
            ``role="system"`` message when there is one).
        tools: Tools the model may call.
        tool_choice: ``"auto"``, ``"none"``, ``"required"`` or a named
            function (``{"type": "function", "function": {"name": ...}}``).
        response_format: Structured-output request.
        params: Sampling parameters (``temperature``, ``max_tokens`` ...).
        model: Overrides the provider's configured model name.
    """

    messages: list[Message]
    tools: list[ToolDefinition] = attrs.field(factory=list)
    tool_choice: str | dict[str, Any] | None = None
    response_format: ResponseFormat | None = None
    params: dict[str, Any] = attrs.field(factory=dict)
    model: str | None = None


@attrs.frozen(kw_only=True)
class ModelResponse:
    """What a model produced in one call.

    Attributes:
        message: The assistant message (``content`` text and ``tool_calls``).
        usage: Token usage, when the provider reported it.
        thinking: Reasoning text, when the model produced any.
        finish_reason: ``"stop"``, ``"tool_calls"``, ``"length"`` ...
        model: The model name the provider reported.
    """

    message: Message
    usage: UsageStats | None = None
    thinking: str | None = None
    finish_reason: str = "stop"
    model: str | None = None


#: What a provider stream yields: UAMP events, then one final ModelResponse.
ProviderEvent = Event | ModelResponse


@runtime_checkable
class Provider(Protocol):
    """A model backend."""

    @property
    def name(self) -> str:
        """Provider name (``"openai"``, ``"anthropic"``, ``"demo"`` ...)."""
        ...

    @property
    def model(self) -> str:
        """The default model name."""
        ...

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Call the model and return its whole response."""
        ...

    def stream(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        """Call the model and yield its events, ending with a ModelResponse."""
        ...


class NamedProvider:
    """The part every provider class shares: its name and its default model.

    A subclass names itself in :attr:`provider_name`; ``model`` is the
    default a request may override.
    """

    #: The provider's name (``"openai"``, ``"demo"``, ``"function"`` ...).
    provider_name: ClassVar[str]

    def __init__(self, model: str) -> None:
        self._model = model

    @property
    def name(self) -> str:
        """The provider's name."""
        return self.provider_name

    @property
    def model(self) -> str:
        """The default model name."""
        return self._model
