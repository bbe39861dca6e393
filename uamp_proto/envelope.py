"""Spec 003's signed envelope: types, strict validation, canonical JSON, state.

Theory of operation
-------------------

Spec 003 ("UAMP 1.0", the envelope spec) wraps every message in an
:class:`Envelope` (section 4, schema in Appendix A.1) and streams partial
results as :class:`Delta` frames (section 5, Appendix A.2). This module is
the sans-IO part of that: typed values, JSON in and out, and the canonical
form that the detached signature of :mod:`uamp_proto.signing` covers.

* **Strict.** The schema says ``additionalProperties: false`` for both the
  envelope and the delta, so an unknown top-level key is refused, with every
  offending name in the message. Nested ``body`` and ``context`` items allow
  extra members in the schema; they are kept (in ``extra``) rather than
  dropped, because a signature covers them.
* **Absent is not default.** ``delta_window`` (default 64), ``body.encoding``
  (``utf-8``) and ``body.compression`` (``none``) are ``None`` when the sender
  left them out, and the ``effective_*`` helpers give the default. Writing a
  default the sender did not write would change the canonical bytes and
  break the sender's signature.
* **One error type.** Every refusal is an :class:`EnvelopeError` whose
  ``path`` names the offending member (``$.context[1].hash``). Constructors
  validate too, so a value built in code is as trustworthy as a decoded one.
* **Canonical JSON** (section 4.2): keys sorted at every level (by code
  point, which is also UTF-8 byte order), UTF-8, no whitespace, ``sig``
  left out. Strings use JSON's short escapes (``\\n``, ``\\"``, ``\\\\``) and
  ``\\u00XX`` for other characters below U+0020; everything else is written as
  raw UTF-8. The spec does not fix a number form; integers are written in
  decimal and floats in their shortest round-trip form (``1.0``, ``1e+20``).
* **State** (section 10) is a transition table, :data:`TRANSITIONS`, driven
  by :class:`Exchange`; a move missing from the table raises
  :class:`InvalidTransition`.
* **Error codes** (section 9) are :class:`ErrorCode` constants with their
  retry flags. They, the error type and the checks of the schema's formats
  live in :mod:`uamp_proto.envelope_checks`; they import from here too.

Nothing here reads a clock or draws randomness: ids and timestamps are
values the caller supplies.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Mapping
from typing import Any, Final

import attrs
import orjson

from . import jsonbounds
from .envelope_checks import (
    BACKEND_BUSY,
    CONTEXT_HASH,
    ERROR_CODES,
    MISSING_DELTA_SEQ,
    PAYLOAD_TOO_LARGE,
    UNAUTHENTICATED,
    UNAUTHORIZED,
    EnvelopeError,
    ErrorCode,
    as_tuple,
    check_extra,
    check_json,
    check_members,
    is_date_time,
    kind_of,
    need_date_time,
    need_int,
    need_object,
    need_str,
    need_uri,
    need_uuid,
)
from .errors import ProtocolError

__all__ = [
    "BACKEND_BUSY",
    "DEFAULT_COMPRESSION",
    "DEFAULT_DELTA_WINDOW",
    "DEFAULT_ENCODING",
    "DEFAULT_MAX_SIZE",
    "ERROR_CODES",
    "MISSING_DELTA_SEQ",
    "PAYLOAD_TOO_LARGE",
    "TRANSITIONS",
    "UNAUTHENTICATED",
    "UNAUTHORIZED",
    "Body",
    "ContextRef",
    "Delta",
    "DeltaType",
    "Envelope",
    "EnvelopeError",
    "ErrorCode",
    "Exchange",
    "ExchangeState",
    "Intent",
    "InvalidTransition",
    "Trigger",
    "canonical_json",
    "decode_delta",
    "decode_envelope",
    "encode_delta",
    "encode_envelope",
    "envelope_canonical_json",
    "envelope_sha256",
    "is_date_time",
    "parse_json",
    "trigger_for",
]

#: ``delta_window`` when the envelope does not say (section 4, A.1 ``default``).
DEFAULT_DELTA_WINDOW: Final = 64
#: ``body.encoding`` when absent (A.1 ``default``).
DEFAULT_ENCODING: Final = "utf-8"
#: ``body.compression`` when absent (A.1 ``default``).
DEFAULT_COMPRESSION: Final = "none"
#: Largest encoded envelope or delta :func:`decode_envelope` accepts, in bytes.
#: Past it the error carries :data:`PAYLOAD_TOO_LARGE` (section 9, 4.13).
DEFAULT_MAX_SIZE: Final = 4 * 1024 * 1024


# --- vocabularies -------------------------------------------------------------------


class Intent(enum.StrEnum):
    """Canonical intent vocabulary (spec 003 section 4.1)."""

    ASK = "ask"
    """Request an action or answer and expect a direct response."""
    INFORM = "inform"
    """Provide data without expecting a response."""
    PROPOSE = "propose"
    """Offer a contract or plan."""
    CONFIRM = "confirm"
    """Acknowledge (ACK)."""
    DENY = "deny"
    """Refuse (NAK)."""
    PROGRESS = "progress"
    """Partial update within a stream (also the delta acknowledgement, section 5)."""
    CANCEL = "cancel"
    """Withdraw a pending request."""
    SUBSCRIBE = "subscribe"
    """Establish a long-lived stream."""
    NOTIFY = "notify"
    """Push an event on a long-lived stream."""
    ERROR = "error"
    """Failure report."""


class DeltaType(enum.StrEnum):
    """``type`` of a delta frame (spec 003 section 5, Appendix A.2)."""

    PATCH = "patch"
    CHUNK = "chunk"
    PROGRESS = "progress"
    DONE = "done"
    CANCEL = "cancel"
    ERROR = "error"


_BODY_FIELDS: Final = frozenset({"type", "content", "encoding", "compression"})
_CONTEXT_FIELDS: Final = frozenset({"id", "hash"})


def _to_intent(value: Intent | str) -> Intent:
    try:
        return Intent(value)
    except ValueError:
        allowed = ", ".join(i.value for i in Intent)
        raise EnvelopeError(("intent",), f"must be one of {allowed}, not {value!r}") from None


def _to_delta_type(value: DeltaType | str) -> DeltaType:
    try:
        return DeltaType(value)
    except ValueError:
        allowed = ", ".join(t.value for t in DeltaType)
        raise EnvelopeError(("type",), f"must be one of {allowed}, not {value!r}") from None


# --- the types ------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Body:
    """``body`` of an envelope (Appendix A.1).

    Attributes:
        type: Media type of ``content`` (``text/markdown``).
        content: The payload, as a string (binary content is carried encoded).
        encoding: Character or transfer encoding; ``None`` when absent
            (meaning :data:`DEFAULT_ENCODING`).
        compression: Compression applied to ``content``; ``None`` when absent
            (meaning :data:`DEFAULT_COMPRESSION`).
        extra: Members the schema does not name; kept because the signature
            covers them.
    """

    type: str
    content: str
    encoding: str | None = None
    compression: str | None = None
    extra: Mapping[str, Any] = attrs.field(factory=dict)

    def __attrs_post_init__(self) -> None:
        need_str(self.type, ("type",))
        need_str(self.content, ("content",))
        if self.encoding is not None:
            need_str(self.encoding, ("encoding",))
        if self.compression is not None:
            need_str(self.compression, ("compression",))
        check_extra(self.extra, _BODY_FIELDS)

    @property
    def effective_encoding(self) -> str:
        """``encoding``, or the schema's default when absent."""
        return DEFAULT_ENCODING if self.encoding is None else self.encoding

    @property
    def effective_compression(self) -> str:
        """``compression``, or the schema's default when absent."""
        return DEFAULT_COMPRESSION if self.compression is None else self.compression

    def to_dict(self) -> dict[str, Any]:
        """The JSON object, with only the members that are present."""
        out: dict[str, Any] = {**self.extra, "type": self.type, "content": self.content}
        if self.encoding is not None:
            out["encoding"] = self.encoding
        if self.compression is not None:
            out["compression"] = self.compression
        return out

    @classmethod
    def from_dict(cls, obj: object) -> Body:
        """Validate and build from a decoded JSON value.

        Raises:
            EnvelopeError: With a path relative to the body.
        """
        data = need_object(obj, ())
        check_members(data, (), required=("type", "content"), allowed=None, what="body")
        return cls(
            type=data["type"],
            content=data["content"],
            encoding=data.get("encoding"),
            compression=data.get("compression"),
            extra={k: v for k, v in data.items() if k not in _BODY_FIELDS},
        )


