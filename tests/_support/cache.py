"""Where the tests keep what they install from package registries, and one installer at a time.

The webagents virtualenv and the npm clients take a minute to install, so
they live in the user's cache folder (``$UAMP_TEST_CACHE``, else
``$XDG_CACHE_HOME/uamp-tests``, else ``~/.cache/uamp-tests``), not in the
checkout: a fresh clone on the same machine reuses them, and each installer
checks what it finds and installs again when it does not work. The tests run
in several processes (pytest-xdist) and several checkouts may share the
folder, so an install holds an exclusive file lock on its folder meanwhile.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["cache_folder", "exclusive"]


def cache_folder(name: str) -> Path:
    """The cache folder ``name`` of the tests (not created)."""
    root = os.environ.get("UAMP_TEST_CACHE")
    if root:
        return Path(root) / name
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "uamp-tests" / name


@contextmanager
def exclusive(folder: Path) -> Iterator[None]:
    """Hold the lock of ``folder`` (a ``.lock`` file beside it) until the block ends."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f"{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
