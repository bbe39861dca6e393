"""Other agent servers (webagents, pydantic-ai) in throwaway virtualenvs of their own.

Never dependencies of this project: the interop tests and the peer
benchmarks (``bench/peers.py``, ``bench/compare.py``) install them from the
package index into a virtualenv of their own cache folder on first use, and
reuse it after (one process at a time installs it).
"""

from __future__ import annotations

import subprocess
import venv
from pathlib import Path

from tests._support.cache import exclusive

__all__ = ["PYDANTIC_AI", "WEBAGENTS", "peer_python", "pydantic_ai_python", "webagents_python"]

#: Robutler's reference implementation.
WEBAGENTS = ("webagents==0.3.9",)
#: pydantic-ai with its AG-UI adapter, FastA2A (its A2A server since pydantic-ai 2), and the
#: ASGI server their documentation serves them with.
PYDANTIC_AI = ("pydantic-ai-slim[ag-ui]==2.78.0", "fasta2a==2.1.1", "uvicorn==0.55.0")


def peer_python(folder: Path, requirements: tuple[str, ...], probe: str) -> Path:
    """The python of a virtualenv in ``folder`` with ``requirements`` installed (once).

    ``probe`` is code that must run in it, checked once after an install (a
    stamp file remembers it: importing a framework can take seconds); when the
    virtualenv or its stamp is missing, or the probe fails, it is made again.

    Raises:
        RuntimeError: pip could not install the requirements.
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
            [str(python), "-m", "pip", "install", "-q", *requirements],
            capture_output=True,
            text=True,
            timeout=900,
        )
        if installed.returncode != 0 or subprocess.run(check, capture_output=True).returncode != 0:
            raise RuntimeError(f"installing {requirements} failed: {installed.stderr[-2000:]}")
        stamp.write_text(probe + "\n")
    return python


def webagents_python(folder: Path, probe: str = "import webagents") -> Path:
    """The python of a virtualenv in ``folder`` with webagents 0.3.9 (installed once)."""
    return peer_python(folder, WEBAGENTS, probe)


def pydantic_ai_python(folder: Path, probe: str = "import pydantic_ai.ui.ag_ui") -> Path:
    """The python of a virtualenv in ``folder`` with pydantic-ai, FastA2A and uvicorn (once)."""
    return peer_python(folder, PYDANTIC_AI, probe)
