"""Content ids (UAMP 8.5.4): where a media item's id comes from, and finding it again.

A media content item (image, audio, video, file) carries ``content_id``, a
UUID that names it across agents. The id is the one the client gave; else,
for a ``/api/content/<uuid>`` URL (Robutler's content store), that UUID, so
the item keeps its storage id; else a fresh UUID from the id source.

The conversation is the registry (no store of its own): :func:`find_content`
scans the messages' ``content_items``, tool results' included, newest
first, for an id -- what a delegation's ``attachments`` and the ``present``
tool's ids resolve to. The spec's UUID fallback (for references written
before content ids): a reference that names no item's id but is a UUID, or
a ``/api/content/<uuid>`` URL, finds the item whose id is that UUID or whose
URL is that content URL. Only the conversation is searched: a UUID of
content the conversation does not hold (another principal's, say) finds
nothing, exactly like a made-up one.
:func:`labels` is how a tool result's media are named to a model without
their URLs (the "text purity" rule).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence

import attrs

from .ids import IdSource
from .types import (
    AudioContent,
    ContentItem,
    FileContent,
    ImageContent,
    MediaURL,
    Message,
    ToolResultContent,
    VideoContent,
)

__all__ = [
    "MEDIA_ITEMS",
    "MediaItem",
    "content_id_of",
    "find_content",
    "labels",
    "media_items",
    "with_content_ids",
]

#: The content item types that carry a ``content_id``.
MEDIA_ITEMS = (ImageContent, AudioContent, VideoContent, FileContent)

_UUID_TEXT = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_UUID = re.compile(_UUID_TEXT)
_CONTENT_URL = re.compile(rf"/api/content/({_UUID_TEXT})(?=$|[/?#])")

#: One media content item.
MediaItem = ImageContent | AudioContent | VideoContent | FileContent


def _media(item: MediaItem) -> object:
    return getattr(item, item.type)


def content_id_of(media: object, given: str | None, ids: IdSource) -> str:
    """The content id of a media item: ``given``, a content URL's UUID, or a new one."""
    if given:
        return given
    if isinstance(media, MediaURL):
        found = _CONTENT_URL.search(media.url)
        if found is not None:
            return found.group(1).lower()
    return ids("content")


def with_content_ids(messages: Sequence[Message], ids: IdSource) -> list[Message]:
    """``messages`` with an id on every media item that had none (others unchanged)."""
    out: list[Message] = []
    for message in messages:
        items = message.content_items
        if not items or all(
            not isinstance(i, MEDIA_ITEMS) or i.content_id is not None for i in items
        ):
            out.append(message)
            continue
        filled: list[ContentItem] = [
            attrs.evolve(i, content_id=content_id_of(_media(i), None, ids))
            if isinstance(i, MEDIA_ITEMS) and i.content_id is None
            else i
            for i in items
        ]
        out.append(attrs.evolve(message, content_items=filled))
    return out


def media_items(items: Iterable[ContentItem]) -> Iterator[MediaItem]:
    """The media items among ``items``, those inside tool results included."""
    for item in items:
        if isinstance(item, MEDIA_ITEMS):
            yield item
        elif isinstance(item, ToolResultContent) and item.tool_result.content_items:
            yield from media_items(item.tool_result.content_items)


def _conversation_media(messages: Sequence[Message]) -> Iterator[MediaItem]:
    """Every media item of ``messages``, newest message first."""
    for message in reversed(messages):
        yield from media_items(message.content_items or ())


def _storage_uuid(item: MediaItem) -> str | None:
    """The UUID of the ``/api/content/<uuid>`` URL ``item`` is, if it is one."""
    media = _media(item)
    found = _CONTENT_URL.search(media.url) if isinstance(media, MediaURL) else None
    return found.group(1).lower() if found else None


def _uuid_of(reference: str) -> str | None:
    """The UUID a reference names: itself, or a content URL's; ``None``: neither."""
    if _UUID.fullmatch(reference):
        return reference.lower()
    found = _CONTENT_URL.search(reference)
    return found.group(1).lower() if found else None


def find_content(messages: Sequence[Message], content_id: str) -> MediaItem | None:
    """The media item ``content_id`` names in the conversation, newest first, or ``None``.

    An item whose ``content_id`` it is; else, when ``content_id`` is a UUID
    or a ``/api/content/<uuid>`` URL, the item with that UUID as its id or
    as its content URL's (the spec's UUID fallback).
    """
    wanted = content_id.strip().lower()
    for item in _conversation_media(messages):
        if item.content_id is not None and item.content_id.lower() == wanted:
            return item
    uuid = _uuid_of(wanted)
    if uuid is None:
        return None
    for item in _conversation_media(messages):
        if (item.content_id or "").lower() == uuid or _storage_uuid(item) == uuid:
            return item
    return None


def labels(items: Iterable[ContentItem]) -> str:
    """One line per media item for a model: its kind, id and description, never its URL.

    The description is the item's ``description`` (an extra field a content
    producer sets), else an image's ``alt_text``, else a file's name.
    """
    lines = []
    for item in media_items(items):
        described = item.unknown.get("description")
        if not isinstance(described, str):
            described = getattr(item, "alt_text", None) or getattr(item, "filename", None)
        line = f"[{item.type} {item.content_id}]"
        lines.append(f"{line} {described}" if described else line)
    return "\n".join(lines)
