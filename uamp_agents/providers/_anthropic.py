"""Anthropic Messages API provider.

Speaks ``POST {base_url}/v1/messages`` with the ``x-api-key`` and
``anthropic-version: 2023-06-01`` headers.

Mapping (uamp -> wire):

* ``role="system"`` messages are joined into the top-level ``system``.
* Messages become content blocks: ``text``, ``image`` (``base64`` or
  ``url`` source), ``document`` (PDF by base64 or URL, plain text files);
  assistant ``tool_calls`` become ``tool_use`` blocks (arguments parsed back
  into an ``input`` object); ``role="tool"`` messages become ``tool_result``
  blocks in a user turn. Consecutive turns of one role are merged, so the
  results of parallel calls travel together right after their ``tool_use``.
* Persisted thinking (``ThinkingContent`` items that keep their
  ``signature``, or ``data`` when redacted) is sent back as ``thinking`` /
  ``redacted_thinking`` blocks: the API needs them when thinking and tool
  use are combined.
* ``tool_choice``: ``auto``, ``none``, ``required`` -> ``any``, a named
  function -> ``{"type": "tool", "name"}``.
* ``response_format`` (spec 8.3): ``json_schema`` becomes a forced tool whose
  ``input_schema`` is the schema, and the tool's input is unwrapped into the
  answer text (streamed as text deltas too); ``json_object`` becomes a
  system prompt instruction.

Mapping (wire -> uamp): usage keeps ``input_tokens`` as Anthropic reports it
(excluding cached tokens) and sets ``cached_tokens`` to cache reads plus
cache writes (spec 8.7). Stop reasons ``end_turn``/``stop_sequence``/
``pause_turn`` -> ``stop``, ``tool_use`` -> ``tool_calls``, ``max_tokens`` ->
``length``, ``refusal`` -> ``content_filter``.

A stream must end with ``message_stop``; an ``error`` event mid-stream
(``overloaded_error`` ...) becomes a retryable ProviderError.
"""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator, Mapping
from typing import Any, ClassVar, Unpack

import attrs
import orjson

from uamp_proto import types as ty
from uamp_proto.events import Event, ResponseDelta, Thinking

from ._http import HTTPClient, HTTPOptions, HTTPProvider, RetryPolicy, connect, load_json
from ._wire import (
    MediaItem,
    add_counts,
    arguments_object,
    decode_base64_text,
    finish_reason,
    media_ref,
    merge_params,
    schema_of,
    split_message,
    system_and_turns,
    unsupported,
    wire_tool_choice,
)
from .base import ModelRequest, ModelResponse, ProviderError, ProviderEvent

__all__ = ["ANTHROPIC_VERSION", "AnthropicProvider", "anthropic"]

_NAME = "anthropic"

#: The API version header value this module speaks.
ANTHROPIC_VERSION = "2023-06-01"

_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
}

#: Stream ``error`` types worth retrying.
_RETRYABLE_ERRORS = frozenset({"overloaded_error", "api_error", "rate_limit_error"})

_JSON_OBJECT_INSTRUCTION = (
    "Respond with a single valid JSON object and nothing else: no prose, no code fences."
)

#: uamp ``tool_choice`` strings -> the Messages API's ``tool_choice.type``.
_TOOL_CHOICES = {"auto": "auto", "none": "none", "required": "any", "any": "any"}

# Parameter names that differ between uamp/OpenAI style and the Messages API.
_PARAM_NAMES = {"stop": "stop_sequences", "max_completion_tokens": "max_tokens"}

_TOOL_NAME_RE = re.compile(r"[^a-zA-Z0-9_-]")


