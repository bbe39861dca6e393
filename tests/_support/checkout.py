"""The checkout's files outside it: builds and installs that leave the checkout clean."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def copy_checkout(dest: Path) -> Path:
    """Copy the files git tracks (and new ones it does not ignore) to ``dest/src``."""
    source = dest / "src"
    source.mkdir()
    subprocess.run(
        f"git ls-files -z -co --exclude-standard | xargs -0 cp --parents -t '{source}'",
        shell=True,
        check=True,
        cwd=ROOT,
        executable="/bin/bash",
    )
    return source


def clean_env() -> dict[str, str]:
    """This process's environment without the variables that would point at the checkout."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
