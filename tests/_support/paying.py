"""Agents for the payment tests that run ``uamp serve`` as a subprocess (``--agent``)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from .agents import Words

#: Says a word, then works for a minute (long enough to be killed mid-response).
slow = Words("slow", "working", " done", pause=60)


ROOT = Path(__file__).resolve().parents[2]


def start_server(
    ledger: Path, price: str = "0.25", *flags: str
) -> tuple[subprocess.Popen[str], str]:
    """``uamp serve --ledger LEDGER --price PRICE *flags`` serving :data:`slow`; process, URL."""
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "uamp_trio", "serve", "--port", "0"),
            *("--ledger", str(ledger), "--price", price),
            *("--agent", "tests._support.paying:slow", *flags),
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


@contextmanager
def mid_response(url: str, token: str, body: dict[str, Any]) -> Iterator[httpx.Response]:
    """A streamed Completions request paid with ``token``, held open mid-response.

    The block runs once :data:`slow` has said its first word: the agent is
    working and the response's price is locked.
    """
    with httpx.stream(
        "POST", f"{url}/v1/chat/completions", json=body, headers={"X-PAYMENT": token}
    ) as resp:
        assert resp.status_code == 200
        for chunk in resp.iter_text():
            if "working" in chunk:
                break
        yield resp
