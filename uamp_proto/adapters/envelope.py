"""Spec 003 envelopes onto the agent boundary, and UAMP events back onto delta frames.

Theory of operation
-------------------
An agent served by uamp answers spec 003 envelopes with the same
:class:`~uamp_proto.responder.Responder` interface it answers UAMP 000
events with. This module is the pure translation between the two; the
binding (``uamp_trio.envelope``) verifies, routes, numbers and writes.

* **In.** An ``ask`` or ``subscribe`` envelope becomes one user message
  (:func:`user_message`): ``body.content`` as its text. Only textual bodies
  (:data:`BODY_TYPES`, with ``encoding`` ``utf-8`` and ``compression``
  ``none``) are served; anything else is refused with :class:`BodyError`.
* **Out.** :class:`DeltaEncoder` turns the events of one response into the
  ``(type, payload)`` pairs of delta frames, without ``delta_seq`` (the
  binding stamps it through its :class:`~uamp_proto.flow.SendWindow`):

  ============================== ===================================================
  UAMP event                     delta frame
  ============================== ===================================================
  ``response.delta`` (text)      ``chunk`` ``{"text": ...}``; with structured
                                 output, ``patch`` ``{"ops": [RFC 6902 ...]}``
  ``response.delta`` (audio),    ``chunk`` ``{"chunk_b64": ...}`` (Appendix C.2)
  ``audio.delta``
  ``thinking``                   ``chunk`` ``{"thinking": ...}``
  other non-terminal events      ``progress`` ``{"event": <the UAMP event>}``
  ``response.done``              binary output items not streamed yet as
                                 ``chunk`` ``{"chunk_b64", "part"}`` frames, then
                                 ``done`` ``{"text", "usage", "mime", "parts",
                                 "json"}`` (``mime``: the first binary part's)
  ``response.cancelled``         ``cancel`` ``{"text": <partial answer>}``
  ``response.error``             ``error`` ``{"code": ..., "message": ...}``
  ``response.created``           nothing
  ============================== ===================================================

* **Framing** (section 7, WebSocket): each frame is a 4-byte unsigned
  big-endian length, then that many bytes of envelope or delta JSON
  (:func:`prefix_frame`, :func:`split_frames`).
* **Errors** (section 9) travel as an ``error`` envelope whose
  ``body.content`` is the JSON text ``{"code", "message", "retry"}``
  (:func:`error_body`, :func:`read_error`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

import orjson

from .. import codec, jsonpatch
from .. import events as ev
from .. import types as ty
from ..envelope import (
    DEFAULT_COMPRESSION,
    DEFAULT_ENCODING,
    PAYLOAD_TOO_LARGE,
    Body,
    DeltaType,
    Envelope,
    EnvelopeError,
    ErrorCode,
)
from ..errors import UampError

__all__ = [
    "BAD_REQUEST",
    "BODY_TYPES",
    "ERROR_BODY_TYPE",
    "NOT_FOUND",
    "BodyError",
    "DeltaEncoder",
    "EnvelopeRefused",
    "Frame",
    "error_body",
    "prefix_frame",
    "read_error",
    "split_frames",
    "user_message",
]

#: The body types an agent is served with (the manifest's ``body_types``).
BODY_TYPES: Final = ("text/plain", "text/markdown", "application/json")
#: ``body.type`` of an ``error`` envelope.
ERROR_BODY_TYPE: Final = "application/json"

#: One delta frame before numbering: its ``type`` and ``payload``.
Frame = tuple[DeltaType, dict[str, Any]]


#: uamp's addition to section 9: an envelope that is not valid (schema, body
#: type, an intent the agent does not serve). Not retryable.
BAD_REQUEST: Final = ErrorCode(code="4.00", condition="Bad request", retryable=False)
#: uamp's addition to section 9: no such exchange or stream for this caller
#: (one owned by someone else answers the same).
NOT_FOUND: Final = ErrorCode(code="4.04", condition="Not found", retryable=False)


class EnvelopeRefused(UampError):
    """An envelope, delta or stream request refused with a section 9 code.

    Attributes:
        error_code: The code (4.01, 4.03, 4.09, 4.13, 5.04, or uamp's 4.00/4.04).
        message: A sentence for a person; never a credential.
        retry_after: Seconds to wait before retrying (5.04), else ``None``.
    """

    def __init__(
        self, error_code: ErrorCode, message: str, *, retry_after: int | None = None
    ) -> None:
        super().__init__(f"{error_code.code}: {message}")
        self.error_code = error_code
        self.message = message
        self.retry_after = retry_after

    @property
    def code(self) -> str:
        """The code string (``"4.01"``)."""
        return self.error_code.code

    def body(self) -> Body:
        """The ``error`` envelope body that reports it (:func:`error_body`)."""
        return error_body(self.code, self.message, retry=self.error_code.retryable)


class BodyError(UampError, ValueError):
    """An envelope body the agent cannot be given (type, encoding, compression)."""


def user_message(envelope: Envelope) -> ty.Message:
    """The user message an ``ask``/``subscribe`` envelope carries.

    Raises:
        BodyError: The body is not one of :data:`BODY_TYPES`, or is
            compressed, or not ``utf-8``.
    """
    body = envelope.body
    media = body.type.split(";", 1)[0].strip().lower()
    if media not in BODY_TYPES:
        raise BodyError(f"body.type {body.type!r} is not served; served: {', '.join(BODY_TYPES)}")
    if body.effective_encoding.lower() != DEFAULT_ENCODING:
        raise BodyError(f"body.encoding {body.encoding!r} is not served; use utf-8")
    if body.effective_compression.lower() != DEFAULT_COMPRESSION:
        raise BodyError(f"body.compression {body.compression!r} is not served; use none")
    return ty.Message(role="user", content=body.content)


def error_body(code: str, message: str, *, retry: bool) -> Body:
    """The body of an ``error`` envelope: JSON ``{"code", "message", "retry"}``."""
    content = orjson.dumps({"code": code, "message": message, "retry": retry}).decode()
    return Body(type=ERROR_BODY_TYPE, content=content)


def read_error(envelope: Envelope) -> tuple[str, str, bool]:
    """``(code, message, retry)`` of an ``error`` envelope.

    Raises:
        EnvelopeError: The envelope is not an error envelope of that shape.
    """
    try:
        data = orjson.loads(envelope.body.content)
    except orjson.JSONDecodeError:
        raise EnvelopeError(("body", "content"), "is not the JSON of an error") from None
    if not isinstance(data, dict) or not isinstance(data.get("code"), str):
        raise EnvelopeError(("body", "content"), "has no string 'code'")
    return data["code"], str(data.get("message", "")), bool(data.get("retry", False))


def _usage(usage: ty.UsageStats | None) -> dict[str, Any] | None:
    if usage is None:
        return None
    out = codec.unstructure(usage)
    return out if isinstance(out, dict) else None


class DeltaEncoder:
    """Turns one response's UAMP events into delta frames (see the module docstring).

    Args:
        structured: Set when the ask asked for structured (JSON) output: the
            parser of a JSON text that may be cut anywhere (``None`` when the
            text so far is not JSON). The text then streams as ``patch``
            frames (RFC 6902 operations from the previous snapshot to the
            new one), and ``done`` carries the whole value as ``json``.
            The parser is given, not imported: the core has no dependency
            for it.
    """

    __slots__ = ("_audio", "_snapshot", "_structured", "_text")

    def __init__(self, structured: Callable[[str], Any] | None = None) -> None:
        self._text: list[str] = []
        self._structured = structured
        self._snapshot: Any = None
        #: Audio streamed as ``chunk`` frames (its item is not sent again at the end).
        self._audio = False

    @property
    def text(self) -> str:
        """The text streamed so far."""
        return "".join(self._text)

    def feed(self, event: ev.Event) -> list[Frame]:
        """The frames for ``event`` (none, one, or a binary output's chunks and ``done``)."""
        kind = type(event)
        if kind is ev.ResponseDelta:
            assert isinstance(event, ev.ResponseDelta)
            delta = event.delta
            if isinstance(delta, ty.DeltaText):
                self._text.append(delta.text)
                if self._structured is not None:
                    return self._patch(delta.text)
                return [(DeltaType.CHUNK, {"text": delta.text})]
            if isinstance(delta, ty.DeltaAudio):
                self._audio = True
                return [(DeltaType.CHUNK, {"chunk_b64": delta.audio})]
        elif kind is ev.AudioDelta:
            assert isinstance(event, ev.AudioDelta)
            self._audio = True
            return [(DeltaType.CHUNK, {"chunk_b64": event.audio})]
        elif kind is ev.Thinking:
            assert isinstance(event, ev.Thinking)
            return [(DeltaType.CHUNK, {"thinking": event.content})]
        elif kind is ev.ResponseCreated:
            return []
        elif kind is ev.ResponseDone:
            assert isinstance(event, ev.ResponseDone)
            return self._done(event.response)
        elif kind is ev.ResponseCancelled:
            return [(DeltaType.CANCEL, {"text": self.text})]
        elif kind is ev.ResponseErrorEvent:
            assert isinstance(event, ev.ResponseErrorEvent)
            return [(DeltaType.ERROR, {"code": event.error.code, "message": event.error.message})]
        return [(DeltaType.PROGRESS, {"event": _event_dict(event)})]

    def _patch(self, piece: str) -> list[Frame]:
        assert self._structured is not None
        value = self._structured(self.text)
        if value is None:  # not JSON (yet, or at all): the text as it is
            return [(DeltaType.CHUNK, {"text": piece})]
        ops = jsonpatch.diff(self._snapshot, value)
        self._snapshot = value
        return [(DeltaType.PATCH, {"ops": ops})] if ops else []

    def _done(self, response: ty.ResponseOutput) -> list[Frame]:
        frames: list[Frame] = []
        payload: dict[str, Any] = {"text": self.text}
        if self._structured is not None and self._snapshot is not None:
            payload["json"] = self._snapshot
        parts: list[dict[str, Any]] = []
        if self._audio:
            parts.append({"mime": STREAMED_AUDIO_MIME})
        for item in response.output:
            found = _binary(item)
            if found is None or (self._audio and isinstance(item, ty.AudioContent)):
                continue
            media, part = found
            if isinstance(media, ty.MediaURL):
                part["url"] = media.url
            else:
                index = len(parts)
                frames.extend(
                    (DeltaType.CHUNK, {"chunk_b64": piece, "part": index})
                    for piece in _b64_pieces(media)
                )
            parts.append(part)
        if parts:
            payload["mime"] = parts[0]["mime"]  # Appendix C.2: the done frame names it
            if len(parts) > 1 or "url" in parts[0] or "filename" in parts[0]:
                payload["parts"] = parts
        usage = _usage(response.usage)
        if usage:
            payload["usage"] = usage
        frames.append((DeltaType.DONE, payload))
        return frames


#: The media type of audio an agent streams (``audio.delta``): pcm16, the UAMP default.
STREAMED_AUDIO_MIME: Final = "audio/pcm"
#: Base64 characters of one binary ``chunk`` frame (a multiple of 4: each decodes alone).
CHUNK_B64: Final = 48 * 1024


def _binary(item: ty.ContentItem) -> tuple[ty.Media, dict[str, Any]] | None:
    """The media of a non-text output item and its part description (``mime``, ``filename``)."""
    if isinstance(item, ty.ImageContent):
        return item.image, {"mime": f"image/{item.format or 'png'}"}
    if isinstance(item, ty.AudioContent):
        return item.audio, {"mime": f"audio/{item.format}" if item.format else STREAMED_AUDIO_MIME}
    if isinstance(item, ty.VideoContent):
        return item.video, {"mime": f"video/{item.format or 'mp4'}"}
    if isinstance(item, ty.FileContent):
        return item.file, {"mime": item.mime_type, "filename": item.filename}
    return None


def _b64_pieces(data: str) -> list[str]:
    return [data[i : i + CHUNK_B64] for i in range(0, len(data), CHUNK_B64)] or [""]


def _event_dict(event: ev.Event) -> Mapping[str, Any]:
    return codec.to_dict(event)


_PREFIX: Final = 4


def prefix_frame(data: bytes) -> bytes:
    """``data`` behind its 4-byte big-endian length (the WebSocket binding's framing)."""
    return len(data).to_bytes(_PREFIX, "big") + data


def split_frames(message: bytes, max_size: int) -> list[bytes]:
    """The length-prefixed frames of one WebSocket message, in order.

    Each declared length is checked against ``max_size`` before its bytes
    are looked at.

    Raises:
        EnvelopeRefused: 4.13 for a declared length past ``max_size``; 4.00
            for a message that does not split into whole frames.
    """
    frames: list[bytes] = []
    pos, end = 0, len(message)
    if end == 0:
        raise EnvelopeRefused(BAD_REQUEST, "an empty message holds no frame")
    while pos < end:
        if end - pos < _PREFIX:
            raise EnvelopeRefused(BAD_REQUEST, "a frame needs its 4-byte length prefix")
        size = int.from_bytes(message[pos : pos + _PREFIX], "big")
        if size > max_size:
            raise EnvelopeRefused(
                PAYLOAD_TOO_LARGE, f"a frame declares {size} bytes; at most {max_size} accepted"
            )
        pos += _PREFIX
        if end - pos < size:
            raise EnvelopeRefused(
                BAD_REQUEST, f"a frame declares {size} bytes but {end - pos} follow"
            )
        frames.append(message[pos : pos + size])
        pos += size
    return frames
