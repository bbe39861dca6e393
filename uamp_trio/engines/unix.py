"""``uamp serve --uds PATH``: a listening Unix domain socket, as uvicorn's ``--uds``.

A reverse proxy on the same machine (nginx ``proxy_pass
http://unix:/run/uamp.sock``, haproxy ``server s1 unix@/run/uamp.sock``) or a
local client talks to the server through a file instead of a port. The
socket file is made readable and writable by everyone (mode 0o666, as
uvicorn does; restrict access with the folder's permissions). A socket file
left by a server that is gone is replaced; one a live server still answers
on, or a file that is not a socket, is an error. The file is removed when
the server stops.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
from typing import Protocol
from urllib.parse import quote

__all__ = ["bind_unix", "is_unix", "release_unix", "unix_url"]

#: The socket's file mode (uvicorn's).
MODE = 0o666


def _stale(path: str) -> bool:
    """Whether ``path`` is a socket file nobody listens on any more."""
    try:
        if not stat.S_ISSOCK(os.stat(path).st_mode):
            return False
    except FileNotFoundError:
        return False
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except ConnectionRefusedError:
        return True
    except OSError:
        return False
    finally:
        probe.close()
    return False


def bind_unix(path: str, backlog: int = 2048) -> socket.socket:
    """A listening stream socket at ``path`` (a stale socket file there is replaced).

    Raises:
        OSError: ``EADDRINUSE`` when a server answers there or the path is
            another kind of file; the system's error otherwise.
    """
    if _stale(path):
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        os.chmod(path, MODE)
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    return sock


def release_unix(path: str, inode: int) -> None:
    """Remove the socket file at ``path`` if it is still the one bound (``inode``)."""
    with contextlib.suppress(OSError):
        if os.stat(path).st_ino == inode:
            os.unlink(path)


def unix_url(path: str, scheme: str = "http") -> str:
    """``http+unix://%2Frun%2Fuamp.sock``: the socket as a base URL (requests-unixsocket's form)."""
    return f"{scheme}+unix://{quote(path, safe='')}"


class _Socket(Protocol):
    @property
    def family(self) -> int: ...


def is_unix(sock: _Socket) -> bool:
    """Whether ``sock`` is a Unix domain socket."""
    return sock.family == socket.AF_UNIX
