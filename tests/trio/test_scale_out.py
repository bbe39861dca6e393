"""Several ``uamp serve`` processes on one real Redis (docs/scale-out.md).

A client streams a response from one process, which is killed with SIGKILL
in the middle of it; the client resumes on another process and gets every
event the first one sent up to the loss, then either ``response.error``
``interrupted`` with the partial output (an agent without checkpoints) or the
rest of the response carried on from the agent's last checkpoint, its
completed tool not run again -- no gap, no event twice. Both processes share
one payment ledger: the lost process's lock is settled once, never taken
again.
"""

from __future__ import annotations

import subprocess
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs
import orjson
import trio
from trio_websocket import open_websocket_url as open_ws

from tests._support.cli import spawn_serve, uamp_serve, wait_for_line
from tests._support.wire import create_session, recv, resume_session, send, until
from uamp_proto.codec import decode
from uamp_proto.response import ResponseTracker
from uamp_trio.trust.ledger import Ledger

TIMEOUT = 60
AGENT = "tests._support.agents:Ticker"
PRICE = "0.25"


def _started(proc: subprocess.Popen[str]) -> str:
    return wait_for_line(proc, r"serving on http://([\d.]+:\d+)").group(1)


def _texts(events: list[dict[str, Any]]) -> list[str]:
    return [
        e["delta"]["text"]
        for e in events
        if e["type"] == "response.delta" and e["delta"]["type"] == "text"
    ]


def _paid(tmp_path: Path) -> tuple[tuple[str, ...], Path, str]:
    """Ledger flags for both processes, the ledger file, and a token holding 10 USD."""
    ledger = tmp_path / "ledger.db"
    with Ledger(ledger) as book:
        token = book.issue("10", "USD")
    return ("--ledger", str(ledger), "--price", PRICE), ledger, token


@attrs.frozen
class Loss:
    """What the client saw around the loss of the process streaming to it."""

    seen: list[dict[str, Any]]  # from the first process, until it was killed
    rest: list[dict[str, Any]]  # after resuming on the second, to the response's end
    again: list[dict[str, Any]]  # the next turn on the second process


async def _lose_mid_stream(
    store: tuple[str, ...], agent: str, token: str, deltas: int, end: str
) -> Loss:
    """Stream from one process, kill -9 it after ``deltas`` text deltas, resume on another."""
    doomed = spawn_serve(*store)
    try:
        first = _started(doomed)
        with uamp_serve(*store) as other, trio.fail_after(TIMEOUT):
            second = other.removeprefix("http://")
            async with open_ws(f"ws://{first}/agents/{agent}/uamp") as ws:
                sid = await create_session(ws, payment_token=token)
                await send(ws, type="input.text", session_id=sid, text="go")
                await send(ws, type="response.create", session_id=sid)
                seen = await until(ws, "response.delta")
                while len(_texts(seen)) < deltas:
                    seen.append(await recv(ws))
                doomed.kill()  # SIGKILL: no shutdown, no goodbye
                doomed.wait(10)
            async with open_ws(f"ws://{second}/agents/{agent}/uamp") as ws:
                # The payment token is not kept with the session: a resuming
                # client sends it again for the turns to come.
                created = await resume_session(ws, sid, seen[-1]["event_id"], payment_token=token)
                assert created["type"] == "session.created", created
                assert created["extensions"] == {"resumed": True}
                rest = await until(ws, end)
                # The session goes on at the second process (a Ticker says
                # 3 ticks to "3"; Checkpointed its 40).
                await send(ws, type="input.text", session_id=sid, text="3")
                await send(ws, type="response.create", session_id=sid)
                again = await until(ws, "response.done")
    finally:
        if doomed.poll() is None:
            doomed.kill()
            doomed.wait(10)
    ids = [e["event_id"] for e in seen + rest]
    assert len(ids) == len(set(ids))  # no event twice
    return Loss(seen, rest, again)


def _charged_once(ledger: Path, token: str, response_id: str) -> None:
    """The lost process's lock of ``response_id`` was settled once, at the flat price."""
    with Ledger(ledger) as book:
        rows = [r for r in book.entries(token) if r["response_id"] == response_id]
        account = book.show(token).account
    assert len(rows) == 1, rows  # locked once, by the first process only
    assert (rows[0]["state"], Decimal(rows[0]["charged"])) == ("settled", Decimal(PRICE))
    # This response and the next turn's, nothing more, nothing still held.
    assert (account.settled, account.locked) == (2 * Decimal(PRICE), Decimal(0))


async def test_kill_9_mid_stream_then_resume_on_the_other_process(
    redis_url: str, tmp_path: Path
) -> None:
    paying, ledger, token = _paid(tmp_path)
    store = ("--store", redis_url, "--agent", AGENT, *paying)
    loss = await _lose_mid_stream(store, "ticker", token, 6, "response.error")
    error = loss.rest[-1]["error"]
    assert error["code"] == "interrupted"
    delivered = _texts(loss.seen) + _texts(loss.rest)
    # Every delta up to the loss, in order, none twice.
    assert delivered == [f"tick {i} " for i in range(len(delivered))]
    assert error["details"]["text"] == "".join(delivered)
    assert error["details"]["partial_output"] == [{"type": "text", "text": "".join(delivered)}]
    assert _texts(loss.again)[0] == "tick 0 "
    # Settled by the process that ended the response: the flat price of a
    # response that delivered something.
    _charged_once(ledger, token, loss.rest[-1]["response_id"])


