"""One QUIC connection driven on trio: aioquic's sans-IO ``QuicConnection`` and a UDP socket.

Theory of operation
-------------------
``QuicConnection`` does no I/O and reads no clock: datagrams go in with
``receive_datagram(data, addr, now)``, datagrams to send come out of
``datagrams_to_send(now)``, and ``get_timer()``/``handle_timer(now)`` drive
loss detection and the idle timeout. :class:`QuicDriver` runs one task per
connection that sleeps until :meth:`~QuicDriver.wake` is called (a datagram
was fed in, a stream has bytes queued) or the timer is due, then hands every
pending event to :meth:`~QuicDriver.handle` (the subclass: HTTP/3 server or
client) and sends what QUIC has ready. Time is trio's clock. The server's
connections share the listener's socket (``sendto`` their peer's address);
a client's has a connected socket of its own.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import trio
from aioquic.quic.connection import QuicConnection
from aioquic.quic.events import QuicEvent

__all__ = ["QuicDriver"]

log = logging.getLogger("uamp_trio.server")


class QuicDriver:
    """Runs ``quic`` on trio: timers, events, datagrams (see the module docstring).

    Args:
        quic: The connection.
        sock: The UDP socket its datagrams leave by (``sendto`` their address).
    """

    def __init__(self, quic: QuicConnection, sock: trio.socket.SocketType | None) -> None:
        self.quic = quic
        self.sock = sock
        self.closed = False
        self.nursery: trio.Nursery | None = None
        self._wake = trio.Event()
        self._sent = trio.Event()

    def wake(self) -> None:
        """Ask the connection task to handle what arrived and send what is queued."""
        self._wake.set()

    def receive(self, data: bytes, addr: Any) -> None:
        """Feed one datagram from ``addr``."""
        self.quic.receive_datagram(data, addr, now=trio.current_time())
        self.wake()

    async def transmit(self) -> None:
        """Send every datagram QUIC has ready."""
        if self.sock is None:
            return
        for data, addr in self.quic.datagrams_to_send(now=trio.current_time()):
            try:
                await self.sock.sendto(data, addr)
            except OSError as exc:  # the peer's address went away
                log.debug("QUIC send to %s failed: %s", addr, exc)
        self._sent.set()
        self._sent = trio.Event()

    def handle(self, event: QuicEvent) -> None:
        """One event of the connection (subclasses)."""

    def on_closed(self) -> None:
        """The connection task is ending (subclasses)."""

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Drive the connection until it is closed; :attr:`nursery` is open meanwhile."""
        try:
            async with trio.open_nursery() as nursery:
                self.nursery = nursery
                task_status.started()
                while not self.closed:
                    timer = self.quic.get_timer()
                    with trio.move_on_at(math.inf if timer is None else timer):
                        await self._wake.wait()
                    self._wake = trio.Event()
                    now = trio.current_time()
                    if timer is not None and now >= timer:
                        self.quic.handle_timer(now)
                    while (event := self.quic.next_event()) is not None:
                        self.handle(event)
                    await self.transmit()
                nursery.cancel_scope.cancel()
        finally:
            self.closed = True
            self._sent.set()
            self.on_closed()

    def _send_buffer_empty(self, stream_id: int) -> bool:
        # aioquic's QuicStream: its sender holds what is not sent yet.
        stream = self.quic._streams.get(stream_id)
        return stream is None or stream.sender.buffer_is_empty

    async def drained(self, stream_id: int) -> None:
        """Wait until QUIC has sent everything queued on ``stream_id``.

        Raises:
            trio.ClosedResourceError: The connection closed first.
        """
        while not self._send_buffer_empty(stream_id):
            if self.closed:
                raise trio.ClosedResourceError("the QUIC connection is closed")
            sent = self._sent
            self.wake()
            await sent.wait()
