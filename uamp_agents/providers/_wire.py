"""Vendor-neutral pieces of the mapping between uamp and model vendors' JSON.

Each provider module (``_openai``, ``_anthropic``, ``_google``) translates
uamp_proto types to one vendor's request body and the vendor's answer back;
this module holds what those translations share, so that each module says
only what is particular to its vendor:

* requests: parameters (:func:`merge_params`), the system prompt and merged
  turns (:func:`system_and_turns`), the ``response_format`` schema of spec
  section 8.3 (:func:`schema_of`), ``tool_choice`` (:func:`wire_tool_choice`);
* messages: a uamp :class:`~uamp_proto.types.Message` split into ordered
  text and media, tool calls, tool results and thinking
  (:func:`split_message`);
* media: URL or base64 data and its MIME type (:func:`media_ref`);
* responses: finish reasons (:func:`finish_reason`), token counts
  (:func:`add_counts`), tool-call arguments (:func:`json_arguments`,
  :func:`arguments_object`).

The HTTP side (client, retries, event streams) is :mod:`._http`.
"""

from __future__ import annotations

import base64
import binascii
import mimetypes
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs
import orjson

from uamp_proto.types import (
    AudioContent,
    ContentItem,
    FileContent,
    ImageContent,
    MediaURL,
    Message,
    ResponseFormat,
    TextContent,
    ThinkingContent,
    ToolCallContent,
    ToolInvocation,
    ToolOutput,
    ToolResultContent,
    VideoContent,
)

from .base import ProviderError

__all__ = [
    "MediaItem",
    "MediaRef",
    "MessageParts",
    "add_counts",
    "arguments_object",
    "decode_base64_text",
    "finish_reason",
    "json_arguments",
    "media_ref",
    "merge_params",
    "only_text",
    "parse_json_object",
    "schema_of",
    "split_message",
    "system_and_turns",
    "unsupported",
    "wire_tool_choice",
]


# --- Parameters ---------------------------------------------------------------


def merge_params(*layers: Mapping[str, Any] | None) -> dict[str, Any]:
    """Merge parameter dicts, later ones winning; ``None`` values are dropped."""
    merged: dict[str, Any] = {}
    for layer in layers:
        if layer:
            merged.update(layer)
    return {k: v for k, v in merged.items() if v is not None}


def system_and_turns(
    messages: Iterable[Message],
    wire: Callable[[Message], tuple[str, list[dict[str, Any]]]],
    items: str,
) -> tuple[list[str], list[dict[str, Any]]]:
    """The system texts and the vendor turns of a conversation.

    ``role="system"`` messages give the system texts; every other message
    becomes ``wire(message)``'s (role, items). A message with no items is
    left out and consecutive turns of one role are merged into one
    ``{"role", items: [...]}`` turn, so the results of parallel tool calls
    travel together (Anthropic and Gemini require alternating turns).
    """
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            if message.text:
                system.append(message.text)
            continue
        role, parts = wire(message)
        if not parts:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1][items].extend(parts)
        else:
            turns.append({"role": role, items: parts})
    return system, turns


def schema_of(response_format: ResponseFormat) -> tuple[str, dict[str, Any]]:
    """The (name, JSON Schema) of a ``json_schema`` response format.

    ``json_schema`` is OpenAI-shaped (``{"name", "schema", "strict"}``, which
    is how OpenAI passes it through natively, spec 8.3); a bare schema
    object is accepted too.
    """
    spec = response_format.json_schema or {}
    if isinstance(spec.get("schema"), dict):
        name = spec.get("name")
        return (name if isinstance(name, str) and name else "response", dict(spec["schema"]))
    return "response", dict(spec)


# --- Messages -----------------------------------------------------------------

MediaItem = ImageContent | AudioContent | VideoContent | FileContent