def anthropic(
    model: str = "claude-sonnet-4-5",
    *,
    api_key: str | None = None,
    base_url: str | None = None,
    max_tokens: int = 1024,
    thinking: int | Mapping[str, Any] | None = None,
    params: Mapping[str, Any] | None = None,
    **options: Unpack[HTTPOptions],
) -> AnthropicProvider:
    """An Anthropic Messages API provider.

    Args:
        model: Default model name (a request may override it).
        api_key: Defaults to ``$ANTHROPIC_API_KEY``.
        base_url: API root (without ``/v1``); defaults to ``$ANTHROPIC_BASE_URL``,
            then ``https://api.anthropic.com`` (as the ``anthropic`` SDK does).
        max_tokens: Output token limit (the API requires one); a request's
            ``params["max_tokens"]`` wins.
        thinking: Extended thinking: a token budget (``2048``) or the raw
            ``thinking`` object (``{"type": "enabled", "budget_tokens": ...}``).
        params: Default body parameters (``temperature``, ``top_k``,
            ``stop`` -> ``stop_sequences`` ...).
        **options: Connection options (:class:`~._http.HTTPOptions`:
            ``timeout``, ``max_retries``, ``retry_base_delay``,
            ``retry_max_delay``, ``headers``, ``http_client``).
    """
    key = api_key if api_key is not None else os.environ.get("ANTHROPIC_API_KEY")
    all_headers = {"anthropic-version": ANTHROPIC_VERSION}
    if key:
        all_headers["x-api-key"] = key
    root = base_url or os.environ.get("ANTHROPIC_BASE_URL") or "https://api.anthropic.com"
    http, policy = connect(_NAME, base_url=root, own_headers=all_headers, **options)
    thinking_config: dict[str, Any] | None
    if thinking is None:
        thinking_config = None
    elif isinstance(thinking, int):
        thinking_config = {"type": "enabled", "budget_tokens": thinking}
    else:
        thinking_config = dict(thinking)
    return AnthropicProvider(
        model=model,
        http=http,
        policy=policy,
        max_tokens=max_tokens,
        thinking=thinking_config,
        params=dict(params or {}),
    )


class AnthropicProvider(HTTPProvider):
    """A :class:`~uamp_agents.providers.base.Provider` for the Messages API."""

    provider_name = _NAME

    def __init__(
        self,
        *,
        model: str,
        http: HTTPClient,
        policy: RetryPolicy,
        max_tokens: int,
        thinking: dict[str, Any] | None,
        params: dict[str, Any],
    ) -> None:
        super().__init__(model=model, http=http, policy=policy, params=params, thinking=thinking)
        self._max_tokens = max_tokens

    def build_body(
        self, request: ModelRequest, *, stream: bool
    ) -> tuple[dict[str, Any], str | None]:
        """The request body, and the name of the structured-output tool if any."""
        system, turns = system_and_turns(request.messages, _wire_turn, "content")

        params = merge_params(self._params, request.params)
        params = {_PARAM_NAMES.get(k, k): v for k, v in params.items()}
        if isinstance(params.get("stop_sequences"), str):
            params["stop_sequences"] = [params["stop_sequences"]]
        thinking = params.pop("thinking", None) or self._thinking

        tools = [_wire_tool(t) for t in request.tools]
        tool_choice = wire_tool_choice(
            _NAME,
            request.tool_choice,
            _TOOL_CHOICES,
            mode=lambda mode: {"type": mode},
            named=lambda name: {"type": "tool", "name": name},
        )
        structured: str | None = None
        fmt = request.response_format
        if fmt is not None and fmt.type == "json_object":
            system.append(_JSON_OBJECT_INSTRUCTION)
        elif fmt is not None and fmt.type == "json_schema":
            structured, tool = _structured_tool(fmt)
            tools.append(tool)
            if thinking:
                # Forced tool use is not allowed with extended thinking: ask instead.
                system.append(f"Give your final answer by calling the `{structured}` tool.")
                tool_choice = {"type": "auto"}
            else:
                tool_choice = {"type": "tool", "name": structured}

        body: dict[str, Any] = {
            "model": request.model or self._model,
            "max_tokens": self._max_tokens,
        }
        if system:
            body["system"] = "\n\n".join(system)
        body["messages"] = turns
        if tools:
            body["tools"] = tools
        if tool_choice is not None:
            body["tool_choice"] = tool_choice
        if thinking:
            body["thinking"] = thinking
        body.update(params)
        if stream:
            body["stream"] = True
        else:
            body.pop("stream", None)
        return body, structured

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Call the model once (with retries) and return its whole response."""
        body, structured = self.build_body(request, stream=False)
        return parse_message(await self.call_json("v1/messages", body), structured)

    def stream(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        """Stream the model's events, then one ModelResponse."""
        body, structured = self.build_body(request, stream=True)
        return self.stream_events(
            lambda: self.read_stream("v1/messages", body, _StreamState(structured=structured))
        )


# --- Request mapping ------------------------------------------------------------


