"""A real PostgreSQL server for the tests, on 127.0.0.1 and a free port.

The binaries are Debian's ``postgresql`` package; when they are missing (a
fresh machine) the package is installed with ``apt-get`` (the tests run as
root there, as CI does). PostgreSQL refuses to run as root, so a root test
process runs it as the package's ``postgres`` user. The cluster lives in a
temporary folder with ``trust`` authentication on 127.0.0.1 only and
``fsync`` off: it is thrown away when the tests end. Nothing is mocked and
nothing is skipped: a machine where it cannot be installed fails the tests
that need it, saying why.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests._support.cache import cache_folder, exclusive
from tests._support.redis_server import free_port

__all__ = ["create_database", "postgres_bin", "running_postgres"]


def _find_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("postgres")
    return Path(on_path).parent if on_path else None


def postgres_bin() -> Path:
    """The folder holding ``initdb`` and ``postgres``, installing the package when missing."""
    found = _find_bin()
    if found:
        return found
    with exclusive(cache_folder("apt-get")):
        return _find_bin() or _install()


def _install() -> Path:
    env = {"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    for command in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "postgresql"],
    ):
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            raise RuntimeError(
                f"PostgreSQL is needed by the ledger tests and {' '.join(command)!r} failed: "
                f"{done.stderr.strip()[-500:]}"
            )
    found = _find_bin()
    if found is None:
        raise RuntimeError("apt-get installed postgresql but its binaries were not found")
    return found


def _as_user() -> tuple[list[str], int | None, int | None]:
    """The command prefix and uid/gid to run the server with (root: the ``postgres`` user)."""
    if os.geteuid() != 0:
        return [], None, None
    try:
        user = pwd.getpwnam("postgres")
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "postgres"], check=True)
        user = pwd.getpwnam("postgres")
    return ["runuser", "-u", "postgres", "--"], user.pw_uid, user.pw_gid


@contextmanager
def running_postgres() -> Iterator[str]:
    """Run a throwaway PostgreSQL cluster; yields the URL of its ``postgres`` database."""
    binaries = postgres_bin()
    prefix, uid, gid = _as_user()
    root = Path(tempfile.mkdtemp(prefix="uamp-pg-"))
    data, sockets = root / "data", root / "run"
    sockets.mkdir()
    if uid is not None and gid is not None:
        os.chown(root, uid, gid)
        os.chown(sockets, uid, gid)
    init = subprocess.run(
        [*prefix, str(binaries / "initdb"), "-D", str(data), "-U", "uamp", "--auth=trust",
         "--no-sync", "-E", "UTF8"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    if init.returncode != 0:
        raise RuntimeError(f"initdb failed: {init.stderr.strip()[-500:]}")
    port = free_port()
    proc = subprocess.Popen(
        [*prefix, str(binaries / "postgres"), "-D", str(data), "-p", str(port),
         "-k", str(sockets), "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
         "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
         "-c", "max_connections=300"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    url = f"postgresql://uamp@127.0.0.1:{port}/postgres"
    try:
        _wait_ready(binaries, port, proc)
        yield url
    finally:
        _stop(proc, data)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.send_signal(2)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(root, ignore_errors=True)


def _stop(proc: subprocess.Popen[bytes], data: Path) -> None:
    """Ask the server for a fast shutdown (SIGINT: clients are disconnected, not waited for).

    The signal goes to the postmaster itself (its pid heads ``postmaster.pid``):
    ``runuser``, its parent as root, turns any signal it gets into SIGTERM (a smart
    shutdown, which waits for every client) and a SIGKILL two seconds later.
    """
    try:
        pid = int((data / "postmaster.pid").read_text().split("\n", 1)[0])
        os.kill(pid, signal.SIGINT)
    except (OSError, ValueError):  # not started, or gone: runuser passes it on
        proc.terminate()


def _wait_ready(binaries: Path, port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while True:
        ready = subprocess.run(
            [str(binaries / "pg_isready"), "-h", "127.0.0.1", "-p", str(port), "-q"],
            capture_output=True,
        )
        if ready.returncode == 0:
            return
        if proc.poll() is not None or time.monotonic() > deadline:
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            raise RuntimeError(f"postgres did not start on port {port}: {err[-500:]}")
        time.sleep(0.1)


def create_database(server_url: str) -> str:
    """A new empty database on the server of ``server_url``; its URL."""
    import psycopg

    name = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")  # type: ignore[arg-type]
    return server_url.rsplit("/", 1)[0] + "/" + name
