"""The data types of UAMP 1.0 sections 8 and 9 that events carry.

Every class is a frozen, slotted, keyword-only attrs class. Optional fields
default to ``None`` (or an empty container for the ``unknown`` bag), meaning
*absent*: the codec never writes an absent field. Fields that this version of
the protocol does not know are kept in ``unknown`` and written back on encode
(UAMP section 14.3, forward compatibility).

Tagged types (content items, response deltas) carry their wire tag as the
class variable ``type``.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar, TypeAlias

import attrs

from . import _fastinit

__all__ = [
    "EMPTY",
    "AudioCapabilities",
    "AudioContent",
    "AudioUsage",
    "Capabilities",
    "ChatSender",
    "ContentItem",
    "Delta",
    "DeltaAudio",
    "DeltaText",
    "DeltaToolCall",
    "DeltaToolProgress",
    "DeltaToolResult",
    "DeltaUnknown",
    "ErrorInfo",
    "FileCapabilities",
    "FileContent",
    "FunctionDefinition",
    "ImageCapabilities",
    "ImageContent",
    "Media",
    "MediaURL",
    "Message",
    "PaymentRequirements",
    "PaymentScheme",
    "PaymentSubmission",
    "ResponseConfig",
    "ResponseFormat",
    "ResponseOutput",
    "Session",
    "SessionConfig",
    "TextContent",
    "ThinkingContent",
    "ToolCallContent",
    "ToolCallFragment",
    "ToolCapabilities",
    "ToolDefinition",
    "ToolInvocation",
    "ToolOutput",
    "ToolProgress",
    "ToolResultContent",
    "ToolResultFragment",
    "UnknownContent",
    "UsageCost",
    "UsageStats",
]

#: The shared, read-only empty mapping used as the default ``unknown`` bag.
EMPTY: Mapping[str, Any] = MappingProxyType({})

JSONObject: TypeAlias = dict[str, Any]


def _unknown() -> Any:
    """The ``unknown`` field: wire keys this version does not know."""
    return attrs.field(default=EMPTY, eq=False, repr=False)


# --- Media (section 8.4.1) -------------------------------------------------


@attrs.frozen(kw_only=True)
class MediaURL:
    """A media reference by URL: ``{"url": "..."}`` (preferred over base64)."""

    url: str
    unknown: Mapping[str, Any] = _unknown()


#: Media fields take raw base64 text or a URL reference (section 8.4.1).
Media: TypeAlias = str | MediaURL


# --- Content items (section 8.4.2) -----------------------------------------


@attrs.frozen(kw_only=True)
class TextContent:
    """Plain text."""

    type: ClassVar[str] = "text"
    text: str
    unknown: Mapping[str, Any] = _unknown()


@attrs.frozen(kw_only=True)
class ImageContent:
    """An image, by URL or base64."""

    type: ClassVar[str] = "image"
    image: Media
    format: str | None = None
    detail: str | None = None
    alt_text: str | None = None
    content_id: str | None = None
    unknown: Mapping[str, Any] = _unknown()


@attrs.frozen(kw_only=True)
class AudioContent:
    """Audio, by URL or base64."""

    type: ClassVar[str] = "audio"
    audio: Media
    format: str | None = None
    duration_ms: float | None = None
    content_id: str | None = None
    unknown: Mapping[str, Any] = _unknown()


@attrs.frozen(kw_only=True)
class VideoContent:
    """Video, by URL or base64."""

    type: ClassVar[str] = "video"
    video: Media
    format: str | None = None
    duration_ms: float | None = None
    thumbnail: str | None = None
    content_id: str | None = None
    unknown: Mapping[str, Any] = _unknown()


@attrs.frozen(kw_only=True)
class FileContent:
    """A file attachment; ``filename`` and ``mime_type`` are required."""

    type: ClassVar[str] = "file"
    file: Media
    filename: str
    mime_type: str
    size_bytes: int | None = None
    content_id: str | None = None
    unknown: Mapping[str, Any] = _unknown()


@attrs.frozen(kw_only=True)
class ToolInvocation:
    """One tool invocation: call id, function name, JSON-encoded arguments.

    The codec also accepts the OpenAI nested form
    ``{"id", "type": "function", "function": {"name", "arguments"}}`` and
    normalises it to this flat UAMP form.
    """

    id: str
    name: str
    arguments: str
    unknown: Mapping[str, Any] = _unknown()


@attrs.frozen(kw_only=True)
class ToolCallContent:
    """A tool invocation made by the assistant."""

    type: ClassVar[str] = "tool_call"
    tool_call: ToolInvocation
    unknown: Mapping[str, Any] = _unknown()


@attrs.frozen(kw_only=True)
class ToolOutput:
    """The outcome of a tool call, optionally with multimodal content."""

    call_id: str
    result: str
    is_error: bool | None = None
    content_items: list[ContentItem] | None = None
    unknown: Mapping[str, Any] = _unknown()


@attrs.frozen(kw_only=True)
class ToolResultContent:
    """A tool's response."""

    type: ClassVar[str] = "tool_result"
    tool_result: ToolOutput
    unknown: Mapping[str, Any] = _unknown()


