"""``uamp ledger migrate``, ``uamp tokens`` and two ``uamp serve`` sharing one PostgreSQL ledger."""

from __future__ import annotations

import json
import sys
from decimal import Decimal

import httpx

from tests._support.cli import Served, uamp


def test_migrate_then_tokens_then_two_servers_charge_one_balance(postgres_url: str) -> None:
    refused = uamp("tokens", "issue", "--ledger", postgres_url, "--amount", "1.00")
    assert refused.returncode == 1
    assert "uamp ledger migrate" in refused.stderr and len(refused.stderr.splitlines()) == 1

    first = uamp("ledger", "migrate", "--ledger", postgres_url)
    assert first.returncode == 0, first.stderr
    assert "schema version 0 -> 1" in first.stdout
    again = uamp("ledger", "migrate", "--ledger", postgres_url)
    assert "already at version 1" in again.stdout

    issued = uamp("tokens", "issue", "--ledger", postgres_url, "--amount", "1.00")
    assert issued.returncode == 0, issued.stderr
    token = issued.stdout.strip()
    topped = uamp("tokens", "top-up", "--ledger", postgres_url, token, "--amount", "0.50")
    assert json.loads(topped.stdout)["balance"] == "1.50"

    serve = [
        *("serve", "--port", "0", "--agent", "uamp_trio.demo:DemoAgent"),
        *("--ledger", postgres_url, "--price", "0.25"),
    ]
    said = {"messages": [{"role": "user", "content": "hi"}]}
    with (
        Served([sys.executable, "-m", "uamp", *serve]) as a,
        Served([sys.executable, "-m", "uamp", *serve]) as b,
    ):
        codes = []
        for n in range(8):  # alternate servers: one balance of 1.50 is 6 responses of 0.25
            base = (a if n % 2 == 0 else b).url()
            reply = httpx.post(
                f"{base}/agents/demo/chat/completions",
                json=said,
                headers={"X-PAYMENT": token},
                timeout=20,
            )
            codes.append(reply.status_code)
        assert codes == [200] * 6 + [402] * 2
        assert "insufficient_balance" in reply.text
    shown = json.loads(uamp("tokens", "show", "--ledger", postgres_url, token).stdout)
    assert (Decimal(shown["balance"]), Decimal(shown["settled"])) == (Decimal(0), Decimal("1.50"))
    assert Decimal(shown["locked"]) == 0


def test_an_unreachable_ledger_is_one_line_without_the_password() -> None:
    url = "postgresql://uamp:pw-s3cret@127.0.0.1:1/ledger"
    for command in (
        ("ledger", "migrate", "--ledger", url),
        ("tokens", "issue", "--ledger", url, "--amount", "1"),
    ):
        done = uamp(*command)
        assert done.returncode == 1
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "pw-s3cret" not in done.stderr and "127.0.0.1:1" in done.stderr
