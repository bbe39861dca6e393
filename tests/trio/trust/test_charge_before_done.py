"""A response is charged before its end is told: a process dying after ``response.done`` charged it.

The cluster test (tests/trio/test_cluster.py) found responses a client got
whole -- ``response.done`` and all -- settled at 0: the process had written
``response.done`` to its client and to the session's log, then died before
the settlement reached the ledger, and the recovery of the dead process's
locks freed the lock. Here the same order is checked on one process with a
real SQLite ledger: when the charge is settled, the session's log holds the
response's deltas and not yet its terminal event; the client gets
``response.done`` and ``payment.balance`` after it, and the ledger charged the
price once.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest
import trio
from trio_websocket import open_websocket_url as open_ws

from tests._support.agents import Words
from tests._support.wire import ask, create_session, recv, serving
from uamp_proto import types as ty
from uamp_proto.ledger import Pricing
from uamp_stores.event_log import LogKey, MemoryEventLog
from uamp_trio import App
from uamp_trio.stores import Stores
from uamp_trio.transports import uamp_ws
from uamp_trio.trust.ledger import Ledger
from uamp_trio.trust.payments import LedgerCharge, LedgerPolicy

PRICE = Decimal("0.25")


class WatchedLog(MemoryEventLog):
    """A memory event log that remembers the type of every event appended, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.types: list[str] = []

    def append(self, key: LogKey, data: bytes, event_id: str) -> Any:
        self.types.append(orjson.loads(data)["type"])
        return super().append(key, data, event_id)


class WatchedCharge(LedgerCharge):
    """A ledger charge that notes what the session's log held when it was settled."""

    log: WatchedLog | None = None
    seen: list[list[str]] = []

    async def settle(self, usage: ty.UsageStats | None, *, used: bool) -> Any:
        if not self.settled and self.log is not None:
            WatchedCharge.seen.append(list(self.log.types))
        return await super().settle(usage, used=used)


class WatchedPolicy(LedgerPolicy):
    def __init__(self, ledger: Ledger, log: WatchedLog) -> None:
        super().__init__(ledger, price=PRICE)
        self.log = log

    async def open(
        self,
        agent: str,
        token: str | None,
        response_id: str,
        declared: Pricing | None = None,
        *,
        principal: str | None = None,
    ) -> LedgerCharge | None:
        charge = await super().open(agent, token, response_id, declared, principal=principal)
        if charge is None:  # pragma: no cover - the agent is priced
            return None
        watched = WatchedCharge(self, charge.token, charge.response_id, charge.pricing)
        watched.log = self.log
        return watched


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    with Ledger(tmp_path / "ledger.db") as book:
        yield book


async def test_the_charge_is_settled_before_the_terminal_event_is_logged_or_sent(
    ledger: Ledger,
) -> None:
    WatchedCharge.seen = []
    token = ledger.issue("10", "USD")
    log = WatchedLog()
    policy = WatchedPolicy(ledger, log)
    app = App(
        [Words("words", "a ", "b ", "c ", pause=0)],
        stores=Stores(event_log=log),
        payment_policy=policy,
    )
    app.mount(uamp_ws.mount)
    with trio.fail_after(15):
        async with (
            serving(app) as server,
            open_ws(f"ws://127.0.0.1:{server.port}/agents/words/uamp") as ws,
        ):
            await create_session(ws, payment_token=token)
            await ask(ws, "go")
            order = []
            while not order or order[-1] != "payment.balance":
                event = await recv(ws)
                order.append(event["type"])
    # Settled once, with the deltas logged and the terminal event not yet.
    assert len(WatchedCharge.seen) == 1
    at_settle = WatchedCharge.seen[0]
    assert at_settle.count("response.delta") == 3
    assert "response.done" not in at_settle
    # The client's order is unchanged: done, then the balance it left.
    assert order.index("response.done") < order.index("payment.balance")
    assert order.count("response.done") == 1
    rows = ledger.entries(token)
    assert [(r["state"], Decimal(r["charged"])) for r in rows] == [("settled", PRICE)]
    assert ledger.show(token).account.balance == Decimal(10) - PRICE
