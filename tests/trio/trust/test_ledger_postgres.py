"""The PostgreSQL ledger: the SQLite ledger's invariants on a real server, across processes.

A real PostgreSQL (Debian's package, started by the tests on 127.0.0.1) holds
the ledger. The same state machine as the SQLite ledger's runs against it,
100 spenders in 3 processes race for one balance while a watcher checks the
sums continuously, a server killed with -9 keeps its locks until its
heartbeat expires (a live one keeps them for good), and the schema is
refused until ``uamp ledger migrate`` brought it up to date.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from decimal import Decimal

import psycopg
import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from tests._support.postgres_server import create_database
from uamp_proto.ledger import LedgerError
from uamp_trio.trust.ledger_postgres import SCHEMA_VERSION, PostgresLedger, migrate, redact
from uamp_trio.trust.ledger_sql import SqlLedger

from .test_ledger import LedgerMachine

D = Decimal


def _book(url: str, **kwargs: object) -> PostgresLedger:
    return PostgresLedger(url, auto_migrate=True, **kwargs)  # type: ignore[arg-type]


def test_a_new_database_is_refused_until_migrated(postgres_url: str) -> None:
    with pytest.raises(ValueError, match="uamp ledger migrate") as info:
        PostgresLedger(postgres_url)
    assert "schema version 0" in str(info.value)
    assert migrate(postgres_url) == (0, SCHEMA_VERSION)
    assert migrate(postgres_url) == (SCHEMA_VERSION, SCHEMA_VERSION)
    with PostgresLedger(postgres_url) as book:
        assert book.show(book.issue("1", "USD")).account.balance == D(1)


def test_a_newer_schema_is_refused(postgres_url: str) -> None:
    migrate(postgres_url)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("INSERT INTO ledger_schema (version) VALUES (%s)", (SCHEMA_VERSION + 1,))
    with pytest.raises(ValueError, match="newer than this uamp"):
        migrate(postgres_url)
    with pytest.raises(ValueError, match=f"schema version {SCHEMA_VERSION + 1}"):
        PostgresLedger(postgres_url)


def test_no_message_repeats_the_password(postgres_server: str) -> None:
    port = postgres_server.rsplit(":", 1)[1].split("/")[0]
    url = f"postgresql://uamp:s3cret-pw@127.0.0.1:{port}/no_such_db"
    with pytest.raises(ValueError) as info:
        PostgresLedger(url, connect_timeout=2)
    assert "s3cret" not in str(info.value) and "no_such_db" in str(info.value)
    assert "s3cret" not in redact(url)


def test_tokens_are_verified_and_charged_once(postgres_url: str) -> None:
    with _book(postgres_url, clock=lambda: 1000.0) as book:
        token = book.issue("10", "usd", expires_in=60)
        assert book.show(token).account.currency == "USD"
        book.lock(token, "resp_1", "2", principal="jwt:alice")
        book.lock(token, "resp_1", "2")
        assert book.show(token).account.locked == D(2)
        book.settle(token, "resp_1", "1.5")
        book.settle(token, "resp_1", "1.5")
        book.release(token, "resp_1")
        account = book.show(token).account
        assert (account.balance, account.locked, account.settled) == (D("8.5"), D(0), D("1.5"))
        [entry] = book.entries(token)
        assert entry["principal"] == "jwt:alice" and D(entry["charged"]) == D("1.5")
        with pytest.raises(LedgerError) as info:
            book.lock(token, "resp_2", "9")
        assert info.value.code == "insufficient_balance"
        with pytest.raises(LedgerError) as info:
            book.lock(token[:-3] + "AAA", "resp_3", "1")
        assert info.value.code == "token_invalid"
    # Another server on the same database verifies the same tokens (one signing key).
    with _book(postgres_url, clock=lambda: 2000.0) as other:
        with pytest.raises(LedgerError) as info:
            other.lock(token, "resp_4", "1")
        assert info.value.code == "token_expired"


def test_the_ledger_state_machine_on_postgres(postgres_server: str) -> None:
    class PostgresMachine(LedgerMachine):
        def open_book(self) -> SqlLedger:
            return _book(create_database(postgres_server), clock=lambda: 0.0, pool_size=2)

        def close_book(self) -> None:
            self.book.close()

    run_state_machine_as_test(
        PostgresMachine,
        settings=settings(max_examples=15, stateful_step_count=20, deadline=None),
    )


_SPENDERS = textwrap.dedent(
    """
    import sys, threading
    from uamp_trio.trust.ledger_postgres import PostgresLedger
    from uamp_proto.ledger import LedgerError
    url, token, proc = sys.argv[1:4]
    spenders, tries = int(sys.argv[4]), int(sys.argv[5])
    won = []
    start = threading.Barrier(spenders)
    def spend(worker):
        start.wait()
        for n in range(tries):
            rid = f"{proc}-{worker}-{n}"
            try:
                book.lock(token, rid, "1")
            except LedgerError as exc:
                assert exc.code == "insufficient_balance", exc.code
            else:
                book.settle(token, rid, "1")
                won.append(rid)
    with PostgresLedger(url, pool_size=spenders) as book:
        threads = [threading.Thread(target=spend, args=(w,)) for w in range(spenders)]
        for t in threads: t.start()
        for t in threads: t.join()
    print(len(won))
    """
)


def test_100_spenders_in_3_processes_never_overdraw(postgres_url: str) -> None:
    with _book(postgres_url) as book:
        token = book.issue("50", "USD")
    seen: list[tuple[Decimal, Decimal, Decimal]] = []
    stop = threading.Event()

    def watch() -> None:
        with psycopg.connect(postgres_url) as conn:
            while not stop.is_set():
                row = conn.execute("SELECT balance, locked, settled FROM accounts").fetchone()
                conn.commit()
                assert row is not None
                seen.append((row[0], row[1], row[2]))

    watcher = threading.Thread(target=watch)
    watcher.start()
    per_process = (34, 33, 33)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _SPENDERS, postgres_url, token, f"p{i}", str(n), "2"],
            stdout=subprocess.PIPE,
            text=True,
        )
        for i, n in enumerate(per_process)
    ]
    try:
        won = [int(p.communicate(timeout=300)[0]) for p in procs]
    finally:
        stop.set()
        watcher.join()
    assert all(p.returncode == 0 for p in procs)
    assert sum(won) == 50  # 200 tries for 50 units: exactly the balance was spent
    assert seen, "the watcher saw no state"
    for balance, locked, settled in seen:
        assert balance >= 0 and locked >= 0 and balance + locked + settled == D(50)
    with _book(postgres_url) as book:
        account = book.show(token).account
        assert (account.balance, account.locked, account.settled) == (D(0), D(0), D(50))
        assert len(book.entries(token)) == 50


_HOLDS_LOCKS = textwrap.dedent(
    """
    import sys
    from uamp_trio.trust.ledger_postgres import PostgresLedger
    book = PostgresLedger(sys.argv[1], heartbeat=float(sys.argv[3]))
    for n in range(3):
        book.lock(sys.argv[2], f"r{n}", "2.5")
    print(book.owner, flush=True)
    sys.stdin.read()  # hold the locks until killed
    """
)


def _recover_until(book: PostgresLedger, expected: int, seconds: float) -> int:
    deadline = time.monotonic() + seconds
    freed = 0
    while freed < expected and time.monotonic() < deadline:
        freed += book.recover()
        time.sleep(0.2)
    return freed


def test_a_live_servers_locks_are_kept_and_a_killed_ones_freed_after_its_heartbeat(
    postgres_url: str,
) -> None:
    heartbeat = 1.5
    with _book(postgres_url, heartbeat=heartbeat) as book:
        token = book.issue("10", "USD")
        holder = subprocess.Popen(
            [sys.executable, "-c", _HOLDS_LOCKS, postgres_url, token, str(heartbeat)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert holder.stdout is not None
            owner = holder.stdout.readline().strip()
            assert owner and owner != book.owner
            # Alive (beating every heartbeat / 3): 3 heartbeats later its locks are still its own.
            assert _recover_until(book, 1, heartbeat * 3) == 0
            assert book.orphan("r0") is None
            assert book.show(token).account.locked == D("7.5")
        finally:
            os.kill(holder.pid, signal.SIGKILL)
            holder.wait()
        # Dead: once its heartbeat is older than `heartbeat`, a carrier can adopt one lock ...
        deadline = time.monotonic() + heartbeat * 10
        while book.orphan("r0") is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert book.orphan("r0") is not None
        book.settle_orphan(book.token_id(token), "r0", "1")
        book.settle_orphan(book.token_id(token), "r0", "1")  # once only
        # ... and the start-up sweep frees the rest.
        assert _recover_until(book, 2, heartbeat * 10) == 2
        account = book.show(token).account
        assert (account.balance, account.locked, account.settled) == (D(9), D(0), D(1))


def test_a_closed_ledger_forgets_its_heartbeat(postgres_url: str) -> None:
    with _book(postgres_url, heartbeat=60) as book:
        token = book.issue("5", "USD")
    # Two servers (two owners) in one test process.
    leaving = _book(postgres_url, heartbeat=60, owner="node-a")
    leaving.lock(token, "r", "1")
    with _book(postgres_url, heartbeat=60, owner="node-b") as other:
        assert other.recover() == 0
        leaving.close()  # a graceful stop: its locks are recoverable at once
        assert other.recover() == 1


async def test_a_lost_servers_lock_is_adopted_once_the_ledger_sees_it_dead(
    postgres_url: str,
) -> None:
    """The session store (3 s heartbeat) sees a server dead before this ledger does
    (``heartbeat`` s): the survivor carrying its response on asks again until the
    lock's holder is stale, adopts it and settles it once. Giving up at once left
    the lock to the start-up sweep, which freed it: a delivered response, free."""
    from uamp_trio.trust.payments import LedgerPolicy

    with (
        _book(postgres_url, owner="lost", heartbeat=2.0) as lost,
        _book(postgres_url, owner="survivor", heartbeat=2.0) as survivor,
    ):
        token = survivor.issue("10", "USD")
        lost.lock(token, "resp_lost", D("1"))
        lost._stop.set()  # killed: no more beats, and its row stays (still fresh)
        lost._beater.join()
        policy = LedgerPolicy(survivor, price="1")
        charge = await policy.adopt("agent", "resp_lost")
        assert charge is not None and charge.token_id is not None
        await charge.settle(None, used=True)
        assert await policy.adopt("agent", "resp_lost") is None  # once
        [entry] = survivor.entries(token)
        assert (entry["state"], D(entry["charged"])) == ("settled", D("1"))
        assert survivor.show(token).account.balance == D("9")


async def test_a_live_servers_lock_is_not_adopted(postgres_url: str) -> None:
    """Asking again is bounded: a holder that keeps beating keeps its lock."""
    from uamp_trio.trust.payments import LedgerPolicy

    with (
        _book(postgres_url, owner="alive", heartbeat=1.0) as alive,
        _book(postgres_url, owner="asker", heartbeat=1.0) as asker,
    ):
        token = asker.issue("10", "USD")
        alive.lock(token, "resp_live", D("1"))
        assert await LedgerPolicy(asker, price="1").adopt("agent", "resp_live") is None
        [entry] = asker.entries(token)
        assert entry["state"] == "locked"
