"""``GET /metrics`` of a real ``uamp serve`` after real traffic, read with prometheus' parser."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from websockets.sync.client import connect as ws_connect

from tests._support.cli import Served, uamp

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(base: str) -> Samples:
    r = httpx.get(f"{base}/metrics", timeout=10)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


@pytest.fixture
def paid(tmp_path: Path) -> Iterator[tuple[str, str]]:
    ledger = tmp_path / "ledger.db"
    issued = uamp("tokens", "issue", "--ledger", str(ledger), "--amount", "1.00")
    assert issued.returncode == 0, issued.stderr
    token = issued.stdout.strip()
    command = [
        *("serve", "--port", "0", "--agent", "uamp_trio.demo:DemoAgent"),
        *("--ledger", str(ledger), "--price", "0.01"),
    ]
    with Served([sys.executable, "-m", "uamp", *command]) as srv:
        yield srv.url(), token


def test_metrics_count_real_traffic(paid: tuple[str, str]) -> None:
    base, token = paid
    url = f"{base}/agents/demo/chat/completions"
    pay = {"X-PAYMENT": token}
    said = {"messages": [{"role": "user", "content": "hi"}]}  # "You said: hi": 3 deltas
    streamed = {"stream": True, "messages": [{"role": "user", "content": "hello there"}]}  # 4
    assert httpx.post(url, json=said, headers=pay, timeout=10).status_code == 200
    with httpx.stream("POST", url, json=streamed, headers=pay, timeout=10) as r:
        assert r.status_code == 200
        body = r.read().decode()
    assert "data: [DONE]" in body  # (a payment.balance event may follow it)
    assert httpx.post(url, json=said, timeout=10).status_code == 402  # unpaid
    # Agents the server does not host: each name a client makes up would be
    # a label of its own without end; they are counted under one label.
    for i in range(50):
        assert httpx.get(f"{base}/agents/nobody{i}/v1/models", timeout=10).status_code == 404

    samples = scrape(base)
    completions = {"transport": "completions", "agent": "demo"}
    assert value(samples, "uamp_requests_total", status="200", **completions) == 2
    assert value(samples, "uamp_requests_total", status="402", **completions) == 1
    assert value(samples, "uamp_errors_total", **completions) == 1  # the 402
    unknown = {"agent": "(unknown)", "code": "agent_not_found"}
    assert value(samples, "uamp_errors_total", **unknown) == 50
    agents = {dict(labels).get("agent") for _, labels in samples}
    assert not {a for a in agents if a and a.startswith("nobody")}
    assert value(samples, "uamp_deltas_total", **completions) == 7
    assert value(samples, "uamp_time_to_first_delta_seconds_count", **completions) == 2
    assert value(samples, "uamp_request_duration_seconds_count", **completions) == 3
    assert value(samples, "uamp_charged_total", agent="demo", currency="USD") == pytest.approx(0.02)
    assert value(samples, "uamp_open_connections") >= 1
    assert value(samples, "uamp_live_sessions") == 0
    assert value(samples, "uamp_open_streams") == 0
    assert value(samples, "uamp_live_responses") == 0


def test_metrics_see_live_websocket_sessions(paid: tuple[str, str]) -> None:
    base, _token = paid
    ws_url = base.replace("http://", "ws://") + "/ws"
    create = {
        "type": "session.create",
        "uamp_version": "1.0",
        "agent": "demo",
        "session": {"modalities": ["text"]},
    }
    with ws_connect(ws_url) as ws:
        ws.send(json.dumps(create))
        first = json.loads(ws.recv(timeout=10))
        assert first["type"] == "session.created", first
        samples = scrape(base)
        assert value(samples, "uamp_live_sessions") == 1
        assert value(samples, "uamp_open_streams", transport="uamp_ws") == 1
    after = scrape(base)
    assert value(after, "uamp_live_sessions") == 0
    assert value(after, "uamp_open_streams", transport="uamp_ws") == 0
    assert value(after, "uamp_requests_total", transport="uamp_ws", status="101") == 1


def test_metrics_count_ai_sdk_answers(paid: tuple[str, str]) -> None:
    base, token = paid
    url = f"{base}/agents/demo/ai-sdk"
    user = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hello there"}]}
    chat = {"id": "metrics-chat", "messages": [user]}
    with httpx.stream("POST", url, json=chat, headers={"X-PAYMENT": token}, timeout=10) as r:
        assert r.status_code == 200
        assert r.read().endswith(b"data: [DONE]\n\n")
    assert httpx.post(url, json=chat, timeout=10).status_code == 402  # unpaid
    samples = scrape(base)
    ai_sdk = {"transport": "ai_sdk", "agent": "demo"}
    assert value(samples, "uamp_requests_total", status="200", **ai_sdk) == 1
    assert value(samples, "uamp_requests_total", status="402", **ai_sdk) == 1
    assert value(samples, "uamp_deltas_total", agent="demo") == 4  # "You said: hello there"
    assert value(samples, "uamp_charged_total", agent="demo", currency="USD") == pytest.approx(0.01)
    assert value(samples, "uamp_live_responses") == 0
