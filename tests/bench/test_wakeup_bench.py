"""bench/wakeup.py at its smallest: every server really runs and answers, spaced out and not.

The figures themselves are the bench's business (they move with the
machine); the test checks that each row was measured on its own server,
with the requests answered (a server that failed would stop the client),
and that the JSON holds every row, so docs/performance.md's table can be
remade.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests._support.cache import cache_folder

ROOT = Path(__file__).resolve().parents[2]
ROWS = {
    "asyncio",
    "trio",
    "uamp GET /models",
    "uamp plain",
    "uamp-quiet plain",
    "webagents plain",
}


def test_wakeup_smallest_run(tmp_path: Path) -> None:
    out = tmp_path / "wakeup.json"
    argv = [
        sys.executable, str(ROOT / "bench" / "wakeup.py"), "--back", "20", "--paced", "10",
        "--rate", "200", "--json", str(out), "--cache", str(cache_folder("peers").parent),
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, timeout=900, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    figures = json.loads(out.read_text())
    assert set(figures) == ROWS
    for row in figures.values():
        # Every paced request was answered after a pause: the server slept for it.
        assert row["paced_sleeps"] > 0.5
        assert row["back_us"] >= 0 and row["paced_us"] >= 0
    assert "webagents / uamp plain" in done.stdout.decode()
