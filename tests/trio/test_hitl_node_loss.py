"""A run paused for a person survives kill -9 of its process (real Redis, two ``uamp serve``).

The first process pauses "what is 2+3?" on the approval of ``add`` and is
killed with SIGKILL; the client resumes its session on the second process,
which carries the response on from the checkpoint made at the pause: the run
asks again there, the client answers on the second process, ``add`` runs once
and the response ends ``2 + 3 = 5`` (or, denied, without the tool's result).
"""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
import trio
from trio_websocket import open_websocket_url as open_ws

from tests._support.cli import spawn_serve, uamp_serve, wait_for_line
from tests._support.wire import create_session, recv, resume_session, send, until

TIMEOUT = 60
INTERRUPTS = {
    "id": "c",
    "provider": "p",
    "modalities": ["text"],
    "extensions": {"interrupts": True},
}


def _started(proc: subprocess.Popen[str]) -> str:
    return wait_for_line(proc, r"serving on http://([\d.]+:\d+)").group(1)


def _text(done: dict[str, Any]) -> str:
    return "".join(i.get("text", "") for i in done["response"]["output"] if i["type"] == "text")


# (answer, what the response ends with)
CASES = {"approve": ({"approved": True}, "2 + 3 = 5"), "deny": ({"approved": False}, "denied")}


@pytest.mark.parametrize("case", list(CASES))
async def test_an_approval_answered_on_another_process_after_kill_9(
    redis_url: str, case: str
) -> None:
    answer, ends = CASES[case]
    store = ("--store", redis_url, "--approve", "add", "--no-access-log")
    doomed = spawn_serve(*store)
    try:
        first = _started(doomed)
        with uamp_serve(*store) as other, trio.fail_after(TIMEOUT):
            second = other.removeprefix("http://")
            async with open_ws(f"ws://{first}/agents/demo/uamp") as ws:
                sid = await create_session(ws, client_capabilities=INTERRUPTS)
                await send(ws, type="input.text", session_id=sid, text="what is 2+3?")
                await send(ws, type="response.create", session_id=sid)
                seen = await until(ws, "interrupt.request")
                asked = seen[-1]
                assert asked["tool_name"] == "add" and asked["arguments"] == {"a": 2, "b": 3}
                doomed.kill()  # SIGKILL while the person decides
                doomed.wait(10)
            async with open_ws(f"ws://{second}/agents/demo/uamp") as ws:
                created = await resume_session(ws, sid, seen[-1]["event_id"])
                assert created["extensions"] == {"resumed": True}
                again = await until(ws, "interrupt.request")  # the carried-on run asks again
                restored = [e for e in again if e.get("stage") == "restored"]
                assert restored and again[-1]["tool_name"] == "add"
                # ... under the id the client was shown first (the store keeps it).
                assert again[-1]["interrupt_id"] == asked["interrupt_id"]
                await send(
                    ws,
                    type="interrupt.answer",
                    session_id=sid,
                    interrupt_id=again[-1]["interrupt_id"],
                    **answer,
                )
                rest = await until(ws, "response.done")
                # Answered and done: the id reads like any unknown id now.
                await send(
                    ws,
                    type="interrupt.answer",
                    session_id=sid,
                    interrupt_id=asked["interrupt_id"],
                    approved=True,
                )
                refused = await recv(ws)
    finally:
        if doomed.poll() is None:
            doomed.kill()
            doomed.wait(10)
    assert ends in _text(rest[-1])
    results = [
        e["delta"]
        for e in rest
        if e["type"] == "response.delta" and e["delta"]["type"] == "tool_result"
    ]
    assert len(results) == 1  # add answered once, by the second process
    assert refused["type"] == "session.error" and refused["error"]["code"] == "interrupt_not_found"
