"""OpenAI Chat Completions <-> UAMP, as pure functions (UAMP section 13.3).

Requests: :func:`parse_request` validates a ``POST /chat/completions`` body
and turns it into a :class:`~uamp_proto.responder.TurnRequest`. Content parts map
to UAMP content items (section 8.5.1): ``text`` -> text, ``image_url`` ->
image (a ``data:`` URL becomes base64 plus ``format``, any other URL a
``{"url"}`` reference), ``input_audio`` -> audio, ``file`` (inline
``file_data``) -> file. Assistant ``tool_calls`` (OpenAI's nested form) become
:class:`~uamp_proto.types.ToolInvocation`; ``developer`` messages are treated
as ``system``. Bad input raises :class:`CompletionsError`, which carries the
HTTP status and OpenAI's error JSON.

Responses: :func:`completion_response` builds a ``chat.completion`` object;
:class:`ChunkEncoder` turns the UAMP events of one response into
``chat.completion.chunk`` objects (role first, text as ``delta.content``,
client tool calls as ``delta.tool_calls`` with ``index``/``id``/``type``/
``function.name`` then argument fragments, a finishing chunk with
``finish_reason``, and a usage chunk with empty ``choices`` when
``stream_options.include_usage`` asked for one). Nothing here reads the clock
or makes ids: ``created`` and the completion id are arguments.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs
import orjson

from .. import _fastinit
from .. import events as ev
from .. import types as ty
from ..codec import DecodeError, from_dict, unstructure
from ..errors import UampError
from ..outcome import ResponseOutcome
from ..payment import BALANCE_EVENT, balance_fields
from ..principal import ANONYMOUS, Principal
from ..responder import TurnRequest
from ..signing import response_signature_event
from ..sse import encode_json
from ._tools import ToolFormError, kind_of, parse_tool_call, parse_tool_choice, parse_tools

__all__ = [
    "SSE_DONE",
    "STATUS_FOR_CODE",
    "ChunkEncoder",
    "CompletionRequest",
    "CompletionsError",
    "body_object",
    "completion_response",
    "error_object",
    "finish_reason_for",
    "model_object",
    "outcome_error",
    "outcome_reply",
    "output_items",
    "parse_request",
    "payment_error",
    "server_rounds",
    "splice_server_rounds",
    "sse_data",
    "stream_tail",
    "usage_object",
]

#: The terminating SSE frame of a streamed completion.
SSE_DONE = b"data: [DONE]\n\n"
# A text that cannot come out of a chunk's other fields once JSON-encoded
# (control characters are escaped), used to cut the text chunk template.
_PROBE = "\x00uamp-text\x00"
_PROBE_JSON = orjson.dumps(_PROBE)

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
#: The HTTP status of a turn that failed with a UAMP error code (the
#: caller's fault); other codes are the server's (500).
STATUS_FOR_CODE = {
    "invalid_request": 400,
    "unauthorized": 401,
    "payment_required": 402,
    "insufficient_balance": 402,
    "forbidden": 403,
    "not_found": 404,
    "rate_limited": 429,
    "rate_limit_exceeded": 429,
    "timeout": 504,
    # The response's output reached the server's bound (docs/security.md):
    # not a 5xx, which the OpenAI and Anthropic SDKs retry into the same bound.
    "output_too_large": 400,
}
_RESPONSE_FORMATS = frozenset({"text", "json_object", "json_schema"})
_DATA_URL = re.compile(
    r"^data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<params>(;[^,;]*)*?);base64,(?P<data>.*)$", re.DOTALL
)


@attrs.define(auto_exc=True)
class CompletionsError(UampError):
    """An invalid Chat Completions request, with the reply it deserves.

    Attributes:
        status: HTTP status (400 for invalid input).
        message: What is wrong, naming the parameter.
        param: The offending parameter path (``messages[1].content``), if any.
        code: OpenAI-style code (``invalid_value``, ``missing_required_parameter``...).
        type: OpenAI error type.
    """

    message: str
    param: str | None = attrs.field(default=None, kw_only=True)
    code: str = attrs.field(default="invalid_value", kw_only=True)
    status: int = attrs.field(default=400, kw_only=True)
    type: str = attrs.field(default="invalid_request_error", kw_only=True)

    def body(self) -> dict[str, Any]:
        """OpenAI's error JSON: ``{"error": {"message", "type", "param", "code"}}``."""
        return error_object(self.message, code=self.code, param=self.param, type=self.type)


