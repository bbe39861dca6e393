"""Anthropic Messages <-> UAMP, as pure functions and one stream encoder.

Theory of operation
-------------------
*Requests.* :func:`parse_request` validates a ``POST /v1/messages`` body (or,
with ``counting=True``, a ``/v1/messages/count_tokens`` body, which has no
``max_tokens``) into a :class:`MessagesRequest` holding the UAMP
:class:`~uamp_proto.responder.TurnRequest`. Content blocks map to UAMP items:
``text`` -> text; ``image`` (``base64`` or ``url`` source) -> image;
``document`` (``base64``, ``url`` or plain ``text`` source) -> file; an
assistant's ``tool_use`` blocks -> its ``tool_calls`` (``input`` as JSON
text); a user's ``tool_result`` blocks -> one ``role="tool"`` message each,
before the rest of that user message. ``thinking`` and ``redacted_thinking``
blocks a client sends back are dropped (their text is the agent's own, and
their signatures mean nothing here). ``system`` (a string or text blocks)
becomes the turn's ``instructions``. Client ``tools`` become function tools
and ``tool_choice`` maps ``auto``/``any``/``tool``/``none`` to UAMP's
``auto``/``required``/named/``none``. ``temperature``, ``top_p``, ``top_k``
and ``max_tokens`` go to the agent in ``metadata`` (the model parameters it
honours); ``stop_sequences`` are applied here (:class:`StopScanner`), because
only the transport can tell the client which one ended the reply. Bad input
raises :class:`AnthropicError` carrying the status and Anthropic's error type.

*Replies.* :func:`message_object` builds the ``message`` object of a finished
turn: ``thinking`` blocks first (only when the request enabled thinking),
then the text, then one ``tool_use`` block per client tool call.
:class:`StreamEncoder` renders one turn's events as named SSE events, the
order the ``anthropic`` SDK accumulates: ``message_start``; per block
``content_block_start``, its deltas (``text_delta``, ``thinking_delta``,
``input_json_delta``), ``content_block_stop``; then ``message_delta``
(``stop_reason`` and the usage totals) and ``message_stop``. Every event
has an ``event:`` line: the SDK drops nameless ones. A text delta's frame
is a template rendered once per block with the text spliced in.

*Errors.* :func:`error_body` is Anthropic's ``{"type": "error", "error":
{"type", "message"}}``; :func:`error_type_for` names the type for a status
(402 is ``billing_error``, Anthropic's own type for an account that cannot
pay; 503, a busy server, is answered 529 ``overloaded_error``).

Nothing here reads the clock or makes ids: the message id is an argument.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import orjson

from .. import events as ev
from .. import types as ty
from ..errors import UampError
from ..outcome import ResponseOutcome
from ..principal import ANONYMOUS, Principal
from ..responder import TurnRequest
from ..sse import encode_json
from ._media import media_item
from ._tools import kind_of
from .completions import STATUS_FOR_CODE

__all__ = [
    "PING",
    "AnthropicError",
    "MessagesRequest",
    "StopScanner",
    "StreamEncoder",
    "error_body",
    "error_event",
    "error_status",
    "error_type_for",
    "failure",
    "message_object",
    "model_info",
    "parse_request",
    "speaks_anthropic",
    "stop_reason_for",
    "tool_input",
    "usage_object",
    "word_count",
]

#: Anthropic's error type for each status it uses.
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
#: The image types Anthropic accepts.
_IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
#: Most stop sequences, and the longest one, a request may give.
MAX_STOP_SEQUENCES = 16
MAX_STOP_LENGTH = 256


@attrs.define(auto_exc=True)
class AnthropicError(UampError):
    """An invalid request, with the reply it deserves.

    Attributes:
        message: What is wrong, naming the field (``messages.1.content``).
        status: HTTP status.
        type: Anthropic's error type (``invalid_request_error``...).
    """

    message: str
    status: int = attrs.field(default=400, kw_only=True)
    type: str = attrs.field(default="invalid_request_error", kw_only=True)

    def body(self) -> dict[str, Any]:
        """Anthropic's error JSON."""
        return error_body(self.message, self.type)


