"""Plumbing shared by the HTTP model providers.

Theory of operation
-------------------
Each provider module (``_openai``, ``_anthropic``, ``_google``) is a pure
translation between uamp_proto types and one vendor's JSON, plus an
:class:`HTTPClient` that moves that JSON over the network. This module holds
the parts they share:

* :class:`HTTPClient` -- POST a JSON body and get JSON back
  (:meth:`HTTPClient.post_json`), or POST it and read server-sent events
  (:meth:`HTTPClient.post_sse`). Every transport failure, timeout and
  HTTP error status becomes a :class:`~uamp_agents.providers.base.ProviderError`
  that says whether trying again may help and how long the server asked us
  to wait.
* :func:`retrying` and :func:`retrying_stream` -- automatic retries with
  capped exponential backoff that honours ``Retry-After``. A stream is only
  retried while it has yielded nothing: once the caller has seen an event,
  replaying the call would duplicate output.
* :func:`iter_sse` -- server-sent events of a response body, parsed by the
  core's :class:`uamp_proto.sse.SSEParser`.
* Message helpers that split a uamp :class:`~uamp_proto.types.Message` into
  what every vendor format needs (ordered text and media, tool calls, tool
  results, thinking), media helpers (URL vs base64, MIME types), and the
  ``response_format`` schema extraction used by spec section 8.3.
"""

from __future__ import annotations

import base64
import binascii
import email.utils
import math
import mimetypes
import random
import ssl
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypedDict, TypeVar, Unpack

import attrs
import httpx
import orjson
import trio

from uamp_proto.sse import SSEError, SSEEvent, SSEParser
from uamp_proto.types import (
    AudioContent,
    ContentItem,
    FileContent,
    ImageContent,
    MediaURL,
    Message,
    ResponseFormat,
    TextContent,
    ThinkingContent,
    ToolCallContent,
    ToolInvocation,
    ToolOutput,
    ToolResultContent,
    VideoContent,
)

from .base import NamedProvider, ProviderError, ProviderEvent

__all__ = [
    "DEFAULT_TIMEOUT",
    "MAX_SSE_EVENT",
    "RETRYABLE_STATUSES",
    "HTTPClient",
    "HTTPOptions",
    "HTTPProvider",
    "MediaItem",
    "MediaRef",
    "MessageParts",
    "RetryPolicy",
    "connect",
    "decode_base64_text",
    "error_from_response",
    "finish_or_cut",
    "iter_sse",
    "json_arguments",
    "load_json",
    "media_ref",
    "merge_params",
    "only_text",
    "parse_json_object",
    "parse_retry_after",
    "retrying",
    "retrying_stream",
    "schema_of",
    "split_message",
    "unsupported",
]

T = TypeVar("T")

#: Seconds allowed for each network operation (connect, each read, write).
DEFAULT_TIMEOUT = 60.0

#: Statuses worth retrying: request timeout, conflict (OpenAI uses it for
#: lock timeouts), rate limiting, server errors, and Anthropic's 529
#: "overloaded".
RETRYABLE_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})


# --- Errors -----------------------------------------------------------------


def parse_retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Read how long the server asked us to wait, in seconds.

    Understands ``retry-after-ms`` (OpenAI), ``Retry-After`` as delay seconds
    and ``Retry-After`` as an HTTP date (RFC 9110 section 10.2.3).

    Args:
        headers: Response headers (any case-insensitive mapping).
        now: The current POSIX time, for HTTP dates; defaults to the clock.

    Returns:
        Seconds to wait (never negative), or ``None`` when not given or not
        understood.
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    raw_ms = lowered.get("retry-after-ms")
    if raw_ms is not None:
        try:
            ms = float(raw_ms)
        except ValueError:
            ms = math.nan
        if math.isfinite(ms) and ms >= 0:
            return ms / 1000.0
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    raw = raw.strip()
    try:
        seconds = float(raw)
    except ValueError:
        pass
    else:
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


