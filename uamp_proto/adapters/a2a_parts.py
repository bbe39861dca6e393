"""A2A messages and parts <-> UAMP content items, in both dialects.

:func:`parse_message` reads a message of either dialect (or of spec 004's
``type`` form) into an :class:`A2AMessage`: its parts as UAMP content items,
and the payloads of its data parts beside them (tool results and answers to
interrupts travel there: :func:`data_entries`, :func:`parse_tool_results`).
:func:`render_part` writes a content item as a 1.0 or 0.3 part: text as
text, media as bytes or a URL with its media type, anything else (tool
calls, thinking ...) as a data part holding its UAMP JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import orjson

from .. import types as ty
from ..codec import unstructure
from ._media import media_item
from .a2a_rpc import INVALID_PARAMS, A2AError, Dialect

__all__ = [
    "A2AMessage",
    "accepts_media",
    "data_entries",
    "opt_str",
    "parse_message",
    "parse_tool_results",
    "render_part",
]

# --- messages and parts ----------------------------------------------------------------------


def _invalid(message: str) -> A2AError:
    return A2AError(INVALID_PARAMS, message)


@attrs.frozen(kw_only=True)
class A2AMessage:
    """One A2A message, parsed.

    Attributes:
        message_id: The sender's id for it.
        role: ``"user"`` or ``"agent"``.
        items: Its parts as UAMP content items (data parts become text
            holding their JSON).
        data: The payloads of its data parts, in order (tool results travel
            here).
        context_id: The conversation it belongs to, if given.
        task_id: The task it continues, if given.
        metadata: Its metadata object.
    """

    message_id: str
    role: str
    items: list[ty.ContentItem]
    data: list[Any] = attrs.field(factory=list)
    context_id: str | None = None
    task_id: str | None = None
    metadata: dict[str, Any] | None = None
    reference_task_ids: list[str] = attrs.field(factory=list)
    extensions: list[str] = attrs.field(factory=list)
    media_types: list[str] = attrs.field(factory=list)

    @property
    def text(self) -> str:
        """The text of its text parts, joined by newlines."""
        return "\n".join(i.text for i in self.items if isinstance(i, ty.TextContent))

    def to_uamp(self) -> ty.Message:
        """The UAMP conversation message (agent messages become ``assistant``)."""
        role = "assistant" if self.role == "agent" else "user"
        if all(isinstance(i, ty.TextContent) for i in self.items):
            return ty.Message(role=role, content=self.text)
        return ty.Message(role=role, content_items=list(self.items))


def opt_str(obj: Mapping[str, Any], key: str, where: str) -> str | None:
    """An optional string member (``""`` counts as absent), ``where`` prefixing its name.

    Raises:
        A2AError: :data:`INVALID_PARAMS` naming the field.
    """
    value = obj.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        field = f"{where}.{key}" if where and not where.endswith(".") else f"{where}{key}"
        raise _invalid(f"'{field}' must be a string.")
    return value


def _media_item(media: ty.Media, media_type: str | None, filename: str | None) -> ty.ContentItem:
    # A2A parts carry no kind of their own: the MIME type's major part says it.
    kind = (media_type or "").split("/", 1)[0]
    return media_item(kind, media, media_type, filename or "file")


def _parse_part(part: object, where: str) -> tuple[ty.ContentItem | None, Any]:
    """One part (either dialect, or spec 004's ``type`` form) -> (item, data payload)."""
    if not isinstance(part, dict):
        raise _invalid(f"'{where}' must be an object.")
    kind = part.get("kind", part.get("type"))
    if kind is None:  # 1.0: exactly one content member
        members = [k for k in ("text", "raw", "url", "data") if k in part]
        if len(members) > 1:
            raise _invalid(f"'{where}' has {' and '.join(members)}: a part holds exactly one.")
        media_type = opt_str(part, "mediaType", where)
        filename = opt_str(part, "filename", where)
        if isinstance(part.get("text"), str):
            return ty.TextContent(text=part["text"]), None
        if isinstance(part.get("raw"), str):
            return _media_item(part["raw"], media_type, filename), None
        if isinstance(part.get("url"), str):
            return _media_item(ty.MediaURL(url=part["url"]), media_type, filename), None
        if "data" in part:
            data = part["data"]
            return ty.TextContent(text=orjson.dumps(data).decode()), data
        raise _invalid(f"'{where}' has no content: expected text, raw, url or data.")
    if kind == "text":
        text = part.get("text")
        if not isinstance(text, str):
            raise _invalid(f"'{where}.text' must be a string.")
        return ty.TextContent(text=text), None
    if kind == "file":
        spec = part.get("file")
        if not isinstance(spec, dict):
            raise _invalid(f"'{where}.file' must be an object.")
        media_type = opt_str(spec, "mimeType", f"{where}.file")
        name = opt_str(spec, "name", f"{where}.file")
        if isinstance(spec.get("bytes"), str):
            return _media_item(spec["bytes"], media_type, name), None
        if isinstance(spec.get("uri"), str):
            return _media_item(ty.MediaURL(url=spec["uri"]), media_type, name), None
        raise _invalid(f"'{where}.file' needs 'bytes' or 'uri'.")
    if kind == "data":
        if "data" not in part:
            raise _invalid(f"'{where}.data' is required.")
        data = part["data"]
        return ty.TextContent(text=orjson.dumps(data).decode()), data
    raise _invalid(f"'{where}.kind' must be 'text', 'file' or 'data', got {kind!r}.")


_ROLES = {"user": "user", "ROLE_USER": "user", "agent": "agent", "ROLE_AGENT": "agent"}


def parse_message(obj: object, *, where: str = "message", message_id: str = "") -> A2AMessage:
    """Validate an A2A message of either dialect.

    Args:
        obj: The decoded ``message`` object.
        where: Its path, for error messages.
        message_id: The id to use when the message carries none (spec 004's
            REST form does not require one).

    Raises:
        A2AError: :data:`INVALID_PARAMS` naming the offending field.
    """
    if not isinstance(obj, dict):
        raise _invalid(f"'{where}' must be an object.")
    role = _ROLES.get(str(obj.get("role", "")))
    if role is None:
        raise _invalid(f"'{where}.role' must be 'user' or 'agent' (ROLE_USER or ROLE_AGENT).")
    parts = obj.get("parts")
    if not isinstance(parts, list) or not parts:
        raise _invalid(f"'{where}.parts' must be a non-empty array.")
    items: list[ty.ContentItem] = []
    data: list[Any] = []
    media_types: list[str] = []
    for i, part in enumerate(parts):
        item, payload = _parse_part(part, f"{where}.parts[{i}]")
        if item is not None:
            items.append(item)
        if payload is not None:
            data.append(payload)
        media_type = _part_media_type(part)
        if media_type:
            media_types.append(media_type)
    metadata = obj.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise _invalid(f"'{where}.metadata' must be an object.")
    mid = opt_str(obj, "messageId", where) or message_id
    if not mid:
        raise _invalid(f"'{where}.messageId' is required.")
    return A2AMessage(
        message_id=mid,
        role=role,
        items=items,
        data=data,
        context_id=opt_str(obj, "contextId", where),
        task_id=opt_str(obj, "taskId", where),
        metadata=metadata,
        reference_task_ids=_str_list(obj, "referenceTaskIds", where),
        extensions=_str_list(obj, "extensions", where),
        media_types=media_types,
    )


def _part_media_type(part: dict[str, Any]) -> str | None:
    """The media type a part declares (1.0 ``mediaType``, 0.3 ``file.mimeType``)."""
    value = part.get("mediaType")
    spec = part.get("file")
    if value is None and isinstance(spec, dict):
        value = spec.get("mimeType")
    return value if isinstance(value, str) and value else None


def accepts_media(modes: list[str], media_type: str) -> bool:
    """Whether ``media_type`` matches one of ``modes`` (``image/*`` and ``*/*`` wildcards)."""
    wanted = media_type.split(";", 1)[0].strip().lower()
    major = wanted.split("/", 1)[0]
    for mode in modes:
        mode = mode.lower()
        if mode in (wanted, "*/*") or (mode.endswith("/*") and mode[:-2] == major):
            return True
    return False


def _str_list(obj: Mapping[str, Any], key: str, where: str) -> list[str]:
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _invalid(f"'{where}.{key}' must be an array of strings.")
    return list(value)


def data_entries(data: list[Any], wrapper: str, key: str) -> list[dict[str, Any]]:
    """The answer objects in a message's data parts: those with ``key``.

    A data part is one such object, a list of them, or ``{wrapper: [...]}``.
    """
    flat: list[Any] = []
    for payload in data:
        if isinstance(payload, dict) and isinstance(payload.get(wrapper), list):
            flat.extend(payload[wrapper])
        elif isinstance(payload, list):
            flat.extend(payload)
        else:
            flat.append(payload)
    return [entry for entry in flat if isinstance(entry, dict) and key in entry]


def parse_tool_results(message: A2AMessage, pending: list[ty.ToolInvocation]) -> list[ty.Message]:
    """The ``role="tool"`` messages a resuming message answers ``pending`` with.

    A data part ``{"call_id": ..., "result": ...}`` (or a list of them, or
    ``{"tool_results": [...]}``) answers the call it names; otherwise, with
    exactly one call pending, the message's text is its result.

    Raises:
        A2AError: :data:`INVALID_PARAMS` when a pending call is left
            unanswered or a result names no pending call.
    """
    wanted = {call.id for call in pending}
    results: dict[str, str] = {}
    for entry in data_entries(message.data, "tool_results", "call_id"):
        call_id = entry["call_id"]
        if call_id not in wanted:
            raise _invalid(f"Tool result for {call_id!r} answers no pending tool call.")
        result = entry.get("result", "")
        results[call_id] = result if isinstance(result, str) else orjson.dumps(result).decode()
    if not results and len(pending) == 1:
        results[pending[0].id] = message.text
    missing = [call.id for call in pending if call.id not in results]
    if missing:
        raise _invalid(
            "The task is waiting for tool results; send a data part "
            '{"call_id": ..., "result": ...} for ' + ", ".join(missing) + "."
        )
    return [ty.Message(role="tool", tool_call_id=cid, content=results[cid]) for cid in results]


def _media_fields(media: ty.Media) -> tuple[str | None, str | None]:
    """(base64, url) of a media field."""
    return (None, media.url) if isinstance(media, ty.MediaURL) else (media, None)


def _item_media(item: ty.ContentItem) -> tuple[ty.Media, str, str | None] | None:
    if isinstance(item, ty.ImageContent):
        return item.image, f"image/{item.format or 'png'}", None
    if isinstance(item, ty.AudioContent):
        return item.audio, f"audio/{item.format or 'wav'}", None
    if isinstance(item, ty.VideoContent):
        return item.video, f"video/{item.format or 'mp4'}", None
    if isinstance(item, ty.FileContent):
        return item.file, item.mime_type, item.filename
    return None


def render_part(
    item: ty.ContentItem | Any, dialect: Dialect, *, data: bool = False
) -> dict[str, Any]:
    """One part on the wire.

    Args:
        item: A content item, or (with ``data=True``) any JSON value for a
            data part.
        dialect: Which dialect to write.
        data: Write ``item`` as a data part.
    """
    v1 = dialect is Dialect.V1
    if data:
        return {"data": item} if v1 else {"kind": "data", "data": item}
    if isinstance(item, ty.TextContent):
        return {"text": item.text} if v1 else {"kind": "text", "text": item.text}
    if isinstance(item, ty.UnknownContent) and item.type == "data":
        value = item.raw.get("data")
        return {"data": value} if v1 else {"kind": "data", "data": value}
    media = _item_media(item)
    if media is None:  # tool calls, results, thinking...: their JSON as data
        value = unstructure(item)
        return {"data": value} if v1 else {"kind": "data", "data": value}
    content, media_type, filename = media
    raw, url = _media_fields(content)
    if v1:
        out: dict[str, Any] = {"raw": raw} if raw is not None else {"url": url}
        out["mediaType"] = media_type
        if filename:
            out["filename"] = filename
        return out
    spec: dict[str, Any] = {"bytes": raw} if raw is not None else {"uri": url}
    spec["mimeType"] = media_type
    if filename:
        spec["name"] = filename
    return {"kind": "file", "file": spec}