@attrs.frozen(kw_only=True)
class ThinkingContent:
    """Accumulated reasoning text (section 6.13, persisted thinking)."""

    type: ClassVar[str] = "thinking"
    thinking: str
    stage: str | None = None
    redacted: bool | None = None
    unknown: Mapping[str, Any] = _unknown()


@attrs.frozen(kw_only=True)
class UnknownContent:
    """A content item of a type this version does not know, kept verbatim."""

    raw: dict[str, Any]

    @property
    def type(self) -> str:
        """The wire tag of the item."""
        return str(self.raw.get("type"))


ContentItem: TypeAlias = (
    TextContent
    | ImageContent
    | AudioContent
    | VideoContent
    | FileContent
    | ToolCallContent
    | ToolResultContent
    | ThinkingContent
    | UnknownContent
)

CONTENT_TYPES: tuple[type[Any], ...] = (
    TextContent,
    ImageContent,
    AudioContent,
    VideoContent,
    FileContent,
    ToolCallContent,
    ToolResultContent,
    ThinkingContent,
)


# --- Response deltas (section 6.6) -----------------------------------------


@attrs.frozen(kw_only=True)
class DeltaText:
    """An increment of response text."""

    type: ClassVar[str] = "text"
    text: str
    unknown: Mapping[str, Any] = _unknown()


@attrs.frozen(kw_only=True)
class DeltaAudio:
    """A base64-encoded chunk of response audio."""

    type: ClassVar[str] = "audio"
    audio: str
    unknown: Mapping[str, Any] = _unknown()


@attrs.frozen(kw_only=True)
class ToolCallFragment:
    """Part of a streamed tool call; ``arguments`` is a fragment to append."""

    id: str
    name: str | None = None
    arguments: str | None = None
    unknown: Mapping[str, Any] = _unknown()


@attrs.frozen(kw_only=True)
class DeltaToolCall:
    """A streamed tool invocation fragment."""

    type: ClassVar[str] = "tool_call"
    tool_call: ToolCallFragment
    unknown: Mapping[str, Any] = _unknown()


@attrs.frozen(kw_only=True)
class ToolResultFragment:
    """The result of a server-side tool; ``content_items``: media it shows (8.4.2, 8.5.4)."""

    call_id: str
    result: str | None = None
    status: str | None = None
    content_items: list[ContentItem] | None = None
    unknown: Mapping[str, Any] = _unknown()


@attrs.frozen(kw_only=True)
class DeltaToolResult:
    """A server-side tool's result, streamed to the client."""

    type: ClassVar[str] = "tool_result"
    tool_result: ToolResultFragment
    unknown: Mapping[str, Any] = _unknown()


@attrs.frozen(kw_only=True)
class ToolProgress:
    """Progress text of a running tool."""

    call_id: str
    text: str
    unknown: Mapping[str, Any] = _unknown()


@attrs.frozen(kw_only=True)
class DeltaToolProgress:
    """Progress of a running server-side tool."""

    type: ClassVar[str] = "tool_progress"
    tool_progress: ToolProgress
    unknown: Mapping[str, Any] = _unknown()


@attrs.frozen(kw_only=True)
class DeltaUnknown:
    """A delta of a type this version does not know, kept verbatim."""

    raw: dict[str, Any]

    @property
    def type(self) -> str:
        """The wire tag of the delta."""
        return str(self.raw.get("type"))