def _error_message(body: bytes) -> str | None:
    """The vendor's error message from an error body, if it has one.

    OpenAI ``{"error": {"message"}}``, Anthropic ``{"type": "error",
    "error": {"type", "message"}}`` and Gemini ``{"error": {"code",
    "message", "status"}}`` all nest it the same way; some OpenAI-compatible
    servers put a string or a top-level ``message``/``detail`` instead.
    """
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        text = body.decode("utf-8", "replace").strip()
        return text[:500] or None
    if isinstance(data, list) and data:
        data = data[0]  # Gemini sometimes wraps errors in a one-item list
    if not isinstance(data, dict):
        return None
    error = data.get("error")
    if isinstance(error, dict):
        message = error.get("message")
        kind = error.get("type") or error.get("status")
        if isinstance(message, str):
            return f"{kind}: {message}" if isinstance(kind, str) else message
    if isinstance(error, str):
        return error
    for key in ("message", "detail"):
        value = data.get(key)
        if isinstance(value, str):
            return value
    return None


def _google_retry_delay(body: bytes) -> float | None:
    """Gemini's ``google.rpc.RetryInfo`` ``retryDelay`` ("37s"), in seconds."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if isinstance(data, list) and data:
        data = data[0]
    error = data.get("error") if isinstance(data, dict) else None
    details = error.get("details") if isinstance(error, dict) else None
    if not isinstance(details, list):
        return None
    for detail in details:
        if not isinstance(detail, dict):
            continue
        delay = detail.get("retryDelay")
        if isinstance(delay, str) and delay.endswith("s"):
            try:
                return max(0.0, float(delay[:-1]))
            except ValueError:
                return None
    return None


def error_from_response(
    provider: str, status: int, headers: Mapping[str, str], body: bytes
) -> ProviderError:
    """Turn an HTTP error response into a :class:`ProviderError`.

    Args:
        provider: Provider name, for the message.
        status: The HTTP status (>= 400).
        headers: Response headers.
        body: The response body.
    """
    detail = _error_message(body) or httpx.codes.get_reason_phrase(status) or "error"
    retry_after = parse_retry_after(headers)
    if retry_after is None:
        retry_after = _google_retry_delay(body)
    return ProviderError(
        f"{provider}: HTTP {status}: {detail}",
        status=status,
        retry_after=retry_after,
        retryable=status in RETRYABLE_STATUSES or status >= 500,
    )


def load_json(provider: str, data: bytes | str, *, status: int | None = None) -> Any:
    """Parse JSON from a provider, or raise a non-retryable ProviderError."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        snippet = data[:120] if isinstance(data, str) else data[:120].decode("utf-8", "replace")
        raise ProviderError(
            f"{provider}: malformed JSON from the server ({exc}): {snippet!r}", status=status
        ) from exc


# --- Retries ----------------------------------------------------------------


@attrs.frozen(kw_only=True)
class RetryPolicy:
    """How many times and how patiently to retry retryable failures.

    Attributes:
        max_retries: Retries after the first attempt (0 disables retrying).
        base_delay: First backoff delay in seconds; doubles each retry.
        max_delay: Cap on any single wait, including a server's Retry-After.
    """

    max_retries: int = 2
    base_delay: float = 0.5
    max_delay: float = 20.0

    def delay(self, attempt: int, error: ProviderError) -> float:
        """Seconds to wait before retry number ``attempt`` (0-based)."""
        if error.retry_after is not None:
            return min(error.retry_after, self.max_delay)
        backoff = min(self.base_delay * (2.0**attempt), self.max_delay)
        # Jitter keeps many clients that failed together from retrying together.
        return backoff * random.uniform(0.75, 1.0)


async def retrying(policy: RetryPolicy, call: Callable[[], Awaitable[T]]) -> T:
    """Run ``call``, retrying retryable ProviderErrors per ``policy``."""
    attempt = 0
    while True:
        try:
            return await call()
        except ProviderError as exc:
            if not exc.retryable or attempt >= policy.max_retries:
                raise
            await trio.sleep(policy.delay(attempt, exc))
            attempt += 1