def error_object(
    message: str,
    *,
    code: str | None,
    param: str | None = None,
    type: str = "invalid_request_error",
) -> dict[str, Any]:
    """The OpenAI error object."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def payment_error(accepts: list[dict[str, Any]], details: Mapping[str, Any]) -> dict[str, Any]:
    """The 402 body of an unpaid request: OpenAI's error object, with the offer.

    ``error.code`` is why (``payment_required``, ``insufficient_balance`` ...),
    ``error.accepts`` the payment options, and the other ``details``
    (balances) sit beside them. Spec 004's own members (``status_code``,
    ``context.accepts``) are there too, for clients written from that page.
    """
    code = str(details.get("code") or "payment_required")
    reason = details.get("message")
    message = f"Payment required: {reason}" if reason else "Payment required."
    body = error_object(message, code=code, type="payment_required")
    extra = {k: v for k, v in details.items() if k not in ("code", "message")}
    body["error"].update(extra, accepts=accepts)
    body["status_code"] = 402
    body["context"] = {"accepts": accepts}
    return body


@attrs.frozen(kw_only=True)
class CompletionRequest:
    """A validated Chat Completions request.

    Attributes:
        turn: What the agent is asked (messages, tools, tool choice...).
        model: The ``model`` the client named, if any.
        stream: Whether to answer with SSE chunks.
        include_usage: ``stream_options.include_usage``.
        max_tokens: ``max_completion_tokens`` or ``max_tokens``, if given.
    """

    turn: TurnRequest
    model: str | None
    stream: bool
    include_usage: bool
    max_tokens: int | None


# --- request parsing -----------------------------------------------------------


def _fail(message: str, param: str | None, code: str = "invalid_value") -> CompletionsError:
    return CompletionsError(message, param=param, code=code)


def _expect_str(value: object, param: str) -> str:
    if not isinstance(value, str):
        raise _fail(f"'{param}' must be a string, got {kind_of(value)}.", param, "invalid_type")
    return value


def _expect_obj(value: object, param: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(f"'{param}' must be an object, got {kind_of(value)}.", param, "invalid_type")
    return value


def _required(obj: Mapping[str, Any], key: str, param: str) -> Any:
    if key not in obj or obj[key] is None:
        raise _fail(f"Missing required parameter: '{param}'.", param, "missing_required_parameter")
    return obj[key]


def _media(url: str) -> tuple[ty.Media, str | None]:
    """A data URL becomes ``(base64, subtype)``, any other URL a reference."""
    m = _DATA_URL.match(url)
    if m is None:
        return ty.MediaURL(url=url), None
    mime = m.group("mime") or ""
    return m.group("data"), (mime.split("/", 1)[1] if "/" in mime else None)


def _part(part: object, param: str, role: str) -> ty.ContentItem:
    obj = _expect_obj(part, param)
    kind = _expect_str(_required(obj, "type", f"{param}.type"), f"{param}.type")
    if kind == "text" or (kind == "refusal" and role == "assistant"):
        key = "text" if kind == "text" else "refusal"
        return ty.TextContent(
            text=_expect_str(_required(obj, key, f"{param}.{key}"), f"{param}.{key}")
        )
    if role in ("assistant", "system", "developer", "tool"):
        raise _fail(
            f"'{param}.type' must be 'text' in a {role} message, got {kind!r}.", f"{param}.type"
        )
    if kind == "image_url":
        spec = _expect_obj(_required(obj, "image_url", f"{param}.image_url"), f"{param}.image_url")
        url = _expect_str(
            _required(spec, "url", f"{param}.image_url.url"), f"{param}.image_url.url"
        )
        detail = spec.get("detail")
        if detail is not None and detail not in ("auto", "low", "high"):
            raise _fail(
                f"'{param}.image_url.detail' must be 'auto', 'low' or 'high'.",
                f"{param}.image_url.detail",
            )
        image, fmt = _media(url)
        return ty.ImageContent(image=image, format=fmt, detail=detail)
    if kind == "input_audio":
        spec = _expect_obj(
            _required(obj, "input_audio", f"{param}.input_audio"), f"{param}.input_audio"
        )
        data = _expect_str(
            _required(spec, "data", f"{param}.input_audio.data"), f"{param}.input_audio.data"
        )
        fmt = _expect_str(
            _required(spec, "format", f"{param}.input_audio.format"), f"{param}.input_audio.format"
        )
        return ty.AudioContent(audio=data, format=fmt)
    if kind == "file":
        spec = _expect_obj(_required(obj, "file", f"{param}.file"), f"{param}.file")
        if "file_data" not in spec:
            if "file_id" in spec:
                raise _fail(
                    "File references by 'file_id' are not supported here; send the "
                    "file inline as 'file_data'.",
                    f"{param}.file.file_id",
                    "unsupported_value",
                )
            raise _fail(
                f"Missing required parameter: '{param}.file.file_data'.",
                f"{param}.file.file_data",
                "missing_required_parameter",
            )
        raw = _expect_str(spec["file_data"], f"{param}.file.file_data")
        m = _DATA_URL.match(raw)
        mime = (m.group("mime") if m else None) or "application/octet-stream"
        data = m.group("data") if m else raw
        name = spec.get("filename")
        filename = _expect_str(name, f"{param}.file.filename") if name is not None else "file"
        return ty.FileContent(file=data, filename=filename, mime_type=mime)
    raise _fail(
        f"'{param}.type' {kind!r} is not supported; use 'text', 'image_url', 'input_audio' "
        "or 'file'.",
        f"{param}.type",
    )


def _tool_error(exc: ToolFormError) -> CompletionsError:
    return CompletionsError(exc.message, param=exc.param, code=exc.code)


#: Roles whose message may be just ``role`` and a string ``content``.
_PLAIN_ROLES = frozenset({"system", "developer", "user", "assistant"})
#: Optional request keys checked by :func:`_tuning` (most requests have none).
_TUNING_KEYS = frozenset(
    {
        "temperature",
        "top_p",
        "presence_penalty",
        "frequency_penalty",
        "max_completion_tokens",
        "max_tokens",
        "user",
        "seed",
        "stop",
        "parallel_tool_calls",
        "metadata",
    }
)


def _content_items(value: object, param: str) -> list[ty.ContentItem]:
    """A message's ``content_items`` (UAMP 8.4 items, passed through as they are)."""
    if not isinstance(value, list):
        raise _fail(f"'{param}' must be an array.", param, "invalid_type")
    try:
        message = from_dict(ty.Message, {"role": "user", "content_items": value})
    except DecodeError as exc:
        detail = exc.message.removeprefix("Message: ").replace("'content_items", f"'{param}")
        raise _fail(f"Invalid '{param}': {detail}", param) from None
    return list(message.content_items or ())


