"""Agent Client Protocol <-> UAMP, as pure functions (spec 004 "ACP Transport").

Two dialects share one JSON-RPC 2.0 endpoint (see :mod:`uamp_proto.jsonrpc`):

**Zed's Agent Client Protocol** (protocol version 1), spoken by editors over
newline-delimited JSON on stdio:

* ``initialize`` -- :func:`initialize_result` negotiates the version (the
  client's if we support it, else ours) and declares ``agentCapabilities``
  (``loadSession``, ``promptCapabilities`` derived from the agent's UAMP
  modalities);
* ``session/new`` / ``session/load`` -- :func:`parse_new_session`,
  :func:`parse_load_session`; a loaded session's history is replayed as
  ``session/update`` notifications (:func:`history_updates`);
* ``session/prompt`` -- :func:`parse_prompt` turns the prompt's content
  blocks into one UAMP user message (text, image, audio; resource links and
  embedded resources become file items) and reads ``payment_token`` from the
  params (or from ``_meta``); :class:`UpdateEncoder` turns the turn's UAMP
  events into ``session/update`` payloads (``agent_message_chunk``,
  ``agent_thought_chunk``, ``tool_call``, ``tool_call_update``);
  :func:`stop_reason` gives the answer's ``stopReason``;
* ``session/cancel`` -- :func:`parse_cancel`;
* a tool call that needs the human's approval -- the agent's request
  ``session/request_permission`` (:func:`permission_request`: the tool call
  and the options "Allow" / "Deny"), answered with the option the client
  chose, or ``cancelled`` (:func:`parse_permission_outcome`).

**The spec-004 form** (``POST /agents/{name}/acp``): ``initialize`` without a
numeric ``protocolVersion`` (:func:`spec_initialize_result`),
``prompt/submit`` with OpenAI-like ``messages`` (:func:`parse_prompt_submit`),
``tools/list`` / ``tools/call`` (:func:`tools_list_result`,
:func:`parse_tools_call`) and ``capabilities`` (UAMP section 9.2).

Payment (spec 004 "Payment Handling"): :func:`payment_error` is the JSON-RPC
error ``-32402`` with ``data.accepts``; the client retries ``session/prompt``
with ``payment_token`` in its params.

Bad params raise :class:`~uamp_proto.jsonrpc.JSONRPCError` with ``-32602``.
Nothing here does I/O, reads the clock or makes ids.
"""

from __future__ import annotations

import base64
from typing import Any

import attrs
import orjson

from .. import events as ev
from .. import history
from .. import types as ty
from ..history import MAX_HISTORY_BYTES
from ..jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, PAYMENT_REQUIRED, JSONRPCError
from ..outcome import ResponseOutcome
from ..payment import PaymentRequiredError
from ._human import Answer, Ask, describe, dismissed

__all__ = [
    "AUTH_REQUIRED",
    "BEARER_AUTH_METHOD",
    "PAYMENT_REQUIRED",
    "PROTOCOL_VERSION",
    "REQUEST_CANCELLED",
    "RESOURCE_NOT_FOUND",
    "LoadSessionParams",
    "NewSessionParams",
    "PromptParams",
    "PromptSubmitParams",
    "UpdateEncoder",
    "history_updates",
    "initialize_result",
    "message_blocks",
    "parse_cancel",
    "parse_load_session",
    "parse_new_session",
    "parse_permission_outcome",
    "parse_prompt",
    "parse_prompt_submit",
    "parse_tools_call",
    "payment_error",
    "permission_request",
    "prompt_message",
    "prompt_result",
    "spec_initialize_result",
    "stop_reason",
    "tool_names",
    "tools_list_result",
    "unknown_session",
    "usage_object",
]

#: The ACP protocol version uamp speaks.
PROTOCOL_VERSION = 1
#: ACP's "Resource not found" (used for unknown session ids).
RESOURCE_NOT_FOUND = -32002
#: ACP's "Request cancelled".
REQUEST_CANCELLED = -32800
#: ACP's "Authentication required".
AUTH_REQUIRED = -32000
#: The auth method a server with authentication advertises in ``initialize``:
#: ``authenticate`` with this ``methodId`` and a bearer token in ``_meta.token``
#: refreshes an open connection's credential (docs/security.md).
BEARER_AUTH_METHOD = {
    "id": "bearer",
    "name": "Bearer token",
    "description": "Send a fresh bearer token in _meta.token to renew the connection's.",
}

