"""One class per UAMP 1.0 event (section 15, both directions, and section 11).

Each event is a frozen, slotted, keyword-only attrs class named after its wire
type in CamelCase; the wire type is the class variable ``type``. The
``capabilities`` event is :class:`CapabilitiesEvent` because the name
:class:`~uamp_proto.types.Capabilities` belongs to the object of section 9.

Every event carries the base fields of section 4. ``event_id`` is required on
the wire by the spec, but several of the spec's own examples (section 10)
leave it out, so decoding accepts its absence and the connection state
machine stamps one from its id source on everything it sends.

Fields the protocol does not define are kept in ``unknown`` and written back
on encode. Event types this version does not know decode to
:class:`UnknownEvent`, never to an error (section 14.3).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import attrs

from . import _fastinit
from .types import (
    EMPTY,
    Capabilities,
    ChatSender,
    Delta,
    ErrorInfo,
    Media,
    Message,
    PaymentRequirements,
    PaymentSubmission,
    ResponseConfig,
    ResponseFormat,
    ResponseOutput,
    Session,
    SessionConfig,
    UsageStats,
)
from .types import ContentItem as ContentItem


def _unknown() -> Any:
    return attrs.field(default=EMPTY, eq=False, repr=False)


@attrs.frozen(kw_only=True)
class Event:
    """Base of every known UAMP event: the fields of section 4."""

    type: ClassVar[str] = ""
    #: Which side sends it: "client", "server" or "both"; "system" for section 11.
    direction: ClassVar[str] = "both"

    event_id: str | None = None
    timestamp: float | None = None
    session_id: str | None = None
    unknown: Mapping[str, Any] = _unknown()


@attrs.frozen(kw_only=True)
class UnknownEvent:
    """An event whose type this version does not know, kept verbatim."""

    type: str
    raw: dict[str, Any]

    @property
    def event_id(self) -> str | None:
        """The event id, when the raw object carries a string one."""
        value = self.raw.get("event_id")
        return value if isinstance(value, str) else None

    @property
    def session_id(self) -> str | None:
        """The session id, when the raw object carries a string one."""
        value = self.raw.get("session_id")
        return value if isinstance(value, str) else None


AnyEvent = Event | UnknownEvent


# === Client -> server (section 5) ==========================================


@attrs.frozen(kw_only=True)
class SessionCreate(Event):
    """Open a session; always the first event a client sends (5.1)."""

    type: ClassVar[str] = "session.create"
    direction: ClassVar[str] = "client"
    uamp_version: str
    session: SessionConfig
    agent: str | None = None
    chat: str | None = None
    token: str | None = None
    payment_token: str | None = None
    client_capabilities: Capabilities | None = None


@attrs.frozen(kw_only=True)
class SessionUpdate(Event):
    """Refresh a session's tokens or configuration without reconnecting (5.2)."""

    type: ClassVar[str] = "session.update"
    direction: ClassVar[str] = "client"
    token: str | None = None
    payment_token: str | None = None
    session: SessionConfig | None = None


@attrs.frozen(kw_only=True)
class SessionEnd(Event):
    """End a session; either side may send it (5.3)."""

    type: ClassVar[str] = "session.end"
    direction: ClassVar[str] = "both"
    reason: str | None = None


@attrs.frozen(kw_only=True)
class CapabilitiesQuery(Event):
    """Ask the server for its capabilities (5.4)."""

    type: ClassVar[str] = "capabilities.query"
    direction: ClassVar[str] = "client"
    model: str | None = None


@attrs.frozen(kw_only=True)
class ClientCapabilities(Event):
    """Announce or update the client's capabilities mid-session (5.5)."""

    type: ClassVar[str] = "client.capabilities"
    direction: ClassVar[str] = "client"
    capabilities: Capabilities


@attrs.frozen(kw_only=True)
class InputText(Event):
    """Text input, optionally with full history for stateless context (5.6)."""

    type: ClassVar[str] = "input.text"
    direction: ClassVar[str] = "client"
    text: str
    role: str | None = None
    messages: list[Message] | None = None
    payment_token: str | None = None
    context: dict[str, Any] | None = None