def output_items(output: Sequence[ty.ContentItem]) -> list[dict[str, Any]] | None:
    """A response's ``content_items`` for the assistant message (UAMP 8.5.1).

    The text and media items of the output, in order, as UAMP writes them
    (tool traffic stays out: Chat Completions has its own fields for it);
    ``None`` when the output is text alone, which ``content`` says already.
    """
    kept = [i for i in output if isinstance(i, _MESSAGE_ITEMS)]
    if all(type(i) is ty.TextContent for i in kept):
        return None
    return [unstructure(i) for i in kept]


#: The content items an assistant message carries in ``content_items``.
_MESSAGE_ITEMS = (
    ty.TextContent,
    ty.ImageContent,
    ty.AudioContent,
    ty.VideoContent,
    ty.FileContent,
    ty.UnknownContent,
)


def _message(value: object, index: int) -> ty.Message:
    if type(value) is dict and len(value) == 2:
        # The usual message, {"role": ..., "content": "text"}: nothing else to check.
        role = value.get("role")
        content = value.get("content")
        if type(content) is str and type(role) is str and role in _PLAIN_ROLES:
            return _plain_message("system" if role == "developer" else role, content)
    param = f"messages[{index}]"
    obj = _expect_obj(value, param)
    role = _expect_str(_required(obj, "role", f"{param}.role"), f"{param}.role")
    if role not in _ROLES:
        raise _fail(
            f"'{param}.role' must be one of system, developer, user, assistant, tool; "
            f"got {role!r}.",
            f"{param}.role",
        )
    content = obj.get("content")
    text: str | None = None
    items: list[ty.ContentItem] | None = None
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        items = [_part(p, f"{param}.content[{i}]", role) for i, p in enumerate(content)]
        text = "".join(i.text for i in items if isinstance(i, ty.TextContent))
        if all(isinstance(i, ty.TextContent) for i in items):
            items = None  # plain text in parts: the string form says it all
    elif content is not None:
        raise _fail(
            f"'{param}.content' must be a string or an array of content parts.",
            f"{param}.content",
            "invalid_type",
        )
    raw_items = obj.get("content_items")
    if raw_items is not None:
        # UAMP 8.5: content_items take precedence for media; content keeps the text.
        items = _content_items(raw_items, f"{param}.content_items")
        if text is None:
            text = "".join(i.text for i in items if isinstance(i, ty.TextContent)) or None
    name = obj.get("name")
    if name is not None:
        _expect_str(name, f"{param}.name")
    tool_calls: list[ty.ToolInvocation] | None = None
    tool_call_id: str | None = None
    if role == "assistant":
        raw_calls = obj.get("tool_calls")
        if raw_calls is not None:
            if not isinstance(raw_calls, list):
                raise _fail(
                    f"'{param}.tool_calls' must be an array.", f"{param}.tool_calls", "invalid_type"
                )
            try:
                tool_calls = [
                    parse_tool_call(c, f"{param}.tool_calls[{i}]") for i, c in enumerate(raw_calls)
                ] or None
            except ToolFormError as exc:
                raise _tool_error(exc) from None
        if text is None and tool_calls is None:
            raise _fail(
                f"'{param}' needs 'content' or 'tool_calls'.",
                f"{param}.content",
                "missing_required_parameter",
            )
    elif role == "tool":
        tool_call_id = _expect_str(
            _required(obj, "tool_call_id", f"{param}.tool_call_id"), f"{param}.tool_call_id"
        )
        if text is None:
            raise _fail(
                f"Missing required parameter: '{param}.content'.",
                f"{param}.content",
                "missing_required_parameter",
            )
    elif text is None:
        raise _fail(
            f"Missing required parameter: '{param}.content'.",
            f"{param}.content",
            "missing_required_parameter",
        )
    return ty.Message(
        role="system" if role == "developer" else role,
        content=text,
        content_items=items,
        name=name,
        tool_call_id=tool_call_id,
        tool_calls=tool_calls,
    )


