"""A human in the loop over Chat Completions with the real OpenAI SDK (issue 30).

Chat Completions has no way to ask a person; uamp's answer is the opt-in
client function tool ``uamp_approve``. A request that declares it gets, when
the agent asks, ``finish_reason: "tool_calls"`` with a ``uamp_approve`` call
whose id is the interrupt id; the tool result of that call in the next
request answers it, and that completion is the rest of the same turn. A
request without the tool gets the host's policy (the model is told no).
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from tests._support.approvals import approving
from uamp_proto.adapters import approve_tool
from uamp_trio.app import create_app

TOOL = {
    "type": "function",
    "function": {
        "name": approve_tool.TOOL_NAME,
        "description": "Ask the user",
        "parameters": dict(approve_tool.tool_definition().function.parameters or {}),
    },
}
USER = {"role": "user", "content": "what is 2+3?"}


def _client(thread_server: Any) -> openai.OpenAI:
    server = thread_server(create_app([approving()]))
    return openai.OpenAI(base_url=f"{server.url}/agents/demo/v1", api_key="none", max_retries=0)


@pytest.mark.parametrize(
    ("result", "says"),
    [('{"approved": true}', "2 + 3 = 5"), ("no", "denied")],
    ids=["approve", "deny"],
)
def test_uamp_approve_then_its_result(thread_server: Any, result: str, says: str) -> None:
    client = _client(thread_server)
    first = client.chat.completions.create(model="demo", messages=[USER], tools=[TOOL])
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls or []
    assert call.function.name == "uamp_approve"
    asked = json.loads(call.function.arguments)
    assert asked["interrupt_id"] == call.id
    assert asked["tool"] == "add" and asked["arguments"] == {"a": 2, "b": 3}
    messages = [
        USER,
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": result},
    ]
    second = client.chat.completions.create(model="demo", messages=messages, tools=[TOOL])
    assert second.choices[0].finish_reason == "stop"
    assert says in (second.choices[0].message.content or "")


def test_uamp_approve_streams_too(thread_server: Any) -> None:
    client = _client(thread_server)
    calls: dict[int, dict[str, str]] = {}
    reasons = []
    for chunk in client.chat.completions.create(
        model="demo", messages=[USER], tools=[TOOL], stream=True
    ):
        for choice in chunk.choices:
            reasons.append(choice.finish_reason)
            for part in choice.delta.tool_calls or []:
                entry = calls.setdefault(part.index, {"id": "", "name": "", "arguments": ""})
                entry["id"] += part.id or ""
                entry["name"] += (part.function.name or "") if part.function else ""
                entry["arguments"] += (part.function.arguments or "") if part.function else ""
    assert reasons[-1] == "tool_calls"
    [call] = calls.values()
    assert call["name"] == "uamp_approve"
    messages = [
        USER,
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": call["arguments"]},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call["id"], "content": "yes"},
    ]
    text = "".join(
        choice.delta.content or ""
        for chunk in client.chat.completions.create(
            model="demo", messages=messages, tools=[TOOL], stream=True
        )
        for choice in chunk.choices
    )
    assert "2 + 3 = 5" in text


def test_without_the_tool_the_host_policy_denies(thread_server: Any) -> None:
    client = _client(thread_server)
    reply = client.chat.completions.create(model="demo", messages=[USER])
    assert reply.choices[0].finish_reason == "stop"
    assert "denied" in (reply.choices[0].message.content or "")