def error_status(status: int) -> int:
    """The status Anthropic answers for ``status``: 529 for a busy server (503)."""
    return 529 if status == 503 else status


def error_type_for(status: int) -> str:
    """Anthropic's error type for an HTTP ``status`` (after :func:`error_status`)."""
    found = _ERROR_TYPES.get(status)
    if found is not None:
        return found
    return "api_error" if status >= 500 else "invalid_request_error"


def error_body(message: str, type: str) -> dict[str, Any]:
    """``{"type": "error", "error": {"type", "message"}}``."""
    return {"type": "error", "error": {"type": type, "message": message}}


def error_event(message: str, type: str = "api_error") -> bytes:
    """The ``error`` SSE event of a stream that fails after its head was sent."""
    return encode_json(orjson.dumps(error_body(message, type)), event="error")


#: The keep-alive event sent while the agent is silent.
PING = b'event: ping\ndata: {"type":"ping"}\n\n'


@attrs.frozen(kw_only=True)
class MessagesRequest:
    """A validated Messages request.

    Attributes:
        turn: What the agent is asked.
        model: The ``model`` the client named.
        stream: Whether to answer with SSE events.
        max_tokens: The output budget (``None`` only for a token count).
        stop_sequences: Texts that end the reply where they appear.
        thinking: Whether the client enabled extended thinking.
    """

    turn: TurnRequest
    model: str
    stream: bool
    max_tokens: int | None
    stop_sequences: tuple[str, ...] = ()
    thinking: bool = False


# --- request parsing -----------------------------------------------------------


def _fail(message: str) -> AnthropicError:
    return AnthropicError(message)


