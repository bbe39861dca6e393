"""The OpenAI Agents SDK uses a uamp agent as its model, over Responses and Chat Completions.

``agents.Agent(model=OpenAIResponsesModel(...))`` (the SDK's default kind of
model) and ``OpenAIChatCompletionsModel``, each given an ``AsyncOpenAI``
client with strict response validation pointed at a served uamp agent;
``Runner.run`` and ``Runner.run_streamed``, tracing off. The uamp agent is
the offline demo model behind the agent runtime: it calls a client tool the
prompt names, so the SDK runs its own function tool and sends the result
back in the next request.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest
from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)

from tests._support.agents import run_asyncio
from uamp_agents import agent
from uamp_agents.bridge import serve_agent
from uamp_agents.providers._demo import DemoProvider
from uamp_trio.app import create_app

set_tracing_disabled(True)


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city.

    Args:
        city: The city.
    """
    return f"sunny in {city}"


@pytest.fixture
def base(thread_server: Any) -> str:
    server = thread_server(create_app([serve_agent(agent(model=DemoProvider(), name="calc"))]))
    return f"{server.url}/agents/calc/v1"


def _model(kind: str, base: str) -> Any:
    client = openai.AsyncOpenAI(
        base_url=base, api_key="unused", max_retries=0, _strict_response_validation=True
    )
    if kind == "responses":
        return OpenAIResponsesModel(model="calc", openai_client=client)
    return OpenAIChatCompletionsModel(model="calc", openai_client=client)


KINDS = ["responses", "chat_completions"]
DELTAS = ("response.output_text.delta", "response.function_call_arguments.delta")


@pytest.mark.parametrize("kind", KINDS)
def test_runner_run_answers_with_the_uamp_agent(base: str, kind: str) -> None:
    results: list[Any] = []

    async def main() -> None:
        helper = Agent(name="helper", instructions="Be brief.", model=_model(kind, base))
        results.append(await Runner.run(helper, "hello from the agents sdk"))

    run_asyncio(main)
    assert results[0].final_output == "You said: hello from the agents sdk"


@pytest.mark.parametrize("kind", KINDS)
def test_runner_runs_the_sdks_function_tool_in_the_loop(base: str, kind: str) -> None:
    results: list[Any] = []

    async def main() -> None:
        helper = Agent(
            name="helper",
            model=_model(kind, base),
            tools=[get_weather],
            model_settings=ModelSettings(tool_choice="auto"),
        )
        results.append(await Runner.run(helper, "call get_weather for Paris"))

    run_asyncio(main)
    result = results[0]
    outputs = [i.output for i in result.new_items if i.type == "tool_call_output_item"]
    assert len(outputs) == 1 and outputs[0].startswith("sunny in ")
    assert result.final_output == f"Tool get_weather returned: {outputs[0]}"


@pytest.mark.parametrize("kind", KINDS)
def test_runner_run_streamed(base: str, kind: str) -> None:
    seen: list[str] = []
    finals: list[Any] = []

    async def main() -> None:
        helper = Agent(name="helper", model=_model(kind, base), tools=[get_weather])
        run = Runner.run_streamed(helper, "call get_weather for Rome")
        async for event in run.stream_events():
            if event.type == "raw_response_event" and event.data.type in DELTAS:
                seen.append(event.data.delta)
        finals.append(run.final_output)

    run_asyncio(main)
    assert finals[0].startswith("Tool get_weather returned: sunny in ")
    assert "".join(seen).endswith(finals[0])  # the answer arrived as text deltas
