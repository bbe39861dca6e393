"""``pytest --no-system-installs``: a missing system program skips the tests that need it,
and the run ends listing them -- never a silent pass (issue 32, item 9)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests._support import redis_server
from tests._support.system import ENV_FLAG, PREFIX

ROOT = Path(__file__).resolve().parents[2]


def test_a_missing_program_skips_with_what_would_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(ENV_FLAG, "1")
    monkeypatch.setattr(redis_server.shutil, "which", lambda name: None)
    with pytest.raises(pytest.skip.Exception, match=PREFIX + "redis-server"):
        redis_server.redis_server_binary()


NEEDS_REDIS = """
from tests._support.redis_server import redis_server_binary

def test_needs_redis(monkeypatch):
    import shutil
    monkeypatch.setattr(shutil, "which", lambda name: None)
    redis_server_binary()

def test_needs_nothing():
    pass
"""


def test_the_run_lists_what_it_did_not_run(tmp_path: Path) -> None:
    (tmp_path / "test_sample.py").write_text(NEEDS_REDIS)
    flags = ["-p", "tests.conftest", "--no-system-installs", "-n", "0", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *flags, "--rootdir", str(tmp_path), str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "NOT RUN: --no-system-installs" in done.stdout, done.stdout
    assert "test_sample.py::test_needs_redis: needs redis-server" in done.stdout
    assert "1 tests were not run" in done.stdout
