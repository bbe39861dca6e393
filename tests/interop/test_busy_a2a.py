"""The busy policy on A2A, with a2a-sdk's own clients over JSON-RPC, HTTP+JSON and gRPC.

The conversation is the ``contextId``. Before the policy a second message
into a context whose task was working started a second task beside it, on a
copy of the conversation as it was. Now ``enqueue`` (the server's default)
keeps the second task ``submitted`` until the first ends and runs it on the
conversation the first left; ``reject`` is the A2A error
(``UnsupportedOperationError``, ``data.code`` ``conversation_busy``; 409 on
HTTP+JSON); ``interrupt`` cancels the working task and keeps what it said,
``rollback`` cancels it and drops its turn. A message's metadata
``uamp.on_busy`` overrides the server's policy.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from a2a.types import a2a_pb2 as pb
from google.protobuf import struct_pb2

from tests._support.agents import run_asyncio
from tests._support.busy import Holder, until_async
from tests.interop.test_a2a_push_bounds import _client
from uamp_trio.app import create_app

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

BINDINGS = pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON", "GRPC"])


def _serve(thread_server: Any, **config: Any) -> tuple[Any, Holder]:
    agent = Holder()
    return thread_server(create_app([agent], payment_policy=None), **config), agent


def _send(text: str, n: int, **meta: str) -> pb.SendMessageRequest:
    metadata = struct_pb2.Struct()
    metadata.update(meta)
    message = pb.Message(
        role=pb.Role.ROLE_USER,
        parts=[pb.Part(text=text)],
        message_id=f"m-{n}",
        context_id="ctx-1",
        metadata=metadata if meta else None,
    )
    return pb.SendMessageRequest(message=message)


async def _task(client: Any, request: pb.SendMessageRequest) -> pb.Task:
    events = [e async for e in client.send_message(request)]
    assert len(events) == 1 and events[0].HasField("task")
    return events[0].task


def _run(server: Any, binding: str, body: Any) -> None:
    async def main() -> None:
        async with httpx.AsyncClient(timeout=20) as http:
            await body(await _client(http, server.url, binding))

    run_asyncio(main, 40)


@BINDINGS
@pytest.mark.parametrize("how", ["server", "metadata"])
def test_enqueue_runs_the_second_message_after_the_first(
    thread_server: Any, binding: str, how: str
) -> None:
    server, agent = _serve(thread_server, on_busy="reject" if how == "metadata" else "enqueue")
    meta = {"uamp.on_busy": "enqueue"} if how == "metadata" else {}

    async def body(client: Any) -> None:
        first = asyncio.create_task(_task(client, _send("hold one", 1)))
        await until_async(lambda: agent.started == ["hold one"])
        second = asyncio.create_task(_task(client, _send("two", 2, **meta)))
        await asyncio.sleep(0.3)
        assert agent.started == ["hold one"] and not second.done()  # it waits
        agent.release.set()
        done = [await first, await second]
        assert [t.status.state for t in done] == [pb.TaskState.TASK_STATE_COMPLETED] * 2
        assert {t.context_id for t in done} == {"ctx-1"}

    _run(server, binding, body)
    assert agent.seen["two"] == ["user:hold one", "assistant:echo hold one", "user:two"]


@BINDINGS
@pytest.mark.parametrize("how", ["server", "metadata"])
def test_reject_is_the_a2a_error(thread_server: Any, binding: str, how: str) -> None:
    server, agent = _serve(thread_server, on_busy="reject" if how == "server" else "enqueue")
    meta = {"uamp.on_busy": "reject"} if how == "metadata" else {}

    async def body(client: Any) -> None:
        first = asyncio.create_task(_task(client, _send("hold one", 1)))
        await until_async(lambda: agent.started == ["hold one"])
        with pytest.raises(Exception) as refused:  # the SDK's error type differs per binding
            await _task(client, _send("two", 2, **meta))
        assert "conversation" in str(refused.value).lower()
        agent.release.set()
        assert (await first).status.state == pb.TaskState.TASK_STATE_COMPLETED

    _run(server, binding, body)
    assert agent.started == ["hold one"]


@BINDINGS
@pytest.mark.parametrize(("policy", "kept"), [("interrupt", True), ("rollback", False)])
def test_interrupt_keeps_and_rollback_drops_the_stopped_turn(
    thread_server: Any, binding: str, policy: str, kept: bool
) -> None:
    server, agent = _serve(thread_server, on_busy=policy)

    async def body(client: Any) -> None:
        first = asyncio.create_task(_task(client, _send("hold one", 1)))
        await until_async(lambda: agent.started == ["hold one"])
        second = await _task(client, _send("two", 2))
        assert second.status.state == pb.TaskState.TASK_STATE_COMPLETED
        assert (await first).status.state == pb.TaskState.TASK_STATE_CANCELED
        third = await _task(client, _send("three", 3))
        assert third.status.state == pb.TaskState.TASK_STATE_COMPLETED

    _run(server, binding, body)
    assert agent.cancelled == ["hold one"]
    stopped = ["user:hold one", "assistant:echo hold one"] if kept else []
    assert agent.seen["two"] == [*stopped, "user:two"]
    assert agent.seen["three"] == [*stopped, "user:two", "assistant:echo two", "user:three"]


def test_a_queued_task_is_submitted_and_cancel_task_ends_its_wait(thread_server: Any) -> None:
    server, agent = _serve(thread_server)

    async def body(client: Any) -> None:
        first = asyncio.create_task(_task(client, _send("hold one", 1)))
        await until_async(lambda: agent.started == ["hold one"])
        request = _send("two", 2)
        request.configuration.return_immediately = True
        queued = await _task(client, request)
        assert queued.status.state == pb.TaskState.TASK_STATE_SUBMITTED
        cancelled = await client.cancel_task(pb.CancelTaskRequest(id=queued.id))
        assert cancelled.status.state == pb.TaskState.TASK_STATE_CANCELED
        agent.release.set()
        assert (await first).status.state == pb.TaskState.TASK_STATE_COMPLETED
        third = await _task(client, _send("three", 3))
        assert third.status.state == pb.TaskState.TASK_STATE_COMPLETED

    _run(server, "JSONRPC", body)
    assert agent.started == ["hold one", "three"]  # the cancelled one never ran
