"""The checkout's bytecode, compiled once before the tests start.

With ``PYTHONDONTWRITEBYTECODE`` set (this project's CI machine sets it), no
import writes a ``__pycache__`` file, so every Python process a test starts
-- hundreds of ``uamp serve`` and ``uamp`` runs, relay peers, bench workers --
compiled the uamp packages it imports from source again: about 0.3 s of CPU
each (``uamp serve --port 99999``: 0.95 s without, 0.6 s with). The
variable only stops the writes an import would make; :func:`compile_checkout`
compiles the checkout's packages, the tests' helpers and bench/ into their
``__pycache__`` folders (ignored by git) once, in the process that starts the
run, and every process after it reads them. Files the tests write elsewhere
(agent modules in temporary folders, rewritten by the ``--reload`` tests) are
not compiled, so none of them can meet a stale cache.
"""

from __future__ import annotations

import compileall
import sys
from pathlib import Path

__all__ = ["compile_checkout"]

ROOT = Path(__file__).resolve().parents[2]


def sources(root: Path = ROOT) -> list[Path]:
    """The folders of importable code in the checkout: its packages, ``tests`` and ``bench``."""
    packages = sorted(p for p in root.iterdir() if (p / "__init__.py").is_file())
    return [*packages, *(root / name for name in ("bench",) if (root / name).is_dir())]


def compile_checkout(root: Path = ROOT) -> None:
    """Compile the checkout's code when imports will not (``sys.dont_write_bytecode``).

    An up-to-date ``.pyc`` is left alone, so a second run costs a stat per file.
    """
    if not sys.dont_write_bytecode:
        return  # every import writes its own
    for folder in sources(root):
        compileall.compile_dir(folder, quiet=2)
