"""auto_resume on a paid session: the payment token goes with the resume (docs/resume.md).

A real ``uamp serve`` with a SQLite event log and a ledger streams a paid
response; it is killed with SIGKILL in the middle of it and started again on
the same port and files. The client resumes by itself: the response goes on
from the agent's checkpoint and is charged once (the lost process's lock,
settled by the new one), and the next turn is paid with the token the client
gave after the session opened -- it is not asked to pay again.
"""

from __future__ import annotations

import signal
import socket
import subprocess
from decimal import Decimal
from pathlib import Path

import trio

from tests._support.cli import spawn, wait_for_line
from tests.trio.client.test_auto_resume import connect_later
from uamp_trio.client import ClientSession
from uamp_trio.trust.ledger import Ledger

TIMEOUT = 60
PRICE = "0.25"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _serve(port: int, tmp_path: Path) -> subprocess.Popen[str]:
    proc = spawn(
        *("serve", "--port", str(port), "--store", str(tmp_path / "sessions.db")),
        *("--ledger", str(tmp_path / "ledger.db"), "--price", PRICE),
        *("--agent", "tests._support.agents:Checkpointed"),
    )
    wait_for_line(proc, r"serving on http://")
    return proc


async def test_a_paid_session_resumed_after_a_restart_is_not_asked_to_pay_again(
    tmp_path: Path, tool_runs: Path
) -> None:
    with Ledger(tmp_path / "ledger.db") as book:
        token = book.issue("10", "USD")
    asked: list[str] = []

    def pay(required: object) -> str:
        asked.append(type(required).__name__)
        return token

    port = _free_port()
    server = _serve(port, tmp_path)
    try:
        with trio.fail_after(TIMEOUT):
            async with connect_later(f"ws://127.0.0.1:{port}/agents/checkpointed/uamp") as started:
                client = await started()
                session: ClientSession = await client.create_session(  # type: ignore[attr-defined]
                    on_payment_required=pay
                )
                texts, rid = [], None
                async for event in session.respond("go"):
                    if event.type == "response.delta" and event.delta.type == "text":  # type: ignore[attr-defined]
                        texts.append(event.delta.text)  # type: ignore[attr-defined]
                        rid = event.response_id  # type: ignore[attr-defined]
                        if len(texts) == 3:
                            server.kill()  # SIGKILL mid-response, after the checkpoint
                            server.wait(10)
                            server = _serve(port, tmp_path)
                    if event.type == "response.done":
                        first = event.response  # type: ignore[attr-defined]
                again = await session.ask("again")
    finally:
        # A graceful stop: the last response's settlement may still be on its way to the
        # ledger after response.done (a SIGKILL here raced it and left the lock unsettled).
        server.send_signal(signal.SIGINT)
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()
            raise
    assert client.reconnects >= 1  # type: ignore[attr-defined]
    ticks = "".join(f"tick {i} " for i in range(40))
    assert first.id == rid and first.output[-1].text == ticks
    assert again.text == ticks
    # Asked to pay once, for the first turn: the resume carried the token.
    assert asked == ["PaymentRequired"]
    with Ledger(tmp_path / "ledger.db") as book:
        rows = book.entries(token)
        account = book.show(token).account
    # One lock per response, each settled once at the price: the killed
    # response's lock was settled by the restarted process, not taken again.
    assert sorted(r["response_id"] for r in rows) == sorted([rid, again.response_id])
    assert [(r["state"], Decimal(r["charged"])) for r in rows] == [("settled", Decimal(PRICE))] * 2
    assert (account.settled, account.locked) == (2 * Decimal(PRICE), Decimal(0))
