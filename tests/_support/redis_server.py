"""A real Redis server for the tests, on 127.0.0.1 and a free port.

The server binary is Debian's ``redis-server``; when it is missing (a fresh
machine) it is installed with ``apt-get`` (the tests run as root there, as
CI does). Nothing is mocked and nothing is skipped: a machine where it
cannot be installed fails the tests that need it, saying why.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests._support.cache import cache_folder, exclusive
from tests._support.system import installs_allowed, missing

__all__ = ["free_port", "redis_server_binary", "running_redis", "start_redis", "stop_redis"]


def redis_server_binary() -> str:
    """The path of ``redis-server``, installing the Debian package when it is missing.

    Test processes running side by side (pytest-xdist) install it one at a
    time: apt-get holds dpkg's lock and fails in a second process.
    """
    found = shutil.which("redis-server")
    if found:
        return found
    if not installs_allowed():
        missing("redis-server", "apt-get install redis-server, or put it on PATH")
    with exclusive(cache_folder("apt-get")):
        return shutil.which("redis-server") or _install()


def _install() -> str:
    env = {"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    for command in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "redis-server"],
    ):
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise RuntimeError(
                f"redis-server is needed by the store tests and {' '.join(command)!r} failed: "
                f"{done.stderr.strip()[-500:]}"
            )
    found = shutil.which("redis-server") or "/usr/bin/redis-server"
    if not Path(found).exists():
        raise RuntimeError("apt-get installed redis-server but the binary is not on PATH")
    return found


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_redis(directory: Path, port: int) -> subprocess.Popen[bytes]:
    """Start ``redis-server`` (no persistence) on 127.0.0.1:``port``; returns once it answers."""
    proc = subprocess.Popen(
        [
            redis_server_binary(),
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(directory),
            "--protected-mode",
            "yes",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return proc
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_redis(proc)
            raise RuntimeError(f"redis-server did not start on port {port}")
        time.sleep(0.05)


def stop_redis(proc: subprocess.Popen[bytes]) -> None:
    """Stop a server of :func:`start_redis` (SIGTERM, then SIGKILL after 10 s)."""
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextmanager
def running_redis(directory: Path) -> Iterator[str]:
    """Run a throwaway ``redis-server`` (no persistence); yields its ``redis://`` URL."""
    port = free_port()
    proc = start_redis(directory, port)
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        stop_redis(proc)
