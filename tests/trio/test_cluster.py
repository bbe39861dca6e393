"""Three ``uamp serve`` nodes behind a real haproxy, sharing Redis and a PostgreSQL ledger.

The topology of ``deploy/compose.yaml`` without containers: each node runs in
its own working directory and shares no file with the others; Redis holds
sessions and event logs, PostgreSQL the payment ledger, and haproxy (the
project's own ``deploy/haproxy.cfg``) spreads connections round-robin with no
stickiness. Paid streaming conversations over the UAMP WebSocket (the real
client, ``auto_resume``) and Chat Completions run through haproxy while one
node is killed with -9 and another is stopped with SIGTERM. Every client gets
a complete response or a documented terminal state (``interrupted`` for a
WebSocket response whose node died; a Completions stream cut with its
connection), no WebSocket client sees an event twice, the balance is never
negative while it runs, and once the dead node's heartbeat expired every
lock is settled exactly once: the sum charged is the price of the responses
charged, nothing is held.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from decimal import Decimal
from pathlib import Path

import httpx
import psycopg
import trio

from tests._support.cli import ROOT
from tests._support.haproxy import check_config, running_haproxy
from uamp_trio.client import connect
from uamp_trio.trust.ledger_postgres import PostgresLedger, migrate

PRICE = Decimal("0.25")
TICKS = 40  # the Ticker agent says "tick 0 " .. "tick 39 ", one per 50 ms
WEBSOCKETS = 18
COMPLETIONS = 6
TIMEOUT = 90


class Node:
    """One ``uamp serve`` in its own directory, its output in a file there."""

    def __init__(self, directory: Path, *flags: str) -> None:
        directory.mkdir()
        self.log = directory / "uamp.log"
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "uamp_trio", "serve", "--port", "0", *flags],
                cwd=directory,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.address = self._wait_address()

    def _wait_address(self) -> str:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            found = re.search(r"serving on http://([\d.]+:\d+)", self.log.read_text())
            if found:
                return found.group(1)
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"node did not start:\n{self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(15)


@contextmanager
def cluster(tmp_path: Path, redis_url: str, ledger_url: str) -> Iterator[tuple[str, list[Node]]]:
    flags = (
        *("--agent", "tests._support.agents:Ticker", "--store", redis_url),
        *("--ledger", ledger_url, "--price", str(PRICE), "--ledger-heartbeat", "2"),
        *("--grace", "15"),
    )
    with ExitStack() as stack:
        nodes = []
        for i in range(3):
            node = Node(tmp_path / f"node{i}", *flags)
            stack.callback(node.stop)
            nodes.append(node)
        url = stack.enter_context(running_haproxy([n.address for n in nodes]))
        yield url, nodes


def _watch_balance(ledger_url: str, stop: threading.Event, seen: list[tuple[Decimal, ...]]) -> None:
    with psycopg.connect(ledger_url, autocommit=True) as conn:
        while not stop.is_set():
            row = conn.execute("SELECT balance, locked, settled FROM accounts").fetchone()
            assert row is not None
            seen.append(tuple(row))
            time.sleep(0.02)


def test_the_shipped_haproxy_config_is_valid() -> None:
    done = check_config(["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"])
    assert done.returncode == 0, done.stderr
    assert "Configuration file is valid" in done.stdout + done.stderr


async def test_three_nodes_lose_one_to_kill_9_and_drain_one_and_charge_once(
    tmp_path: Path, redis_url: str, postgres_url: str
) -> None:
    migrate(postgres_url)
    with PostgresLedger(postgres_url) as book:
        token = book.issue("100", "USD")
    stop, seen = threading.Event(), []
    watcher = threading.Thread(target=_watch_balance, args=(postgres_url, stop, seen))
    watcher.start()
    ws_results: list[tuple[str, str | None, str, str | None]] = []
    cc_results: list[tuple[bool, str]] = []
    try:
        with cluster(tmp_path, redis_url, postgres_url) as (url, nodes):
            ws_url = url.replace("http://", "ws://") + "/agents/ticker/uamp"

            async def converse() -> None:
                async with connect(ws_url, auto_resume=True, resume_for=60) as client:
                    session = await client.create_session(payment_token=token)
                    result = await session.ask(str(TICKS))
                    code = result.error.code if result.error is not None else None
                    ws_results.append((result.status, result.response_id, result.text, code))

            async def complete(http: httpx.AsyncClient) -> None:
                body = {"stream": True, "messages": [{"role": "user", "content": str(TICKS)}]}
                text = ""
                try:
                    async with http.stream(
                        "POST",
                        "/agents/ticker/chat/completions",
                        json=body,
                        headers={"X-PAYMENT": token},
                    ) as reply:
                        assert reply.status_code == 200, await reply.aread()
                        async for line in reply.aiter_lines():
                            text += line + "\n"
                except (httpx.RemoteProtocolError, httpx.ReadError):
                    cc_results.append((False, text))
                    return
                cc_results.append(("data: [DONE]" in text, text))

            with trio.fail_after(TIMEOUT):
                async with (
                    httpx.AsyncClient(base_url=url, timeout=30) as http,
                    trio.open_nursery() as nursery,
                ):
                    for n in range(WEBSOCKETS):
                        nursery.start_soon(converse)
                        if n < COMPLETIONS:
                            nursery.start_soon(complete, http)
                        await trio.sleep(0.02)
                    await trio.sleep(0.5)  # every response is streaming now
                    nodes[0].proc.kill()  # kill -9: no goodbye
                    nodes[1].proc.send_signal(signal.SIGTERM)  # graceful drain
            assert nodes[1].proc.wait(20) == 0  # drained and exited cleanly
    finally:
        stop.set()
        watcher.join()

    # Every client got a complete response or a documented terminal state.
    assert len(ws_results) == WEBSOCKETS and len(cc_results) == COMPLETIONS
    full = "".join(f"tick {i} " for i in range(TICKS))
    for status, response_id, text, code in ws_results:
        assert response_id is not None
        assert full.startswith(text), text  # in order, nothing twice, no gap
        assert (status, code) in {("completed", None), ("failed", "interrupted")}, (status, code)
        if status == "completed":
            assert text == full
    completed_ws = sum(1 for r in ws_results if r[0] == "completed")
    assert completed_ws >= WEBSOCKETS // 2  # the two nodes that lived finished theirs
    # The balance was never negative and the sums always held.
    assert seen
    for balance, locked, settled in seen:
        assert balance >= 0 and locked >= 0 and balance + locked + settled == Decimal(100)

    # Once the killed node's heartbeat is stale, its locks are settled by a
    # survivor: each response charged once, at most its price, none held.
    with PostgresLedger(postgres_url, heartbeat=2) as book:
        deadline = time.monotonic() + 30
        while book.show(token).account.locked and time.monotonic() < deadline:
            book.recover()
            time.sleep(0.5)
        account = book.show(token).account
        rows = book.entries(token)
    assert account.locked == 0 and all(r["state"] == "settled" for r in rows)
    ids = [r["response_id"] for r in rows]
    assert len(ids) == len(set(ids))  # locked once per response
    charged = [Decimal(r["charged"]) for r in rows]
    assert all(c in (0, PRICE) for c in charged)
    assert account.settled == sum(charged) and account.balance == Decimal(100) - sum(charged)
    by_id = {r["response_id"]: Decimal(r["charged"]) for r in rows}
    for status, response_id, _, _ in ws_results:
        if status == "completed":
            assert by_id[str(response_id)] == PRICE  # a delivered response is paid, once
    # The Completions streams that ended with [DONE] were paid too, once each.
    assert sum(1 for c in charged if c == PRICE) >= completed_ws + sum(ok for ok, _ in cc_results)
