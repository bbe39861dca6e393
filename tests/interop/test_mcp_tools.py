"""Agents use MCP servers' tools: ``uamp_agents.mcp`` and ``uamp serve --mcp``.

The MCP server is a real one (``tests/_support/mcp_weather.py``, the ``mcp``
SDK's ``MCPServer``), reached over stdio (a subprocess) and over Streamable
HTTP (a subprocess on a free port); the client is the ``mcp`` SDK under Trio.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


# --- ACP: the MCP servers a client names in session/new ---------------------------


def test_acp_session_mcp_servers_are_connected_for_its_turns(http_server: str) -> None:
    import asyncio

    import acp
    from acp.schema import AgentMessageChunk, EnvVariable, HttpMcpServer, McpServerStdio

    texts: dict[str, list[str]] = {}

    class Client:
        async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
            if isinstance(update, AgentMessageChunk):
                texts.setdefault(session_id, []).append(update.content.text)

        async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
            raise acp.RequestError.method_not_found("session/request_permission")

        def on_connect(self, conn: Any) -> None:
            pass

    stdio = McpServerStdio(
        name="weather",
        command=sys.executable,
        args=["-m", "tests._support.mcp_weather"],
        env=[EnvVariable(name="GIVEN", value="yes")],
    )
    http = HttpMcpServer(type="http", name="remote", url=http_server, headers=[])

    async def main() -> dict[str, Any]:
        spawned = acp.spawn_agent_process(
            Client(), sys.executable, "-m", "uamp_trio", "acp", cwd=str(ROOT), env=ENV
        )
        async with spawned as (conn, _process):
            init = await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
            out: dict[str, Any] = {"mcp_http": init.agent_capabilities.mcp_capabilities.http}
            for label, servers in [("stdio", [stdio]), ("http", [http]), ("none", [])]:
                session = await conn.new_session(cwd=str(ROOT), mcp_servers=servers)
                await conn.prompt(
                    session_id=session.session_id,
                    prompt=[acp.text_block("get weather in Paris")],
                )
                out[label] = "".join(texts.get(session.session_id, []))
            return out

    out = asyncio.run(asyncio.wait_for(main(), TIMEOUT))
    assert out["mcp_http"] is True
    assert out["stdio"] == ANSWER
    assert out["http"] == ANSWER
    assert out["none"] == "You said: get weather in Paris"


def test_acp_over_http_connects_no_client_mcp_servers(thread_server: Any) -> None:
    """A network peer may not make the server run programs: its mcpServers stay unused."""
    import httpx

    from uamp_trio.app import create_app
    from uamp_trio.cli import default_agent

    server = thread_server(create_app([default_agent()]))
    url = f"http://127.0.0.1:{server.port}/agents/demo/acp"

    def rpc(method: str, params: dict[str, Any]) -> Any:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        return httpx.post(url, json=body, timeout=TIMEOUT).json()["result"]

    assert rpc("initialize", {"protocolVersion": 1})["agentCapabilities"]["mcpCapabilities"] == {
        "http": False,
        "sse": False,
    }
    marker = ROOT / "tests" / "_support" / "mcp_weather.py"
    servers = [{"name": "evil", "command": sys.executable, "args": [str(marker)], "env": []}]
    session = rpc("session/new", {"cwd": str(ROOT), "mcpServers": servers})["sessionId"]
    prompt = [{"type": "text", "text": "get weather in Paris"}]
    body = {"jsonrpc": "2.0", "id": 2, "method": "session/prompt"}
    body["params"] = {"sessionId": session, "prompt": prompt}
    streamed = httpx.post(url, json=body, headers={"accept": "text/event-stream"}, timeout=TIMEOUT)
    said = "".join(
        json.loads(line[6:])["params"]["update"]["content"]["text"]
        for line in streamed.text.splitlines()
        if line.startswith("data: ") and "agent_message_chunk" in line
    )
    assert said == "You said: get weather in Paris"
