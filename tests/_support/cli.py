"""The ``uamp`` command as the tests run it: a real subprocess from the repository root."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}
#: How long ``uamp serve`` may take to print its address.
STARTUP = 20.0


def uamp(
    *args: str, stdin: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``uamp *args`` run to its end; its exit code and captured output."""
    return subprocess.run(
        [sys.executable, "-m", "uamp_trio", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=ENV,
        timeout=timeout,
    )


def spawn(
    *args: str, stderr: int = subprocess.STDOUT, stdin: int | None = None
) -> subprocess.Popen[str]:
    """Start ``uamp *args``; its stdout (and by default its stderr) is a pipe."""
    return subprocess.Popen(
        [sys.executable, "-m", "uamp_trio", *args],
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        cwd=ROOT,
        env=ENV,
    )


def spawn_serve(*args: str, stderr: int = subprocess.STDOUT) -> subprocess.Popen[str]:
    """Start ``uamp serve --port 0 *args``; its stdout (and by default its stderr) is a pipe."""
    return spawn("serve", "--port", "0", *args, stderr=stderr)


@contextmanager
def uamp_serve(*args: str) -> Iterator[str]:
    """``uamp serve --port 0 *args`` in a subprocess; yields its base URL.

    Stopped with SIGINT when the block ends; a server that does not stop in
    15 s is killed and fails the test.
    """
    proc = spawn_serve(*args)
    assert proc.stdout is not None
    try:
        url, seen, deadline = None, [], time.monotonic() + STARTUP
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(line)
            found = re.search(r"serving on (http://[\d.]+:\d+)", line)
            url = found.group(1) if found else None
        assert url, "uamp serve did not report its address:\n" + "".join(seen)
        yield url
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:  # pragma: no cover - a hung server
            proc.kill()
            raise
