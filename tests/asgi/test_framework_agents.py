"""A pydantic-ai agent and an OpenAI Agents SDK agent behind uamp_asgi in FastAPI under uvicorn.

Both run on offline models (pydantic-ai's ``FunctionModel``, a local fake
model for the Agents SDK; tests/_support/framework_agents.py), each with one
tool of its own, and are driven by the openai client: text, the agent's own
tool run inside its framework, and a tool of the client's surfaced to it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests._support.asgi import fastapi_with_framework_agents

fastapi = pytest.importorskip("fastapi")
pytest.importorskip("pydantic_ai")
pytest.importorskip("agents")

AGENTS = ["demo", "oaa"]
PROBE = [{"type": "function", "function": {"name": "probe", "parameters": {"type": "object"}}}]


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    with fastapi_with_framework_agents() as url:
        yield url


def _client(base: str, agent: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/agents/{agent}", api_key="x", max_retries=0)


def _ask(client: openai.OpenAI, agent: str, messages: list[Any], **kw: Any) -> Any:
    return client.chat.completions.create(model=agent, messages=messages, **kw)


@pytest.mark.parametrize("agent", AGENTS)
def test_text_streams_over_chat_completions(base: str, agent: str) -> None:
    stream = _ask(_client(base, agent), agent, [{"role": "user", "content": "hi"}], stream=True)
    pieces = [
        c.choices[0].delta.content for c in stream if c.choices and c.choices[0].delta.content
    ]
    assert "".join(pieces) == "You said: hi"
    assert len(pieces) > 1  # streamed as the model produced it, not in one piece


@pytest.mark.parametrize("agent", AGENTS)
def test_the_agents_own_tool_runs_inside_its_framework(base: str, agent: str) -> None:
    reply = _ask(_client(base, agent), agent, [{"role": "user", "content": "weather?"}])
    assert reply.choices[0].message.content == "The weather is sunny in Paris"
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage is not None and reply.usage.completion_tokens > 0


@pytest.mark.parametrize("agent", AGENTS)
def test_a_client_tool_goes_to_the_client_and_its_result_back(base: str, agent: str) -> None:
    client = _client(base, agent)
    messages: list[Any] = [{"role": "user", "content": "probe it"}]
    first = _ask(client, agent, messages, tools=PROBE)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert call.function.name == "probe"
    messages += [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "42"},
    ]
    second = _ask(client, agent, messages, tools=PROBE)
    assert second.choices[0].message.content == "The weather is 42"


@pytest.mark.parametrize("agent", AGENTS)
def test_responses_api(base: str, agent: str) -> None:
    client = _client(base, agent)
    assert client.responses.create(model=agent, input="one").output_text == "You said: one"
    with client.responses.stream(model=agent, input="weather now") as stream:
        final = stream.get_final_response()
    assert final.output_text.endswith("The weather is sunny in Paris")


@pytest.mark.parametrize("agent", AGENTS)
def test_agui_shows_the_server_tool_call(base: str, agent: str) -> None:
    body = {
        "threadId": "t",
        "runId": "r",
        "messages": [{"id": "m", "role": "user", "content": "weather?"}],
        "tools": [],
        "context": [],
        "state": {},
        "forwardedProps": {},
    }
    with httpx.stream("POST", f"{base}/agents/{agent}/agui", json=body, timeout=30) as resp:
        events = [json.loads(line[6:]) for line in resp.iter_lines() if line.startswith("data: ")]
    kinds = [e["type"] for e in events]
    assert "TOOL_CALL_START" in kinds and "TOOL_CALL_RESULT" in kinds
    assert kinds[-1] == "RUN_FINISHED"
    text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == "The weather is sunny in Paris"
