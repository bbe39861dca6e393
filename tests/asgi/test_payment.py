"""Paying for turns on uamp_asgi: uamp serve's ledger (SQLite, through worker threads on asyncio),
configured with uamp serve's own flags (``uamp_trio.asgi_options.serve_options``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

import uamp_asgi
from tests._support.asgi import uvicorn_server
from uamp_asgi.responders import function_agent
from uamp_proto import events as ev
from uamp_proto.responder import TurnRequest
from uamp_trio.asgi_options import serve_options

RUNS: list[str] = []


async def counted(turn: TurnRequest) -> AsyncIterator[str | ev.Event]:
    """Says back what it was told; every run is recorded."""
    RUNS.append(turn.messages[-1].text)
    yield f"You said: {turn.messages[-1].text}"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
    ledger = Path(tmp_path_factory.mktemp("ledger")) / "pay.db"
    options = serve_options(["--ledger", str(ledger), "--price", "0.05", "--api-key", "alice:sk-a"])
    with uvicorn_server(
        uamp_asgi.app(function_agent(counted), config=uamp_asgi.Config(**options))
    ) as url:
        yield url, options["payment_policy"]


def _ask(url: str, text: str, **headers: str) -> httpx.Response:
    return httpx.post(
        f"{url}/agents/counted/chat/completions",
        json={"model": "counted", "messages": [{"role": "user", "content": text}]},
        headers=headers,
        timeout=20,
    )


def test_the_flags_build_the_same_objects_as_uamp_serve(tmp_path: Path) -> None:
    options = serve_options(["--ledger", str(tmp_path / "l.db"), "--api-key", "bob:sk-b"])
    assert type(options["payment_policy"]).__name__ == "LedgerPolicy"
    assert type(options["authenticator"]).__name__ == "APIKeyAuthenticator"
    assert options["response_signer"] is None and options["sse_max_sessions"] == 64
    with pytest.raises(ValueError, match="needs --ledger"):
        serve_options(["--price", "0.10"])


def test_no_agent_runs_unpaid_and_a_paid_turn_is_settled(served: tuple[str, Any]) -> None:
    url, policy = served
    ledger = policy.ledger
    rich, poor = ledger.issue("0.10", "USD"), ledger.issue("0.01", "USD")
    RUNS.clear()
    key = {"authorization": "Bearer sk-a"}
    assert _ask(url, "no key").status_code == 401
    unpaid = _ask(url, "no token", **key)
    assert unpaid.status_code == 402
    short = _ask(url, "too poor", **key, **{"x-payment": poor})
    assert short.status_code == 402
    assert short.json()["error"]["code"] == "insufficient_balance"
    assert _ask(url, "forged", **key, **{"x-payment": poor[:-4] + "AAAA"}).status_code == 402
    assert RUNS == []  # fail closed: nothing ran for a caller that could not pay
    for n in (1, 2):
        paid = _ask(url, f"paid {n}", **key, **{"x-payment": rich})
        assert paid.status_code == 200, paid.text
        assert paid.json()["choices"][0]["message"]["content"] == f"You said: paid {n}"
    assert ledger.show(rich).account.balance == Decimal("0.00")
    assert _ask(url, "spent", **key, **{"x-payment": rich}).status_code == 402
    assert RUNS == ["paid 1", "paid 2"]
    assert ledger.show(poor).account.balance == Decimal("0.01")  # refused: untouched
