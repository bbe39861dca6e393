"""bench/compare.py at its smallest: one workload, one rate, one second, every protocol.

The three servers really run (uamp serve, webagents 0.3.9 and pydantic-ai,
the peers installed into the tests' cache from the package index on first
use), each driven by the real ``uamp bench``; the test checks that every
run answered without error and that the report, the plots and the published
page section come out, so the comparison in docs/bench.md cannot rot.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from tests._support.cache import cache_folder

ROOT = Path(__file__).resolve().parents[2]


def test_compare_smallest_run(tmp_path: Path) -> None:
    doc = tmp_path / "docs" / "bench.md"
    (doc.parent / "img").mkdir(parents=True)
    shutil.copy(ROOT / "docs" / "bench.md", doc)
    before = doc.read_text()
    out = tmp_path / "out"
    argv = [
        sys.executable, str(ROOT / "bench" / "compare.py"), "--rates", "4", "--duration", "1s",
        "--warmup", "0", "-c", "2", "--workloads", "tool+20", "--out", str(out),
        "--cache", str(cache_folder("peers").parent), "--publish", "--doc", str(doc),
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, timeout=900, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr.decode()[-3000:]

    figures = json.loads((out / "compare.json").read_text())
    seen = {(r["protocol"], r["server"], r["load"]) for r in figures["runs"]}
    assert seen == {
        (protocol, server, load)
        for protocol, servers in (
            ("Chat Completions", ("uamp", "webagents")),
            ("AG-UI", ("uamp", "pydantic-ai")),
            ("A2A", ("uamp", "pydantic-ai")),
        )
        for server in servers
        for load in ("4/s", "closed c=2")
    }
    for r in figures["runs"]:
        assert r["requests"] > 0 and r["ok"] == r["requests"], r
        assert r["e2e_ms"]["p50"] > 0, r
        assert r["server_cpu_ms_per_request"] is not None, r
        assert (out / "runs" / r["summary"]).exists()
    assert figures["versions"]["webagents"] == "0.3.9"

    report = (out / "compare.md").read_text()
    assert "| tool+20 | 4/s |" in report and "| tool+20 | closed c=2 |" in report
    for name in ("chat-completions", "ag-ui", "a2a"):
        name = f"bench-compare-{name}.png"
        assert (out / name).read_bytes()[:4] == b"\x89PNG"
        assert (doc.parent / "img" / name).read_bytes() == (out / name).read_bytes()

    # The page changed between its markers only, and now shows the tables and plots.
    after = doc.read_text()
    head, tail = before.split("<!-- compare:begin -->")[0], before.split("<!-- compare:end -->")[1]
    assert after.startswith(head) and after.endswith(tail)
    assert "| tool+20 | 4/s |" in after and "(img/bench-compare-ag-ui.png)" in after