async def retrying_stream(
    policy: RetryPolicy, open_stream: Callable[[], AsyncIterator[T]]
) -> AsyncIterator[T]:
    """Yield from ``open_stream()``, retrying only while nothing was yielded."""
    attempt = 0
    while True:
        started = False
        stream = open_stream()
        try:
            async for item in stream:
                started = True
                yield item
            return
        except ProviderError as exc:
            if started or not exc.retryable or attempt >= policy.max_retries:
                raise
            failure = exc
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()
        await trio.sleep(policy.delay(attempt, failure))
        attempt += 1


# --- Server-sent events -----------------------------------------------------


#: The most one server-sent event may hold (64 MiB): a model may stream a
#: generated image or audio clip inline, base64, in a single event.
MAX_SSE_EVENT = 64 << 20


async def iter_sse(chunks: AsyncIterator[bytes]) -> AsyncIterator[SSEEvent]:
    """Parse a byte stream into server-sent events with the core's parser.

    :class:`uamp_proto.sse.SSEParser` does the framing (WHATWG rules). One
    thing is added for model servers: an event left without its closing
    blank line at end of input is still dispatched, since several servers
    omit it.

    Raises:
        ProviderError: An event is larger than :data:`MAX_SSE_EVENT`.
    """
    parser = SSEParser(max_buffer=MAX_SSE_EVENT)
    try:
        async for chunk in chunks:
            for event in parser.feed(chunk):
                yield event
        # End the last line and the last event for servers that did not.
        for event in parser.feed(b"\n\n"):
            yield event
    except SSEError as exc:
        raise ProviderError(f"unreadable event stream: {exc}") from exc


# --- HTTP client ------------------------------------------------------------


_SSL_CONTEXT: ssl.SSLContext | None = None


def _ssl_context() -> ssl.SSLContext:
    # Building a default context reads the CA store (milliseconds); do it once
    # and share it between the per-call httpx clients.
    global _SSL_CONTEXT
    if _SSL_CONTEXT is None:
        _SSL_CONTEXT = ssl.create_default_context()
    return _SSL_CONTEXT


#: The connection pool of the current trio run, shared by every provider
#: without a client of its own: see :func:`_run_client`.
_RUN_CLIENT: trio.lowlevel.RunVar[httpx.AsyncClient] = trio.lowlevel.RunVar("uamp_http_client")


def _run_client() -> httpx.AsyncClient:
    """The current trio run's shared :class:`httpx.AsyncClient`, opened on first use.

    An httpx pool belongs to one event loop run while a provider object may
    outlive it (or serve several), so the pool is kept per run, not per
    provider: every model call of a server reuses its keep-alive connections
    instead of opening a client and a TCP connection per call (about a
    millisecond of CPU each, more than the rest of a short agent turn). A
    system task closes the client when the run ends.
    """
    try:
        return _RUN_CLIENT.get()
    except LookupError:
        pass
    client = httpx.AsyncClient(verify=_ssl_context(), limits=httpx.Limits(max_connections=None))
    _RUN_CLIENT.set(client)

    async def close_at_exit() -> None:
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await client.aclose()

    trio.lowlevel.spawn_system_task(close_at_exit, name="uamp_agents.http_client")
    return client


