"""Resuming UAMP WebSocket sessions from the event log (docs/resume.md), over real sockets."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from trio_websocket import open_websocket_url as open_ws

from tests._support import wire
from tests._support.agents import TestAgent
from tests._support.wire import create_session, recv, resume_session, send, until
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.responder import Emit, TurnRequest
from uamp_proto.resume import Retention
from uamp_stores.event_log import EventLog, MemoryEventLog
from uamp_stores.event_log_sqlite import SqliteEventLog
from uamp_trio import App
from uamp_trio.stores import Stores
from uamp_trio.transports import uamp_ws
from uamp_trio.trust.auth import APIKeyAuthenticator

TIMEOUT = 20


class GatedAgent(TestAgent):
    """``count`` deltas ``d0 d1 ...``; stops after ``pause_at`` until :attr:`gate` is set."""

    name = "gated"

    def __init__(self, count: int = 10, pause_at: int | None = None) -> None:
        self.count = count
        self.pause_at = pause_at
        self.gate = trio.Event()
        self.paused = trio.Event()
        self.requests: list[TurnRequest] = []

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        self.requests.append(request)
        for i in range(self.count):
            if i == self.pause_at:
                self.paused.set()
                await self.gate.wait()
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text=f"d{i} ")))


@asynccontextmanager
async def serving(agent: TestAgent, log: EventLog | None = None, **app: Any) -> AsyncIterator[str]:
    stores = Stores(event_log=log) if log is not None else Stores()
    instance = App([agent], stores=stores, **app)
    instance.mount(uamp_ws.mount)
    async with wire.serving(instance) as server:
        yield f"ws://127.0.0.1:{server.port}/agents/{agent.name}/uamp"


async def ask(ws: Any, sid: str, text: str) -> None:
    await send(ws, type="input.text", session_id=sid, text=text)
    await send(ws, type="response.create", session_id=sid)


async def start(ws: Any, agent: GatedAgent) -> tuple[str, list[dict[str, Any]]]:
    """A new session asked to count, read up to the agent's pause; (session id, events)."""
    sid = await create_session(ws)
    await ask(ws, sid, "count")
    seen = await until(ws, "response.delta")
    while len(deltas(seen)) < (agent.pause_at or 1):
        seen.append(await recv(ws))
    await agent.paused.wait()
    return sid, seen


def deltas(events: list[dict[str, Any]]) -> list[str]:
    return [e["delta"]["text"] for e in events if e["type"] == "response.delta"]


async def test_a_dropped_connection_resumes_mid_response_and_the_response_continues() -> None:
    agent = GatedAgent(count=10, pause_at=4)
    with trio.fail_after(TIMEOUT):
        async with serving(agent) as url:
            async with open_ws(url) as ws:
                sid, seen = await start(ws, agent)
            # The socket is gone; the response goes on while nobody listens.
            agent.gate.set()
            await trio.sleep(0.1)
            last = seen[-1]
            async with open_ws(url) as ws:
                created = await resume_session(ws, sid, last["event_id"])
                assert created["type"] == "session.created", created
                assert created["session_id"] == sid
                assert created["extensions"] == {"resumed": True}
                rest = await until(ws, "response.done")
    before = deltas(seen)
    assert before == ["d0 ", "d1 ", "d2 ", "d3 "]
    assert deltas(rest) == [f"d{i} " for i in range(4, 10)]
    ids = [e["event_id"] for e in seen + rest]
    assert len(ids) == len(set(ids)), "an event was sent twice"
    done = rest[-1]
    assert done["response"]["output"][0]["text"] == "".join(f"d{i} " for i in range(10))


async def test_a_resume_reaches_the_live_stream_of_a_running_response() -> None:
    agent = GatedAgent(count=6, pause_at=2)
    with trio.fail_after(TIMEOUT):
        async with serving(agent) as url:
            async with open_ws(url) as ws:
                sid, seen = await start(ws, agent)
            async with open_ws(url) as ws:
                created = await resume_session(ws, sid, seen[-2]["event_id"])
                assert created["extensions"] == {"resumed": True}
                replayed = [await recv(ws)]  # d1: sent before the drop, logged
                agent.gate.set()  # the rest is produced after the resume
                rest = await until(ws, "response.done")
    assert deltas(replayed + rest) == ["d1 ", "d2 ", "d3 ", "d4 ", "d5 "]


async def test_the_resumed_session_keeps_its_conversation() -> None:
    agent = GatedAgent(count=2)
    with trio.fail_after(TIMEOUT):
        async with serving(agent) as url:
            async with open_ws(url) as ws:
                sid = await create_session(ws)
                await ask(ws, sid, "first question")
                first = await until(ws, "response.done")
            async with open_ws(url) as ws:
                created = await resume_session(ws, sid, first[-1]["event_id"])
                assert created["extensions"] == {"resumed": True}
                await ask(ws, sid, "second question")
                second = await until(ws, "response.done")
    assert deltas(second) == ["d0 ", "d1 "]
    history = [(m.role, m.text) for m in agent.requests[1].messages]
    assert history == [
        ("user", "first question"),
        ("assistant", "d0 d1 "),
        ("user", "second question"),
    ]


async def test_resuming_an_unknown_session_is_a_session_error() -> None:
    with trio.fail_after(TIMEOUT):
        async with serving(GatedAgent()) as url, open_ws(url) as ws:
            answer = await resume_session(ws, "sess_never", "evt_x")
            assert answer["type"] == "session.error"
            assert answer["error"]["code"] == "unknown_session"
            # The connection goes on: a new session works.
            sid = await create_session(ws)
            assert sid