@attrs.frozen(kw_only=True)
class InputAudio(Event):
    """Audio input (5.7)."""

    type: ClassVar[str] = "input.audio"
    direction: ClassVar[str] = "client"
    audio: str
    format: str
    is_final: bool | None = None
    content_id: str | None = None


@attrs.frozen(kw_only=True)
class InputImage(Event):
    """Image input, base64 or by URL (5.8)."""

    type: ClassVar[str] = "input.image"
    direction: ClassVar[str] = "client"
    image: Media
    format: str | None = None
    detail: str | None = None
    content_id: str | None = None


@attrs.frozen(kw_only=True)
class InputVideo(Event):
    """Video input (5.9)."""

    type: ClassVar[str] = "input.video"
    direction: ClassVar[str] = "client"
    video: Media
    format: str | None = None
    content_id: str | None = None


@attrs.frozen(kw_only=True)
class InputFile(Event):
    """File input (5.10); filename and MIME type as the file content item needs."""

    type: ClassVar[str] = "input.file"
    direction: ClassVar[str] = "client"
    file: Media
    filename: str
    mime_type: str
    content_id: str | None = None


@attrs.frozen(kw_only=True)
class InputTyping(Event):
    """The user started or stopped typing (5.11)."""

    type: ClassVar[str] = "input.typing"
    direction: ClassVar[str] = "client"
    is_typing: bool
    chat_id: str | None = None


@attrs.frozen(kw_only=True)
class ResponseCreate(Event):
    """Ask the agent to respond to the accumulated input (5.12)."""

    type: ClassVar[str] = "response.create"
    direction: ClassVar[str] = "client"
    response: ResponseConfig | None = None
    response_format: ResponseFormat | None = None


@attrs.frozen(kw_only=True)
class ResponseCancel(Event):
    """Cancel the given, or else the current, response (5.13)."""

    type: ClassVar[str] = "response.cancel"
    direction: ClassVar[str] = "client"
    response_id: str | None = None


@attrs.frozen(kw_only=True)
class ToolResult(Event):
    """The result of a tool the server asked the client to run (5.14)."""

    type: ClassVar[str] = "tool.result"
    direction: ClassVar[str] = "client"
    call_id: str
    result: str
    is_error: bool | None = None


@attrs.frozen(kw_only=True)
class InterruptAnswer(Event):
    """A person's answer to an ``interrupt.request``, by its id (uamp extension).

    Any connection of the interrupt's principal may send it, in any session:
    the interrupt is found by id (docs/human-in-the-loop.md).
    """

    type: ClassVar[str] = "interrupt.answer"
    direction: ClassVar[str] = "client"
    interrupt_id: str
    approved: bool | None = None
    arguments: dict[str, Any] | None = None
    value: Any = None
    reason: str | None = None


@attrs.frozen(kw_only=True)
class PaymentSubmit(Event):
    """A payment token or proof answering ``payment.required`` (5.15)."""

    type: ClassVar[str] = "payment.submit"
    direction: ClassVar[str] = "client"
    payment: PaymentSubmission


@attrs.frozen(kw_only=True)
class VoiceInvite(Event):
    """Start a voice session, optionally with a WebRTC SDP offer (7.3).

    A client sends it; in a chat the server relays it to the callee, so
    uamp lets either side send it (docs/voice.md).
    """

    type: ClassVar[str] = "voice.invite"
    direction: ClassVar[str] = "both"
    sdp: str | None = None
    call_id: str | None = None


@attrs.frozen(kw_only=True)
class VoiceAccept(Event):
    """Accept a voice session, optionally with an SDP answer (7.3)."""

    type: ClassVar[str] = "voice.accept"
    direction: ClassVar[str] = "both"
    sdp: str | None = None
    call_id: str | None = None


@attrs.frozen(kw_only=True)
class VoiceDecline(Event):
    """Decline a voice session (7.3)."""

    type: ClassVar[str] = "voice.decline"
    direction: ClassVar[str] = "both"
    reason: str | None = None
    call_id: str | None = None


