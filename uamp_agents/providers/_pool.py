"""The model providers' connection pool: idle HTTP/1.1 connections per origin, newest first.

Theory of operation
-------------------
httpx hands every request to its transport's connection pool. httpcore's
pool, httpx's default, keeps one list of connections and one queue of
requests, and each time it admits a request and each time a response is
closed it walks the whole list: is this connection closed, expired (for an
idle one that is a ``poll`` of its socket), idle -- and for every idle one
it counts the idle ones again. A server with 16 model calls in flight pays
about 500 of those method calls and 30 ``poll`` syscalls per model call, which
was half of what one pooled httpx call cost it (``bench/peers.py``).

:class:`LeanPool` does what a model provider needs at a cost that does not
grow with the number of connections: a stack of idle connections per origin.
A request takes the connection used last (the likeliest to be alive), checks
that one only (``has_expired``: its keep-alive time ran out, or its socket is
readable while idle, i.e. the server closed it) and opens a new connection
when none is left. Connections in flight are not limited (as before:
``max_connections=None``). When a response is closed its connection goes
back on top of the stack if it is idle again; one that is not (closed by
either side, a body left unread) or that would make the stack deeper than
``max_idle`` is closed.

A request also leaves in one ``send``: httpcore writes an HTTP/1.1 request's
head and its body separately, and on loopback each ``send`` costs the sender
the receiver's side of TCP too (a tenth of a plain agent request's CPU went
to those two sends). The pool's connections write through
:class:`_CorkedStream`, which holds what is written until the connection
next reads (httpcore always reads the response after sending the request)
or more than :data:`CORK_LIMIT` bytes are waiting.

:class:`LeanTransport` is httpx's own transport with this pool in place of
httpcore's: httpx still builds requests, maps httpcore's exceptions to its
own and wraps the response stream, and httpcore's connection still speaks
HTTP/1.1 (h11) and TLS. Only the choice of connection is made here. The
swap sets the transport's ``_pool`` attribute, which httpx has kept under
that name since 0.18; ``tests/agents/providers/test_pool.py`` fails if it
stops being used.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Iterable
from typing import Any

import httpcore
import httpx
import trio

__all__ = ["CORK_LIMIT", "DEFAULT_MAX_IDLE", "KEEPALIVE_EXPIRY", "LeanPool", "LeanTransport"]

#: Idle connections kept per origin.
DEFAULT_MAX_IDLE = 64

#: Seconds an idle connection is kept (httpx's default).
KEEPALIVE_EXPIRY = 5.0

#: Bytes a connection holds back before sending anyway.
CORK_LIMIT = 64 * 1024

_Key = tuple[bytes, bytes, int]


def _key(origin: httpcore.Origin) -> _Key:
    return (origin.scheme, origin.host, origin.port)


class _CorkedStream(httpcore.AsyncNetworkStream):
    """A network stream whose writes wait for its next read (see the module docstring)."""

    def __init__(self, stream: httpcore.AsyncNetworkStream) -> None:
        self._stream = stream
        self._held: list[bytes] = []
        self._size = 0

    async def _flush(self, timeout: float | None) -> None:
        if self._held:
            data = self._held[0] if len(self._held) == 1 else b"".join(self._held)
            self._held.clear()
            self._size = 0
            await self._stream.write(data, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if buffer:
            self._held.append(buffer)
            self._size += len(buffer)
            if self._size > CORK_LIMIT:
                await self._flush(timeout)

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        await self._flush(timeout)
        return await self._stream.read(max_bytes, timeout)

    async def aclose(self) -> None:
        self._held.clear()
        await self._stream.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        await self._flush(timeout)
        return _CorkedStream(await self._stream.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _CorkedBackend(httpcore.AsyncNetworkBackend):
    """Trio connections that write through :class:`_CorkedStream`."""

    def __init__(self) -> None:
        self._backend = httpcore.TrioBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        stream = await self._backend.connect_tcp(
            host, port, timeout=timeout, local_address=local_address, socket_options=socket_options
        )
        return _CorkedStream(stream)

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.AsyncNetworkStream:
        stream = await self._backend.connect_unix_socket(
            path, timeout=timeout, socket_options=socket_options
        )
        return _CorkedStream(stream)

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


class _Released:
    """A response body that hands its connection back to the pool when closed."""

    def __init__(
        self, stream: Any, connection: httpcore.AsyncHTTPConnection, key: _Key, pool: LeanPool
    ) -> None:
        self._stream = stream
        self._connection = connection
        self._key = key
        self._pool = pool

    def __aiter__(self) -> AsyncIterator[bytes]:
        iterator: AsyncIterator[bytes] = self._stream.__aiter__()
        return iterator

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()
        finally:
            await self._pool.release(self._connection, self._key)


class LeanPool:
    """Idle connections per origin, newest first; see the module docstring.

    Args:
        ssl_context: TLS settings for ``https`` origins.
        max_idle: Idle connections kept per origin.
        keepalive_expiry: Seconds an idle connection is kept.
    """

    def __init__(
        self,
        ssl_context: ssl.SSLContext,
        *,
        max_idle: int = DEFAULT_MAX_IDLE,
        keepalive_expiry: float = KEEPALIVE_EXPIRY,
    ) -> None:
        self._ssl_context = ssl_context
        self._max_idle = max_idle
        self._keepalive_expiry = keepalive_expiry
        self._idle: dict[_Key, list[httpcore.AsyncHTTPConnection]] = {}
        self._closed = False
        self._backend = _CorkedBackend()

    def idle_count(self) -> int:
        """How many idle connections the pool holds."""
        return sum(len(stack) for stack in self._idle.values())

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        """Send ``request`` on an idle connection to its origin, or on a new one."""
        origin = request.url.origin
        key = _key(origin)
        stack = self._idle.get(key)
        while True:
            connection = None
            while stack:
                candidate = stack.pop()
                if candidate.is_idle() and not candidate.has_expired():
                    connection = candidate
                    break
                await candidate.aclose()
            if connection is None:
                connection = httpcore.AsyncHTTPConnection(
                    origin=origin,
                    ssl_context=self._ssl_context,
                    keepalive_expiry=self._keepalive_expiry,
                    network_backend=self._backend,
                )
            try:
                response = await connection.handle_async_request(request)
            except httpcore.ConnectionNotAvailable:
                continue  # it went away between the check and the send: take another
            except BaseException:
                with trio.CancelScope(shield=True):
                    await connection.aclose()
                raise
            return httpcore.Response(
                status=response.status,
                headers=response.headers,
                content=_Released(response.stream, connection, key, self),
                extensions=response.extensions,
            )

    async def release(self, connection: httpcore.AsyncHTTPConnection, key: _Key) -> None:
        """Take ``connection`` (to origin ``key``) back once its response is closed, or close it."""
        if connection.is_idle() and not self._closed:
            stack = self._idle.setdefault(key, [])
            if len(stack) < self._max_idle:
                stack.append(connection)
                return
        await connection.aclose()

    async def aclose(self) -> None:
        """Close every idle connection; later releases close theirs."""
        self._closed = True
        stacks, self._idle = self._idle, {}
        for stack in stacks.values():
            for connection in stack:
                await connection.aclose()

    async def __aenter__(self) -> LeanPool:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class LeanTransport(httpx.AsyncHTTPTransport):
    """httpx's HTTP/1.1 transport on a :class:`LeanPool`.

    Args:
        ssl_context: TLS settings for ``https`` origins.
        max_idle: Idle connections kept per origin.
    """

    def __init__(self, ssl_context: ssl.SSLContext, *, max_idle: int = DEFAULT_MAX_IDLE) -> None:
        super().__init__(verify=ssl_context)
        self.pool = LeanPool(ssl_context, max_idle=max_idle)
        self._pool = self.pool  # type: ignore[assignment]