@attrs.frozen(kw_only=True)
class MessageParts:
    """A uamp message split into what vendor formats need.

    Attributes:
        content: Text and media in their original order.
        tool_calls: The assistant's tool calls (``tool_calls`` first, then
            ``tool_call`` content items not already listed).
        tool_results: Tool outputs (a ``role="tool"`` message, or
            ``tool_result`` content items).
        thinking: Persisted thinking items (section 6.13).
    """

    content: list[TextContent | MediaItem]
    tool_calls: list[ToolInvocation]
    tool_results: list[ToolOutput]
    thinking: list[ThinkingContent]


def split_message(message: Message) -> MessageParts:
    """Split ``message`` into ordered content, tool calls, results and thinking.

    Section 8.5: when ``content_items`` carries media it is the full payload
    (its text items included); ``content`` is the text-only form. Without
    media, ``content`` (or the joined text items) is the text.
    """
    items: list[ContentItem] = list(message.content_items or [])
    media_present = any(isinstance(i, MediaItem) for i in items)
    content: list[TextContent | MediaItem] = []
    if message.role == "tool":
        pass  # a tool message's text is its result, not content
    elif media_present:
        if message.content and not any(isinstance(i, TextContent) for i in items):
            content.append(TextContent(text=message.content))
        content.extend(i for i in items if isinstance(i, TextContent | MediaItem))
    elif message.text:
        content.append(TextContent(text=message.text))

    calls = list(message.tool_calls or [])
    seen = {c.id for c in calls}
    for item in items:
        if isinstance(item, ToolCallContent) and item.tool_call.id not in seen:
            calls.append(item.tool_call)
            seen.add(item.tool_call.id)

    results = [i.tool_result for i in items if isinstance(i, ToolResultContent)]
    if message.role == "tool" and not results:
        results.append(ToolOutput(call_id=message.tool_call_id or "", result=message.text))
    thinking = [i for i in items if isinstance(i, ThinkingContent)]
    return MessageParts(content=content, tool_calls=calls, tool_results=results, thinking=thinking)


def only_text(parts: MessageParts) -> bool:
    """Whether the ordered content is text only (no media)."""
    return all(isinstance(i, TextContent) for i in parts.content)


# --- Media --------------------------------------------------------------------

# Base64 prefixes of common file signatures, to name a MIME type when the
# content item does not.
_BASE64_MAGIC = (
    ("iVBORw0KGgo", "image/png"),
    ("/9j/", "image/jpeg"),
    ("R0lGOD", "image/gif"),
    ("UklGR", "image/webp"),
    ("JVBERi0", "application/pdf"),
    ("SUQz", "audio/mpeg"),
    ("//u", "audio/mpeg"),
)

_AUDIO_MIME = {
    "mp3": "audio/mpeg",
    "wav": "audio/wav",
    "pcm16": "audio/pcm",
    "opus": "audio/opus",
    "ogg": "audio/ogg",
    "webm": "audio/webm",
    "aac": "audio/aac",
    "flac": "audio/flac",
    "g711_ulaw": "audio/basic",
}


@attrs.frozen(kw_only=True)
class MediaRef:
    """Where a media item's bytes are: a URL, or base64 data, and its MIME type."""

    url: str | None
    data: str | None
    mime_type: str

    @property
    def data_url(self) -> str:
        """A ``data:`` URL for base64 content, else the URL itself."""
        if self.url is not None:
            return self.url
        return f"data:{self.mime_type};base64,{self.data}"


def _default_mime(item: MediaItem) -> str:
    if isinstance(item, FileContent):
        return item.mime_type
    if isinstance(item, ImageContent):
        fmt = (item.format or "").lower()
        return f"image/{'jpeg' if fmt == 'jpg' else fmt}" if fmt else ""
    if isinstance(item, AudioContent):
        fmt = (item.format or "").lower()
        return _AUDIO_MIME.get(fmt, f"audio/{fmt}" if fmt else "")
    fmt = (item.format or "").lower()
    return f"video/{fmt}" if fmt else ""


def _media_of(item: MediaItem) -> str | MediaURL:
    if isinstance(item, ImageContent):
        return item.image
    if isinstance(item, AudioContent):
        return item.audio
    if isinstance(item, VideoContent):
        return item.video
    return item.file