_STOP_FOR_ERROR = {
    "refusal": "refusal",
    "content_filter": "refusal",
    "max_tokens": "max_tokens",
    "max_output_tokens": "max_tokens",
    "max_turn_requests": "max_turn_requests",
}


def _invalid(message: str, **data: Any) -> JSONRPCError:
    return JSONRPCError(INVALID_PARAMS, message, data or None)


def _params(params: object) -> dict[str, Any]:
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise _invalid("params must be an object.")
    return params


def _str(obj: dict[str, Any], key: str, where: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        kind = "missing" if value is None else f"a {type(value).__name__}"
        raise _invalid(f"{where}.{key} must be a string, got {kind}.", param=f"{where}.{key}")
    return value


def unknown_session(session_id: str) -> JSONRPCError:
    """The error for a session id this agent does not know."""
    return JSONRPCError(
        RESOURCE_NOT_FOUND,
        f"Unknown session {session_id!r}: create one with session/new first.",
        {"sessionId": session_id},
    )


def payment_error(exc: PaymentRequiredError) -> JSONRPCError:
    """JSON-RPC error ``-32402`` with ``data.accepts`` (spec 004)."""
    return JSONRPCError(
        PAYMENT_REQUIRED,
        "Payment token required",
        {"accepts": exc.accepts(), "reason": exc.requirements.reason, **exc.details()},
    )


# --- initialize -------------------------------------------------------------------


def initialize_result(
    params: object,
    *,
    agent_name: str,
    version: str,
    capabilities: ty.Capabilities,
    load_session: bool,
    mcp_http: bool = False,
) -> dict[str, Any]:
    """The answer to Zed-style ``initialize`` (``protocolVersion`` an integer).

    ``mcp_http``: the agent connects HTTP MCP servers a session names (stdio
    ones it always may, per ACP; ``sse`` ones it does not).

    The agent answers with the client's version when it supports it and with
    its own latest version otherwise (ACP "Initialization").
    """
    p = _params(params)
    requested = p.get("protocolVersion")
    if not isinstance(requested, int) or isinstance(requested, bool) or requested < 0:
        raise _invalid("protocolVersion must be a non-negative integer.", param="protocolVersion")
    modalities = set(capabilities.modalities)
    return {
        "protocolVersion": min(requested, PROTOCOL_VERSION) or PROTOCOL_VERSION,
        "agentCapabilities": {
            "loadSession": load_session,
            "promptCapabilities": {
                "image": "image" in modalities,
                "audio": "audio" in modalities,
                "embeddedContext": True,
            },
            "mcpCapabilities": {"http": mcp_http, "sse": False},
        },
        "agentInfo": {"name": agent_name, "title": capabilities.id, "version": version},
        "authMethods": [],
    }


def spec_initialize_result(
    *, agent_name: str, version: str, capabilities: ty.Capabilities
) -> dict[str, Any]:
    """The answer to the spec-004 ``initialize`` (no numeric ``protocolVersion``)."""
    tools = capabilities.tools
    return {
        "protocolVersion": "1.0",
        "serverInfo": {"name": agent_name, "version": version},
        "capabilities": {
            "streaming": bool(capabilities.supports_streaming),
            "tools": bool(tools and tools.supports_tools),
        },
    }


# --- sessions -----------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class NewSessionParams:
    """``session/new``: working directory and the MCP servers offered."""

    cwd: str
    mcp_servers: list[dict[str, Any]]


@attrs.frozen(kw_only=True)
class LoadSessionParams:
    """``session/load``: the session to resume."""

    session_id: str
    cwd: str
    mcp_servers: list[dict[str, Any]]


def _mcp_servers(p: dict[str, Any]) -> list[dict[str, Any]]:
    servers = p.get("mcpServers", [])
    if not isinstance(servers, list) or not all(isinstance(s, dict) for s in servers):
        raise _invalid("mcpServers must be an array of objects.", param="mcpServers")
    return servers


def parse_new_session(params: object) -> NewSessionParams:
    """Validate ``session/new`` params."""
    p = _params(params)
    return NewSessionParams(cwd=_str(p, "cwd", "params"), mcp_servers=_mcp_servers(p))


def parse_load_session(params: object) -> LoadSessionParams:
    """Validate ``session/load`` params."""
    p = _params(params)
    return LoadSessionParams(
        session_id=_str(p, "sessionId", "params"),
        cwd=_str(p, "cwd", "params"),
        mcp_servers=_mcp_servers(p),
    )


def parse_cancel(params: object) -> str:
    """The session id of a ``session/cancel`` notification."""
    return _str(_params(params), "sessionId", "params")


# --- prompts -------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class PromptParams:
    """``session/prompt``: the session, the user's message and a payment token."""

    session_id: str
    message: ty.Message
    payment_token: str | None = None


def _subtype(mime: str | None) -> str | None:
    if not mime or "/" not in mime:
        return None
    return mime.split("/", 1)[1] or None


def _filename(uri: str) -> str:
    tail = uri.rstrip("/").rsplit("/", 1)[-1]
    return tail or "resource"


def _block(block: object, where: str) -> ty.ContentItem:
    if not isinstance(block, dict):
        raise _invalid(f"{where} must be a content block object.", param=where)
    kind = block.get("type")
    if kind == "text":
        return ty.TextContent(text=_str(block, "text", where))
    if kind == "image":
        data = block.get("data")
        uri = block.get("uri")
        mime = block.get("mimeType")
        if isinstance(data, str) and data:
            image: ty.Media = data
        elif isinstance(uri, str):
            image = ty.MediaURL(url=uri)
        else:
            raise _invalid(f"{where}.data must be base64 image data.", param=f"{where}.data")
        return ty.ImageContent(
            image=image, format=_subtype(mime if isinstance(mime, str) else None)
        )
    if kind == "audio":
        data = _str(block, "data", where)
        mime = _str(block, "mimeType", where)
        return ty.AudioContent(audio=data, format=_subtype(mime))
    if kind == "resource_link":
        uri = _str(block, "uri", where)
        name = block.get("name")
        mime = block.get("mimeType")
        return ty.FileContent(
            file=ty.MediaURL(url=uri),
            filename=name if isinstance(name, str) and name else _filename(uri),
            mime_type=mime if isinstance(mime, str) and mime else "application/octet-stream",
        )
    if kind == "resource":
        res = block.get("resource")
        if not isinstance(res, dict):
            raise _invalid(f"{where}.resource must be an object.", param=f"{where}.resource")
        uri = _str(res, "uri", f"{where}.resource")
        mime = res.get("mimeType")
        if isinstance(res.get("text"), str):
            data = base64.b64encode(res["text"].encode()).decode("ascii")
            default_mime = "text/plain"
        elif isinstance(res.get("blob"), str):
            data = res["blob"]
            default_mime = "application/octet-stream"
        else:
            raise _invalid(f"{where}.resource needs 'text' or 'blob'.", param=f"{where}.resource")
        return ty.FileContent(
            file=data,
            filename=_filename(uri),
            mime_type=mime if isinstance(mime, str) and mime else default_mime,
        )
    raise _invalid(
        f"{where}.type {kind!r} is not a content block type "
        "(text, image, audio, resource_link, resource).",
        param=f"{where}.type",
    )


def prompt_message(blocks: object, *, where: str = "prompt", role: str = "user") -> ty.Message:
    """One UAMP message from a list of ACP content blocks.

    Plain text prompts keep their text in ``content``; prompts with media
    carry every block as a content item (text items included).
    """
    if not isinstance(blocks, list):
        raise _invalid(f"{where} must be an array of content blocks.", param=where)
    items = [_block(b, f"{where}[{i}]") for i, b in enumerate(blocks)]
    text = "".join(i.text for i in items if isinstance(i, ty.TextContent))
    if all(isinstance(i, ty.TextContent) for i in items):
        return ty.Message(role=role, content=text)
    return ty.Message(role=role, content=text or None, content_items=items)


def _payment_token(p: dict[str, Any]) -> str | None:
    token = p.get("payment_token")
    meta = p.get("_meta")
    if token is None and isinstance(meta, dict):
        token = meta.get("payment_token")
    if token is not None and not isinstance(token, str):
        raise _invalid("payment_token must be a string.", param="payment_token")
    return token


def parse_prompt(params: object) -> PromptParams:
    """Validate ``session/prompt`` params.

    ``payment_token`` is read from the params (spec 004) or from ``_meta``
    (where ACP client libraries put extra fields).
    """
    p = _params(params)
    session_id = _str(p, "sessionId", "params")
    if "prompt" not in p:
        raise _invalid("params.prompt is required.", param="params.prompt")
    return PromptParams(
        session_id=session_id,
        message=prompt_message(p["prompt"], where="params.prompt"),
        payment_token=_payment_token(p),
    )


@attrs.frozen(kw_only=True)
class PromptSubmitParams:
    """Spec-004 ``prompt/submit``: a stateless conversation."""

    messages: list[ty.Message]
    payment_token: str | None = None


_SUBMIT_ROLES = frozenset({"system", "user", "assistant"})


def parse_prompt_submit(params: object) -> PromptSubmitParams:
    """Validate ``prompt/submit`` params: ``messages: [{role, content}]``.

    ``content`` is a string or an array of ACP content blocks.
    """
    p = _params(params)
    raw = p.get("messages")
    if not isinstance(raw, list) or not raw:
        raise _invalid("params.messages must be a non-empty array.", param="params.messages")
    messages: list[ty.Message] = []
    for i, m in enumerate(raw):
        where = f"params.messages[{i}]"
        if not isinstance(m, dict):
            raise _invalid(f"{where} must be an object.", param=where)
        role = _str(m, "role", where)
        if role not in _SUBMIT_ROLES:
            raise _invalid(
                f"{where}.role must be system, user or assistant, got {role!r}.",
                param=f"{where}.role",
            )
        content = m.get("content")
        if isinstance(content, str):
            messages.append(ty.Message(role=role, content=content))
        else:
            messages.append(prompt_message(content, where=f"{where}.content", role=role))
    return PromptSubmitParams(messages=messages, payment_token=_payment_token(p))


def parse_tools_call(params: object) -> tuple[str, dict[str, Any]]:
    """Validate ``tools/call`` params: ``(name, arguments)``."""
    p = _params(params)
    name = _str(p, "name", "params")
    args = p.get("arguments", {})
    if not isinstance(args, dict):
        raise _invalid("params.arguments must be an object.", param="params.arguments")
    return name, args


def tool_names(capabilities: ty.Capabilities) -> list[str]:
    """The agent's own tools, as its capabilities declare them."""
    names: list[str] = []
    for name in [
        *(capabilities.provides or []),
        *((capabilities.tools.built_in_tools or []) if capabilities.tools else []),
    ]:
        if name not in names:
            names.append(name)
    return names


def tools_list_result(capabilities: ty.Capabilities) -> dict[str, Any]:
    """``tools/list``: the tools the agent's capabilities name (``provides``, built-ins)."""
    return {
        "tools": [{"name": n, "inputSchema": {"type": "object"}} for n in tool_names(capabilities)]
    }


# --- results --------------------------------------------------------------------------


def stop_reason(status: str, error_code: str | None = None) -> str | None:
    """The ``stopReason`` for a turn's outcome, or ``None`` when it is an error.

    ``completed`` and ``requires_action`` end the turn (``end_turn``);
    ``cancelled`` is ``cancelled``; a failure whose code is ``refusal`` /
    ``content_filter`` / ``max_tokens`` / ``max_turn_requests`` maps to that
    stop reason; any other failure is reported as a JSON-RPC error.
    """
    if status in ("completed", "requires_action"):
        return "end_turn"
    if status == "cancelled":
        return "cancelled"
    return _STOP_FOR_ERROR.get(error_code or "")


def usage_object(usage: ty.UsageStats | None) -> dict[str, Any] | None:
    """ACP ``Usage`` from UAMP usage (``None`` without token counts)."""
    if usage is None or (usage.input_tokens is None and usage.output_tokens is None):
        return None
    inp, out = usage.input_tokens or 0, usage.output_tokens or 0
    result: dict[str, Any] = {
        "inputTokens": inp,
        "outputTokens": out,
        "totalTokens": usage.total_tokens if usage.total_tokens is not None else inp + out,
    }
    if usage.cached_tokens is not None:
        result["cachedReadTokens"] = usage.cached_tokens
    return result


# --- session/update encoding ----------------------------------------------------------


def _text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _json_or_text(raw: str) -> Any:
    try:
        return orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError:
        return raw


class UpdateEncoder:
    """UAMP events of one turn -> ACP ``session/update`` payloads.

    Text deltas become ``agent_message_chunk``; thinking becomes
    ``agent_thought_chunk``; the agent's own tools become a ``tool_call``
    (announced at their first fragment, ``in_progress``) followed by
    ``tool_call_update`` for progress and the result (``completed`` or
    ``failed``); a client ``tool.call`` becomes a ``pending`` ``tool_call``
    (ACP clients run no UAMP client tools, see :meth:`unanswered`).
    """

    def __init__(self) -> None:
        self._calls: dict[str, dict[str, Any]] = {}

    def _start(self, call_id: str, name: str | None, status: str) -> dict[str, Any]:
        state = {"name": name or "tool", "args": [], "status": status}
        self._calls[call_id] = state
        return {
            "sessionUpdate": "tool_call",
            "toolCallId": call_id,
            "title": state["name"],
            "kind": "other",
            "status": status,
        }

    def feed(self, event: ev.Event) -> list[dict[str, Any]]:
        """The ``update`` objects for one UAMP event (possibly none)."""
        if isinstance(event, ev.ResponseDelta):
            return self._delta(event.delta)
        if isinstance(event, ev.Thinking):
            if event.redacted or not event.content:
                return []
            return [{"sessionUpdate": "agent_thought_chunk", "content": _text_block(event.content)}]
        if isinstance(event, ev.ToolCall):
            raw = _json_or_text(event.arguments)
            if event.call_id not in self._calls:
                start = self._start(event.call_id, event.name, "pending")
                start["rawInput"] = raw
                return [start]
            self._calls[event.call_id]["name"] = event.name
            return [
                {
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": event.call_id,
                    "title": event.name,
                    "status": "pending",
                    "rawInput": raw,
                }
            ]
        if isinstance(event, ev.ToolCallDone):
            state = self._calls.get(event.call_id)
            if state is None or state["status"] in ("completed", "failed"):
                return []
            state["status"] = "completed"
            return [
                {
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": event.call_id,
                    "status": "completed",
                }
            ]
        if isinstance(event, ev.AudioDelta):
            return [self._audio(event.audio)]
        return []

    @staticmethod
    def _audio(data: str) -> dict[str, Any]:
        return {
            "sessionUpdate": "agent_message_chunk",
            "content": {"type": "audio", "data": data, "mimeType": "audio/pcm"},
        }

    def _delta(self, delta: ty.Delta) -> list[dict[str, Any]]:
        if isinstance(delta, ty.DeltaText):
            if not delta.text:
                return []
            return [{"sessionUpdate": "agent_message_chunk", "content": _text_block(delta.text)}]
        if isinstance(delta, ty.DeltaAudio):
            return [self._audio(delta.audio)]
        if isinstance(delta, ty.DeltaToolCall):
            frag = delta.tool_call
            out: list[dict[str, Any]] = []
            state = self._calls.get(frag.id)
            if state is None:
                out.append(self._start(frag.id, frag.name, "in_progress"))
                state = self._calls[frag.id]
            elif frag.name and state["name"] == "tool":
                state["name"] = frag.name
            if frag.arguments:
                state["args"].append(frag.arguments)
            return out
        if isinstance(delta, ty.DeltaToolProgress):
            prog = delta.tool_progress
            out = self._known(prog.call_id)
            out.append(
                {
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": prog.call_id,
                    "status": "in_progress",
                    "content": [{"type": "content", "content": _text_block(prog.text)}],
                }
            )
            return out
        if isinstance(delta, ty.DeltaToolResult):
            res = delta.tool_result
            out = self._known(res.call_id)
            state = self._calls[res.call_id]
            failed = res.status in ("error", "failed")
            state["status"] = "failed" if failed else "completed"
            update: dict[str, Any] = {
                "sessionUpdate": "tool_call_update",
                "toolCallId": res.call_id,
                "status": state["status"],
                "rawOutput": res.result or "",
            }
            if state["args"]:
                update["rawInput"] = _json_or_text("".join(state["args"]))
            if res.result:
                update["content"] = [{"type": "content", "content": _text_block(res.result)}]
            out.append(update)
            return out
        return []

    def _known(self, call_id: str) -> list[dict[str, Any]]:
        """The ``tool_call`` start a call not seen before needs first (or nothing)."""
        if call_id in self._calls:
            return []
        return [self._start(call_id, None, "in_progress")]

    def unanswered(self, call_ids: list[str]) -> list[dict[str, Any]]:
        """Updates failing client tool calls nobody over ACP can run."""
        out = []
        for call_id in call_ids:
            state = self._calls.get(call_id)
            if state is not None:
                state["status"] = "failed"
            out.append(
                {
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": call_id,
                    "status": "failed",
                    "content": [
                        {
                            "type": "content",
                            "content": _text_block(
                                "This tool runs on the client, and ACP clients do not run "
                                "UAMP client tools."
                            ),
                        }
                    ],
                }
            )
        return out


# --- the kept history --------------------------------------------------------------------

#: The most messages an ACP session keeps for its next prompts and ``session/load``.
MAX_HISTORY_MESSAGES = 400


def trim_history(
    messages: list[ty.Message],
    *,
    max_messages: int = MAX_HISTORY_MESSAGES,
    max_bytes: int = MAX_HISTORY_BYTES,
) -> int:
    """An ACP session's kept history within its bounds (:func:`uamp_proto.history.trim`).

    Returns the kept history's weight (:func:`uamp_proto.history.weight`).
    """
    return history.trim(messages, max_messages=max_messages, max_bytes=max_bytes)


# --- history replay (session/load) ----------------------------------------------------


def message_blocks(message: ty.Message) -> list[dict[str, Any]]:
    """A UAMP message's content as ACP content blocks."""
    if not message.content_items:
        return [_text_block(message.text)] if message.text else []
    blocks: list[dict[str, Any]] = []
    for item in message.content_items:
        if isinstance(item, ty.TextContent):
            blocks.append(_text_block(item.text))
        elif isinstance(item, ty.ImageContent):
            if isinstance(item.image, str):
                blocks.append(
                    {
                        "type": "image",
                        "data": item.image,
                        "mimeType": f"image/{item.format or 'png'}",
                    }
                )
            else:
                blocks.append({"type": "resource_link", "uri": item.image.url, "name": "image"})
        elif isinstance(item, ty.AudioContent) and isinstance(item.audio, str):
            blocks.append(
                {"type": "audio", "data": item.audio, "mimeType": f"audio/{item.format or 'wav'}"}
            )
        elif isinstance(item, ty.FileContent):
            if isinstance(item.file, str):
                blocks.append(
                    {
                        "type": "resource",
                        "resource": {
                            "uri": f"file:///{item.filename}",
                            "blob": item.file,
                            "mimeType": item.mime_type,
                        },
                    }
                )
            else:
                blocks.append(
                    {
                        "type": "resource_link",
                        "uri": item.file.url,
                        "name": item.filename,
                        "mimeType": item.mime_type,
                    }
                )
    return blocks


def history_updates(messages: list[ty.Message]) -> list[dict[str, Any]]:
    """``session/update`` payloads replaying a conversation (``session/load``).

    User messages become ``user_message_chunk``, assistant text
    ``agent_message_chunk``, assistant tool calls a completed ``tool_call``
    and tool messages the call's ``tool_call_update`` with its output.
    """
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "user":
            kind = "user_message_chunk"
        elif m.role == "assistant":
            kind = "agent_message_chunk"
        elif m.role == "tool" and m.tool_call_id:
            out.append(
                {
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": m.tool_call_id,
                    "status": "completed",
                    "rawOutput": m.text,
                    "content": [{"type": "content", "content": _text_block(m.text)}],
                }
            )
            continue
        else:
            continue
        out.extend({"sessionUpdate": kind, "content": block} for block in message_blocks(m))
        for call in m.tool_calls or []:
            out.append(
                {
                    "sessionUpdate": "tool_call",
                    "toolCallId": call.id,
                    "title": call.name,
                    "kind": "other",
                    "status": "completed",
                    "rawInput": _json_or_text(call.arguments),
                }
            )
    return out


# --- a human in the loop: session/request_permission ---------------------------------------

#: The options a permission request offers (``optionId`` -> approved).
PERMISSION_OPTIONS: dict[str, bool] = {"allow": True, "deny": False}
#: ``_meta`` key naming the uamp interrupt a permission request stands for.
INTERRUPT_META = "uamp/interrupt_id"


def permission_request(session_id: str, ask: Ask) -> dict[str, Any]:
    """The params of ``session/request_permission`` for an approval.

    ``toolCall`` is a ``ToolCallUpdate`` (id, title, ``kind: "other"``,
    ``status: "pending"``, ``rawInput`` = the arguments); the options are
    ``allow`` (``allow_once``) and ``deny`` (``reject_once``).
    """
    call: dict[str, Any] = {
        "toolCallId": ask.call_id or ask.id,
        "title": describe(ask),
        "kind": "other",
        "status": "pending",
    }
    if ask.arguments is not None:
        call["rawInput"] = ask.arguments
    return {
        "sessionId": session_id,
        "toolCall": call,
        "options": [
            {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
            {"optionId": "deny", "name": "Deny", "kind": "reject_once"},
        ],
        "_meta": {INTERRUPT_META: ask.id},
    }


def parse_permission_outcome(result: object, ask: Ask) -> Answer:
    """The answer a ``session/request_permission`` result gives.

    ``{"outcome": {"outcome": "selected", "optionId": "allow"|"deny"}}``
    approves or denies; ``{"outcome": {"outcome": "cancelled"}}`` (the
    client cancelled the prompt turn) denies as abandoned.

    Raises:
        JSONRPCError: ``-32602`` for a result of another shape or an option
            that was not offered.
    """
    outcome = result.get("outcome") if isinstance(result, dict) else None
    kind = outcome.get("outcome") if isinstance(outcome, dict) else None
    if kind == "cancelled":
        return dismissed(ask)
    option = outcome.get("optionId") if isinstance(outcome, dict) else None
    if kind != "selected" or option not in PERMISSION_OPTIONS:
        raise JSONRPCError(
            INVALID_PARAMS,
            'A permission result is {"outcome": {"outcome": "selected", "optionId": '
            '"allow"|"deny"}} or {"outcome": {"outcome": "cancelled"}}.',
        )
    return Answer(approved=PERMISSION_OPTIONS[option])


def prompt_result(outcome: ResponseOutcome) -> dict[str, Any]:
    """The ``session/prompt`` answer of a turn that ended as ``outcome``.

    ``stopReason`` (and ``usage``); a turn that failed for no reason ACP names
    is a JSON-RPC internal error carrying the UAMP error code.

    Raises:
        JSONRPCError: The turn failed.
    """
    error = outcome.error
    reason = stop_reason(outcome.status, error.code if error else None)
    if reason is None:
        assert error is not None
        raise JSONRPCError(
            INTERNAL_ERROR, error.message, {"code": error.code, "details": error.details}
        )
    result: dict[str, Any] = {"stopReason": reason}
    usage = usage_object(outcome.tracker.usage)
    if usage is not None:
        result["usage"] = usage
    return result
