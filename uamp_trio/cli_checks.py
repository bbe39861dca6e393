"""Checks of ``uamp serve``'s flags at start: each mistake is one line naming the flag and the fix.

A mistake found while serving is found late and said badly (a port that
wraps, a host that reads as "needs authentication", a store that turns into
a file named after a typo, a Redis client that raises twenty lines deep on
the first request). These run before anything is opened: :func:`port_number`
as an ``argparse`` type, :func:`check_host` and :func:`check_store` from the
command. An agent module that fails to import is the one case given more
than a line: the user's own traceback (:func:`user_traceback`), without the
frames of uamp or of the import machinery.
"""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import ipaddress
import os
import socket
import sys
import traceback
from pathlib import Path
from types import ModuleType, TracebackType
from urllib.parse import urlsplit

__all__ = [
    "REDIS_SCHEMES",
    "SQLITE_SUFFIXES",
    "check_extra",
    "check_host",
    "check_store",
    "import_agent_file",
    "port_number",
    "user_traceback",
]

#: ``--store`` values that name a Redis server (the ``redis`` extra).
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
#: File name endings that make a bare ``--store`` word a SQLite file.
SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")
#: What a SQLite database file starts with.
_SQLITE_MAGIC = b"SQLite format 3\x00"
#: Seconds the start-up check waits for Redis to answer a PING.
REDIS_CHECK_TIMEOUT = 3.0


