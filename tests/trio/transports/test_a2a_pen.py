"""The A2A turn writes its text chunks into the request's stream itself (``Live.pen``).

While the request following a streamed task has written every update and
waits, the turn frames each further text chunk from the template of the one
before and queues it on the request's stream, with no update and no channel
(issue 38). These tests hold it to the general path: the same chunks in the
same order on every SSE binding, a subscriber that attaches while the turn
holds the pen still gets the rest, and a client that leaves while the turn
waits for room in its stream leaves the task running to its end.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import httpx
import orjson
import pytest
import trio
import trio.testing

from tests._support.agents import TestAgent
from tests._support.raw import receive_or_eof
from tests._support.rpc import a2a_message, a2a_v1_message, rpc
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.adapters.a2a import TaskRun
from uamp_proto.responder import Emit, TurnRequest
from uamp_trio.app import create_app
from uamp_trio.hosting.host import Host
from uamp_trio.transports.a2a.service import A2ATransport

#: Texts that JSON escapes, and plain ones.
WORDS = ["plain ", 'quote" ', "back\\slash ", "new\nline ", "tab\t ", "ünï ", "\u2028 ", "😀 "]


class WordsAgent(TestAgent):
    """Says ``count`` words; with a ``gate``, waits for it after the first two."""

    name = "words"

    def __init__(self, count: int, gate: trio.Event | None = None, size: int = 0) -> None:
        self.count = count
        self.gate = gate
        self.size = size
        self.finished = trio.Event()

    def word(self, i: int) -> str:
        return (WORDS[i % len(WORDS)] + str(i)) * max(1, self.size // 8)

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        for i in range(self.count):
            if i == 2 and self.gate is not None:
                await self.gate.wait()
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text=self.word(i))))
        self.finished.set()


def _serve(agent: TestAgent) -> tuple[Any, list[A2ATransport]]:
    transports: list[A2ATransport] = []

    def mount(app: Host) -> None:
        transport = A2ATransport(app)
        transport.mount()
        transports.append(transport)

    return create_app([agent], transports=[mount]), transports


async def _objects(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The JSON of each SSE event's data (split on blank lines only: U+2028 is text)."""
    buffer = b""
    async for data in response.aiter_bytes():
        buffer += data
        *events, buffer = buffer.split(b"\n\n")
        for event in events:
            assert event.startswith(b"data: "), event
            yield json.loads(event[6:])


def _chunks(results: list[dict[str, Any]]) -> list[tuple[str, bool, bool]]:
    """(text, append, lastChunk) of each text chunk of a 1.0 or 0.3 stream's results."""
    out = []
    for result in results:
        update = result.get("artifactUpdate", result)
        if "artifact" in update:
            (part,) = update["artifact"]["parts"]
            out.append((part["text"], bool(update.get("append")), bool(update.get("lastChunk"))))
    return out


def _v1(n: int) -> dict[str, Any]:
    return rpc("SendStreamingMessage", {"message": a2a_v1_message(str(n))})


def _v03(n: int) -> dict[str, Any]:
    return rpc("message/stream", {"message": a2a_message(str(n))})


def _rest(n: int) -> dict[str, Any]:
    return {"message": a2a_v1_message(str(n))}


#: Binding -> (path under the agent, A2A-Version, the body asking for n words).
BINDINGS = {
    "JSON-RPC 1.0": ("/a2a", "1.0", _v1),
    "JSON-RPC 0.3": ("/a2a", "0.3", _v03),
    "HTTP+JSON": ("/a2a/message:stream", "1.0", _rest),
}


