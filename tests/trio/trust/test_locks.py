"""No payment lock outlives its response, and no server frees another live server's locks.

Real servers on 127.0.0.1, a real SQLite ledger file, real ``uamp serve``
processes for the several-servers case.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import h2.config
import h2.connection
import h2.errors
import httpx
import orjson
import pytest
import trio

from tests._support.agents import TestAgent
from tests._support.paying import mid_response, start_server
from tests._support.rpc import agui_run
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.responder import Emit, TurnRequest
from uamp_trio.app import create_app
from uamp_trio.trust.ledger import Ledger
from uamp_trio.trust.owners import instance_id, is_alive
from uamp_trio.trust.payments import LedgerPolicy

D = Decimal


class Counted(TestAgent):
    """Counts its runs and says one word."""

    name = "counted"

    def __init__(self) -> None:
        self.runs = 0

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        self.runs += 1
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="ok")))


class SlowLedger(Ledger):
    """The real ledger, with each lock taking 0.3 s (as when another server holds the file).

    The sleep happens in the ledger's worker thread, so the server keeps
    reading frames meanwhile: a client's reset lands while the lock is taken.
    """

    def lock(self, *args: Any, **kwargs: Any) -> Any:
        time.sleep(0.3)
        return super().lock(*args, **kwargs)


def balanced(ledger: Ledger) -> dict[str, Decimal]:
    t = ledger.totals()
    assert t["settled"] + t["locked"] + t["balance"] == t["issued"] + t["topped_up"]
    return t


_A2A_STREAM = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "message/stream",
    "params": {
        "message": {"role": "user", "parts": [{"kind": "text", "text": "hi"}], "messageId": "m1"}
    },
}
_AGUI_RUN = agui_run("hi")


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (
            "/agents/counted/v1/chat/completions",
            {"messages": [{"role": "user", "content": "hi"}], "stream": True},
        ),
        ("/agents/counted/a2a", _A2A_STREAM),
        ("/agents/counted/agui", _AGUI_RUN),
    ],
    ids=["completions", "a2a-stream", "agui"],
)
async def test_a_stream_reset_before_its_body_starts_releases_its_lock(
    serve_app: Any, tmp_path: Path, path: str, body: dict[str, Any]
) -> None:
    """HTTP/2: the client resets the stream while the price is being locked."""
    agent = Counted()
    with SlowLedger(tmp_path / "ledger.db") as ledger:
        token = ledger.issue("1.00", "USD")
        app = create_app([agent], payment_policy=LedgerPolicy(ledger, price="0.02"))
        server = await serve_app(app)
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        with trio.fail_after(10):
            headers = [
                (":method", "POST"),
                (":path", path),
                (":scheme", "http"),
                (":authority", "127.0.0.1"),
                ("content-type", "application/json"),
                ("x-payment", token),
            ]
            conn.send_headers(1, headers)
            conn.send_data(1, orjson.dumps(body), end_stream=True)
            await stream.send_all(conn.data_to_send())
            await trio.sleep(0.1)  # the server is inside the 0.3 s lock now
            conn.reset_stream(1, h2.errors.ErrorCodes.CANCEL)
            await stream.send_all(conn.data_to_send())
            # The lock was taken (the reset came too late to stop it) ...
            while not ledger.entries(token):
                await trio.sleep(0.02)
            # ... and is released, not left for a restart.
            while ledger.show(token).account.locked:
                await trio.sleep(0.02)
        await stream.aclose()
        state = ledger.show(token).account
        assert (state.balance, state.locked, state.settled) == (D("1.00"), 0, 0)
        assert [e["state"] for e in ledger.entries(token)] == ["settled"]
        assert agent.runs == 0
        balanced(ledger)


async def test_every_lock_records_its_principal_and_its_server(
    serve_app: Any, tmp_path: Path
) -> None:
    with Ledger(tmp_path / "ledger.db") as ledger:
        token = ledger.issue("1.00", "USD")
        app = create_app([Counted()], payment_policy=LedgerPolicy(ledger, price="0.02"))
        server = await serve_app(app)
        async with httpx.AsyncClient(base_url=server.url) as http:
            reply = await http.post(
                "/agents/counted/v1/chat/completions",
                json={"messages": [{"role": "user", "content": "hi"}]},
                headers={"X-PAYMENT": token},
            )
        assert reply.status_code == 200
        [entry] = ledger.entries(token)
        assert entry["principal"] == "anonymous"  # no auth configured: every caller is anonymous
        assert entry["owner"] == instance_id()
        assert (entry["state"], entry["amount"], entry["charged"]) == ("settled", "0.02", "0.02")


# --- several servers on one ledger file ------------------------------------------------


def test_instance_ids_tell_live_processes_from_dead_ones() -> None:
    me = instance_id()
    assert is_alive(me)
    boot, pid, start = me.split(":")
    assert int(pid) == os.getpid()
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child_id = instance_id(child.pid)
    child.wait(timeout=10)
    cases = [
        (f"{boot}:{pid}:{start}", True),
        (child_id, False),  # exited (and reaped)
        (f"{boot}:{pid}:{int(start) + 1}", False),  # same pid, another process: reused pid
        (f"other-boot:{pid}:{start}", False),  # the machine restarted since
        ("", False),
        (None, False),  # a lock from before owners were recorded
        ("garbage", False),
    ]
    for owner, alive in cases:
        assert is_alive(owner) is alive, owner


def test_recover_frees_only_the_locks_of_dead_servers(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        dead_id = instance_id(dead.pid)
        dead.wait(timeout=10)
        with Ledger(path, owner=instance_id(live.pid)) as other_server:
            token = other_server.issue("1.00", "USD")
            other_server.lock(token, "resp_live", "0.10", principal="alice")
        with Ledger(path, owner=dead_id) as crashed_server:
            crashed_server.lock(token, "resp_dead", "0.20", principal="bob")
        with Ledger(path) as starting:
            assert starting.recover() == 1
            state = starting.show(token).account
            assert (state.locked, state.balance) == (D("0.10"), D("0.90"))
            entries = {e["response_id"]: e for e in starting.entries(token)}
            assert entries["resp_live"]["state"] == "locked"
            assert entries["resp_dead"]["state"] == "settled"
            assert entries["resp_dead"]["charged"] == "0"
            assert (entries["resp_live"]["principal"], entries["resp_dead"]["principal"]) == (
                "alice",
                "bob",
            )
            balanced(starting)
        live.kill()
        live.wait(timeout=10)
        with Ledger(path) as later:
            assert later.recover() == 1  # now its server is gone too
            assert later.show(token).account.locked == 0
            balanced(later)
    finally:
        for proc in (live, dead):
            if proc.poll() is None:
                proc.kill()


def _dead_instance() -> str:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    owner = instance_id(dead.pid)
    dead.wait(timeout=10)
    return owner


def test_recover_with_a_grace_leaves_a_dead_servers_recent_lock_for_its_carrier(
    tmp_path: Path,
) -> None:
    # A session log that outlives the process: the lost response may still
    # be carried on (and its lock settled) by the server the client resumes on.
    path, now = tmp_path / "ledger.db", [1000.0]
    with Ledger(path, owner=_dead_instance(), clock=lambda: now[0]) as crashed:
        token = crashed.issue("1.00", "USD")
        crashed.lock(token, "resp_old", "0.10")
        now[0] = 1050.0
        crashed.lock(token, "resp_new", "0.20")
    now[0] = 1100.0
    with Ledger(path, clock=lambda: now[0]) as starting:
        assert starting.recover(grace=60) == 1  # resp_old, locked 100 s ago
        states = {e["response_id"]: e["state"] for e in starting.entries(token)}
        assert states == {"resp_old": "settled", "resp_new": "locked"}
        assert starting.orphan("resp_new") is not None  # still there to be adopted
        now[0] = 1111.0
        assert starting.recover(grace=60) == 1  # resp_new's grace is over
        assert starting.show(token).account.locked == 0
        balanced(starting)


def test_the_ledger_policy_releases_orphans_past_the_grace_as_it_locks(tmp_path: Path) -> None:
    path, now = tmp_path / "ledger.db", [1000.0]
    with Ledger(path, owner=_dead_instance(), clock=lambda: now[0]) as crashed:
        token = crashed.issue("1.00", "USD")
        crashed.lock(token, "resp_lost", "0.30")
    with Ledger(path, clock=lambda: now[0]) as book:
        policy = LedgerPolicy(book, price="0.10", orphan_grace=120)
        pricing = policy.default_pricing
        now[0] = 1100.0  # within the grace: kept
        policy._lock(pricing, token, "resp_a", None)
        assert book.show(token).account.locked == D("0.40")
        now[0] = 1130.0  # past the grace, but swept less than a minute ago
        policy._lock(pricing, token, "resp_b", None)
        assert book.show(token).account.locked == D("0.50")
        now[0] = 1161.0
        policy._lock(pricing, token, "resp_c", None)
        states = {e["response_id"]: e["state"] for e in book.entries(token)}
    assert states["resp_lost"] == "settled"
    assert [states[r] for r in ("resp_a", "resp_b", "resp_c")] == ["locked"] * 3


def test_a_second_server_on_the_ledger_leaves_the_first_ones_locks_alone(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    with Ledger(path) as book:
        token = book.issue("1.00", "USD")
    # Stopped mid-response below: --grace 1 cancels the minute-long response
    # after a second instead of the default ten (it is cancelled either way).
    first, url = start_server(path, "0.25", "--grace", "1")
    second: subprocess.Popen[str] | None = None
    try:
        body = {"messages": [{"role": "user", "content": "hi"}], "stream": True}
        with mid_response(url, token, body):  # the first server's response holds its lock
            second, _ = start_server(path)  # starts on the same file (and recovers)
            with Ledger(path) as book:
                state = book.show(token).account
                assert (state.locked, state.balance) == (D("0.25"), D("0.75"))
                [entry] = book.entries(token)
                assert entry["state"] == "locked"
                assert entry["owner"] == instance_id(first.pid)
                balanced(book)
            # The first server, stopped, settles its own lock (one word was sent).
            first.send_signal(signal.SIGINT)
            first.wait(timeout=15)
        with Ledger(path) as book:
            state = book.show(token).account
            assert (state.locked, state.settled, state.balance) == (0, D("0.25"), D("0.75"))
            balanced(book)
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()


# --- the event loop keeps serving while the ledger works -------------------------------


class HeldLedger(Ledger):
    """The real ledger, whose lock waits until the test lets it go (a busy database file)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.entered = threading.Event()
        self.release = threading.Event()
        self.finished = threading.Event()

    def lock(self, *args: Any, **kwargs: Any) -> Any:
        self.entered.set()
        self.release.wait(10)
        try:
            return super().lock(*args, **kwargs)
        finally:
            self.finished.set()


async def test_other_requests_are_served_while_a_ledger_call_waits(
    serve_app: Any, tmp_path: Path
) -> None:
    """A ledger call stuck on the database (another server's write lock) stalls only its own
    response: the server answers other requests meanwhile (ledger calls run off the loop)."""
    with HeldLedger(tmp_path / "ledger.db") as ledger:
        token = ledger.issue("1.00", "USD")
        app = create_app([Counted()], payment_policy=LedgerPolicy(ledger, price="0.02"))
        server = await serve_app(app)
        paid: list[int] = []
        async with httpx.AsyncClient(base_url=server.url, timeout=20) as http:

            async def pay() -> None:
                reply = await http.post(
                    "/agents/counted/v1/chat/completions",
                    json={"messages": [{"role": "user", "content": "hi"}]},
                    headers={"X-PAYMENT": token},
                )
                paid.append(reply.status_code)

            with trio.fail_after(15):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(pay)
                    await trio.to_thread.run_sync(ledger.entered.wait, 10)
                    models = await http.get("/v1/models")  # while the lock still waits
                    assert models.status_code == 200
                    assert not ledger.finished.is_set() and paid == []
                    ledger.release.set()
        assert paid == [200]
        assert ledger.show(token).account.settled == D("0.02")