def _response_format(value: object) -> ty.ResponseFormat | None:
    if value is None:
        return None
    obj = _expect_obj(value, "response_format")
    kind = _expect_str(_required(obj, "type", "response_format.type"), "response_format.type")
    if kind not in _RESPONSE_FORMATS:
        raise _fail(
            "'response_format.type' must be 'text', 'json_object' or 'json_schema'.",
            "response_format.type",
        )
    schema = None
    if kind == "json_schema":
        schema = _expect_obj(
            _required(obj, "json_schema", "response_format.json_schema"),
            "response_format.json_schema",
        )
    return ty.ResponseFormat(type=kind, json_schema=schema)


def _number(obj: Mapping[str, Any], key: str, lo: float, hi: float) -> float | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _fail(f"'{key}' must be a number, got {kind_of(value)}.", key, "invalid_type")
    if not lo <= value <= hi:
        raise _fail(f"'{key}' must be between {lo:g} and {hi:g}, got {value}.", key)
    return float(value)


def _int(obj: Mapping[str, Any], key: str, lo: int) -> int | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(f"'{key}' must be an integer, got {kind_of(value)}.", key, "invalid_type")
    if value < lo:
        raise _fail(f"'{key}' must be at least {lo}, got {value}.", key)
    return value


def _bool(obj: Mapping[str, Any], key: str) -> bool | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, bool):
        raise _fail(f"'{key}' must be a boolean, got {kind_of(value)}.", key, "invalid_type")
    return value


def body_object(body: bytes | str | Mapping[str, Any]) -> dict[str, Any]:
    """A request body as a JSON object (raw JSON, or already parsed).

    Raises:
        CompletionsError: Not JSON, or not an object.
    """
    if isinstance(body, bytes | str):
        try:
            parsed = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise CompletionsError(
                f"The request body is not valid JSON: {exc}", code="invalid_json"
            ) from None
    else:
        parsed = body
    if not isinstance(parsed, dict):
        raise _fail(
            f"The request body must be a JSON object, got {kind_of(parsed)}.", None, "invalid_type"
        )
    return parsed


