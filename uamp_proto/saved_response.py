"""Saved responses: what a signed response's verifier needs, read from a file.

Theory of operation
-------------------
A response signature (spec 000 section 6.7, spec 004 "Response Signing";
:func:`uamp_proto.signing.verify_response_signature`) covers two things the
verifier must hold: the response's full text and the exact request bytes.
:class:`SavedResponse` is those two plus the signature, and this module reads
one from what a client may have kept:

* the **saved form** (:data:`SAVED_FORMAT`), a JSON object a client writes
  (:meth:`SavedResponse.to_json`; ``uamp chat --save``)::

      {"format": "uamp.signed-response/1", "transport": "uamp",
       "text": "...", "signature": "eyJ...", "request_base64": "..."}

  ``request_base64`` holds the request bytes exactly (base64, standard
  alphabet); ``request`` (a string, UTF-8) may stand in for it;
* a raw **event stream**, as received (``curl -N ... > file``), the request
  then coming from elsewhere (``uamp verify --request FILE``):

  - Chat Completions SSE: the text is ``choices[0].delta.content`` of every
    ``chat.completion.chunk`` joined, the signature the ``data`` of the
    ``event: response_signature`` after ``data: [DONE]``;
  - UAMP events, as SSE (``/events/stream``) or one JSON object a line (a
    WebSocket log): the text deltas (``response.delta`` with ``delta.type``
    ``text``) of the last response joined, the signature its
    ``response.done``'s ``signature``;
  - AG-UI SSE: the ``TEXT_MESSAGE_CONTENT`` deltas joined, the signature the
    value of the ``CUSTOM`` event named :data:`AGUI_SIGNATURE_EVENT`.

Nothing here reads a file or the network: the caller passes bytes in.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, Final

import attrs
import orjson

from .adapters.agui_events import ChunkError, expand_chunks
from .errors import UampError
from .signing import (
    JWKS,
    PrivateKey,
    PublicKey,
    Reason,
    SignatureError,
    verify_response_signature,
)
from .sse import SSEParser

__all__ = [
    "AGUI_SIGNATURE_EVENT",
    "SAVED_FORMAT",
    "SavedResponse",
    "SavedResponseError",
    "read_saved_response",
]

#: The ``format`` member of a saved response.
SAVED_FORMAT: Final = "uamp.signed-response/1"

#: The name of the AG-UI ``CUSTOM`` event that carries a response signature.
AGUI_SIGNATURE_EVENT: Final = "uamp.response_signature"
#: AG-UI's convenience forms, read as the triads they stand for.
_CHUNKS: Final = ("TEXT_MESSAGE_CHUNK", "TOOL_CALL_CHUNK")


class SavedResponseError(UampError):
    """The bytes are no saved response or transcript this module can read."""


@attrs.frozen(kw_only=True)
class SavedResponse:
    """A response as its verifier needs it.

    Attributes:
        text: The full response text.
        signature: The RS256 JWT, or ``None`` when the response carried none.
        request: The request bytes the signature covers, when known.
        transport: Where it came from (``uamp``, ``completions``, ``agui``,
            ``a2a``, ``acp``, ``realtime``...): informative.
    """

    text: str
    signature: str | None
    request: bytes | None = None
    transport: str = "uamp"

    def to_json(self) -> bytes:
        """The saved form (:data:`SAVED_FORMAT`), as indented UTF-8 JSON."""
        out: dict[str, Any] = {
            "format": SAVED_FORMAT,
            "transport": self.transport,
            "text": self.text,
            "signature": self.signature,
        }
        if self.request is not None:
            out["request_base64"] = base64.b64encode(self.request).decode("ascii")
        return orjson.dumps(out, option=orjson.OPT_INDENT_2) + b"\n"

    def verify(
        self, key: PrivateKey | PublicKey | JWKS, request: bytes | None = None
    ) -> dict[str, Any]:
        """Check the signature (see :func:`~uamp_proto.signing.verify_response_signature`).

        Args:
            key: The signer's public key or JWKS.
            request: The request bytes, when this response does not hold them
                (or to check against other ones).

        Returns:
            The signature's claims.

        Raises:
            SignatureError: ``unsigned`` when there is no signature, else
                as :func:`~uamp_proto.signing.verify_response_signature`.
            SavedResponseError: No request bytes at all.
        """
        if self.signature is None:
            raise SignatureError(Reason.UNSIGNED, "the response carries no signature")
        sent = request if request is not None else self.request
        if sent is None:
            raise SavedResponseError(
                "the request bytes are needed: the saved response holds none (pass them)"
            )
        return verify_response_signature(self.signature, self.text, sent, key)


def read_saved_response(data: bytes) -> SavedResponse:
    """Read a saved response or a raw event stream (see the module docstring).

    Raises:
        SavedResponseError: The bytes are none of the forms read here, or a
            saved form is malformed.
    """
    stripped = data.strip()
    if stripped.startswith(b"{"):
        try:
            obj = orjson.loads(stripped)
        except orjson.JSONDecodeError:
            obj = None  # JSON lines, perhaps
        if isinstance(obj, dict) and "format" in obj:
            return _saved(obj)
        if isinstance(obj, dict):
            return _from_events([obj])
        return _from_events(_json_lines(stripped))
    parser = SSEParser()
    events = parser.feed(data)
    parser.close()
    if not events:
        raise SavedResponseError(
            "not a saved response (JSON with 'format'), an SSE stream or UAMP events a line"
        )
    return _from_sse([(e.event, e.data) for e in events])


def _saved(obj: dict[str, Any]) -> SavedResponse:
    if obj.get("format") != SAVED_FORMAT:
        raise SavedResponseError(f"unknown format {obj.get('format')!r}; expected {SAVED_FORMAT}")
    text, signature = obj.get("text"), obj.get("signature")
    if not isinstance(text, str):
        raise SavedResponseError("'text' must be a string")
    if signature is not None and not isinstance(signature, str):
        raise SavedResponseError("'signature' must be a string or null")
    request: bytes | None = None
    if "request_base64" in obj:
        raw = obj["request_base64"]
        if not isinstance(raw, str):
            raise SavedResponseError("'request_base64' must be a string")
        try:
            request = base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            raise SavedResponseError("'request_base64' is not base64") from None
    elif "request" in obj:
        if not isinstance(obj["request"], str):
            raise SavedResponseError("'request' must be a string")
        request = obj["request"].encode("utf-8")
    transport = obj.get("transport")
    return SavedResponse(
        text=text,
        signature=signature,
        request=request,
        transport=transport if isinstance(transport, str) else "uamp",
    )


def _json_lines(data: bytes) -> list[Any]:
    out = []
    for n, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            raise SavedResponseError(f"line {n} is not JSON") from None
    return out


def _from_sse(events: list[tuple[str | None, str]]) -> SavedResponse:
    objects: list[Any] = []
    signature: str | None = None
    completions = False
    for name, payload in events:
        if name == "response_signature":  # Chat Completions, after [DONE]
            try:
                signature = orjson.loads(payload)["signature"]
            except (orjson.JSONDecodeError, KeyError, TypeError):
                raise SavedResponseError("a response_signature event without a signature") from None
            continue
        if payload == "[DONE]":
            continue
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError:
            continue  # not an event of ours (a comment-like payload)
        if isinstance(obj, dict) and obj.get("object") == "chat.completion.chunk":
            completions = True
        objects.append(obj)
    if completions:
        parts = []
        for obj in objects:
            for choice in obj.get("choices") or []:
                if isinstance(choice, dict) and choice.get("index", 0) == 0:
                    content = (choice.get("delta") or {}).get("content")
                    if isinstance(content, str):
                        parts.append(content)
        return SavedResponse(text="".join(parts), signature=signature, transport="completions")
    return _from_events(objects)


def _from_events(objects: list[Any]) -> SavedResponse:
    """UAMP events (the last response) or AG-UI events (chunk forms expanded first)."""
    if any(isinstance(o, dict) and o.get("type") in _CHUNKS for o in objects):
        try:
            objects = expand_chunks(o for o in objects if isinstance(o, dict))
        except ChunkError as exc:
            raise SavedResponseError(f"the saved AG-UI stream is not well formed: {exc}") from None
    parts: list[str] = []
    signature: str | None = None
    transport = None
    for obj in objects:
        if not isinstance(obj, dict):
            continue
        kind = obj.get("type")
        if kind == "response.created":
            parts, signature, transport = [], None, "uamp"
        elif kind == "response.delta":
            delta = obj.get("delta") or {}
            if delta.get("type") == "text" and isinstance(delta.get("text"), str):
                parts.append(delta["text"])
            transport = "uamp"
        elif kind == "response.done":
            found = obj.get("signature")
            signature = found if isinstance(found, str) else None
            transport = "uamp"
        elif kind == "RUN_STARTED":
            parts, signature, transport = [], None, "agui"
        elif kind == "TEXT_MESSAGE_CONTENT" and isinstance(obj.get("delta"), str):
            parts.append(obj["delta"])
        elif kind == "CUSTOM" and obj.get("name") == AGUI_SIGNATURE_EVENT:
            value = obj.get("value") or {}
            found = value.get("signature") if isinstance(value, dict) else None
            signature = found if isinstance(found, str) else None
    if transport is None:
        raise SavedResponseError("no response found: no UAMP, AG-UI or Completions events")
    return SavedResponse(text="".join(parts), signature=signature, transport=transport)
