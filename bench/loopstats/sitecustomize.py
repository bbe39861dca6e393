"""The attack suite's view of the server's event loop (bench/attacks.py puts this on its path).

With ``UAMP_LOOP_STATS=FILE`` in the environment, every ``trio.run`` of the
process gets an instrument that measures each scheduler batch (from the end
of one wait for I/O to the start of the next) in CPU time of the thread
(``time.thread_time``): the work the event loop did while every other task
waited, without the time the process spent waiting for a CPU. Batches of
1 ms or more are appended to FILE as ``monotonic_time cpu_seconds`` lines
(the monotonic clock is the machine's, so the suite cuts out each
scenario's window), and garbage collections of 1 ms or more as
``monotonic_time cpu_seconds gcN`` (N: the generation), which tells a
collection's pause from the server's own work. Without the variable nothing
is changed.

It sees the loop thread's own CPU time only: while another thread holds the
GIL (a C extension that does not release it), the loop waits without
spending CPU, and that wait is not counted.
"""

from __future__ import annotations

import os
import time
from typing import Any


def _install(path: str) -> None:
    import gc

    import trio

    out = open(path, "a", buffering=1)  # noqa: SIM115 - open for the process's life
    collecting = [0.0]
    #: Lines not written yet: a collection can start inside a write (the
    #: file's own allocations), and a buffered file refuses a write from
    #: within one ("reentrant call"); such a line waits for the next write.
    pending: list[str] = []
    writing = [False]

    def write(line: str) -> None:
        pending.append(line)
        if writing[0]:
            return
        writing[0] = True
        try:
            while pending:
                out.write(pending.pop(0))
        finally:
            writing[0] = False

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collecting[0] = time.thread_time()
            return
        spent = time.thread_time() - collecting[0]
        if spent >= 0.001:
            write(f"{time.monotonic():.6f} {spent:.6f} gc{info['generation']}\n")

    gc.callbacks.append(on_gc)

    class BatchTimes(trio.abc.Instrument):
        def __init__(self) -> None:
            self.start: float | None = None

        def after_io_wait(self, timeout: float) -> None:
            self.start = time.thread_time()

        def before_io_wait(self, timeout: float) -> None:
            if self.start is not None:
                spent = time.thread_time() - self.start
                if spent >= 0.001:
                    write(f"{time.monotonic():.6f} {spent:.6f}\n")

    real_run = trio.run

    def run(*args: Any, **kwargs: Any) -> Any:
        kwargs["instruments"] = [*kwargs.get("instruments", ()), BatchTimes()]
        return real_run(*args, **kwargs)

    trio.run = run  # type: ignore[assignment]


if os.environ.get("UAMP_LOOP_STATS"):
    _install(os.environ["UAMP_LOOP_STATS"])
