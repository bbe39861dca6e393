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
* :class:`HTTPProvider` -- the provider classes' common part: retried JSON
  calls, and :meth:`HTTPProvider.read_stream`, which feeds one streamed
  call's events to a vendor's :class:`StreamReader` and checks that the
  stream reached its end.

What the vendor translations share besides HTTP (messages, media, finish
reasons ...) is in :mod:`._wire`.
"""

from __future__ import annotations

import email.utils
import math
import random
import ssl
import time
import urllib.request
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from contextlib import aclosing
from typing import Any, ClassVar, Protocol, TypedDict, TypeVar, Unpack

import attrs
import httpx
import orjson
import trio

from uamp_proto.events import Event, UsageDelta
from uamp_proto.sse import SSEError, SSEEvent, SSEParser
from uamp_proto.types import UsageStats

from ..http1_client import Target
from ..http1_pool import LeanPool, PooledResponse
from .base import ModelResponse, NamedProvider, ProviderError, ProviderEvent

__all__ = [
    "DEFAULT_TIMEOUT",
    "MAX_SSE_EVENT",
    "RETRYABLE_STATUSES",
    "HTTPClient",
    "HTTPOptions",
    "HTTPProvider",
    "RetryPolicy",
    "StreamReader",
    "connect",
    "error_from_response",
    "finish_or_cut",
    "iter_sse",
    "load_json",
    "parse_retry_after",
    "retrying",
    "retrying_stream",
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


class _RunPool:
    """The current trio run's model connections: a :class:`LeanPool`.

    Requests go straight to the pool's HTTP/1.1 connections
    (:mod:`uamp_agents.http1_client`), without httpx's client, request and response layers.
    With a proxy configured in the environment (``HTTP_PROXY`` ...) they go
    through an ``httpx.AsyncClient`` on its own pool instead, which routes
    them to the proxy as httpx does.
    """

    def __init__(self) -> None:
        self.pool = LeanPool(_ssl_context())
        self.client: httpx.AsyncClient | None = None
        if urllib.request.getproxies():
            self.client = httpx.AsyncClient(
                verify=_ssl_context(), limits=httpx.Limits(max_connections=None)
            )

    async def aclose(self) -> None:
        """Close the connections."""
        if self.client is not None:
            await self.client.aclose()
        await self.pool.aclose()


#: The connection pool of the current trio run, shared by every provider
#: without a client of its own: see :func:`_run_pool`.
_RUN_POOL: trio.lowlevel.RunVar[_RunPool] = trio.lowlevel.RunVar("uamp_http_pool")


def _run_pool() -> _RunPool:
    """The current trio run's shared connections, opened on first use.

    An httpx pool belongs to one event loop run while a provider object may
    outlive it (or serve several), so the pool is kept per run, not per
    provider: every model call of a server reuses its keep-alive connections
    instead of opening a client and a TCP connection per call (about a
    millisecond of CPU each, more than the rest of a short agent turn). A
    system task closes them when the run ends.
    """
    try:
        return _RUN_POOL.get()
    except LookupError:
        pass
    pool = _RunPool()
    _RUN_POOL.set(pool)

    async def close_at_exit() -> None:
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await pool.aclose()

    trio.lowlevel.spawn_system_task(close_at_exit, name="uamp_agents.http_pool")
    return pool


class HTTPClient:
    """POSTs JSON to one provider and maps every failure to ProviderError.

    Without ``client`` the calls share the trio run's pool
    (:func:`_run_pool`); pass a client of your own to use that instead
    (its headers, auth and event hooks apply).
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
        # What every request repeats is made once: the parsed headers and
        # URLs, the heads of the pool's requests, the timeouts as httpx
        # passes them to its transport.
        self._json_headers = httpx.Headers(self.headers)
        self._sse_headers = httpx.Headers({**self.headers, "accept": "text/event-stream"})
        self._timeout_s = timeout
        self._extensions = {"timeout": self.timeout.as_dict()}
        self._urls: dict[str, httpx.URL] = {}
        self._targets: dict[tuple[str, bool], Target] = {}

    def _url(self, path: str) -> httpx.URL:
        url = self._urls.get(path)
        if url is None:
            if len(self._urls) >= _MAX_URLS:
                self._urls.clear()
            url = self._urls[path] = httpx.URL(f"{self.base_url}/{path.lstrip('/')}")
        return url

    def _target(self, path: str, sse: bool) -> Target:
        target = self._targets.get((path, sse))
        if target is None:
            if len(self._targets) >= _MAX_URLS:
                self._targets.clear()
            headers = dict(self._sse_headers if sse else self._json_headers)
            target = self._targets[path, sse] = Target(self._url(path), headers)
        return target

    async def _open(self, path: str, body: Mapping[str, Any], sse: bool) -> _Response:
        """POST ``body``; the response with its body still to read (the caller closes it)."""
        content = orjson.dumps(body)
        headers = self._sse_headers if sse else self._json_headers
        if self._client is not None:
            request = self._client.build_request(
                "POST", self._url(path), content=content, headers=headers, timeout=self.timeout
            )
            return await self._client.send(request, stream=True)
        pool = _run_pool()
        if pool.client is not None:
            request = httpx.Request(
                "POST",
                self._url(path),
                headers=headers,
                content=content,
                extensions=self._extensions,
            )
            return await pool.client.send(request, stream=True)
        return await pool.pool.send(self._target(path, sse), content, self._timeout_s)

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
        try:
            response = await self._open(path, body, sse=False)
            try:
                raw = await response.aread()
            finally:
                await response.aclose()
        except httpx.HTTPError as exc:
            raise self._transport_error(exc) from exc
        if response.status_code >= 400:
            raise error_from_response(self.provider, response.status_code, response.headers, raw)
        return load_json(self.provider, raw, status=response.status_code)

    async def post_sse(self, path: str, body: Mapping[str, Any]) -> AsyncGenerator[SSEEvent, None]:
        """POST ``body`` and yield the server-sent events of the response.

        Raises:
            ProviderError: On transport failure, timeout (of any single read)
                or an HTTP error status.
        """
        try:
            response = await self._open(path, body, sse=True)
            try:
                if response.status_code >= 400:
                    raw = await response.aread()
                    raise error_from_response(
                        self.provider, response.status_code, response.headers, raw
                    )
                async for event in iter_sse(response.aiter_bytes()):
                    yield event
            finally:
                await response.aclose()
        except httpx.HTTPError as exc:
            raise self._transport_error(exc) from exc


