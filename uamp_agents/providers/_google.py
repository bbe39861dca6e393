"""Google Gemini provider (Generative Language API).

Speaks ``POST {base_url}/models/{model}:generateContent`` and
``:streamGenerateContent?alt=sse`` with the ``x-goog-api-key`` header.

Mapping (uamp -> wire):

* ``role="system"`` messages become ``systemInstruction``; ``user`` stays
  ``user``, ``assistant`` becomes ``model``.
* Text is a ``text`` part; media is ``inlineData`` (base64) or ``fileData``
  (URL) with its MIME type -- images, audio, video and files alike.
* Assistant tool calls are ``functionCall`` parts (arguments parsed into
  ``args``); tool results are ``functionResponse`` parts in a ``user`` turn,
  named after the call they answer (Gemini matches results by name and
  order, so the name is looked up from the earlier call's id).
  Consecutive turns of one role are merged, so parallel results travel
  together.
* Gemini 2.5+/3 attach a ``thoughtSignature`` to function-call parts; it is
  kept in the ``ToolInvocation``'s ``unknown`` bag as ``thought_signature``
  and sent back with the call, as the API requires.
* ``tools`` -> one ``functionDeclarations`` tool; ``tool_choice`` ->
  ``toolConfig.functionCallingConfig`` (``auto`` -> AUTO, ``none`` -> NONE,
  ``required`` -> ANY, a named function -> ANY + ``allowedFunctionNames``).
* ``response_format`` (spec 8.3): ``json_object`` -> ``responseMimeType:
  application/json``; ``json_schema`` adds ``responseSchema``. Schemas are
  trimmed of JSON Schema keywords Gemini's OpenAPI-style schema rejects
  (``additionalProperties``, ``$schema``...).
* Sampling parameters take their Gemini names in ``generationConfig``
  (``max_tokens`` -> ``maxOutputTokens``, ``top_p`` -> ``topP``,
  ``stop`` -> ``stopSequences`` ...).

Mapping (wire -> uamp): parts with ``thought: true`` are thinking (asked for
with ``thinkingConfig.includeThoughts``). ``usageMetadata``:
``promptTokenCount`` -> ``input_tokens`` (includes cached, spec 8.7),
``candidatesTokenCount + thoughtsTokenCount`` -> ``output_tokens`` (thinking
is billed as output, as OpenAI counts reasoning tokens),
``cachedContentTokenCount`` -> ``cached_tokens``. Finish reasons: STOP ->
``stop`` (``tool_calls`` when the answer calls functions), MAX_TOKENS ->
``length``, SAFETY/RECITATION/BLOCKLIST/PROHIBITED_CONTENT/SPII ->
``content_filter``.

Gemini's event stream has no terminal marker: each ``data:`` chunk is a
whole ``GenerateContentResponse`` and the connection closes after the last.
A stream that ends without any chunk carrying a ``finishReason`` (or a
``promptFeedback.blockReason``) is treated as cut.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator, Mapping
from typing import Any, ClassVar, Unpack

import attrs
import orjson

from uamp_proto import types as ty
from uamp_proto.events import Event, ResponseDelta, Thinking

from ._http import HTTPOptions, HTTPProvider, connect, load_json
from ._wire import (
    MediaItem,
    add_counts,
    arguments_object,
    finish_reason,
    json_arguments,
    media_ref,
    merge_params,
    parse_json_object,
    schema_of,
    split_message,
    system_and_turns,
    wire_tool_choice,
)
from .base import ModelRequest, ModelResponse, ProviderError, ProviderEvent

__all__ = ["GoogleProvider", "google"]

_NAME = "google"

_FINISH = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "SAFETY": "content_filter",
    "RECITATION": "content_filter",
    "BLOCKLIST": "content_filter",
    "PROHIBITED_CONTENT": "content_filter",
    "SPII": "content_filter",
    "IMAGE_SAFETY": "content_filter",
}

#: uamp/OpenAI-style parameter names -> ``generationConfig`` names.
_GENERATION_NAMES = {
    "max_tokens": "maxOutputTokens",
    "max_completion_tokens": "maxOutputTokens",
    "max_output_tokens": "maxOutputTokens",
    "top_p": "topP",
    "top_k": "topK",
    "stop": "stopSequences",
    "presence_penalty": "presencePenalty",
    "frequency_penalty": "frequencyPenalty",
    "n": "candidateCount",
    "response_logprobs": "responseLogprobs",
}

#: uamp ``tool_choice`` strings -> ``functionCallingConfig.mode``.
_CALLING_MODES = {"auto": "AUTO", "none": "NONE", "required": "ANY", "any": "ANY"}

#: Parameters that belong at the top of the body, not in generationConfig.
_TOP_LEVEL = frozenset({"safetySettings", "cachedContent", "labels"})

#: JSON Schema keywords Gemini's ``Schema`` object does not accept.
_SCHEMA_DROP = frozenset({"$schema", "$id", "$comment", "additionalProperties", "strict"})


def google(
    model: str = "gemini-2.5-flash",
    *,
    api_key: str | None = None,
    base_url: str = "https://generativelanguage.googleapis.com/v1beta",
    thinking: bool | int | Mapping[str, Any] | None = None,
    params: Mapping[str, Any] | None = None,
    **options: Unpack[HTTPOptions],
) -> GoogleProvider:
    """A Gemini provider.

    Args:
        model: Default model name (a request may override it).
        api_key: Defaults to ``$GEMINI_API_KEY``, then ``$GOOGLE_API_KEY``.
        base_url: API root including the version.
        thinking: ``True`` to receive thought summaries, a token budget
            (``thinkingBudget``), or a raw ``thinkingConfig`` object.
        params: Default generation parameters; uamp/OpenAI names are
            translated, Gemini names pass through; ``safetySettings`` and
            ``cachedContent`` go to the top level of the body.
        **options: Connection options (:class:`~._http.HTTPOptions`:
            ``timeout``, ``max_retries``, ``retry_base_delay``,
            ``retry_max_delay``, ``headers``, ``http_client``).
    """
    key = api_key
    if key is None:
        key = os.environ.get("GEMINI_API_KEY") or os.environ.get("GOOGLE_API_KEY")
    all_headers: dict[str, str] = {}
    if key:
        all_headers["x-goog-api-key"] = key
    http, policy = connect(_NAME, base_url=base_url, own_headers=all_headers, **options)
    thinking_config: dict[str, Any] | None
    if thinking is None or thinking is False:
        thinking_config = None
    elif thinking is True:
        thinking_config = {"includeThoughts": True}
    elif isinstance(thinking, int):
        thinking_config = {"includeThoughts": True, "thinkingBudget": thinking}
    else:
        thinking_config = dict(thinking)
    return GoogleProvider(
        model=model, http=http, policy=policy, thinking=thinking_config, params=dict(params or {})
    )


class GoogleProvider(HTTPProvider):
    """A :class:`~uamp_agents.providers.base.Provider` for Gemini."""

    provider_name = _NAME

    def _path(self, request: ModelRequest, method: str) -> str:
        model = request.model or self._model
        model = model.removeprefix("models/")
        return f"models/{model}:{method}"

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        """The ``GenerateContentRequest`` body for ``request``."""
        names = {c.id: c.name for m in request.messages for c in split_message(m).tool_calls}
        system, contents = system_and_turns(
            request.messages, lambda message: _wire_content(message, names), "parts"
        )

        body: dict[str, Any] = {"contents": contents}
        if system:
            body["systemInstruction"] = {"parts": [{"text": "\n\n".join(system)}]}
        if request.tools:
            body["tools"] = [{"functionDeclarations": [_wire_function(t) for t in request.tools]}]
        tool_config = wire_tool_choice(
            _NAME,
            request.tool_choice,
            _CALLING_MODES,
            mode=lambda mode: {"functionCallingConfig": {"mode": mode}},
            named=lambda name: {
                "functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": [name]}
            },
        )
        if tool_config is not None:
            body["toolConfig"] = tool_config

        generation: dict[str, Any] = {}
        for key, value in merge_params(self._params, request.params).items():
            if key in _TOP_LEVEL:
                body[key] = value
            elif key == "thinking":
                generation["thinkingConfig"] = value
            else:
                generation[_GENERATION_NAMES.get(key, key)] = value
        if isinstance(generation.get("stopSequences"), str):
            generation["stopSequences"] = [generation["stopSequences"]]
        if self._thinking is not None:
            generation.setdefault("thinkingConfig", self._thinking)
        _apply_response_format(generation, request.response_format)
        if generation:
            body["generationConfig"] = generation
        return body

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Call the model once (with retries) and return its whole response."""
        body = self.build_body(request)
        path = self._path(request, "generateContent")
        return parse_response(await self.call_json(path, body))

    def stream(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        """Stream the model's events, then one ModelResponse."""
        body = self.build_body(request)
        path = self._path(request, "streamGenerateContent") + "?alt=sse"
        return self.stream_events(lambda: self.read_stream(path, body, _StreamState()))


# --- Request mapping ------------------------------------------------------------


def clean_schema(schema: Any) -> Any:
    """A copy of a JSON Schema without the keywords Gemini's Schema rejects."""
    if isinstance(schema, list):
        return [clean_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _SCHEMA_DROP:
            continue
        if key == "properties" and isinstance(value, dict):
            # Keys here are property names, not keywords: keep them all.
            out[key] = {name: clean_schema(sub) for name, sub in value.items()}
        else:
            out[key] = clean_schema(value)
    return out


def _wire_function(tool: ty.ToolDefinition) -> dict[str, Any]:
    fn = tool.function
    out: dict[str, Any] = {"name": fn.name}
    if fn.description is not None:
        out["description"] = fn.description
    if fn.parameters and fn.parameters.get("properties"):
        out["parameters"] = clean_schema(fn.parameters)
    return out


def _apply_response_format(generation: dict[str, Any], fmt: ty.ResponseFormat | None) -> None:
    if fmt is None or fmt.type == "text":
        return
    generation["responseMimeType"] = "application/json"
    if fmt.type == "json_schema":
        generation["responseSchema"] = clean_schema(schema_of(fmt)[1])


def _wire_part(item: ty.TextContent | MediaItem) -> dict[str, Any]:
    if isinstance(item, ty.TextContent):
        return {"text": item.text}
    ref = media_ref(item)
    if ref.url is not None:
        return {"fileData": {"mimeType": ref.mime_type, "fileUri": ref.url}}
    return {"inlineData": {"mimeType": ref.mime_type, "data": ref.data}}


def _wire_response(result: ty.ToolOutput, name: str) -> dict[str, Any]:
    if result.is_error:
        payload: dict[str, Any] = {"error": result.result}
    else:
        payload = parse_json_object(result.result) or {"result": result.result}
    return {"functionResponse": {"name": name, "response": payload}}


def _wire_content(message: ty.Message, names: dict[str, str]) -> tuple[str, list[dict[str, Any]]]:
    """One uamp message as (role, parts)."""
    parts = split_message(message)
    out: list[dict[str, Any]] = [
        _wire_part(i) for i in parts.content if not (isinstance(i, ty.TextContent) and not i.text)
    ]
    if message.role == "assistant":
        for call in parts.tool_calls:
            part: dict[str, Any] = {
                "functionCall": {"name": call.name, "args": arguments_object(call)}
            }
            signature = call.unknown.get("thought_signature")
            if isinstance(signature, str):
                part["thoughtSignature"] = signature
            out.append(part)
        return "model", out
    for result in parts.tool_results:
        name = names.get(result.call_id) or message.name or result.call_id
        out.append(_wire_response(result, name))
    return "user", out


# --- Response mapping -----------------------------------------------------------


def _usage(raw: Any) -> ty.UsageStats | None:
    if not isinstance(raw, dict):
        return None
    inp = raw.get("promptTokenCount")
    out = add_counts(raw.get("candidatesTokenCount"), raw.get("thoughtsTokenCount"))
    total = raw.get("totalTokenCount")
    if isinstance(inp, int) and isinstance(out, int):
        total = inp + out
    return ty.UsageStats(
        input_tokens=inp,
        output_tokens=out,
        total_tokens=total,
        cached_tokens=raw.get("cachedContentTokenCount"),
    )


def _new_call_id() -> str:
    # Gemini usually gives calls no id; uamp needs one to pair results.
    return f"call_{secrets.token_hex(8)}"


def _invocation(part: Mapping[str, Any]) -> ty.ToolInvocation:
    call = part["functionCall"]
    extra: dict[str, Any] = {}
    if isinstance(part.get("thoughtSignature"), str):
        extra["thought_signature"] = part["thoughtSignature"]
    return ty.ToolInvocation(
        id=call.get("id") or _new_call_id(),
        name=call.get("name") or "",
        arguments=json_arguments(call.get("args")),
        unknown=extra,
    )


@attrs.define
class _StreamState:
    """Accumulates ``GenerateContentResponse`` chunks (one chunk = whole reply too)."""

    text: list[str] = attrs.Factory(list)
    thinking: list[str] = attrs.Factory(list)
    calls: list[ty.ToolInvocation] = attrs.Factory(list)
    finish: str | None = None
    usage: ty.UsageStats | None = None
    model: str | None = None

    ending: ClassVar[str] = "a chunk with a finishReason"

    @property
    def ended(self) -> bool:
        """Whether a chunk gave a finish reason (or a block reason)."""
        return self.finish is not None

    def feed_sse(self, data: str) -> list[Event]:
        """Absorb one event's JSON data (a whole response chunk)."""
        return self.feed(load_json(_NAME, data))

    def feed(self, data: Any) -> list[Event]:
        """Absorb one response chunk; return the UAMP events it carries."""
        if isinstance(data, list) and len(data) == 1:
            data = data[0]
        if not isinstance(data, dict):
            raise ProviderError(f"{_NAME}: response chunk is not an object")
        if isinstance(data.get("error"), dict):
            error = data["error"]
            raise ProviderError(
                f"{_NAME}: error in stream: {error.get('status')}: {error.get('message')}",
                retryable=error.get("code") in (429, 500, 503),
            )
        if isinstance(data.get("modelVersion"), str):
            self.model = data["modelVersion"]
        usage = _usage(data.get("usageMetadata"))
        if usage is not None:
            self.usage = usage  # cumulative: the last one is the total
        events: list[Event] = []
        candidates = data.get("candidates") or []
        if not candidates:
            feedback = data.get("promptFeedback") or {}
            if feedback.get("blockReason"):
                self.finish = "SAFETY"
            return events
        candidate = candidates[0]
        for part in (candidate.get("content") or {}).get("parts") or []:
            if "functionCall" in part:
                call = _invocation(part)
                self.calls.append(call)
                fragment = ty.ToolCallFragment(id=call.id, name=call.name, arguments=call.arguments)
                events.append(ResponseDelta(delta=ty.DeltaToolCall(tool_call=fragment)))
            elif isinstance(part.get("text"), str) and part["text"]:
                if part.get("thought"):
                    self.thinking.append(part["text"])
                    events.append(Thinking(content=part["text"], is_delta=True))
                else:
                    self.text.append(part["text"])
                    events.append(ResponseDelta(delta=ty.DeltaText(text=part["text"])))
        if candidate.get("finishReason"):
            self.finish = candidate["finishReason"]
        return events

    def result(self) -> ModelResponse:
        """The assembled ModelResponse."""
        text = "".join(self.text)
        message = ty.Message(
            role="assistant",
            content=text if text or not self.calls else None,
            tool_calls=list(self.calls) or None,
        )
        return ModelResponse(
            message=message,
            usage=self.usage,
            thinking="".join(self.thinking) or None,
            finish_reason=finish_reason(
                self.finish, _FINISH, calls=bool(self.calls), call_reasons=(None, "STOP")
            ),
            model=self.model,
        )


def parse_response(data: Any) -> ModelResponse:
    """A whole ``GenerateContentResponse`` as a ModelResponse."""
    if not isinstance(data, dict | list):
        raise ProviderError(f"{_NAME}: unexpected response shape")
    state = _StreamState()
    state.feed(data)
    if isinstance(data, dict) and not data.get("candidates") and state.finish is None:
        raise ProviderError(
            f"{_NAME}: unexpected response shape (no candidates): "
            f"{orjson.dumps(data)[:200].decode('utf-8', 'replace')}"
        )
    return state.result()
