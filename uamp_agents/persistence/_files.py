"""A persistence adapter that keeps one JSON file per session.

Each save writes the whole SessionJSON to a temporary file in the same
directory, fsyncs it, renames it over ``<session id>.json`` and fsyncs the
directory, so a reader (or a process restarted after a crash) sees either the
previous file or the new one, never a mix. Blocking file calls run in a
worker thread.

Sessions of an owner live in a subdirectory of their own,
``owner-<first 32 hex digits of sha256(owner key)>`` (an owner key is any
string, so it is never a file name itself); sessions without an owner lie in
the directory itself.
"""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Final

import orjson
import trio

from uamp_proto.principal import Principal

from ._base import PersistenceError, encode_session, owner_key, session_id_of, stored_owner

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

    def _folder(self, owner: str) -> Path:
        if not owner:
            return self.directory
        return self.directory / f"owner-{hashlib.sha256(owner.encode()).hexdigest()[:32]}"

    def _file(self, session_id: str, owner: str = "") -> Path:
        if not _SAFE_ID.match(session_id):
            raise PersistenceError(
                f"session id {session_id!r} cannot be used as a file name",
                session_id=session_id,
            )
        return self._folder(owner) / f"{session_id}{_SUFFIX}"

    def _write(self, target: Path, data: bytes) -> None:
        folder = target.parent
        folder.mkdir(parents=True, exist_ok=True)
        fd, temp_name = tempfile.mkstemp(dir=folder, prefix=f".{target.stem}.", suffix=".tmp")
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
        _fsync_directory(folder)

    async def save(self, session_json: dict[str, Any]) -> None:
        """Atomically replace the session's file with ``session_json``.

        Raises:
            PersistenceError: Bad id, not JSON-serialisable, or an OS error.
        """
        session_id = session_id_of(session_json)
        target = self._file(session_id, stored_owner(session_json))
        data = encode_session(session_json, session_id, option=orjson.OPT_INDENT_2)
        try:
            await trio.to_thread.run_sync(self._write, target, data)
        except OSError as exc:
            raise PersistenceError(
                f"could not write {target}: {exc}", session_id=session_id
            ) from exc

    async def load(
        self, session_id: str, *, owner: Principal | None = None
    ) -> dict[str, Any] | None:
        """``owner``'s session's stored JSON, or ``None`` when there is no file.

        Raises:
            PersistenceError: The file is not a JSON object, or an OS error.
        """
        target = self._file(session_id, owner_key(owner))
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

    async def list(self, *, owner: Principal | None = None) -> builtins.list[str]:
        """The ids of ``owner``'s sessions, sorted."""
        folder = self._folder(owner_key(owner))

        def scan() -> builtins.list[str]:
            if not folder.is_dir():
                return []
            return sorted(
                p.name[: -len(_SUFFIX)]
                for p in folder.iterdir()
                if p.name.endswith(_SUFFIX) and _SAFE_ID.match(p.name[: -len(_SUFFIX)])
            )

        return await trio.to_thread.run_sync(scan)

    async def delete(self, session_id: str, *, owner: Principal | None = None) -> None:
        """Remove ``owner``'s session file, if there is one."""
        target = self._file(session_id, owner_key(owner))

        def remove() -> None:
            try:
                target.unlink()
            except FileNotFoundError:
                return
            _fsync_directory(target.parent)

        await trio.to_thread.run_sync(remove)
