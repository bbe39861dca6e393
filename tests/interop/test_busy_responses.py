"""The busy policy on OpenAI Responses, with the openai SDK.

The conversation is the chain of ``previous_response_id``: a response that
continues one still running. Before the policy that was ``400
invalid_value``. Now ``enqueue`` (the default) waits for it to end and
continues from what it said; ``reject`` is ``409`` ``conversation_busy``;
``interrupt`` cancels it and continues from its partial answer; ``rollback``
cancels it and continues from the conversation before it.
``metadata["uamp.on_busy"]`` overrides the server's policy.
"""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import pytest

from tests._support.busy import Holder, until_async
from uamp_trio.app import create_app

TIMEOUT = 30


def _serve(thread_server: Any, **config: Any) -> tuple[Any, Holder]:
    agent = Holder()
    return thread_server(create_app([agent]), **config), agent


async def _first(client: openai.AsyncOpenAI) -> tuple[str, asyncio.Task[list[Any]]]:
    """Start ``hold one`` streaming; its id and the task reading the rest of its stream."""
    stream = await client.responses.create(model="holder", input="hold one", stream=True)
    iterator = stream.__aiter__()
    created = await iterator.__anext__()
    assert created.type == "response.created"

    async def rest() -> list[Any]:
        return [event async for event in iterator]

    return created.response.id, asyncio.create_task(rest())


def _run(server: Any, body: Any) -> None:
    async def main() -> None:
        client = openai.AsyncOpenAI(
            api_key="sk-test", base_url=f"{server.url}/agents/holder/v1", max_retries=0
        )
        await body(client)

    asyncio.run(asyncio.wait_for(main(), TIMEOUT))


@pytest.mark.parametrize("how", ["server", "metadata"])
def test_enqueue_continues_once_the_previous_response_ended(thread_server: Any, how: str) -> None:
    server, agent = _serve(thread_server, on_busy="reject" if how == "metadata" else "enqueue")
    meta = {"metadata": {"uamp.on_busy": "enqueue"}} if how == "metadata" else {}

    async def body(client: openai.AsyncOpenAI) -> None:
        first_id, first = await _first(client)
        await until_async(lambda: agent.started == ["hold one"])
        second = asyncio.create_task(
            client.responses.create(
                model="holder", input="two", previous_response_id=first_id, **meta
            )
        )
        await asyncio.sleep(0.3)
        assert agent.started == ["hold one"] and not second.done()  # it waits
        agent.release.set()
        await first
        answer = await second
        assert answer.status == "completed" and answer.output_text == "echo two"

    _run(server, body)
    assert agent.seen["two"] == ["user:hold one", "assistant:echo hold one", "user:two"]


@pytest.mark.parametrize("how", ["server", "metadata"])
def test_reject_is_409(thread_server: Any, how: str) -> None:
    server, agent = _serve(thread_server, on_busy="reject" if how == "server" else "enqueue")
    meta = {"metadata": {"uamp.on_busy": "reject"}} if how == "metadata" else {}

    async def body(client: openai.AsyncOpenAI) -> None:
        first_id, first = await _first(client)
        await until_async(lambda: agent.started == ["hold one"])
        with pytest.raises(openai.ConflictError) as refused:
            await client.responses.create(
                model="holder", input="two", previous_response_id=first_id, **meta
            )
        assert refused.value.code == "conversation_busy"
        agent.release.set()
        await first

    _run(server, body)
    assert agent.started == ["hold one"]


@pytest.mark.parametrize(("policy", "kept"), [("interrupt", True), ("rollback", False)])
def test_interrupt_keeps_and_rollback_drops_the_cancelled_response(
    thread_server: Any, policy: str, kept: bool
) -> None:
    server, agent = _serve(thread_server, on_busy=policy)

    async def body(client: openai.AsyncOpenAI) -> None:
        first_id, first = await _first(client)
        await until_async(lambda: agent.started == ["hold one"])
        answer = await client.responses.create(
            model="holder", input="two", previous_response_id=first_id
        )
        assert answer.status == "completed"
        await first
        stopped = await client.responses.retrieve(first_id)
        assert stopped.status == "cancelled"

    _run(server, body)
    assert agent.cancelled == ["hold one"]
    before = ["user:hold one", "assistant:echo hold one"] if kept else []
    assert agent.seen["two"] == [*before, "user:two"]
