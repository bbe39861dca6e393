"""``GET /metrics`` of uamp_asgi under uvicorn: uamp serve's instruments, from real traffic."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

import uamp_asgi
from tests._support.asgi import uvicorn_server
from uamp_asgi.responders import function_agent
from uamp_trio.client import connect
from uamp_trio.trust.auth import APIKeyAuthenticator

from .test_uamp_ws import echo

KEY = {"authorization": "Bearer sk-a"}


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    config = uamp_asgi.Config(authenticator=APIKeyAuthenticator([("alice", "sk-a")]), metrics=True)
    with uvicorn_server(uamp_asgi.app(function_agent(echo), config=config)) as url:
        yield url


def _samples(base: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    resp = httpx.get(f"{base}/metrics", headers=KEY)
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(resp.text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_requests_runs_and_streams_are_counted(base: str) -> None:
    assert httpx.get(f"{base}/metrics").status_code == 401  # behind the authenticator
    client = openai.OpenAI(base_url=f"{base}/agents/echo", api_key="sk-a", max_retries=0)
    ask = {"model": "echo", "messages": [{"role": "user", "content": "hi"}]}
    assert client.chat.completions.create(**ask).choices[0].message.content == "You said: hi"  # type: ignore[call-overload]
    chunks = list(client.chat.completions.create(**ask, stream=True))  # type: ignore[call-overload]
    assert chunks
    missing = httpx.get(f"{base}/agents/nobody/v1/models", headers=KEY)
    assert missing.status_code == 404

    async def uamp() -> None:
        with trio.fail_after(20):
            async with connect(
                f"{base.replace('http', 'ws')}/agents/echo/uamp", headers=list(KEY.items())
            ) as c:
                session = await c.create_session()
                assert (await session.ask("ws")).text == "You said: ws"

    trio.run(uamp)
    got = _samples(base)

    def value(name: str, **labels: str) -> float:
        return got.get((name, tuple(sorted(labels.items()))), 0.0)

    completions = {"transport": "completions", "agent": "echo"}
    assert value("uamp_requests_total", **completions, status="200") == 2
    assert value("uamp_requests_total", transport="uamp", agent="echo", status="101") == 1
    # A name the client made up is one label, not a new series per name.
    assert (
        value("uamp_requests_total", transport="completions", agent="(unknown)", status="404") == 1
    )
    assert (
        value(
            "uamp_errors_total", transport="completions", agent="(unknown)", code="agent_not_found"
        )
        == 1
    )
    # Each run's two deltas ("You said: " and the text), counted under its transport.
    assert value("uamp_deltas_total", **completions) == 4
    assert value("uamp_deltas_total", transport="uamp", agent="echo") == 2
    assert value("uamp_time_to_first_delta_seconds_count", **completions) == 2
    assert value("uamp_live_responses", agent="echo") == 0
    assert value("uamp_open_streams", transport="completions") == 0
    assert value("uamp_open_streams", transport="uamp") == 0


def test_metrics_are_off_unless_asked() -> None:
    with uvicorn_server(uamp_asgi.app(function_agent(echo))) as url:
        assert httpx.get(f"{url}/metrics").status_code == 404
