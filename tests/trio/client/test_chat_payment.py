"""``uamp tokens``, ``uamp serve --ledger`` and ``uamp chat --payment-token``: real subprocesses."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests._support.cli import uamp, uamp_serve


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ledger") / "ledger.db"


@pytest.fixture(scope="module")
def token(ledger: Path) -> str:
    issued = uamp("tokens", "issue", "--ledger", str(ledger), "--amount", "1.00")
    assert issued.returncode == 0, issued.stderr
    lines = issued.stdout.splitlines()
    assert len(lines) == 1  # the token and nothing else
    return lines[0]


@pytest.fixture(scope="module")
def paid_server(ledger: Path, token: str) -> Iterator[str]:
    with uamp_serve("--ledger", str(ledger)) as url:
        yield url


def chat(*args: str) -> subprocess.CompletedProcess[str]:
    return uamp("chat", *args)


def show(ledger: Path, token: str) -> dict[str, object]:
    shown = uamp("tokens", "show", "--ledger", str(ledger), token)
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout)  # type: ignore[no-any-return]


def test_serve_with_a_ledger_requires_payment_on_completions(
    paid_server: str, ledger: Path, token: str
) -> None:
    before = show(ledger, token)
    body = {"messages": [{"role": "user", "content": "hi"}]}
    refused = httpx.post(f"{paid_server}/v1/chat/completions", json=body)
    assert refused.status_code == 402
    assert refused.json()["error"]["accepts"][0]["scheme"] == "token"
    assert refused.json()["error"]["code"] == "payment_required"
    bad = httpx.post(
        f"{paid_server}/v1/chat/completions", json=body, headers={"X-PAYMENT": "tok_bad"}
    )
    assert bad.status_code == 402 and bad.json()["error"]["code"] == "token_invalid"
    paid = httpx.post(f"{paid_server}/v1/chat/completions", json=body, headers={"X-PAYMENT": token})
    assert paid.status_code == 200
    after = show(ledger, token)
    assert after["locked"] == "0.00"
    spent = float(after["settled"]) - float(before["settled"])  # type: ignore[arg-type]
    assert spent == pytest.approx(0.01)


def test_chat_without_a_token_reports_payment_and_fails(paid_server: str) -> None:
    done = chat(paid_server, "--once", "hello")
    assert done.returncode == 1
    assert "[payment] 0.01 USD required" in done.stdout


def test_chat_with_a_wrong_token_reports_the_refusal(paid_server: str) -> None:
    done = chat(paid_server, "--once", "hello", "--payment-token", "tok_bad")
    assert done.returncode == 1
    assert "token_invalid" in done.stdout


def test_chat_with_the_right_token_pays_and_gets_the_answer(
    paid_server: str, ledger: Path, token: str
) -> None:
    before = show(ledger, token)
    done = chat(paid_server, "--once", "hello", "--payment-token", token)
    assert done.returncode == 0, done.stderr
    assert "You said: hello" in done.stdout
    after = show(ledger, token)
    assert after["locked"] == "0.00"
    spent = float(after["settled"]) - float(before["settled"])  # type: ignore[arg-type]
    assert spent == pytest.approx(0.01)


def test_tokens_commands_fail_in_one_line(tmp_path: Path, ledger: Path, token: str) -> None:
    missing = uamp("tokens", "show", "--ledger", str(tmp_path / "none.db"), token)
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1
    assert "no ledger at" in missing.stderr
    forged = uamp("tokens", "show", "--ledger", str(ledger), token[:-4] + "AAAA")
    assert forged.returncode == 1 and "token_invalid" in forged.stderr
    assert "Traceback" not in forged.stderr
    topped = uamp("tokens", "top-up", "--ledger", str(ledger), token, "--amount", "0.50")
    assert topped.returncode == 0, topped.stderr
    assert json.loads(topped.stdout)["topped_up"] == "0.50"
