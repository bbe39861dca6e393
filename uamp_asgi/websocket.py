"""An accepted-on-demand ASGI WebSocket: text and bytes messages in and out."""

from __future__ import annotations

from typing import TYPE_CHECKING

from uamp_proto.principal import Principal

if TYPE_CHECKING:
    from .http import Receive, Scope, Send

__all__ = ["Closed", "WebSocket"]


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
    ) -> None:
        self.scope = scope
        self._receive = receive
        self._send = send
        self.path_params = path_params
        self.principal = principal
        self.headers = headers
        self.max_message_size = max_message_size
        self.closed = False

    async def accept(self, subprotocol: str | None = None) -> None:
        """Complete the handshake."""
        message: dict[str, object] = {"type": "websocket.accept"}
        if subprotocol is not None:
            message["subprotocol"] = subprotocol
        await self._send(message)

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
            raise Closed
        key = "text" if isinstance(data, str) else "bytes"
        await self._send({"type": "websocket.send", key: data})

    async def close(self, code: int = 1000) -> None:
        """Close the connection (a no-op when it is closed)."""
        if not self.closed:
            self.closed = True
            await self._send({"type": "websocket.close", "code": code})
