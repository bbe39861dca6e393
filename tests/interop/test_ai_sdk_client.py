"""The Vercel AI SDK's own client (npm ``ai`` 7.x) against uamp's ``/ai-sdk`` endpoint.

The client is installed from the npm registry with ``npm ci`` from the lock
file in ``tests/interop/ai_sdk_client/`` (kept in the tests' cache folder and
reused while the client's files are unchanged) and run with Node against a
real server: ``DefaultChatTransport`` posts, ``readUIMessageStream`` and the
``Chat`` machinery (``AbstractChat``, what ``useChat`` wraps) read. The SDK
validates every chunk against its schema; a chunk it refused, a warning it
logged or an error it reported would show in ``warnings`` / ``errors``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests._support.agents import TestAgent, Words
from tests._support.npm import install_client, run_node
from uamp_agents.bridge import demo_agent, serve_agent
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.responder import Emit, ResponderError, TurnRequest
from uamp_trio.app import create_app

CLIENT = Path(__file__).parent / "ai_sdk_client"

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


@pytest.fixture(scope="module")
def client_dir() -> Path:
    return install_client(CLIENT, "ai-sdk-client")


@pytest.fixture
def demo_url(thread_server: Any) -> str:
    server = thread_server(create_app([serve_agent(demo_agent())]))
    return f"{server.url}/agents/demo/ai-sdk"


def node(client_dir: Path, mode: str, url: str, **args: Any) -> dict[str, Any]:
    got = run_node(client_dir, mode, url, json.dumps(args))
    assert got["warnings"] == [] and got["errors"] == [], got
    return got


def kinds(chunks: list[dict[str, Any]]) -> list[str]:
    """The chunk types, consecutive deltas of one kind folded into one."""
    out: list[str] = []
    for chunk in chunks:
        if not (chunk["type"].endswith("-delta") and out and out[-1] == chunk["type"]):
            out.append(chunk["type"])
    return out


def text_of(message: dict[str, Any]) -> str:
    return "".join(p["text"] for p in message["parts"] if p["type"] == "text")


def test_a_text_answer_streams_as_one_step(client_dir: Path, demo_url: str) -> None:
    got = node(client_dir, "stream", demo_url, chatId="chat-text", text="hello there")
    assert kinds(got["chunks"]) == [
        "start",
        "start-step",
        "text-start",
        "text-delta",
        "text-end",
        "finish-step",
        "finish",
    ]
    message = got["message"]
    assert message["role"] == "assistant"
    assert message["id"] == got["chunks"][0]["messageId"]
    assert "hello there" in text_of(message)
    finish = got["chunks"][-1]
    assert finish["finishReason"] == "stop"
    usage = message["metadata"]["usage"]
    assert usage["inputTokens"] > 0 and usage["outputTokens"] > 0
    assert usage["totalTokens"] == usage["inputTokens"] + usage["outputTokens"]


def test_a_server_tool_runs_in_its_own_step_before_the_answer(
    client_dir: Path, demo_url: str
) -> None:
    got = node(client_dir, "stream", demo_url, chatId="chat-add", text="what is 2+3?")
    assert kinds(got["chunks"]) == [
        "start",
        "start-step",
        "tool-input-start",
        "tool-input-delta",
        "tool-input-available",
        "tool-output-available",
        "finish-step",
        "start-step",  # the answer after the tool's output is the next step
        "text-start",
        "text-delta",
        "text-end",
        "finish-step",
        "finish",
    ]
    parts = got["message"]["parts"]
    tool = next(p for p in parts if p["type"] == "dynamic-tool")
    assert tool["toolName"] == "add" and tool["state"] == "output-available"
    assert tool["input"] == {"a": 2, "b": 3} and tool["output"] == "5"
    assert tool["providerExecuted"] is True  # the server ran it: the client must not
    assert [p["type"] for p in parts].count("step-start") == 2
    assert text_of(got["message"]).endswith("5")


def test_a_chat_with_a_server_tool_is_not_sent_again(client_dir: Path, demo_url: str) -> None:
    # useChat's standard automatic resend looks at the last step only: the
    # answer after the tool's output must be a step of its own.
    got = node(client_dir, "chat", demo_url, chatId="chat-once", text="what is 2+3?")
    assert len(got["requests"]) == 1
    assert got["status"] == "ready"
    assert text_of(got["messages"][-1]).endswith("5")


def test_a_client_tool_round_trip_continues_the_same_message(
    client_dir: Path, demo_url: str
) -> None:
    got = node(
        client_dir,
        "chat",
        demo_url,
        chatId="chat-weather",
        text="get weather in Paris",
        body={"tools": [WEATHER]},
        requests=2,
    )
    first, second = got["requests"]
    assert first["body"]["id"] == second["body"]["id"] == "chat-weather"
    assert first["body"]["tools"] == [WEATHER]  # the app's extra body goes along
    # The second request carries the tool's output in the assistant message.
    sent = second["body"]["messages"][-1]
    assert sent["role"] == "assistant"
    call = next(p for p in sent["parts"] if p["type"] == "tool-get_weather")
    assert call["state"] == "output-available" and call["output"].startswith("sunny in")
    # One assistant message: the call, its output, then the answer in a new step.
    messages = got["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"]
    answer = messages[1]
    assert answer["id"] == sent["id"]
    types = [p["type"] for p in answer["parts"]]
    assert types.index("tool-get_weather") < len(types) - 1
    assert types[-2:] == ["step-start", "text"]
    assert text_of(answer) == f"Tool get_weather returned: {call['output']}"
    assert len(got["requests"]) == 2 and got["status"] == "ready"


@pytest.fixture(params=["uamp serve", "uamp_asgi"])
def slow_url(request: pytest.FixtureRequest, thread_server: Any) -> Iterator[str]:
    """A slow agent's ``/ai-sdk`` under ``uamp serve``, or uamp_asgi under uvicorn."""
    agent = Words("slow", *WORDS, pause=0.1)
    if request.param == "uamp serve":
        yield f"{thread_server(create_app([agent])).url}/agents/slow/ai-sdk"
        return
    import uamp_asgi
    from tests._support.asgi import uvicorn_server

    with uvicorn_server(uamp_asgi.app([agent])) as url:
        yield f"{url}/agents/slow/ai-sdk"