def _wire_tool(tool: ty.ToolDefinition) -> dict[str, Any]:
    fn = tool.function
    out: dict[str, Any] = {"name": fn.name}
    if fn.description is not None:
        out["description"] = fn.description
    out["input_schema"] = fn.parameters or {"type": "object", "properties": {}}
    return out


def _structured_tool(fmt: ty.ResponseFormat) -> tuple[str, dict[str, Any]]:
    name, schema = schema_of(fmt)
    name = _TOOL_NAME_RE.sub("_", name)[:64] or "response"
    if schema.get("type") != "object":
        # input_schema must describe an object; wrap anything else.
        schema = {"type": "object", "properties": {"value": schema}, "required": ["value"]}
    tool = {
        "name": name,
        "description": "Give the final answer as structured output matching this schema.",
        "input_schema": schema,
    }
    return name, tool


def _source(item: ty.ImageContent | ty.FileContent) -> dict[str, Any]:
    ref = media_ref(item)
    if ref.url is not None:
        return {"type": "url", "url": ref.url}
    return {"type": "base64", "media_type": ref.mime_type, "data": ref.data}


def _wire_block(item: ty.TextContent | MediaItem) -> dict[str, Any]:
    if isinstance(item, ty.TextContent):
        return {"type": "text", "text": item.text}
    if isinstance(item, ty.ImageContent):
        return {"type": "image", "source": _source(item)}
    if isinstance(item, ty.FileContent):
        ref = media_ref(item)
        if ref.mime_type == "application/pdf":
            block: dict[str, Any] = {"type": "document", "source": _source(item)}
        elif ref.mime_type.startswith("text/") and ref.data is not None:
            text = decode_base64_text(ref.data)
            source = {"type": "text", "media_type": "text/plain", "data": text}
            block = {"type": "document", "source": source}
        else:
            raise unsupported(_NAME, f"a {ref.mime_type} file")
        block["title"] = item.filename
        return block
    raise unsupported(_NAME, f"{item.type} input")


def _wire_result(result: ty.ToolOutput) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": result.call_id}
    media = [i for i in result.content_items or [] if isinstance(i, ty.ImageContent)]
    if media:
        parts: list[dict[str, Any]] = []
        if result.result:
            parts.append({"type": "text", "text": result.result})
        parts.extend(_wire_block(i) for i in media)
        block["content"] = parts
    else:
        block["content"] = result.result
    if result.is_error:
        block["is_error"] = True
    return block


def _wire_thinking(item: ty.ThinkingContent) -> dict[str, Any] | None:
    signature = item.unknown.get("signature")
    data = item.unknown.get("data")
    if item.redacted and isinstance(data, str):
        return {"type": "redacted_thinking", "data": data}
    if isinstance(signature, str):
        return {"type": "thinking", "thinking": item.thinking, "signature": signature}
    return None  # without its signature the API would refuse the block


def _wire_turn(message: ty.Message) -> tuple[str, list[dict[str, Any]]]:
    """One uamp message as (role, content blocks)."""
    parts = split_message(message)
    if message.role == "tool":
        return "user", [_wire_result(r) for r in parts.tool_results]
    blocks: list[dict[str, Any]] = []
    if message.role == "assistant":
        for item in parts.thinking:
            thinking = _wire_thinking(item)
            if thinking is not None:
                blocks.append(thinking)
    blocks.extend(
        _wire_block(i) for i in parts.content if not (isinstance(i, ty.TextContent) and not i.text)
    )
    if message.role == "assistant":
        for call in parts.tool_calls:
            blocks.append(
                {
                    "type": "tool_use",
                    "id": call.id,
                    "name": call.name,
                    "input": arguments_object(call),
                }
            )
        return "assistant", blocks
    blocks.extend(_wire_result(r) for r in parts.tool_results)
    return "user", blocks


# --- Response mapping -----------------------------------------------------------


def _usage(raw: Any) -> ty.UsageStats | None:
    if not isinstance(raw, dict):
        return None
    inp = raw.get("input_tokens")
    out = raw.get("output_tokens")
    cached = add_counts(raw.get("cache_read_input_tokens"), raw.get("cache_creation_input_tokens"))
    total = inp + out if isinstance(inp, int) and isinstance(out, int) else None
    return ty.UsageStats(
        input_tokens=inp, output_tokens=out, total_tokens=total, cached_tokens=cached
    )


def _finish(reason: Any, has_calls: bool, structured: bool) -> str:
    if structured and reason == "tool_use":
        return "stop"
    if has_calls:
        return "tool_calls"
    return finish_reason(reason, _FINISH, calls=False)


