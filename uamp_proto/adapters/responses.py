"""OpenAI Responses API requests -> UAMP, as pure functions.

:func:`parse_request` validates a ``POST /responses`` body into a
:class:`ResponsesRequest`: the :class:`~uamp_proto.responder.TurnRequest` the
agent answers, plus what the Response object echoes back (``tools``,
``tool_choice``, ``text``, ``reasoning``, ``metadata`` ...) and what the
server keeps for ``GET /responses/{id}/input_items``.

``input`` is a string (one user message) or a list of items:

* messages (``{"role", "content"}``, with or without ``"type": "message"``):
  ``content`` a string or parts -- ``input_text``/``output_text``/``text``
  -> text, ``input_image`` -> an image item (a ``data:`` URL becomes base64
  plus ``format``, any other URL a reference), ``input_file`` (inline
  ``file_data`` or a ``file_url``) -> a file item; ``refusal`` parts of an
  assistant message are text; ``developer`` is treated as ``system``;
* ``function_call`` items -> the assistant's ``tool_calls`` (consecutive
  calls, and an assistant message right before them, form one message);
* ``function_call_output`` items -> ``role="tool"`` messages;
* ``reasoning`` items are the model's own notes of an earlier turn: skipped.

``instructions`` become the turn's instructions (never carried over by
``previous_response_id``, as OpenAI does). ``temperature``, ``top_p`` and
``max_output_tokens`` (as ``max_tokens``) go to the turn's ``metadata``,
where the agent bridge reads model parameters; ``reasoning.effort`` as
``reasoning_effort``. ``text.format`` ``json_schema``/``json_object`` is the
turn's ``response_format``. Unknown request fields are ignored, as a newer
client may send fields this server does not know. Bad input raises
:class:`~uamp_proto.adapters.completions.CompletionsError` (OpenAI's error
JSON and HTTP status), as for Chat Completions.

The rendering of a turn's events as a Response object and as the Responses
event stream is :mod:`.responses_render`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import attrs

from .. import types as ty
from ..principal import ANONYMOUS, Principal
from ..responder import TurnRequest
from ._tools import ToolFormError, kind_of, parse_tool_choice, parse_tools
from .completions import (
    _expect_obj,
    _expect_str,
    _fail,
    _number,
    _required,
    _tool_error,
    body_object,
    error_object,
)

__all__ = [
    "ECHO_KEY",
    "ResponsesRequest",
    "error_object",
    "input_item_id",
    "parse_request",
]

#: The session extension under which a stored response keeps its echo fields.
ECHO_KEY: Final = "openai_responses"

_ROLES: Final = frozenset({"user", "assistant", "system", "developer"})
_TEXT_PARTS: Final = frozenset({"input_text", "output_text", "text", "refusal"})
#: Most input items one request may carry (a conversation longer than this
#: belongs behind ``previous_response_id``).
MAX_INPUT_ITEMS: Final = 10_000


@attrs.frozen(kw_only=True)
class ResponsesRequest:
    """A validated ``POST /responses`` body.

    Attributes:
        turn: What the agent is asked; ``messages`` holds this request's
            input only (the server prepends a previous response's
            conversation).
        stream: Answer with the Responses event stream.
        background: Run without the connection (``queued`` first).
        store: Keep the response for retrieval and continuation.
        previous_response_id: The stored response this one continues.
        max_output_tokens: The output budget, if given.
        input_items: The input as OpenAI items with ids, for ``input_items``.
        echo: The request fields the Response object repeats.
    """

    turn: TurnRequest
    stream: bool
    background: bool
    store: bool
    previous_response_id: str | None
    max_output_tokens: int | None
    input_items: list[dict[str, Any]]
    echo: dict[str, Any]


def _bool(obj: Mapping[str, Any], key: str, default: bool) -> bool:
    value = obj.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _fail(f"'{key}' must be a boolean, got {kind_of(value)}.", key, "invalid_type")
    return value


def input_item_id(response_id: str, index: int, prefix: str = "msg") -> str:
    """The id of input item ``index`` of ``response_id`` when the client gave none."""
    return f"{prefix}_{response_id.removeprefix('resp_')}_in{index}"


# --- content parts -------------------------------------------------------------


def _data_url(url: str) -> tuple[str | None, str] | None:
    """``(mime, base64)`` of a ``data:`` URL, or ``None``."""
    if not url.startswith("data:"):
        return None
    head, sep, data = url[5:].partition(",")
    if not sep or not head.endswith(";base64"):
        return None
    mime = head.removesuffix(";base64").split(";", 1)[0] or None
    return mime, data


def _part(value: object, param: str, role: str) -> ty.ContentItem:
    part = _expect_obj(value, param)
    kind = _expect_str(_required(part, "type", f"{param}.type"), f"{param}.type")
    if kind in _TEXT_PARTS:
        key = "refusal" if kind == "refusal" else "text"
        return ty.TextContent(
            text=_expect_str(_required(part, key, f"{param}.{key}"), f"{param}.{key}")
        )
    if role != "user":
        raise _fail(f"'{param}.type' must be text in a {role} message, got {kind!r}.", param)
    if kind == "input_image":
        url = part.get("image_url")
        if url is None:
            if part.get("file_id") is not None:
                raise _fail(
                    "Images by 'file_id' are not supported here; send an 'image_url'.",
                    f"{param}.file_id",
                    "unsupported_value",
                )
            raise _fail(
                f"Missing required parameter: '{param}.image_url'.",
                f"{param}.image_url",
                "missing_required_parameter",
            )
        url = _expect_str(url, f"{param}.image_url")
        detail = part.get("detail")
        if detail is not None and detail not in ("auto", "low", "high"):
            raise _fail(f"'{param}.detail' must be 'auto', 'low' or 'high'.", f"{param}.detail")
        inline = _data_url(url)
        if inline is None:
            return ty.ImageContent(image=ty.MediaURL(url=url), detail=detail)
        mime, data = inline
        fmt = mime.split("/", 1)[1] if mime and "/" in mime else None
        return ty.ImageContent(image=data, format=fmt, detail=detail)
    if kind == "input_file":
        name = part.get("filename")
        filename = _expect_str(name, f"{param}.filename") if name is not None else "file"
        raw = part.get("file_data")
        if raw is not None:
            inline = _data_url(_expect_str(raw, f"{param}.file_data"))
            mime, data = inline if inline is not None else (None, raw)
            return ty.FileContent(
                file=data, filename=filename, mime_type=mime or "application/octet-stream"
            )
        url = part.get("file_url")
        if url is not None:
            return ty.FileContent(
                file=ty.MediaURL(url=_expect_str(url, f"{param}.file_url")),
                filename=filename,
                mime_type="application/octet-stream",
            )
        raise _fail(
            "An 'input_file' needs 'file_data' or 'file_url' ('file_id' is not supported here).",
            param,
            "unsupported_value"
            if part.get("file_id") is not None
            else "missing_required_parameter",
        )
    raise _fail(
        f"'{param}.type' {kind!r} is not supported; use 'input_text', 'input_image' or "
        "'input_file'.",
        f"{param}.type",
    )


def _message(item: dict[str, Any], param: str) -> ty.Message:
    role = _expect_str(_required(item, "role", f"{param}.role"), f"{param}.role")
    if role not in _ROLES:
        raise _fail(
            f"'{param}.role' must be user, assistant, system or developer; got {role!r}.",
            f"{param}.role",
        )
    content = _required(item, "content", f"{param}.content")
    if isinstance(content, str):
        text, items = content, None
    elif isinstance(content, list):
        parts = [_part(p, f"{param}.content[{i}]", role) for i, p in enumerate(content)]
        text = "".join(p.text for p in parts if isinstance(p, ty.TextContent))
        items = None if all(isinstance(p, ty.TextContent) for p in parts) else parts
    else:
        raise _fail(
            f"'{param}.content' must be a string or an array of content parts.",
            f"{param}.content",
            "invalid_type",
        )
    return ty.Message(
        role="system" if role == "developer" else role, content=text, content_items=items
    )


def _output_text(value: object, param: str) -> str:
    """A ``function_call_output`` 's ``output``: a string, or parts joined as text."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = [_expect_obj(p, f"{param}[{i}]") for i, p in enumerate(value)]
        return "".join(str(p.get("text", "")) for p in parts if p.get("type") in _TEXT_PARTS)
    raise _fail(f"'{param}' must be a string or an array.", param, "invalid_type")


