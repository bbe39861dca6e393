"""A failure inside background work ends that work, never the server (issue 29).

Each test makes one kind of background work raise -- a session's chat task,
an agent's answer in a room, a relayed turn, a response carried on after a
lost process, an A2A push delivery, a store's loop -- through ordinary
client traffic on a real server on 127.0.0.1, then shows that the failure
was logged, that the client whose work it was heard of it where it has a
client, and that the server goes on serving everyone (``/healthz``, a new
UAMP session answered). Before, the exception ended the server's nursery and
with it ``trio.run`` (a relayed turn was already contained by the turn
driver, which answers ``response.error``: kept as a regression test).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import httpx
import pytest
import trio
from trio_websocket import ConnectionClosed
from trio_websocket import open_websocket_url as open_ws

from tests._support import wire
from tests._support.rpc import a2a_message, rpc
from tests.trio.transports.test_chat_rooms import Reader
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.codec import encode
from uamp_proto.principal import ANONYMOUS
from uamp_stores import a2a_push as push
from uamp_stores.event_log import MemoryEventLog, SessionRecord
from uamp_trio.app import create_app
from uamp_trio.demo import DemoAgent
from uamp_trio.engines.supervise import Background, supervised
from uamp_trio.hosting import session_log
from uamp_trio.hosting.chats import ChatHub
from uamp_trio.hosting.sessions import SessionHost
from uamp_trio.relay import platform
from uamp_trio.relay.daemon import Daemon

TIMEOUT = 20


class Boom(RuntimeError):
    """The failure injected into the background work."""


def boom(*args: Any, **kwargs: Any) -> Any:
    raise Boom("injected")


async def aboom(*args: Any, **kwargs: Any) -> Any:
    await trio.sleep(0)
    raise Boom("injected")


async def still_serving(base: str) -> None:
    """``/healthz`` answers and a new UAMP session gets its answer."""
    async with httpx.AsyncClient(base_url=base, timeout=TIMEOUT) as http:
        assert (await http.get("/healthz")).status_code == 200
    async with open_ws(base.replace("http", "ws") + "/agents/demo/uamp") as ws:
        await wire.create_session(ws)
        await wire.ask(ws, "still here")
        events = await wire.until(ws, "response.done")
        assert wire.texts(events) == "You said: still here"


def logged(caplog: pytest.LogCaptureFixture, what: str) -> bool:
    return any(
        what in r.getMessage() and isinstance(r.exc_info and r.exc_info[1], Boom)
        for r in caplog.records
    )


# --- the helper itself ------------------------------------------------------------------


async def test_supervised_keeps_the_error_and_lets_cancellation_through(
    caplog: pytest.LogCaptureFixture,
) -> None:
    told: list[BaseException] = []
    await supervised(aboom, what="the unit", on_error=told.append)
    assert [type(e) for e in told] == [Boom]
    assert logged(caplog, "the unit failed")
    with trio.CancelScope() as scope:
        scope.cancel()
        await supervised(trio.sleep_forever, on_error=told.append)
    assert scope.cancelled_caught and len(told) == 1  # cancelled is no failure


async def test_a_task_of_the_background_nursery_fails_alone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    done = trio.Event()

    async def fine() -> None:
        await trio.sleep(0.01)
        done.set()

    async with trio.open_nursery() as nursery:
        background = Background(nursery)
        background.start_soon(aboom, name="a failing task")
        background.start_soon(fine)
    assert done.is_set()
    assert logged(caplog, "a failing task failed")


# --- each kind of background work, through a real server --------------------------------


@asynccontextmanager
async def eve_in_a_room(port: int) -> AsyncIterator[tuple[Reader, str]]:
    """Eve's session in room "room" with the demo agent, on a multiplexing socket."""
    async with open_ws(f"ws://127.0.0.1:{port}/ws") as ws:
        r = Reader(ws)
        sid = await r.join("eve", agent="demo", chat="room")
        await r.expect(sid, [("presence.online", "demo")])
        yield r, sid


