"""``uamp serve --store redis://...`` outlives its Redis going away and comes back with it.

A real ``uamp serve`` process on a real ``redis-server``: a session completes a
turn, then Redis stops (or hangs). The process stays up: ``/healthz`` 200,
``/readyz`` 503 naming the store, a new turn and a new session are refused
with ``store_unavailable`` on a WebSocket that stays open, and the log says
so in a few lines, no traceback. Redis starts again on the same port:
``/readyz`` is 200 again, turns run, and what was queued during the outage
reached Redis (the session resumes past it). docs/scale-out.md, "When Redis
goes away".
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from trio_websocket import WebSocketConnection
from trio_websocket import open_websocket_url as open_ws

from tests._support.cli import Served
from tests._support.redis_server import free_port, start_redis, stop_redis
from tests._support.wire import CREATE, create_session, recv, resume_session, send, until

TIMEOUT = 60
AGENT = "uamp_trio:DemoAgent"
A2A_SEND = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "message/send",
    "params": {
        "message": {"role": "user", "parts": [{"kind": "text", "text": "hi"}], "messageId": "m1"}
    },
}


@contextmanager
def _served_on(url: str) -> Iterator[Served]:
    serve = ["serve", "--port", "0", "--store", url, "--agent", AGENT, "--log-level", "info"]
    with Served([sys.executable, "-m", "uamp_trio", *serve]) as served:
        yield served


async def _ready(http: httpx.AsyncClient, status: int) -> dict[str, Any]:
    """Poll ``/readyz`` until it answers ``status`` (within 15 s); its body."""
    for _ in range(150):
        reply = await http.get("/readyz")
        if reply.status_code == status:
            return reply.json()  # type: ignore[no-any-return]
        await trio.sleep(0.1)
    raise AssertionError(f"/readyz never answered {status}: {reply.status_code} {reply.text}")


async def _turn(ws: WebSocketConnection, sid: str, text: str) -> list[dict[str, Any]]:
    await send(ws, type="input.text", session_id=sid, text=text)
    await send(ws, type="response.create", session_id=sid)
    return [await recv(ws)]


async def _finish(ws: WebSocketConnection, first: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rest of a response whose first event is ``first[0]``, to its terminal event."""
    if first[-1]["type"] in ("response.done", "response.error"):
        return first
    return first + await until(ws, "response.done")


def _refused(event: dict[str, Any], etype: str) -> None:
    assert event["type"] == etype, event
    assert event["error"]["code"] == "store_unavailable", event


@pytest.mark.parametrize("outage", ["stopped", "hung"])
async def test_the_server_outlives_a_redis_outage_and_recovers(tmp_path: Path, outage: str) -> None:
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    redis = start_redis(tmp_path, port)
    try:
        with _served_on(url) as served, trio.fail_after(TIMEOUT):
            base = served.url()
            ws_url = base.replace("http://", "ws://") + "/agents/demo/uamp"
            async with (
                httpx.AsyncClient(base_url=base) as http,
                open_ws(ws_url) as ws,
            ):
                sid = await create_session(ws)
                before = await _finish(ws, await _turn(ws, sid, "hello"))
                assert before[-1]["type"] == "response.done"
                await _ready(http, 200)

                mark = len(served.lines)
                if outage == "stopped":
                    stop_redis(redis)
                else:  # accepts connections, answers nothing
                    os.kill(redis.pid, signal.SIGSTOP)
                body = await _ready(http, 503)
                assert body["status"] == "not_ready"
                assert "event_log" in body["stores"]
                assert "event_log" in body["reason"]
                assert (await http.get("/healthz")).status_code == 200
                assert served.proc.poll() is None

                # A new turn: the protocol's error, and the connection goes on.
                refused = await _turn(ws, sid, "during the outage")
                _refused(refused[0], "response.error")
                async with open_ws(ws_url) as other:
                    await send(other, type="session.create", uamp_version="1.0",
                               session={"modalities": ["text"]})  # fmt: skip
                    _refused(await recv(other), "session.error")
                await send(ws, type="capabilities.query", session_id=sid)
                assert (await recv(ws))["type"] == "capabilities"
                # UAMP HTTP+SSE: 503 with the JSON error body.
                posted = await http.post("/agents/demo/events", json=CREATE)
                assert posted.status_code == 503, posted.text
                assert posted.json()["error"]["code"] == "store_unavailable"
                if outage == "stopped":  # (a hung Redis: the same, after the 5 s limit)
                    # A2A JSON-RPC (its task store is in Redis too): a JSON-RPC error.
                    rpc = await http.post("/agents/demo/a2a", json=A2A_SEND)
                    error = rpc.json()["error"]
                    assert (error["code"], error["data"]["code"]) == (-32603, "store_unavailable")
                await trio.sleep(1.5)  # several retries of every loop meanwhile
                assert served.proc.poll() is None

                if outage == "stopped":
                    redis = start_redis(tmp_path, port)
                else:
                    os.kill(redis.pid, signal.SIGCONT)
                await _ready(http, 200)
                again = await _finish(ws, await _turn(ws, sid, "after"))
                assert again[-1]["type"] == "response.done", again
                async with open_ws(ws_url) as fresh:
                    new = await create_session(fresh)
                    done = await _finish(fresh, await _turn(fresh, new, "new"))
                    assert done[-1]["type"] == "response.done", done

            # The refusal (queued while Redis was away) is in Redis, and the turn
            # after it: a resume past the refusal finds it and gets that turn.
            # (A stopped Redis kept nothing of before: it runs without persistence.)
            async with open_ws(ws_url) as resumed:
                created = await resume_session(resumed, sid, refused[0]["event_id"])
                assert created["type"] == "session.created", created
                missed = await until(resumed, "response.done")
                ids = [e["event_id"] for e in missed]
                assert ids[-len(again) :] == [e["event_id"] for e in again]

            log = served.lines[mark:]
            assert not any("Traceback" in line for line in log), "\n".join(log)
            warnings = [line for line in log if "WARNING" in line]
            # One line per background loop and outage, not one per retry.
            assert 1 <= len(warnings) <= 3, "\n".join(warnings)
            assert any("works again" in line for line in log), "\n".join(log)
    finally:
        if redis.poll() is None:
            if outage == "hung":
                os.kill(redis.pid, signal.SIGCONT)
            stop_redis(redis)