async def test_an_unknown_event_id_and_a_bad_resume_from_are_refused() -> None:
    with trio.fail_after(TIMEOUT):
        async with serving(GatedAgent(count=1)) as url:
            async with open_ws(url) as ws:
                sid = await create_session(ws)
            async with open_ws(url) as ws:
                unknown = await resume_session(ws, sid, "evt_not_sent_here")
            async with open_ws(url) as ws:
                bad = await resume_session(ws, sid, "")
    assert (unknown["type"], unknown["error"]["code"]) == ("session.error", "unknown_event")
    assert (bad["type"], bad["error"]["code"]) == ("session.error", "invalid_event")


async def test_a_resume_beyond_retention_says_so() -> None:
    log = MemoryEventLog(Retention(max_events=4))
    with trio.fail_after(TIMEOUT):
        async with serving(GatedAgent(count=10), log) as url:
            async with open_ws(url) as ws:
                await send(
                    ws, type="session.create", uamp_version="1.0", session={"modalities": ["text"]}
                )
                created = await recv(ws)
                sid = created["session_id"]
                await recv(ws)  # capabilities
                await ask(ws, sid, "count")
                await until(ws, "response.done")
            async with open_ws(url) as ws:
                answer = await resume_session(ws, sid, created["event_id"])
    assert answer["type"] == "session.error"
    assert answer["error"]["code"] == "beyond_retention"
    assert "lost" in answer["error"]["message"]


async def test_an_expired_session_cannot_be_resumed() -> None:
    now = [1000.0]
    log = MemoryEventLog(Retention(max_age=60.0), clock=lambda: now[0])
    with trio.fail_after(TIMEOUT):
        async with serving(GatedAgent(count=1), log) as url:
            async with open_ws(url) as ws:
                sid = await create_session(ws)
                await ask(ws, sid, "hi")
                done = await until(ws, "response.done")
            now[0] += 61
            async with open_ws(url) as ws:
                answer = await resume_session(ws, sid, done[-1]["event_id"])
    assert (answer["type"], answer["error"]["code"]) == ("session.error", "session_expired")


async def test_an_ended_session_cannot_be_resumed() -> None:
    with trio.fail_after(TIMEOUT):
        async with serving(GatedAgent(count=1)) as url:
            async with open_ws(url) as ws:
                sid = await create_session(ws)
                await ask(ws, sid, "hi")
                done = await until(ws, "response.done")
                await send(ws, type="session.end", session_id=sid)
                await trio.sleep(0.1)
            async with open_ws(url) as ws:
                answer = await resume_session(ws, sid, done[-1]["event_id"])
    assert (answer["type"], answer["error"]["code"]) == ("session.error", "session_expired")


async def test_only_the_owner_resumes() -> None:
    auth = APIKeyAuthenticator([("alice", "key-alice"), ("bob", "key-bob")])
    agent = GatedAgent(count=2)
    with trio.fail_after(TIMEOUT):
        async with serving(agent, authenticator=auth) as url:
            async with open_ws(url + "?token=key-alice") as ws:
                sid = await create_session(ws)
                await ask(ws, sid, "hi")
                done = await until(ws, "response.done")
            async with open_ws(url + "?token=key-bob") as ws:
                theirs = await resume_session(ws, sid, done[-1]["event_id"])
                never = await resume_session(ws, "sess_never", done[-1]["event_id"])
                # The connection goes on for Bob's own sessions.
                assert await create_session(ws, session_id="sess_bob") == "sess_bob"
            async with open_ws(url + "?token=key-alice") as ws:
                mine = await resume_session(ws, sid, done[0]["event_id"])
                replayed = await until(ws, "response.done")
    assert theirs["type"] == never["type"] == "session.error"
    masked = [(e["error"]["code"], e["error"]["message"].replace(sid, "X")) for e in (theirs,)]
    assert masked == [
        (never["error"]["code"], never["error"]["message"].replace("sess_never", "X"))
    ]
    assert mine["extensions"] == {"resumed": True}
    assert deltas(replayed) == ["d0 ", "d1 "]


async def test_a_sqlite_log_resumes_after_a_server_restart(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    agent = GatedAgent(count=3)
    with trio.fail_after(TIMEOUT):
        log = SqliteEventLog(path)
        async with serving(agent, log) as url, open_ws(url) as ws:
            sid = await create_session(ws)
            await ask(ws, sid, "one")
            first = await until(ws, "response.done")
        await log.aclose()
        # A new server process: a new store on the same file.
        log = SqliteEventLog(path)
        async with serving(agent, log) as url, open_ws(url) as ws:
            created = await resume_session(ws, sid, first[0]["event_id"])  # after response.created
            replayed = await until(ws, "response.done")
            await ask(ws, sid, "two")
            await until(ws, "response.done")
        await log.aclose()
    assert created["extensions"] == {"resumed": True}
    assert deltas(replayed) == ["d0 ", "d1 ", "d2 "]
    assert [m.text for m in agent.requests[1].messages] == ["one", "d0 d1 d2 ", "two"]


@pytest.mark.parametrize("count", [1, 50])
async def test_events_are_logged_in_the_order_sent(count: int) -> None:
    log = MemoryEventLog()
    with trio.fail_after(TIMEOUT):
        async with serving(GatedAgent(count=count), log) as url, open_ws(url) as ws:
            sid = await create_session(ws)
            await ask(ws, sid, "go")
            sent = await until(ws, "response.done")
    from uamp_proto.principal import ANONYMOUS

    logged = await log.read((ANONYMOUS.key, sid), 0, limit=10_000)
    # session.created and capabilities come before the response's events.
    sent_ids = [e["event_id"] for e in sent]
    assert [e.event_id for e in logged][2:] == sent_ids
    assert [e.position for e in logged] == list(range(1, len(logged) + 1))
