"""a2a-sdk's own clients against the conformance kit's scenario agent, over each A2A binding.

The agent is ``examples/a2a_scenarios.py`` (scripted by message id, as the
A2A project's kit scripts its agents), served by a real uamp server on
127.0.0.1 in its own thread; the SDK picks the binding from the card
(``supported_protocol_bindings``). Every test runs over JSON-RPC,
HTTP+JSON and gRPC (a2a-sdk's grpcio client against uamp's own gRPC
server), streaming and not where it matters; the equivalence test runs one
conversation over all three and compares what comes back.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as pb
from google.protobuf import json_format

from tests._support.agents import run_asyncio
from uamp_trio.app import create_app, default_transports
from uamp_trio.transports import a2a

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "a2a_scenarios.py"
BINDINGS = pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON", "GRPC"])


def _scenarios() -> Any:
    spec = importlib.util.spec_from_file_location("a2a_scenarios", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def server(thread_server):  # type: ignore[no-untyped-def]
    push = a2a.PushSender(allow=["127.0.0.1/32"], backoff=0.05)
    transports = [a2a.transport(push=push) if t is a2a.mount else t for t in default_transports()]
    app = create_app([_scenarios().agent], transports=transports, payment_policy=None)
    return thread_server(app)


async def _client(http: httpx.AsyncClient, base: str, binding: str, *, streaming: bool) -> Any:
    card = await A2ACardResolver(http, base).get_agent_card()
    config = ClientConfig(
        streaming=streaming,
        httpx_client=http,
        supported_protocol_bindings=[binding],
        grpc_channel_factory=grpc.aio.insecure_channel,
    )
    return ClientFactory(config).create(card)


def _send(message_id: str, text: str = "hi", **message: Any) -> pb.SendMessageRequest:
    return pb.SendMessageRequest(
        message=pb.Message(
            role=pb.Role.ROLE_USER, parts=[pb.Part(text=text)], message_id=message_id, **message
        )
    )


async def _events(stream: AsyncIterator[pb.StreamResponse]) -> list[pb.StreamResponse]:
    return [e async for e in stream]


def _task_id(events: list[pb.StreamResponse]) -> str:
    """The task a send made (its snapshot opens a stream; a blocking send is the task)."""
    return events[0].task.id


def _run(
    server: Any,
    binding: str,
    body: Callable[[Any, httpx.AsyncClient], Any],
    *,
    streaming: bool = False,
) -> None:
    async def main() -> None:
        async with httpx.AsyncClient(timeout=10) as http:
            client = await _client(http, server.url, binding, streaming=streaming)
            await body(client, http)

    run_asyncio(main)


@BINDINGS
@pytest.mark.parametrize("streaming", [False, True])
def test_artifacts_with_file_and_data_parts(server, binding: str, streaming: bool) -> None:  # type: ignore[no-untyped-def]
    async def body(client: Any, http: httpx.AsyncClient) -> None:
        parts = {}
        for scenario in ("tck-artifact-file-x", "tck-artifact-file-url-x", "tck-artifact-data-x"):
            events = await _events(client.send_message(_send(scenario)))
            task = await client.get_task(pb.GetTaskRequest(id=_task_id(events)))
            assert task.status.state == pb.TaskState.TASK_STATE_COMPLETED
            [artifact] = task.artifacts
            parts[scenario] = json_format.MessageToDict(artifact.parts[0])
        assert parts["tck-artifact-file-x"] == {
            "raw": "dGNr",
            "mediaType": "text/plain",
            "filename": "output.txt",
        }
        assert parts["tck-artifact-file-url-x"]["url"] == "https://example.com/output.txt"
        assert parts["tck-artifact-data-x"] == {"data": {"key": "value", "count": 42.0}}

    _run(server, binding, body, streaming=streaming)


@BINDINGS
@pytest.mark.parametrize("streaming", [False, True])
def test_a_direct_message_reply_is_no_task(server, binding: str, streaming: bool) -> None:  # type: ignore[no-untyped-def]
    async def body(client: Any, http: httpx.AsyncClient) -> None:
        events = await _events(client.send_message(_send("tck-message-response-1")))
        assert [e.WhichOneof("payload") for e in events] == ["message"]
        assert events[0].message.parts[0].text == "Direct message response"
        assert events[0].message.role == pb.Role.ROLE_AGENT
        listed = await client.list_tasks(pb.ListTasksRequest())
        assert listed.total_size == 0  # nothing was kept

    _run(server, binding, body, streaming=streaming)


@BINDINGS
def test_input_required_is_resumed_by_the_next_message(server, binding: str) -> None:  # type: ignore[no-untyped-def]
    async def body(client: Any, http: httpx.AsyncClient) -> None:
        [first] = await _events(client.send_message(_send("tck-input-required-1")))
        task = first.task
        assert task.status.state == pb.TaskState.TASK_STATE_INPUT_REQUIRED
        assert task.status.message.parts[0].text == "Please send more input."
        resumed = await _events(
            client.send_message(
                _send("more-1", "here it is", task_id=task.id, context_id=task.context_id)
            )
        )
        assert resumed[-1].task.status.state == pb.TaskState.TASK_STATE_COMPLETED
        assert resumed[-1].task.id == task.id
        history = [m.parts[0].text for m in resumed[-1].task.history]
        assert history[0] == "hi" and "here it is" in history

    _run(server, binding, body)


@BINDINGS
def test_cancel_subscribe_and_list_with_filters(server, binding: str) -> None:  # type: ignore[no-untyped-def]
    async def body(client: Any, http: httpx.AsyncClient) -> None:
        paused = _task_id(await _events(client.send_message(_send("tck-input-required-a"))))
        other = _task_id(await _events(client.send_message(_send("tck-input-required-b"))))
        done = await _events(client.send_message(_send("tck-complete-task-c")))
        assert done[-1].status_update.status.state == pb.TaskState.TASK_STATE_COMPLETED
        context = (await client.get_task(pb.GetTaskRequest(id=paused))).context_id

        waiting = await client.list_tasks(
            pb.ListTasksRequest(status=pb.TaskState.TASK_STATE_INPUT_REQUIRED, page_size=1)
        )
        assert (waiting.total_size, waiting.page_size, len(waiting.tasks)) == (2, 1, 1)
        assert waiting.next_page_token
        rest = await client.list_tasks(
            pb.ListTasksRequest(
                status=pb.TaskState.TASK_STATE_INPUT_REQUIRED, page_token=waiting.next_page_token
            )
        )
        assert {waiting.tasks[0].id, rest.tasks[0].id} == {paused, other}
        mine = await client.list_tasks(pb.ListTasksRequest(context_id=context))
        assert [t.id for t in mine.tasks] == [paused]

        # A subscription follows the paused task until it ends.
        async def follow() -> list[pb.StreamResponse]:
            return await _events(client.subscribe(pb.SubscribeToTaskRequest(id=other)))

        watching = asyncio.create_task(follow())
        await asyncio.sleep(0.3)
        canceled = await client.cancel_task(pb.CancelTaskRequest(id=other))
        assert canceled.status.state == pb.TaskState.TASK_STATE_CANCELED
        seen = await asyncio.wait_for(watching, 5)
        assert seen[0].task.id == other
        assert seen[-1].status_update.status.state == pb.TaskState.TASK_STATE_CANCELED

    _run(server, binding, body, streaming=True)


class _Receiver:
    """A webhook on 127.0.0.1 that records what is POSTed to it (and refuses the first)."""

    def __init__(self) -> None:
        self.received: list[tuple[dict[str, str], Any]] = []
        self.refused = 0
        self.server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        lines = head.split("\r\n")
        headers = {
            k.strip().lower(): v.strip()
            for k, _, v in (line.partition(":") for line in lines[1:] if line)
        }
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        if not self.refused:  # the first delivery fails: the sender must retry
            self.refused += 1
            writer.write(b"HTTP/1.1 503 Busy\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
        else:
            self.received.append((headers, json.loads(body)))
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
        await writer.drain()
        writer.close()

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/hook"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()


@BINDINGS
def test_push_notifications_reach_the_webhook_with_its_auth(server, binding: str) -> None:  # type: ignore[no-untyped-def]
    async def body(client: Any, http: httpx.AsyncClient) -> None:
        receiver = _Receiver()
        async with receiver as url:
            [paused] = await _events(client.send_message(_send("tck-input-required-p")))
            task_id = paused.task.id
            config = await client.create_task_push_notification_config(
                pb.TaskPushNotificationConfig(
                    task_id=task_id,
                    id="hook-1",
                    url=url,
                    token="tok",
                    authentication=pb.AuthenticationInfo(scheme="Bearer", credentials="s3cret"),
                )
            )
            assert (config.id, config.url) == ("hook-1", url)
            await _events(client.send_message(_send("go-p", task_id=task_id)))
            for _ in range(100):
                if any(
                    b.get("statusUpdate", {}).get("status", {}).get("state")
                    == "TASK_STATE_COMPLETED"
                    for _, b in receiver.received
                ):
                    break
                await asyncio.sleep(0.05)
        states = [
            b["statusUpdate"]["status"]["state"]
            for _, b in receiver.received
            if "statusUpdate" in b
        ]
        assert states[-1] == "TASK_STATE_COMPLETED"
        assert receiver.refused == 1  # and the refused delivery was retried
        headers = receiver.received[-1][0]
        assert headers["authorization"] == "Bearer s3cret"
        assert headers["x-a2a-notification-token"] == "tok"
        assert all(
            b["statusUpdate"]["taskId"] == task_id
            for _, b in receiver.received
            if "statusUpdate" in b
        )

    _run(server, binding, body)


def _shape(value: Any) -> Any:
    """``value`` without what differs between two runs (ids, times)."""
    if isinstance(value, dict):
        return {
            k: _shape(v)
            for k, v in value.items()
            if k not in ("id", "taskId", "contextId", "messageId", "timestamp", "artifactId")
        }
    if isinstance(value, list):
        return [_shape(v) for v in value]
    return value


def test_the_same_conversation_gives_the_same_tasks_over_each_binding(server) -> None:  # type: ignore[no-untyped-def]
    seen: dict[str, list[Any]] = {}

    def conversation(binding: str) -> Callable[[Any, httpx.AsyncClient], Any]:
        async def body(client: Any, http: httpx.AsyncClient) -> None:
            out: list[Any] = []
            for scenario in (
                "tck-complete-task-e",
                "tck-artifact-data-e",
                "tck-message-response-e",
            ):
                events = await _events(client.send_message(_send(scenario)))
                out.extend(json_format.MessageToDict(e) for e in events)
            [paused] = await _events(client.send_message(_send("tck-input-required-e")))
            out.append(json_format.MessageToDict(paused))
            resumed = await _events(
                client.send_message(_send("go-e", "more", task_id=paused.task.id))
            )
            out.extend(json_format.MessageToDict(e) for e in resumed)
            got = await client.get_task(pb.GetTaskRequest(id=paused.task.id, history_length=1))
            out.append(json_format.MessageToDict(got))
            seen[binding] = _shape(out)

        return body

    for binding in ("JSONRPC", "HTTP+JSON", "GRPC"):
        _run(server, binding, conversation(binding))
    assert seen["JSONRPC"] == seen["HTTP+JSON"] == seen["GRPC"]
    assert len(seen["JSONRPC"]) == 6


def test_grpc_errors_carry_the_spec_status_and_error_info(server) -> None:  # type: ignore[no-untyped-def]
    from a2a.types import a2a_pb2_grpc
    from google.rpc import error_details_pb2, status_pb2

    target = server.url.removeprefix("http://")
    with grpc.insecure_channel(target) as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        with pytest.raises(grpc.RpcError) as missing:
            stub.GetTask(pb.GetTaskRequest(id="task_nope"))
        with pytest.raises(grpc.RpcError) as old:
            stub.SendMessage(_send("m-old"), metadata=[("a2a-version", "0.3")])
        with pytest.raises(grpc.RpcError) as bad:
            stub.ListTasks(pb.ListTasksRequest(page_size=500))
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    details = dict(missing.value.trailing_metadata())["grpc-status-details-bin"]
    status = status_pb2.Status.FromString(details)
    info = error_details_pb2.ErrorInfo()
    status.details[0].Unpack(info)
    assert (info.reason, info.domain) == ("TASK_NOT_FOUND", "a2a-protocol.org")
    assert old.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "pageSize" in (bad.value.details() or "")
