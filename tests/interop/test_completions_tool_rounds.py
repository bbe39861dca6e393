"""Chat Completions keeps a turn's own tool rounds across the client's tool round trip.

One turn in which the agent runs its own tool (``add``) *and* asks the client
to run one of the client's (``lookup``): the openai SDK sees only the call
addressed to it, and its follow-up request carries the conversation as it saw
it. The agent must still see its own call and result in that follow-up (it
answers from both, and does not call ``add`` again), streamed or not -- and
the same over the Responses API when the follow-up carries the items itself.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest

from uamp_agents import agent, tool
from uamp_agents.bridge import serve_agent
from uamp_agents.providers import ModelRequest
from uamp_agents.providers._demo import DemoProvider, add
from uamp_trio.app import create_app

LOOKUP = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a word up",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}},
            "required": ["query"],
        },
    },
}


class Seen(DemoProvider):
    """The demo model, recording the conversation of every call."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[list[tuple[str, str]]] = []

    async def generate(self, request: ModelRequest) -> Any:
        self.calls.append(
            [
                (m.role, m.text or ",".join(c.name for c in m.tool_calls or ()))
                for m in request.messages
                if m.role != "system"
            ]
        )
        return await super().generate(request)


@pytest.fixture
def served(thread_server):  # type: ignore[no-untyped-def]
    model = Seen()
    runtime = agent(model=model, tools=[tool(add, thread=False)], name="calc")
    server = thread_server(create_app([serve_agent(runtime)]))
    sdk = openai.OpenAI(
        base_url=f"{server.url}/agents/calc/v1", api_key="unused", timeout=10, max_retries=0
    )
    return sdk, model


@pytest.mark.parametrize("stream", [False, True])
def test_the_follow_up_sees_the_agents_own_tool_round(served: Any, stream: bool) -> None:
    sdk, model = served
    question = {"role": "user", "content": "what is 2+3? and call lookup"}
    if stream:
        chunks = list(
            sdk.chat.completions.create(
                model="calc", messages=[question], tools=[LOOKUP], stream=True
            )
        )
        calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or ()]
        call_id, name, arguments = calls[0].id, calls[0].function.name, calls[0].function.arguments
        finish = [c.choices[0].finish_reason for c in chunks if c.choices][-1]
    else:
        first = sdk.chat.completions.create(model="calc", messages=[question], tools=[LOOKUP])
        (call,) = first.choices[0].message.tool_calls
        call_id, name, arguments = call.id, call.function.name, call.function.arguments
        finish = first.choices[0].finish_reason
    assert (name, finish) == ("lookup", "tool_calls")
    follow_up = [
        question,
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": "a word"},
    ]
    second = sdk.chat.completions.create(model="calc", messages=follow_up, tools=[LOOKUP])
    answer = second.choices[0].message.content
    assert second.choices[0].finish_reason == "stop"
    assert "2 + 3 = 5" in answer and "Tool lookup returned: a word" in answer
    # The model saw its own call and result before the client's, and did not call add again.
    last = model.calls[-1]
    assert last == [
        ("user", "what is 2+3? and call lookup"),
        ("assistant", "add"),
        ("tool", "5"),
        ("assistant", "lookup"),
        ("tool", "a word"),
    ]
    assert sum(1 for call in model.calls for role, text in call if text == "add") == 1


@pytest.mark.parametrize("stream", [False, True])
def test_a_responses_follow_up_with_items_sees_the_agents_own_tool_round(
    served: Any, stream: bool
) -> None:
    """The same over the Responses API, the follow-up as items without previous_response_id."""
    sdk, model = served
    lookup = {"type": "function", **LOOKUP["function"]}  # the Responses API's flat form
    question = "what is 2+3? and call lookup"
    if stream:
        events = list(
            sdk.responses.create(model="calc", input=question, tools=[lookup], stream=True)
        )
        first = events[-1].response
    else:
        first = sdk.responses.create(model="calc", input=question, tools=[lookup])
    (call,) = [i for i in first.output if i.type == "function_call"]
    assert call.name == "lookup"
    second = sdk.responses.create(
        model="calc",
        store=False,
        tools=[lookup],
        input=[
            {"role": "user", "content": question},
            {"type": "function_call", "call_id": call.call_id, "name": "lookup",
             "arguments": call.arguments},
            {"type": "function_call_output", "call_id": call.call_id, "output": "a word"},
        ],
    )  # fmt: skip
    answer = second.output_text
    assert "2 + 3 = 5" in answer and "Tool lookup returned: a word" in answer
    assert model.calls[-1] == [
        ("user", question),
        ("assistant", "add"),
        ("tool", "5"),
        ("assistant", "lookup"),
        ("tool", "a word"),
    ]
    assert sum(1 for call in model.calls for role, text in call if text == "add") == 1
