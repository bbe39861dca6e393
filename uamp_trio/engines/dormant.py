"""Connections that have sent nothing yet, watched together by one task.

Theory of operation
-------------------
Most connections bring their request as they open: the accept loop finds it
already waiting (:func:`~uamp_trio.engines.streams.received`) and starts the
connection's task with it. A connection that has sent nothing yet would
otherwise get a task of its own, waiting for its first bytes. A flood of idle
connections is then thousands of waiting tasks, and when the flood hangs up,
thousands of tasks wake in one scheduler round -- each a wake-up, a read of
the end, a cancel scope and a task's exit -- while a health check waits
behind all of them.

Here such a connection is a member of a private epoll set instead, whose own
descriptor trio watches (it is readable while any member is). Each wake-up
of the one watching task takes at most :data:`BATCH` ready members: one that
sent bytes leaves the set and gets its task, with those bytes; one that hung
up or failed is closed right here (a read and a close, no task). Then the
watcher waits for trio's next round, so a flood's hang-ups are handled a
batch per round with every other task's turn between them.

The server's idle sweeper and a graceful shutdown close a waiting connection
through its tracker's ``idle_scope``, which for a member is a handle whose
``cancel()`` closes it.

epoll is Linux's: elsewhere :func:`available` is false and every connection
gets its task at once.
"""

from __future__ import annotations

import os
import select
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

import trio

from .streams import READ_SIZE

if TYPE_CHECKING:
    from .server import ConnectionTracker

__all__ = ["BATCH", "DormantConnections", "available"]

#: Most members handled per wake-up of the watcher.
BATCH: Final = 128


def available() -> bool:
    """Whether this platform has epoll (the watcher's set)."""
    return hasattr(select, "epoll")


class _Member:
    """A waiting connection's ``idle_scope``: cancelling it closes the connection."""

    __slots__ = ("fd", "owner")

    def __init__(self, owner: DormantConnections, fd: int) -> None:
        self.owner = owner
        self.fd = fd

    def cancel(self) -> None:
        self.owner.close(self.fd)


class DormantConnections:
    """Plain TCP connections waiting for their first bytes, and the task that watches them.

    Args:
        wake: Called with a member's stream, tracker and first bytes when
            they come (it starts the connection's task).
        forget: Called with a member's tracker when it is closed here.
    """

    def __init__(
        self,
        wake: Callable[[trio.SocketStream, ConnectionTracker, bytes], None],
        forget: Callable[[ConnectionTracker], None],
    ) -> None:
        self._set = select.epoll()
        self._members: dict[int, tuple[trio.SocketStream, ConnectionTracker]] = {}
        self._wake = wake
        self._forget = forget

    def __len__(self) -> int:
        return len(self._members)

    def add(self, stream: trio.SocketStream, tracker: ConnectionTracker) -> None:
        """Watch ``stream`` until it sends, hangs up, idles out or the server stops."""
        fd = stream.socket.fileno()
        self._set.register(fd, select.EPOLLIN)
        self._members[fd] = (stream, tracker)
        tracker.idle_since = trio.current_time()
        tracker.idle_scope = _Member(self, fd)

    def close(self, fd: int) -> None:
        """Close the member on ``fd`` (gone already: nothing)."""
        member = self._members.pop(fd, None)
        if member is None:
            return
        stream, tracker = member
        self._set.unregister(fd)
        # trio never waited on it: no need to tell its I/O manager
        # (notify_closing), which would look for a registration.
        os.close(stream.socket.detach())
        self._forget(tracker)

    async def watch(self) -> None:
        """Hand members that send to their tasks and close those that hang up, until cancelled."""
        members = self._members
        try:
            while True:
                await trio.lowlevel.wait_readable(self._set)
                for fd, _ in self._set.poll(0, BATCH):
                    try:
                        data = os.read(fd, READ_SIZE)
                    except BlockingIOError:
                        continue
                    except OSError:  # reset by the peer
                        data = b""
                    if not data:
                        self.close(fd)
                        continue
                    stream, tracker = members.pop(fd)
                    self._set.unregister(fd)
                    tracker.idle_since = None
                    tracker.idle_scope = None
                    self._wake(stream, tracker, data)
        finally:
            for fd in list(members):
                self.close(fd)
            trio.lowlevel.notify_closing(self._set)
            self._set.close()
