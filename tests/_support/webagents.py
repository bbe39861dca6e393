"""webagents 0.3.9 (Robutler's reference implementation) in a throwaway virtualenv.

Never a dependency of this project: the interop tests and ``bench/peers.py``
install it from the package index into a virtualenv of their own cache
folder on first use, and reuse it after.
"""

from __future__ import annotations

import subprocess
import venv
from pathlib import Path

WEBAGENTS = "webagents==0.3.9"


def webagents_python(folder: Path, probe: str = "import webagents") -> Path:
    """The python of a virtualenv in ``folder`` with webagents installed (installed once).

    ``probe`` is code that must run in it; when it fails the virtualenv is
    made again.

    Raises:
        RuntimeError: pip could not install webagents.
    """
    python = folder / "bin" / "python"
    check = [str(python), "-c", probe]
    if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return python
    venv.create(folder, with_pip=True, clear=True)
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", WEBAGENTS],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if installed.returncode != 0 or subprocess.run(check, capture_output=True).returncode != 0:
        raise RuntimeError(f"installing {WEBAGENTS} failed: {installed.stderr[-2000:]}")
    return python
