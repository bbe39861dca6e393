"""Content items for media, shared by the adapters that read media parts (A2A, AG-UI)."""

from __future__ import annotations

from .. import types as ty

__all__ = ["media_item"]


def media_item(kind: str, media: ty.Media, media_type: str | None, filename: str) -> ty.ContentItem:
    """The UAMP content item for media of ``kind``.

    Args:
        kind: ``"image"``, ``"audio"`` or ``"video"``; anything else is a file.
        media: The data (base64) or its URL.
        media_type: The MIME type, when known; its subtype is the item's
            ``format`` (``image/png`` -> ``png``).
        filename: The file item's name.
    """
    subtype = media_type.split("/", 1)[1] if media_type and "/" in media_type else None
    if kind == "image":
        return ty.ImageContent(image=media, format=subtype)
    if kind == "audio":
        return ty.AudioContent(audio=media, format=subtype)
    if kind == "video":
        return ty.VideoContent(video=media, format=subtype)
    return ty.FileContent(
        file=media, filename=filename, mime_type=media_type or "application/octet-stream"
    )
