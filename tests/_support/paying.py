"""Agents for the payment tests that run ``uamp serve`` as a subprocess (``--agent``)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from .agents import Words

#: Says a word, then works for a minute (long enough to be killed mid-response).
slow = Words("slow", "working", " done", pause=60)


ROOT = Path(__file__).resolve().parents[2]


def start_server(ledger: Path, price: str = "0.25") -> tuple[subprocess.Popen[str], str]:
    """``uamp serve --ledger LEDGER --price PRICE`` serving :data:`slow`; the process and URL."""
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "uamp_trio", "serve", "--port", "0"),
            *("--ledger", str(ledger), "--price", price),
            *("--agent", "tests._support.paying:slow"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        found = re.search(r"serving on (http://[\d.]+:\d+)", line)
        if found:
            return proc, found.group(1)
    raise AssertionError("uamp serve did not start")