def media_ref(item: MediaItem) -> MediaRef:
    """Resolve a media item to a URL or base64 data with a MIME type.

    A string is base64 per spec 8.4.1, except that ``data:`` URLs and
    ``http(s)://`` strings are recognised for what they are.
    """
    media = _media_of(item)
    mime = _default_mime(item)
    if isinstance(media, MediaURL):
        url = media.url
    elif media.startswith(("http://", "https://", "data:")):
        url = media
    else:
        data = "".join(media.split())
        if not mime:
            mime = next((m for p, m in _BASE64_MAGIC if data.startswith(p)), "")
        return MediaRef(url=None, data=data, mime_type=mime or "application/octet-stream")
    if url.startswith("data:"):
        header, _, data = url.partition(",")
        declared = header[5:].split(";")[0]
        return MediaRef(
            url=None, data=data, mime_type=declared or mime or "application/octet-stream"
        )
    if not mime:
        mime = mimetypes.guess_type(url.split("?")[0])[0] or ""
    return MediaRef(url=url, data=None, mime_type=mime or "application/octet-stream")


def decode_base64_text(data: str) -> str:
    """Decode base64 to UTF-8 text (for text documents), or raise ProviderError."""
    try:
        return base64.b64decode(data, validate=False).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise ProviderError(f"file content is not base64 UTF-8 text: {exc}") from exc


def unsupported(provider: str, what: str) -> ProviderError:
    """A non-retryable error for input the provider's API cannot take."""
    return ProviderError(f"{provider}: {what} is not supported by this API")


# --- Responses ----------------------------------------------------------------


def finish_reason(
    reason: Any, table: Mapping[str, str], *, calls: bool, call_reasons: Iterable[Any] = ()
) -> str:
    """A vendor's finish reason as uamp's normalised one.

    ``tool_calls`` when the answer has tool ``calls`` and the vendor's reason
    is one of ``call_reasons`` (which may hold ``None``: no reason given);
    otherwise ``reason`` looked up in ``table``, ``stop`` when unknown.
    """
    if calls and reason in call_reasons:
        return "tool_calls"
    return table.get(reason, "stop") if isinstance(reason, str) else "stop"


def wire_tool_choice(
    provider: str,
    choice: str | dict[str, Any] | None,
    modes: Mapping[str, str],
    *,
    mode: Callable[[str], dict[str, Any]],
    named: Callable[[Any], dict[str, Any]],
) -> dict[str, Any] | None:
    """A uamp ``tool_choice`` in a vendor's shape.

    A string (``auto``, ``none``, ``required`` ...) is looked up in ``modes``
    and given to ``mode``; a named function (``{"type": "function",
    "function": {"name"}}``) gives its name to ``named``; any other object is
    taken to be in the vendor's shape already and passed on.

    Raises:
        ProviderError: A string not in ``modes`` (not retryable).
    """
    if choice is None:
        return None
    if isinstance(choice, str):
        vendor_mode = modes.get(choice)
        if vendor_mode is None:
            raise ProviderError(f"{provider}: unknown tool_choice {choice!r}")
        return mode(vendor_mode)
    if choice.get("type") == "function":
        return named((choice.get("function") or {}).get("name"))
    return dict(choice)


def add_counts(*counts: Any) -> int | None:
    """The sum of the token counts that are integers; ``None`` when none is."""
    numbers = [c for c in counts if isinstance(c, int)]
    return sum(numbers) if numbers else None


def json_arguments(value: Any) -> str:
    """Tool-call arguments as a JSON string (servers send a string or an object)."""
    if isinstance(value, str):
        return value or "{}"
    if value is None:
        return "{}"
    return orjson.dumps(value).decode()


def arguments_object(call: ToolInvocation) -> dict[str, Any]:
    """A tool call's arguments as a JSON object (``{}`` when they are not one)."""
    return parse_json_object(call.arguments or "{}") or {}


def parse_json_object(text: str) -> dict[str, Any] | None:
    """``text`` parsed as a JSON object, or ``None`` if it is not one."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
