"""Agents use MCP servers' tools: ``uamp_agents.mcp`` and ``uamp serve --mcp``.

The MCP server is a real one (``tests/_support/mcp_weather.py``, the ``mcp``
SDK's ``MCPServer``), reached over stdio (a subprocess) and over Streamable
HTTP (a subprocess on a free port); the client is the ``mcp`` SDK under Trio.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
import trio

from tests._support.cli import ENV, spawn_serve, wait_for_line
from uamp_agents import agent, tool
from uamp_agents.errors import ToolError
from uamp_agents.mcp import McpServer, McpToolset, connect_mcp
from uamp_agents.providers import _demo

ROOT = Path(__file__).resolve().parents[2]
STDIO = f"{sys.executable} -m tests._support.mcp_weather"
TIMEOUT = 60
ANSWER = "Tool get_weather returned: sunny and 21C in get weather in Paris"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def http_server() -> Iterator[str]:
    """The weather server on Streamable HTTP; its URL."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests._support.mcp_weather", str(port)],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for_line(proc, r"Uvicorn running on")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(15)


def _stdio(**kw: object) -> McpServer:
    server = McpServer.parse(STDIO, name="weather")
    return McpServer(name=server.name, command=server.command, cwd=str(ROOT), **kw)  # type: ignore[arg-type]


async def test_an_agent_calls_a_stdio_servers_tool() -> None:
    with trio.fail_after(TIMEOUT):
        async with connect_mcp(_stdio()) as mcp:
            names = [t.name for t in mcp.tools()]
            assert {"get_weather", "broken", "more_tools"} <= set(names)
            demo = agent(model=_demo.demo(), tools=mcp.tools(), name="demo")
            turn = await demo.run("get weather in Paris")
            assert turn.text == ANSWER


async def test_failures_are_tool_errors_and_the_run_goes_on() -> None:
    with trio.fail_after(TIMEOUT):
        async with connect_mcp(_stdio()) as mcp:
            tools = {t.name: t for t in mcp.tools()}
            with pytest.raises(ToolError, match="weather station is down"):
                await tools["broken"].fn()
            demo = agent(model=_demo.demo(), tools=mcp.tools(), name="demo")
            turn = await demo.run("call broken please")
            assert "weather station is down" in turn.text


async def test_unreachable_servers_give_no_tools_and_no_crash() -> None:
    port = _free_port()  # nobody listens there
    gone = McpServer.parse(f"http://127.0.0.1:{port}/mcp", name="gone")
    missing = McpServer(name="missing", command=("/nonexistent/mcp-server",))
    with trio.fail_after(TIMEOUT):
        async with connect_mcp(gone, missing) as mcp:
            assert mcp.tools() == []
            lines = mcp.describe()
            assert len(lines) == 2 and all(s.error for s in mcp.sources)
            demo = agent(model=_demo.demo(), tools=mcp.tools(), name="demo")
            assert (await demo.run("hello")).text == "You said: hello"


async def test_a_clash_gets_the_server_prefix_and_is_said() -> None:
    with trio.fail_after(TIMEOUT):
        async with connect_mcp(_stdio(), reserved=["get_weather"]) as mcp:
            names = [t.name for t in mcp.tools()]
            assert "weather_get_weather" in names and "get_weather" not in names
            assert any("get_weather as weather_get_weather" in line for line in mcp.describe())


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_tools_are_listed_again_when_they_change(mode: str) -> None:
    # auto: 2026-07-28 with this server, a subscriptions/listen stream;
    # legacy: the initialize handshake, notifications/tools/list_changed.
    with trio.fail_after(TIMEOUT):
        async with connect_mcp(_stdio(), mode=mode) as mcp:
            assert "get_forecast" not in [t.name for t in mcp.tools()]
            tools = {t.name: t for t in mcp.tools()}
            assert await tools["more_tools"].fn() == "added get_forecast"
            while "get_forecast" not in [t.name for t in mcp.tools()]:
                await trio.sleep(0.05)
            tools = {t.name: t for t in mcp.tools()}
            assert await tools["get_forecast"].fn(city="Oslo") == "rain tomorrow in Oslo"


async def test_a_stdio_server_gets_the_default_environment_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("UAMP_TEST_SECRET", "s3cret")
    with trio.fail_after(TIMEOUT):
        async with connect_mcp(_stdio(env={"GIVEN": "yes"})) as mcp:
            tools = {t.name: t for t in mcp.tools()}
            assert await tools["environment"].fn(name="UAMP_TEST_SECRET") == "unset"
            assert await tools["environment"].fn(name="GIVEN") == "yes"
            assert await tools["environment"].fn(name="PATH") != "unset"