def _thinking_item(block: Mapping[str, Any]) -> ty.ThinkingContent:
    if block.get("type") == "redacted_thinking":
        return ty.ThinkingContent(thinking="", redacted=True, unknown={"data": block.get("data")})
    extra = {"signature": block["signature"]} if block.get("signature") else {}
    return ty.ThinkingContent(thinking=block.get("thinking") or "", unknown=extra)


def _assemble(
    text: str,
    calls: list[ty.ToolInvocation],
    thinking: list[ty.ThinkingContent],
    usage: ty.UsageStats | None,
    stop_reason: Any,
    structured: str | None,
    model: Any,
) -> ModelResponse:
    items: list[ty.ContentItem] = list(thinking)
    message = ty.Message(
        role="assistant",
        content=text if text or not calls else None,
        content_items=items or None,
        tool_calls=calls or None,
    )
    joined = "".join(t.thinking for t in thinking)
    return ModelResponse(
        message=message,
        usage=usage,
        thinking=joined or None,
        finish_reason=_finish(stop_reason, bool(calls), structured is not None),
        model=model if isinstance(model, str) else None,
    )


def parse_message(data: Any, structured: str | None = None) -> ModelResponse:
    """A Messages API ``message`` object as a ModelResponse.

    Args:
        data: The parsed response body.
        structured: The structured-output tool name, whose input becomes the
            answer text instead of a tool call.
    """
    if not isinstance(data, dict) or not isinstance(data.get("content"), list):
        if isinstance(data, dict) and data.get("type") == "error":
            error = data.get("error") or {}
            raise ProviderError(f"{_NAME}: {error.get('type')}: {error.get('message')}")
        raise ProviderError(f"{_NAME}: unexpected response shape (no content list)")
    text: list[str] = []
    calls: list[ty.ToolInvocation] = []
    thinking: list[ty.ThinkingContent] = []
    for block in data["content"]:
        kind = block.get("type")
        if kind == "text":
            text.append(block.get("text") or "")
        elif kind == "tool_use" and block.get("name") == structured:
            text.append(orjson.dumps(block.get("input") or {}).decode())
        elif kind == "tool_use":
            arguments = orjson.dumps(block.get("input") or {}).decode()
            calls.append(ty.ToolInvocation(id=block["id"], name=block["name"], arguments=arguments))
        elif kind in ("thinking", "redacted_thinking"):
            thinking.append(_thinking_item(block))
    return _assemble(
        "".join(text),
        calls,
        thinking,
        _usage(data.get("usage")),
        data.get("stop_reason"),
        structured,
        data.get("model"),
    )


@attrs.define
class _Block:
    kind: str
    id: str = ""
    name: str = ""
    text: list[str] = attrs.Factory(list)
    signature: str | None = None
    data: str | None = None


