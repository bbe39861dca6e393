"""``uamp serve --payment-token`` and ``uamp chat --payment-token``: real subprocesses."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[3]
ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


@pytest.fixture(scope="module")
def paid_server() -> Iterator[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "uamp_trio", "serve", "--port", "0", "--payment-token", "tok_ok"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env=ENV,
    )
    assert proc.stdout is not None
    url = None
    for line in proc.stdout:
        found = re.search(r"serving on (http://[\d.]+:\d+)", line)
        if found:
            url = found.group(1)
            break
    try:
        assert url is not None, "uamp serve did not start"
        yield url
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:  # pragma: no cover
            proc.kill()


def chat(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "uamp_trio", "chat", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=ENV,
        timeout=30,
    )


def test_serve_with_payment_token_requires_payment_on_completions(paid_server: str) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}]}
    refused = httpx.post(f"{paid_server}/v1/chat/completions", json=body)
    assert refused.status_code == 402
    assert refused.json()["context"]["accepts"][0]["scheme"] == "token"
    paid = httpx.post(
        f"{paid_server}/v1/chat/completions", json=body, headers={"X-PAYMENT": "tok_ok"}
    )
    assert paid.status_code == 200


def test_chat_without_a_token_reports_payment_and_fails(paid_server: str) -> None:
    done = chat(paid_server, "--once", "hello")
    assert done.returncode == 1
    assert "[payment] 0.01 USD required" in done.stdout


def test_chat_with_a_wrong_token_reports_the_refusal(paid_server: str) -> None:
    done = chat(paid_server, "--once", "hello", "--payment-token", "tok_bad")
    assert done.returncode == 1
    assert "token_invalid" in done.stdout


def test_chat_with_the_right_token_pays_and_gets_the_answer(paid_server: str) -> None:
    done = chat(paid_server, "--once", "hello", "--payment-token", "tok_ok")
    assert done.returncode == 0, done.stderr
    assert "You said: hello" in done.stdout
