"""Messages reach the process that runs a session (docs/scale-out.md, real Redis).

Two ``uamp serve`` processes share one Redis. An HTTP+SSE session created on
process A is driven entirely through process B: B streams it from the log
and forwards every POST to A, whose answer is B's answer; a
``response.cancel`` POSTed to B stops A's response. A UAMP WebSocket client
that resumed on B a session whose response still runs on A (its first
connection dropped, A lives) cancels that response from B.
"""

from __future__ import annotations

import httpx
import trio
from trio_websocket import open_websocket_url as open_ws

from tests._support.cli import uamp_serve
from tests._support.wire import (
    create_session,
    open_stream,
    post,
    recv,
    resume_session,
    send,
    until,
)

TIMEOUT = 60
AGENT = ("--agent", "tests._support.agents:Ticker")
PATH = "/agents/ticker/events"


async def test_sse_posts_to_another_process_reach_the_session(redis_url: str) -> None:
    store = ("--store", redis_url, *AGENT)
    with uamp_serve(*store) as a, uamp_serve(*store) as b, trio.fail_after(TIMEOUT):
        async with httpx.AsyncClient(base_url=a) as at_a, httpx.AsyncClient(base_url=b) as at_b:
            created = await post(at_a, {"type": "session.create", "session": {}}, path=PATH)
            assert created.status_code == 200, created.text
            sid = created.json()["session_id"]
            async with open_stream(at_b, sid, path=f"{PATH}/stream") as stream:
                turn = [
                    {"type": "input.text", "session_id": sid, "text": "go"},
                    {"type": "response.create", "session_id": sid},
                ]
                sent = await post(at_b, turn, sid, path=PATH)  # B forwards it to A
                assert (sent.status_code, sent.json()) == (
                    200,
                    {"session_id": sid, "accepted": 2},
                )
                head = await stream.until("response.delta")
                rid = head[-1]["response_id"]
                cancel = {"type": "response.cancel", "session_id": sid, "response_id": rid}
                assert (await post(at_b, cancel, sid, path=PATH)).json()["accepted"] == 1
                rest = await stream.until("response.cancelled")
                # A refusal from A is B's answer too (A's core refuses a
                # tool.result that answers no call).
                bad = {"type": "tool.result", "session_id": sid, "call_id": "x", "result": "1"}
                refused = await post(at_b, bad, sid, path=PATH)
            # Another principal's id, or one nobody has, is not found.
            unknown = await post(at_b, turn, "sess_unknown", path=PATH)
    ticks = [e for e in head + rest if e["type"] == "response.delta"]
    assert 1 <= len(ticks) < 400  # cancelled mid-stream
    assert rest[-1]["response_id"] == rid
    assert refused.status_code == 400 and refused.json()["accepted"] == 0
    assert unknown.status_code == 404


async def test_response_cancel_reaches_the_process_running_the_response(redis_url: str) -> None:
    store = ("--store", redis_url, *AGENT)
    with uamp_serve(*store) as a, uamp_serve(*store) as b, trio.fail_after(TIMEOUT):
        async with open_ws(f"ws://{a.removeprefix('http://')}/agents/ticker/uamp") as ws:
            sid = await create_session(ws)
            await send(ws, type="input.text", session_id=sid, text="go")
            await send(ws, type="response.create", session_id=sid)
            seen = await until(ws, "response.delta")
        # The connection dropped; A goes on writing the response to the log.
        async with open_ws(f"ws://{b.removeprefix('http://')}/agents/ticker/uamp") as ws:
            created = await resume_session(ws, sid, seen[-1]["event_id"])
            assert created["type"] == "session.created", created
            rid = seen[-1]["response_id"]
            await recv(ws)  # the response is streaming in from A
            await send(ws, type="response.cancel", session_id=sid, response_id=rid)
            rest = await until(ws, "response.cancelled")
    ticks = [e for e in seen + rest if e["type"] == "response.delta"]
    assert 1 <= len(ticks) < 400
    assert rest[-1]["response_id"] == rid
    errors = [e for e in rest if e["type"] in ("error", "response.error", "session.error")]
    assert errors == []
