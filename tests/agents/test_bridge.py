"""The agent bridge: UAP agents served through the transports.

Real servers on 127.0.0.1 reached by real clients (httpx for Chat
Completions, uamp_trio's own UAMP WebSocket client), the turn driver for
event-level checks, and ``uamp serve --agent`` as a subprocess.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from uamp_agents import Agent, agent, tool
from uamp_agents.bridge import AgentEndpoint, demo_agent, serve_agent
from uamp_agents.execution import loop
from uamp_agents.middleware import budget
from uamp_agents.providers import ModelRequest, ModelResponse, ProviderError, demo, function
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.responder import Responder as ServedAgent
from uamp_proto.responder import TurnRequest
from uamp_trio.app import create_app
from uamp_trio.client import connect
from uamp_trio.engines.server import Server
from uamp_trio.hosting.turns import ResponseOutcome, open_response

ROOT = Path(__file__).resolve().parents[2]
Serve = Callable[..., Awaitable[Server]]

WEATHER = ty.ToolDefinition(
    function=ty.FunctionDefinition(
        name="get_weather",
        description="Weather for a city",
        parameters={
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    )
)


def user(text: str) -> list[ty.Message]:
    return [ty.Message(role="user", content=text)]


async def drive(
    endpoint: ServedAgent, messages: list[ty.Message], **kw: Any
) -> tuple[list[ev.Event], ResponseOutcome]:
    """One response through the turn driver; its events and outcome."""
    request = TurnRequest(
        agent=endpoint.name, session_id="s1", response_id="r1", messages=messages, **kw
    )
    events: list[ev.Event] = []
    with trio.fail_after(10):
        async with open_response(endpoint, request) as turn:
            async for event in turn:
                events.append(event)
    assert turn.outcome is not None
    return events, turn.outcome


def text_of(events: list[ev.Event]) -> str:
    return "".join(
        e.delta.text
        for e in events
        if isinstance(e, ev.ResponseDelta) and isinstance(e.delta, ty.DeltaText)
    )


class Scripted:
    """A provider that records its requests and replays scripted responses.

    Each response is streamed the way its ``events`` say, so a test decides
    whether tool calls come as fragments, whether usage comes as a delta,
    whether thinking is streamed.
    """

    name = "scripted"
    model = "scripted-1"

    def __init__(self, *steps: tuple[list[ev.Event], ModelResponse]) -> None:
        self.steps = list(steps)
        self.requests: list[ModelRequest] = []
        #: "generate" or "stream", per call.
        self.calls: list[str] = []

    async def generate(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        self.calls.append("generate")
        return self.steps.pop(0)[1]

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        self.requests.append(request)
        self.calls.append("stream")
        events, response = self.steps.pop(0)
        for event in events:
            yield event
        yield response


# --- event mapping (the turn driver, no transport) -----------------------------------


async def test_capabilities_and_name() -> None:
    endpoint = serve_agent(demo_agent())
    assert isinstance(endpoint, ServedAgent) and isinstance(endpoint, AgentEndpoint)
    caps = endpoint.capabilities()
    assert (caps.id, caps.provider, caps.modalities) == ("demo", "demo", ["text"])
    assert caps.tools is not None and caps.tools.built_in_tools == ["add", "now"]
    assert caps.tools.supports_tools and caps.tools.supports_parallel_tools
    assert caps.extensions is not None and caps.extensions["uap"]["model"] == "uamp-demo-1"
    assert serve_agent(agent(model=demo()), name="other").name == "other"
    with pytest.raises(ValueError, match="no name"):
        serve_agent(agent(model=demo()))
    # The demo model knows its own facts.
    assert (caps.supports_thinking, caps.supports_caching, caps.context_window) == (
        False,
        False,
        32_768,
    )
    given = ty.Capabilities(id="x", provider="y", modalities=["text"], supports_thinking=True)
    # A model the catalog does not know: the agent's declaration stands as given.
    assert (
        serve_agent(
            agent(
                model=function(
                    lambda request: ModelResponse(
                        message=ty.Message(role="assistant", content="ok")
                    )
                )
            ),
            name="f",
            capabilities=given,
        ).capabilities()
        is given
    )
    # A model it knows: its facts win, the rest of the declaration stays.
    over = serve_agent(demo_agent(), capabilities=given).capabilities()
    assert (over.id, over.provider, over.supports_thinking, over.context_window) == (
        "x",
        "y",
        False,
        32_768,
    )


@pytest.mark.parametrize(
    ("provider", "model", "modalities", "thinking", "window"),
    [
        ("openai", "gpt-4o-mini", ["text", "image"], False, 128_000),
        ("openai", "o3-mini", ["text", "image"], True, 200_000),
        ("anthropic", "claude-sonnet-4-5", ["text", "image", "file"], True, 200_000),
        (
            "google",
            "gemini-2.5-flash",
            ["text", "image", "audio", "video", "file"],
            True,
            1_048_576,
        ),
    ],
)
def test_capabilities_come_from_the_model_the_provider_runs(
    provider: str, model: str, modalities: list[str], thinking: bool, window: int
) -> None:
    from uamp_agents import providers

    backend = getattr(providers, provider)(model=model, api_key="k")
    caps = serve_agent(agent(model=backend, name="m")).capabilities()
    assert (caps.provider, caps.modalities, caps.supports_thinking) == (
        provider,
        modalities,
        thinking,
    )
    assert caps.context_window == window and caps.supports_caching is True
    assert caps.tools is not None and caps.tools.supports_tools is True
    unknown = serve_agent(
        agent(model=getattr(providers, provider)(model="unheard-of-9", api_key="k"), name="u")
    )
    plain = unknown.capabilities()
    assert (
        plain.modalities == ["text"]
        and plain.context_window is None
        and plain.supports_thinking is None
    )


async def test_own_tool_thinking_progress_and_usage_without_double_counting() -> None:
    call = ty.ToolInvocation(id="c1", name="add", arguments='{"a": 2, "b": 3}')
    usage1 = ty.UsageStats(input_tokens=10, output_tokens=2, total_tokens=12)
    usage2 = ty.UsageStats(input_tokens=14, output_tokens=3, total_tokens=17)
    model = Scripted(
        # step 1: thinking, a tool call NOT streamed as fragments, usage as a delta
        (
            [ev.Thinking(content="adding", is_delta=True), ev.UsageDelta(delta=usage1)],
            ModelResponse(message=ty.Message(role="assistant", tool_calls=[call]), usage=usage1),
        ),
        # step 2: text, usage only in the final response (no delta)
        (
            [ev.ResponseDelta(delta=ty.DeltaText(text="five"))],
            ModelResponse(message=ty.Message(role="assistant", content="five"), usage=usage2),
        ),
    )
    a = agent(model=model, tools=[tool(demo().tools()[0])], name="calc")
    events, outcome = await drive(serve_agent(a), user("2+3"))
    assert outcome.status == "completed"
    kinds = [type(e).__name__ for e in events]
    assert kinds[0] == "ResponseCreated" and kinds[-1] == "ResponseDone"
    thinking = [e for e in events if isinstance(e, ev.Thinking)]
    assert [t.content for t in thinking] == ["adding"]
    # the unstreamed call is shown once, then its result and call_done
    fragments = [
        e.delta.tool_call
        for e in events
        if isinstance(e, ev.ResponseDelta) and isinstance(e.delta, ty.DeltaToolCall)
    ]
    assert [(f.id, f.name, f.arguments) for f in fragments] == [("c1", "add", call.arguments)]
    results = [
        e.delta.tool_result
        for e in events
        if isinstance(e, ev.ResponseDelta) and isinstance(e.delta, ty.DeltaToolResult)
    ]
    assert [(r.call_id, r.result, r.status) for r in results] == [("c1", "5", "completed")]
    assert [e.call_id for e in events if isinstance(e, ev.ToolCallDone)] == ["c1"]
    assert events.index(next(e for e in events if isinstance(e, ev.ToolCallDone))) > kinds.index(
        "ResponseDelta"
    )
    progress = [(p.stage, p.step) for p in events if isinstance(p, ev.Progress)]
    assert progress == [
        ("step_start", 1),
        ("action", 1),
        ("step_end", 1),
        ("step_start", 2),
        ("step_end", 2),
    ]
    assert all(p.target == "response" for p in events if isinstance(p, ev.Progress))
    # usage: step 1's delta passed on, step 2's topped up at the end -- summed once
    deltas = [e.delta for e in events if isinstance(e, ev.UsageDelta)]
    assert deltas == [usage1, ty.UsageStats(input_tokens=14, output_tokens=3, total_tokens=17)]
    done = events[-1]
    assert isinstance(done, ev.ResponseDone)
    assert done.response.usage == ty.UsageStats(input_tokens=24, output_tokens=5, total_tokens=29)
    assert [type(i).__name__ for i in done.response.output] == [
        "ThinkingContent",
        "ToolCallContent",
        "ToolResultContent",
        "TextContent",
    ]


@pytest.mark.parametrize("streamed", [True, False])
async def test_a_response_nobody_watches_calls_the_model_for_whole_replies(
    streamed: bool,
) -> None:
    call = ty.ToolInvocation(id="c1", name="add", arguments='{"a": 2, "b": 3}')
    usage1 = ty.UsageStats(input_tokens=10, output_tokens=2, total_tokens=12)
    usage2 = ty.UsageStats(input_tokens=14, output_tokens=3, total_tokens=17)
    first = ModelResponse(
        message=ty.Message(role="assistant", tool_calls=[call]), usage=usage1, thinking="adding"
    )
    second = ModelResponse(message=ty.Message(role="assistant", content="five"), usage=usage2)
    model = Scripted(
        ([ev.Thinking(content="adding", is_delta=True), ev.UsageDelta(delta=usage1)], first),
        ([ev.ResponseDelta(delta=ty.DeltaText(text="five")), ev.UsageDelta(delta=usage2)], second),
    )
    a = agent(model=model, tools=[tool(demo().tools()[0])], name="calc")
    events, outcome = await drive(serve_agent(a), user("2+3"), streamed=streamed)
    assert model.calls == (["stream"] * 2 if streamed else ["generate"] * 2)
    # Either way the client's events tell the same story.
    assert outcome.status == "completed"
    assert [e.content for e in events if isinstance(e, ev.Thinking)] == ["adding"]
    assert text_of(events) == "five"
    assert [e.delta for e in events if isinstance(e, ev.UsageDelta)] == [usage1, usage2]
    fragments = [
        e.delta.tool_call
        for e in events
        if isinstance(e, ev.ResponseDelta) and isinstance(e.delta, ty.DeltaToolCall)
    ]
    assert [(f.id, f.arguments) for f in fragments] == [("c1", call.arguments)]
    done = events[-1]
    assert isinstance(done, ev.ResponseDone)
    assert done.response.usage == ty.UsageStats(input_tokens=24, output_tokens=5, total_tokens=29)


async def test_request_settings_reach_the_model() -> None:
    model = Scripted(([], ModelResponse(message=ty.Message(role="assistant", content="{}"))))
    a = agent(model=model, system="Be brief.", params={"temperature": 1.0}, name="cfg")
    fmt = ty.ResponseFormat(
        type="json_schema", json_schema={"name": "o", "schema": {"type": "object"}}
    )
    _, outcome = await drive(
        serve_agent(a),
        [ty.Message(role="system", content="history system"), *user("hi")],
        instructions="Answer in French.",
        response_format=fmt,
        tools=[WEATHER],
        tool_choice="none",
        metadata={"temperature": 0.2, "max_tokens": 7, "model": "cfg", "user": "u1"},
    )
    assert outcome.status == "completed"
    sent = model.requests[0]
    assert sent.messages[0] == ty.Message(role="system", content="Be brief.\n\nAnswer in French.")
    assert [m.role for m in sent.messages] == ["system", "system", "user"]
    assert sent.params == {"temperature": 0.2, "max_tokens": 7}
    assert sent.response_format is not None and sent.response_format.json_schema is not None
    assert sent.response_format.json_schema["schema"] == {"type": "object"}
    assert [t.function.name for t in sent.tools] == ["get_weather"]
    assert sent.tool_choice == "none"
    assert a.params == {"temperature": 1.0} and a.system == "Be brief."  # unchanged


async def test_client_tool_call_ends_the_turn_and_resume_answers() -> None:
    endpoint = serve_agent(demo_agent())
    forced = {"type": "function", "function": {"name": "get_weather"}}
    events, outcome = await drive(
        endpoint, user("what is 2+3"), tools=[WEATHER], tool_choice=forced
    )
    assert outcome.status == "requires_action"
    calls = [e for e in events if isinstance(e, ev.ToolCall)]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("get_weather", {"city": "what is 2+3"})
    ]
    # the agent's own add ran on the server in the same step
    results = [
        e.delta.tool_result.result
        for e in events
        if isinstance(e, ev.ResponseDelta) and isinstance(e.delta, ty.DeltaToolResult)
    ]
    assert results == ["5"]
    # the transport extends the conversation; the same tool_choice comes again
    history = [
        *user("what is 2+3"),
        *outcome.tracker.messages(),
        ty.Message(role="tool", tool_call_id=calls[0].call_id, content="sunny"),
    ]
    events, outcome = await drive(endpoint, history, tools=[WEATHER], tool_choice=forced)
    assert outcome.status == "completed"
    assert not [e for e in events if isinstance(e, ev.ToolCall)]
    assert text_of(events) == "Tool get_weather returned: sunny 2 + 3 = 5"


async def test_failures_map_to_agent_error_codes() -> None:
    def tools_forever(messages: list[ty.Message], tools: list[ty.ToolDefinition]) -> Any:
        return [("add", {"a": 1, "b": 1})]

    add = demo().tools()[0]
    cases: list[tuple[Agent, str]] = [
        (agent(model=function(tools_forever), tools=[add], execution=loop(2)), "max_steps"),
        (
            agent(model=function(tools_forever), tools=[add], middleware=[budget(max_steps=2)]),
            "budget_exceeded",
        ),
    ]

    def limited(messages: list[ty.Message], tools: list[ty.ToolDefinition]) -> Any:
        raise ProviderError("slow down", status=429, retry_after=3)

    cases.append((agent(model=function(limited)), "rate_limit_exceeded"))

    def broken(messages: list[ty.Message], tools: list[ty.ToolDefinition]) -> Any:
        raise ProviderError("upstream is down", status=502)

    cases.append((agent(model=function(broken)), "provider_error"))
    for a, code in cases:
        events, outcome = await drive(serve_agent(a, name="failing"), user("go"))
        assert outcome.status == "failed", code
        final = events[-1]
        assert isinstance(final, ev.ResponseErrorEvent)
        assert final.error.code == code, (code, final.error)
    _, outcome = await drive(serve_agent(cases[2][0], name="x"), user("go"))
    assert outcome.error is not None and outcome.error.details == {"status": 429, "retry_after": 3}


async def test_cancelling_the_turn_cancels_the_run() -> None:
    state: dict[str, Any] = {"started": trio.Event(), "cancelled": False, "finished": False}

    async def wait_for_ever() -> str:
        """A tool that blocks."""
        state["started"].set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            state["cancelled"] = True
            raise
        finally:
            state["finished"] = True

    def model(messages: list[ty.Message], tools: list[ty.ToolDefinition]) -> Any:
        return [("wait_for_ever", {})]

    endpoint = serve_agent(agent(model=function(model), tools=[wait_for_ever], name="slow"))
    request = TurnRequest(agent="slow", session_id="s", response_id="r", messages=user("go"))
    with trio.fail_after(10):
        async with open_response(endpoint, request) as turn, trio.open_nursery() as nursery:

            async def cancel_when_started() -> None:
                await state["started"].wait()
                turn.cancel()

            nursery.start_soon(cancel_when_started)
            events = [e async for e in turn]
    assert turn.outcome is not None and turn.outcome.status == "cancelled"
    assert isinstance(events[-1], ev.ResponseCancelled)
    assert state["cancelled"] and state["finished"]


# --- over real transports ----------------------------------------------------------------


async def test_completions_over_http(serve_app: Serve) -> None:
    server = await serve_app(create_app([serve_agent(demo_agent())]))
    url = f"{server.url}/agents/demo/chat/completions"
    async with httpx.AsyncClient(timeout=10) as client:
        with trio.fail_after(10):
            r = await client.post(url, json={"messages": [{"role": "user", "content": "hi"}]})
            assert r.status_code == 200
            assert r.json()["choices"][0]["message"]["content"] == "You said: hi"
            r = await client.post(
                url, json={"messages": [{"role": "user", "content": "what is 6 times 7"}]}
            )
            body = r.json()
            assert body["choices"][0]["message"]["content"] == "6 * 7 = 42"
            assert "tool_calls" not in body["choices"][0]["message"]  # multiply is not ours
            r = await client.post(
                url,
                json={
                    "messages": [{"role": "user", "content": "one two three four five"}],
                    "max_tokens": 3,
                },
            )
            choice = r.json()["choices"][0]
            assert (choice["message"]["content"], choice["finish_reason"]) == (
                "You said: one",
                "length",
            )
            r = await client.get(f"{server.url}/agents/demo/capabilities")
            assert r.json()["tools"]["built_in_tools"] == ["add", "now"]


async def test_only_a_streamed_completion_streams_the_model(serve_app: Serve) -> None:
    def reply() -> tuple[list[ev.Event], ModelResponse]:
        text = ev.ResponseDelta(delta=ty.DeltaText(text="hello"))
        return [text], ModelResponse(message=ty.Message(role="assistant", content="hello"))

    model = Scripted(reply(), reply())
    server = await serve_app(create_app([serve_agent(agent(model=model, name="s"))]))
    url = f"{server.url}/agents/s/chat/completions"
    ask = {"messages": [{"role": "user", "content": "hi"}]}
    async with httpx.AsyncClient(timeout=10) as client:
        with trio.fail_after(10):
            r = await client.post(url, json=ask)
            assert r.json()["choices"][0]["message"]["content"] == "hello"
            r = await client.post(url, json={**ask, "stream": True})
            assert '"content":"hello"' in r.text
    assert model.calls == ["generate", "stream"]


async def test_uamp_websocket_own_and_client_tools_in_one_response(serve_app: Serve) -> None:
    server = await serve_app(create_app([serve_agent(demo_agent())]))
    ws_url = "ws" + server.url[len("http") :] + "/agents/demo/uamp"
    asked: list[ty.ToolInvocation] = []

    def run_tool(call: ty.ToolInvocation) -> str:
        asked.append(call)
        return "cloudy"

    with trio.fail_after(15):
        async with connect(ws_url) as client:
            session = await client.create_session(
                agent="demo", tools=[WEATHER], on_tool_call=run_tool
            )
            assert session.capabilities is not None
            assert session.capabilities.tools is not None
            assert session.capabilities.tools.built_in_tools == ["add", "now"]
            events = [e async for e in session.respond("what is 2+3, and get weather")]
            result = await session.ask("hello")
    done = events[-1]
    assert isinstance(done, ev.ResponseDone), events[-1]
    assert [c.name for c in asked] == ["get_weather"]
    assert json.loads(asked[0].arguments) == {"city": "what is 2+3, and get weather"}
    assert text_of(events) == "Tool get_weather returned: cloudy 2 + 3 = 5"
    assert [e.call_id for e in events if isinstance(e, ev.ToolCall)] == [asked[0].id]
    assert sum(isinstance(e, ev.ResponseCreated) for e in events) == 1
    kinds = [type(i).__name__ for i in done.response.output]
    assert kinds == [
        "ToolCallContent",  # add
        "ToolCallContent",  # get_weather
        "ToolResultContent",  # add's result (server side)
        "ToolResultContent",  # get_weather's result (from the client)
        "TextContent",
    ]
    deltas = [e.delta for e in events if isinstance(e, ev.UsageDelta)]
    assert done.response.usage is not None
    assert done.response.usage.total_tokens == sum(d.total_tokens or 0 for d in deltas)
    assert any(isinstance(e, ev.Progress) and e.stage == "step_start" for e in events)
    # the next turn of the session is a plain chat turn
    assert result.status == "completed" and result.text == "You said: hello"


async def test_uamp_websocket_cancel_stops_a_blocking_tool(serve_app: Serve) -> None:
    state: dict[str, Any] = {"started": trio.Event(), "cancelled": trio.Event()}

    async def block() -> str:
        """A tool that blocks."""
        state["started"].set()
        try:
            await trio.sleep_forever()
        finally:
            state["cancelled"].set()

    def model(messages: list[ty.Message], tools: list[ty.ToolDefinition]) -> Any:
        return [("block", {})]

    endpoint = serve_agent(agent(model=function(model), tools=[block], name="blocker"))
    server = await serve_app(create_app([endpoint]))
    ws_url = "ws" + server.url[len("http") :] + "/agents/blocker/uamp"
    with trio.fail_after(15):
        async with connect(ws_url) as client:
            session = await client.create_session(agent="blocker")
            stream = session.respond("go")
            async for event in stream:
                if isinstance(event, ev.ResponseCreated):
                    await state["started"].wait()
                    await session.cancel()
            assert stream.result is not None and stream.result.status == "cancelled"
            await state["cancelled"].wait()
            # the session still works
            ok = await client.create_session(agent="blocker")
            assert ok.agent == "blocker"


async def test_errors_reach_the_clients_with_their_codes(serve_app: Serve) -> None:
    def tools_forever(messages: list[ty.Message], tools: list[ty.ToolDefinition]) -> Any:
        return [("add", {"a": 1, "b": 2})]

    add = demo().tools()[0]
    looping = agent(model=function(tools_forever), tools=[add], execution=loop(1), name="loops")
    capped = agent(
        model=function(tools_forever), tools=[add], middleware=[budget(max_tokens=5)], name="cap"
    )
    server = await serve_app(create_app([serve_agent(looping), serve_agent(capped)]))
    ws_url = "ws" + server.url[len("http") :] + "/ws"
    with trio.fail_after(15):
        async with connect(ws_url) as client:
            session = await client.create_session(agent="loops")
            result = await session.ask("go")
        async with httpx.AsyncClient(timeout=10) as http:
            r = await http.post(
                f"{server.url}/agents/cap/chat/completions",
                json={"messages": [{"role": "user", "content": "go"}]},
            )
    assert result.status == "failed"
    assert result.error is not None and result.error.code == "max_steps"
    assert r.status_code >= 400
    assert r.json()["error"]["code"] == "budget_exceeded"


# --- uamp serve --agent module:attr, as a subprocess ---------------------------------

AGENT_MODULE = textwrap.dedent(
    '''
    """A module with UAP agents, loaded by ``uamp serve --agent``."""

    from uamp_agents import agent
    from uamp_agents.providers import demo


    def triple(n: int) -> int:
        """Three times n."""
        return 3 * n


    unnamed_helper = agent(model=demo(), tools=[demo().tools()[0], triple])


    def make_named():
        return agent(model=demo(), name="named-bot")
    '''
)


def test_uamp_serve_loads_uap_agents(tmp_path: Path) -> None:
    (tmp_path / "bridge_test_agents.py").write_text(AGENT_MODULE)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uamp_trio",
            "serve",
            "--port",
            "0",
            "--agent",
            "bridge_test_agents:unnamed_helper",
            "--agent",
            "bridge_test_agents:make_named",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    try:
        assert proc.stdout is not None
        lines: list[str] = []
        while not any("named-bot" in line for line in lines):
            line = proc.stdout.readline()
            assert line, "server exited: " + (proc.stderr.read() if proc.stderr else "")
            lines.append(line)
        text = "".join(lines)
        m = re.search(r"(http://127\.0\.0\.1:\d+)/agents/unnamed_helper/chat/completions", text)
        assert m, text
        base = m.group(1)
        with httpx.Client(base_url=base, timeout=10) as client:
            models = client.get("/v1/models").json()
            assert sorted(d["id"] for d in models["data"]) == ["named-bot", "unnamed_helper"]
            r = client.post(
                "/agents/unnamed_helper/chat/completions",
                json={"messages": [{"role": "user", "content": "what is 20 + 22"}]},
            )
            assert r.status_code == 200, r.text
            assert r.json()["choices"][0]["message"]["content"] == "20 + 22 = 42"
            caps = client.get("/agents/unnamed_helper/capabilities").json()
            assert caps["tools"]["built_in_tools"] == ["add", "triple"]
            r = client.post(
                "/agents/named-bot/chat/completions",
                json={"messages": [{"role": "user", "content": "hi there"}]},
            )
            assert r.json()["choices"][0]["message"]["content"] == "You said: hi there"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert code == 0
