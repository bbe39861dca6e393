"""``bench/cluster.py`` at a tiny size, so it keeps working: the figures themselves are in
docs/scale-out.md, never asserted here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_cluster_bench_runs_and_counts_what_it_measures() -> None:
    tiny = "--nodes 1,2 --clients 1 --turns 1 --deltas 50 --short-turns 3 --idle 3 --resumers 4"
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "cluster.py"), "--json", *tiny.split()],
        capture_output=True,
        timeout=240,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    rows = [json.loads(line) for line in done.stdout.decode().splitlines() if line.strip()]
    assert [r["nodes"] for r in rows] == [1, 2]
    for row in rows:
        for phase in ("stream", "turns"):
            figures = row[phase]
            assert figures["deltas"] == figures["expected"] > 0  # every delta arrived
            assert len(figures["node_cpu_share"]) == row["nodes"]
            assert figures["node_cpu_us_per_delta"] > 0 and figures["deltas_per_s"] > 0
        assert row["idle"]["sessions"] == 3 * row["nodes"]
    assert "resume" not in rows[0]  # one node: nobody to resume on
    resume = rows[1]["resume"]
    # Round-robin over two nodes: some of the four clients were on the killed one,
    # and each of those resumed and heard how its response went on.
    assert 1 <= resume["dropped"] < resume["clients"] == 4
    assert resume["resumed_ms"]["n"] == resume["goes_on_ms"]["n"] == resume["dropped"]
    assert set(resume["outcomes"]) <= {"completed", "interrupted"}
