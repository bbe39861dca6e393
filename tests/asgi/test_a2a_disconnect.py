"""A streaming A2A client that drops its connection mid-task, on uamp_asgi as on ``uamp serve``.

Both servers host the same agent. The client opens ``SendStreamingMessage``
(JSON-RPC) or ``message:stream`` (HTTP+JSON) over a raw HTTP connection,
reads until the agent has said its first words, and closes the socket while
the agent still works. ``uamp serve`` leaves such a task running: its turn
is not cancelled, ends ``completed`` and ``GetTask`` shows its whole answer.
The ASGI app must do the same.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import anyio
import httpx
import pytest

import uamp_asgi
from tests._support.asgi import uvicorn_server
from uamp_asgi.responders import function_agent
from uamp_proto import events as ev
from uamp_proto.responder import TurnRequest

WAIT = 20.0
MESSAGE = {"role": "ROLE_USER", "messageId": "m1", "parts": [{"text": "go"}]}


class Worker:
    """Says ``started``, works until released, then says ``finished``; threading events
    tell a test where it is (the servers run in threads of their own)."""

    def __init__(self) -> None:
        self.started, self.release, self.cancelled, self.finished = (
            threading.Event() for _ in range(4)
        )

    async def __call__(self, turn: TurnRequest) -> AsyncIterator[str | ev.Event]:
        self.started.set()
        yield "started "
        try:
            while not self.release.is_set():
                await anyio.sleep(0.01)
        except BaseException:
            self.cancelled.set()
            raise
        yield "finished"
        self.finished.set()


@pytest.fixture
def servers(thread_server: Any) -> Iterator[dict[str, tuple[str, Worker]]]:
    """``uamp serve`` (create_app) and the ASGI app, each with its own :class:`Worker`."""
    from uamp_trio.app import create_app

    trio_worker, asgi_worker = Worker(), Worker()
    trio_app = create_app([function_agent(trio_worker, name="worker")], payment_policy=None)
    trio_url = thread_server(trio_app).url
    with uvicorn_server(uamp_asgi.app(function_agent(asgi_worker, name="worker"))) as url:
        yield {"uamp serve": (trio_url, trio_worker), "uamp_asgi": (url, asgi_worker)}


def _jsonrpc(http: httpx.Client) -> Any:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendStreamingMessage",
        "params": {"message": MESSAGE},
    }
    return http.stream("POST", "/a2a", json=body, headers={"a2a-version": "1.0"})


def _rest(http: httpx.Client) -> Any:
    return http.stream("POST", "/a2a/message:stream", json={"message": MESSAGE})


def _get(http: httpx.Client, task_id: str) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": task_id}}
    task: dict[str, Any] = http.post("/a2a", json=body).json()["result"]
    return task


@pytest.mark.parametrize("binding", [_jsonrpc, _rest], ids=["JSONRPC", "HTTP+JSON"])
def test_a_task_whose_streaming_client_left_runs_to_its_end(
    servers: dict[str, tuple[str, Worker]], binding: Callable[[httpx.Client], Any]
) -> None:
    ends = {}
    for server, (url, worker) in servers.items():
        with httpx.Client(base_url=f"{url}/agents/worker", timeout=WAIT) as http:
            task_id = None
            with binding(http) as stream:
                for line in stream.iter_lines():
                    if task_id is None and '"id":"task' in line.replace(" ", ""):
                        task_id = line.split('"id":"', 1)[1].split('"', 1)[0]
                    if "started" in line:
                        break
            # The connection is closed here; the agent still works.
            assert task_id is not None and worker.started.is_set(), server
            worker.release.set()
            assert worker.finished.wait(WAIT), server
            for _ in range(200):
                task = _get(http, task_id)
                if task["status"]["state"] != "TASK_STATE_WORKING":
                    break
                anyio.run(anyio.sleep, 0.05)
        text = "".join(p["text"] for a in task.get("artifacts", []) for p in a["parts"])
        ends[server] = (task["status"]["state"], text, worker.cancelled.is_set())
    assert (
        ends["uamp_asgi"]
        == ends["uamp serve"]
        == ("TASK_STATE_COMPLETED", "started finished", False)
    )
