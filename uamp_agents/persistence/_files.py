"""A persistence adapter that keeps one JSON file per session.

Each save writes the whole SessionJSON to a temporary file in the same
directory, fsyncs it, renames it over ``<session id>.json`` and fsyncs the
directory, so a reader (or a process restarted after a crash) sees either the
previous file or the new one, never a mix. Blocking file calls run in a
worker thread.
"""

from __future__ import annotations

import builtins
import contextlib
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Final

import orjson
import trio

from ._base import PersistenceError, encode_session, session_id_of

__all__ = ["JSONDirectoryAdapter"]

_SUFFIX: Final = ".json"
#: Ids become file names, so only these characters are allowed (UUIDs fit).
_SAFE_ID: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")


def _fsync_directory(directory: Path) -> None:
    # A rename is durable only once the directory entry is on disk.
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class JSONDirectoryAdapter:
    """Stores each session as ``<directory>/<session id>.json``.

    Args:
        directory: Where the files go; created if missing.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def _file(self, session_id: str) -> Path:
        if not _SAFE_ID.match(session_id):
            raise PersistenceError(
                f"session id {session_id!r} cannot be used as a file name",
                session_id=session_id,
            )
        return self.directory / f"{session_id}{_SUFFIX}"

    def _write(self, target: Path, data: bytes) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        fd, temp_name = tempfile.mkstemp(
            dir=self.directory, prefix=f".{target.stem}.", suffix=".tmp"
        )
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temp_name, target)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp_name)
            raise
        _fsync_directory(self.directory)

    async def save(self, session_json: dict[str, Any]) -> None:
        """Atomically replace the session's file with ``session_json``.

        Raises:
            PersistenceError: Bad id, not JSON-serialisable, or an OS error.
        """
        session_id = session_id_of(session_json)
        target = self._file(session_id)
        data = encode_session(session_json, session_id, option=orjson.OPT_INDENT_2)
        try:
            await trio.to_thread.run_sync(self._write, target, data)
        except OSError as exc:
            raise PersistenceError(
                f"could not write {target}: {exc}", session_id=session_id
            ) from exc

    async def load(self, session_id: str) -> dict[str, Any] | None:
        """The session's stored JSON, or ``None`` when there is no file.

        Raises:
            PersistenceError: The file is not a JSON object, or an OS error.
        """
        target = self._file(session_id)
        try:
            data = await trio.to_thread.run_sync(target.read_bytes)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise PersistenceError(
                f"could not read {target}: {exc}", session_id=session_id
            ) from exc
        try:
            value = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise PersistenceError(
                f"{target} is not valid JSON: {exc}", session_id=session_id
            ) from None
        if not isinstance(value, dict):
            raise PersistenceError(f"{target} does not hold a JSON object", session_id=session_id)
        return value

    async def list(self) -> builtins.list[str]:
        """The ids of the sessions in the directory, sorted."""

        def scan() -> builtins.list[str]:
            if not self.directory.is_dir():
                return []
            return sorted(
                p.name[: -len(_SUFFIX)]
                for p in self.directory.iterdir()
                if p.name.endswith(_SUFFIX) and _SAFE_ID.match(p.name[: -len(_SUFFIX)])
            )

        return await trio.to_thread.run_sync(scan)

    async def delete(self, session_id: str) -> None:
        """Remove the session's file, if there is one."""
        target = self._file(session_id)

        def remove() -> None:
            try:
                target.unlink()
            except FileNotFoundError:
                return
            _fsync_directory(self.directory)

        await trio.to_thread.run_sync(remove)
