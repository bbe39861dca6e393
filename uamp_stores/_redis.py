"""The Redis client every Redis store opens, and its calls: bounded, named without secrets."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

from .health import PROBE_TIMEOUT, STORE_TIMEOUT, call_store

T = TypeVar("T")

#: Seconds redis-py waits for a connection, and for a reply (the longest
#: blocking read, an ``ask``'s ``BLPOP``, waits 10 s).
CONNECT_TIMEOUT = 2.0
SOCKET_TIMEOUT = 30.0


def open_redis(url: str) -> Any:
    """A synchronous redis-py client for ``url`` (typed loosely: its stubs union every reply)."""
    import redis  # the optional dependency (extra "redis")

    return redis.Redis.from_url(
        url, socket_timeout=SOCKET_TIMEOUT, socket_connect_timeout=CONNECT_TIMEOUT
    )


def redis_where(url: str) -> str:
    """``Redis at HOST:PORT/DB`` for logs and errors: no user name, no password."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return f"Redis at {parts.path}"
    host = parts.hostname or "localhost"
    return f"Redis at {host}:{parts.port or 6379}{parts.path or '/0'}"


class RedisCalls:
    """Mixin of a Redis store: :meth:`_call` runs one bounded call (``url`` set by the store)."""

    url: str
    _redis: Any

    async def probe(self) -> None:
        """Ping Redis (readiness): :class:`~.health.StoreUnavailable` past :data:`PROBE_TIMEOUT`."""
        await self._call(self._redis.ping, timeout=PROBE_TIMEOUT)

    async def _call(self, fn: Callable[..., T], *args: Any, timeout: float = STORE_TIMEOUT) -> T:
        """``fn(*args)`` in a worker thread; :class:`~.health.StoreUnavailable` past ``timeout``."""
        return await call_store(fn, *args, where=redis_where(self.url), timeout=timeout)