@attrs.frozen(kw_only=True)
class ContextRef:
    """One ``context[]`` item: a prior message by id and content hash.

    Attributes:
        id: The referenced envelope's id (UUID or ``urn:uuid:`` URN).
        hash: ``sha256:`` and 64 lowercase hex digits.
        extra: Members the schema does not name (kept, as for :class:`Body`).
    """

    id: str
    hash: str
    extra: Mapping[str, Any] = attrs.field(factory=dict)

    def __attrs_post_init__(self) -> None:
        need_uuid(self.id, ("id",))
        if not CONTEXT_HASH.match(need_str(self.hash, ("hash",))):
            raise EnvelopeError(
                ("hash",), f"must match {CONTEXT_HASH.pattern} (lowercase hex), not {self.hash!r}"
            )
        check_extra(self.extra, _CONTEXT_FIELDS)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object."""
        return {**self.extra, "id": self.id, "hash": self.hash}

    @classmethod
    def from_dict(cls, obj: object) -> ContextRef:
        """Validate and build from a decoded JSON value.

        Raises:
            EnvelopeError: With a path relative to the item.
        """
        data = need_object(obj, ())
        check_members(data, (), required=("id", "hash"), allowed=None, what="context item")
        return cls(
            id=data["id"],
            hash=data["hash"],
            extra={k: v for k, v in data.items() if k not in _CONTEXT_FIELDS},
        )


_ENVELOPE_KEYS: Final = frozenset(
    {
        "id",
        "ts",
        "from",
        "to",
        "intent",
        "reply_to",
        "context",
        "stream_id",
        "delta_window",
        "body",
        "cap_token",
        "sig",
        "ext",
    }
)
_ENVELOPE_REQUIRED: Final = ("id", "ts", "from", "to", "intent", "body")


@attrs.frozen(kw_only=True)
class Envelope:
    """A spec 003 envelope (section 4, Appendix A.1).

    Optional members are ``None`` when absent; they are then left out of the
    JSON and of the canonical form.

    Attributes:
        id: Message id: a UUID, bare or as ``urn:uuid:`` URN.
        ts: Creation time, RFC 3339 (``2025-07-10T13:37:05Z``).
        from_: Sender, an absolute URI (``did:web:client.example``); ``from``
            on the wire.
        to: Recipients, at least one absolute URI.
        intent: What the sender wants (section 4.1).
        reply_to: Id of the envelope this one answers.
        context: Prior messages this one depends on.
        stream_id: The delta stream this envelope opens or belongs to.
        delta_window: Un-acknowledged deltas the sender may receive, at
            least 1; ``None`` means :data:`DEFAULT_DELTA_WINDOW`.
        body: The payload.
        cap_token: Capability token (JWT) granting the request
            (section 6.2; see :func:`uamp_proto.signing.verify_cap_token`).
        sig: Detached JWS over the canonical form (section 6.3). The schema
            requires it on the wire; it is ``None`` only on an envelope not
            yet signed (:func:`uamp_proto.signing.sign_envelope` sets it).
        ext: Extension members (any JSON object).
    """

    id: str
    ts: str
    from_: str
    to: tuple[str, ...] = attrs.field(converter=as_tuple)
    intent: Intent = attrs.field(converter=_to_intent)
    body: Body
    reply_to: str | None = None
    context: tuple[ContextRef, ...] | None = attrs.field(default=None, converter=as_tuple)
    stream_id: str | None = None
    delta_window: int | None = None
    cap_token: str | None = None
    sig: str | None = None
    ext: Mapping[str, Any] | None = None

    def __attrs_post_init__(self) -> None:
        need_uuid(self.id, ("id",))
        need_date_time(self.ts, ("ts",))
        need_uri(self.from_, ("from",))
        if not isinstance(self.to, tuple):
            raise EnvelopeError(("to",), f"must be an array, not {kind_of(self.to)}")
        if not self.to:
            raise EnvelopeError(("to",), "must name at least one recipient")
        for i, recipient in enumerate(self.to):
            need_uri(recipient, ("to", i))
        if self.reply_to is not None:
            need_uuid(self.reply_to, ("reply_to",))
        if self.context is not None:
            if not isinstance(self.context, tuple):
                raise EnvelopeError(("context",), f"must be an array, not {kind_of(self.context)}")
            for i, item in enumerate(self.context):
                if not isinstance(item, ContextRef):
                    raise EnvelopeError(("context", i), "must be a ContextRef")
        if self.stream_id is not None:
            need_str(self.stream_id, ("stream_id",))
        if self.delta_window is not None:
            need_int(self.delta_window, ("delta_window",), 1)
        if not isinstance(self.body, Body):
            raise EnvelopeError(("body",), "must be a Body")
        if self.cap_token is not None:
            need_str(self.cap_token, ("cap_token",))
        if self.sig is not None:
            need_str(self.sig, ("sig",))
        if self.ext is not None:
            need_object(self.ext, ("ext",))
            check_json(self.ext, ("ext",))

    @property
    def effective_delta_window(self) -> int:
        """``delta_window``, or :data:`DEFAULT_DELTA_WINDOW` when absent."""
        return DEFAULT_DELTA_WINDOW if self.delta_window is None else self.delta_window

    def to_dict(self, *, include_sig: bool = True) -> dict[str, Any]:
        """The JSON object, with only the members that are present.

        Args:
            include_sig: Leave ``sig`` out when false (the canonical form).
        """
        out: dict[str, Any] = {
            "id": self.id,
            "ts": self.ts,
            "from": self.from_,
            "to": list(self.to),
            "intent": self.intent.value,
        }
        if self.reply_to is not None:
            out["reply_to"] = self.reply_to
        if self.context is not None:
            out["context"] = [c.to_dict() for c in self.context]
        if self.stream_id is not None:
            out["stream_id"] = self.stream_id
        if self.delta_window is not None:
            out["delta_window"] = self.delta_window
        out["body"] = self.body.to_dict()
        if self.cap_token is not None:
            out["cap_token"] = self.cap_token
        if self.sig is not None and include_sig:
            out["sig"] = self.sig
        if self.ext is not None:
            out["ext"] = self.ext
        return out


_DELTA_KEYS: Final = frozenset({"delta_seq", "stream_id", "ts", "type", "payload"})
_DELTA_REQUIRED: Final = ("delta_seq", "stream_id", "ts", "type")


@attrs.frozen(kw_only=True)
class Delta:
    """A delta frame of a stream (spec 003 section 5, Appendix A.2).

    Attributes:
        delta_seq: Position in the stream, from 0.
        stream_id: The stream (the opening envelope's ``stream_id``).
        ts: RFC 3339 date-time.
        type: What the frame carries.
        payload: The frame's data (any JSON object), or ``None`` if absent.
    """

    delta_seq: int
    stream_id: str
    ts: str
    type: DeltaType = attrs.field(converter=_to_delta_type)
    payload: Mapping[str, Any] | None = None

    def __attrs_post_init__(self) -> None:
        need_int(self.delta_seq, ("delta_seq",), 0)
        need_str(self.stream_id, ("stream_id",))
        need_date_time(self.ts, ("ts",))
        if self.payload is not None:
            need_object(self.payload, ("payload",))
            check_json(self.payload, ("payload",))

    def to_dict(self) -> dict[str, Any]:
        """The JSON object."""
        out: dict[str, Any] = {
            "delta_seq": self.delta_seq,
            "stream_id": self.stream_id,
            "ts": self.ts,
            "type": self.type.value,
        }
        if self.payload is not None:
            out["payload"] = self.payload
        return out


# --- JSON in and out --------------------------------------------------------------------


def _load(data: bytes | str | Mapping[str, Any], max_size: int, what: str) -> dict[str, Any]:
    if isinstance(data, Mapping):
        return dict(data)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    if not isinstance(raw, bytes | bytearray | memoryview):
        raise EnvelopeError((), f"cannot decode a {type(data).__name__}; pass bytes or str")
    if len(raw) > max_size:
        raise EnvelopeError(
            (),
            f"the {what} is {len(raw)} bytes, more than the {max_size} accepted",
            error_code=PAYLOAD_TOO_LARGE,
        )
    return need_object(parse_json(raw), ())


def parse_json(raw: bytes | bytearray | memoryview) -> Any:
    """Parse one envelope or frame's JSON, counted first (:mod:`~uamp_proto.jsonbounds`).

    Raises:
        EnvelopeError: :data:`PAYLOAD_TOO_LARGE` when it holds more values
            than the parser is allowed to build (it is not parsed); no code
            when it is not valid JSON.
    """
    try:
        jsonbounds.check(raw)
        return orjson.loads(raw)
    except jsonbounds.TooManyValues as exc:
        raise EnvelopeError((), str(exc), error_code=PAYLOAD_TOO_LARGE) from None
    except orjson.JSONDecodeError as exc:
        raise EnvelopeError((), f"not valid JSON: {exc}") from None


def decode_envelope(
    data: bytes | str | Mapping[str, Any],
    *,
    require_sig: bool = True,
    max_size: int = DEFAULT_MAX_SIZE,
) -> Envelope:
    """Parse and validate an envelope (Appendix A.1).

    Args:
        data: JSON bytes or text, or an already-decoded object.
        require_sig: Refuse an envelope without ``sig``, as the schema does.
            Pass ``False`` to read an envelope that is about to be signed.
        max_size: Largest accepted input, in bytes (not applied to a mapping).

    Returns:
        The envelope; re-encoding it gives back the same members.

    Raises:
        EnvelopeError: The input is not JSON, too large (``error_code`` is
            :data:`PAYLOAD_TOO_LARGE`), has unknown or missing members, or a
            member of the wrong type or format; ``path`` says which.
    """
    obj = _load(data, max_size, "envelope")
    required = (*_ENVELOPE_REQUIRED, "sig") if require_sig else _ENVELOPE_REQUIRED
    check_members(obj, (), required=required, allowed=_ENVELOPE_KEYS, what="envelope")
    try:
        body = Body.from_dict(obj["body"])
    except EnvelopeError as exc:
        raise exc.under("body") from None
    context: Any = obj.get("context")
    if context is not None:
        if not isinstance(context, list):
            raise EnvelopeError(("context",), f"must be an array, not {kind_of(context)}")
        items = []
        for i, item in enumerate(context):
            try:
                items.append(ContextRef.from_dict(item))
            except EnvelopeError as exc:
                raise exc.under("context", i) from None
        context = tuple(items)
    to = obj["to"]
    if not isinstance(to, list):
        raise EnvelopeError(("to",), f"must be an array, not {kind_of(to)}")
    for key in ("reply_to", "stream_id", "delta_window", "cap_token", "sig", "ext"):
        # JSON null is not a string / integer / object: absent members are
        # left out, never written as null.
        if key in obj and obj[key] is None:
            raise EnvelopeError((key,), "must not be null (leave the member out instead)")
    return Envelope(
        id=obj["id"],
        ts=obj["ts"],
        from_=obj["from"],
        to=to,
        intent=obj["intent"],
        body=body,
        reply_to=obj.get("reply_to"),
        context=context,
        stream_id=obj.get("stream_id"),
        delta_window=obj.get("delta_window"),
        cap_token=obj.get("cap_token"),
        sig=obj.get("sig"),
        ext=obj.get("ext"),
    )


def encode_envelope(envelope: Envelope) -> bytes:
    """The envelope as compact JSON bytes (member order as in section 4)."""
    return orjson.dumps(envelope.to_dict())


def decode_delta(
    data: bytes | str | Mapping[str, Any], *, max_size: int = DEFAULT_MAX_SIZE
) -> Delta:
    """Parse and validate a delta frame (Appendix A.2).

    Raises:
        EnvelopeError: As :func:`decode_envelope`.
    """
    obj = _load(data, max_size, "delta")
    check_members(obj, (), required=_DELTA_REQUIRED, allowed=_DELTA_KEYS, what="delta")
    if "payload" in obj and obj["payload"] is None:
        raise EnvelopeError(("payload",), "must not be null (leave the member out instead)")
    return Delta(
        delta_seq=obj["delta_seq"],
        stream_id=obj["stream_id"],
        ts=obj["ts"],
        type=obj["type"],
        payload=obj.get("payload"),
    )


def encode_delta(delta: Delta, *, stream_id: str | None = None) -> bytes:
    """The delta frame as compact JSON bytes.

    Args:
        stream_id: Write this ``stream_id`` instead of the frame's (a
            binding whose transport stream names the frames: HTTP/3).
    """
    out = delta.to_dict()
    if stream_id is not None:
        need_str(stream_id, ("stream_id",))
        out["stream_id"] = stream_id
    return orjson.dumps(out)


# --- canonical JSON (section 4.2) -------------------------------------------------------


def canonical_json(value: Any) -> bytes:
    """The canonical JSON form of ``value`` (spec 003 section 4.2).

    Object keys are sorted at every level (by code point), the text is
    UTF-8 and there is no whitespace between tokens.

    Raises:
        EnvelopeError: ``value`` holds something that is not plain JSON
            (NaN, a non-string key, a set, an integer beyond 64 bits...).
    """
    check_json(value, ())
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError as exc:  # pragma: no cover - check_json refuses first
        raise EnvelopeError((), f"cannot be written as JSON: {exc}") from None


def envelope_canonical_json(envelope: Envelope) -> bytes:
    """The bytes an envelope's signature covers: canonical JSON without ``sig``."""
    return canonical_json(envelope.to_dict(include_sig=False))


