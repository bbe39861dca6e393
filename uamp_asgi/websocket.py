"""An accepted-on-demand ASGI WebSocket: text and bytes messages in and out.

A peer that leaves its messages unread is dropped, as ``uamp serve`` drops it
(``SessionLimits.send_timeout``): an ASGI server with write flow control
(uvicorn's three WebSocket implementations) makes ``send`` wait while the
socket's buffer is full, so a peer that never reads would hold the sending
task -- and with it the connection, its sessions and a running response --
for good. :meth:`WebSocket.watch` runs beside the route's handler and, once a
send has waited ``send_timeout`` seconds, cancels the handler (every task of
it: the reader, running responses) and logs one line; the ASGI server then
closes the connection. Sends only note when they began, so a send that does
not wait costs no timer.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from typing import TYPE_CHECKING

import anyio

from uamp_proto.principal import Principal

if TYPE_CHECKING:
    from .http import Receive, Scope, Send

__all__ = ["Closed", "WebSocket"]

log = logging.getLogger("uamp_asgi.websocket")


class Closed(Exception):
    """The WebSocket is closed (by the peer or by us)."""


def _over(data: str | bytes, most: int) -> bool:
    """Whether ``data`` is over ``most`` bytes (a text's UTF-8 counted only when it may be)."""
    if isinstance(data, bytes):
        return len(data) > most
    return len(data) * 4 > most and len(data.encode("utf-8", "surrogatepass")) > most


class WebSocket:
    """One WebSocket connection of a route (see :mod:`uamp_asgi.app`)."""

    def __init__(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        path_params: dict[str, str],
        principal: Principal,
        headers: dict[str, str],
        max_message_size: int | None = None,
        send_timeout: float = math.inf,
    ) -> None:
        self.scope = scope
        self._receive = receive
        self._send = send
        self.path_params = path_params
        self.principal = principal
        self.headers = headers
        self.max_message_size = max_message_size
        #: Longest a send may wait for a peer that does not read (see :meth:`watch`).
        self.send_timeout = send_timeout
        self.closed = False
        #: Whether the peer was dropped for not reading.
        self.dropped = False
        #: Sends waiting now, and when the oldest of them began (``time.monotonic``).
        self._sending = 0
        self._since = 0.0

    async def accept(self, subprotocol: str | None = None) -> None:
        """Complete the handshake."""
        message: dict[str, object] = {"type": "websocket.accept"}
        if subprotocol is not None:
            message["subprotocol"] = subprotocol
        await self._out(message)

    async def receive(self) -> str | bytes:
        """The next message.

        Raises:
            Closed: The peer closed the connection, or sent a message over
                :attr:`max_message_size` (closed with 1009).
        """
        while True:
            message = await self._receive()
            kind = message["type"]
            if kind == "websocket.disconnect":
                self.closed = True
                raise Closed
            if kind == "websocket.receive":
                text = message.get("text")
                data = str(text) if text is not None else bytes(message.get("bytes") or b"")
                if self.max_message_size is not None and _over(data, self.max_message_size):
                    await self.close(1009)
                    raise Closed
                return data

    async def send(self, data: str | bytes) -> None:
        """Send one message (text for ``str``)."""
        if self.closed:
            await anyio.lowlevel.checkpoint()  # a sender in a loop still yields
            raise Closed
        message = {"type": "websocket.send", "text" if isinstance(data, str) else "bytes": data}
        # What _out does, inline: the hot path of every delta (a coroutine less).
        if not self._sending:
            self._since = time.monotonic()
        self._sending += 1
        try:
            await self._send(message)
        except OSError:
            self.closed = True
            raise Closed from None
        finally:
            self._sending -= 1
            if self._sending:
                self._since = time.monotonic()

    async def close(self, code: int = 1000) -> None:
        """Close the connection (a no-op when it is closed)."""
        if not self.closed:
            self.closed = True
            with contextlib.suppress(Closed):  # the peer went first
                await self._out({"type": "websocket.close", "code": code})

    async def _out(self, message: dict[str, object]) -> None:
        """Hand ``message`` to the server, noting how long it waits (:meth:`watch`)."""
        if not self._sending:
            self._since = time.monotonic()
        self._sending += 1
        try:
            await self._send(message)
        except OSError:  # the server's word for a peer that went away (uvicorn's)
            self.closed = True
            raise Closed from None
        finally:
            self._sending -= 1
            if self._sending:  # another send still waits: from now at most
                self._since = time.monotonic()

    async def watch(self, handler: anyio.CancelScope) -> None:
        """Cancel ``handler`` (the route's) once a send has waited ``send_timeout`` seconds.

        Runs beside the handler until it ends; the handler's tasks (reader,
        responses) are cancelled, and the ASGI server closes the connection
        when the handler returns. No close frame is sent: the peer reads
        none, and the server would only queue it behind what it left unread.
        """
        timeout = self.send_timeout
        while True:
            wait = timeout
            if self._sending:
                wait = self._since + timeout - time.monotonic()
                if wait <= 0:
                    break
            await anyio.sleep(wait)
        self.closed = self.dropped = True
        log.info(
            "WebSocket peer at %s not reading for %gs; dropping it",
            self.scope.get("path", "?"),
            timeout,
        )
        handler.cancel()