WORDS = [f"w{n} " for n in range(12)]


def test_a_stopped_fetch_does_not_stop_the_answer_and_a_resume_replays_it(
    client_dir: Path, slow_url: str
) -> None:
    words, url = WORDS, slow_url
    got = node(client_dir, "resume", url, chatId="chat-resume", text="talk")
    before = got["before"][-1]
    assert before["role"] == "assistant" and len(text_of(before)) < len("".join(words))
    after = got["after"]
    assert [m["role"] for m in after] == ["user", "assistant"]
    assert after[-1]["id"] == before["id"]  # the same message, replayed whole
    assert text_of(after[-1]) == "".join(words)
    assert got["final"] == after  # the answer over, a second resume found nothing (204)
    gets = [r for r in got["requests"] if r["method"] == "GET"]
    assert [r["url"] for r in gets] == [f"{url}/chat-resume/stream"] * 2


class ThinkThenFail(TestAgent):
    """Thinks, says something, then fails."""

    name = "thinker"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        await emit(ev.Thinking(content="Let me think.", is_delta=True))
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="Half an answer")))
        raise ResponderError("model_unavailable", "The model went away.")


def test_reasoning_and_a_failure_reach_the_sdk_as_parts_and_an_error(
    client_dir: Path, thread_server: Any
) -> None:
    server = thread_server(create_app([ThinkThenFail()]))
    url = f"{server.url}/agents/thinker/ai-sdk"
    got = run_node(client_dir, "stream", url, json.dumps({"chatId": "c", "text": "hi"}))
    assert got["warnings"] == []
    assert got["errors"] == ["Error: The model went away."]  # the SDK's onError
    parts = got["message"]["parts"]
    assert [(p["type"], p.get("text"), p.get("state")) for p in parts] == [
        ("step-start", None, None),
        ("reasoning", "Let me think.", "done"),
        ("text", "Half an answer", "done"),
    ]
    assert got["chunks"][-1] == {"type": "finish", "finishReason": "error"}
