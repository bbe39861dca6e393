"""Messages reach the process that runs a session (docs/scale-out.md, real Redis).

Two ``uamp serve`` processes share one Redis. An HTTP+SSE session created on
process A is driven entirely through process B: B streams it from the log
and forwards every POST to A, whose answer is B's answer; a
``response.cancel`` POSTed to B stops A's response. A UAMP WebSocket client
that resumed on B a session whose response still runs on A (its first
connection dropped, A lives) cancels that response from B. When A is
killed (SIGKILL), B adopts A's HTTP+SSE session on the client's next
``GET`` or POST and serves it from then on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import trio
from trio_websocket import open_websocket_url as open_ws

from tests._support.cli import doomed_serve, uamp_serve
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


async def test_an_sse_session_whose_process_died_is_adopted_by_another(
    redis_url: str, tool_runs: Path
) -> None:
    """kill -9 of the process holding an HTTP+SSE session mid-response.

    The client's next ``GET /events/stream`` (``Last-Event-ID``, what an
    EventSource sends when it reconnects) on the other process adopts the
    session: the response goes on from its checkpoint into that stream, and
    the client's next POSTs are served there.
    """
    store = ("--store", redis_url, "--agent", "tests._support.agents:Checkpointed")
    path = "/agents/checkpointed/events"
    with doomed_serve(*store) as (doomed, a), uamp_serve(*store) as b, trio.fail_after(TIMEOUT):
        async with httpx.AsyncClient(base_url=a) as at_a:
            created = await post(at_a, {"type": "session.create", "session": {}}, path=path)
            sid = created.json()["session_id"]
            async with open_stream(at_a, sid, path=f"{path}/stream") as stream:
                turn = [
                    {"type": "input.text", "session_id": sid, "text": "go"},
                    {"type": "response.create", "session_id": sid},
                ]
                assert (await post(at_a, turn, sid, path=path)).status_code == 200
                seen: list[dict[str, Any]] = []
                while sum(1 for e in seen if e["type"] == "response.delta") < 6:
                    seen.append(await stream.next())
                last = stream.ids[-1]
                assert last == seen[-1]["event_id"]
                doomed.kill()
                doomed.wait(10)
        async with httpx.AsyncClient(base_url=b) as at_b:
            headers = {"last-event-id": last}
            async with open_stream(at_b, sid, path=f"{path}/stream", **headers) as stream:
                rest = await stream.until("response.done")
                again = await post(at_b, turn, sid, path=path)
                next_turn = await stream.until("response.done")
            # Any process now forwards to the adopter.
            ended = await post(at_b, {"type": "session.end", "session_id": sid}, sid, path=path)
    ids = [e["event_id"] for e in seen + rest]
    assert len(ids) == len(set(ids))  # nothing twice across the two streams
    restored = [e for e in rest if e["type"] == "progress" and e.get("stage") == "restored"]
    assert [e["message"] for e in restored] == ["cp1"]
    ticks = "".join(f"tick {i} " for i in range(40))
    assert rest[-1]["response"]["output"][-1]["text"] == ticks
    assert (again.status_code, again.json()) == (200, {"session_id": sid, "accepted": 2})
    assert next_turn[-1]["response"]["output"][-1]["text"] == ticks
    assert next_turn[-1]["response"]["id"] != rest[-1]["response"]["id"]
    assert ended.status_code == 200
    # The tool ran in A, not again in B's carried-on run; once more for the next turn.
    assert len(tool_runs.read_text().split()) == 2


async def test_a_post_to_a_session_whose_process_died_is_served_by_the_adopter(
    redis_url: str,
) -> None:
    # Before: 404, the session lived only in the dead process's memory. The
    # POST comes at once: it first waits for the dead process's answer.
    store = ("--store", redis_url, *AGENT)
    with doomed_serve(*store) as (doomed, a), uamp_serve(*store) as b, trio.fail_after(TIMEOUT):
        async with httpx.AsyncClient(base_url=a) as at_a:
            created = await post(at_a, {"type": "session.create", "session": {}}, path=PATH)
            sid = created.json()["session_id"]
        doomed.kill()
        doomed.wait(10)
        async with httpx.AsyncClient(base_url=b, timeout=30) as at_b:
            text = {"type": "input.text", "session_id": sid, "text": "go"}
            adopted = await post(at_b, text, sid, path=PATH)
            async with open_stream(at_b, sid, path=f"{PATH}/stream") as stream:
                go = {"type": "response.create", "session_id": sid}
                assert (await post(at_b, go, sid, path=PATH)).status_code == 200
                events = await stream.until("response.delta")
    assert (adopted.status_code, adopted.json()) == (200, {"session_id": sid, "accepted": 1})
    assert events[-1]["delta"]["text"] == "tick 0 "


def _ticks(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"]["text"] for e in events if e["type"] == "response.delta")


async def _turn_begun_on(at: httpx.AsyncClient, sid: str) -> str:
    """POST a turn of 40 ticks to ``at``; read its stream to the third delta, then drop it.

    A client whose stream breaks there and that kept no event id (an
    EventSource that never got one) comes back without ``Last-Event-ID``.
    Returns the response's id.
    """
    turn = [
        {"type": "input.text", "session_id": sid, "text": "40"},
        {"type": "response.create", "session_id": sid},
    ]
    async with open_stream(at, sid, path=f"{PATH}/stream") as stream:
        assert (await post(at, turn, sid, path=PATH)).status_code == 200
        head = await stream.until("response.delta")
        while sum(1 for e in head if e["type"] == "response.delta") < 3:
            head.append(await stream.next())
    return str(head[-1]["response_id"])


async def test_a_stream_without_last_event_id_on_another_process_gets_the_running_response(
    redis_url: str,
) -> None:
    """A ``GET`` with no ``Last-Event-ID`` on a process that follows the log starts at the response.

    It used to start "now": what the session's process had logged before
    -- ``response.created`` and the first deltas -- never reached the
    client, whose next ``response.create`` got 400 ``response_in_progress``.
    """
    store = ("--store", redis_url, *AGENT)
    with uamp_serve(*store) as a, uamp_serve(*store) as b, trio.fail_after(TIMEOUT):
        async with httpx.AsyncClient(base_url=a) as at_a, httpx.AsyncClient(base_url=b) as at_b:
            created = await post(at_a, {"type": "session.create", "session": {}}, path=PATH)
            sid = created.json()["session_id"]
            rid = await _turn_begun_on(at_a, sid)
            async with open_stream(at_b, sid, path=f"{PATH}/stream") as stream:
                seen = await stream.until("response.done")
    assert seen[0]["type"] == "response.created" and seen[0]["response_id"] == rid
    assert _ticks(seen) == "".join(f"tick {i} " for i in range(40))
    ids = [e["event_id"] for e in seen]
    assert len(ids) == len(set(ids))


async def test_a_stream_without_last_event_id_that_adopts_gets_the_lost_response(
    redis_url: str,
) -> None:
    """The same after kill -9 of the session's process: the adopter's stream has it whole."""
    store = ("--store", redis_url, *AGENT)
    with doomed_serve(*store) as (doomed, a), uamp_serve(*store) as b, trio.fail_after(TIMEOUT):
        async with httpx.AsyncClient(base_url=a) as at_a:
            created = await post(at_a, {"type": "session.create", "session": {}}, path=PATH)
            sid = created.json()["session_id"]
            rid = await _turn_begun_on(at_a, sid)
            doomed.kill()
            doomed.wait(10)
        async with (
            httpx.AsyncClient(base_url=b) as at_b,
            open_stream(at_b, sid, path=f"{PATH}/stream") as stream,
        ):
            seen = await stream.until("response.error")
    mine = [e for e in seen if e.get("response_id") == rid]
    assert mine[0]["type"] == "response.created"
    assert mine[-1]["error"]["code"] == "interrupted"
    delivered = _ticks(mine)
    assert len(delivered.split()) >= 6  # the three the first stream showed, at least
    assert mine[-1]["error"]["details"]["text"] == delivered
    ids = [e["event_id"] for e in seen]
    assert len(ids) == len(set(ids))
