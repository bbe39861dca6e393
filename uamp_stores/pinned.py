"""One webhook POST, connected to the address that was checked (A2A push, DNS rebinding).

Theory of operation
-------------------
A push target is a name a client chose. Checking what the name resolves to
and then letting an HTTP client resolve it again leaves a gap: a resolver
the client controls may answer a public address for the check and a private
one for the connection (DNS rebinding). So the name is resolved once
(:data:`Resolve`), every address it resolves to must be allowed, and the
connection goes to the first of them: :func:`post_pinned` gives httpcore's
connection pool a network backend that dials that address whatever name it
is asked for. Everything else still uses the name -- the ``Host`` header,
the TLS server name (SNI) and the certificate check -- so a pinned request
is, to the receiver, the request it expects.

Redirects: a ``307`` or ``308`` (which keep the method and the body) is
followed, at most :data:`MAX_REDIRECTS` times, each new target resolved,
checked and pinned the same way; credentials (``Authorization``, the
notification token) go only to the origin they were configured for. Any
other status, ``301``/``302``/``303`` included (a POST turned GET is no
delivery), is the answer. Response bodies are never read.

The request goes straight to the target: no proxy from the environment.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urljoin, urlsplit

import anyio
import attrs

from uamp_proto.errors import UampError

if TYPE_CHECKING:
    import httpcore

__all__ = ["MAX_REDIRECTS", "Refused", "Resolve", "WebhookAnswer", "post_checked", "resolve"]

#: Redirects (307/308) followed per delivery.
MAX_REDIRECTS: Final = 3

#: Headers that go only to the origin of the configured URL.
_CREDENTIALS: Final = frozenset({"authorization", "x-a2a-notification-token"})

#: Every address ``host`` resolves to, for ``port`` (TCP), in the resolver's order.
Resolve = Callable[[str, int], Awaitable[list[str]]]


async def resolve(host: str, port: int) -> list[str]:
    """:data:`Resolve` by anyio's ``getaddrinfo`` (under Trio, Trio's: its custom resolver,
    when one is set)."""
    infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class Refused(UampError):
    """The target (or a redirect's) is not an address this server delivers to."""


@attrs.frozen
class WebhookAnswer:
    """What the last receiver answered: its status, and the URL that answered."""

    status: int
    url: str


def _origin(url: str) -> tuple[str, str, int]:
    parts = urlsplit(url)
    return (parts.scheme, parts.hostname or "", parts.port or _default_port(parts.scheme))


def _default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80


async def post_checked(
    url: str,
    body: bytes,
    headers: Iterable[tuple[str, str]],
    *,
    allowed: Callable[[str], bool],
    resolver: Resolve = resolve,
    timeout: float,
    ssl_context: ssl.SSLContext | None = None,
) -> WebhookAnswer:
    """POST ``body`` to ``url``, connecting only to addresses ``allowed`` admits.

    Raises:
        Refused: ``url`` (or a redirect) names a host that does not resolve, or
            resolves to an address ``allowed`` refuses; nothing was sent there.
        OSError, TimeoutError, httpcore.NetworkError, httpcore.TimeoutException:
            The connection failed (worth retrying).
    """
    first = _origin(url)
    sent = list(headers)
    for _ in range(MAX_REDIRECTS + 1):
        scheme, host, port = _origin(url)
        if scheme not in ("http", "https") or not host:
            raise Refused(f"{url!r} is not an http(s) URL")
        try:
            addresses = await resolver(host, port)
        except OSError as exc:
            raise Refused(f"{host} does not resolve ({exc.strerror or exc})") from None
        if not addresses or not all(allowed(a) for a in addresses):
            raise Refused(f"{host} is not a public address")
        if (scheme, host, port) != first:
            sent = [(k, v) for k, v in sent if k.lower() not in _CREDENTIALS]
        status, location = await _post_pinned(url, addresses[0], body, sent, timeout, ssl_context)
        if status not in (307, 308) or not location:
            return WebhookAnswer(status, url)
        url = urljoin(url, location)
    return WebhookAnswer(status, url)


async def _post_pinned(
    url: str,
    address: str,
    body: bytes,
    headers: list[tuple[str, str]],
    timeout: float,
    ssl_context: ssl.SSLContext | None,
) -> tuple[int, str | None]:
    """One POST to ``url`` over a connection to ``address``: its status and ``Location``."""
    import httpcore  # here: a server that never pushes does not pay for its import

    limits = {"connect": timeout, "read": timeout, "write": timeout, "pool": timeout}
    pool = httpcore.AsyncConnectionPool(
        ssl_context=ssl_context, network_backend=_pinned_backend(address), retries=0
    )
    async with pool:
        with anyio.fail_after(timeout):
            async with pool.stream(
                "POST", url, headers=headers, content=body, extensions={"timeout": limits}
            ) as response:
                location = None
                for name, value in response.headers:
                    if name.lower() == b"location":
                        location = value.decode("latin-1")
                return response.status, location


def _pinned_backend(address: str) -> httpcore.AsyncNetworkBackend:
    """A network backend that connects to ``address`` whatever host it is asked for."""
    import httpcore

    class Pinned(httpcore.AsyncNetworkBackend):
        def __init__(self) -> None:
            self._inner = httpcore.AnyIOBackend()

        async def connect_tcp(
            self,
            host: str,
            port: int,
            timeout: float | None = None,
            local_address: str | None = None,
            socket_options: Iterable[Any] | None = None,
        ) -> httpcore.AsyncNetworkStream:
            return await self._inner.connect_tcp(
                address, port, timeout, local_address, socket_options
            )

        async def connect_unix_socket(
            self, path: str, timeout: float | None = None, socket_options: Any = None
        ) -> httpcore.AsyncNetworkStream:
            raise httpcore.ConnectError("a webhook is never a Unix socket")

        async def sleep(self, seconds: float) -> None:
            await anyio.sleep(seconds)

    return Pinned()
