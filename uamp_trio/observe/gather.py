"""Log lines gathered in the event loop and written together, up to a tenth of a second later.

Theory of operation
-------------------
A server under load finishes a request every few hundred microseconds, and
the access log used to pay a ``write`` and a ``flush`` (a system call) for
each. :class:`GatheredHandler` is the ``logging`` handler ``uamp serve``
installs. On the thread of a running trio loop, the first line after a
quiet period of :data:`GATHER_SECONDS` is written at once; a line that
comes sooner after the last write is appended to a list, which is written
in one ``write`` and one ``flush`` by the first line logged after the
period has passed (under load, the usual case: no timer, no task woken),
or, when none comes, by one system task of the loop whose cancel scope's
deadline is :data:`GATHER_LATEST` after the batch's first line (moved, not
armed anew, per batch, and moved to never when a line writes the batch).
So under load many lines share a system call and nothing wakes for them;
and a line reaches the stream at most about :data:`GATHER_LATEST` after it
was logged (later only when the loop itself is busy for longer).

Why two times. The task used to be woken for every batch and to sleep to
the end of its period: under load, that cost as much server CPU as the
rest of the access log. Its deadline was then the end of the batch's
period, and at a few dozen to a few hundred requests a second the next
line seldom came before that: the task woke for a quarter to an eighth of
all requests, each a wake-up of an otherwise idle server, the costliest
thing it does at such loads (docs/performance.md, "What a wake-up
costs"). With the deadline a few periods later, the next request's line
writes the batch nearly always.

No line is lost on the way out: the task writes what is left when it ends
(the loop shutting down, cancelled, or failing); :meth:`GatheredHandler.flush`
writes it as well, and ``logging`` calls that at interpreter exit (a
``SystemExit``, an uncaught exception); a batch past :data:`GATHER_LINES`
lines is written at once, so memory stays bounded whatever the load. Only
a process killed outright (``SIGKILL``, ``os._exit``) can lose the lines of
its last tenth of a second.

A line logged anywhere else -- another thread, outside any trio loop,
before the loop starts -- is written at once, after whatever was gathered,
so the order of lines is the order they were logged in.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import TextIO

import trio

__all__ = ["GATHER_LATEST", "GATHER_LINES", "GATHER_SECONDS", "GatheredHandler"]

#: A line this soon after the last write is gathered; the first line logged
#: later writes the batch with it (seconds).
GATHER_SECONDS = 0.01
#: When no such line comes, the batch is written this long after its first line.
GATHER_LATEST = 0.1
#: A batch this long is written at once.
GATHER_LINES = 256

_get_ident = threading.get_ident


class GatheredHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler writing the lines of a trio loop's thread in batches; see the module."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__(stream)
        self._lines: list[str] = []
        self._guard = threading.Lock()
        #: The thread whose loop has a flusher running, and the flusher's
        #: cancel scope: its deadline is the end of the gathered batch's period.
        self._loop_thread: int | None = None
        self._scope: trio.CancelScope | None = None
        #: When the last batch was written (``time.monotonic``).
        self._last_write = -GATHER_SECONDS

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
        if self._loop_thread == _get_ident() or self._start_flusher():
            now = time.monotonic()
            with self._guard:
                lines = self._lines
                if not lines and now - self._last_write >= GATHER_SECONDS:
                    # The first line after a quiet period, alone (a batch of
                    # one, without _write_out's second hold of the lock).
                    self._write_text(line + self.terminator)
                    self._last_write = now
                    return
                lines.append(line)
                count = len(lines)
            if count >= GATHER_LINES or now - self._last_write >= GATHER_SECONDS:
                # A line past the end of the batch's period (the batch goes
                # with it) or a full batch.
                self._write_out()
                self._last_write = now
                if count > 1 and self._scope is not None:
                    # The batch's first line set the flusher's deadline: it
                    # would wake the task for nothing (under load, half of
                    # its wake-ups were such).
                    self._scope.deadline = math.inf
            elif count == 1 and self._scope is not None:
                # A new batch: the flusher writes it unless a later line does
                # so first (under load, the usual case).
                self._scope.deadline = trio.current_time() + GATHER_LATEST
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
            if lines:
                self._write_text(self.terminator.join(lines) + self.terminator)

    def _write_text(self, text: str) -> None:
        """Write and flush ``text``; the caller holds the lock."""
        try:
            self.stream.write(text)
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
        self._scope = trio.CancelScope()
        return True

    async def _flusher(self) -> None:
        try:
            while True:
                scope = self._scope
                assert scope is not None
                with scope:
                    await trio.sleep_forever()
                # The deadline passed: no later line wrote the batch.
                self._scope = trio.CancelScope()
                self._write_out()
                self._last_write = time.monotonic()
        finally:
            self._loop_thread = None
            self._scope = None
            self._write_out()
