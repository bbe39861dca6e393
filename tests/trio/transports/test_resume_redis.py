"""Two servers sharing one real Redis: resume and SSE Last-Event-ID across them.

Each server has its own :class:`RedisEventLog` (its own node id, its own
connection pool) on the same ``redis-server``, as two ``uamp serve``
processes would; tests/trio/test_scale_out.py runs real processes.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import httpx
import trio
from trio_websocket import open_websocket_url as open_ws

from tests._support import wire
from tests._support.wire import CREATE, open_stream, post, resume_session, until
from tests.trio.transports.test_uamp_resume import GatedAgent, deltas, start
from uamp_stores.event_log_redis import RedisEventLog
from uamp_trio import App
from uamp_trio.stores import Stores
from uamp_trio.transports import sse_events, uamp_ws

TIMEOUT = 30


@asynccontextmanager
async def two_servers(
    redis_url: str, agents: tuple[GatedAgent, GatedAgent]
) -> AsyncIterator[list[str]]:
    """Two servers (``http://...``) on one Redis; each serves its own copy of the agent."""
    prefix = f"t{uuid.uuid4().hex[:8]}"
    async with AsyncExitStack() as stack:
        urls = []
        for agent in agents:
            log = RedisEventLog(redis_url, prefix=prefix)
            app = App([agent], stores=Stores(event_log=log))
            app.mount(uamp_ws.mount, sse_events.mount)
            server = await stack.enter_async_context(wire.serving(app))
            urls.append(f"127.0.0.1:{server.port}")
            stack.push_async_callback(log.aclose)
        yield urls


async def test_a_client_resumes_on_the_other_server_mid_response(redis_url: str) -> None:
    a, b = GatedAgent(count=8, pause_at=3), GatedAgent(count=8)
    with trio.fail_after(TIMEOUT):
        async with two_servers(redis_url, (a, b)) as (first, second):
            path = f"/agents/{a.name}/uamp"
            async with open_ws(f"ws://{first}{path}") as ws:
                sid, seen = await start(ws, a)
            async with open_ws(f"ws://{second}{path}") as ws:
                created = await resume_session(ws, sid, seen[-1]["event_id"])
                assert created["extensions"] == {"resumed": True}
                a.gate.set()  # the first server's agent goes on: its events reach us via Redis
                rest = await until(ws, "response.done")
                # The session is now the second server's: its next turn runs there.
                await wire.send(ws, type="input.text", session_id=sid, text="again")
                await wire.send(ws, type="response.create", session_id=sid)
                again = await until(ws, "response.done")
    assert deltas(seen) == ["d0 ", "d1 ", "d2 "]
    assert deltas(rest) == [f"d{i} " for i in range(3, 8)]
    assert len(b.requests) == 1 and len(a.requests) == 1
    assert [m.text for m in b.requests[0].messages][:2] == ["count", "".join(deltas(seen + rest))]
    assert deltas(again) == [f"d{i} " for i in range(8)]


async def test_sse_last_event_id_on_the_other_server_follows_the_log(redis_url: str) -> None:
    a, b = GatedAgent(count=6, pause_at=2), GatedAgent()
    with trio.fail_after(TIMEOUT):
        async with two_servers(redis_url, (a, b)) as (first, second), AsyncExitStack() as stack:
            one = await stack.enter_async_context(httpx.AsyncClient(base_url=f"http://{first}"))
            two = await stack.enter_async_context(httpx.AsyncClient(base_url=f"http://{second}"))
            sid = (await post(one, CREATE)).json()["session_id"]
            async with open_stream(one, sid) as events:
                await events.until("capabilities")
                await post(
                    one, [{"type": "input.text", "text": "go"}, {"type": "response.create"}], sid
                )
                got = await events.until("response.delta")
                got.append(await events.next())
            await a.paused.wait()
            last = got[-1]["event_id"]
            async with open_stream(two, sid, **{"last-event-id": last}) as events:
                a.gate.set()
                rest: list[dict[str, Any]] = await events.until("response.done")
                assert events.ids[0] != last
            # Another principal's view of the id, or a made-up id: the same 404.
            gone = await two.get("/events/stream", headers={"x-session-id": "sess_none"})
            assert gone.status_code == 404
            bad = await two.get(
                "/events/stream", headers={"x-session-id": sid, "last-event-id": "evt_nope"}
            )
            assert (bad.status_code, bad.json()["error"]["code"]) == (400, "unknown_event")
    assert deltas(got) == ["d0 ", "d1 "]
    assert deltas(rest) == [f"d{i} " for i in range(2, 6)]