def _listed(item: dict[str, Any], response_id: str, index: int) -> dict[str, Any]:
    """``item`` as ``input_items`` lists it: with an id and a status."""
    kind = item.get("type", "message")
    out = dict(item)
    out["type"] = kind
    if kind == "message":
        content = item.get("content")
        if isinstance(content, str):
            part = "output_text" if item.get("role") == "assistant" else "input_text"
            content = [{"type": part, "text": content}]
            if part == "output_text":
                content[0]["annotations"] = []
        out["content"] = content
        prefix = "msg"
    else:
        prefix = {"function_call": "fc", "function_call_output": "fco"}.get(kind, "item")
    out.setdefault("status", "completed")
    if not isinstance(out.get("id"), str):
        out["id"] = input_item_id(response_id, index, prefix)
    return out


def _input(value: object, response_id: str) -> tuple[list[ty.Message], list[dict[str, Any]]]:
    """The input as UAMP messages, and as listed items."""
    if isinstance(value, str):
        item = {"type": "message", "role": "user", "content": value}
        return [ty.Message(role="user", content=value)], [_listed(item, response_id, 0)]
    if not isinstance(value, list):
        raise _fail("'input' must be a string or an array of items.", "input", "invalid_type")
    if len(value) > MAX_INPUT_ITEMS:
        raise _fail(f"'input' holds more than {MAX_INPUT_ITEMS} items.", "input")
    messages: list[ty.Message] = []
    listed: list[dict[str, Any]] = []
    for i, raw in enumerate(value):
        param = f"input[{i}]"
        item = _expect_obj(raw, param)
        kind = item.get("type", "message")
        if kind == "message":
            messages.append(_message(item, param))
        elif kind == "function_call":
            call = ty.ToolInvocation(
                id=_expect_str(_required(item, "call_id", f"{param}.call_id"), f"{param}.call_id"),
                name=_expect_str(_required(item, "name", f"{param}.name"), f"{param}.name"),
                arguments=_expect_str(item.get("arguments", ""), f"{param}.arguments"),
            )
            last = messages[-1] if messages else None
            if last is not None and last.role == "assistant" and not last.content_items:
                messages[-1] = attrs.evolve(last, tool_calls=[*(last.tool_calls or ()), call])
            else:
                messages.append(ty.Message(role="assistant", tool_calls=[call]))
        elif kind == "function_call_output":
            call_id = _expect_str(
                _required(item, "call_id", f"{param}.call_id"), f"{param}.call_id"
            )
            output = _output_text(_required(item, "output", f"{param}.output"), f"{param}.output")
            messages.append(ty.Message(role="tool", content=output, tool_call_id=call_id))
        elif kind == "reasoning":
            pass  # the model's notes of an earlier turn: nothing for the agent
        elif kind == "item_reference":
            raise _fail(
                "'item_reference' items are not supported here; continue with "
                "'previous_response_id' or send the items themselves.",
                f"{param}.type",
                "unsupported_value",
            )
        else:
            raise _fail(
                f"'{param}.type' {kind!r} is not supported; use 'message', 'function_call' or "
                "'function_call_output'.",
                f"{param}.type",
                "unsupported_value",
            )
        if kind != "reasoning":
            listed.append(_listed(item, response_id, i))
    return messages, listed


