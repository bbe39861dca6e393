"""The decoder fuzz (bench/fuzz.py) on a few thousand inputs per parser.

``bench/fuzz.py`` with no arguments runs 1,000,000 per parser (the long run).
"""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_each_parser_fails_only_in_documented_ways() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "fuzz.py"), "--count", "2500", "--seed", "14"],
        capture_output=True,
        timeout=300,
        check=False,
    )
    out = done.stdout.decode()
    assert done.returncode == 0, out + done.stderr.decode()[-2000:]
    lines = {line.split(":", 1)[0]: line for line in out.splitlines()}
    assert set(lines) == {"head", "ws", "event", "sse"}, out
    for line in lines.values():
        assert "2,500 inputs" in line and "only documented errors" in line, line
    # The comparisons ran, not only the refusals.
    accepted = re.search(r"read as h11 reads it: ([\d,]+)", lines["head"])
    round_trips = re.search(r"decoded and round-tripped: ([\d,]+)", lines["event"])
    assert accepted is not None and round_trips is not None, out
    assert "closed 1002" in lines["ws"] and "closed 1007" in lines["ws"], lines["ws"]


def test_a_finding_is_reported_with_its_input(monkeypatch: pytest.MonkeyPatch) -> None:
    # A check that meets an undocumented exception names the parser, the
    # input number and the seed, and the run fails.
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    bench_fuzz = importlib.import_module("fuzz")

    def broken(rng: object) -> str:
        raise KeyError("boom")

    monkeypatch.setitem(bench_fuzz.PARSERS, "broken", broken)
    with pytest.raises(bench_fuzz.Finding, match=r"broken input #0 \(seed 5\): undocumented"):
        bench_fuzz.fuzz("broken", 3, seed=5)
    assert bench_fuzz.main(["--count", "2", "--only", "head"]) == 0