async def test_http_server_with_headers_and_parallel_calls(http_server: str) -> None:
    server = McpServer.parse(http_server, name="weather")
    server = McpServer(name="weather", url=server.url, headers={"X-Test": "hello"})
    with trio.fail_after(TIMEOUT):
        async with connect_mcp(server) as mcp:
            tools = {t.name: t for t in mcp.tools()}
            assert await tools["header"].fn(name="x-test") == "hello"
            results: list[str] = []

            async def ask(city: str) -> None:
                results.append(await tools["get_weather"].fn(city=city))

            async with trio.open_nursery() as nursery:
                for city in ("Paris", "Oslo", "Rome"):
                    nursery.start_soon(ask, city)
            assert sorted(results) == [f"sunny and 21C in {c}" for c in ("Oslo", "Paris", "Rome")]


def test_toolset_names_are_stable_between_servers() -> None:
    a = McpToolset([McpServer(name="a", url="http://x/mcp"), McpServer(name="b", url="http://y")])
    a.sources[0]._listed = [type("T", (), {"name": "t", "input_schema": {}, "description": ""})()]
    a.sources[1]._listed = list(a.sources[0]._listed)
    assert [t.name for t in a.tools()] == ["t", "b_t"]


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("python -m weather", "stdio"),
        ("npx -y @modelcontextprotocol/server-everything", "stdio"),
        ("http://127.0.0.1:9/mcp", "http"),
        ("https://mcp.example.com/mcp", "http"),
    ],
)
def test_server_specs(text: str, kind: str) -> None:
    server = McpServer.parse(text)
    assert server.describe().startswith(kind)
    assert server.name and all(c.isalnum() or c in "_-" for c in server.name)


def test_acp_server_shapes() -> None:
    stdio = McpServer.from_acp(
        {"name": "fs", "command": "mcp-fs", "args": ["/tmp"], "env": [{"name": "A", "value": "1"}]}
    )
    assert stdio.command == ("mcp-fs", "/tmp") and stdio.env == {"A": "1"}
    http = McpServer.from_acp(
        {
            "type": "http",
            "name": "w",
            "url": "http://h/mcp",
            "headers": [{"name": "K", "value": "v"}],
        }
    )
    assert http.url == "http://h/mcp" and http.headers == {"K": "v"}
    for bad in [
        {},
        {"name": "x"},
        {"name": "x", "type": "sse", "url": "http://h"},
        {"name": "x", "command": 5},
    ]:
        with pytest.raises(ValueError):
            McpServer.from_acp(bad)


# --- uamp serve --mcp ----------------------------------------------------------------


def _ask_over_completions(base: str) -> str:
    client = openai.OpenAI(base_url=f"{base}/agents/demo", api_key="x", max_retries=0)
    reply = client.chat.completions.create(
        model="demo", messages=[{"role": "user", "content": "get weather in Paris"}]
    )
    return reply.choices[0].message.content or ""


def _ask_over_mcp(base: str) -> str:
    import anyio
    from mcp import Client

    async def main() -> str:
        async with Client(f"{base}/agents/demo/mcp") as client:
            result = await client.call_tool("demo", {"prompt": "get weather in Paris"})
            return str(result.content[0].text)

    return str(anyio.run(main))


@pytest.mark.parametrize("kind", ["stdio", "http"])
def test_uamp_serve_mcp_gives_the_demo_agent_the_servers_tools(
    kind: str, request: pytest.FixtureRequest
) -> None:
    target = STDIO if kind == "stdio" else request.getfixturevalue("http_server")
    proc = spawn_serve("--mcp", target)
    try:
        base = wait_for_line(proc, r"serving on (http://[\d.]+:\d+)").group(1)
        said = wait_for_line(proc, r"uamp serve: MCP (\S+) \((stdio|http): .*\): (.*)")
        assert "get_weather" in said.group(3).split(", ")
        assert _ask_over_completions(base) == ANSWER
        assert _ask_over_mcp(base) == ANSWER
    finally:
        proc.terminate()
        proc.wait(15)


def test_uamp_serve_says_when_a_name_is_taken() -> None:
    # The demo agent has a tool named add; a server whose tool is named add too
    # would be prefixed. Here: the same server twice, the second one prefixed.
    proc = spawn_serve("--mcp", STDIO, "--mcp", STDIO.replace("mcp_weather", "mcp_weather "))
    try:
        wait_for_line(proc, r"serving on")
        wait_for_line(proc, r"uamp serve: MCP")
        second = wait_for_line(
            proc, r"uamp serve: MCP .*get_weather as (\w+) \(its name is taken\)"
        )
        assert second.group(1).endswith("_get_weather")
    finally:
        proc.terminate()
        proc.wait(15)


def test_agent_and_tool_come_from_uamp_agents() -> None:
    # The public names the docs use.
    assert callable(tool) and os.path.exists(ROOT / "uamp_agents" / "mcp.py")
