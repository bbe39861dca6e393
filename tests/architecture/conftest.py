"""What the packaging tests share: one build of the sdist and wheel per test process,
and fresh virtual environments that pip fills from outside (no ensurepip in each)."""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests._support.checkout import clean_env, copy_checkout


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """sdist and wheel built from a copy of the checkout's files (the checkout stays clean)."""
    work = tmp_path_factory.mktemp("build")
    source = copy_checkout(work)
    out = work / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(out), str(source)],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=600,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return out


def fresh_venv(path: Path) -> Path:
    """A new virtual environment at ``path`` without pip; its ``python``.

    pip is not needed inside: :func:`pip_install` runs this interpreter's pip
    for it (``pip --python``), which saves ensurepip's seconds per environment.
    """
    venv.EnvBuilder(with_pip=False).create(path)
    return path / "bin" / "python"


def pip_install(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``pip install -q ARGS`` into the environment of ``python``."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--disable-pip-version-check",
            *args,
        ],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=600,
    )