#: Request URLs remembered per client (a provider calls a handful of paths).
_MAX_URLS = 64

#: A response as the HTTP client reads it: the pool's, or httpx's.
_Response = PooledResponse | httpx.Response


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
        http_client: An ``httpx.AsyncClient`` of your own for the calls
            (its headers, auth, proxies and event hooks apply); by default
            the calls of a trio run share one pool of connections.
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


class StreamReader(Protocol):
    """What :meth:`HTTPProvider.read_stream` needs of a vendor's stream state."""

    #: What ends a whole stream (named in the error when it is cut).
    ending: ClassVar[str]
    #: The usage reported so far (the total once the stream has ended).
    usage: UsageStats | None

    @property
    def ended(self) -> bool:
        """Whether the stream's end has been seen."""
        ...

    def feed_sse(self, data: str) -> list[Event]:
        """Absorb one server-sent event's data; return the UAMP events it carries."""
        ...

    def result(self) -> ModelResponse:
        """The assembled ModelResponse."""
        ...


class HTTPProvider(NamedProvider):
    """What the HTTP providers share: the model, the client, retries, parameters.

    A subclass names itself in :attr:`provider_name` (``"openai"``,
    ``"anthropic"``, ``"google"``), builds request bodies and parses
    responses; :meth:`call_json` and :meth:`stream_events` do the retried
    HTTP calls, :meth:`read_stream` reads one streamed call.

    ``thinking`` is the provider's default thinking configuration in the
    vendor's own shape (``None``: the vendor's default).
    """

    def __init__(
        self,
        *,
        model: str,
        http: HTTPClient,
        policy: RetryPolicy,
        params: dict[str, Any],
        thinking: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(model)
        self._http = http
        self._policy = policy
        self._params = params
        self._thinking = thinking

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

    async def read_stream(
        self, path: str, body: Mapping[str, Any], reader: StreamReader
    ) -> AsyncIterator[ProviderEvent]:
        """One streamed call: ``reader``'s events, its usage, then its ModelResponse.

        The body is read to its end even when ``reader`` ignores what follows
        the end marker, so the connection goes back to the pool.

        Raises:
            ProviderError: Retryable, when the stream stopped before
                ``reader`` saw its end (a cut connection).
        """
        async with aclosing(self._http.post_sse(path, body)) as events:
            async for sse in events:
                for event in reader.feed_sse(sse.data):
                    yield event
        finish_or_cut(self.provider_name, reader.ended, reader.ending)
        if reader.usage is not None:
            yield UsageDelta(delta=reader.usage)
        yield reader.result()


# --- Streaming ---------------------------------------------------------------


def finish_or_cut(provider: str, ended: bool, what: str) -> None:
    """Raise a retryable ProviderError when a stream ended before its end event."""
    if not ended:
        raise ProviderError(
            f"{provider}: stream ended before {what} (connection cut?)", retryable=True
        )