@attrs.define
class _StreamState:
    """Follows one Messages stream: message_start ... message_stop."""

    structured: str | None
    blocks: dict[int, _Block] = attrs.Factory(dict)
    usage: ty.UsageStats | None = None
    stop_reason: str | None = None
    model: str | None = None
    started: bool = False
    #: ``message_stop`` seen.
    ended: bool = False
    ending: ClassVar[str] = "message_stop"

    def feed_sse(self, data: str) -> list[Event]:
        """Absorb one event's JSON data; what follows ``message_stop`` is ignored."""
        return [] if self.ended else self.feed(load_json(_NAME, data))

    def feed(self, data: Any) -> list[Event]:
        """Absorb one stream event's data; return the UAMP events it carries."""
        if not isinstance(data, dict):
            raise ProviderError(f"{_NAME}: stream event is not an object")
        kind = data.get("type")
        if kind == "error":
            error = data.get("error") or {}
            etype = error.get("type")
            raise ProviderError(
                f"{_NAME}: error in stream: {etype}: {error.get('message')}",
                retryable=etype in _RETRYABLE_ERRORS,
            )
        if kind == "message_start":
            message = data.get("message") or {}
            self.started = True
            self.model = message.get("model")
            self.usage = _usage(message.get("usage"))
        elif kind == "content_block_start":
            return self._start(data.get("index", len(self.blocks)), data.get("content_block") or {})
        elif kind == "content_block_delta":
            return self._delta(data.get("index", 0), data.get("delta") or {})
        elif kind == "message_delta":
            delta = data.get("delta") or {}
            if delta.get("stop_reason"):
                self.stop_reason = delta["stop_reason"]
            self._merge_usage(data.get("usage"))
        elif kind == "message_stop":
            self.ended = True
        return []  # ping, content_block_stop and future event types

    def _merge_usage(self, raw: Any) -> None:
        # message_delta usage is cumulative; fields it omits keep their
        # message_start values.
        if not isinstance(raw, dict):
            return
        before = self.usage or ty.UsageStats()
        merged = {
            "input_tokens": before.input_tokens,
            "output_tokens": before.output_tokens,
        }
        update = _usage(raw)
        if update is None:
            return
        if update.input_tokens is not None:
            merged["input_tokens"] = update.input_tokens
        if update.output_tokens is not None:
            merged["output_tokens"] = update.output_tokens
        cached = update.cached_tokens if update.cached_tokens is not None else before.cached_tokens
        inp, out = merged["input_tokens"], merged["output_tokens"]
        self.usage = ty.UsageStats(
            input_tokens=inp,
            output_tokens=out,
            total_tokens=inp + out if inp is not None and out is not None else None,
            cached_tokens=cached,
        )

    def _start(self, index: int, block: Mapping[str, Any]) -> list[Event]:
        kind = str(block.get("type"))
        state = _Block(kind=kind, id=block.get("id") or "", name=block.get("name") or "")
        self.blocks[index] = state
        if kind == "text" and block.get("text"):
            state.text.append(block["text"])
            return [ResponseDelta(delta=ty.DeltaText(text=block["text"]))]
        if kind == "tool_use" and state.name != self.structured:
            fragment = ty.ToolCallFragment(id=state.id, name=state.name)
            return [ResponseDelta(delta=ty.DeltaToolCall(tool_call=fragment))]
        if kind == "redacted_thinking":
            state.data = block.get("data")
            return [Thinking(content="", redacted=True, is_delta=True)]
        if kind == "thinking" and block.get("thinking"):
            state.text.append(block["thinking"])
            return [Thinking(content=block["thinking"], is_delta=True)]
        return []

    def _delta(self, index: int, delta: Mapping[str, Any]) -> list[Event]:
        block = self.blocks.get(index)
        if block is None:
            raise ProviderError(f"{_NAME}: delta for unknown content block {index}")
        kind = delta.get("type")
        if kind == "text_delta":
            text = delta.get("text") or ""
            block.text.append(text)
            return [ResponseDelta(delta=ty.DeltaText(text=text))] if text else []
        if kind == "input_json_delta":
            fragment = delta.get("partial_json") or ""
            block.text.append(fragment)
            if not fragment:
                return []
            if block.name == self.structured:
                # The unwrapped structured answer streams as text (spec 8.3).
                return [ResponseDelta(delta=ty.DeltaText(text=fragment))]
            call = ty.ToolCallFragment(id=block.id, arguments=fragment)
            return [ResponseDelta(delta=ty.DeltaToolCall(tool_call=call))]
        if kind == "thinking_delta":
            thought = delta.get("thinking") or ""
            block.text.append(thought)
            return [Thinking(content=thought, is_delta=True)] if thought else []
        if kind == "signature_delta":
            block.signature = delta.get("signature")
        return []

    def result(self) -> ModelResponse:
        """The assembled ModelResponse."""
        text: list[str] = []
        calls: list[ty.ToolInvocation] = []
        thinking: list[ty.ThinkingContent] = []
        for _, block in sorted(self.blocks.items()):
            joined = "".join(block.text)
            if block.kind == "text":
                text.append(joined)
            elif block.kind == "tool_use" and block.name == self.structured:
                text.append(joined or "{}")
            elif block.kind == "tool_use":
                calls.append(
                    ty.ToolInvocation(id=block.id, name=block.name, arguments=joined or "{}")
                )
            elif block.kind == "thinking":
                extra = {"signature": block.signature} if block.signature else {}
                thinking.append(ty.ThinkingContent(thinking=joined, unknown=extra))
            elif block.kind == "redacted_thinking":
                thinking.append(
                    ty.ThinkingContent(thinking="", redacted=True, unknown={"data": block.data})
                )
        return _assemble(
            "".join(text),
            calls,
            thinking,
            self.usage,
            self.stop_reason,
            self.structured,
            self.model,
        )
