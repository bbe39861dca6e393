"""An A2A task whose process is killed -9 mid-turn, seen from the survivor (docs/scale-out.md).

Two ``uamp serve`` processes share one real Redis (tasks) and one real
PostgreSQL ledger. a2a-sdk's client starts a paid streaming task on A and
also follows it through B; A is killed outright. B's subscriber gets the
task's end (``failed`` with code ``interrupted``, the ticks A made before
it died, once each and in order) instead of waiting for ever; a later
``GetTask`` and a fresh subscription on B agree; push notifications are not
involved. Once A's ledger heartbeat expired, B settles A's lock once: the
task is charged its price or nothing, never twice, nothing stays held.
"""

from __future__ import annotations

import asyncio
import time
from decimal import Decimal
from typing import Any

import httpx
import pytest
from a2a.types import a2a_pb2 as pb

from tests._support.agents import run_asyncio
from tests._support.cli import doomed_serve, uamp_serve
from tests.interop.test_a2a_scale_out import _client, _collect, _ticks, _until
from uamp_trio.trust.ledger_postgres import PostgresLedger, migrate

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

FAILED = pb.TaskState.TASK_STATE_FAILED
PRICE = Decimal("0.5")


def test_a_task_whose_process_dies_ends_interrupted_on_the_survivor_and_is_charged_once(
    redis_url: str, postgres_url: str
) -> None:
    migrate(postgres_url)
    with PostgresLedger(postgres_url) as book:
        token = book.issue("10", "USD")
    serve = (
        *("--store", redis_url, "--agent", "tests._support.agents:Ticker"),
        *("--ledger", postgres_url, "--price", str(PRICE), "--ledger-heartbeat", "2"),
    )
    paying = {"X-PAYMENT": token}

    with doomed_serve(*serve) as (proc_a, a), uamp_serve(*serve) as b:
        out: list[Any] = []

        async def main() -> None:
            async with (
                httpx.AsyncClient(timeout=30, headers=paying) as http_a,
                httpx.AsyncClient(timeout=30, headers=paying) as http_b,
            ):
                at_a, at_b = await _client(http_a, a), await _client(http_b, b)
                sent: list[pb.StreamResponse] = []
                message = pb.Message(
                    role=pb.Role.ROLE_USER, parts=[pb.Part(text="go")], message_id="m-1"
                )
                sending = asyncio.create_task(
                    _collect(at_a.send_message(pb.SendMessageRequest(message=message)), sent)
                )
                await _until(lambda: len(_ticks(sent)) >= 2, "A streams ticks")
                task_id = sent[0].task.id
                followed: list[pb.StreamResponse] = []
                following = asyncio.create_task(
                    _collect(at_b.subscribe(pb.SubscribeToTaskRequest(id=task_id)), followed)
                )
                await _until(lambda: len(_ticks(followed)) >= 3, "B streams A's ticks")
                proc_a.kill()  # kill -9: A says nothing more
                proc_a.wait(10)
                await asyncio.wait_for(following, 30)  # ends: B does not wait for ever
                sending.cancel()
                got = await at_b.get_task(pb.GetTaskRequest(id=task_id))
                out.extend((sent, followed, got, task_id))

        run_asyncio(main, timeout=90)
        _, followed, got, task_id = out

    last = followed[-1].status_update
    assert last.task_id == task_id and last.status.state == FAILED
    said = "".join(p.text for p in last.status.message.parts)
    assert "stopped before the task finished" in said
    assert got.status.state == FAILED and got.id == task_id
    # What B streamed is A's ticks, once each and in order, then the end.
    ticks = _ticks(followed)
    assert ticks == list(range(ticks[0], ticks[0] + len(ticks)))
    assert len(ticks) < 400  # the turn did not finish: A died

    # A's lock is settled once by a survivor once A's heartbeat is stale.
    with PostgresLedger(postgres_url, heartbeat=2) as book:
        deadline = time.monotonic() + 30
        while book.show(token).account.locked and time.monotonic() < deadline:
            book.recover()
            time.sleep(0.5)
        account = book.show(token).account
        rows = book.entries(token)
    assert account.locked == 0 and len(rows) == 1 and rows[0]["state"] == "settled"
    assert Decimal(rows[0]["charged"]) in (Decimal(0), PRICE)
    assert account.balance == Decimal(10) - Decimal(rows[0]["charged"])
