"""Node clients for the interop tests: ``npm ci`` from a lock file into the test cache."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from tests._support.cache import cache_folder, exclusive
from tests._support.system import installs_allowed, missing

FILES = ("package.json", "package-lock.json", "run.mjs")


def install_client(source: Path, name: str, *, script: str = "run.mjs") -> Path:
    """The folder ``name`` of the test cache holding ``source`` 's client, ``npm ci`` -ed there.

    The folder is named after the client's files too, so checkouts with
    different versions of them never share one. ``script``: the client's
    script, copied beside its package files.
    """
    files = (*FILES[:-1], script)
    digest = hashlib.sha256(b"".join((source / file).read_bytes() for file in files)).hexdigest()
    cache = cache_folder(f"{name}-{digest[:16]}")
    stamp = cache / ".installed"
    with exclusive(cache):
        if not (stamp.exists() and (cache / "node_modules").is_dir()):
            cache.mkdir(parents=True, exist_ok=True)
            for file in files:
                shutil.copyfile(source / file, cache / file)
            npm = shutil.which("npm")
            if npm is None and not installs_allowed():
                missing("npm", "install Node 20 with npm")
            assert npm is not None, "npm is needed: install Node 20 with npm"
            done = subprocess.run(
                [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund"],
                cwd=cache,
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert done.returncode == 0, done.stderr[-3000:]
            stamp.touch()
    return cache


def run_node(client_dir: Path, *args: str, script: str = "run.mjs") -> dict[str, Any]:
    """Run ``client_dir/<script>`` with ``args``; its last stdout line, read as JSON."""
    node = shutil.which("node")
    assert node is not None, "node is needed: install Node 20"
    done = subprocess.run(
        [node, str(client_dir / script), *args],
        cwd=client_dir,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]