def envelope_sha256(envelope: Envelope) -> str:
    """Hex SHA-256 of :func:`envelope_canonical_json` (the JWS payload's ``sha256``)."""
    return hashlib.sha256(envelope_canonical_json(envelope)).hexdigest()


# --- state machine (section 10) ---------------------------------------------------------


class ExchangeState(enum.Enum):
    """States of one received envelope's exchange (section 10, and uamp's ``ANSWERED``)."""

    NEW = "new"
    IN_PROGRESS = "in_progress"
    ANSWERED = "answered"
    """uamp's addition: a ``propose`` was answered; the proposer's ``confirm``
    or ``deny`` is awaited."""
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    ERROR = "error"


class Trigger(enum.Enum):
    """What moves the state machine: section 10's arrow labels and the other intents."""

    ASK = "ask"
    SUBSCRIBE = "subscribe"
    PROPOSE = "propose"
    INFORM = "inform"
    NOTIFY = "notify"
    PROGRESS = "progress"
    CONFIRM = "confirm"
    DENY = "deny"
    DONE = "done"
    ANSWER = "answer"
    """The ``done`` of an exchange a ``propose`` opened: the answer is out."""
    CANCEL = "cancel"
    ERROR = "error"


#: Section 10 as data, completed for every intent of section 4.1:
#: ``{state: {trigger: next state}}``. A trigger missing under a state is a
#: protocol error; the three end states accept nothing.
#:
#: * ``ask`` and ``subscribe`` open an exchange as section 10 draws; so does
#:   ``propose``, whose answer (its ``done``, :attr:`Trigger.ANSWER`) waits
#:   in ``ANSWERED`` for the proposer's ``confirm`` (COMPLETED) or ``deny``
#:   (CANCELLED: the plan is withdrawn).
#: * ``inform``, ``notify`` and ``progress`` expect no answer: their own
#:   exchange completes on receipt (what they add to another exchange, named
#:   by ``reply_to``, does not move that one).
#: * ``deny`` of a running exchange withdraws it like ``cancel``.
TRANSITIONS: Final[Mapping[ExchangeState, Mapping[Trigger, ExchangeState]]] = {
    ExchangeState.NEW: {
        Trigger.ASK: ExchangeState.IN_PROGRESS,
        Trigger.SUBSCRIBE: ExchangeState.IN_PROGRESS,
        Trigger.PROPOSE: ExchangeState.IN_PROGRESS,
        Trigger.INFORM: ExchangeState.COMPLETED,
        Trigger.NOTIFY: ExchangeState.COMPLETED,
        Trigger.PROGRESS: ExchangeState.COMPLETED,
    },
    ExchangeState.IN_PROGRESS: {
        Trigger.CONFIRM: ExchangeState.COMPLETED,
        Trigger.DONE: ExchangeState.COMPLETED,
        Trigger.ANSWER: ExchangeState.ANSWERED,
        Trigger.CANCEL: ExchangeState.CANCELLED,
        Trigger.DENY: ExchangeState.CANCELLED,
        Trigger.ERROR: ExchangeState.ERROR,
    },
    ExchangeState.ANSWERED: {
        Trigger.CONFIRM: ExchangeState.COMPLETED,
        Trigger.DENY: ExchangeState.CANCELLED,
        Trigger.CANCEL: ExchangeState.CANCELLED,
        Trigger.ERROR: ExchangeState.ERROR,
    },
    ExchangeState.COMPLETED: {},
    ExchangeState.CANCELLED: {},
    ExchangeState.ERROR: {},
}