class HTTPClient:
    """POSTs JSON to one provider and maps every failure to ProviderError.

    Without ``client`` the calls share the trio run's pool
    (:func:`_run_client`); pass a client of your own to use that instead.
    """

    def __init__(
        self,
        *,
        provider: str,
        base_url: str,
        headers: Mapping[str, str],
        timeout: float,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.provider = provider
        self.base_url = base_url.rstrip("/")
        self.headers = {"content-type": "application/json", **headers}
        self.timeout = httpx.Timeout(timeout)
        self._client = client

    def _url(self, path: str) -> str:
        return f"{self.base_url}/{path.lstrip('/')}"

    def _transport_error(self, exc: httpx.HTTPError) -> ProviderError:
        if isinstance(exc, httpx.TimeoutException):
            kind = "timed out"
        elif isinstance(exc, httpx.RemoteProtocolError):
            kind = "connection closed before the response was complete"
        else:
            kind = "transport error"
        return ProviderError(f"{self.provider}: {kind}: {exc!r}", retryable=True)

    async def post_json(self, path: str, body: Mapping[str, Any]) -> Any:
        """POST ``body`` and return the parsed JSON response.

        Raises:
            ProviderError: On transport failure, timeout, an HTTP error
                status, or a body that is not JSON.
        """
        content = orjson.dumps(body)
        client = self._client or _run_client()
        try:
            response = await client.post(
                self._url(path), content=content, headers=self.headers, timeout=self.timeout
            )
        except httpx.HTTPError as exc:
            raise self._transport_error(exc) from exc
        if response.status_code >= 400:
            raise error_from_response(
                self.provider, response.status_code, response.headers, response.content
            )
        return load_json(self.provider, response.content, status=response.status_code)

    async def post_sse(self, path: str, body: Mapping[str, Any]) -> AsyncGenerator[SSEEvent, None]:
        """POST ``body`` and yield the server-sent events of the response.

        Raises:
            ProviderError: On transport failure, timeout (of any single read)
                or an HTTP error status.
        """
        content = orjson.dumps(body)
        headers = {**self.headers, "accept": "text/event-stream"}
        client = self._client or _run_client()
        try:
            async with client.stream(
                "POST", self._url(path), content=content, headers=headers, timeout=self.timeout
            ) as response:
                if response.status_code >= 400:
                    raw = await response.aread()
                    raise error_from_response(
                        self.provider, response.status_code, response.headers, raw
                    )
                async for event in iter_sse(response.aiter_bytes()):
                    yield event
        except httpx.HTTPError as exc:
            raise self._transport_error(exc) from exc


# --- The provider classes' common part -----------------------------------------


class HTTPOptions(TypedDict, total=False):
    """The connection options every provider factory takes (docs/providers.md).

    Keys:
        timeout: Seconds for connecting and for each read
            (:data:`DEFAULT_TIMEOUT`).
        max_retries: Retries of retryable failures (429, 5xx, transport
            errors; Anthropic's 529 too), default 2.
        retry_base_delay: First backoff delay, doubled per retry (0.5).
        retry_max_delay: Cap on a single wait, Retry-After included (20.0).
        headers: Extra headers; they win over the provider's own.
        http_client: A long-lived ``httpx.AsyncClient`` to pool connections;
            by default a client is opened per call.
    """

    timeout: float
    max_retries: int
    retry_base_delay: float
    retry_max_delay: float
    headers: Mapping[str, str] | None
    http_client: httpx.AsyncClient | None


def connect(
    provider: str, *, base_url: str, own_headers: Mapping[str, str], **options: Unpack[HTTPOptions]
) -> tuple[HTTPClient, RetryPolicy]:
    """The HTTP client and retry policy a provider factory builds from its arguments.

    ``own_headers`` are the provider's (version, credentials); the caller's
    ``headers`` option wins over them.
    """
    http = HTTPClient(
        provider=provider,
        base_url=base_url,
        headers={**own_headers, **(options.get("headers") or {})},
        timeout=options.get("timeout", DEFAULT_TIMEOUT),
        client=options.get("http_client"),
    )
    policy = RetryPolicy(
        max_retries=options.get("max_retries", 2),
        base_delay=options.get("retry_base_delay", 0.5),
        max_delay=options.get("retry_max_delay", 20.0),
    )
    return http, policy


class HTTPProvider(NamedProvider):
    """What the HTTP providers share: the model, the client, retries, parameters.

    A subclass names itself in :attr:`provider_name` (``"openai"``,
    ``"anthropic"``, ``"google"``), builds request bodies and parses
    responses; :meth:`call_json` and :meth:`stream_events` do the retried
    HTTP calls.
    """

    def __init__(
        self, *, model: str, http: HTTPClient, policy: RetryPolicy, params: dict[str, Any]
    ) -> None:
        super().__init__(model)
        self._http = http
        self._policy = policy
        self._params = params

    async def call_json(self, path: str, body: Mapping[str, Any]) -> Any:
        """POST ``body`` to ``path`` with retries; return the JSON response."""

        async def call() -> Any:
            return await self._http.post_json(path, body)

        return await retrying(self._policy, call)

    def stream_events(
        self, parse: Callable[[], AsyncIterator[ProviderEvent]]
    ) -> AsyncIterator[ProviderEvent]:
        """Yield from ``parse()`` (one streamed call), retrying while nothing was yielded."""
        return retrying_stream(self._policy, parse)


# --- Parameters ---------------------------------------------------------------


def merge_params(*layers: Mapping[str, Any] | None) -> dict[str, Any]:
    """Merge parameter dicts, later ones winning; ``None`` values are dropped."""
    merged: dict[str, Any] = {}
    for layer in layers:
        if layer:
            merged.update(layer)
    return {k: v for k, v in merged.items() if v is not None}


def schema_of(response_format: ResponseFormat) -> tuple[str, dict[str, Any]]:
    """The (name, JSON Schema) of a ``json_schema`` response format.

    ``json_schema`` is OpenAI-shaped (``{"name", "schema", "strict"}``, which
    is how OpenAI passes it through natively, spec 8.3); a bare schema
    object is accepted too.
    """
    spec = response_format.json_schema or {}
    if isinstance(spec.get("schema"), dict):
        name = spec.get("name")
        return (name if isinstance(name, str) and name else "response", dict(spec["schema"]))
    return "response", dict(spec)


# --- Messages -----------------------------------------------------------------

MediaItem = ImageContent | AudioContent | VideoContent | FileContent


@attrs.frozen(kw_only=True)
class MessageParts:
    """A uamp message split into what vendor formats need.

    Attributes:
        content: Text and media in their original order.
        tool_calls: The assistant's tool calls (``tool_calls`` first, then
            ``tool_call`` content items not already listed).
        tool_results: Tool outputs (a ``role="tool"`` message, or
            ``tool_result`` content items).
        thinking: Persisted thinking items (section 6.13).
    """

    content: list[TextContent | MediaItem]
    tool_calls: list[ToolInvocation]
    tool_results: list[ToolOutput]
    thinking: list[ThinkingContent]


def split_message(message: Message) -> MessageParts:
    """Split ``message`` into ordered content, tool calls, results and thinking.

    Section 8.5: when ``content_items`` carries media it is the full payload
    (its text items included); ``content`` is the text-only form. Without
    media, ``content`` (or the joined text items) is the text.
    """
    items: list[ContentItem] = list(message.content_items or [])
    media_present = any(isinstance(i, MediaItem) for i in items)
    content: list[TextContent | MediaItem] = []
    if message.role == "tool":
        pass  # a tool message's text is its result, not content
    elif media_present:
        if message.content and not any(isinstance(i, TextContent) for i in items):
            content.append(TextContent(text=message.content))
        content.extend(i for i in items if isinstance(i, TextContent | MediaItem))
    elif message.text:
        content.append(TextContent(text=message.text))

    calls = list(message.tool_calls or [])
    seen = {c.id for c in calls}
    for item in items:
        if isinstance(item, ToolCallContent) and item.tool_call.id not in seen:
            calls.append(item.tool_call)
            seen.add(item.tool_call.id)

    results = [i.tool_result for i in items if isinstance(i, ToolResultContent)]
    if message.role == "tool" and not results:
        results.append(ToolOutput(call_id=message.tool_call_id or "", result=message.text))
    thinking = [i for i in items if isinstance(i, ThinkingContent)]
    return MessageParts(content=content, tool_calls=calls, tool_results=results, thinking=thinking)


def only_text(parts: MessageParts) -> bool:
    """Whether the ordered content is text only (no media)."""
    return all(isinstance(i, TextContent) for i in parts.content)


# --- Media --------------------------------------------------------------------

# Base64 prefixes of common file signatures, to name a MIME type when the
# content item does not.
_BASE64_MAGIC = (
    ("iVBORw0KGgo", "image/png"),
    ("/9j/", "image/jpeg"),
    ("R0lGOD", "image/gif"),
    ("UklGR", "image/webp"),
    ("JVBERi0", "application/pdf"),
    ("SUQz", "audio/mpeg"),
    ("//u", "audio/mpeg"),
)

_AUDIO_MIME = {
    "mp3": "audio/mpeg",
    "wav": "audio/wav",
    "pcm16": "audio/pcm",
    "opus": "audio/opus",
    "ogg": "audio/ogg",
    "webm": "audio/webm",
    "aac": "audio/aac",
    "flac": "audio/flac",
    "g711_ulaw": "audio/basic",
}


@attrs.frozen(kw_only=True)
class MediaRef:
    """Where a media item's bytes are: a URL, or base64 data, and its MIME type."""

    url: str | None
    data: str | None
    mime_type: str

    @property
    def data_url(self) -> str:
        """A ``data:`` URL for base64 content, else the URL itself."""
        if self.url is not None:
            return self.url
        return f"data:{self.mime_type};base64,{self.data}"


def _default_mime(item: MediaItem) -> str:
    if isinstance(item, FileContent):
        return item.mime_type
    if isinstance(item, ImageContent):
        fmt = (item.format or "").lower()
        return f"image/{'jpeg' if fmt == 'jpg' else fmt}" if fmt else ""
    if isinstance(item, AudioContent):
        fmt = (item.format or "").lower()
        return _AUDIO_MIME.get(fmt, f"audio/{fmt}" if fmt else "")
    fmt = (item.format or "").lower()
    return f"video/{fmt}" if fmt else ""


def _media_of(item: MediaItem) -> str | MediaURL:
    if isinstance(item, ImageContent):
        return item.image
    if isinstance(item, AudioContent):
        return item.audio
    if isinstance(item, VideoContent):
        return item.video
    return item.file


def media_ref(item: MediaItem) -> MediaRef:
    """Resolve a media item to a URL or base64 data with a MIME type.

    A string is base64 per spec 8.4.1, except that ``data:`` URLs and
    ``http(s)://`` strings are recognised for what they are.
    """
    media = _media_of(item)
    mime = _default_mime(item)
    if isinstance(media, MediaURL):
        url = media.url
    elif media.startswith(("http://", "https://", "data:")):
        url = media
    else:
        data = "".join(media.split())
        if not mime:
            mime = next((m for p, m in _BASE64_MAGIC if data.startswith(p)), "")
        return MediaRef(url=None, data=data, mime_type=mime or "application/octet-stream")
    if url.startswith("data:"):
        header, _, data = url.partition(",")
        declared = header[5:].split(";")[0]
        return MediaRef(
            url=None, data=data, mime_type=declared or mime or "application/octet-stream"
        )
    if not mime:
        mime = mimetypes.guess_type(url.split("?")[0])[0] or ""
    return MediaRef(url=url, data=None, mime_type=mime or "application/octet-stream")


def decode_base64_text(data: str) -> str:
    """Decode base64 to UTF-8 text (for text documents), or raise ProviderError."""
    try:
        return base64.b64decode(data, validate=False).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise ProviderError(f"file content is not base64 UTF-8 text: {exc}") from exc


def unsupported(provider: str, what: str) -> ProviderError:
    """A non-retryable error for input the provider's API cannot take."""
    return ProviderError(f"{provider}: {what} is not supported by this API")


# --- Streaming helpers ----------------------------------------------------------


def finish_or_cut(provider: str, ended: bool, what: str) -> None:
    """Raise a retryable ProviderError when a stream ended before its end event."""
    if not ended:
        raise ProviderError(
            f"{provider}: stream ended before {what} (connection cut?)", retryable=True
        )


def json_arguments(value: Any) -> str:
    """Tool-call arguments as a JSON string (servers send a string or an object)."""
    if isinstance(value, str):
        return value or "{}"
    if value is None:
        return "{}"
    return orjson.dumps(value).decode()


def parse_json_object(text: str) -> dict[str, Any] | None:
    """``text`` parsed as a JSON object, or ``None`` if it is not one."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
