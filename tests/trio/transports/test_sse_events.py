"""UAMP over HTTP+SSE: the server against httpx as a raw client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import trio

from tests._support import wire
from tests._support.agents import TestAgent
from tests._support.tools import WEATHER_TOOL
from tests._support.wire import CREATE, SSEStream, open_stream, post
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.responder import Emit, Responder, TurnRequest
from uamp_trio import App, DemoAgent, Server
from uamp_trio.hosting.sessions import SessionLimits
from uamp_trio.transports.sse_events import SSEEventsTransport

TIMEOUT = 15


class TokenAgent(TestAgent):
    """Answers with the session token it was given."""

    name = "tokens"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text=f"token={request.token}")))


@asynccontextmanager
async def serving(
    agents: list[Responder], limits: SessionLimits | None = None
) -> AsyncIterator[tuple[httpx.AsyncClient, SSEEventsTransport]]:
    app = App(agents)
    transport = SSEEventsTransport(app, limits)
    app.mount(transport.mount)
    async with (
        wire.serving(app) as server,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as http,
    ):
        yield http, transport


async def test_session_create_then_stream_a_response() -> None:
    with trio.fail_after(TIMEOUT):
        async with serving([DemoAgent()]) as (http, _):
            resp = await post(http, CREATE, path="/agents/demo/events")
            assert resp.status_code == 200
            sid = resp.headers["x-session-id"]
            assert resp.json() == {"session_id": sid, "accepted": 1}
            async with open_stream(http, sid, "/agents/demo/events/stream") as events:
                created = await events.next()
                assert created["type"] == "session.created" and created["session_id"] == sid
                caps = await events.next()
                assert caps["type"] == "capabilities"
                # One POST may carry several events as a JSON array.
                resp = await post(
                    http,
                    [{"type": "input.text", "text": "hi you"}, {"type": "response.create"}],
                    sid,
                )
                assert resp.json()["accepted"] == 2
                got = await events.until("response.done")
                text = "".join(e["delta"]["text"] for e in got if e["type"] == "response.delta")
                assert text == "You said: hi you"
                # Each SSE id is its event's event_id (what Last-Event-ID names).
                assert events.ids[:3] == [created["event_id"], caps["event_id"], got[0]["event_id"]]


async def test_session_id_in_the_query_and_token_refresh() -> None:
    with trio.fail_after(TIMEOUT):
        async with serving([TokenAgent()]) as (http, _):
            resp = await post(http, {**CREATE, "token": "first"})
            sid = resp.json()["session_id"]
            async with http.stream(
                "GET", f"/events/stream?session_id={sid}", timeout=httpx.Timeout(10, read=None)
            ) as raw:
                events = SSEStream(raw)
                await events.until("capabilities")
                await post(http, {"type": "session.update", "token": "second"}, sid)
                assert (await events.next())["type"] == "session.updated"
                await post(http, {"type": "response.create"}, sid)
                got = await events.until("response.done")
                assert got[1]["delta"]["text"] == "token=second"


async def test_bad_input_gets_400_and_unknown_sessions_404() -> None:
    with trio.fail_after(TIMEOUT):
        async with serving([DemoAgent()]) as (http, _):
            bad = await http.post("/events", content=b"{nope")
            assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_json"
            bad = await post(http, {"type": "input.text", "text": "x"})
            assert bad.status_code == 400
            assert bad.json()["error"]["code"] == "session_id_required"
            bad = await post(http, [1, 2])
            assert bad.status_code == 400 and "array" in bad.json()["error"]["message"]
            missing = await post(http, {"type": "input.text", "text": "x"}, "sess_nope")
            assert missing.status_code == 404
            assert missing.json()["error"]["code"] == "unknown_session"
            gone = await http.get("/events/stream", headers={"x-session-id": "sess_nope"})
            assert gone.status_code == 404
            unknown_agent = await post(http, CREATE, path="/agents/nobody/events")
            assert unknown_agent.status_code == 404
            assert unknown_agent.json()["error"]["code"] == "agent_offline"  # UAMP 6.3's code
            named = await post(http, {**CREATE, "agent": "nobody"})
            assert named.status_code == 404
            assert named.json()["error"]["code"] == "agent_offline"  # UAMP 6.3's code
            assert named.json()["error"]["details"] == {"reason": "agent_not_found"}

            sid = (await post(http, CREATE)).json()["session_id"]
            invalid = await post(
                http, [{"type": "input.text", "text": "ok"}, {"type": "input.text"}], sid
            )
            assert invalid.status_code == 400
            body = invalid.json()
            assert body["error"]["code"] == "invalid_event" and body["accepted"] == 1
            assert "text" in body["error"]["message"]
            # The session survived the bad event.
            ok = await post(http, {"type": "response.create"}, sid)
            assert ok.status_code == 200
            async with open_stream(http, sid) as events:
                got = await events.until("response.done")
                assert got[-1]["response"]["status"] == "completed"


async def test_tool_round_trip_and_cancel_over_http() -> None:
    with trio.fail_after(TIMEOUT):
        async with serving([DemoAgent()]) as (http, _):
            session = {"modalities": ["text"], "tools": [WEATHER_TOOL]}
            sid = (await post(http, {**CREATE, "session": session})).json()["session_id"]
            async with open_stream(http, sid) as events:
                await events.until("capabilities")
                await post(
                    http,
                    [
                        {"type": "input.text", "text": "get weather in Oslo"},
                        {"type": "response.create"},
                    ],
                    sid,
                )
                call = (await events.until("tool.call"))[-1]
                await post(
                    http, {"type": "tool.result", "call_id": call["call_id"], "result": "42"}, sid
                )
                done = (await events.until("response.done"))[-1]
                assert done["response"]["output"][-1] == {
                    "type": "text",
                    "text": "Tool get_weather returned: 42",
                }


async def test_last_event_id_replays_and_sessions_expire() -> None:
    with trio.fail_after(TIMEOUT):
        limits = SessionLimits(max_sessions=1, idle_timeout=0.3)
        async with serving([DemoAgent()], limits) as (http, transport):
            sid = (await post(http, CREATE)).json()["session_id"]
            async with open_stream(http, sid) as events:
                first = await events.until("capabilities")
            async with open_stream(http, sid, **{"last-event-id": first[0]["event_id"]}) as events:
                again = await events.next()
                assert again == first[1]  # the event after the one named
            assert transport.session_count == 1
            while transport.session_count:
                await trio.sleep(0.05)
            gone = await post(http, {"type": "response.create"}, sid)
            assert gone.status_code == 404


async def test_session_end_closes_the_stream() -> None:
    with trio.fail_after(TIMEOUT):
        async with serving([DemoAgent()]) as (http, transport):
            sid = (await post(http, CREATE)).json()["session_id"]
            async with open_stream(http, sid) as events:
                await events.until("capabilities")
                await post(http, {"type": "session.end", "reason": "user_left"}, sid)
                rest = [chunk async for chunk in events.chunks]
                assert b"session" not in b"".join(rest)  # nothing but the end of the stream
            assert transport.session_count == 0


class Hang(TestAgent):
    """Streams one delta, then waits forever (a live response)."""

    name = "hang"

    def __init__(self) -> None:
        self.cancelled = trio.Event()

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="working")))
        try:
            await trio.sleep_forever()
        finally:
            self.cancelled.set()


async def test_server_shutdown_ends_a_live_session_and_its_stream() -> None:
    agent = Hang()
    app = App([agent])
    transport = SSEEventsTransport(app)
    app.mount(transport.mount)
    server = Server(app, port=0, shutdown_grace=0.3)
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            await nursery.start(server.serve)
            base = f"http://127.0.0.1:{server.port}"
            async with httpx.AsyncClient(base_url=base) as http:
                sid = (await post(http, CREATE)).json()["session_id"]
                assert transport.session_count == 1
                async with open_stream(http, sid) as events:
                    await events.until("capabilities")
                    await post(
                        http,
                        [{"type": "input.text", "text": "go"}, {"type": "response.create"}],
                        sid,
                    )
                    assert (await events.until("response.delta"))[-1]["delta"]["text"] == (
                        "working"
                    )
                    server.shutdown()
                    ended_at = trio.current_time()
                    # The stream ends (cleanly or cut) once the grace period is over.
                    try:
                        while True:
                            await events.next()
                    except (StopAsyncIteration, httpx.HTTPError):
                        pass
                    assert trio.current_time() - ended_at < 5
        # serve() returned: the session ran under the server, not in a system task.
        assert transport.session_count == 0
        assert agent.cancelled.is_set()


class Chatty(TestAgent):
    """Says far more than an unread session's outbox holds."""

    name = "chatty"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        for i in range(500):
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text=f"{i} ")))


