"""Node clients for interop tests: ``npm ci`` from a lock file into the test cache."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any


def install_client(source: Path, cache: Path) -> Path:
    """Copy an npm client folder to ``cache`` and ``npm ci`` there (again when the lock changes)."""
    lock = (source / "package-lock.json").read_bytes()
    stamp = cache / ".lock-sha256"
    digest = hashlib.sha256(lock).hexdigest()
    cache.mkdir(parents=True, exist_ok=True)
    for name in ("package.json", "package-lock.json", "run.mjs"):
        shutil.copyfile(source / name, cache / name)
    if not (stamp.exists() and stamp.read_text() == digest and (cache / "node_modules").is_dir()):
        npm = shutil.which("npm")
        assert npm is not None, "npm is needed: install Node 20 with npm"
        done = subprocess.run(
            [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund"],
            cwd=cache,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        stamp.write_text(digest)
    return cache


def run_node(client_dir: Path, *args: str) -> dict[str, Any]:
    """Run ``client_dir/run.mjs`` with ``args``; its last stdout line, read as JSON."""
    node = shutil.which("node")
    assert node is not None, "node is needed: install Node 20"
    done = subprocess.run(
        [node, str(client_dir / "run.mjs"), *args],
        cwd=client_dir,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]
