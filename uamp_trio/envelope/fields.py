"""What the envelope service reads from an envelope besides its routing: each read
checked, a bad one refused with its section 9 code.

The body as the turn's message (4.00 when it is not one), ``ext.response_format``
(4.00), ``ext.payment_token``, a peer's ``error`` report, the ``delta_seq`` a
``progress`` envelope acknowledges (``ext.delta_seq`` or a JSON body; 4.09
without one) and the text beside it, and whose waiting one-way messages an
exchange takes.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

import orjson

from uamp_proto import types as ty
from uamp_proto.adapters.envelope import (
    BAD_REQUEST,
    BodyError,
    EnvelopeRefused,
    user_message,
)
from uamp_proto.envelope import MISSING_DELTA_SEQ, Envelope

__all__ = [
    "acked_seq",
    "is_uuid",
    "message_of",
    "notes_address",
    "payment_token_of",
    "peer_error_of",
    "response_format_of",
    "update_of",
]


def is_uuid(value: str) -> bool:
    """Whether ``value`` is a UUID (``urn:uuid:`` or bare)."""
    try:
        uuid.UUID(value.removeprefix("urn:uuid:"))
    except ValueError:
        return False
    return True


def message_of(envelope: Envelope) -> ty.Message:
    """The envelope's body as a user message (4.00 when it is not one)."""
    try:
        return user_message(envelope)
    except BodyError as exc:
        raise EnvelopeRefused(BAD_REQUEST, str(exc)) from None


def response_format_of(envelope: Envelope) -> ty.ResponseFormat | None:
    """``ext.response_format`` (UAMP's ``{"type": "json_object" | "json_schema", ...}``).

    Raises:
        EnvelopeRefused: 4.00 for one that is not of that shape.
    """
    raw = envelope.ext.get("response_format") if envelope.ext else None
    if raw is None:
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("type"), str):
        raise EnvelopeRefused(BAD_REQUEST, 'ext.response_format is {"type": ..., ...}')
    schema = raw.get("json_schema")
    return ty.ResponseFormat(
        type=raw["type"], json_schema=schema if isinstance(schema, dict) else None
    )


def peer_error_of(envelope: Envelope) -> dict[str, Any]:
    """A peer's ``error`` envelope: its code and message (JSON ``{"code", "message"}``, or text)."""
    content = envelope.body.content
    code, message = "peer_error", content
    with contextlib.suppress(orjson.JSONDecodeError):
        parsed = orjson.loads(content)
        if isinstance(parsed, dict):
            code = str(parsed.get("code", code))
            message = str(parsed.get("message", ""))
    return {"code": code, "message": message[:1024], "reported_by": envelope.id}


def acked_seq(envelope: Envelope) -> tuple[int, bool]:
    """The ``delta_seq`` a ``progress`` envelope acknowledges, and whether its body says more.

    ``ext.delta_seq``, else a JSON body ``{"delta_seq": n, ...}``.

    Raises:
        EnvelopeRefused: 4.09 without one.
    """
    seq = envelope.ext.get("delta_seq") if envelope.ext else None
    if _is_seq(seq):
        assert isinstance(seq, int)
        return seq, bool(envelope.body.content)
    body = envelope.body
    if body.type.split(";", 1)[0].strip().endswith("json"):
        try:
            content = orjson.loads(body.content)
        except orjson.JSONDecodeError:
            content = None
        seq = content.get("delta_seq") if isinstance(content, dict) else None
        if _is_seq(seq):
            assert isinstance(seq, int)
            return seq, False
    raise EnvelopeRefused(
        MISSING_DELTA_SEQ,
        "a progress envelope acknowledges a stream: put the highest delta_seq received"
        ' in ext.delta_seq or in a JSON body {"delta_seq": n}',
    )


def update_of(envelope: Envelope) -> dict[str, str]:
    """A ``progress`` envelope's text, as one of the running agent's ``updates``."""
    return {"id": envelope.id, "type": envelope.body.type, "content": envelope.body.content}


def _is_seq(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def payment_token_of(envelope: Envelope) -> str | None:
    """``ext.payment_token``, if it is a string."""
    payment = envelope.ext.get("payment_token") if envelope.ext else None
    return payment if isinstance(payment, str) else None


def notes_address(agent: str, envelope: Envelope) -> tuple[str, str]:
    """Whose pending one-way messages (besides the caller): the agent and the sender's ``from``."""
    return (agent, envelope.from_)
