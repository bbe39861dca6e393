"""A human in the loop over A2A with a2a-sdk's own clients, on every binding (issue 30).

The agent (the demo agent asking before it runs ``add``) pauses on "what is
2+3?": the task goes ``input-required`` with a status message whose text
says what to approve and whose data part describes the interrupt; push
notifications fire on the state change. A message on the same task answers
(a data part ``{"interrupt_id", "approved"}``, or plain "yes" / "no") and
the same turn goes on to complete the task.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import httpx
import orjson
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as pb
from google.protobuf import json_format, struct_pb2

from tests._support.agents import run_asyncio
from tests._support.approvals import approving
from tests._support.webhooks import Receiver
from uamp_trio.app import create_app, default_transports
from uamp_trio.transports import a2a

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

BINDINGS = pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON", "GRPC"])
INPUT_REQUIRED = pb.TaskState.TASK_STATE_INPUT_REQUIRED
COMPLETED = pb.TaskState.TASK_STATE_COMPLETED


@pytest.fixture
def server(thread_server):  # type: ignore[no-untyped-def]
    push = a2a.PushSender(allow=["127.0.0.1/32"], backoff=0.05)
    transports = [a2a.transport(push=push) if t is a2a.mount else t for t in default_transports()]
    return thread_server(create_app([approving()], transports=transports, payment_policy=None))


def _data(value: Any) -> pb.Part:
    holder = struct_pb2.Value()
    json_format.ParseDict(value, holder)
    return pb.Part(data=holder)


def _message(message_id: str, *parts: pb.Part, **fields: Any) -> pb.SendMessageRequest:
    return pb.SendMessageRequest(
        message=pb.Message(
            role=pb.Role.ROLE_USER, parts=list(parts), message_id=message_id, **fields
        )
    )


def _text(task: pb.Task) -> str:
    return "".join(p.text for p in task.status.message.parts)


async def _last_task(client: Any, request: pb.SendMessageRequest) -> pb.Task:
    """Send; the task after it (a stream's last update re-read with GetTask)."""
    events = [e async for e in client.send_message(request)]
    kinds = [e.WhichOneof("payload") for e in events]
    if kinds == ["task"]:
        return events[0].task
    assert kinds[0] == "task", kinds
    last = events[-1]
    assert last.WhichOneof("payload") == "status_update", kinds
    return await client.get_task(pb.GetTaskRequest(id=last.status_update.task_id))


def _run(server: Any, binding: str, streaming: bool, body: Any) -> None:
    async def main() -> None:
        async with httpx.AsyncClient(timeout=15) as http:
            card = await A2ACardResolver(http, server.url + "/agents/demo").get_agent_card()
            config = ClientConfig(
                streaming=streaming,
                httpx_client=http,
                supported_protocol_bindings=[binding],
                grpc_channel_factory=grpc.aio.insecure_channel,
            )
            await body(ClientFactory(config).create(card))

    run_asyncio(main)


@BINDINGS
@pytest.mark.parametrize("streaming", [False, True], ids=["blocking", "streaming"])
@pytest.mark.parametrize(
    ("answer", "says"),
    [
        ({"approved": True}, "2 + 3 = 5"),
        ({"approved": False, "reason": "not today"}, "denied"),
        ("yes", "2 + 3 = 5"),
    ],
    ids=["data-approve", "data-deny", "text-yes"],
)
def test_input_required_then_answered(
    server: Any, binding: str, streaming: bool, answer: Any, says: str
) -> None:
    async def body(client: Any) -> None:
        hook = Receiver()
        port = await hook.start("127.0.0.1")
        try:
            asked = _message("m1", pb.Part(text="what is 2+3?"))
            asked.configuration.task_push_notification_config.url = f"http://127.0.0.1:{port}/h"
            asked.configuration.task_push_notification_config.token = "tok"
            task = await _last_task(client, asked)
            assert task.status.state == INPUT_REQUIRED
            assert "add" in _text(task)
            [data] = [
                json_format.MessageToDict(p)["data"]
                for p in task.status.message.parts
                if p.HasField("data")
            ]
            [interrupt] = data["interrupts"]
            assert interrupt["kind"] == "approval" and interrupt["tool"] == "add"
            assert interrupt["arguments"] == {"a": 2, "b": 3}
            part = (
                pb.Part(text=answer)
                if isinstance(answer, str)
                else _data({"interrupt_id": interrupt["id"], **answer})
            )
            done = await _last_task(
                client, _message("m2", part, task_id=task.id, context_id=task.context_id)
            )
            assert done.id == task.id
            assert done.status.state == COMPLETED
            assert says in _text(done)
            for _ in range(100):  # push notifications: the pause, then the end
                states = _pushed_states(hook)
                if "TASK_STATE_COMPLETED" in states:
                    break
                await asyncio.sleep(0.05)
            assert "TASK_STATE_INPUT_REQUIRED" in states
            assert states.index("TASK_STATE_INPUT_REQUIRED") < states.index("TASK_STATE_COMPLETED")
        finally:
            hook.close()

    _run(server, binding, streaming, body)


def _pushed_states(hook: Receiver) -> list[str]:
    states = []
    for _, _, raw in hook.received:
        sent = orjson.loads(raw)
        state = sent.get("statusUpdate", {}).get("status", {}).get("state")
        if state:
            states.append(state)
    return states


@BINDINGS
def test_a_message_that_does_not_answer_is_refused_and_the_task_still_waits(
    server: Any, binding: str
) -> None:
    async def body(client: Any) -> None:
        task = await _last_task(client, _message("m1", pb.Part(text="what is 2+3?")))
        assert task.status.state == INPUT_REQUIRED
        for part in (
            pb.Part(text="perhaps"),
            _data({"interrupt_id": "int_nope", "approved": True}),
        ):
            with pytest.raises(Exception) as caught:
                await _last_task(
                    client, _message("mx", part, task_id=task.id, context_id=task.context_id)
                )
            assert "yes" in str(caught.value) or "names no interrupt" in str(caught.value)
        still = await client.get_task(pb.GetTaskRequest(id=task.id))
        assert still.status.state == INPUT_REQUIRED
        done = await _last_task(
            client, _message("m3", pb.Part(text="no"), task_id=task.id, context_id=task.context_id)
        )
        assert done.status.state == COMPLETED and "denied" in _text(done)

    _run(server, binding, False, body)