@attrs.frozen(kw_only=True)
class VoiceEnd(Event):
    """End a voice session (7.3)."""

    type: ClassVar[str] = "voice.end"
    direction: ClassVar[str] = "both"
    duration_ms: float | None = None
    reason: str | None = None
    call_id: str | None = None


@attrs.frozen(kw_only=True)
class Ping(Event):
    """Connection keepalive (5.17)."""

    type: ClassVar[str] = "ping"
    direction: ClassVar[str] = "client"

    def response(self) -> Pong:
        """The pong that answers this ping, in the same session."""
        return Pong(session_id=self.session_id)


@attrs.frozen(kw_only=True)
class MessageRead(Event):
    """A read receipt (7.1); either side may send it."""

    type: ClassVar[str] = "message.read"
    direction: ClassVar[str] = "both"
    message_id: str | None = None
    chat_id: str | None = None
    user_id: str | None = None
    read_at: float | None = None
    #: The chat sequence number read up to (uamp: the server's order, 7.1).
    seq: int | None = None


# === Server -> client (section 6) ==========================================


@attrs.frozen(kw_only=True)
class SessionCreated(Event):
    """The server confirms a session (6.1)."""

    type: ClassVar[str] = "session.created"
    direction: ClassVar[str] = "server"
    uamp_version: str
    session: Session
    chat: str | None = None
    agent: str | None = None


@attrs.frozen(kw_only=True)
class SessionUpdated(Event):
    """The server confirms a ``session.update`` (6.2)."""

    type: ClassVar[str] = "session.updated"
    direction: ClassVar[str] = "server"
    session: Session | None = None


@attrs.frozen(kw_only=True)
class SessionErrorEvent(Event):
    """A session-level error (6.3)."""

    type: ClassVar[str] = "session.error"
    direction: ClassVar[str] = "server"
    error: ErrorInfo


@attrs.frozen(kw_only=True)
class CapabilitiesEvent(Event):
    """The server's (model's or agent's) capabilities (6.4)."""

    type: ClassVar[str] = "capabilities"
    direction: ClassVar[str] = "server"
    capabilities: Capabilities


@attrs.frozen(kw_only=True)
class ResponseCreated(Event):
    """A response has started (6.5)."""

    type: ClassVar[str] = "response.created"
    direction: ClassVar[str] = "server"
    response_id: str


@attrs.frozen(kw_only=True)
class ResponseDelta(Event):
    """An increment of response content (6.6).

    ``delta_seq`` is set only on sessions that opted into delta windows
    (see :mod:`uamp_proto.flow`).
    """

    type: ClassVar[str] = "response.delta"
    direction: ClassVar[str] = "server"
    delta: Delta
    response_id: str | None = None
    delta_seq: int | None = None


@attrs.frozen(kw_only=True)
class ResponseDone(Event):
    """A response completed, with its full output and usage (6.7)."""

    type: ClassVar[str] = "response.done"
    direction: ClassVar[str] = "server"
    response: ResponseOutput
    response_id: str | None = None
    signature: str | None = None


@attrs.frozen(kw_only=True)
class ResponseErrorEvent(Event):
    """A response-level error (6.8); also carries ``version_mismatch`` (14.2)."""

    type: ClassVar[str] = "response.error"
    direction: ClassVar[str] = "server"
    error: ErrorInfo
    response_id: str | None = None


@attrs.frozen(kw_only=True)
class ResponseCancelled(Event):
    """A response was cancelled; the output produced so far (6.9)."""

    type: ClassVar[str] = "response.cancelled"
    direction: ClassVar[str] = "server"
    response_id: str | None = None
    partial_output: list[ContentItem] | None = None


@attrs.frozen(kw_only=True)
class ToolCall(Event):
    """Ask the client to run a tool (6.10)."""

    type: ClassVar[str] = "tool.call"
    direction: ClassVar[str] = "server"
    call_id: str
    name: str
    arguments: str
    response_id: str | None = None