# --- the request ---------------------------------------------------------------


def _text_format(value: object) -> tuple[ty.ResponseFormat | None, dict[str, Any]]:
    """``text`` -> the turn's response format, and the ``text`` object to echo."""
    if value is None:
        return None, {"format": {"type": "text"}}
    text = _expect_obj(value, "text")
    fmt = text.get("format")
    if fmt is None:
        return None, {**text, "format": {"type": "text"}}
    fmt = _expect_obj(fmt, "text.format")
    kind = _expect_str(_required(fmt, "type", "text.format.type"), "text.format.type")
    if kind == "text":
        return None, text
    if kind == "json_object":
        return ty.ResponseFormat(type="json_object"), text
    if kind == "json_schema":
        schema = _expect_obj(_required(fmt, "schema", "text.format.schema"), "text.format.schema")
        name = _expect_str(_required(fmt, "name", "text.format.name"), "text.format.name")
        spec = {"name": name, "schema": schema, "strict": fmt.get("strict")}
        return ty.ResponseFormat(type="json_schema", json_schema=spec), text
    raise _fail(
        "'text.format.type' must be 'text', 'json_object' or 'json_schema'.", "text.format.type"
    )


def _echo_tool(tool: ty.ToolDefinition) -> dict[str, Any]:
    fn = tool.function
    return {
        "type": "function",
        "name": fn.name,
        "description": fn.description,
        "parameters": fn.parameters,
        "strict": fn.strict,
    }


def _echo_choice(choice: str | dict[str, Any] | None) -> str | dict[str, Any]:
    if choice is None:
        return "auto"
    if isinstance(choice, str):
        return choice
    return {"type": "function", "name": choice["function"]["name"]}


def _metadata(value: object) -> dict[str, str] | None:
    if value is None:
        return None
    meta = _expect_obj(value, "metadata")
    if len(meta) > 16:
        raise _fail("'metadata' holds at most 16 keys.", "metadata")
    for key, v in meta.items():
        if len(key) > 64 or not isinstance(v, str) or len(v) > 512:
            raise _fail(
                "'metadata' keys are at most 64 characters and values strings of at most 512.",
                f"metadata.{key}",
            )
    return meta


