"""Protocols with no way to ask a person and no mapping: refused, fail closed (issue 30).

OpenAI Responses, Anthropic Messages and the Realtime API carry no
interrupt: a tool call that needs approval is refused at once and the model
is told, so the turn ends normally with an answer that says so (the demo
agent: "... denied ..."), and nothing waits for ever. Each with its real SDK.
"""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic
import openai

from tests._support.approvals import approving
from uamp_trio.app import create_app


def _server(thread_server: Any) -> Any:
    return thread_server(create_app([approving()]))


def test_openai_responses_refuses(thread_server: Any) -> None:
    server = _server(thread_server)
    sdk = openai.OpenAI(base_url=f"{server.url}/agents/demo/v1", api_key="x", max_retries=0)
    response = sdk.responses.create(model="demo", input="what is 2+3?")
    assert response.status == "completed"
    assert "denied" in response.output_text


def test_anthropic_messages_refuses(thread_server: Any) -> None:
    server = _server(thread_server)
    sdk = anthropic.Anthropic(
        base_url=f"{server.url}/agents/demo", api_key="x", max_retries=0, timeout=10
    )
    message = sdk.messages.create(
        model="demo", max_tokens=100, messages=[{"role": "user", "content": "what is 2+3?"}]
    )
    assert message.stop_reason == "end_turn"
    assert "denied" in "".join(b.text for b in message.content if b.type == "text")


def test_realtime_refuses(thread_server: Any) -> None:
    server = _server(thread_server)

    async def main() -> str:
        client = openai.AsyncOpenAI(
            api_key="x", base_url=f"{server.url}/agents/demo", max_retries=0
        )
        async with client.realtime.connect(model="gpt-realtime") as conn:
            await conn.session.update(session={"type": "realtime", "output_modalities": ["text"]})
            await conn.conversation.item.create(
                item={
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "what is 2+3?"}],
                }
            )
            await conn.response.create()
            text = []
            async for event in conn:
                if event.type == "response.output_text.delta":
                    text.append(event.delta)
                if event.type == "response.done":
                    assert event.response.status == "completed"
                    return "".join(text)
        raise AssertionError("the connection closed before response.done")

    assert "denied" in asyncio.run(asyncio.wait_for(main(), 20))
