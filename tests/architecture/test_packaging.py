"""The core installs and imports alone: no event loop, no server, no runtime."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests._support.checkout import clean_env
from tests.architecture.conftest import fresh_venv, pip_install

ROOT = Path(__file__).resolve().parents[2]

#: What importing any part of uamp_proto must never pull in.
NOT_IN_THE_CORE = ("uamp_trio", "uamp_agents", "trio", "h11", "h2", "wsproto", "asyncio", "anyio")

_IMPORT_EVERY_CORE_MODULE = f"""
import importlib, pkgutil, sys
import uamp_proto
for info in pkgutil.walk_packages(uamp_proto.__path__, prefix="uamp_proto."):
    importlib.import_module(info.name)
banned = {NOT_IN_THE_CORE!r}
print(sorted(name for name in sys.modules if name.split(".")[0] in banned))
"""


def test_importing_every_core_module_loads_no_io_package() -> None:
    result = subprocess.run(
        [sys.executable, "-c", _IMPORT_EVERY_CORE_MODULE],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_the_check_sees_a_banned_import() -> None:
    code = "import uamp_trio.client\n" + _IMPORT_EVERY_CORE_MODULE
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "trio" in result.stdout


def test_the_core_installs_without_extras_and_runs_the_asyncio_example(
    dist: Path, tmp_path: Path
) -> None:
    python = fresh_venv(tmp_path / "venv")
    environ = clean_env()
    # The wheel built from a copy of the checkout (conftest.dist), without extras.
    install = pip_install(python, str(next(dist.glob("*.whl"))))
    assert install.returncode == 0, install.stdout + install.stderr

    outside = tmp_path  # not the checkout: imports must come from the installed package
    demo = subprocess.run(
        [str(python), str(ROOT / "examples" / "asyncio_server.py"), "--demo"],
        capture_output=True,
        text=True,
        env=environ,
        cwd=outside,
        timeout=60,
    )
    assert demo.returncode == 0, demo.stderr
    assert demo.stdout.strip() == "You said: hello asyncio"

    # The `uamp` script is installed with the core: --version answers, a command
    # that needs the server names the extra, neither prints a traceback.
    uamp = python.with_name("uamp")
    version = subprocess.run(
        [str(uamp), "--version"], capture_output=True, text=True, env=environ, cwd=outside
    )
    assert version.returncode == 0, version.stderr
    assert version.stdout.startswith("uamp ")
    serve = subprocess.run(
        [str(uamp), "serve"], capture_output=True, text=True, env=environ, cwd=outside
    )
    assert serve.returncode == 2
    assert "pip install 'uamp[server]'" in serve.stderr and "Traceback" not in serve.stderr

    for module in ("trio", "h11", "wsproto", "jwt"):
        probe = subprocess.run(
            [str(python), "-c", f"import {module}"],
            capture_output=True,
            text=True,
            env=environ,
            cwd=outside,
        )
        assert probe.returncode != 0, f"{module} is installed by `pip install uamp`"
        assert "ModuleNotFoundError" in probe.stderr
