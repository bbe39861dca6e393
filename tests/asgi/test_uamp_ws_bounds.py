"""What one UAMP WebSocket connection of uamp_asgi keeps per session stays bounded.

A client that opens and ends sessions in a loop on one connection (each with
a response, a call and a voice setting) must not grow the connection's
per-session state: everything kept for a session goes with its
``session.end``. The connection runs in-process on a scripted socket, so the
test can look inside it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson
import trio

import uamp_asgi
from uamp_asgi.responders import function_agent
from uamp_asgi.transports.uamp_ws import Connection
from uamp_asgi.websocket import Closed
from uamp_proto.principal import ANONYMOUS
from uamp_proto.responder import TurnRequest

ROUNDS = 200


async def echo(turn: TurnRequest) -> AsyncIterator[str]:
    """Says back what it was told."""
    yield turn.messages[-1].text or ""


class ScriptedSocket:
    """Hands the connection ``script``'s messages, then a close; keeps what it is sent."""

    def __init__(self, script: list[dict[str, object]]) -> None:
        self.script = [orjson.dumps(m).decode() for m in script]
        self.sent: list[str] = []

    async def receive(self) -> str:
        await trio.sleep(0)
        if not self.script:
            raise Closed
        return self.script.pop(0)

    async def send(self, data: str | bytes) -> None:
        self.sent.append(data if isinstance(data, str) else data.decode())


def _churn() -> list[dict[str, object]]:
    script: list[dict[str, object]] = []
    for n in range(ROUNDS):
        sid = f"s{n}"
        script += [
            {"type": "session.create", "session_id": sid, "uamp_version": "1.0"},
            {"type": "input.text", "session_id": sid, "text": f"hi {n}"},
            {"type": "response.create", "session_id": sid},
            {"type": "voice.invite", "session_id": sid, "call_id": f"c{n}"},
            {"type": "session.end", "session_id": sid},
        ]
    return script


async def test_sessions_opened_and_ended_in_a_loop_leave_nothing_behind() -> None:
    host = uamp_asgi.app([function_agent(echo)]).host
    socket = ScriptedSocket(_churn())
    connection = Connection(host, socket, None, ANONYMOUS)  # type: ignore[arg-type]
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await connection.run(nursery)  # type: ignore[arg-type]
            connection.end_holds()
            connection.end_calls()
            connection.lift_windows()
    created = sum('"type":"session.created"' in frame for frame in socket.sent)
    assert created == ROUNDS
    kept = {
        "agents": connection.agents,
        "creates": connection.creates,
        "stops": connection.stops,
        "calls": connection.calls,
        "detectors": connection.detectors,
        "tokens": connection.tokens,
        "paid": connection.paid,
        "acked": connection.acked,
        "keys": connection.keys,
        "records": connection.records,
        "turns": connection.turns,
        "charges": connection.charges,
        "holds": connection.holds,
        "following": connection.following,
        "settling": connection.settling,
    }
    assert {name: len(held) for name, held in kept.items() if held} == {}
    assert not connection.conn.sessions


async def test_a_finished_response_leaves_no_tracker_behind() -> None:
    """A response's tracker holds its input and output: kept per session after the
    response, ten sessions of one 512 KiB turn held 10 MiB beside their histories (beyond
    the reach of the per-principal budget, which empties histories, not trackers)."""
    host = uamp_asgi.app([function_agent(echo)]).host
    big = "x" * (512 * 1024)  # echoed: 1 MiB a session, ten within the principal's budget
    script: list[dict[str, object]] = []
    for n in range(10):
        sid = f"s{n}"
        script += [
            {"type": "session.create", "session_id": sid, "uamp_version": "1.0"},
            {"type": "input.text", "session_id": sid, "text": big},
            {"type": "response.create", "session_id": sid},
        ]
    socket = ScriptedSocket(script)
    connection = Connection(host, socket, None, ANONYMOUS)  # type: ignore[arg-type]
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await connection.run(nursery)  # type: ignore[arg-type]
    # Every response ran to its end (the last one's frames after the socket closed),
    # and no session ended: each keeps its turn.
    assert [len(ctx.history) for ctx in connection.conn.sessions.values()] == [2] * 10
    assert connection.stops == {}  # but no finished response's tracker