@attrs.frozen(kw_only=True)
class InterruptRequest(Event):
    """The run paused to ask a human (uamp extension, docs/human-in-the-loop.md).

    ``kind`` is ``approval`` (run ``tool_name`` with ``arguments``?) or
    ``question`` (answer ``prompt`` with a value matching ``schema``). The
    response stays open until an ``interrupt.answer`` with ``interrupt_id``
    arrives (from any connection) or ``expires_at`` passes.
    """

    type: ClassVar[str] = "interrupt.request"
    direction: ClassVar[str] = "server"
    interrupt_id: str
    kind: str
    prompt: str
    tool_name: str | None = None
    call_id: str | None = None
    arguments: dict[str, Any] | None = None
    schema: dict[str, Any] | None = None
    expires_at: float | None = None
    step_id: str | None = None
    response_id: str | None = None


@attrs.frozen(kw_only=True)
class InterruptResolved(Event):
    """An interrupt ended: ``approved``, ``denied``, ``answered``, ``expired`` or ``cancelled``."""

    type: ClassVar[str] = "interrupt.resolved"
    direction: ClassVar[str] = "server"
    interrupt_id: str
    outcome: str
    response_id: str | None = None


@attrs.frozen(kw_only=True)
class ToolCallDone(Event):
    """A server-side tool call has completed (6.11)."""

    type: ClassVar[str] = "tool.call_done"
    direction: ClassVar[str] = "server"
    call_id: str
    response_id: str | None = None


@attrs.frozen(kw_only=True)
class Progress(Event):
    """Progress of a long-running operation (6.12).

    A client that opted into delta windows also sends ``progress`` with
    ``stage="ack"`` and ``delta_seq`` to acknowledge deltas (spec 003, 5).
    """

    type: ClassVar[str] = "progress"
    direction: ClassVar[str] = "both"
    target: str
    target_id: str | None = None
    stage: str | None = None
    message: str | None = None
    percent: float | None = None
    step: int | None = None
    total_steps: int | None = None
    delta_seq: int | None = None


@attrs.frozen(kw_only=True)
class Thinking(Event):
    """Reasoning content (6.13); ``is_delta`` appends to the previous thought."""

    type: ClassVar[str] = "thinking"
    direction: ClassVar[str] = "server"
    content: str
    stage: str | None = None
    redacted: bool | None = None
    is_delta: bool | None = None
    response_id: str | None = None
    delta_seq: int | None = None


@attrs.frozen(kw_only=True)
class AudioDelta(Event):
    """A chunk of streamed output audio (6.14)."""

    type: ClassVar[str] = "audio.delta"
    direction: ClassVar[str] = "server"
    audio: str
    response_id: str | None = None
    delta_seq: int | None = None


@attrs.frozen(kw_only=True)
class AudioDone(Event):
    """Output audio is complete (6.14)."""

    type: ClassVar[str] = "audio.done"
    direction: ClassVar[str] = "server"
    response_id: str | None = None
    duration_ms: float | None = None


@attrs.frozen(kw_only=True)
class TranscriptDelta(Event):
    """Real-time transcription text (6.15)."""

    type: ClassVar[str] = "transcript.delta"
    direction: ClassVar[str] = "server"
    transcript: str
    response_id: str | None = None
    delta_seq: int | None = None


@attrs.frozen(kw_only=True)
class TranscriptDone(Event):
    """Transcription is complete (6.15)."""

    type: ClassVar[str] = "transcript.done"
    direction: ClassVar[str] = "server"
    response_id: str | None = None
    transcript: str | None = None


@attrs.frozen(kw_only=True)
class UsageDelta(Event):
    """Incremental usage during streaming (6.16)."""

    type: ClassVar[str] = "usage.delta"
    direction: ClassVar[str] = "server"
    delta: UsageStats
    response_id: str | None = None


@attrs.frozen(kw_only=True)
class RateLimit(Event):
    """A rate-limit notification (6.17)."""

    type: ClassVar[str] = "rate_limit"
    direction: ClassVar[str] = "server"
    limit: int | None = None
    remaining: int | None = None
    reset_at: float | None = None


@attrs.frozen(kw_only=True)
class PresenceTyping(Event):
    """Another participant is typing (6.18)."""

    type: ClassVar[str] = "presence.typing"
    direction: ClassVar[str] = "server"
    is_typing: bool
    user_id: str | None = None
    username: str | None = None
    chat_id: str | None = None