def _obj(value: object, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(f"{path}: expected an object, got {kind_of(value)}")
    return value


def _str(obj: Mapping[str, Any], key: str, path: str, *, required: bool = True) -> str | None:
    value = obj.get(key)
    if value is None:
        if required:
            raise _fail(f"{path}.{key}: Field required")
        return None
    if not isinstance(value, str):
        raise _fail(f"{path}.{key}: expected a string, got {kind_of(value)}")
    return value


def _need_str(obj: Mapping[str, Any], key: str, path: str) -> str:
    value = _str(obj, key, path)
    assert value is not None
    return value


def _text_blocks(value: object, path: str) -> str:
    """A ``system`` or ``tool_result`` content: a string or text blocks, as one text."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise _fail(f"{path}: expected a string or an array of text blocks")
    parts = []
    for i, raw in enumerate(value):
        block = _obj(raw, f"{path}.{i}")
        if block.get("type") != "text":
            raise _fail(f"{path}.{i}.type: only 'text' blocks are supported here")
        parts.append(_need_str(block, "text", f"{path}.{i}"))
    return "".join(parts)


def _source_media(block: dict[str, Any], path: str, kind: str) -> tuple[ty.Media, str | None]:
    source = _obj(block.get("source"), f"{path}.source")
    stype = source.get("type")
    if stype == "base64":
        media_type = _need_str(source, "media_type", f"{path}.source")
        if kind == "image" and media_type not in _IMAGE_TYPES:
            allowed = ", ".join(sorted(_IMAGE_TYPES))
            raise _fail(f"{path}.source.media_type: must be one of {allowed}")
        return _need_str(source, "data", f"{path}.source"), media_type
    if stype == "url":
        return ty.MediaURL(url=_need_str(source, "url", f"{path}.source")), None
    if stype == "text" and kind == "document":
        text = _need_str(source, "data", f"{path}.source")
        return _b64(text), _str(source, "media_type", f"{path}.source", required=False) or (
            "text/plain"
        )
    allowed = "'base64', 'url' or 'text'" if kind == "document" else "'base64' or 'url'"
    raise _fail(f"{path}.source.type: must be {allowed}, got {stype!r}")


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _content_block(raw: object, path: str) -> ty.ContentItem:
    block = _obj(raw, path)
    kind = _need_str(block, "type", path)
    if kind == "text":
        return ty.TextContent(text=_need_str(block, "text", path))
    if kind == "image":
        media, media_type = _source_media(block, path, "image")
        return media_item("image", media, media_type, "image")
    if kind == "document":
        media, media_type = _source_media(block, path, "document")
        title = _str(block, "title", path, required=False) or "document"
        return media_item("file", media, media_type or "application/pdf", title)
    raise _fail(
        f"{path}.type: {kind!r} is not supported; use 'text', 'image', 'document', "
        "'tool_use' or 'tool_result'"
    )


def tool_input(arguments: str) -> dict[str, Any]:
    """A tool call's JSON arguments as the ``input`` object of a ``tool_use`` block.

    Arguments that are not a JSON object come back as ``{"arguments": text}``.
    """
    try:
        parsed = orjson.loads(arguments) if arguments else {}
    except orjson.JSONDecodeError:
        return {"arguments": arguments}
    return parsed if isinstance(parsed, dict) else {"arguments": arguments}


def _tool_use(block: dict[str, Any], path: str) -> ty.ToolInvocation:
    call_id = _need_str(block, "id", path)
    name = _need_str(block, "name", path)
    raw = block.get("input", {})
    if not isinstance(raw, dict):
        raise _fail(f"{path}.input: expected an object, got {kind_of(raw)}")
    return ty.ToolInvocation(id=call_id, name=name, arguments=orjson.dumps(raw).decode())


def _tool_result(block: dict[str, Any], path: str) -> ty.Message:
    call_id = _need_str(block, "tool_use_id", path)
    content = block.get("content", "")
    text = "" if content is None else _text_blocks(content, f"{path}.content")
    if block.get("is_error") is True:
        text = f"Error: {text}"
    return ty.Message(role="tool", content=text, tool_call_id=call_id)


#: Blocks a client may send back from an earlier reply; the agent does not need them.
_DROPPED = frozenset({"thinking", "redacted_thinking"})


def _message(raw: object, index: int) -> list[ty.Message]:
    path = f"messages.{index}"
    obj = _obj(raw, path)
    role = obj.get("role")
    if role not in ("user", "assistant"):
        raise _fail(f"{path}.role: must be 'user' or 'assistant', got {role!r}")
    content = obj.get("content")
    if isinstance(content, str):
        return [ty.Message(role=role, content=content)]
    if not isinstance(content, list):
        raise _fail(f"{path}.content: expected a string or an array of content blocks")
    items: list[ty.ContentItem] = []
    calls: list[ty.ToolInvocation] = []
    results: list[ty.Message] = []
    for i, raw_block in enumerate(content):
        where = f"{path}.content.{i}"
        block = _obj(raw_block, where)
        kind = block.get("type")
        if kind in _DROPPED:
            continue
        if kind == "tool_use":
            if role != "assistant":
                raise _fail(f"{where}.type: 'tool_use' blocks belong in assistant messages")
            calls.append(_tool_use(block, where))
        elif kind == "tool_result":
            if role != "user":
                raise _fail(f"{where}.type: 'tool_result' blocks belong in user messages")
            results.append(_tool_result(block, where))
        else:
            item = _content_block(block, where)
            if role == "assistant" and not isinstance(item, ty.TextContent):
                raise _fail(f"{where}.type: an assistant message carries text and tool_use only")
            items.append(item)
    text = "".join(i.text for i in items if isinstance(i, ty.TextContent))
    media = None if all(isinstance(i, ty.TextContent) for i in items) else items
    out = list(results)
    if items or calls or not results:
        out.append(
            ty.Message(role=role, content=text, content_items=media, tool_calls=calls or None)
        )
    return out


def _tools(value: object) -> list[ty.ToolDefinition]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _fail("tools: expected an array")
    out: list[ty.ToolDefinition] = []
    seen: set[str] = set()
    for i, raw in enumerate(value):
        path = f"tools.{i}"
        tool = _obj(raw, path)
        kind = tool.get("type", "custom")
        if kind not in ("custom", None):
            raise _fail(
                f"{path}.type: {kind!r} is a server tool, which is not supported here; "
                "declare client tools (name, description, input_schema)"
            )
        name = _need_str(tool, "name", path)
        if not _TOOL_NAME.match(name):
            raise _fail(f"{path}.name: must be 1-128 letters, digits, '_' or '-'")
        if name in seen:
            raise _fail(f"{path}.name: tool names must be unique ({name!r} repeats)")
        seen.add(name)
        schema = _obj(tool.get("input_schema"), f"{path}.input_schema")
        description = _str(tool, "description", path, required=False) or None
        out.append(
            ty.ToolDefinition(
                function=ty.FunctionDefinition(
                    name=name, description=description, parameters=schema
                )
            )
        )
    return out


def _tool_choice(value: object, names: set[str]) -> str | dict[str, Any] | None:
    if value is None:
        return None
    choice = _obj(value, "tool_choice")
    kind = choice.get("type")
    if kind == "auto":
        return "auto"
    if kind == "none":
        return "none"
    if kind == "any":
        if not names:
            raise _fail("tool_choice: 'any' needs at least one tool in 'tools'")
        return "required"
    if kind == "tool":
        name = _need_str(choice, "name", "tool_choice")
        if name not in names:
            raise _fail(f"tool_choice.name: {name!r} is not in 'tools'")
        return {"type": "function", "function": {"name": name}}
    raise _fail(f"tool_choice.type: must be 'auto', 'any', 'tool' or 'none', got {kind!r}")


def _thinking(value: object) -> bool:
    if value is None:
        return False
    config = _obj(value, "thinking")
    kind = config.get("type")
    if kind in ("enabled", "adaptive"):
        return True
    if kind == "disabled":
        return False
    raise _fail(f"thinking.type: must be 'enabled', 'adaptive' or 'disabled', got {kind!r}")


def _number(obj: Mapping[str, Any], key: str, lo: float, hi: float) -> float | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= value <= hi:
        raise _fail(f"{key}: must be a number from {lo:g} to {hi:g}")
    return value


def _stop_sequences(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(s, str) and s for s in value):
        raise _fail("stop_sequences: expected an array of non-empty strings")
    if len(value) > MAX_STOP_SEQUENCES or any(len(s) > MAX_STOP_LENGTH for s in value):
        raise _fail(
            f"stop_sequences: at most {MAX_STOP_SEQUENCES} sequences of at most "
            f"{MAX_STOP_LENGTH} characters"
        )
    return tuple(value)


def parse_request(
    body: Mapping[str, Any] | object,
    *,
    agent: str,
    response_id: str,
    session_id: str,
    principal: Principal = ANONYMOUS,
    counting: bool = False,
) -> MessagesRequest:
    """Validate a Messages request body (already decoded JSON) into a turn.

    Args:
        body: The decoded request body.
        agent: The agent addressed.
        response_id: The message id (``msg_...``), also the response id.
        session_id: The one-shot UAMP session this request stands for.
        principal: Who the request acts for.
        counting: A ``count_tokens`` body: ``max_tokens`` is not required.

    Raises:
        AnthropicError: a missing or mistyped field, an unsupported block.
    """
    obj = _obj(body, "body")
    model = _need_str(obj, "model", "body")
    assert model is not None
    max_tokens: int | None = None
    raw_max = obj.get("max_tokens")
    if raw_max is None and not counting:
        raise _fail("max_tokens: Field required")
    if raw_max is not None:
        if isinstance(raw_max, bool) or not isinstance(raw_max, int) or raw_max < 1:
            raise _fail("max_tokens: must be an integer of at least 1")
        max_tokens = raw_max
    raw_messages = obj.get("messages")
    if not isinstance(raw_messages, list):
        raise _fail("messages: Field required (an array of messages)")
    if not raw_messages:
        raise _fail("messages: at least one message is required")
    messages = [m for i, raw in enumerate(raw_messages) for m in _message(raw, i)]
    system = obj.get("system")
    instructions = None if system is None else _text_blocks(system, "system") or None
    tools = _tools(obj.get("tools"))
    tool_choice = _tool_choice(obj.get("tool_choice"), {t.function.name for t in tools})
    stream = obj.get("stream", False)
    if not isinstance(stream, bool):
        raise _fail("stream: expected a boolean")
    metadata: dict[str, Any] = {"model": model}
    if max_tokens is not None:
        metadata["max_tokens"] = max_tokens
    for key, lo, hi in (("temperature", 0.0, 1.0), ("top_p", 0.0, 1.0)):
        value = _number(obj, key, lo, hi)
        if value is not None:
            metadata[key] = value
    top_k = obj.get("top_k")
    if top_k is not None:
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
            raise _fail("top_k: must be a non-negative integer")
        metadata["top_k"] = top_k
    thinking = _thinking(obj.get("thinking"))
    if thinking:
        metadata["thinking"] = obj["thinking"]
    user_meta = obj.get("metadata")
    if user_meta is not None:
        user_id = _str(_obj(user_meta, "metadata"), "user_id", "metadata", required=False)
        if user_id is not None:
            metadata["user"] = user_id
    turn = TurnRequest(
        agent=agent,
        session_id=session_id,
        response_id=response_id,
        messages=messages,
        instructions=instructions,
        tools=tools,
        tool_choice=tool_choice,
        metadata=metadata,
        principal=principal,
        streamed=stream,
    )
    return MessagesRequest(
        turn=turn,
        model=model,
        stream=stream,
        max_tokens=max_tokens,
        stop_sequences=_stop_sequences(obj.get("stop_sequences")),
        thinking=thinking,
    )


def word_count(turn: TurnRequest) -> int:
    """The demo model's token count of a turn's input: whitespace-separated words.

    Counts the instructions, every message's text and every tool call's
    arguments (one more for each call), as the demo model counts usage.
    """
    total = len(turn.instructions.split()) if turn.instructions else 0
    for message in turn.messages:
        total += len(message.text.split())
        for call in message.tool_calls or ():
            total += 1 + len(call.arguments.split())
    return total


# --- stop sequences ----------------------------------------------------------------


class StopScanner:
    """Cuts streamed text at the first stop sequence, across delta boundaries.

    :meth:`feed` returns the text that may be shown now: text that could
    still be the start of a stop sequence is held back until the next delta
    says whether it is. Once a sequence is found, :attr:`matched` names it
    and everything after it is dropped. :meth:`flush` returns what is held
    back when the reply ends without a match.
    """

    __slots__ = ("_held", "matched", "sequences")

    def __init__(self, sequences: Sequence[str]) -> None:
        self.sequences = tuple(dict.fromkeys(sequences))  # a repeat adds only cost
        self.matched: str | None = None
        self._held = ""

    def feed(self, text: str) -> str:
        """The part of ``text`` (after what was held) that is safe to show."""
        if self.matched is not None:
            return ""
        buf = self._held + text
        first, found = self._earliest(buf)
        if found is not None:
            # A sequence starting earlier may still complete with the next
            # delta (["a", "baa"] fed "ba"): the earliest start wins, so the
            # text from there waits.
            start = self._open_start(buf, first)
            if start < first:
                self._held = buf[start:]
                return buf[:start]
            self.matched = found
            self._held = ""
            return buf[:first]
        hold = 0
        last = buf[-1:]
        for seq in self.sequences:
            for k in range(min(len(seq) - 1, len(buf)), hold, -1):
                # The last character first: most lengths are ruled out without a slice.
                if seq[k - 1] == last and buf.endswith(seq[:k]):
                    hold = k
                    break
        self._held = buf[len(buf) - hold :] if hold else ""
        return buf[: len(buf) - hold]

    def _earliest(self, buf: str) -> tuple[int, str | None]:
        """Where the first whole sequence in ``buf`` starts, and which (-1, ``None``: none)."""
        first, found = -1, None
        for seq in self.sequences:
            at = buf.find(seq)
            if at != -1 and (first == -1 or at < first):
                first, found = at, seq
        return first, found

    def _open_start(self, buf: str, before: int) -> int:
        """The first position before ``before`` where a sequence starts and runs past ``buf``'s end.

        ``before`` when there is none. Only the last ``len(longest) - 1``
        positions can hold one, so the work is bounded by the sequences'
        sizes, not the text's.
        """
        longest = max(len(seq) for seq in self.sequences)
        for at in range(max(0, len(buf) - longest + 1), before):
            tail = buf[at:]
            for seq in self.sequences:
                if len(seq) > len(tail) and seq.startswith(tail):
                    return at
        return before

    def flush(self) -> str:
        """What is held back, at the end of a reply: up to a match in it, if there is one.

        A match found only here (it waited on a longer sequence that did not
        complete) sets :attr:`matched`: read it after the flush.
        """
        held, self._held = self._held, ""
        if self.matched is not None:
            return ""
        first, found = self._earliest(held)
        if found is None:
            return held
        self.matched = found
        return held[:first]


# --- replies -------------------------------------------------------------------------


def usage_object(usage: ty.UsageStats | None) -> dict[str, Any]:
    """Anthropic's ``usage``: ``input_tokens``, ``output_tokens`` and the cache counts."""
    return {
        "input_tokens": (usage.input_tokens if usage else None) or 0,
        "output_tokens": (usage.output_tokens if usage else None) or 0,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": (usage.cached_tokens if usage else None) or 0,
    }


def stop_reason_for(
    tool_calls: Sequence[ty.ToolInvocation],
    usage: ty.UsageStats | None,
    max_tokens: int | None,
    stop_sequence: str | None = None,
) -> str:
    """``stop_sequence``, ``tool_use``, ``max_tokens`` (the budget used up) or ``end_turn``."""
    if stop_sequence is not None:
        return "stop_sequence"
    if tool_calls:
        return "tool_use"
    out = usage.output_tokens if usage is not None else None
    if max_tokens is not None and out is not None and out >= max_tokens:
        return "max_tokens"
    return "end_turn"


def _tool_use_block(call: ty.ToolInvocation) -> dict[str, Any]:
    return {
        "type": "tool_use",
        "id": call.id,
        "name": call.name,
        "input": tool_input(call.arguments),
    }


def _thinking_block(text: str) -> dict[str, Any]:
    return {"type": "thinking", "thinking": text, "signature": ""}


def message_object(
    *,
    message_id: str,
    model: str,
    text: str,
    tool_calls: Sequence[ty.ToolInvocation],
    stop_reason: str,
    usage: ty.UsageStats | None,
    stop_sequence: str | None = None,
    thinking: str | None = None,
) -> dict[str, Any]:
    """The ``message`` object of a finished reply."""
    content: list[dict[str, Any]] = []
    if thinking:
        content.append(_thinking_block(thinking))
    if text or not tool_calls:
        content.append({"type": "text", "text": text})
    content.extend(_tool_use_block(c) for c in tool_calls)
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": usage_object(usage),
    }


