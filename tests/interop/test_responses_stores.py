"""Responses across two ``uamp serve`` processes on one real Redis, one of them killed -9.

The ``openai`` SDK (strict validation) starts a background response on one
process and streams it; that process is killed with SIGKILL mid-response.
Asked on the other process -- ``retrieve(stream=True, starting_after=N)``
with the last sequence number the client saw, or the SDK's own resume
helper -- the response goes on: from the agent's checkpoint when it reached
one (its tool not run again), else it ends ``incomplete`` with what was
produced. The numbering goes on without a gap, and both processes share one
payment ledger: the response is charged once. A cancel reaches the process
running a response from the other one. With a SQLite ``--store``, stored
responses outlive a restart, and a background response the killed server was
running is ended by the restarted one.
"""

from __future__ import annotations

import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import openai
import pytest

from tests._support.cli import doomed_serve, uamp_serve
from uamp_trio.trust.ledger import Ledger

PRICE = "0.25"


def _client(base: str, token: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{base}/v1",
        api_key="unused",
        timeout=30,
        max_retries=0,
        default_headers={"X-PAYMENT": token},
        _strict_response_validation=True,
    )


def _paid(tmp_path: Path) -> tuple[tuple[str, ...], Path, str]:
    ledger = tmp_path / "ledger.db"
    with Ledger(ledger) as book:
        token = book.issue("10", "USD")
    return ("--ledger", str(ledger), "--price", PRICE), ledger, token


def _charged_once(ledger: Path, token: str, response_id: str) -> None:
    with Ledger(ledger) as book:
        rows = [r for r in book.entries(token) if r["response_id"] == response_id]
    assert len(rows) == 1, rows  # locked once, by the lost process
    assert (rows[0]["state"], Decimal(rows[0]["charged"])) == ("settled", Decimal(PRICE))


def _deltas(events: list[Any]) -> str:
    return "".join(e.delta for e in events if e.type == "response.output_text.delta")


def _start_and_kill(
    doomed: Any, base: str, token: str, model: str, deltas: int
) -> tuple[str, list[Any]]:
    """A background response streamed from ``base`` until ``deltas`` text deltas; then kill -9."""
    stream = _client(base, token).responses.create(
        model=model, input="go", background=True, stream=True
    )
    seen: list[Any] = []
    for event in stream:
        seen.append(event)
        if event.type == "response.output_text.delta" and _deltas(seen).count("tick") >= deltas:
            break
    doomed.kill()  # SIGKILL: no shutdown, no goodbye
    doomed.wait(10)
    return seen[0].response.id, seen


def test_kill_9_mid_response_ends_it_incomplete_on_the_other_process(
    redis_url: str, tmp_path: Path
) -> None:
    paying, ledger, token = _paid(tmp_path)
    store = ("--store", redis_url, "--agent", "tests._support.agents:Ticker", *paying)
    with doomed_serve(*store) as (doomed, first), uamp_serve(*store) as second:
        # A plain stored response made on one process is found on the other.
        plain = _client(first, token).responses.create(model="ticker", input="2")
        other = _client(second, token)
        assert other.responses.retrieve(plain.id).output_text == "tick 0 tick 1 "
        follow = other.responses.create(model="ticker", input="1", previous_response_id=plain.id)
        assert follow.output_text == "tick 0 "
        rid, seen = _start_and_kill(doomed, first, token, "ticker", 6)
        last = seen[-1].sequence_number
        rest = list(other.responses.retrieve(rid, stream=True, starting_after=last))
        numbers = [e.sequence_number for e in rest]
        assert numbers == list(range(last + 1, last + 1 + len(numbers)))
        end = rest[-1]
        assert end.type == "response.incomplete"
        assert end.response.status == "incomplete"
        assert end.response.incomplete_details.reason is None
        text = _deltas(seen) + _deltas(rest)
        assert text == "".join(f"tick {i} " for i in range(text.count("tick")))
        assert end.response.output_text == text
        assert other.responses.retrieve(rid).status == "incomplete"
    _charged_once(ledger, token, rid)


def test_kill_9_after_a_checkpoint_carries_the_response_on(
    redis_url: str, tmp_path: Path, tool_runs: Path
) -> None:
    paying, ledger, token = _paid(tmp_path)
    agent = "tests._support.agents:Checkpointed"
    store = ("--store", redis_url, "--agent", agent, *paying)
    with doomed_serve(*store) as (doomed, first), uamp_serve(*store) as second:
        rid, seen = _start_and_kill(doomed, first, token, "checkpointed", 5)
        other = _client(second, token)
        # The SDK's own resume helper: it asks from the start and drops what
        # it already had itself.
        last = seen[-1].sequence_number
        with other.responses.stream(response_id=rid, starting_after=last) as stream:
            rest = list(stream)
            final = stream.get_final_response()
        assert rest[0].sequence_number == last + 1
    ticks = "".join(f"tick {i} " for i in range(40))
    assert final.status == "completed" and final.output_text == ticks
    assert len(tool_runs.read_text().split()) == 1  # the tool ran once, before the loss
    _charged_once(ledger, token, rid)


def test_a_response_running_on_one_process_is_cancelled_from_the_other(redis_url: str) -> None:
    store = ("--store", redis_url, "--agent", "tests._support.agents:WorkingAgent")
    with uamp_serve(*store) as first, uamp_serve(*store) as second:
        here, there = _client(first, "unused"), _client(second, "unused")
        queued = here.responses.create(model="slow", input="go", background=True)
        deadline = time.monotonic() + 15
        while there.responses.retrieve(queued.id).status != "in_progress":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert there.responses.retrieve(queued.id).output_text == "working "
        cancelled = there.responses.cancel(queued.id)  # asked of the process running it
        assert cancelled.status == "cancelled"
        assert here.responses.retrieve(queued.id).status == "cancelled"
        there.responses.delete(queued.id)
        with pytest.raises(openai.NotFoundError):
            here.responses.retrieve(queued.id)


def test_a_sqlite_store_keeps_responses_across_a_restart(tmp_path: Path) -> None:
    store = ("--store", str(tmp_path / "responses.db"), "--agent", "tests._support.agents:Ticker")
    with doomed_serve(*store) as (doomed, first):
        sdk = _client(first, "unused")
        kept = sdk.responses.create(model="ticker", input="2")
        running = sdk.responses.create(model="ticker", input="go", background=True)
        deadline = time.monotonic() + 15
        while "tick 3" not in sdk.responses.retrieve(running.id).output_text:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        doomed.kill()  # no shutdown: the background response is left running
        doomed.wait(10)
    with uamp_serve(*store) as again:
        sdk = _client(again, "unused")
        assert sdk.responses.retrieve(kept.id).output_text == "tick 0 tick 1 "
        lost = sdk.responses.retrieve(running.id)  # the restarted server ends it
        deadline = time.monotonic() + 15
        while lost.status == "in_progress" and time.monotonic() < deadline:
            time.sleep(0.1)
            lost = sdk.responses.retrieve(running.id)
        assert lost.status == "incomplete"
        assert lost.output_text.startswith("tick 0 tick 1 tick 2 tick 3 ")
