"""An HTTP+SSE session taken on from the event log gives back what a failed take-on held.

``uamp_asgi`` serves an HTTP+SSE session whose process is gone by adopting
it from the event log (``_Sessions.adopt``): it claims the session, builds
a session around the record, counts the record's conversation in the
principal's history budget (``Host.uamp_histories``) and takes the log on.
A take-on that is refused -- the principal is at ``sse_max_sessions`` (429),
the store fails midway (503), the session is one the principal has live
(``duplicate_session``) -- must leave nothing behind: no claim that turns
every later try into 409, no bytes counted for a session nobody serves.
And a take-on that succeeds after a failed one counts the session once.

Two uvicorn servers in turn on one SQLite file stand for a process that
stopped and the one that takes its sessions on (one process of a
single-process store takes on any other's).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import orjson
import pytest
from websockets.sync.client import connect
from websockets.sync.connection import Connection

import uamp_asgi
from tests._support.asgi import uvicorn_server
from uamp_asgi.responders import function_agent
from uamp_proto.principal import ANONYMOUS
from uamp_proto.responder import TurnRequest
from uamp_stores.event_log import LogKey
from uamp_stores.event_log_sqlite import SqliteEventLog
from uamp_stores.health import StoreUnavailable

TIMEOUT = httpx.Timeout(30.0, read=10.0)  # a stream's heartbeat comes after 15 s
CREATE = {"type": "session.create", "session": {"modalities": ["text"]}}
ASK = [{"type": "input.text", "text": "x" * 4000}, {"type": "response.create"}]


async def echo(turn: TurnRequest) -> Any:
    """Says ``ok``."""
    yield "ok"


def _post(http: httpx.Client, body: Any, sid: str | None = None) -> httpx.Response:
    headers = {"x-session-id": sid} if sid else {}
    return http.post("/agents/echo/events", content=orjson.dumps(body), headers=headers)


def _done(http: httpx.Client, sid: str) -> None:
    """Read the session's stream until its response is done."""
    with http.stream("GET", "/agents/echo/events/stream", headers={"x-session-id": sid}) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if line.startswith("data:") and b'"response.done"' in line.encode():
                return
    raise AssertionError("the stream ended before response.done")


class FailingAdopt(SqliteEventLog):
    """A SQLite event log whose next :meth:`adopt` of a session fails as an outage would."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.failures = 0

    async def adopt(self, key: LogKey, owner: Any = None) -> int:
        if self.failures:
            self.failures -= 1
            raise StoreUnavailable("the event log did not answer")
        return await super().adopt(key, owner)


@pytest.fixture
def left(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A session with a conversation, left in ``events.db`` by a server that stopped."""
    path = tmp_path / "events.db"
    config = uamp_asgi.Config(event_log=SqliteEventLog(path))
    with (
        uvicorn_server(uamp_asgi.app(function_agent(echo), config=config)) as base,
        httpx.Client(base_url=base, timeout=TIMEOUT) as http,
    ):
        sid = _post(http, CREATE).json()["session_id"]
        assert _post(http, ASK, sid).status_code == 200
        _done(http, sid)
    yield path, sid


def _taker(path: Path, log: SqliteEventLog | None = None, **config: Any) -> uamp_asgi.UampASGI:
    options = uamp_asgi.Config(event_log=log or SqliteEventLog(path), **config)
    return uamp_asgi.app(function_agent(echo), config=options)


def _kept(app: uamp_asgi.UampASGI) -> tuple[int, int]:
    """What the app's history budget counts for the caller: bytes, and sessions' keepers."""
    histories = app.host.uamp_histories
    return histories.total(ANONYMOUS.key), len(histories._owners)


def test_a_take_on_refused_at_the_cap_can_be_tried_again(left: tuple[Path, str]) -> None:
    path, sid = left
    app = _taker(path, sse_max_sessions=1)
    with (
        uvicorn_server(app) as base,
        httpx.Client(base_url=base, timeout=TIMEOUT) as http,
    ):
        mine = _post(http, CREATE).json()["session_id"]
        over = _post(http, {"type": "ping"}, sid)
        assert over.status_code == 429, over.text
        assert over.json()["error"]["code"] == "too_many_sessions"
        assert _post(http, {"type": "session.end"}, mine).status_code == 200
        # A place is free: the session is taken on (the refused try kept no claim on it).
        again = _post(http, {"type": "ping"}, sid)
        assert again.status_code == 200, again.text
        assert _kept(app)[1] == 1


def test_a_take_on_the_store_failed_counts_nothing(left: tuple[Path, str]) -> None:
    path, sid = left
    log = FailingAdopt(path)
    log.failures = 1
    app = _taker(path, log)
    with (
        uvicorn_server(app) as base,
        httpx.Client(base_url=base, timeout=TIMEOUT) as http,
    ):
        failed = _post(http, {"type": "ping"}, sid)
        assert failed.status_code == 503, failed.text
        assert _kept(app) == (0, 0)  # nobody serves it: nothing of it is counted
        taken = _post(http, {"type": "ping"}, sid)
        assert taken.status_code == 200, taken.text
        size, keepers = _kept(app)
        assert keepers == 1 and 4000 < size < 2 * 4000  # counted once, by its new keeper
        assert _post(http, {"type": "session.end"}, sid).status_code == 200
        assert _kept(app) == (0, 0)