@pytest.mark.parametrize("binding", list(BINDINGS))
async def test_a_long_stream_is_the_general_paths_chunks_in_order(
    serve_app: Any, binding: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    count = 400
    agent = WordsAgent(count)
    app, _ = _serve(agent)
    server = await serve_app(app)
    general = 0
    more_text = TaskRun.more_text

    def counted(run: TaskRun, text: str) -> Any:
        nonlocal general
        general += 1
        return more_text(run, text)

    monkeypatch.setattr(TaskRun, "more_text", counted)
    path, version, body = BINDINGS[binding]
    with trio.fail_after(60):
        async with httpx.AsyncClient(timeout=60) as http:
            url = f"{server.url}/agents/words{path}"
            headers = {"a2a-version": version}
            async with http.stream("POST", url, json=body(count), headers=headers) as sent:
                assert sent.status_code == 200
                results = [obj.get("result", obj) async for obj in _objects(sent)]
    words = [agent.word(i) for i in range(count)]
    expected = [(w, i > 0, False) for i, w in enumerate(words)] + [("", True, True)]
    assert _chunks(results) == expected
    final = results[-1].get("statusUpdate", results[-1])
    assert "COMPLETED" in json.dumps(final).upper()
    # The turn wrote most chunks itself: only those made before the request
    # first waited went through updates (the first goes through feed).
    assert general < count - 1


async def test_a_subscriber_that_attaches_while_the_turn_holds_the_pen_gets_the_rest(
    serve_app: Any,
) -> None:
    gate = trio.Event()
    agent = WordsAgent(6, gate)
    app, transports = _serve(agent)
    server = await serve_app(app)
    url = f"{server.url}/agents/words/a2a"
    with trio.fail_after(30):
        async with httpx.AsyncClient(timeout=30) as http:
            send = rpc("message/stream", {"message": a2a_message("go")})
            async with http.stream("POST", url, json=send) as sent:
                stream = _objects(sent)
                results = [(await anext(stream))["result"]]  # the task
                while len(_chunks(results)) < 2:
                    results.append((await anext(stream))["result"])
                task_id = results[0]["id"]
                (transport,) = transports
                while transport.tasks.live[task_id].pen is None:  # the request waits
                    await trio.sleep(0.01)
                watch = rpc("tasks/resubscribe", {"id": task_id}, rid=2)
                async with http.stream("POST", url, json=watch) as watched:
                    followed = _objects(watched)
                    assert (await anext(followed))["result"]["id"] == task_id
                    gate.set()
                    seen = [obj["result"] async for obj in followed]
                results += [obj["result"] async for obj in stream]
    rest = [(agent.word(i), True, False) for i in range(2, 6)] + [("", True, True)]
    assert _chunks(seen) == rest
    assert seen[-1]["status"]["state"] == "completed"
    assert _chunks(results)[2:] == rest


@pytest.mark.parametrize("http2", [False, True], ids=["HTTP/1.1", "h2c"])
async def test_a_client_that_leaves_while_the_turn_waits_for_room_leaves_the_task_running(
    serve_app: Any, http2: bool
) -> None:
    """The turn's write fails (nobody makes room any more); the task goes on to its end."""
    gate = trio.Event()
    # ~6 MB after the gate: more than the socket buffers (or an HTTP/2
    # stream's window) take unread.
    agent = WordsAgent(600, gate, size=8192)
    app, transports = _serve(agent)
    server = await serve_app(app)
    url = f"{server.url}/agents/words/a2a"
    full = "".join(map(agent.word, range(600)))
    get = rpc("tasks/get", {"id": "?"}, rid=3)
    with trio.fail_after(60):
        async with httpx.AsyncClient(timeout=60) as other:
            async with httpx.AsyncClient(timeout=60, http1=not http2, http2=http2) as client:
                send = rpc("message/stream", {"message": a2a_message("go")})
                async with client.stream("POST", url, json=send) as sent:
                    assert sent.http_version == ("HTTP/2" if http2 else "HTTP/1.1")
                    stream = _objects(sent)
                    results = [(await anext(stream))["result"]]  # the task
                    while len(_chunks(results)) < 2:
                        results.append((await anext(stream))["result"])
                    task_id = get["params"]["id"] = results[0]["id"]
                    (transport,) = transports
                    live = transport.tasks.live[task_id]
                    while live.pen is None:  # the request waits: the turn may write
                        await trio.sleep(0.01)
                    gate.set()  # the client reads no more
                    await trio.testing.wait_all_tasks_blocked()
                    assert not agent.finished.is_set()
                    assert live.pen is not None  # the turn waits for room in the stream
                    # What it wrote is in the task for whoever reads it meanwhile.
                    reply = (await other.post(url, json=get)).json()["result"]
                    (artifact,) = reply["artifacts"]
                    (part,) = artifact["parts"]
                    assert full.startswith(part["text"])
                    assert len(part["text"]) > len(agent.word(0) + agent.word(1))
            # The client and its connection have gone: the turn's write fails
            # (or the request ends without it), and the turn goes on.
            await agent.finished.wait()
            while True:
                task = (await other.post(url, json=get)).json()["result"]
                if task["status"]["state"] == "completed":
                    break
                await trio.sleep(0.02)
    (artifact,) = task["artifacts"]
    assert [part["text"] for part in artifact["parts"]] == [full]


async def test_a_reset_http2_stream_while_the_turn_waits_for_room_leaves_the_task_running(
    serve_app: Any,
) -> None:
    """A reset stream on a live connection: only the body's end makes the turn's write fail.

    (``engines/http.py``: a send waiting for room fails when the body ends;
    without it the turn waits for good and the task never ends.)
    """
    gate = trio.Event()
    agent = WordsAgent(600, gate, size=8192)  # far more than a stream's window after the gate
    app, transports = _serve(agent)
    server = await serve_app(app)
    path = "/agents/words/a2a"
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    body = orjson.dumps(rpc("message/stream", {"message": a2a_message("go")}))
    head = [(":method", "POST"), (":path", path), (":scheme", "http"), (":authority", "t")]
    conn.send_headers(1, [*head, ("content-type", "application/json")])
    conn.send_data(1, body, end_stream=True)
    with trio.fail_after(60):
        sock = await trio.open_tcp_stream("127.0.0.1", server.port)
        async with sock:
            await sock.send_all(conn.data_to_send())
            received = b""
            while received.count(b"\n\n") < 3:  # the task, two text chunks
                for event in conn.receive_data(await receive_or_eof(sock)):
                    if isinstance(event, h2.events.DataReceived):
                        received += event.data
                        conn.acknowledge_received_data(event.flow_controlled_length, 1)
                await sock.send_all(conn.data_to_send())
            task_id = json.loads(received.split(b"\n\n")[0][6:])["result"]["id"]
            (transport,) = transports
            live = transport.tasks.live[task_id]
            while live.pen is None:  # the request waits: the turn may write
                await trio.sleep(0.01)
            gate.set()  # the client acknowledges nothing more: the window closes
            await trio.testing.wait_all_tasks_blocked()
            assert not agent.finished.is_set() and live.pen is not None
            conn.reset_stream(1, h2.errors.ErrorCodes.CANCEL)
            await sock.send_all(conn.data_to_send())
            await agent.finished.wait()  # (the connection is still open)
        async with httpx.AsyncClient(timeout=60) as http:
            get = rpc("tasks/get", {"id": task_id}, rid=3)
            while True:
                task = (await http.post(f"{server.url}{path}", json=get)).json()["result"]
                if task["status"]["state"] == "completed":
                    break
                await trio.sleep(0.02)
    (artifact,) = task["artifacts"]
    assert [part["text"] for part in artifact["parts"]] == ["".join(map(agent.word, range(600)))]
