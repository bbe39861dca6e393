"""A2A tasks outlive their request: non-blocking sends and client disconnects."""

from __future__ import annotations

import json
from typing import Any

import httpx
import trio

from tests._support.agents import TestAgent
from tests._support.rpc import a2a_message, rpc
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.responder import Emit, TurnRequest
from uamp_trio.app import create_app
from uamp_trio.transports import a2a as a2a_transport


class GatedAgent(TestAgent):
    """Streams a first word, waits for the test to open the gate, then finishes."""

    name = "gated"

    def __init__(self, tail: int = 1) -> None:
        self.gate = trio.Event()
        self.finished = 0
        self.tail = tail

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="first ")))
        await self.gate.wait()
        for _ in range(self.tail):  # enough output to overflow a dead socket's buffers
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text="x" * 2048)))
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="done")))
        self.finished += 1


async def _state(http: httpx.AsyncClient, url: str) -> str:
    reply = await http.post(
        url, json={"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"id": TASK[0]}}
    )
    return str(reply.json()["result"]["status"]["state"])


TASK: list[str] = []


async def _until(predicate: Any) -> None:
    while not await predicate():
        await trio.sleep(0.01)


async def test_non_blocking_send_answers_at_once_and_the_task_completes_later(
    serve_app: Any,
) -> None:
    agent = GatedAgent()
    server = await serve_app(create_app([agent], transports=[a2a_transport.mount]))
    url = f"{server.url}/agents/gated/a2a"
    params = {
        "message": a2a_message("hi"),
        "configuration": {"blocking": False},
    }
    with trio.fail_after(30):
        async with httpx.AsyncClient() as http:
            reply = await http.post(url, json=rpc("message/send", params))
            task = reply.json()["result"]
            assert task["status"]["state"] in {"submitted", "working"}
            TASK[:] = [task["id"]]
            assert agent.finished == 0
            agent.gate.set()

            async def completed() -> bool:
                return await _state(http, url) == "completed"

            await _until(completed)
    assert agent.finished == 1


async def test_rest_client_that_disconnects_leaves_its_task_running(serve_app: Any) -> None:
    agent = GatedAgent(tail=3000)
    server = await serve_app(create_app([agent], transports=[a2a_transport.mount]))
    body = {"message": {"role": "user", "parts": [{"type": "text", "text": "go"}]}}
    with trio.fail_after(30):
        async with httpx.AsyncClient() as http:
            async with http.stream("POST", f"{server.url}/agents/gated/tasks", json=body) as resp:
                async for line in resp.aiter_lines():
                    if line.startswith("data: "):
                        task_id = json.loads(line[6:])["id"]
                        break
            # The stream is closed: the client has gone away mid-task.
            await trio.sleep(0.05)
            got = await http.get(f"{server.url}/agents/gated/tasks/{task_id}")
            assert got.json()["status"]["state"] == "working"
            agent.gate.set()

            async def completed() -> bool:
                now = await http.get(f"{server.url}/agents/gated/tasks/{task_id}")
                return bool(now.json()["status"]["state"] == "completed")

            await _until(completed)
    assert agent.finished == 1
