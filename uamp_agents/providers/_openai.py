"""OpenAI-compatible Chat Completions provider.

Speaks ``POST {base_url}/chat/completions`` as OpenAI defines it, which is
also what vLLM, llama.cpp's server, Ollama, LiteLLM, Fireworks, DeepSeek and
uamp's own Completions endpoint accept.

Mapping (uamp -> wire):

* Messages keep their roles. Assistant ``tool_calls`` become the nested
  ``{"id", "type": "function", "function": {"name", "arguments"}}`` form;
  tool results become ``role: "tool"`` messages with ``tool_call_id``.
* Content with media becomes content parts: ``text``, ``image_url`` (URL or
  ``data:`` URL), ``input_audio`` (base64 wav/mp3) and ``file``
  (``file_data`` as a ``data:`` URL). Video, and audio or files by URL, are
  refused with a clear error rather than silently dropped.
* ``tools``, ``tool_choice`` and ``response_format`` pass through natively
  (spec 8.3).

Mapping (wire -> uamp): ``content`` is text; ``reasoning_content`` (DeepSeek,
Fireworks) or ``reasoning`` (vLLM, OpenRouter) is thinking; usage maps
``prompt_tokens_details.cached_tokens`` to ``cached_tokens`` and keeps
``input_tokens`` inclusive of cached tokens, as OpenAI reports it (8.7).

Streaming asks for ``stream_options.include_usage`` so the last chunk carries
usage; tool-call deltas are keyed by ``index`` (only the first carries the
id and name) and assembled into whole calls. The stream must end with
``data: [DONE]``; a stream that stops before it is a cut stream.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from typing import Any, ClassVar, Unpack

import attrs

from uamp_proto import types as ty
from uamp_proto.events import Event, ResponseDelta, Thinking

from ._http import HTTPOptions, HTTPProvider, connect, load_json
from ._wire import (
    MediaItem,
    finish_reason,
    json_arguments,
    media_ref,
    merge_params,
    split_message,
    unsupported,
)
from .base import ModelRequest, ModelResponse, ProviderError, ProviderEvent

__all__ = ["OpenAIProvider", "openai"]

_NAME = "openai"

#: OpenAI finish reasons -> uamp's normalised ones: uamp uses OpenAI's names,
#: and the legacy ``function_call`` is ``tool_calls``.
_FINISH = {r: r for r in ("stop", "length", "tool_calls", "content_filter")}
_FINISH["function_call"] = "tool_calls"

# Audio formats ``input_audio`` accepts, by uamp format name.
_INPUT_AUDIO = {"wav": "wav", "mp3": "mp3", "audio/wav": "wav", "audio/mpeg": "mp3"}


def openai(
    model: str = "gpt-4o-mini",
    *,
    api_key: str | None = None,
    base_url: str | None = None,
    params: Mapping[str, Any] | None = None,
    **options: Unpack[HTTPOptions],
) -> OpenAIProvider:
    """An OpenAI-compatible Chat Completions provider.

    Args:
        model: Default model name (a request may override it).
        api_key: Bearer token; defaults to ``$OPENAI_API_KEY``. Local servers
            that need none work with it unset (no header is sent).
        base_url: API root, e.g. ``http://localhost:11434/v1`` for Ollama;
            defaults to ``$OPENAI_BASE_URL``, then ``https://api.openai.com/v1``
            (as the ``openai`` SDK does).
        params: Default body parameters (``temperature``, ``max_tokens`` ...);
            a request's ``params`` win over these.
        **options: Connection options (:class:`~._http.HTTPOptions`:
            ``timeout``, ``max_retries``, ``retry_base_delay``,
            ``retry_max_delay``, ``headers``, ``http_client``).
    """
    key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
    all_headers: dict[str, str] = {}
    if key:
        all_headers["authorization"] = f"Bearer {key}"
    root = base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
    http, policy = connect(_NAME, base_url=root, own_headers=all_headers, **options)
    return OpenAIProvider(model=model, http=http, policy=policy, params=dict(params or {}))


class OpenAIProvider(HTTPProvider):
    """A :class:`~uamp_agents.providers.base.Provider` for Chat Completions."""

    provider_name = _NAME

    def build_body(self, request: ModelRequest, *, stream: bool) -> dict[str, Any]:
        """The Chat Completions request body for ``request``."""
        body: dict[str, Any] = {
            "model": request.model or self._model,
            "messages": [m for msg in request.messages for m in _wire_messages(msg)],
        }
        if request.tools:
            body["tools"] = [_wire_tool(t.function) for t in request.tools]
        if request.tool_choice is not None:
            body["tool_choice"] = request.tool_choice
        if request.response_format is not None and request.response_format.type != "text":
            body["response_format"] = _wire_response_format(request.response_format)
        body.update(merge_params(self._params, request.params))
        if stream:
            body["stream"] = True
            options = dict(body.get("stream_options") or {})
            options.setdefault("include_usage", True)
            body["stream_options"] = options
        else:
            body.pop("stream", None)
            body.pop("stream_options", None)
        return body

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Call the model once (with retries) and return its whole response."""
        body = self.build_body(request, stream=False)
        return parse_completion(await self.call_json("chat/completions", body))

    def stream(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        """Stream the model's events, then one ModelResponse."""
        body = self.build_body(request, stream=True)
        return self.stream_events(
            lambda: self.read_stream("chat/completions", body, _StreamState())
        )


# --- Request mapping ------------------------------------------------------------


def _wire_tool(function: Any) -> dict[str, Any]:
    fn: dict[str, Any] = {"name": function.name}
    if function.description is not None:
        fn["description"] = function.description
    fn["parameters"] = function.parameters or {"type": "object", "properties": {}}
    if function.strict is not None:
        fn["strict"] = function.strict
    return {"type": "function", "function": fn}


def _wire_response_format(response_format: Any) -> dict[str, Any]:
    if response_format.type != "json_schema":
        return {"type": response_format.type}
    spec = dict(response_format.json_schema or {})
    if not isinstance(spec.get("schema"), dict):
        spec = {"name": "response", "schema": spec}
    return {"type": "json_schema", "json_schema": spec}


def _wire_part(item: ty.TextContent | MediaItem) -> dict[str, Any]:
    if isinstance(item, ty.TextContent):
        return {"type": "text", "text": item.text}
    ref = media_ref(item)
    if isinstance(item, ty.ImageContent):
        image: dict[str, Any] = {"url": ref.data_url}
        if item.detail is not None:
            image["detail"] = item.detail
        return {"type": "image_url", "image_url": image}
    if isinstance(item, ty.AudioContent):
        fmt = _INPUT_AUDIO.get((item.format or ref.mime_type).lower())
        if ref.data is None or fmt is None:
            raise unsupported(_NAME, "audio other than base64 wav or mp3")
        return {"type": "input_audio", "input_audio": {"data": ref.data, "format": fmt}}
    if isinstance(item, ty.FileContent):
        if ref.data is None:
            raise unsupported(_NAME, "a file by URL (send it as base64)")
        return {"type": "file", "file": {"filename": item.filename, "file_data": ref.data_url}}
    raise unsupported(_NAME, "video input")


def _wire_messages(message: ty.Message) -> list[dict[str, Any]]:
    """One uamp message as one or more Chat Completions messages."""
    parts = split_message(message)
    if message.role == "tool" or (parts.tool_results and message.role != "assistant"):
        # Each tool result is its own ``role: tool`` message.
        # Chat Completions has no error flag: a failed result says so in its text.
        return [
            {
                "role": "tool",
                "tool_call_id": r.call_id,
                "content": f"Error: {r.result}" if r.is_error else r.result,
            }
            for r in parts.tool_results
        ]
    out: dict[str, Any] = {"role": message.role}
    if all(isinstance(i, ty.TextContent) for i in parts.content):
        text = "".join(i.text for i in parts.content if isinstance(i, ty.TextContent))
        out["content"] = text if text or not parts.tool_calls else None
    else:
        out["content"] = [_wire_part(i) for i in parts.content]
    if message.name is not None:
        out["name"] = message.name
    if parts.tool_calls:
        out["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments or "{}"},
            }
            for c in parts.tool_calls
        ]
    return [out]