def parse_request(
    body: bytes | str | Mapping[str, Any],
    *,
    agent: str,
    response_id: str,
    session_id: str,
    created_at: int,
    principal: Principal = ANONYMOUS,
) -> ResponsesRequest:
    """Validate a ``POST /responses`` body; see the module docstring.

    Args:
        body: The raw JSON body, or an already-parsed object.
        agent: The name of the agent addressed (the echoed ``model`` when
            the body names none).
        response_id: The new response's id (``resp_...``).
        session_id: The UAMP session id the turn runs in.
        created_at: The Response object's ``created_at`` (Unix seconds).
        principal: Who the request acts for.

    Raises:
        CompletionsError: Invalid JSON, a missing or mistyped field, an
            unsupported value.
    """
    obj = body_object(body)
    raw_input = obj.get("input")
    previous = obj.get("previous_response_id")
    if previous is not None:
        previous = _expect_str(previous, "previous_response_id")
    if raw_input is None and previous is None:
        raise _fail("Missing required parameter: 'input'.", "input", "missing_required_parameter")
    messages, listed = _input(raw_input if raw_input is not None else [], response_id)
    instructions = obj.get("instructions")
    if instructions is not None:
        instructions = _expect_str(instructions, "instructions") or None
    try:
        tools = parse_tools(obj.get("tools"), "tools", flat=True, openai_rules=True)
        tool_choice = parse_tool_choice(
            obj.get("tool_choice"),
            "tool_choice",
            names={t.function.name for t in tools},
            flat=True,
        )
    except ToolFormError as exc:
        raise _tool_error(exc) from None
    response_format, text = _text_format(obj.get("text"))
    model = obj.get("model")
    if model is not None:
        _expect_str(model, "model")
    stream = _bool(obj, "stream", False)
    background = _bool(obj, "background", False)
    store = _bool(obj, "store", True)
    if background and not store:
        raise _fail("A background response must be stored: 'store' cannot be false.", "store")
    metadata: dict[str, Any] = {"transport": "responses"}
    if model is not None:
        metadata["model"] = model
    temperature = _number(obj, "temperature", 0.0, 2.0)
    top_p = _number(obj, "top_p", 0.0, 1.0)
    if temperature is not None:
        metadata["temperature"] = temperature
    if top_p is not None:
        metadata["top_p"] = top_p
    max_output = obj.get("max_output_tokens")
    if max_output is not None:
        if isinstance(max_output, bool) or not isinstance(max_output, int) or max_output < 1:
            raise _fail("'max_output_tokens' must be a positive integer.", "max_output_tokens")
        metadata["max_tokens"] = max_output
    reasoning = obj.get("reasoning")
    if reasoning is not None:
        effort = _expect_obj(reasoning, "reasoning").get("effort")
        if effort is not None:
            metadata["reasoning_effort"] = _expect_str(effort, "reasoning.effort")
    for key in ("user", "safety_identifier", "prompt_cache_key"):
        if obj.get(key) is not None:
            metadata[key] = _expect_str(obj[key], key)
    parallel = _bool(obj, "parallel_tool_calls", True)
    meta = _metadata(obj.get("metadata"))
    turn = TurnRequest(
        agent=agent,
        session_id=session_id,
        response_id=response_id,
        messages=messages,
        instructions=instructions,
        tools=tools,
        tool_choice=tool_choice,
        response_format=response_format,
        metadata=metadata,
        principal=principal,
        streamed=stream or background,
    )
    echo: dict[str, Any] = {
        "created_at": created_at,
        "model": model if model is not None else agent,
        "instructions": instructions,
        "tools": [_echo_tool(t) for t in tools],
        "tool_choice": _echo_choice(tool_choice),
        "parallel_tool_calls": parallel,
        "text": text,
        "reasoning": reasoning if isinstance(reasoning, dict) else None,
        "metadata": meta or {},
        "max_output_tokens": max_output,
        "temperature": temperature,
        "top_p": top_p,
        "previous_response_id": previous,
        "background": background,
        "store": store,
        "user": metadata.get("user"),
        "safety_identifier": metadata.get("safety_identifier"),
    }
    return ResponsesRequest(
        turn=turn,
        stream=stream,
        background=background,
        store=store,
        previous_response_id=previous,
        max_output_tokens=max_output,
        input_items=listed,
        echo=echo,
    )
