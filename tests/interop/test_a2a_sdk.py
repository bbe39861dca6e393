"""a2a-sdk's own client against a real uamp server on 127.0.0.1, in both dialects.

The server runs in its own thread (its own ``trio.run``); the SDK runs on
asyncio. Each test resolves the agent card the way the SDK does and lets the
SDK pick the JSON-RPC dialect: 1.0 from the card as served, 0.3 from the
same card with the 1.0 interface removed.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.client.client import ClientCallContext
from a2a.client.errors import A2AClientError
from a2a.types.a2a_pb2 import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import TaskNotCancelableError, TaskNotFoundError
from google.protobuf import json_format, struct_pb2

from tests._support.agents import WorkingAgent, run_asyncio
from tests._support.tools import WEATHER_TOOL
from uamp_proto.payment import TokenPolicy
from uamp_trio.app import create_app
from uamp_trio.demo import DemoAgent

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


SlowAgent = WorkingAgent
run = run_asyncio


@pytest.fixture
def server(thread_server):  # type: ignore[no-untyped-def]
    app = create_app([DemoAgent(), SlowAgent()], payment_policy=None)
    return thread_server(app)


@asynccontextmanager
async def _client(base: str, legacy: bool, *, streaming: bool) -> AsyncIterator[Any]:
    """An SDK client made from the agent card at ``base`` (see :func:`_card`), on its own pool."""
    async with httpx.AsyncClient(timeout=10) as http:
        card = await _card(http, base, legacy)
        yield ClientFactory(ClientConfig(streaming=streaming, httpx_client=http)).create(card)


async def _card(http: httpx.AsyncClient, base: str, legacy: bool) -> AgentCard:
    card = await A2ACardResolver(http, base).get_agent_card()
    if legacy:  # only the 0.3 interface left: the SDK must choose that dialect
        trimmed = AgentCard()
        trimmed.CopyFrom(card)
        keep = [i for i in card.supported_interfaces if i.protocol_version == "0.3"]
        del trimmed.supported_interfaces[:]
        trimmed.supported_interfaces.extend(keep)
        card = trimmed
    return card


def _request(text: str, **message: Any) -> SendMessageRequest:
    return SendMessageRequest(
        message=Message(role=Role.ROLE_USER, parts=[Part(text=text)], message_id="m-1", **message)
    )


async def _events(stream: AsyncIterator[StreamResponse]) -> list[StreamResponse]:
    return [e async for e in stream]


DIALECTS = pytest.mark.parametrize("legacy", [False, True], ids=["v1.0", "v0.3"])


@DIALECTS
def test_card_and_blocking_send(server, legacy: bool) -> None:  # type: ignore[no-untyped-def]
    async def main() -> None:
        async with httpx.AsyncClient(timeout=10) as http:
            card = await _card(http, f"{server.url}/agents/demo", legacy)
            assert card.name == "demo"
            assert card.capabilities.streaming
            assert card.supported_interfaces[0].url == f"{server.url}/agents/demo/a2a"
            assert any(s.id == "demo" for s in card.skills)
            client = ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(card)
            expected = "CompatJsonRpcTransport" if legacy else "JsonRpcTransport"
            assert type(client._transport).__name__ == expected
            events = await _events(client.send_message(_request("hello there")))
            assert len(events) == 1 and events[0].HasField("task")
            task = events[0].task
            assert task.status.state == TaskState.TASK_STATE_COMPLETED
            assert task.status.message.role == Role.ROLE_AGENT
            assert task.status.message.parts[0].text == "You said: hello there"
            assert [m.role for m in task.history] == [Role.ROLE_USER, Role.ROLE_AGENT]
            assert task.artifacts[0].parts[0].text == "You said: hello there"
            got = await client.get_task(GetTaskRequest(id=task.id))
            assert got.id == task.id and got.status.state == TaskState.TASK_STATE_COMPLETED
            short = await client.get_task(GetTaskRequest(id=task.id, history_length=1))
            assert len(short.history) == 1 and short.history[0].role == Role.ROLE_AGENT
            with pytest.raises(TaskNotCancelableError):
                await client.cancel_task(CancelTaskRequest(id=task.id))
            with pytest.raises(TaskNotFoundError):
                await client.get_task(GetTaskRequest(id="task_nope"))

    run(main)


@DIALECTS
def test_streaming_send(server, legacy: bool) -> None:  # type: ignore[no-untyped-def]
    async def main() -> None:
        async with _client(f"{server.url}/agents/demo", legacy, streaming=True) as client:
            events = await _events(client.send_message(_request("stream me please")))
            assert events[0].HasField("task")
            assert events[0].task.status.state == TaskState.TASK_STATE_SUBMITTED
            kinds = [e.WhichOneof("payload") for e in events]
            assert kinds[1] == "status_update"
            assert events[1].status_update.status.state == TaskState.TASK_STATE_WORKING
            chunks = [e.artifact_update for e in events if e.HasField("artifact_update")]
            assert len(chunks) >= 4  # really streamed, word by word
            assert not chunks[0].append and all(c.append for c in chunks[1:])
            # Concatenated, the chunks are the answer exactly once; the last one says so.
            assert "".join(c.artifact.parts[0].text for c in chunks) == (
                "You said: stream me please"
            )
            assert chunks[-1].last_chunk and not any(c.last_chunk for c in chunks[:-1])
            final = events[-1].status_update
            assert final.status.state == TaskState.TASK_STATE_COMPLETED
            assert final.status.message.parts[0].text == "You said: stream me please"
            got = await client.get_task(GetTaskRequest(id=events[0].task.id))
            assert got.status.state == TaskState.TASK_STATE_COMPLETED

    run(main)


@DIALECTS
def test_cancel_a_running_task(server, legacy: bool) -> None:  # type: ignore[no-untyped-def]
    async def main() -> None:
        async with _client(f"{server.url}/agents/slow", legacy, streaming=True) as client:
            stream = client.send_message(_request("take your time"))
            first = await anext(stream)
            task_id = first.task.id
            working = await anext(stream)
            assert working.status_update.status.state == TaskState.TASK_STATE_WORKING
            chunk = await anext(stream)
            assert chunk.artifact_update.artifact.parts[0].text == "working "
            running = await client.get_task(GetTaskRequest(id=task_id))
            assert running.status.state == TaskState.TASK_STATE_WORKING
            canceled = await client.cancel_task(CancelTaskRequest(id=task_id))
            assert canceled.status.state == TaskState.TASK_STATE_CANCELED
            rest = [e async for e in stream]
            assert rest[-1].status_update.status.state == TaskState.TASK_STATE_CANCELED
            again = await client.get_task(GetTaskRequest(id=task_id))
            assert again.status.state == TaskState.TASK_STATE_CANCELED
            with pytest.raises(TaskNotCancelableError):
                await client.cancel_task(CancelTaskRequest(id=task_id))

    run(main)


def _tools_metadata() -> struct_pb2.Struct:
    meta = struct_pb2.Struct()
    meta.update({"tools": [WEATHER_TOOL]})
    return meta


@DIALECTS
def test_client_tool_makes_the_task_input_required(server, legacy: bool) -> None:  # type: ignore[no-untyped-def]
    async def main() -> None:
        async with _client(f"{server.url}/agents/demo", legacy, streaming=False) as client:
            request = _request("what is get_weather in Paris")
            request.metadata.CopyFrom(_tools_metadata())
            [first] = await _events(client.send_message(request))
            task = first.task
            assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            data = json_format.MessageToDict(task.status.message.parts[1].data)
            [call] = data["tool_calls"]
            assert call["name"] == "get_weather"
            assert json.loads(call["arguments"]) == {"city": "what is get_weather in Paris"}
            answer = _request("sunny, 21C", task_id=task.id, context_id=task.context_id)
            [second] = await _events(client.send_message(answer))
            done = second.task
            assert done.id == task.id
            assert done.status.state == TaskState.TASK_STATE_COMPLETED
            assert done.status.message.parts[0].text == "Tool get_weather returned: sunny, 21C"

    run(main)


def test_v1_list_and_subscribe(server) -> None:  # type: ignore[no-untyped-def]
    async def main() -> None:
        async with (
            _client(f"{server.url}/agents/demo", False, streaming=False) as demo,
            _client(f"{server.url}/agents/slow", False, streaming=True) as slow,
        ):
            [a] = await _events(demo.send_message(_request("one")))
            [b] = await _events(demo.send_message(_request("two", context_id=a.task.context_id)))
            listed = await demo.list_tasks(ListTasksRequest(context_id=a.task.context_id))
            assert [t.id for t in listed.tasks] == [b.task.id, a.task.id]
            assert listed.total_size == 2
            done = await demo.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_COMPLETED))
            assert {a.task.id, b.task.id} <= {t.id for t in done.tasks}

            stream = slow.send_message(_request("wait"))
            task_id = (await anext(stream)).task.id
            await anext(stream)  # working
            watcher = slow.subscribe(SubscribeToTaskRequest(id=task_id))
            snapshot = await anext(watcher)
            assert snapshot.task.id == task_id
            assert snapshot.task.status.state == TaskState.TASK_STATE_WORKING
            await slow.cancel_task(CancelTaskRequest(id=task_id))
            seen = [e async for e in watcher]
            assert seen[-1].status_update.status.state == TaskState.TASK_STATE_CANCELED
            [e async for e in stream]

    run(main)


def test_payment_required_then_paid(thread_server) -> None:  # type: ignore[no-untyped-def]
    app = create_app([DemoAgent()], payment_policy=TokenPolicy({"tok-1"}, amount="0.05"))
    server = thread_server(app)

    async def main() -> None:
        async with _client(f"{server.url}/agents/demo", False, streaming=True) as client:
            with pytest.raises(A2AClientError, match="-32402"):
                await _events(client.send_message(_request("hi")))
            paid = ClientCallContext(service_parameters={"X-PAYMENT": "tok-1"})
            events = await _events(client.send_message(_request("hi"), context=paid))
            assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
        raw = httpx.post(
            f"{server.url}/agents/demo/a2a",
            json={
                "jsonrpc": "2.0",
                "id": 7,
                "method": "message/send",
                "params": {
                    "message": {
                        "kind": "message",
                        "messageId": "m",
                        "role": "user",
                        "parts": [{"kind": "text", "text": "hi"}],
                    }
                },
            },
        ).json()
        assert raw["id"] == 7
        assert raw["error"]["code"] == -32402
        assert raw["error"]["data"]["status_code"] == 402
        assert raw["error"]["data"]["accepts"][0]["amount"] == "0.05"

    run(main)
