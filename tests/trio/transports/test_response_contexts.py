"""Each response runs in a context of its own, on every transport, however it is run.

A session's responses run one after another in one task (a session's
worker on HTTP+SSE; on WebSocket the reading task, or the worker a
response queued behind a running one goes to), and an HTTP/1.1
connection's requests in one task. What an agent sets in a context
variable and never resets must not reach the next response: the marks
each response finds are the defaults, however the responses were run.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import trio
from trio_websocket import open_websocket_url

from tests._support import wire
from tests._support.agents import Marks
from tests._support.wire import CREATE, open_stream, post
from uamp_trio import App
from uamp_trio.transports import completions, uamp_ws
from uamp_trio.transports.sse_events import SSEEventsTransport

TIMEOUT = 20


@asynccontextmanager
async def serving() -> AsyncIterator[tuple[Marks, int]]:
    """A server of a :class:`Marks` agent on Chat Completions, UAMP WebSocket and HTTP+SSE."""
    agent = Marks()
    app = App([agent])
    for mount in (completions.mount, uamp_ws.mount, SSEEventsTransport(app).mount):
        app.mount(mount)
    async with wire.serving(app) as server:
        yield agent, server.port


async def test_websocket_responses_one_after_another_and_queued() -> None:
    with trio.fail_after(TIMEOUT):
        async with (
            serving() as (agent, port),
            open_websocket_url(f"ws://127.0.0.1:{port}/agents/marks/uamp") as ws,
        ):
            sid = await wire.create_session(ws)
            # Two run by the reader; then three queued behind a slow one,
            # which its task runs in turn.
            for text in ("one", "two", "slow three", "four", "five"):
                await wire.send(ws, type="input.text", session_id=sid, text=text)
                await wire.send(ws, type="response.create", session_id=sid)
                if text in ("one", "two"):
                    await wire.until(ws, "response.done")
            for _ in range(3):
                await wire.until(ws, "response.done")
    assert len(agent.found) == 5
    assert agent.found == [None] * 5


async def test_http_sse_responses_of_one_session() -> None:
    with trio.fail_after(TIMEOUT):
        async with (
            serving() as (agent, port),
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http,
        ):
            sid = (await post(http, CREATE, path="/agents/marks/events")).json()["session_id"]
            async with open_stream(http, sid, "/agents/marks/events/stream") as events:
                await events.until("capabilities")
                for text in ("one", "two", "three"):
                    turn = [{"type": "input.text", "text": text}, {"type": "response.create"}]
                    assert (await post(http, turn, sid)).status_code == 200
                    await events.until("response.done")
    assert agent.found == [None] * 3


async def test_chat_completions_requests_on_one_connection() -> None:
    with trio.fail_after(TIMEOUT):
        async with (
            serving() as (agent, port),
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http,
        ):
            for i, stream in enumerate((False, True, False, True)):
                body = {"model": "marks", "stream": stream}
                body["messages"] = [{"role": "user", "content": f"m{i}"}]
                resp = await http.post("/agents/marks/chat/completions", json=body)
                assert resp.status_code == 200
    assert agent.found == [None] * 4