# --- Response mapping -----------------------------------------------------------


def _usage(raw: Any) -> ty.UsageStats | None:
    if not isinstance(raw, dict):
        return None
    details = raw.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if cached is None and isinstance(raw.get("prompt_cache_hit_tokens"), int):
        cached = raw["prompt_cache_hit_tokens"]  # DeepSeek's name for it
    inp = raw.get("prompt_tokens")
    out = raw.get("completion_tokens")
    total = raw.get("total_tokens")
    if total is None and isinstance(inp, int) and isinstance(out, int):
        total = inp + out
    return ty.UsageStats(
        input_tokens=inp, output_tokens=out, total_tokens=total, cached_tokens=cached
    )


def _reasoning(obj: Mapping[str, Any]) -> str | None:
    for key in ("reasoning_content", "reasoning"):
        value = obj.get(key)
        if isinstance(value, str) and value:
            return value
    return None


#: Finish reasons that mean "tool calls" when the answer has some (or none given).
_CALL_REASONS = (None, "stop", "tool_calls", "function_call")


def _finish(reason: Any, has_calls: bool) -> str:
    return finish_reason(reason, _FINISH, calls=has_calls, call_reasons=_CALL_REASONS)


def _shape_error(detail: str) -> ProviderError:
    return ProviderError(f"{_NAME}: unexpected response shape: {detail}")


