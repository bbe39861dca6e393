"""webagents 0.3.9 (Robutler's reference implementation) in a throwaway virtualenv.

Never a dependency of this project: the interop tests and ``bench/peers.py``
install it from the package index into a virtualenv of their own cache
folder on first use, and reuse it after (one process at a time installs it).
"""

from __future__ import annotations

import subprocess
import venv
from pathlib import Path

from tests._support.cache import exclusive

WEBAGENTS = "webagents==0.3.9"


def webagents_python(folder: Path, probe: str = "import webagents") -> Path:
    """The python of a virtualenv in ``folder`` with webagents installed (installed once).

    ``probe`` is code that must run in it, checked once after an install (a
    stamp file remembers it: importing webagents takes seconds); when the
    virtualenv or its stamp is missing, or the probe fails, it is made again.

    Raises:
        RuntimeError: pip could not install webagents.
    """
    python = folder / "bin" / "python"
    stamp = folder / "probed"
    check = [str(python), "-c", probe]
    with exclusive(folder):
        if python.exists() and stamp.exists() and probe in stamp.read_text().splitlines():
            return python
        if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
            with stamp.open("a") as probed:
                probed.write(probe + "\n")
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
        stamp.write_text(probe + "\n")
    return python
