"""The ``uamp`` command as the tests run it: a real subprocess from the repository root."""

from __future__ import annotations

import codecs
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}
#: How long ``uamp serve`` may take to print its address.
STARTUP = 45.0


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


def count_tool_runs(directory: Path) -> Iterator[Path]:
    """A file the ``Checkpointed`` agent's tool appends a line to on every run.

    It is named in ``ENV`` for the processes spawned meanwhile, so a test can
    count runs across processes (tests/_support/agents.py).
    """
    runs = directory / "tool-runs"
    runs.touch()
    ENV["UAMP_TEST_TOOL_RUNS"] = str(runs)
    try:
        yield runs
    finally:
        ENV.pop("UAMP_TEST_TOOL_RUNS", None)


def spawn_serve(*args: str, stderr: int = subprocess.STDOUT) -> subprocess.Popen[str]:
    """Start ``uamp serve --port 0 *args``; its stdout (and by default its stderr) is a pipe."""
    return spawn("serve", "--port", "0", *args, stderr=stderr)


def wait_for_line(
    proc: subprocess.Popen[str], pattern: str, seen: list[str] | None = None
) -> re.Match[str]:
    """Read ``proc`` 's output until a line matches ``pattern`` (within :data:`STARTUP`).

    A process that stays silent fails the test at the deadline, with what it
    said so far (a bare ``readline`` would wait for its next line forever).
    """
    assert proc.stdout is not None
    seen = [] if seen is None else seen
    deadline = time.monotonic() + STARTUP
    while (left := deadline - time.monotonic()) > 0:
        line = _readline(proc, left)
        if not line:
            break
        seen.append(line)
        found = re.search(pattern, line)
        if found:
            return found
    raise AssertionError(f"no line matching {pattern!r} in:\n" + "".join(seen))


def _readline(proc: subprocess.Popen[str], timeout: float) -> str | None:
    """``proc`` 's next output line, ``""`` at its end, ``None`` if none came within ``timeout``."""
    assert proc.stdout is not None
    stdout = proc.stdout
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    return got[0] if got else None


@contextmanager
def uamp_serve(*args: str, seen: list[str] | None = None) -> Iterator[str]:
    """``uamp serve --port 0 *args`` in a subprocess; yields its base URL.

    ``seen`` collects the lines it printed up to the URL's. Stopped with
    SIGINT when the block ends; a server that does not stop in 15 s is
    killed and fails the test.
    """
    proc = spawn_serve(*args)
    try:
        yield wait_for_line(proc, r"serving on (https?://[\d.]+:\d+)", seen).group(1)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:  # pragma: no cover - a hung server
            proc.kill()
            raise


@contextmanager
def doomed_serve(*args: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``uamp serve --port 0 *args`` for a test that kills it; yields the process and its URL.

    Killed (SIGKILL) when the block ends, unless the test did that already.
    """
    proc = spawn_serve(*args)
    try:
        yield proc, wait_for_line(proc, r"serving on (https?://[\d.]+:\d+)").group(1)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


#: The installed ``uamp`` script (the console entry point, not ``python -m``).
UAMP_SCRIPT = str(Path(sys.executable).with_name("uamp"))


class Served:
    """A running ``uamp`` process whose every output line is collected by a thread.

    ``command`` is the argument list to run; stdout and stderr are merged;
    ``stdin=True`` gives it a pipe to write to (``proc.stdin``). :meth:`wait_for` waits for a line
    matching a pattern; :meth:`stop` sends SIGINT and returns the exit code.
    """

    def __init__(
        self,
        command: list[str],
        *,
        cwd: Path = ROOT,
        env: dict[str, str] | None = None,
        stdin: bool = False,
    ) -> None:
        self.proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE if stdin else None,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=cwd,
            env={**ENV, **(env or {})},
        )
        self.lines: list[str] = []
        self.partial = ""
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        # Raw reads, so that a line still being written (a streamed answer) is seen too.
        assert self.proc.stdout is not None
        raw = self.proc.stdout.buffer  # type: ignore[attr-defined]
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        while chunk := raw.read1(65536):
            text = decoder.decode(chunk)
            with self._changed:
                *done, self.partial = (self.partial + text).split("\n")
                self.lines.extend(line.rstrip("\r") for line in done)
                self._changed.notify_all()
        with self._changed:
            if self.partial:
                self.lines.append(self.partial)
                self.partial = ""
            self._changed.notify_all()

    def wait_for(self, pattern: str, *, after: int = 0, timeout: float = STARTUP) -> re.Match[str]:
        """The first match of ``pattern`` in a line at index ``after`` or later."""
        deadline = time.monotonic() + timeout
        regex = re.compile(pattern)
        with self._changed:
            while True:
                for line in [*self.lines[after:], self.partial]:
                    found = regex.search(line)
                    if found:
                        return found
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    raise AssertionError(
                        f"no line matches {pattern!r}; output:\n" + "\n".join(self.lines)
                    )
                self._changed.wait(min(left, 0.2))

    def url(self, *, after: int = 0) -> str:
        """The base URL the server printed."""
        return self.wait_for(r"serving on (https?://[\d.]+:\d+)", after=after).group(1)

    def stop(self) -> int:
        """SIGINT, then the exit code (killed and failed after 15 s)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            code = self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired as exc:  # pragma: no cover - a hung server
            tree = subprocess.run(
                ["ps", "-o", "pid,ppid,stat,etime,args", "--ppid", str(self.proc.pid)],
                capture_output=True,
                text=True,
            ).stdout
            self.proc.kill()
            tail = "\n".join(self.lines[-40:])
            raise AssertionError(
                f"{self.proc.args} did not stop within 15 s of SIGINT; its children:\n{tree}"
                f"its last output:\n{tail}"
            ) from exc
        self._reader.join(5)
        return code

    def __enter__(self) -> Served:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def read_until(proc: subprocess.Popen[str], marker: str, timeout: float = 30) -> str:
    """What ``proc`` printed up to and including the first line holding ``marker``.

    Reads the pipe's bytes directly: a buffered ``readline`` after ``select``
    would miss lines that arrived in the same chunk as the one it returned.
    """
    import os
    import select
    import time

    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    seen, deadline = "", time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = seen.splitlines(keepends=True)
        for n, line in enumerate(lines):
            if marker in line and line.endswith("\n"):
                return "".join(lines[: n + 1])
        ready, _, _ = select.select([fd], [], [], 0.5)
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        seen += chunk.decode()
    raise AssertionError(f"no {marker!r} in chat output:\n" + seen)
