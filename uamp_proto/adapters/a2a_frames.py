"""Stream frames of A2A text chunks made from templates (the hot path of a streamed task).

A streamed task sends one artifact update per text delta, and all of them
but the text have the same JSON: the task and context ids, the artifact's
id and name, ``append`` and ``lastChunk``, the binding's envelope (a
JSON-RPC response with the request's id) and framing (SSE). Rendering each
through dicts and ``orjson`` costs more than the rest of the update's way.

:class:`TextChunkFrames` is given the binding's general ``encode`` (a
stream result -> the frame's bytes). The first chunk of a shape is encoded
once with a marker in place of its text; the bytes before and after the
marker's JSON are the template, and each later chunk of that shape is
``head + JSON(text) + tail``: the very bytes ``encode`` makes of it (a
hypothesis test compares the two, tests/proto/test_adapter_a2a_frames.py).
Every other update goes the general way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import orjson

from .. import types as ty
from .a2a_render import render_update
from .a2a_rpc import Dialect
from .a2a_tasks import Update

__all__ = ["TextChunkFrames", "plain_text"]

#: Stands for the text while a template is made (NULs: JSON escapes them).
_MARK = "\x00uamp-a2a-text\x00"
_MARK_JSON = orjson.dumps(_MARK)
#: Shapes kept per stream (a stream has one or two: its first chunk, the rest).
_MAX_SHAPES = 16


def plain_text(update: Update) -> str | None:
    """The text of an artifact update that carries one text part and nothing else, else ``None``."""
    artifact = update.artifact
    if update.kind != "artifact" or artifact is None or len(artifact.items) != 1:
        return None
    item = artifact.items[0]
    return item.text if type(item) is ty.TextContent else None


class TextChunkFrames:
    """The frames of one stream's updates; text chunks from a template of their shape.

    Args:
        dialect: The dialect the stream renders in.
        encode: The general path: a stream result (a rendered update) -> its frame.
    """

    __slots__ = ("_dialect", "_encode", "_templates")

    def __init__(self, dialect: Dialect, encode: Callable[[dict[str, Any]], bytes]) -> None:
        self._dialect = dialect
        self._encode = encode
        self._templates: dict[tuple[Any, ...], tuple[bytes, bytes] | None] = {}

    def frame(self, update: Update) -> bytes:
        """The frame of ``update``, as ``encode(render_update(update, dialect))`` makes it."""
        text = plain_text(update)
        if text is not None:
            template = self._shape(update)
            if template is not None:
                return template[0] + orjson.dumps(text) + template[1]
        return self._encode(render_update(update, self._dialect))

    def template(self, update: Update) -> tuple[bytes, bytes] | None:
        """``(head, tail)`` of the frames of ``update`` 's shape, when it is a plain text chunk.

        For every update ``u`` of that shape (the same ids, name,
        ``append`` and ``lastChunk``; one text part), :meth:`frame` gives
        ``head + JSON(text of u) + tail``. ``None`` for any other update.
        """
        return None if plain_text(update) is None else self._shape(update)

    def _shape(self, update: Update) -> tuple[bytes, bytes] | None:
        artifact = update.artifact
        assert artifact is not None
        key = (
            update.task_id,
            update.context_id,
            artifact.artifact_id,
            artifact.name,
            artifact.description,
            update.append,
            update.last_chunk,
        )
        try:
            return self._templates[key]
        except KeyError:
            template = self._template(update)
            if len(self._templates) >= _MAX_SHAPES:
                self._templates.clear()
            self._templates[key] = template
            return template  # None: the marker showed up elsewhere too

    def _template(self, update: Update) -> tuple[bytes, bytes] | None:
        assert update.artifact is not None
        marked = attrs.evolve(
            update,
            artifact=attrs.evolve(update.artifact, items=[ty.TextContent(text=_MARK)]),
        )
        pieces = self._encode(render_update(marked, self._dialect)).split(_MARK_JSON)
        return (pieces[0], pieces[1]) if len(pieces) == 2 else None