#: Every intent's trigger (section 4.1: each intent is one).
_INTENT_TRIGGERS: Final[Mapping[Intent, Trigger]] = {i: Trigger(i.value) for i in Intent}
_DELTA_TRIGGERS: Final[Mapping[DeltaType, Trigger]] = {
    DeltaType.DONE: Trigger.DONE,
    DeltaType.CANCEL: Trigger.CANCEL,
    DeltaType.ERROR: Trigger.ERROR,
}


def trigger_for(message: Envelope | Delta, *, opened_by: Intent | None = None) -> Trigger | None:
    """The section 10 trigger a message carries, or ``None`` if it moves nothing.

    Envelopes trigger by intent (each intent is a trigger), deltas by type
    (``done``, ``cancel``, ``error``; ``progress``, ``chunk`` and ``patch``
    leave the state alone). The ``done`` of an exchange ``opened_by`` a
    ``propose`` is :attr:`Trigger.ANSWER`.
    """
    if isinstance(message, Envelope):
        return _INTENT_TRIGGERS[message.intent]
    trigger = _DELTA_TRIGGERS.get(message.type)
    if trigger is Trigger.DONE and opened_by is Intent.PROPOSE:
        return Trigger.ANSWER
    return trigger


class InvalidTransition(ProtocolError):
    """A trigger that section 10 does not allow in the current state.

    Attributes:
        state: The state the exchange was in (and still is).
        trigger: The refused trigger.
    """

    def __init__(self, state: ExchangeState, trigger: Trigger) -> None:
        allowed = ", ".join(t.value for t in TRANSITIONS[state]) or "nothing (it has ended)"
        super().__init__(
            f"{trigger.value!r} is not allowed in state {state.name}; allowed: {allowed}",
            code="invalid_transition",
        )
        self.state = state
        self.trigger = trigger


class Exchange:
    """One request's state (section 10), driven by :data:`TRANSITIONS`.

    The machine does not know which side is local; the caller turns an
    :class:`InvalidTransition` into a local or remote error.
    """

    def __init__(self) -> None:
        #: The current state; starts at ``NEW`` ("envelope received").
        self.state = ExchangeState.NEW
        #: The intent that moved it out of ``NEW`` (``None`` before).
        self.opened_by: Intent | None = None

    def advance(self, trigger: Trigger) -> ExchangeState:
        """Apply ``trigger`` and return the new state.

        Raises:
            InvalidTransition: The table has no such move; the state is
                unchanged.
        """
        moves = TRANSITIONS[self.state]
        if trigger not in moves:
            raise InvalidTransition(self.state, trigger)
        if self.state is ExchangeState.NEW:
            self.opened_by = Intent(trigger.value)
        self.state = moves[trigger]
        return self.state

    def observe(self, message: Envelope | Delta) -> ExchangeState:
        """Advance by the trigger ``message`` carries (:func:`trigger_for`), if any.

        Raises:
            InvalidTransition: As :meth:`advance`.
        """
        trigger = trigger_for(message, opened_by=self.opened_by)
        return self.state if trigger is None else self.advance(trigger)
