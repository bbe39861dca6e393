"""A pool of lean HTTP/1.1 connections: idle ones per origin, newest first.

The model providers share one per trio run; ``uamp bench`` opens one per run.

Theory of operation
-------------------
A server with many agent turns in flight makes many model calls at once to
one or a few origins. :class:`LeanPool` keeps a stack of idle
:class:`~uamp_agents.http1_client.Connection` objects per origin, at a
cost that does not grow with their number (httpcore's pool walked its whole
list of connections, polling each idle socket, each time it admitted a
request or closed a response). A request takes the connection used last
(the likeliest to be alive) and checks that one only: its keep-alive time
has not run out and its socket has nothing to read (a readable idle socket
means the server closed it). It opens a new connection when none is left.
Connections in flight are not limited.

When a response is closed its connection goes back on top of the stack if
the whole body was read and neither side closes it; otherwise (a body left
unread, ``Connection: close``, a response h11 read) it is closed, as is one
that would make the stack deeper than ``max_idle``. A failed or cancelled
request closes its connection.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator

import httpx
import trio

from .http1_client import Connection, Response, Target

__all__ = ["DEFAULT_MAX_IDLE", "KEEPALIVE_EXPIRY", "LeanPool", "PooledResponse"]

#: Idle connections kept per origin.
DEFAULT_MAX_IDLE = 64

#: Seconds an idle connection is kept (httpx's default).
KEEPALIVE_EXPIRY = 5.0


class PooledResponse:
    """A response whose connection goes back to its pool when it is closed.

    ``status_code``, ``headers``, :meth:`aread`, :meth:`aiter_bytes` and
    :meth:`aclose` as on an ``httpx.Response``.
    """

    def __init__(self, response: Response, pool: LeanPool) -> None:
        self._response = response
        self._pool = pool
        self._open = True
        self.status_code = response.status_code
        self.headers: httpx.Headers | dict[str, str] = response.headers

    async def aread(self) -> bytes:
        """The whole body."""
        return await self._response.aread()

    def aiter_bytes(self) -> AsyncIterator[bytes]:
        """The body as it arrives."""
        return self._response.aiter_bytes()

    async def aclose(self) -> None:
        """Hand the connection back, or close it (see the module docstring)."""
        if self._open:
            self._open = False
            await self._pool.release(self._response)


class _Body(httpx.AsyncByteStream):
    """A pooled response's body as httpx reads it (to decode a ``Content-Encoding``)."""

    def __init__(self, response: PooledResponse) -> None:
        self._response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for part in self._response.aiter_bytes():
            yield part

    async def aclose(self) -> None:
        await self._response.aclose()


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
        self._idle: dict[tuple[bool, str, int], list[Connection]] = {}
        self._closed = False

    def idle_count(self) -> int:
        """How many idle connections the pool holds."""
        return sum(len(stack) for stack in self._idle.values())

    async def send(
        self, target: Target, body: bytes, timeout: float
    ) -> PooledResponse | httpx.Response:
        """POST ``body`` to ``target`` on an idle connection to its origin, or on a new one.

        The response's body is still to be read; the caller closes it. A
        body with a ``Content-Encoding`` comes as an ``httpx.Response``,
        which decodes it.
        """
        connection = await self._take(target, timeout)
        try:
            response = await connection.request(target, body, timeout)
        except BaseException:
            await connection.aclose()
            raise
        pooled = PooledResponse(response, self)
        if "content-encoding" not in response.headers:
            return pooled
        return httpx.Response(
            response.status_code, headers=response.raw_headers, stream=_Body(pooled)
        )

    async def _take(self, target: Target, timeout: float) -> Connection:
        stack = self._idle.get(target.key)
        if stack:
            expired = trio.current_time() - self._keepalive_expiry
            while stack:
                connection = stack.pop()
                if connection.idle_since > expired and not connection.stale():
                    return connection
                await connection.aclose()
        return await Connection.open(target, timeout, self._ssl_context)

    async def release(self, response: Response) -> None:
        """Take a closed response's connection back, or close it."""
        connection = response.connection
        if response.reusable and not self._closed:
            stack = self._idle.setdefault(connection.key, [])
            if len(stack) < self._max_idle:
                connection.idle_since = trio.current_time()
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