def test_a_failed_take_on_leaves_the_caller_its_places(left: tuple[Path, str]) -> None:
    """Exactly one place per live session: a failed take-on holds none, an ended one frees its."""
    path, sid = left
    log = FailingAdopt(path)
    log.failures = 1
    app = _taker(path, log, sse_max_sessions=1)
    with (
        uvicorn_server(app) as base,
        httpx.Client(base_url=base, timeout=TIMEOUT) as http,
    ):
        assert _post(http, {"type": "ping"}, sid).status_code == 503
        assert _post(http, {"type": "ping"}, sid).status_code == 200
        assert _post(http, CREATE).status_code == 429  # its one place is the taken-on session's
        assert _post(http, {"type": "session.end"}, sid).status_code == 200
        assert _post(http, {"type": "session.end"}, sid).status_code == 404  # ended once
        assert _post(http, CREATE).status_code == 200
        assert _post(http, CREATE).status_code == 429


def test_a_create_naming_a_live_session_leaves_it_alone() -> None:
    app = uamp_asgi.app(function_agent(echo))
    with (
        uvicorn_server(app) as base,
        httpx.Client(base_url=base, timeout=TIMEOUT) as http,
    ):
        sid = _post(http, CREATE).json()["session_id"]
        assert _post(http, ASK, sid).status_code == 200
        _done(http, sid)
        kept = _kept(app)
        assert kept[0] > 4000
        again = _post(http, {**CREATE, "session_id": sid})
        assert again.status_code == 400
        assert again.json()["error"]["code"] == "duplicate_session"
        assert _kept(app) == kept
        # The live session still logs: its next turn reaches its stream.
        assert _post(http, ASK, sid).status_code == 200
        _done(http, sid)
        assert _post(http, {"type": "session.end"}, sid).status_code == 200
        assert _kept(app) == (0, 0)


class HeldAlive(SqliteEventLog):
    """A SQLite event log whose next :meth:`alive` waits until the test lets it go.

    It holds a take-on mid-way (between loading the session's record and
    claiming it), so another request can arrive meanwhile.
    """

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.hold: threading.Event | None = None
        self.held = threading.Event()

    async def alive(self, node: str) -> bool:
        gate, self.hold = self.hold, None
        if gate is not None:
            self.held.set()
            await anyio.to_thread.run_sync(gate.wait)
        return await super().alive(node)


def test_a_create_while_the_session_is_taken_on_is_a_duplicate(left: tuple[Path, str]) -> None:
    """The take-on wins: the create is refused before it begins the session's log afresh
    (begun, the take-on then took the log from it, and it was let go)."""
    path, sid = left
    log = HeldAlive(path)
    gate = log.hold = threading.Event()
    app = _taker(path, log)
    taken: list[httpx.Response] = []
    with (
        uvicorn_server(app) as base,
        httpx.Client(base_url=base, timeout=TIMEOUT) as http,
        httpx.Client(base_url=base, timeout=TIMEOUT) as other,
    ):
        taker = threading.Thread(target=lambda: taken.append(_post(other, {"type": "ping"}, sid)))
        taker.start()
        try:
            assert log.held.wait(10)
            again = _post(http, {**CREATE, "session_id": sid})
        finally:
            gate.set()
            taker.join(10)
        assert again.status_code == 400, again.text
        assert again.json()["error"]["code"] == "duplicate_session"
        assert taken and taken[0].status_code == 200, taken
        # The session taken on is served and logged: its turn reaches its stream.
        assert _post(http, ASK, sid).status_code == 200
        _done(http, sid)
        assert _post(http, {"type": "session.end"}, sid).status_code == 200
        assert _kept(app) == (0, 0)


def _until(ws: Connection, kind: str) -> list[str]:
    """The types of the events a WebSocket receives, up to the first of type ``kind``."""
    kinds: list[str] = []
    while not kinds or kinds[-1] != kind:
        kinds.append(orjson.loads(ws.recv(timeout=10))["type"])
    return kinds


def test_a_create_naming_a_websocket_session_leaves_its_log_alone() -> None:
    """The log is the principal's, whichever transport writes it: an HTTP+SSE create under
    the id of a live WebSocket session is a duplicate, not a new log in its place."""
    app = uamp_asgi.app(function_agent(echo))
    log, key = app.host.event_log, (ANONYMOUS.key, "sess_shared")
    with (
        uvicorn_server(app) as base,
        httpx.Client(base_url=base, timeout=TIMEOUT) as http,
        connect(base.replace("http", "ws", 1) + "/agents/echo/uamp") as ws,
    ):
        ws.send(orjson.dumps({**CREATE, "session_id": key[1]}).decode())
        _until(ws, "capabilities")
        again = _post(http, {**CREATE, "session_id": key[1]})
        assert again.status_code == 400, again.text
        assert again.json()["error"]["code"] == "duplicate_session"
        for event in ASK:
            ws.send(orjson.dumps(event).decode())
        _until(ws, "response.done")
        logged = [orjson.loads(e.data)["type"] for e in anyio.run(log.read, key, 0)]
        assert logged[:2] == ["session.created", "capabilities"]
        assert logged[-1] == "response.done"