@attrs.frozen(kw_only=True)
class PresenceOnline(Event):
    """A user or agent came online (7.1)."""

    type: ClassVar[str] = "presence.online"
    direction: ClassVar[str] = "server"
    user_id: str | None = None
    username: str | None = None
    chat_id: str | None = None


@attrs.frozen(kw_only=True)
class PresenceOffline(Event):
    """A user or agent went offline (7.1)."""

    type: ClassVar[str] = "presence.offline"
    direction: ClassVar[str] = "server"
    user_id: str | None = None
    username: str | None = None
    chat_id: str | None = None


@attrs.frozen(kw_only=True)
class MessageCreated(Event):
    """A new chat message, fanned out to subscribers (7.1)."""

    type: ClassVar[str] = "message.created"
    direction: ClassVar[str] = "server"
    message: Message | None = None
    message_id: str | None = None
    chat_id: str | None = None
    #: The server-assigned position of the message in its chat (1, 2, ...).
    seq: int | None = None
    #: Who sent it.
    sender: ChatSender | None = None
    #: When the server stored it (Unix seconds).
    created_at: float | None = None


@attrs.frozen(kw_only=True)
class PaymentRequired(Event):
    """Payment is needed to continue (7.2).

    ``extra={"action": "topup", ...}`` marks a mid-stream top-up (spec 004):
    the response pauses and resumes after ``payment.submit``.
    """

    type: ClassVar[str] = "payment.required"
    direction: ClassVar[str] = "server"
    requirements: PaymentRequirements
    response_id: str | None = None
    extra: dict[str, Any] | None = None

    @property
    def is_topup(self) -> bool:
        """Whether this is a mid-stream top-up request."""
        return bool(self.extra) and self.extra.get("action") == "topup"  # type: ignore[union-attr]


@attrs.frozen(kw_only=True)
class PaymentAccepted(Event):
    """The submitted payment was verified (7.2, spec 004)."""

    type: ClassVar[str] = "payment.accepted"
    direction: ClassVar[str] = "server"
    payment_id: str | None = None
    balance_remaining: str | None = None
    amount: str | None = None
    currency: str | None = None


@attrs.frozen(kw_only=True)
class PaymentBalance(Event):
    """A balance update, possibly with a low-balance warning (7.2)."""

    type: ClassVar[str] = "payment.balance"
    direction: ClassVar[str] = "server"
    balance: str | None = None
    currency: str | None = None
    low_balance_warning: bool | None = None
    estimated_remaining: float | None = None
    expires_at: float | None = None
    balance_remaining: str | None = None
    threshold: str | None = None


@attrs.frozen(kw_only=True)
class PaymentErrorEvent(Event):
    """A payment failed (7.2); see :data:`PAYMENT_ERROR_CODES`."""

    type: ClassVar[str] = "payment.error"
    direction: ClassVar[str] = "server"
    code: str
    message: str
    balance_required: str | None = None
    balance_current: str | None = None
    can_retry: bool | None = None


@attrs.frozen(kw_only=True)
class Pong(Event):
    """Keepalive response (6.19)."""

    type: ClassVar[str] = "pong"
    direction: ClassVar[str] = "server"


# === System events (section 11) ============================================


@attrs.frozen(kw_only=True)
class SystemErrorEvent(Event):
    """An error during internal processing."""

    type: ClassVar[str] = "system.error"
    direction: ClassVar[str] = "system"
    error: ErrorInfo | None = None


@attrs.frozen(kw_only=True)
class SystemStop(Event):
    """Ask internal processing to stop."""

    type: ClassVar[str] = "system.stop"
    direction: ClassVar[str] = "system"
    reason: str | None = None


@attrs.frozen(kw_only=True)
class SystemCancel(Event):
    """Cancel internal processing and release its resources."""

    type: ClassVar[str] = "system.cancel"
    direction: ClassVar[str] = "system"
    reason: str | None = None


@attrs.frozen(kw_only=True)
class SystemPing(Event):
    """Internal keepalive."""

    type: ClassVar[str] = "system.ping"
    direction: ClassVar[str] = "system"