def _event(name: str, obj: Mapping[str, Any]) -> bytes:
    return b"event: %b\ndata: %b\n\n" % (name.encode(), orjson.dumps(obj))


#: Open-block kinds.
_TEXT, _THINKING = "text", "thinking"


class StreamEncoder:
    """Renders one turn's UAMP events as the Messages API's SSE events.

    Call :meth:`start`, then :meth:`feed` (or :meth:`text` for text) per
    event, then :meth:`finish`. Each returns the bytes to send (often
    ``b""``). Text and thinking deltas go into the open block of their
    kind, opening a new one (and closing the other) when the kind changes;
    a client tool call is a whole ``tool_use`` block of its own. With
    ``thinking`` off, thinking is not shown (as Anthropic's API does).
    """

    __slots__ = ("_head", "_index", "_open", "message_id", "model", "thinking")

    def __init__(self, *, message_id: str, model: str, thinking: bool = False) -> None:
        self.message_id = message_id
        self.model = model
        self.thinking = thinking
        self._index = -1
        self._open: str | None = None
        #: The bytes of a text delta's frame before its JSON-encoded text.
        self._head = b""

    def start(self) -> bytes:
        """``message_start``: the message with no content yet."""
        message: dict[str, Any] = {
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage_object(None),
        }
        return _event("message_start", {"type": "message_start", "message": message})

    def _open_block(self, kind: str, block: dict[str, Any]) -> bytes:
        out = self._close()
        self._index += 1
        self._open = kind
        if kind == _TEXT:
            self._head = (
                b'event: content_block_delta\ndata: {"type":"content_block_delta","index":%d,'
                b'"delta":{"type":"text_delta","text":' % self._index
            )
        start = {"type": "content_block_start", "index": self._index, "content_block": block}
        return out + _event("content_block_start", start)

    def _close(self) -> bytes:
        if self._open is None:
            return b""
        self._open = None
        return _event("content_block_stop", {"type": "content_block_stop", "index": self._index})

    def text(self, text: str) -> bytes:
        """The events for a text delta (``b""`` for an empty one)."""
        if not text:
            return b""
        if self._open is _TEXT:
            return b"".join((self._head, orjson.dumps(text), b"}}\n\n"))
        opened = self._open_block(_TEXT, {"type": "text", "text": ""})
        return b"".join((opened, self._head, orjson.dumps(text), b"}}\n\n"))

    def feed(self, event: ev.Event | ev.UnknownEvent) -> bytes:
        """The events for one UAMP event (``b""`` for none)."""
        if isinstance(event, ev.ResponseDelta):
            delta = event.delta
            return self.text(delta.text) if isinstance(delta, ty.DeltaText) else b""
        if isinstance(event, ev.ToolCall):
            block = {"type": "tool_use", "id": event.call_id, "name": event.name, "input": {}}
            out = self._open_block("tool_use", block)
            if event.arguments:
                json_delta = {"type": "input_json_delta", "partial_json": event.arguments}
                frame = {"type": "content_block_delta", "index": self._index, "delta": json_delta}
                out += _event("content_block_delta", frame)
            return out + self._close()
        if (
            isinstance(event, ev.Thinking)
            and self.thinking
            and event.content
            and not event.redacted
        ):
            out = b""
            if self._open is not _THINKING:
                out = self._open_block(_THINKING, _thinking_block(""))
            thought = {"type": "thinking_delta", "thinking": event.content}
            frame = {"type": "content_block_delta", "index": self._index, "delta": thought}
            return out + _event("content_block_delta", frame)
        return b""

    def finish(
        self,
        stop_reason: str,
        usage: ty.UsageStats | None,
        stop_sequence: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> bytes:
        """Close the open block, then ``message_delta`` and ``message_stop``.

        ``extra`` goes on ``message_stop`` as more members (the response
        signature, the payment balance): the SDK keeps unknown members.
        """
        totals = usage_object(usage)
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
            "usage": totals,
        }
        stop: dict[str, Any] = {"type": "message_stop"}
        if extra:
            stop.update(extra)
        return b"".join(
            (self._close(), _event("message_delta", delta), _event("message_stop", stop))
        )


