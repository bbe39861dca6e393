"""Tool workloads: a dataset's tools and expected tool calls, the client tool calls the bench
answers (Chat Completions, Responses) and the agent's own tool calls it sees, on a real server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from tests._support.cli import uamp, uamp_serve
from tests._support.tools import WEATHER_TOOL
from uamp_agents import agent, tool
from uamp_agents.bridge import serve_agent
from uamp_agents.providers import function
from uamp_trio.app import create_app
from uamp_trio.bench import BenchConfig, run_bench
from uamp_trio.bench.workload import Conversation, parse_dataset
from uamp_trio.demo import DemoAgent

WEATHER = WEATHER_TOOL


def test_a_dataset_line_carries_tools_results_and_expected_calls() -> None:
    lines = [
        {"prompt": "p", "tools": [WEATHER], "tool_results": {"get_weather": "sunny"},
         "expected_tool_calls": ["get_weather"]},
        {"messages": [{"role": "user", "content": "a"},
                      {"role": "user", "content": "b", "expected_tool_calls": ["x"]}],
         "expected_tool_calls": ["y"]},
        {"prompt": "plain"},
    ]  # fmt: skip
    a, b, c = parse_dataset([orjson.dumps(line) for line in lines])
    assert a.tools == (WEATHER,) and a.tool_results == (("get_weather", "sunny"),)
    assert a.expected == (("get_weather",),)
    assert b.expected == (("y",), ("x",)) and b.tools == ()
    assert c == Conversation(("plain",)) and c.expected is None


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ({"tools": [{"name": "x"}]}, "function tools"),
        ({"tools": "x"}, "function tools"),
        ({"tool_results": {"x": 1}}, "tool_results"),
        ({"expected_tool_calls": "x"}, "expected_tool_calls"),
        ({"expected_tool_calls": [""]}, "expected_tool_calls"),
    ],
)
def test_bad_tool_fields_are_refused(extra: dict[str, Any], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_dataset([orjson.dumps({"prompt": "p", **extra})], "t.jsonl")


@pytest.mark.parametrize("transport", ["openai", "responses", "anthropic"])
async def test_the_bench_answers_client_tool_calls_and_checks_them(
    serve_app: Any, transport: str
) -> None:
    server = await serve_app(create_app([DemoAgent()]))
    calls = Conversation(
        ("what does get_weather say for Paris?",), tools=(WEATHER,),
        tool_results=(("get_weather", "sunny"),), expected=(("get_weather",),),
    )  # fmt: skip
    misses = Conversation(("hello there",), tools=(WEATHER,), expected=(("get_weather",),))
    config = BenchConfig(url=server.url, agent="demo", transport=transport, concurrency=2,
                         requests=10, dataset=(calls, misses), seed=3)  # fmt: skip
    summary, samples = await run_bench(config)
    assert summary.ok == 10, summary.errors_by_kind
    called = [s for s in samples if s.tool_calls]
    missed = [s for s in samples if not s.tool_calls]
    assert called and missed
    # The demo agent called the tool, the bench answered "sunny", the agent said so.
    for sample in called:
        assert sample.tool_calls == ["get_weather"] and sample.tool_ok is True
        assert sample.text == len("Tool get_weather returned: sunny")
    for sample in missed:
        assert sample.tool_ok is False and sample.text == len("You said: hello there")
    data = summary.to_json()
    assert data["tool_calls"] == {"expected": 10, "met": len(called)}
    assert samples[0].record()["tools_expected"] == ["get_weather"]


def lookup(key: str) -> str:
    """Look ``key`` up (the agent's own tool)."""
    return f"value-{key}"


def _model(messages: list[Any], tools: list[Any]) -> Any:
    """Call ``lookup`` once, then say what it returned."""
    if any(m.role == "tool" for m in messages):
        return "found it"
    return [("lookup", {"key": "k"})]


@pytest.mark.parametrize("transport", ["uamp-ws", "uamp-sse", "agui", "ai-sdk", "acp"])
async def test_the_agents_own_tool_calls_are_seen(serve_app: Any, transport: str) -> None:
    # (Chat Completions and Anthropic keep an agent's own tool calls inside the agent.)
    served = serve_agent(agent(model=function(_model), tools=[tool(lookup)], name="srv"))
    server = await serve_app(create_app([served]))
    line = Conversation(("look it up",), expected=(("lookup",),))
    other = Conversation(("again",), expected=(("missing_tool",),))
    config = BenchConfig(url=server.url, agent="srv", transport=transport, concurrency=2,
                         requests=6, dataset=(line, other), seed=1)  # fmt: skip
    summary, samples = await run_bench(config)
    assert summary.ok == 6, summary.errors_by_kind
    assert all(s.tool_calls == ["lookup"] for s in samples)
    met = sum(1 for s in samples if s.tools_expected == ["lookup"])
    assert [s.tool_ok for s in samples].count(True) == met
    assert summary.to_json()["tool_calls"] == {"expected": 6, "met": met}


def test_the_command_reports_the_tool_calls_met(tmp_path: Path) -> None:
    dataset, summary = tmp_path / "tools.jsonl", tmp_path / "s.json"
    line = {
        "prompt": "What does get_weather say?",
        "tools": [WEATHER],
        "tool_results": {"get_weather": "sunny"},
        "expected_tool_calls": ["get_weather"],
    }
    dataset.write_bytes(orjson.dumps(line) + b"\n")
    with uamp_serve() as url:
        done = uamp(
            "bench", f"{url}/agents/demo", "--dataset", str(dataset), "-c", "2", "-n", "4",
            "--no-progress", "--json", str(summary),
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "tool calls: 4 of 4 requests called every tool" in done.stdout
    assert orjson.loads(summary.read_bytes())["tool_calls"] == {"expected": 4, "met": 4}