async def test_a_session_nobody_reads_does_not_hold_the_shutdown() -> None:
    # Its response fills the outbox and waits for room; cancelled, it owes
    # the client response.cancelled, which waits for room too (shielded: a
    # terminal event is never dropped). Before, that wait held the session's
    # task, and the server's shutdown, for ever.
    app = App([Chatty()])
    transport = SSEEventsTransport(app)
    app.mount(transport.mount)
    server = Server(app, port=0, shutdown_grace=0.3)
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            await nursery.start(server.serve)
            base = f"http://127.0.0.1:{server.port}"
            async with httpx.AsyncClient(base_url=base) as http:
                sid = (await post(http, CREATE)).json()["session_id"]
                await post(http, [{"type": "input.text", "text": "go"}], sid)
                await post(http, [{"type": "response.create"}], sid)
                await trio.sleep(0.3)  # the outbox fills; nobody streams it
                await post(http, [{"type": "response.cancel"}], sid)
                await trio.sleep(0.3)  # response.cancelled waits for room
            server.shutdown()
    assert transport.session_count == 0


class Chatter(TestAgent):
    """``count`` deltas ``c0 c1 ...``, a scheduler round apart."""

    name = "chatter"

    def __init__(self, count: int) -> None:
        self.count = count

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        for i in range(self.count):
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text=f"c{i} ")))
            await trio.lowlevel.checkpoint()


async def test_streams_opened_and_dropped_mid_response_lose_and_repeat_nothing() -> None:
    # The response runs while no stream is attached, and streams come and go
    # (the first without Last-Event-ID, the others with the last id read): what
    # was queued as each one opened reaches it, once, in order.
    agent = Chatter(400)
    path = "/agents/chatter/events"
    with trio.fail_after(TIMEOUT):
        async with serving([agent]) as (http, _):
            sid = (await post(http, CREATE, path=path)).headers["x-session-id"]
            turn = [
                {"type": "input.text", "session_id": sid, "text": "go"},
                {"type": "response.create", "session_id": sid},
            ]
            assert (await post(http, turn, sid, path=path)).status_code == 200
            events: list[dict[str, object]] = []
            while not events or events[-1]["type"] != "response.done":
                last = {"last-event-id": str(events[-1]["event_id"])} if events else {}
                async with open_stream(http, sid, f"{path}/stream", **last) as stream:
                    for _ in range(7):  # a few, then the stream is dropped
                        events.append(await stream.next())
                        if events[-1]["type"] == "response.done":
                            break
    ids = [e["event_id"] for e in events]
    assert len(ids) == len(set(ids))
    assert wire.texts(events) == "".join(f"c{i} " for i in range(agent.count))