def parse_request(
    body: bytes | str | Mapping[str, Any],
    *,
    agent: str,
    response_id: str,
    session_id: str,
    principal: Principal = ANONYMOUS,
) -> CompletionRequest:
    """Validate a Chat Completions request body and turn it into a turn.

    Args:
        body: The raw JSON body, or an already-parsed object.
        agent: The name of the agent addressed.
        response_id: The id of the response (also the completion id).
        session_id: A session id for the one-shot UAMP session the request
            stands for (section 13.3).
        principal: Who the request acts for (the turn's ``principal``).

    Returns:
        The validated request.

    Raises:
        CompletionsError: Invalid JSON, a missing or mistyped field, an
            unsupported value (``n`` other than 1, ``file_id`` parts...).
    """
    obj = body if type(body) is dict else body_object(body)
    raw_messages = obj.get("messages")
    if not isinstance(raw_messages, list):
        _required(obj, "messages", "messages")
        raise _fail("'messages' must be an array.", "messages", "invalid_type")
    if not raw_messages:
        raise _fail("'messages' must contain at least one message.", "messages")
    messages = []
    for i, m in enumerate(raw_messages):  # (a loop: a list comprehension is a call)
        messages.append(_message(m, i))
    model = obj.get("model")
    metadata: dict[str, Any] = {}
    if _SHAPING_KEYS.isdisjoint(obj):
        # The usual request, a model and messages: what the branch below
        # checks in the same order, without the parts that are not there.
        if model is not None:
            if type(model) is not str:
                _expect_str(model, "model")
            metadata["model"] = model
        raw = obj.get("stream")
        # (_bool raises for anything else.)
        stream = raw is True if raw is None or type(raw) is bool else bool(_bool(obj, "stream"))
        turn = _make_turn(
            agent, session_id, response_id, messages, [], None, None, metadata, principal, stream
        )
        return _make_request(turn, model, stream, False, None)
    try:
        tools = parse_tools(obj.get("tools"), "tools", openai_rules=True)
        tool_choice = parse_tool_choice(
            obj.get("tool_choice"), "tool_choice", names={t.function.name for t in tools}
        )
    except ToolFormError as exc:
        raise _tool_error(exc) from None
    response_format = _response_format(obj.get("response_format"))
    if model is not None:
        _expect_str(model, "model")
    n = _int(obj, "n", 1)
    if n is not None and n != 1:
        raise _fail(f"Only n=1 is supported, got n={n}.", "n", "unsupported_value")
    stream = bool(_bool(obj, "stream"))
    include_usage = False
    options = obj.get("stream_options")
    if options is not None:
        if not stream:
            raise _fail("'stream_options' is only allowed when 'stream' is true.", "stream_options")
        include_usage = bool(_bool(_expect_obj(options, "stream_options"), "include_usage"))
    if model is not None:
        metadata["model"] = model
    max_tokens = None if _TUNING_KEYS.isdisjoint(obj) else _tuning(obj, metadata)
    turn = _make_turn(
        agent,
        session_id,
        response_id,
        messages,
        tools,
        tool_choice,
        response_format,
        metadata,
        principal,
        stream,
    )
    return _make_request(turn, model, stream, include_usage, max_tokens)


#: The request keys that :func:`parse_request` checks besides ``model``,
#: ``messages`` and ``stream`` (a request without any takes its short way).
_SHAPING_KEYS = _TUNING_KEYS | {"tools", "tool_choice", "response_format", "n", "stream_options"}
#: ``TurnRequest(agent=..., ...)`` and ``CompletionRequest(turn=..., ...)``
#: with these fields, positionally (uamp_proto._fastinit.maker).
_make_turn = _fastinit.maker(
    TurnRequest,
    (
        "agent",
        "session_id",
        "response_id",
        "messages",
        "tools",
        "tool_choice",
        "response_format",
        "metadata",
        "principal",
        "streamed",
    ),
)
_make_request = _fastinit.maker(
    CompletionRequest, ("turn", "model", "stream", "include_usage", "max_tokens")
)
#: ``Message(role=..., content=...)``.
_plain_message = _fastinit.maker(ty.Message, ("role", "content"))