#: The content type of spec 003's envelope binding, which shares ``POST /v1/messages``.
UAMP_JSON = "application/uamp+json"


def speaks_anthropic(get_header: Callable[[str], str | None]) -> bool:
    """Whether a request head is an Anthropic API call (not spec 003's envelope binding).

    ``get_header`` reads a header by its lowercase name. An Anthropic call
    carries ``anthropic-version`` or ``x-api-key`` and no
    ``application/uamp+json`` body.
    """
    if get_header("anthropic-version") is None and get_header("x-api-key") is None:
        return False
    ctype = get_header("content-type")
    return ctype is None or not ctype.lstrip().lower().startswith(UAMP_JSON)


def model_info(name: str) -> dict[str, Any]:
    """The Anthropic model object of the agent ``name``."""
    return {
        "type": "model",
        "id": name,
        "display_name": name,
        "created_at": "1970-01-01T00:00:00Z",
        "lifecycle": "active",
    }


def failure(outcome: ResponseOutcome) -> tuple[int, str, str]:
    """``(HTTP status, error type, message)`` of a failed or cancelled turn."""
    error = outcome.error
    code = error.code if error else "internal_error"
    message = error.message if error else "The response ended without output."
    status = STATUS_FOR_CODE.get(code, 500)
    return status, error_type_for(status), message
