"""Several ``uamp serve`` processes on one real Redis (docs/scale-out.md).

A client streams a response from one process, which is killed with SIGKILL
in the middle of it; the client resumes on another process and gets every
event the first one sent up to the loss, then ``response.error``
``interrupted`` with the partial output -- no gap, no event twice.
"""

from __future__ import annotations

import re
import subprocess
import time
from typing import Any

import trio
from trio_websocket import open_websocket_url as open_ws

from tests._support.cli import STARTUP, spawn_serve, uamp_serve
from tests._support.wire import create_session, recv, resume_session, send, until

TIMEOUT = 60
AGENT = "tests._support.agents:Ticker"


def _started(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + STARTUP
    seen = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        found = re.search(r"serving on http://([\d.]+:\d+)", line)
        if found:
            return found.group(1)
    raise AssertionError("uamp serve did not report its address:\n" + "".join(seen))


def _texts(events: list[dict[str, Any]]) -> list[str]:
    return [e["delta"]["text"] for e in events if e["type"] == "response.delta"]


async def test_kill_9_mid_stream_then_resume_on_the_other_process(redis_url: str) -> None:
    store = ("--store", redis_url, "--agent", AGENT)
    doomed = spawn_serve(*store)
    try:
        first = _started(doomed)
        with uamp_serve(*store) as other, trio.fail_after(TIMEOUT):
            second = other.removeprefix("http://")
            async with open_ws(f"ws://{first}/agents/ticker/uamp") as ws:
                sid = await create_session(ws)
                await send(ws, type="input.text", session_id=sid, text="go")
                await send(ws, type="response.create", session_id=sid)
                seen = await until(ws, "response.delta")
                while len(_texts(seen)) < 6:
                    seen.append(await recv(ws))
                doomed.kill()  # SIGKILL: no shutdown, no goodbye
                doomed.wait(10)
            async with open_ws(f"ws://{second}/agents/ticker/uamp") as ws:
                created = await resume_session(ws, sid, seen[-1]["event_id"])
                assert created["type"] == "session.created", created
                assert created["extensions"] == {"resumed": True}
                rest = await until(ws, "response.error")
                # The session goes on on the second process.
                await send(ws, type="input.text", session_id=sid, text="again")
                await send(ws, type="response.create", session_id=sid)
                again = await until(ws, "response.delta")
    finally:
        if doomed.poll() is None:
            doomed.kill()
            doomed.wait(10)
    error = rest[-1]["error"]
    assert error["code"] == "interrupted"
    delivered = _texts(seen) + _texts(rest)
    # Every delta up to the loss, in order, none twice.
    assert delivered == [f"tick {i} " for i in range(len(delivered))]
    assert error["details"]["text"] == "".join(delivered)
    assert error["details"]["partial_output"] == [{"type": "text", "text": "".join(delivered)}]
    ids = [e["event_id"] for e in seen + rest]
    assert len(ids) == len(set(ids))
    assert _texts(again)[0] == "tick 0 "