@attrs.frozen(kw_only=True)
class SystemPong(Event):
    """Internal keepalive response."""

    type: ClassVar[str] = "system.pong"
    direction: ClassVar[str] = "system"


@attrs.frozen(kw_only=True)
class SystemUnroutable(Event):
    """No handler was found for a message."""

    type: ClassVar[str] = "system.unroutable"
    direction: ClassVar[str] = "system"
    event_type: str | None = None
    reason: str | None = None


def with_ids(event: Event, *, session_id: str | None, response_id: str | None) -> Event:
    """``event`` with the session and response ids it leaves out filled in.

    Ids the event carries are kept; ``response_id`` is only set on events
    that have the field. Returns ``event`` itself when nothing changes.
    """
    if type(event) is ResponseDelta:
        # The hot path (agents leave both ids out of every delta): one direct
        # construction is cheaper than attrs.evolve.
        rid = event.response_id if event.response_id is not None else response_id
        sid = event.session_id if event.session_id is not None else session_id
        if rid is event.response_id and sid is event.session_id:
            return event
        return ResponseDelta(
            delta=event.delta,
            response_id=rid,
            session_id=sid,
            event_id=event.event_id,
            timestamp=event.timestamp,
            delta_seq=event.delta_seq,
            unknown=event.unknown,
        )
    fill_sid = session_id is not None and event.session_id is None
    fill_rid = response_id is not None and getattr(event, "response_id", "") is None
    # A compiled attrs.evolve (a progress event, a usage delta on every turn).
    stamped: Event
    if fill_sid and fill_rid:
        stamped = _fastinit.replacer(type(event), _BOTH_IDS)(event, session_id, response_id)
    elif fill_sid:
        stamped = _fastinit.replacer(type(event), _SESSION_ID)(event, session_id)
    elif fill_rid:
        stamped = _fastinit.replacer(type(event), _RESPONSE_ID)(event, response_id)
    else:
        stamped = event
    return stamped


_BOTH_IDS = ("session_id", "response_id")
_SESSION_ID = ("session_id",)
_RESPONSE_ID = ("response_id",)


#: Every known event class, by wire type.
EVENT_TYPES: dict[str, type[Event]] = {
    cls.type: cls
    for cls in (
        SessionCreate,
        SessionUpdate,
        SessionEnd,
        CapabilitiesQuery,
        ClientCapabilities,
        InputText,
        InputAudio,
        InputImage,
        InputVideo,
        InputFile,
        InputTyping,
        ResponseCreate,
        ResponseCancel,
        ToolResult,
        InterruptAnswer,
        PaymentSubmit,
        VoiceInvite,
        VoiceAccept,
        VoiceDecline,
        VoiceEnd,
        Ping,
        MessageRead,
        SessionCreated,
        SessionUpdated,
        SessionErrorEvent,
        CapabilitiesEvent,
        ResponseCreated,
        ResponseDelta,
        ResponseDone,
        ResponseErrorEvent,
        ResponseCancelled,
        ToolCall,
        InterruptRequest,
        InterruptResolved,
        ToolCallDone,
        Progress,
        Thinking,
        AudioDelta,
        AudioDone,
        TranscriptDelta,
        TranscriptDone,
        UsageDelta,
        RateLimit,
        PresenceTyping,
        PresenceOnline,
        PresenceOffline,
        MessageCreated,
        PaymentRequired,
        PaymentAccepted,
        PaymentBalance,
        PaymentErrorEvent,
        Pong,
        SystemErrorEvent,
        SystemStop,
        SystemCancel,
        SystemPing,
        SystemPong,
        SystemUnroutable,
    )
}

#: Error codes of ``session.error`` (6.3).
SESSION_ERROR_CODES = frozenset({"agent_offline", "rate_limited", "unauthorized", "timeout"})
#: Error codes of ``payment.error`` (7.2).
PAYMENT_ERROR_CODES = frozenset(
    {
        "insufficient_balance",
        "token_expired",
        "token_invalid",
        "payment_failed",
        "rate_limited",
        "mandate_revoked",
    }
)

#: The classes above built by a compiled ``__init__`` (:mod:`uamp_proto._fastinit`).
FAST_INIT = _fastinit.install(globals())