def parse_completion(data: Any) -> ModelResponse:
    """A ``chat.completion`` object as a ModelResponse."""
    if not isinstance(data, dict):
        raise _shape_error("not an object")
    if isinstance(data.get("error"), dict):
        message = data["error"].get("message", "error")
        raise ProviderError(f"{_NAME}: {message}", retryable=True)
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise _shape_error("no choices")
    choice = choices[0]
    msg = choice.get("message")
    if not isinstance(msg, dict):
        raise _shape_error("choice without a message")
    calls: list[ty.ToolInvocation] = []
    for n, raw in enumerate(msg.get("tool_calls") or []):
        fn = raw.get("function") or {}
        calls.append(
            ty.ToolInvocation(
                id=raw.get("id") or f"call_{n}",
                name=fn.get("name") or "",
                arguments=json_arguments(fn.get("arguments")),
            )
        )
    content = msg.get("content")
    if isinstance(content, list):  # some compatible servers answer with parts
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    message = ty.Message(
        role="assistant",
        content=content if isinstance(content, str) else None,
        tool_calls=calls or None,
    )
    return ModelResponse(
        message=message,
        usage=_usage(data.get("usage")),
        thinking=_reasoning(msg),
        finish_reason=_finish(choice.get("finish_reason"), bool(calls)),
        model=data.get("model"),
    )


@attrs.define
class _CallBuffer:
    id: str
    name: str
    arguments: list[str] = attrs.Factory(list)


@attrs.define
class _StreamState:
    """Accumulates ``chat.completion.chunk`` objects into the final response."""

    text: list[str] = attrs.Factory(list)
    thinking: list[str] = attrs.Factory(list)
    calls: dict[int, _CallBuffer] = attrs.Factory(dict)
    finish: str | None = None
    usage: ty.UsageStats | None = None
    model: str | None = None
    #: ``data: [DONE]`` seen.
    ended: bool = False
    ending: ClassVar[str] = "data: [DONE]"

    def feed_sse(self, data: str) -> list[Event]:
        """Absorb one event's data: a JSON chunk, or ``[DONE]`` (what follows is ignored)."""
        if self.ended:
            return []
        if data.strip() == "[DONE]":
            self.ended = True
            return []
        return self.feed(load_json(_NAME, data))

    def feed(self, chunk: Any) -> list[Event]:
        """Absorb one chunk; return the UAMP events it carries."""
        if not isinstance(chunk, dict):
            raise _shape_error("chunk is not an object")
        if isinstance(chunk.get("error"), dict):
            message = chunk["error"].get("message", "error")
            raise ProviderError(f"{_NAME}: error in stream: {message}", retryable=True)
        if isinstance(chunk.get("model"), str):
            self.model = chunk["model"]
        usage = _usage(chunk.get("usage"))
        if usage is not None:
            self.usage = usage
        events: list[Event] = []
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            reasoning = _reasoning(delta)
            if reasoning:
                self.thinking.append(reasoning)
                events.append(Thinking(content=reasoning, is_delta=True))
            text = delta.get("content")
            if isinstance(text, str) and text:
                self.text.append(text)
                events.append(ResponseDelta(delta=ty.DeltaText(text=text)))
            for raw in delta.get("tool_calls") or []:
                events.append(self._tool_delta(raw))
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
        return events

    def _tool_delta(self, raw: Any) -> ResponseDelta:
        index = raw.get("index", len(self.calls))
        fn = raw.get("function") or {}
        buffer = self.calls.get(index)
        name = fn.get("name")
        if buffer is None:
            buffer = _CallBuffer(id=raw.get("id") or f"call_{index}", name=name or "")
            self.calls[index] = buffer
        elif name and not buffer.name:
            buffer.name = name
        fragment = fn.get("arguments")
        if fragment is not None and not isinstance(fragment, str):
            fragment = json_arguments(fragment)
        if fragment:
            buffer.arguments.append(fragment)
        return ResponseDelta(
            delta=ty.DeltaToolCall(
                tool_call=ty.ToolCallFragment(id=buffer.id, name=name, arguments=fragment or None)
            )
        )

    def result(self) -> ModelResponse:
        """The assembled ModelResponse."""
        calls = [
            ty.ToolInvocation(id=b.id, name=b.name, arguments="".join(b.arguments) or "{}")
            for _, b in sorted(self.calls.items())
        ]
        text = "".join(self.text)
        message = ty.Message(
            role="assistant",
            content=text if text or not calls else None,
            tool_calls=calls or None,
        )
        return ModelResponse(
            message=message,
            usage=self.usage,
            thinking="".join(self.thinking) or None,
            finish_reason=_finish(self.finish, bool(calls)),
            model=self.model,
        )
