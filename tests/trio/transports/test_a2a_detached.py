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


async def _results(lines: Any, until: Any) -> list[dict[str, Any]]:
    """The JSON-RPC results of an SSE stream's data lines, up to the first ``until(result)``."""
    out: list[dict[str, Any]] = []
    async for line in lines:
        if line.startswith("data: "):
            out.append(json.loads(line[6:])["result"])
            if until(out[-1]):
                return out
    return out


def _final(result: dict[str, Any]) -> bool:
    return bool(result.get("final"))


async def test_a_subscriber_that_attaches_mid_stream_gets_the_later_text(serve_app: Any) -> None:
    """The turn skips publishing while nobody watches; once a subscriber does, it publishes."""
    agent = GatedAgent(tail=2)
    server = await serve_app(create_app([agent], transports=[a2a_transport.mount]))
    url = f"{server.url}/agents/gated/a2a"
    with trio.fail_after(30):
        async with httpx.AsyncClient(timeout=30) as http:
            send = rpc("message/stream", {"message": a2a_message("go")})
            async with http.stream("POST", url, json=send) as sent:
                lines = sent.aiter_lines()
                first = await _results(lines, lambda r: r.get("kind") == "artifact-update")
                task_id = first[0]["id"]
                watch = rpc("tasks/resubscribe", {"id": task_id}, rid=2)
                async with http.stream("POST", url, json=watch) as watched:
                    followed = watched.aiter_lines()
                    snapshot = await _results(followed, lambda r: True)
                    assert snapshot[0]["id"] == task_id
                    agent.gate.set()  # the rest of the text: through the shortcut
                    seen = await _results(followed, _final)
                rest = await _results(lines, _final)
    texts = [
        part["text"]
        for r in seen
        if r.get("kind") == "artifact-update"
        for part in r["artifact"]["parts"]
    ]
    assert texts == ["x" * 2048, "x" * 2048, "done", ""]  # "" closes the text artifact
    assert seen[-1]["status"]["state"] == "completed"
    sent_texts = [
        part["text"]
        for r in rest
        if r.get("kind") == "artifact-update"
        for part in r["artifact"]["parts"]
    ]
    assert sent_texts == texts