Delta: TypeAlias = (
    DeltaText | DeltaAudio | DeltaToolCall | DeltaToolResult | DeltaToolProgress | DeltaUnknown
)

DELTA_TYPES: tuple[type[Any], ...] = (
    DeltaText,
    DeltaAudio,
    DeltaToolCall,
    DeltaToolResult,
    DeltaToolProgress,
)


# --- Messages and tools (sections 8.5, 8.6) --------------------------------


@attrs.frozen(kw_only=True)
class Message:
    """A conversation message (stateless context passing, section 8.5)."""

    role: str
    content: str | None = None
    content_items: list[ContentItem] | None = None
    name: str | None = None
    tool_call_id: str | None = None
    tool_calls: list[ToolInvocation] | None = None
    unknown: Mapping[str, Any] = _unknown()

    @property
    def text(self) -> str:
        """The message's text: ``content``, else its text content items joined."""
        if self.content is not None:
            return self.content
        if not self.content_items:
            return ""
        return "".join(i.text for i in self.content_items if isinstance(i, TextContent))


@attrs.frozen(kw_only=True)
class ChatSender:
    """Who sent a chat message (``message.created.sender``, section 7.1).

    Attributes:
        id: The participant's user id (an agent's is its name).
        name: Its display name.
        kind: ``"user"`` or ``"agent"``.
    """

    id: str
    name: str | None = None
    kind: str = "user"
    unknown: Mapping[str, Any] = _unknown()


@attrs.frozen(kw_only=True)
class FunctionDefinition:
    """A function a model may call, with its JSON Schema parameters."""

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    unknown: Mapping[str, Any] = _unknown()


@attrs.frozen(kw_only=True)
class ToolDefinition:
    """An OpenAI-compatible tool definition (section 8.6)."""

    type: str = "function"
    function: FunctionDefinition
    unknown: Mapping[str, Any] = _unknown()


# --- Configuration (sections 8.1-8.3, 8.8) ---------------------------------


@attrs.frozen(kw_only=True)
class ResponseFormat:
    """Structured-output control: ``text``, ``json_object`` or ``json_schema``."""

    type: str
    json_schema: dict[str, Any] | None = None
    unknown: Mapping[str, Any] = _unknown()


@attrs.frozen(kw_only=True)
class SessionConfig:
    """Session configuration (section 8.1).

    ``voice`` and ``turn_detection`` are kept as plain objects: the spec
    names their types without defining them.
    """

    modalities: list[str]
    instructions: str | None = None
    tools: list[ToolDefinition] | None = None
    voice: dict[str, Any] | None = None
    input_audio_format: str | None = None
    output_audio_format: str | None = None
    turn_detection: dict[str, Any] | None = None
    response_format: ResponseFormat | None = None
    extensions: dict[str, Any] | None = None
    unknown: Mapping[str, Any] = _unknown()


@attrs.frozen(kw_only=True)
class ResponseConfig:
    """Per-response overrides carried by ``response.create`` (section 5.12).

    ``messages`` is the conversation for this response, in the shape of
    section 8.5 (Robutler's clients send it here): it is treated exactly as
    ``input.text.messages`` is (section 5.6).
    """

    modalities: list[str] | None = None
    instructions: str | None = None
    tools: list[ToolDefinition] | None = None
    messages: list[Message] | None = None
    unknown: Mapping[str, Any] = _unknown()


@attrs.frozen(kw_only=True)
class Session:
    """The session object the server returns in ``session.created`` (8.8)."""

    id: str
    created_at: float | None = None
    config: SessionConfig | None = None
    status: str | None = None
    unknown: Mapping[str, Any] = _unknown()


# --- Usage (section 8.7) ---------------------------------------------------


@attrs.frozen(kw_only=True)
class UsageCost:
    """Cost breakdown."""

    input_cost: float | None = None
    output_cost: float | None = None
    total_cost: float | None = None
    currency: str | None = None
    unknown: Mapping[str, Any] = _unknown()


@attrs.frozen(kw_only=True)
class AudioUsage:
    """Audio duration statistics."""

    input_seconds: float | None = None
    output_seconds: float | None = None
    unknown: Mapping[str, Any] = _unknown()


