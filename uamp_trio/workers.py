"""``uamp serve --workers N``: N server processes on one listening socket.

Theory of operation
-------------------
The supervisor (the process the user started) binds the listening socket
itself, then starts N workers: ``uamp serve`` again with the same arguments,
each inheriting the socket's file descriptor (named by the environment
variable :data:`WORKER_FD`) and serving on it. The kernel hands each new
connection to whichever worker accepts it first, so the load spreads over
the workers without a proxy in between.

Why one shared socket rather than ``SO_REUSEPORT`` (one socket per worker):
with a shared socket ``--port 0`` works (every worker serves the port the
supervisor got), a worker that dies leaves no half of the port's hash
buckets without a listener while it restarts (with ``SO_REUSEPORT`` the
kernel keeps sending that socket's share of new connections to it until it
closes), and it is the same on every platform that passes descriptors to
children.

Workers share state only through ``--store``: with ``redis://`` a client may
reconnect to any worker and resume its session there (docs/scale-out.md).
The supervisor restarts a worker that exits on its own (a crash, a
``kill -9``), at most once per second per worker. SIGINT or SIGTERM is passed
on to every worker, which shuts down gracefully; the supervisor exits when
they all have.

The supervisor does no I/O with clients and imports no server code: it is a
process table and a socket.
"""

from __future__ import annotations

import functools
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from types import FrameType

from .engines.unix import bind_unix, release_unix

__all__ = ["WORKER_FD", "WORKER_ID", "inherited_socket", "is_worker", "supervise", "worker_number"]

#: The environment variable naming a worker's inherited listening socket.
WORKER_FD = "UAMP_WORKER_FD"
#: The environment variable holding a worker's number (0 .. N-1).
WORKER_ID = "UAMP_WORKER_ID"
#: Least time between two starts of one worker.
RESTART_DELAY = 1.0


def is_worker() -> bool:
    """Whether this process is a worker of ``uamp serve --workers``."""
    return bool(os.environ.get(WORKER_FD))


@functools.cache
def inherited_socket() -> socket.socket | None:
    """The listening socket a supervisor handed this worker (one object), or ``None``."""
    fd = os.environ.get(WORKER_FD)
    if not fd:
        return None
    return socket.socket(fileno=int(fd))


def worker_number() -> int | None:
    """This worker's number, or ``None`` outside ``--workers``."""
    value = os.environ.get(WORKER_ID)
    return int(value) if value else None


def _bind(host: str, port: int, backlog: int = 2048) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(backlog)
    sock.set_inheritable(True)
    return sock


class _Supervisor:
    def __init__(self, command: Sequence[str], sock: socket.socket, count: int) -> None:
        self.command = list(command)
        self.sock = sock
        self.count = count
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.started: dict[int, float] = {}
        self.stopping: int | None = None

    def start(self, n: int) -> None:
        env = {**os.environ, WORKER_FD: str(self.sock.fileno()), WORKER_ID: str(n)}
        self.started[n] = time.monotonic()
        self.procs[n] = subprocess.Popen(self.command, env=env, pass_fds=(self.sock.fileno(),))

    def stop(self, signum: int, frame: FrameType | None = None) -> None:
        first = self.stopping is None
        self.stopping = signum
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signum if first else signal.SIGKILL)

    def run(self) -> int:
        for n in range(self.count):
            self.start(n)
        while True:
            alive = 0
            for n, proc in list(self.procs.items()):
                code = proc.poll()
                if code is None:
                    alive += 1
                elif self.stopping is None:
                    wait = self.started[n] + RESTART_DELAY - time.monotonic()
                    if wait <= 0:
                        print(
                            f"uamp: worker {n} (pid {proc.pid}) exited with {code}; restarting",
                            file=sys.stderr,
                            flush=True,
                        )
                        self.start(n)
                    alive += 1
            if self.stopping is not None and not alive:
                return 0
            time.sleep(0.1)


def supervise(
    argv: Sequence[str], host: str, port: int, count: int, *, uds: str | None = None
) -> int:
    """Bind ``host:port`` (or the Unix socket ``uds``), run ``count`` workers of ``uamp``
    ``argv`` on it; the exit code."""
    where = uds if uds is not None else f"{host}:{port}"
    try:
        sock = bind_unix(uds) if uds is not None else _bind(host, port)
    except OSError as exc:
        print(f"uamp serve: cannot listen on {where}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    inode = os.stat(uds).st_ino if uds is not None else 0
    sock.set_inheritable(True)
    if uds is None:
        where = f"{host}:{sock.getsockname()[1]}"
    print(f"uamp: {count} workers on {where} (pid {os.getpid()})", flush=True)
    supervisor = _Supervisor([sys.executable, "-m", "uamp", *argv], sock, count)
    signal.signal(signal.SIGINT, supervisor.stop)
    signal.signal(signal.SIGTERM, supervisor.stop)
    try:
        return supervisor.run()
    finally:
        sock.close()
        if uds is not None:
            release_unix(uds, inode)
