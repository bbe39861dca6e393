"""A2A push-notification configs are bounded per task, over each binding (issue 29).

a2a-sdk's own clients (JSON-RPC, HTTP+JSON, and gRPC through grpcio)
against a real server on 127.0.0.1 serving the conformance kit's scenario
agent: a task takes ``a2a_max_push_configs`` configs, then one more is
refused in the binding's own form (JSON-RPC ``-32029``, HTTP 429, gRPC
``RESOURCE_EXHAUSTED``) while replacing one it has still works; a config
past ``a2a_max_push_config_bytes`` is ``INVALID_PARAMS`` (400,
``INVALID_ARGUMENT``), set alone or inline with a message. On cb59486 2,000
configs on one task pinned +57 MB.
"""

from __future__ import annotations

from typing import Any

import grpc
import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.client.errors import A2AClientError
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import A2AError

from tests._support.agents import run_asyncio
from tests._support.webhooks import scenario_agent
from uamp_trio.app import create_app, default_transports
from uamp_trio.transports import a2a

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

BINDINGS = pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON", "GRPC"])
LIMITS = {"a2a_max_push_configs": 3, "a2a_max_push_config_bytes": 2048}
HOOK = "https://hooks.example.com/a2a"


@pytest.fixture
def server(thread_server: Any) -> Any:
    push = a2a.PushSender(allow=["127.0.0.1/32"], backoff=0.05)
    transports = [a2a.transport(push=push) if t is a2a.mount else t for t in default_transports()]
    app = create_app([scenario_agent()], transports=transports, payment_policy=None)
    return thread_server(app, **LIMITS)


async def _client(http: httpx.AsyncClient, base: str, binding: str) -> Any:
    card = await A2ACardResolver(http, base).get_agent_card()
    config = ClientConfig(
        streaming=False,
        httpx_client=http,
        supported_protocol_bindings=[binding],
        grpc_channel_factory=grpc.aio.insecure_channel,
    )
    return ClientFactory(config).create(card)


def _send(message_id: str, **message: Any) -> pb.SendMessageRequest:
    return pb.SendMessageRequest(
        message=pb.Message(
            role=pb.Role.ROLE_USER, parts=[pb.Part(text="hi")], message_id=message_id, **message
        )
    )


def _config(task_id: str, n: int, **more: Any) -> pb.TaskPushNotificationConfig:
    return pb.TaskPushNotificationConfig(task_id=task_id, id=f"hook-{n}", url=HOOK, **more)


def _refusal(exc: BaseException) -> str:
    """The refusal as each binding reports it: the SDK's error (with the HTTP body
    under it, for HTTP+JSON), or the gRPC status."""
    if isinstance(exc, grpc.aio.AioRpcError):
        return f"{exc.code().name} {exc.details()}"
    cause = exc.__cause__
    body = cause.response.text if isinstance(cause, httpx.HTTPStatusError) else ""
    return f"{type(exc).__name__} {exc} {body}"


async def _refused(call: Any) -> str:
    with pytest.raises((A2AClientError, A2AError, grpc.aio.AioRpcError)) as info:
        await call
    return _refusal(info.value)


#: What each binding says for a task at its config limit, and for a config too large.
FULL = {"JSONRPC": "-32029", "HTTP+JSON": "429", "GRPC": "RESOURCE_EXHAUSTED"}
#: (a2a-sdk's gRPC client turns INVALID_ARGUMENT into InvalidParamsError.)
LARGE = {"JSONRPC": "InvalidParamsError", "HTTP+JSON": "400", "GRPC": "InvalidParamsError"}


@BINDINGS
def test_a_task_holds_at_most_its_push_configs(server: Any, binding: str) -> None:
    async def main() -> None:
        async with httpx.AsyncClient(timeout=10) as http:
            client = await _client(http, server.url, binding)
            [paused] = [e async for e in client.send_message(_send("tck-input-required-q"))]
            task_id = paused.task.id
            for n in range(3):
                await client.create_task_push_notification_config(_config(task_id, n))
            for n in range(3, 6):  # refused every time
                refusal = await _refused(
                    client.create_task_push_notification_config(_config(task_id, n))
                )
                assert FULL[binding] in refusal, refusal
                assert "push-notification configs" in refusal, refusal
            # Replacing a config the task has is not one more.
            replaced = await client.create_task_push_notification_config(
                _config(task_id, 1, token="new")
            )
            assert replaced.token == "new"
            listed = await client.list_task_push_notification_configs(
                pb.ListTaskPushNotificationConfigsRequest(task_id=task_id)
            )
            assert sorted(c.id for c in listed.configs) == ["hook-0", "hook-1", "hook-2"]
            # Deleting one makes room again.
            await client.delete_task_push_notification_config(
                pb.DeleteTaskPushNotificationConfigRequest(task_id=task_id, id="hook-0")
            )
            await client.create_task_push_notification_config(_config(task_id, 9))

    run_asyncio(main, 30)


@BINDINGS
def test_a_push_config_too_large_is_invalid(server: Any, binding: str) -> None:
    async def main() -> None:
        async with httpx.AsyncClient(timeout=10) as http:
            client = await _client(http, server.url, binding)
            [paused] = [e async for e in client.send_message(_send("tck-input-required-r"))]
            task_id = paused.task.id
            huge = _config(task_id, 1, token="t" * 4096)
            refusal = await _refused(client.create_task_push_notification_config(huge))
            assert LARGE[binding] in refusal, refusal
            assert "too large" in refusal, refusal
            # Inline with a message it is refused before the task runs again.
            resume = _send("go-r", task_id=task_id)
            resume.configuration.task_push_notification_config.CopyFrom(
                pb.TaskPushNotificationConfig(url=HOOK, token="t" * 4096)
            )
            refusal = await _refused(_drain(client.send_message(resume)))
            assert LARGE[binding] in refusal, refusal
            task = await client.get_task(pb.GetTaskRequest(id=task_id))
            assert task.status.state == pb.TaskState.TASK_STATE_INPUT_REQUIRED
            listed = await client.list_task_push_notification_configs(
                pb.ListTaskPushNotificationConfigsRequest(task_id=task_id)
            )
            assert list(listed.configs) == []

    run_asyncio(main, 30)


@BINDINGS
def test_an_inline_config_past_the_limit_stops_the_resume_before_it_runs(
    server: Any, binding: str
) -> None:
    async def main() -> None:
        async with httpx.AsyncClient(timeout=10) as http:
            client = await _client(http, server.url, binding)
            [paused] = [e async for e in client.send_message(_send("tck-input-required-s"))]
            task_id = paused.task.id
            for n in range(3):
                await client.create_task_push_notification_config(_config(task_id, n))
            resume = _send("go-s", task_id=task_id)
            resume.configuration.task_push_notification_config.CopyFrom(
                pb.TaskPushNotificationConfig(id="hook-x", url=HOOK)
            )
            refusal = await _refused(_drain(client.send_message(resume)))
            assert FULL[binding] in refusal, refusal
            task = await client.get_task(pb.GetTaskRequest(id=task_id))
            assert task.status.state == pb.TaskState.TASK_STATE_INPUT_REQUIRED
            # The refused message was not taken.
            assert "go-s" not in [m.message_id for m in task.history]

    run_asyncio(main, 30)


async def _drain(stream: Any) -> list[Any]:
    return [e async for e in stream]