async def test_a_failing_chat_task_ends_that_sessions_chats_only(
    serve_app: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    server = await serve_app(create_app([DemoAgent()]))
    monkeypatch.setattr(ChatHub, "say", aboom)
    with trio.fail_after(TIMEOUT):
        async with eve_in_a_room(server.port) as (r, sid):
            await wire.send(r.ws, type="input.text", text="hello", session_id=sid)
            error = await r.take_any(sid)
            assert error["type"] == "session.error" and error["error"]["code"] == "internal_error"
        await still_serving(server.url)
    assert logged(caplog, "chat work _work failed")


async def test_a_failing_answer_in_a_room_tells_the_poster(
    serve_app: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    server = await serve_app(create_app([DemoAgent()]))
    monkeypatch.setattr(ChatHub, "_run_answer", aboom)
    with trio.fail_after(TIMEOUT):
        async with eve_in_a_room(server.port) as (r, sid):
            await wire.send(r.ws, type="input.text", text="@demo hi", session_id=sid)
            await r.expect(sid, [("message.created", 1, "eve", "@demo hi")])
            error = await r.take_any(sid)
            assert error["error"]["code"] == "internal_error", error
            assert error["error"]["details"] == {"agent": "demo", "chat_id": "room"}
            # The room goes on: the next message is stored and fanned out.
            await wire.send(r.ws, type="input.text", text="still?", session_id=sid)
            await r.expect(sid, [("message.created", 2, "eve", "still?")])
        await still_serving(server.url)
    assert logged(caplog, "chat work _answer failed")


async def test_a_failing_connection_gives_its_sessions_back(
    serve_app: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The reader fails (a bug in the host, injected on response.cancel): the
    # handler logs it and the socket closes, and its session leaves the app's
    # per-principal history budget rather than staying counted, and the dead
    # host referenced, until that principal next goes over the budget.
    app = create_app([DemoAgent()])
    server = await serve_app(app)
    monkeypatch.setattr(SessionHost, "_cancel", boom)
    with trio.fail_after(TIMEOUT):
        async with open_ws(f"ws://127.0.0.1:{server.port}/agents/demo/uamp") as ws:
            await wire.create_session(ws)
            await wire.ask(ws, "remember me")
            await wire.until(ws, "response.done")
            assert app.uamp_histories.total(ANONYMOUS.key) > 0
            await wire.send(ws, type="response.cancel")
            with pytest.raises(ConnectionClosed):
                while True:
                    await ws.get_message()
        await still_serving(server.url)
    assert any("WebSocket handler failed" in r.getMessage() for r in caplog.records)
    assert app.uamp_histories.total(ANONYMOUS.key) == 0


async def test_a_failing_relayed_turn_ends_that_turn_only(
    serve_app: Any, nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = create_app([DemoAgent()], relay=True)
    server = await serve_app(app)
    daemon = Daemon(server.url, [DemoAgent("far")])
    nursery.start_soon(daemon.run)
    monkeypatch.setattr(platform.DaemonLink, "run_turn", aboom)
    with trio.fail_after(TIMEOUT):
        await daemon.connected.wait()
        async with open_ws(f"ws://127.0.0.1:{server.port}/agents/far/uamp") as ws:
            await wire.create_session(ws)
            await wire.ask(ws, "relayed")
            error = (await wire.until(ws, "response.error"))[-1]
            assert error["error"]["code"] == "internal_error", error
        await still_serving(server.url)
    daemon.stop()


async def test_a_failing_continuation_ends_the_response_it_carried(
    serve_app: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app([DemoAgent()])
    log = app.stores.event_log
    assert isinstance(log, MemoryEventLog)
    # A session whose response was running in a process that is gone.
    key = (ANONYMOUS.key, "sess_lost")
    log.begin(key, SessionRecord(agent="demo", node="a-lost-process", running="resp_1"))
    delta = ev.ResponseDelta(response_id="resp_1", delta=ty.DeltaText(text="half"))
    log.append(key, encode(attrs.evolve(delta, event_id="evt_0", session_id="sess_lost")), "evt_0")
    log.release(key)
    monkeypatch.setattr(session_log, "carry_on", aboom)
    server = await serve_app(app)
    with trio.fail_after(TIMEOUT):
        async with open_ws(f"ws://127.0.0.1:{server.port}/agents/demo/uamp") as ws:
            await wire.resume_session(ws, "sess_lost", "evt_0")
            error = (await wire.until(ws, "response.error"))[-1]
            assert error["response_id"] == "resp_1"
            assert error["error"]["code"] == "interrupted", error
        await still_serving(server.url)
    assert logged(caplog, "carrying on response resp_1 failed")


async def test_a_failing_push_delivery_is_logged_and_the_task_completes(
    serve_app: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    server = await serve_app(create_app([DemoAgent()]))
    monkeypatch.setattr(push.PushSender, "_post", aboom)
    params = {
        "message": a2a_message("pushed"),
        "configuration": {"pushNotificationConfig": {"url": "https://push.example/hook"}},
    }
    with trio.fail_after(TIMEOUT):
        async with httpx.AsyncClient(base_url=server.url, timeout=TIMEOUT) as http:
            reply = (await http.post("/agents/demo/a2a", json=rpc("message/send", params))).json()
        assert reply["result"]["status"]["state"] == "completed", reply
        while not logged(caplog, "PushSender._deliver failed"):
            await trio.sleep(0.01)
        await still_serving(server.url)


async def test_a_failing_store_loop_is_started_again(
    serve_app: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app([DemoAgent()])
    log = app.stores.event_log
    real_run = type(log).run
    failures = 0

    async def flaky_run(self: MemoryEventLog) -> None:
        nonlocal failures
        if failures < 2:
            failures += 1
            raise Boom("injected")
        await real_run(self)

    monkeypatch.setattr(type(log), "run", flaky_run)
    caplog.set_level(logging.INFO, logger="uamp_stores")
    server = await serve_app(app)
    with trio.fail_after(TIMEOUT):
        async with open_ws(f"ws://127.0.0.1:{server.port}/agents/demo/uamp") as ws:
            await wire.create_session(ws)  # its session starts the loop, which fails
            while failures < 2:  # it fails twice, the second time after a backoff
                await trio.sleep(0.02)
            assert log.health.down and not log.health.unavailable  # a bug, not an outage
            await wire.ask(ws, "meanwhile")  # the store is usable all along
            events = await wire.until(ws, "response.done")
            assert wire.texts(events) == "You said: meanwhile"
        await still_serving(server.url)
    assert failures == 2
    assert any("failed (Boom: injected); retrying" in r.getMessage() for r in caplog.records)