@attrs.frozen(kw_only=True)
class UsageStats:
    """Token, cost and audio usage (section 8.7)."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    cached_tokens: int | None = None
    cost: UsageCost | None = None
    audio: AudioUsage | None = None
    unknown: Mapping[str, Any] = _unknown()


# --- Capabilities (section 9) ----------------------------------------------


@attrs.frozen(kw_only=True)
class ImageCapabilities:
    """Detailed image support."""

    formats: list[str] | None = None
    max_size_bytes: int | None = None
    detail_levels: list[str] | None = None
    max_images_per_request: int | None = None
    unknown: Mapping[str, Any] = _unknown()


@attrs.frozen(kw_only=True)
class AudioCapabilities:
    """Detailed audio support."""

    input_formats: list[str] | None = None
    output_formats: list[str] | None = None
    sample_rates: list[int] | None = None
    supports_realtime: bool | None = None
    voices: list[str] | None = None
    unknown: Mapping[str, Any] = _unknown()


@attrs.frozen(kw_only=True)
class FileCapabilities:
    """Detailed file support."""

    supported_mime_types: list[str] | None = None
    supports_pdf: bool | None = None
    supports_code: bool | None = None
    supports_structured_data: bool | None = None
    unknown: Mapping[str, Any] = _unknown()


@attrs.frozen(kw_only=True)
class ToolCapabilities:
    """Tool/function-calling support."""

    supports_tools: bool | None = None
    supports_parallel_tools: bool | None = None
    supports_streaming_tools: bool | None = None
    max_tools_per_request: int | None = None
    built_in_tools: list[str] | None = None
    unknown: Mapping[str, Any] = _unknown()


@attrs.frozen(kw_only=True)
class Capabilities:
    """The unified capability declaration of models, clients and agents (9).

    The spec's table marks the three ``supports_*`` flags required, but its
    own examples (sections 5.5 and 6.4) omit them, so uamp accepts them as
    optional and treats absence as "not declared".
    """

    id: str
    provider: str
    modalities: list[str]
    supports_streaming: bool | None = None
    supports_thinking: bool | None = None
    supports_caching: bool | None = None
    context_window: int | None = None
    max_output_tokens: int | None = None
    image: ImageCapabilities | None = None
    audio: AudioCapabilities | None = None
    file: FileCapabilities | None = None
    tools: ToolCapabilities | None = None
    provides: list[str] | None = None
    widgets: list[str] | None = None
    endpoints: list[str] | None = None
    extensions: dict[str, Any] | None = None
    unknown: Mapping[str, Any] = _unknown()


# --- Errors, responses, payments -------------------------------------------


@attrs.frozen(kw_only=True)
class ErrorInfo:
    """An error object: machine code, human message, optional details."""

    code: str
    message: str
    details: dict[str, Any] | None = None
    unknown: Mapping[str, Any] = _unknown()


@attrs.frozen(kw_only=True)
class ResponseOutput:
    """The final response object of ``response.done`` (section 6.7)."""

    status: str
    output: list[ContentItem]
    id: str | None = None
    usage: UsageStats | None = None
    unknown: Mapping[str, Any] = _unknown()


@attrs.frozen(kw_only=True)
class PaymentScheme:
    """One accepted way to pay."""

    scheme: str
    network: str | None = None
    address: str | None = None
    unknown: Mapping[str, Any] = _unknown()


@attrs.frozen(kw_only=True)
class PaymentRequirements:
    """What a ``payment.required`` event asks for (section 7.2)."""

    amount: str
    currency: str | None = None
    schemes: list[PaymentScheme] | None = None
    expires_at: float | None = None
    reason: str | None = None
    ap2: dict[str, Any] | None = None
    unknown: Mapping[str, Any] = _unknown()


@attrs.frozen(kw_only=True)
class PaymentSubmission:
    """The token or proof a client submits with ``payment.submit``."""

    scheme: str | None = None
    network: str | None = None
    token: str | None = None
    amount: str | None = None
    unknown: Mapping[str, Any] = _unknown()


#: The classes above built by a compiled ``__init__`` (:mod:`uamp_proto._fastinit`).
FAST_INIT = _fastinit.install(globals())
