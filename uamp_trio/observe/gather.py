"""Log lines gathered in the event loop and written together, a few milliseconds later.

Theory of operation
-------------------
A server under load finishes a request every few hundred microseconds, and
the access log used to pay a ``write`` and a ``flush`` (a system call) for
each. :class:`GatheredHandler` is the ``logging`` handler ``uamp serve``
installs: a line logged on the thread of a running trio loop is appended
to a list, and one system task of that loop writes everything gathered at
most :data:`GATHER_SECONDS` after the first line of a batch, in one
``write`` and one ``flush``; while lines keep coming it writes once per
period of :data:`GATHER_SECONDS`, and goes back to waiting after a period
without one. So under load many lines share a system call and the task
wakes once a period, not once a batch; a line reaches the stream within
about :data:`GATHER_SECONDS` (later only when the loop itself is busy for
longer).

No line is lost on the way out: the task writes what is left when it ends
(the loop shutting down, cancelled, or failing); :meth:`GatheredHandler.flush`
writes it as well, and ``logging`` calls that at interpreter exit (a
``SystemExit``, an uncaught exception); a batch past :data:`GATHER_LINES`
lines is written at once, so memory stays bounded whatever the load. Only
a process killed outright (``SIGKILL``, ``os._exit``) can lose the lines of
its last few milliseconds.

A line logged anywhere else -- another thread, outside any trio loop,
before the loop starts -- is written at once, after whatever was gathered,
so the order of lines is the order they were logged in.
"""

from __future__ import annotations

import logging
import threading
from typing import TextIO

import trio

__all__ = ["GATHER_LINES", "GATHER_SECONDS", "GatheredHandler"]

#: How long the first line of a batch waits for others (seconds).
GATHER_SECONDS = 0.01
#: A batch this long is written at once.
GATHER_LINES = 256


class GatheredHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler writing the lines of a trio loop's thread in batches; see the module."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__(stream)
        self._lines: list[str] = []
        self._guard = threading.Lock()
        #: The thread whose loop has a flusher running, and that loop's wake-up.
        self._loop_thread: int | None = None
        self._wake: trio.Event | None = None

    def emit(self, record: logging.LogRecord) -> None:
        """Format ``record`` and gather (or write) its line."""
        try:
            line = self.format(record)
        except Exception:
            self.handleError(record)
            return
        self.write_line(line)

    def write_line(self, line: str) -> None:
        """Write one line (without its terminator), gathered when on a loop's thread."""
        if self._loop_thread == threading.get_ident() or self._start_flusher():
            with self._guard:
                lines = self._lines
                lines.append(line)
                first = len(lines) == 1
                full = len(lines) >= GATHER_LINES
            if full:
                self._write_out()
            elif first and self._wake is not None:
                self._wake.set()
            return
        with self._guard:
            self._lines.append(line)
        self._write_out()

    def flush(self) -> None:
        """Write whatever is gathered, then flush the stream."""
        self._write_out()
        super().flush()

    def _write_out(self) -> None:
        with self._guard:
            lines, self._lines = self._lines, []
            if not lines:
                return
            try:
                self.stream.write(self.terminator.join(lines) + self.terminator)
                self.stream.flush()
            except Exception:
                pass  # as StreamHandler: a log that cannot be written must not fail the server

    def _start_flusher(self) -> bool:
        """Start this thread's loop's flusher when on a loop's thread; whether it runs."""
        if self._loop_thread is not None:
            return False  # another thread's loop has it: write at once
        try:
            trio.lowlevel.spawn_system_task(self._flusher, name="uamp log lines")
        except RuntimeError:
            return False  # not in a trio loop, or one shutting down
        self._loop_thread = threading.get_ident()
        self._wake = trio.Event()
        return True

    async def _flusher(self) -> None:
        try:
            while True:
                wake = self._wake
                assert wake is not None
                await wake.wait()  # idle until a line comes
                # Busy: one write per period, for as long as periods bring lines
                # (one timer a period, not one wake-up per batch).
                while True:
                    await trio.sleep(GATHER_SECONDS)
                    if not self._lines:
                        break
                    self._write_out()
                self._wake = trio.Event()
        finally:
            self._loop_thread = None
            self._wake = None
            self._write_out()