def port_number(text: str) -> int:
    """``--port``: an integer from 0 to 65535 (``argparse`` type)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (0-65535)") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(
            f"{port} is not a port number: use 0-65535 (0 picks a free one)"
        )
    return port


def check_host(host: str) -> None:
    """``--host``: an IP address or a name that resolves.

    Raises:
        ValueError: One line saying what is wrong and what to write instead.
    """
    bare = host.strip("[]")
    try:
        ipaddress.ip_address(bare)
    except ValueError:
        pass
    else:
        if bare != host:
            raise ValueError(f"--host {host}: write the IPv6 address without brackets: {bare}")
        return
    name, sep, port = host.rpartition(":")
    if sep and port.isdigit() and ":" not in name:
        raise ValueError(
            f"--host {host}: the port goes in its own flag: --host {name} --port {port}"
        )
    try:
        socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise ValueError(
            f"--host {host}: cannot resolve this name ({reason}); give an address such as "
            "127.0.0.1 (this machine) or 0.0.0.0 (every interface)"
        ) from None


def check_extra(module: str, flag: str, extra: str) -> None:
    """``flag`` needs ``module``, which the ``extra`` extra installs.

    Raises:
        ValueError: It is not installed (one line naming the extra).
    """
    try:
        found = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        found = False
    if not found:
        raise ValueError(f"{flag} needs the {extra} extra: pip install 'uamp[{extra}]'")


def check_store(where: str) -> None:
    """``--store``: ``memory``, a Redis URL that answers, or a SQLite file that can be written.

    Raises:
        ValueError: One line naming the flag and the fix (never a password).
    """
    if where == "memory":
        return
    if where.startswith(REDIS_SCHEMES):
        _check_redis(where)
        return
    if where.startswith("sqlite:"):
        path = where.removeprefix("sqlite:")
    elif "://" in where:
        scheme = urlsplit(where).scheme
        raise ValueError(
            f"--store: unknown scheme {scheme}://; use memory, redis://HOST:PORT/DB "
            "or a SQLite file path"
        )
    else:
        path = where
    _check_sqlite(where, Path(path))


def _check_sqlite(where: str, path: Path) -> None:
    word = str(path)
    if not path.exists() and path.suffix not in SQLITE_SUFFIXES and os.sep not in word:
        close = difflib.get_close_matches(word, ["memory"], n=1)
        hint = "did you mean memory? " if close else ""
        raise ValueError(
            f"--store {where}: {hint}a store is memory, redis://HOST:PORT/DB or a SQLite file "
            f"(a path with a / or a {'/'.join(SQLITE_SUFFIXES)} suffix, e.g. ./{word}.db)"
        )
    if path.is_dir():
        raise ValueError(f"--store {where}: is a directory; name a file in it, e.g. {path}/uamp.db")
    folder = path.resolve().parent
    if not folder.is_dir():
        raise ValueError(
            f"--store {where}: the directory {folder} does not exist; create it or pick "
            "another path"
        )
    if path.exists():
        try:
            with path.open("rb") as file:
                head = file.read(len(_SQLITE_MAGIC))
        except OSError as exc:
            raise ValueError(f"--store {where}: cannot read it: {exc.strerror}") from None
        if head and head != _SQLITE_MAGIC:
            raise ValueError(f"--store {where}: this file is not a SQLite database")
        if not os.access(path, os.W_OK):
            raise ValueError(f"--store {where}: the file is not writable")
    elif not os.access(folder, os.W_OK):
        raise ValueError(f"--store {where}: cannot create a file in {folder} (not writable)")


def _check_redis(where: str) -> None:
    from uamp_stores._redis import redis_where

    named = redis_where(where)
    try:
        import redis
    except ImportError:
        raise ValueError(
            f"--store {named}: needs the redis extra: pip install 'uamp[redis]'"
        ) from None
    try:
        client = redis.Redis.from_url(
            where,
            socket_timeout=REDIS_CHECK_TIMEOUT,
            socket_connect_timeout=REDIS_CHECK_TIMEOUT,
        )
    except ValueError as exc:  # a malformed URL
        raise ValueError(f"--store: not a Redis URL ({exc})") from None
    try:
        client.ping()
    except redis.RedisError as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(
            f"--store: {named} does not answer ({reason}); start it or fix the URL"
        ) from None
    finally:
        client.close()


def import_agent_file(path: str, spec: str) -> ModuleType:
    """Import the Python file ``path`` (``--agent ./weather.py:weather``) as a module.

    Its directory goes first on ``sys.path``, as when the file is run as a
    script, so it can import its neighbours.

    Raises:
        ValueError: The file is missing (one line), or its code raised
            (the user's traceback, see :func:`user_traceback`).
    """
    file = Path(path).expanduser()
    if not file.is_file():
        raise ValueError(f"--agent {spec!r}: no file {path}")
    name = file.stem
    loaded = sys.modules.get(name)
    if loaded is not None and Path(getattr(loaded, "__file__", "") or "") != file.resolve():
        name = f"_uamp_agent_{name}"  # the name is taken (a stdlib or installed module)
    found = importlib.util.spec_from_file_location(name, file.resolve())
    if found is None or found.loader is None:
        raise ValueError(f"--agent {spec!r}: {path} is not a Python file")
    module = importlib.util.module_from_spec(found)
    folder = str(file.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    sys.modules[name] = module
    try:
        found.loader.exec_module(module)
    except BaseException as exc:
        del sys.modules[name]
        if not isinstance(exc, Exception):
            raise
        raise ValueError(import_failed(spec, path, exc)) from None
    return module


def import_failed(spec: str, what: str, exc: BaseException) -> str:
    """The message of an agent module that raised while importing: a line, then its traceback."""
    return f"--agent {spec!r}: importing {what} failed; the error in your code:\n" + user_traceback(
        exc
    ).rstrip("\n")


def _ours() -> tuple[str, ...]:
    """The folders of uamp's own packages, whose frames a user's traceback leaves out."""
    here = Path(__file__).resolve().parent.parent
    folders = [here / name for name in ("uamp", "uamp_trio", "uamp_agents")]
    folders.append(Path(importlib.__file__).resolve().parent)
    return tuple(str(folder) + os.sep for folder in folders)


def user_traceback(exc: BaseException) -> str:
    """``exc`` 's traceback with only the user's frames (no uamp, no importlib machinery)."""
    ours = _ours()

    def keep(tb: TracebackType | None) -> list[traceback.FrameSummary]:
        frames = traceback.extract_tb(tb)
        return [
            f
            for f in frames
            if not f.filename.startswith("<frozen importlib") and not f.filename.startswith(ours)
        ]

    shown = traceback.TracebackException.from_exception(exc)
    chain: list[tuple[traceback.TracebackException, BaseException]] = []
    te: traceback.TracebackException | None = shown
    raised: BaseException | None = exc
    while te is not None and raised is not None:
        chain.append((te, raised))
        if te.__cause__ is not None:
            te, raised = te.__cause__, raised.__cause__
        elif te.__context__ is not None and not te.__suppress_context__:
            te, raised = te.__context__, raised.__context__
        else:
            break
    for each, original in chain:
        each.stack = traceback.StackSummary.from_list(keep(original.__traceback__))
    return "".join(shown.format())