def _tuning(obj: Mapping[str, Any], metadata: dict[str, Any]) -> int | None:
    """Check the sampling and limit parameters into ``metadata``; returns ``max_tokens``."""
    for key, lo, hi in (
        ("temperature", 0.0, 2.0),
        ("top_p", 0.0, 1.0),
        ("presence_penalty", -2.0, 2.0),
        ("frequency_penalty", -2.0, 2.0),
    ):
        value = _number(obj, key, lo, hi)
        if value is not None:
            metadata[key] = value
    max_tokens = _int(obj, "max_completion_tokens", 1)
    if max_tokens is None:
        max_tokens = _int(obj, "max_tokens", 1)
    if max_tokens is not None:
        metadata["max_tokens"] = max_tokens
    for key in ("user", "seed", "stop", "parallel_tool_calls", "metadata"):
        if obj.get(key) is not None:
            metadata[key] = obj[key]
    return max_tokens


# --- responses -----------------------------------------------------------------


def usage_object(usage: ty.UsageStats | None) -> dict[str, Any]:
    """OpenAI's ``usage``: ``prompt_tokens``, ``completion_tokens``, ``total_tokens``."""
    prompt = (usage.input_tokens if usage else None) or 0
    completion = (usage.output_tokens if usage else None) or 0
    total = usage.total_tokens if usage and usage.total_tokens is not None else prompt + completion
    out: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": total,
    }
    if usage is not None and usage.cached_tokens is not None:
        out["prompt_tokens_details"] = {"cached_tokens": usage.cached_tokens}
    return out


def finish_reason_for(
    tool_calls: list[ty.ToolInvocation], usage: ty.UsageStats | None, max_tokens: int | None
) -> str:
    """``tool_calls`` if the agent asked for client tools, ``length`` if the
    reply used the whole ``max_tokens`` budget, else ``stop``."""
    if tool_calls:
        return "tool_calls"
    if (
        max_tokens is not None
        and usage is not None
        and usage.output_tokens is not None
        and usage.output_tokens >= max_tokens
    ):
        return "length"
    return "stop"


def _openai_call(call: ty.ToolInvocation) -> dict[str, Any]:
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }


def completion_response(
    *,
    completion_id: str,
    created: int,
    model: str,
    text: str,
    tool_calls: list[ty.ToolInvocation],
    finish_reason: str,
    usage: ty.UsageStats | None,
    reasoning: str | None = None,
    content_items: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A ``chat.completion`` object with one choice.

    ``content_items`` (see :func:`output_items`) go on the message as they
    are, UAMP 8.5's field next to OpenAI's ``content``.
    """
    message: dict[str, Any] = {
        "role": "assistant",
        "content": text if text or not tool_calls else None,
        "refusal": None,
    }
    if content_items:
        message["content_items"] = content_items
    if tool_calls:
        message["tool_calls"] = [_openai_call(c) for c in tool_calls]
    if reasoning:
        message["reasoning_content"] = reasoning
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
        ],
        "usage": usage_object(usage),
    }


class ChunkEncoder:
    """Turns one response's UAMP events into ``chat.completion.chunk`` objects.

    Call :meth:`start` first, :meth:`feed` with every event, then
    :meth:`finish`. Client tool calls (``tool.call`` events) are streamed the
    OpenAI way; ``thinking`` becomes ``delta.reasoning_content`` (the field
    OpenAI-compatible servers use for reasoning); audio becomes
    ``delta.content_items`` (UAMP 8.5.1); other events produce no chunk.
    Server-side tool traffic stays inside the agent.
    """

    def __init__(
        self, *, completion_id: str, created: int, model: str, include_usage: bool = False
    ) -> None:
        self.completion_id = completion_id
        self.created = created
        self.model = model
        self.include_usage = include_usage
        self._tool_index = 0
        # The SSE frame of a text chunk is the same bytes around the text
        # each time: render them once and splice the encoded text in.
        probe = orjson.dumps(self._chunk({"content": _PROBE}))
        self._text_frame: tuple[bytes, bytes] | None = None
        if probe.count(_PROBE_JSON) == 1:
            head, _, tail = probe.partition(_PROBE_JSON)
            self._text_frame = (b"data: " + head, tail + b"\n\n")

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        chunk: dict[str, Any] = {
            "id": self.completion_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            ],
        }
        if self.include_usage:
            chunk["usage"] = None
        return chunk

    def start(self) -> dict[str, Any]:
        """The first chunk: ``delta.role = "assistant"``."""
        return self._chunk({"role": "assistant", "content": ""})

    def feed(self, event: ev.Event | ev.UnknownEvent) -> list[dict[str, Any]]:
        """The chunks for one event (often none)."""
        if isinstance(event, ev.ResponseDelta):
            delta = event.delta
            if isinstance(delta, ty.DeltaText) and delta.text:
                return [self._chunk({"content": delta.text})]
            if isinstance(delta, ty.DeltaAudio) and delta.audio:
                # Media has no OpenAI delta field: UAMP's item, as the
                # non-streamed message's content_items carries it.
                item = {"type": "audio", "audio": delta.audio}
                return [self._chunk({"content_items": [item]})]
            return []
        if isinstance(event, ev.ToolCall):
            index = self._tool_index
            self._tool_index += 1
            head = {
                "index": index,
                "id": event.call_id,
                "type": "function",
                "function": {"name": event.name, "arguments": ""},
            }
            chunks = [self._chunk({"tool_calls": [head]})]
            if event.arguments:
                chunks.append(
                    self._chunk(
                        {
                            "tool_calls": [
                                {"index": index, "function": {"arguments": event.arguments}}
                            ]
                        }
                    )
                )
            return chunks
        if isinstance(event, ev.Thinking) and event.content and not event.redacted:
            return [self._chunk({"reasoning_content": event.content})]
        return []

    @property
    def text_frame(self) -> tuple[bytes, bytes] | None:
        """The bytes before and after the JSON-encoded text of a text chunk's SSE frame.

        ``head + orjson.dumps(text) + tail`` is :meth:`text_sse` of ``text``
        (for a non-empty text); ``None`` when the chunk has no such template.
        """
        return self._text_frame

    def text_sse(self, text: str) -> bytes:
        """The SSE frame of the text chunk for ``text``, rendered from a template.

        The same bytes as ``sse_data(chunk)`` of the chunk :meth:`feed` makes
        for a text delta, without building and encoding the whole object.
        """
        frame = self._text_frame
        if frame is None:
            return sse_data(self._chunk({"content": text}))
        return b"".join((frame[0], orjson.dumps(text), frame[1]))

    def sse(self, event: ev.Event | ev.UnknownEvent) -> bytes:
        """The SSE frames for one event as one bytes object (``b""`` for none)."""
        if type(event) is ev.ResponseDelta:
            delta = event.delta
            if type(delta) is ty.DeltaText:
                return self.text_sse(delta.text) if delta.text else b""
        chunks = self.feed(event)
        if not chunks:
            return b""
        return b"".join([sse_data(chunk) for chunk in chunks])

    def finish(self, finish_reason: str, usage: ty.UsageStats | None) -> list[dict[str, Any]]:
        """The finishing chunk, and the usage chunk if ``include_usage``."""
        chunks = [self._chunk({}, finish_reason)]
        if self.include_usage:
            chunks.append(
                {
                    "id": self.completion_id,
                    "object": "chat.completion.chunk",
                    "created": self.created,
                    "model": self.model,
                    "choices": [],
                    "usage": usage_object(usage),
                }
            )
        return chunks


def sse_data(obj: Mapping[str, Any]) -> bytes:
    """One ``data: {...}\\n\\n`` SSE frame."""
    return encode_json(orjson.dumps(obj))


# --- server-side tool rounds across a client tool round trip -----------------------


def server_rounds(produced: Sequence[ty.Message], client_calls: Iterable[str]) -> list[ty.Message]:
    """The part of a turn's messages the client never sees: the agent's own tool rounds.

    ``produced`` is what the turn produced (its tracker's ``messages()``);
    the calls addressed to the client (``client_calls``) and the assistant's
    text (the client gets both in its completion) are taken out, and what
    remains -- assistant messages calling the agent's own tools, and their
    ``role="tool"`` results -- is returned in order.
    """
    asked = set(client_calls)
    out: list[ty.Message] = []
    for message in produced:
        if message.role == "assistant":
            own = [c for c in message.tool_calls or () if c.id not in asked]
            if own:
                out.append(ty.Message(role="assistant", tool_calls=own))
        elif message.role == "tool" and message.tool_call_id not in asked:
            out.append(message)
    return out


def splice_server_rounds(
    messages: Sequence[ty.Message],
    recall: Callable[[str], Sequence[ty.Message] | None],
) -> list[ty.Message]:
    """Put a turn's server-side rounds back before the client's copy of that turn.

    For each assistant message that calls the client's tools, ``recall``
    (call id -> the rounds kept for it, or ``None``) gives the agent's own
    tool rounds of that turn, which go in just before it -- unless the
    conversation already carries them (a client that keeps them itself).
    """
    present = {c.id for m in messages if m.role == "assistant" for c in m.tool_calls or ()}
    out: list[ty.Message] = []
    for message in messages:
        if message.role == "assistant" and message.tool_calls:
            for call in message.tool_calls:
                rounds = recall(call.id)
                if rounds:
                    ids = {c.id for m in rounds for c in m.tool_calls or ()}
                    if not ids & present:
                        out.extend(rounds)
                        present |= ids
                    break
        out.append(message)
    return out


def model_object(name: str) -> dict[str, Any]:
    """The OpenAI model object of the agent ``name``."""
    return {"id": name, "object": "model", "created": 0, "owned_by": "uamp"}


def outcome_error(outcome: ResponseOutcome) -> tuple[int, dict[str, Any]]:
    """``(HTTP status, error object)`` of a turn that failed or was cancelled."""
    error = outcome.error
    code = error.code if error else "internal_error"
    message = error.message if error else "The response ended without output."
    status = STATUS_FOR_CODE.get(code, 500)
    kind = "server_error" if status >= 500 else "invalid_request_error"
    return status, error_object(message, code=code, type=kind)


_NO_CALLS: list[ty.ToolInvocation] = []


def outcome_reply(
    outcome: ResponseOutcome, request: CompletionRequest, *, completion_id: str, created: int
) -> dict[str, Any]:
    """The non-streamed completion of a turn that ended as ``outcome`` (not failed)."""
    tracker = outcome.tracker
    text = tracker.plain_text
    if text is not None:
        # Text alone: no calls, no reasoning, no content items to look for;
        # completion_response's object for that case, built in place.
        usage = tracker.usage
        message = {"role": "assistant", "content": text, "refusal": None}
        reason = finish_reason_for(_NO_CALLS, usage, request.max_tokens)
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": reason}
        return {
            "id": completion_id,
            "object": "chat.completion",
            "created": created,
            "model": request.model or request.turn.agent,
            "choices": [choice],
            "usage": usage_object(usage),
        }
    calls = outcome.pending_tool_calls
    final = outcome.final
    # response.done carries the output as it is now: not built a second time.
    output = final.response.output if isinstance(final, ev.ResponseDone) else tracker.output
    return completion_response(
        completion_id=completion_id,
        created=created,
        model=request.model or request.turn.agent,
        text=tracker.text,
        tool_calls=calls,
        finish_reason=finish_reason_for(calls, tracker.usage, request.max_tokens),
        usage=tracker.usage,
        reasoning=tracker.thinking or None,
        content_items=output_items(output),
    )


def stream_tail(
    encoder: ChunkEncoder,
    request: CompletionRequest,
    outcome: ResponseOutcome,
    signature: str | None = None,
) -> bytes:
    """What a stream sends after its turn ended: the last chunks, ``[DONE]`` and after it.

    A failed turn's error object (as OpenAI streams one); else the finish
    chunk (and usage) and ``[DONE]``, then the response ``signature`` as its
    own named event. A paid turn's ``payment.balance`` comes last.
    """
    if outcome.status in ("failed", "cancelled"):
        tail = sse_data(outcome_error(outcome)[1]) + SSE_DONE
    else:
        usage = outcome.tracker.usage
        reason = finish_reason_for(outcome.pending_tool_calls, usage, request.max_tokens)
        tail = b"".join([sse_data(c) for c in encoder.finish(reason, usage)]) + SSE_DONE
        if signature is not None:
            tail += response_signature_event(signature)
    if outcome.balance is not None:
        tail += encode_json(orjson.dumps(balance_fields(outcome.balance)), event=BALANCE_EVENT)
    return tail
