"""A model driven by a Python function, for tests and scripted agents.

``function(fn)`` calls ``fn(messages, tools)`` (sync or async) for every model
call, with the request's uamp_proto messages and tool definitions. ``fn``
returns what the model says:

* a ``str`` -- the reply text;
* a list of ``(tool_name, arguments)`` pairs -- tool calls requested together
  in one step (``arguments`` a dict, or a JSON string);
* a ``dict`` -- replied as JSON text (handy for structured output);
* a :class:`~uamp_proto.types.Message` or a :class:`ModelResponse` -- used
  as it is.

Usage is counted deterministically as whitespace-separated words. Streaming
yields the text word by word as ``ResponseDelta(DeltaText)``, each tool call
as two ``DeltaToolCall`` fragments (name, then arguments), a ``UsageDelta``,
then the :class:`ModelResponse`.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import orjson

from uamp_proto import _fastinit
from uamp_proto.events import ResponseDelta, UsageDelta
from uamp_proto.types import (
    DeltaText,
    DeltaToolCall,
    Message,
    ToolCallFragment,
    ToolDefinition,
    ToolInvocation,
    UsageStats,
)

from ..hooks import maybe_await
from .base import ModelRequest, ModelResponse, NamedProvider, ProviderEvent

__all__ = ["FunctionProvider", "count_tokens", "function"]

ModelFunction = Callable[[list[Message], list[ToolDefinition]], Any]


# Positional constructors for what every call builds (uamp_proto._fastinit.maker).
_usage = _fastinit.maker(UsageStats, ("input_tokens", "output_tokens", "total_tokens"))
_response = _fastinit.maker(ModelResponse, ("message", "usage", "finish_reason", "model"))
_invocation = _fastinit.maker(ToolInvocation, ("id", "name", "arguments"))
_assistant = _fastinit.maker(Message, ("role", "content"))


def count_tokens(messages: list[Message]) -> int:
    """A deterministic token estimate: whitespace-separated words."""
    total = 0
    for m in messages:
        text = m.content  # (Message.text's first case, without the property's call)
        total += len((text if text is not None else m.text).split())
        for call in m.tool_calls or ():
            total += 1 + len(call.arguments.split())
    return total


def usage_of(request: list[Message], reply: Message) -> UsageStats:
    """Deterministic usage of one call: word counts of the request and the reply."""
    inp, out = count_tokens(request), count_tokens([reply])
    return _usage(inp, out, inp + out)


#: A word with the whitespace after it (one character), or a last word, or a
#: lone whitespace character: the pieces :func:`text_chunks` cuts text into.
_CHUNK = re.compile(r"\S*\s|\S+")


def text_chunks(text: str) -> list[str]:
    """Split text into word-sized deltas that join back to ``text``.

    Each piece ends after one whitespace character (so a run of spaces
    gives one-space pieces), except the last, which may end in a word.
    """
    return _CHUNK.findall(text)


def response_events(response: ModelResponse) -> Iterator[ProviderEvent]:
    """A finished response as provider stream events, then the response.

    A plain generator: a provider's ``stream`` forwards it from its own
    async generator, one generator frame per event instead of two.
    """
    message = response.message
    for chunk in text_chunks(message.text):
        yield ResponseDelta(delta=DeltaText(text=chunk))
    for call in message.tool_calls or ():
        yield ResponseDelta(
            delta=DeltaToolCall(tool_call=ToolCallFragment(id=call.id, name=call.name))
        )
        yield ResponseDelta(
            delta=DeltaToolCall(tool_call=ToolCallFragment(id=call.id, arguments=call.arguments))
        )
    if response.usage is not None:
        yield UsageDelta(delta=response.usage)
    yield response


class FunctionProvider(NamedProvider):
    """A :class:`~uamp_agents.providers.Provider` whose replies come from a function.

    Its name is ``"function"``; its model the name given to :func:`function`.
    """

    provider_name = "function"

    def __init__(self, fn: ModelFunction, model: str = "function") -> None:
        super().__init__(model)
        self._fn = fn
        self._ids = itertools.count(1)
        self.calls = 0

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Call the function and wrap its reply.

        Raises:
            TypeError: The function returned something it may not.
        """
        self.calls += 1
        reply = self._fn(list(request.messages), list(request.tools))
        if type(reply) is not str:  # (a text, the usual reply: nothing to await)
            reply = await maybe_await(reply)
        if isinstance(reply, ModelResponse):
            return reply
        message = self._message(reply)
        return _response(
            message,
            usage_of(request.messages, message),
            "tool_calls" if message.tool_calls else "stop",
            self._model,
        )

    def _message(self, reply: Any) -> Message:
        if isinstance(reply, Message):
            return reply
        if isinstance(reply, str):
            return _assistant("assistant", reply)
        if isinstance(reply, dict):
            return Message(role="assistant", content=orjson.dumps(reply).decode())
        if isinstance(reply, list | tuple):
            calls = [self._call(item) for item in reply]
            return Message(role="assistant", tool_calls=calls)
        raise TypeError(
            "a model function must return a str, a dict, a list of (tool_name, arguments) "
            f"pairs, a Message or a ModelResponse, not {type(reply).__name__}"
        )

    def _call(self, item: Any) -> ToolInvocation:
        if not (isinstance(item, list | tuple) and len(item) == 2 and isinstance(item[0], str)):
            raise TypeError(f"a tool call must be a (tool_name, arguments) pair, not {item!r}")
        name, arguments = item
        text = arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()
        return _invocation(f"call_{next(self._ids)}", name, text)

    async def stream(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        """Call the function, then yield its reply as stream events."""
        for event in response_events(await self.generate(request)):
            yield event


def function(fn: ModelFunction, *, model: str = "function") -> FunctionProvider:
    """A model whose every reply is ``fn(messages, tools)``. See the module docstring."""
    return FunctionProvider(fn, model)
