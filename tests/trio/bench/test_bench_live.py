"""``uamp bench`` against a real server on 127.0.0.1: its figures against what the server saw.

In-process: a counting agent served by :class:`~uamp_trio.engines.server.Server`
and :func:`~uamp_trio.bench.run_bench` in the same trio loop, over real
sockets. As a command: ``uamp bench`` against ``uamp serve``, both
subprocesses, with ``--json`` and ``--plot``.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import httpx
import orjson
import pytest

from tests._support.agents import TestAgent
from tests._support.cli import uamp, uamp_serve
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.responder import Emit, TurnRequest
from uamp_trio.app import create_app
from uamp_trio.bench import BenchConfig, run_bench
from uamp_trio.trust.auth import APIKeyAuthenticator

WORDS = ("alpha ", "beta ", "gamma ", "delta ", "omega")


class Counting(TestAgent):
    """Says :data:`WORDS`, one delta each, and counts the turns it served and the prompts."""

    name = "count"

    def __init__(self) -> None:
        self.turns = 0
        self.prompts: list[str] = []
        self.server: Any = None
        #: The server's connections open during its turns (those that carried them).
        self.connections: set[Any] = set()

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        self.turns += 1
        if self.server is not None:
            self.connections.update(self.server._connections)
        self.prompts.append(request.messages[-1].text)
        for word in WORDS:
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text=word)))


async def _served(serve_app: Any) -> tuple[Counting, str]:
    agent = Counting()
    server = agent.server = await serve_app(create_app([agent]))
    return agent, server.url


async def _one_body(url: str, stream: bool) -> int:
    """The bytes of one response as a plain httpx request reads them."""
    async with httpx.AsyncClient() as client:
        body = {"model": "count", "messages": [{"role": "user", "content": "hi"}]}
        response = await client.post(url, json={**body, "stream": stream})
        return len(response.content)


@pytest.mark.parametrize(("stream", "http2"), [(True, False), (False, False), (True, True)])
async def test_the_counts_match_what_the_server_saw(
    serve_app: Any, stream: bool, http2: bool
) -> None:
    agent, base = await _served(serve_app)
    config = BenchConfig(
        url=base + "/agents/count",
        concurrency=4,
        requests=23,
        prompt="how many?",
        stream=stream,
        http2=http2,
    )
    summary, samples = await run_bench(config)
    data = summary.to_json()
    assert agent.turns == 23 == data["requests"] == data["ok"]
    assert agent.prompts == ["how many?"] * 23
    assert data["errors"] == 0 and data["errors_by_kind"] == {}
    # Keep-alive: a connection per worker at most, streamed or not (a streamed
    # body is read to its end after [DONE], so httpx keeps its connection).
    assert 1 <= len(agent.connections) <= 4
    # Streamed: one delta per word; not streamed: the whole message is one.
    per_response = len(WORDS) if stream else 1
    assert data["deltas"] == 23 * per_response
    assert all(s.text == len("".join(WORDS)) for s in samples)
    one = await _one_body(base + "/agents/count/v1/chat/completions", stream)
    assert data["bytes"] == 23 * one
    assert data["protocols"] == (["HTTP/2"] if http2 else ["HTTP/1.1"])
    assert data["url"] == base + "/agents/count/v1/chat/completions"
    for key in ("ttfd_ms", "itl_ms", "e2e_ms"):
        assert set(data[key]) == {"p50", "p90", "p95", "p99", "p99.9", "mean"}
    assert 0 < data["ttfd_ms"]["p50"] <= data["e2e_ms"]["p50"]
    assert data["requests_per_s"] == pytest.approx(23 / data["duration_s"])
    if not stream:
        assert data["itl_ms"]["p50"] is None


async def test_the_native_websocket_counts_match(serve_app: Any) -> None:
    agent, base = await _served(serve_app)
    config = BenchConfig(url=base, agent="count", transport="uamp-ws", concurrency=3, requests=10)
    summary, samples = await run_bench(config)
    data = summary.to_json()
    assert agent.turns == 10 == data["ok"]
    assert data["deltas"] == 10 * len(WORDS)
    # Bytes: each request's own (the same answer every time, so sizes differ
    # only by ids and counters), at least its events' JSON, summed in the report.
    sizes = [s.bytes for s in samples]
    assert min(sizes) > len(WORDS) * len('{"type":"response.delta"}') + len("".join(WORDS))
    assert max(sizes) < 1.2 * min(sizes)
    assert data["bytes"] == sum(sizes)
    assert data["protocols"] == ["websocket"]
    assert data["url"] == base.replace("http://", "ws://") + "/ws"
    assert data["itl_ms"]["p50"] is not None


@pytest.mark.parametrize(
    ("transport", "endpoint"),
    [
        ("uamp-sse", "http://{}/agents/count/events"),
        ("acp", "ws://{}/agents/count/acp/stream"),
        ("mcp", "http://{}/agents/count/mcp"),
        ("envelope-http", "http://{}/agents/count/v1/messages"),
        ("envelope-ws", "ws://{}/agents/count/uamp/1/ws"),
    ],
)
async def test_session_transports_count_match(
    serve_app: Any, transport: str, endpoint: str
) -> None:
    agent, base = await _served(serve_app)
    config = BenchConfig(url=base, agent="count", transport=transport, concurrency=3,
                         requests=10, prompt="again?")  # fmt: skip
    summary, samples = await run_bench(config)
    data = summary.to_json()
    assert agent.turns == 10 == data["ok"], data["errors_by_kind"]
    assert agent.prompts == ["again?"] * 10
    assert data["deltas"] == 10 * len(WORDS)
    assert all(s.text == len("".join(WORDS)) and s.bytes > s.text for s in samples)
    assert data["bytes"] == sum(s.bytes for s in samples)
    assert data["url"] == endpoint.format(base.removeprefix("http://"))
    # An agent that is not there: each try counts as an error.
    other = attrs.evolve(config, agent="nobody", requests=2)
    data = (await run_bench(other))[0].to_json()
    assert data["ok"] == 0 and sum(data["errors_by_kind"].values()) == 2, data


@pytest.mark.parametrize(
    ("transport", "route"),
    [("agui", "agui"), ("a2a", "a2a"), ("a2a-0.3", "a2a"), ("ai-sdk", "ai-sdk")],
)
async def test_agui_and_a2a_counts_match(serve_app: Any, transport: str, route: str) -> None:
    agent, base = await _served(serve_app)
    config = BenchConfig(
        url=base, agent="count", transport=transport, concurrency=3, requests=9, prompt="hey"
    )
    summary, samples = await run_bench(config)
    data = summary.to_json()
    assert agent.turns == 9 == data["ok"], data["errors_by_kind"]
    assert agent.prompts == ["hey"] * 9
    # One delta per word: A2A's closing chunk repeats the whole text and is not one.
    assert data["deltas"] == 9 * len(WORDS)
    assert all(s.text == len("".join(WORDS)) for s in samples)
    assert data["url"] == f"{base}/agents/count/{route}"
    assert data["bytes"] > 0


@pytest.mark.parametrize("stream", [True, False])
async def test_anthropic_counts_match(serve_app: Any, stream: bool) -> None:
    agent, base = await _served(serve_app)
    config = BenchConfig(
        url=base + "/agents/count", transport="anthropic", concurrency=3, requests=9,
        prompt="hey", stream=stream,
    )  # fmt: skip
    summary, samples = await run_bench(config)
    data = summary.to_json()
    assert agent.turns == 9 == data["ok"], data["errors_by_kind"]
    assert agent.prompts == ["hey"] * 9
    assert data["deltas"] == 9 * (len(WORDS) if stream else 1)
    assert all(s.text == len("".join(WORDS)) for s in samples)
    assert data["url"] == f"{base}/agents/count/v1/messages"


@pytest.mark.parametrize("stream", [True, False])
async def test_responses_counts_match(serve_app: Any, stream: bool) -> None:
    agent, base = await _served(serve_app)
    config = BenchConfig(url=base + "/agents/count", transport="responses", concurrency=3,
                         requests=9, prompt="hey", stream=stream)  # fmt: skip
    summary, samples = await run_bench(config)
    data = summary.to_json()
    assert agent.turns == 9 == data["ok"], data["errors_by_kind"]
    assert agent.prompts == ["hey"] * 9
    assert data["deltas"] == (9 * len(WORDS) if stream else 9)
    assert all(s.text == len("".join(WORDS)) for s in samples)
    assert data["url"] == f"{base}/agents/count/v1/responses"
    # Another model name is OpenAI's 404: each request counts as an error.
    other = attrs.evolve(config, model="nobody", requests=2)
    data = (await run_bench(other))[0].to_json()
    assert data["ok"] == 0 and sum(data["errors_by_kind"].values()) == 2


async def test_realtime_counts_match(serve_app: Any) -> None:
    agent, base = await _served(serve_app)
    config = BenchConfig(url=base + "/agents/count", transport="realtime", concurrency=2,
                         requests=8, prompt="hey")  # fmt: skip
    summary, samples = await run_bench(config)
    data = summary.to_json()
    assert agent.turns == 8 == data["ok"], data["errors_by_kind"]
    assert agent.prompts == ["hey"] * 8  # the user message each request added
    assert data["deltas"] == 8 * len(WORDS)
    assert all(s.text == len("".join(WORDS)) for s in samples)
    assert data["url"] == base.replace("http://", "ws://") + "/agents/count/realtime"
    assert data["protocols"] == ["websocket"]
    assert all(s.bytes > len("".join(WORDS)) for s in samples)
    assert data["bytes"] == sum(s.bytes for s in samples)
    # An agent that is not there: the server refuses the upgrade, each try counts.
    other = BenchConfig(url=base + "/agents/nobody", transport="realtime", requests=2)
    data = (await run_bench(other))[0].to_json()
    assert data["ok"] == 0 and sum(data["errors_by_kind"].values()) == 2


async def test_a_duration_bounds_the_run(serve_app: Any) -> None:
    agent, base = await _served(serve_app)
    config = BenchConfig(url=base + "/agents/count", concurrency=2, requests=None, duration=0.4)
    summary, _ = await run_bench(config)
    data = summary.to_json()
    assert 0.4 <= data["duration_s"] < 5
    assert data["requests"] == agent.turns > 0


async def test_errors_are_counted_by_kind(serve_app: Any) -> None:
    agent, base = await _served(serve_app)
    config = BenchConfig(url=base + "/agents/nobody", concurrency=2, requests=6)
    data = (await run_bench(config))[0].to_json()
    assert data["errors_by_kind"] == {"http_404": 6} and data["ok"] == 0
    assert agent.turns == 0
    ws = BenchConfig(url=base, agent="nobody", transport="uamp-ws", concurrency=1, requests=2)
    data = (await run_bench(ws))[0].to_json()
    assert data["errors_by_kind"] == {"agent_offline": 2}  # UAMP 6.3
    for transport in ("agui", "a2a"):
        other = BenchConfig(url=base + "/agents/nobody", transport=transport, requests=2)
        data = (await run_bench(other))[0].to_json()
        assert data["errors_by_kind"] == {"http_404": 2}, transport


async def test_a_refused_connection_is_a_connect_error() -> None:
    for transport in ("openai", "uamp-ws"):
        config = BenchConfig(url="http://127.0.0.1:9", transport=transport, requests=2)
        data = (await run_bench(config))[0].to_json()
        assert data["errors_by_kind"] == {"connect": 2}, transport


@pytest.mark.parametrize("transport", ["openai", "uamp-ws"])
async def test_auth_headers_reach_the_server(serve_app: Any, transport: str) -> None:
    agent = Counting()
    auth = APIKeyAuthenticator([("bencher", "s3cret")])
    base = (await serve_app(create_app([agent], authenticator=auth))).url
    refused = BenchConfig(url=base + "/agents/count", transport=transport, requests=2)
    data = (await run_bench(refused))[0].to_json()
    assert data["ok"] == 0 and agent.turns == 0
    assert data["errors_by_kind"] == {"http_401" if transport == "openai" else "unauthorized": 2}
    allowed = attrs.evolve(refused, headers=(("Authorization", "Bearer s3cret"),))
    data = (await run_bench(allowed))[0].to_json()
    assert data["ok"] == 2 and agent.turns == 2


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    with uamp_serve() as url:
        yield url


def test_the_command_writes_json_a_plot_and_compares(server_url: str, tmp_path: Path) -> None:
    runs = []
    for name, extra in (("a", ()), ("b", ("--transport", "uamp-ws"))):
        out = tmp_path / f"{name}.json"
        done = uamp(
            "bench", server_url, "--agent", "demo", "-c", "3", "-n", "12",
            "--json", str(out), "--plot", str(tmp_path / f"{name}.png"), *extra,
            timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "time to first delta" in done.stdout and "requests/s" in done.stdout
        assert "\x1b[" not in done.stderr  # no progress bar when stderr is not a terminal
        data = orjson.loads(out.read_bytes())
        assert data["requests"] == data["ok"] == 12 and data["errors"] == 0
        assert data["deltas"] >= 12 and data["deltas_per_s"] > 0
        assert (tmp_path / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        runs.append(data)
    assert runs[1]["transport"] == "uamp-ws"
    done = uamp("bench", "--compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"))
    assert done.returncode == 0, done.stderr
    ratio = runs[1]["requests_per_s"] / runs[0]["requests_per_s"]
    row = next(line for line in done.stdout.splitlines() if "requests/s" in line)
    assert f"{ratio:.2f}x" in row


def test_the_command_exits_1_on_errors_and_2_on_bad_arguments(server_url: str) -> None:
    failed = uamp("bench", server_url + "/agents/nobody", "-n", "3", timeout=60)
    assert failed.returncode == 1
    assert "http_404" in failed.stdout
    bad = uamp("bench", server_url, "--duration", "soon")
    assert bad.returncode == 2 and "not a duration" in bad.stderr
    missing = uamp("bench", "--compare", "/nonexistent/a.json", "/nonexistent/b.json")
    assert missing.returncode == 2


async def test_acp_over_stdio_runs_an_agent_process_per_worker() -> None:
    command = shlex.join([sys.executable, "-m", "uamp_trio", "acp"])
    config = BenchConfig(url=command, transport="acp-stdio", concurrency=2, requests=6,
                         prompt="one two three", turns=2)  # fmt: skip
    summary, samples = await run_bench(config)
    data = summary.to_json()
    assert data["ok"] == 6, data["errors_by_kind"]
    # The demo agent's "You said: one two three", a word per delta, on every turn.
    assert data["deltas"] == 6 * 5 and all(
        s.text == len("You said: one two three") for s in samples
    )
    assert all(s.bytes > s.text for s in samples) and data["bytes"] == sum(s.bytes for s in samples)
    assert data["protocols"] == ["stdio"] and data["url"] == command
    # Two turns a conversation (however the two workers shared the six requests).
    turns: dict[str | None, list[int | None]] = {}
    for sample in sorted(samples, key=lambda s: s.start):
        turns.setdefault(sample.conversation, []).append(sample.turn)
    assert all(t in ([0], [0, 1]) for t in turns.values()) and len(turns) >= 3, turns


@pytest.mark.parametrize(
    ("argv", "kind"),
    [(["/nonexistent/agent"], "spawn"), ([sys.executable, "-c", "pass"], "initialize")],
)
async def test_an_agent_command_that_fails_counts_as_errors(argv: list[str], kind: str) -> None:
    config = BenchConfig(url=shlex.join(argv), transport="acp-stdio", concurrency=1, requests=2)
    data = (await run_bench(config))[0].to_json()
    assert data["ok"] == 0 and data["errors_by_kind"] == {kind: 2}