async def test_kill_9_after_a_checkpoint_carries_the_response_on(
    redis_url: str, tmp_path: Path, tool_runs: Path
) -> None:
    paying, ledger, token = _paid(tmp_path)
    store = ("--store", redis_url, "--agent", "tests._support.agents:Checkpointed", *paying)
    loss = await _lose_mid_stream(store, "checkpointed", token, 5, "response.done")
    # The tool ran once in the lost process (the carried-on run did not
    # repeat it); the next turn ran it once more.
    assert len(tool_runs.read_text().split()) == 2
    restored = [e for e in loss.rest if e["type"] == "progress" and e.get("stage") == "restored"]
    assert [e["message"] for e in restored] == ["cp1"]
    ticks = "".join(f"tick {i} " for i in range(40))
    done = loss.rest[-1]["response"]
    assert [item["type"] for item in done["output"]] == ["tool_call", "tool_result", "text"]
    assert done["output"][2]["text"] == ticks
    # A client that follows the stream ends with the same output: the
    # restored event rolls back what was sent after the checkpoint.
    tracker = ResponseTracker(done["id"])
    for event in loss.seen + loss.rest:
        if done["id"] in (event.get("response_id"), event.get("target_id")):
            tracker.apply(decode(orjson.dumps(event)))
    assert tracker.text == ticks
    assert loss.again[-1]["response"]["output"][-1]["text"] == ticks
    # Charged once: the first process's lock, settled by the second.
    _charged_once(ledger, token, done["id"])


async def _acked(ws: Any, sid: str, end: str, events: list[dict[str, Any]]) -> None:
    """Receive up to the next ``end`` into ``events``, acknowledging each numbered delta."""
    event: dict[str, Any] = {}
    while event.get("type") != end:
        event = await recv(ws)
        events.append(event)
        if "delta_seq" in event:
            await send(
                ws,
                type="progress",
                session_id=sid,
                target="response",
                target_id=event["response_id"],
                stage="ack",
                delta_seq=event["delta_seq"],
            )


async def test_a_delta_window_goes_on_numbering_across_a_node_loss(
    redis_url: str, tool_runs: Path
) -> None:
    windowed = {"modalities": ["text"], "extensions": {"flow": {"delta_window": 4}}}
    store = ("--store", redis_url, "--agent", "tests._support.agents:Checkpointed")
    doomed = spawn_serve(*store)
    seen: list[dict[str, Any]] = []
    rest: list[dict[str, Any]] = []
    again: list[dict[str, Any]] = []
    try:
        first = _started(doomed)
        with uamp_serve(*store) as other, trio.fail_after(TIMEOUT):
            async with open_ws(f"ws://{first}/agents/checkpointed/uamp") as ws:
                sid = await create_session(ws, session=windowed)
                await send(ws, type="input.text", session_id=sid, text="go")
                await send(ws, type="response.create", session_id=sid)
                while len(_texts(seen)) < 5:
                    await _acked(ws, sid, "response.delta", seen)
                doomed.kill()
                doomed.wait(10)
            second = other.removeprefix("http://")
            async with open_ws(f"ws://{second}/agents/checkpointed/uamp") as ws:
                await send(
                    ws,
                    type="session.create",
                    uamp_version="1.0",
                    session=windowed,
                    session_id=sid,
                    extensions={"resume_from": seen[-1]["event_id"]},
                )
                created = await recv(ws)
                assert created["extensions"] == {"resumed": True}, created
                assert created["session"]["config"]["extensions"]["flow"] == {"delta_window": 4}
                await _acked(ws, sid, "response.done", rest)
                await send(ws, type="input.text", session_id=sid, text="again")
                await send(ws, type="response.create", session_id=sid)
                await _acked(ws, sid, "response.done", again)
    finally:
        if doomed.poll() is None:
            doomed.kill()
            doomed.wait(10)
    rid = rest[-1]["response"]["id"]
    numbered = [e for e in seen + rest if e["type"] == "response.delta"]
    # Every delta of the response numbered once, in order, across both
    # processes: the carried-on part goes on after the last logged number.
    assert [e["delta_seq"] for e in numbered] == list(range(len(numbered)))
    assert {e["response_id"] for e in numbered} == {rid}
    assert rest[-1]["response"]["output"][-1]["text"] == "".join(f"tick {i} " for i in range(40))
    errors = [e for e in rest + again if e["type"] in ("error", "session.error")]
    assert errors == []
    # The resumed session keeps its window: the next response is numbered from 0.
    next_deltas = [e["delta_seq"] for e in again if e["type"] == "response.delta"]
    assert next_deltas == list(range(42))  # the tool call, its result, 40 ticks
