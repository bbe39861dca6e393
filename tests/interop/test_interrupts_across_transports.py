"""One pending approval, answered from another transport than the one that asked (issue 30).

The same server; the run starts on one protocol with its real client and
pauses on the demo agent's ``add``; the answer comes over another protocol
with that protocol's real client, by the interrupt's id; the run that waited
goes on where it started:

* started on A2A (a2a-sdk), approved over UAMP WebSocket (uamp's client):
  the task completes and its webhook hears both states;
* started on A2A, approved by an AG-UI run (``@ag-ui/client``) whose
  ``resume`` names the interrupt (the thread id is the task's context id);
* started on AG-UI, approved over UAMP WebSocket: the thread's next AG-UI
  run streams what the turn said meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import trio
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as pb
from google.protobuf import json_format

from tests._support.agents import run_asyncio
from tests._support.approvals import approving
from tests._support.npm import install_client, run_node
from tests._support.webhooks import Receiver
from uamp_trio.app import create_app, default_transports
from uamp_trio.client import connect
from uamp_trio.transports import a2a

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

AGUI_CLIENT = Path(__file__).parent / "agui_client"


@pytest.fixture
def server(thread_server):  # type: ignore[no-untyped-def]
    push = a2a.PushSender(allow=["127.0.0.1/32"], backoff=0.05)
    transports = [a2a.transport(push=push) if t is a2a.mount else t for t in default_transports()]
    return thread_server(create_app([approving()], transports=transports, payment_policy=None))


@pytest.fixture(scope="module")
def agui_dir() -> Path:
    return install_client(AGUI_CLIENT, "agui-client", script="hitl.mjs")


@contextmanager
def uamp_answer(url: str, interrupt_id: str, **answer: Any) -> Iterator[list[Any]]:
    """Answer over UAMP WebSocket with uamp's client; the connection stays open meanwhile.

    Yields the answering session's errors (empty: the server took the answer).
    """
    stop = threading.Event()
    errors: list[Any] = []
    failure: list[BaseException] = []

    async def main() -> None:
        with trio.fail_after(30):
            async with connect(url.replace("http://", "ws://") + "/ws") as client:
                session = await client.create_session("demo")
                await session.answer(interrupt_id, **answer)
                await trio.to_thread.run_sync(stop.wait, abandon_on_cancel=True)
                errors.extend(session.errors)

    def run() -> None:
        try:
            trio.run(main)
        except BaseException as exc:  # reported below
            failure.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield errors
    finally:
        stop.set()
        thread.join(30)
    if failure:
        raise failure[0]


def _request(hook_port: int) -> pb.SendMessageRequest:
    request = pb.SendMessageRequest(
        message=pb.Message(
            role=pb.Role.ROLE_USER, parts=[pb.Part(text="what is 2+3?")], message_id="m1"
        )
    )
    request.configuration.task_push_notification_config.url = f"http://127.0.0.1:{hook_port}/h"
    return request


async def _a2a_client(http: httpx.AsyncClient, url: str) -> Any:
    card = await A2ACardResolver(http, url + "/agents/demo").get_agent_card()
    return ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(card)


async def _settled(client: Any, task_id: str) -> pb.Task:
    for _ in range(300):
        task = await client.get_task(pb.GetTaskRequest(id=task_id))
        if task.status.state == pb.TaskState.TASK_STATE_COMPLETED:
            break
        await asyncio.sleep(0.05)
    return task  # type: ignore[no-any-return]


def _interrupt_id(task: pb.Task) -> str:
    [data] = [
        json_format.MessageToDict(p)["data"]
        for p in task.status.message.parts
        if p.HasField("data")
    ]
    return str(data["interrupts"][0]["id"])


def _text(task: pb.Task) -> str:
    return "".join(p.text for p in task.status.message.parts)


def _states(hook: Receiver) -> list[str]:
    out = []
    for _, _, raw in hook.received:
        state = orjson.loads(raw).get("statusUpdate", {}).get("status", {}).get("state")
        if state:
            out.append(state)
    return out


def test_started_on_a2a_approved_over_uamp_websocket(server: Any) -> None:
    out: list[Any] = []

    async def main() -> None:
        hook = Receiver()
        port = await hook.start("127.0.0.1")
        try:
            async with httpx.AsyncClient(timeout=15) as http:
                client = await _a2a_client(http, server.url)
                [sent] = [e async for e in client.send_message(_request(port))]
                paused = sent.task
                assert paused.status.state == pb.TaskState.TASK_STATE_INPUT_REQUIRED
                with uamp_answer(server.url, _interrupt_id(paused), approved=True) as errors:
                    done = await _settled(client, paused.id)
                for _ in range(100):
                    if "TASK_STATE_COMPLETED" in _states(hook):
                        break
                    await asyncio.sleep(0.05)
                out.extend([done, _states(hook), errors])
        finally:
            hook.close()

    run_asyncio(main, timeout=60)
    done, states, errors = out
    assert errors == []
    assert done.status.state == pb.TaskState.TASK_STATE_COMPLETED
    assert "2 + 3 = 5" in _text(done)
    assert states.index("TASK_STATE_INPUT_REQUIRED") < states.index("TASK_STATE_COMPLETED")


def test_started_on_a2a_approved_by_an_agui_run(server: Any, agui_dir: Path) -> None:
    out: list[Any] = []

    async def main() -> None:
        hook = Receiver()
        port = await hook.start("127.0.0.1")
        try:
            async with httpx.AsyncClient(timeout=15) as http:
                client = await _a2a_client(http, server.url)
                [sent] = [e async for e in client.send_message(_request(port))]
                paused = sent.task
                resume = [
                    {"interruptId": _interrupt_id(paused), "status": "resolved", "payload": False}
                ]
                thread = {"threadId": paused.context_id, "messages": [], "only": "resume"}
                got = await asyncio.to_thread(
                    run_node,
                    agui_dir,
                    f"{server.url}/agents/demo/agui",
                    json.dumps({**thread, "resume": resume}),
                    script="hitl.mjs",
                )
                out.extend([await _settled(client, paused.id), got])
        finally:
            hook.close()

    run_asyncio(main, timeout=60)
    done, got = out
    assert got["second"][-1]["type"] == "RUN_FINISHED"
    assert done.status.state == pb.TaskState.TASK_STATE_COMPLETED
    assert "denied" in _text(done)


def test_started_on_agui_approved_over_uamp_websocket(server: Any, agui_dir: Path) -> None:
    url = f"{server.url}/agents/demo/agui"
    user = {"id": "u1", "role": "user", "content": "what is 2+3?"}
    thread = {"threadId": "t-x", "messages": [user]}
    first = run_node(agui_dir, url, json.dumps({**thread, "only": "first"}), script="hitl.mjs")
    (interrupt,) = first["pending"]
    with uamp_answer(server.url, interrupt["id"], approved=True) as errors:
        for _ in range(20):  # until the server has taken the answer
            rest = run_node(
                agui_dir,
                url,
                json.dumps({**thread, "only": "resume", "resume": []}),
                script="hitl.mjs",
            )
            if rest["second"][-1].get("code") != "interrupt_pending":
                break
            time.sleep(0.1)
    assert errors == []
    text = "".join(e["delta"] for e in rest["second"] if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert "2 + 3 = 5" in text
    assert rest["second"][-1]["type"] == "RUN_FINISHED"
