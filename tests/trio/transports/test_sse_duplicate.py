"""HTTP+SSE under ``uamp serve``: a ``session.create`` naming a live session leaves it alone.

A session's event log is keyed by ``(principal, session id)``, and a new
session begins its log afresh. So a ``session.create`` that names one of the
caller's live sessions -- one after the other, or two at once -- must be
refused (400 ``duplicate_session``) before it begins anything: begun and then
refused, it emptied the live session's log and, let go, stopped it being
written, so the live session's later events were in no log (a resume or
another process read nothing of them).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import trio

from tests._support import wire
from tests._support.wire import CREATE, open_stream, post
from uamp_proto.principal import ANONYMOUS
from uamp_stores.event_log import EventLog
from uamp_stores.event_log_sqlite import SqliteEventLog
from uamp_trio import App, DemoAgent
from uamp_trio.stores import Stores
from uamp_trio.transports.sse_events import SSEEventsTransport

TIMEOUT = 15
ASK = [{"type": "input.text", "text": "hi"}, {"type": "response.create"}]


@asynccontextmanager
async def serving() -> AsyncIterator[tuple[httpx.AsyncClient, EventLog]]:
    app = App([DemoAgent()])
    app.mount(SSEEventsTransport(app).mount)
    async with (
        wire.serving(app) as server,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as http,
    ):
        yield http, app.stores.event_log


async def logged(log: EventLog, sid: str) -> list[str]:
    """The types of the events in ``sid`` 's log, oldest first."""
    entries = await log.read((ANONYMOUS.key, sid), 0)
    return [e.data.split(b'"type":"', 1)[1].split(b'"', 1)[0].decode() for e in entries]


async def turn(http: httpx.AsyncClient, sid: str) -> None:
    """One turn of ``sid``, read from its stream until it is done."""
    async with open_stream(http, sid) as events:
        assert (await post(http, ASK, sid)).status_code == 200
        await events.until("response.done")


async def test_a_create_naming_a_live_session_keeps_its_log() -> None:
    with trio.fail_after(TIMEOUT):
        async with serving() as (http, log):
            sid = (await post(http, CREATE)).json()["session_id"]
            await turn(http, sid)
            before = await logged(log, sid)
            assert before[0] == "session.created" and before[-1] == "response.done"
            again = await post(http, {**CREATE, "session_id": sid})
            assert again.status_code == 400
            assert again.json()["error"]["code"] == "duplicate_session"
            assert await logged(log, sid) == before  # not begun afresh
            await turn(http, sid)
            after = await logged(log, sid)  # still written
            assert after[: len(before)] == before and after.count("response.done") == 2


async def test_two_creates_of_one_name_at_once_one_wins_and_keeps_its_log() -> None:
    with trio.fail_after(TIMEOUT):
        async with serving() as (http, log):
            sid = "sess_raced"
            answers: list[httpx.Response] = []

            async def create() -> None:
                answers.append(await post(http, {**CREATE, "session_id": sid}))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(create)
                nursery.start_soon(create)
            codes = sorted(a.status_code for a in answers)
            assert codes == [200, 400], [a.text for a in answers]
            lost = next(a for a in answers if a.status_code == 400)
            assert lost.json()["error"]["code"] == "duplicate_session"
            await turn(http, sid)
            kinds = await logged(log, sid)
            assert kinds.count("session.created") == 1
            assert kinds[-1] == "response.done"


class HeldAlive(SqliteEventLog):
    """A SQLite event log whose second :meth:`alive` waits for :attr:`gate`.

    A POST naming a session this process does not hold asks first whether
    the session's process lives (to forward to it), then takes the session
    on: the second question holds the take-on between reading the
    session's record and claiming it.
    """

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.gate: trio.Event | None = None
        self.held = trio.Event()
        self.asked = 0

    async def alive(self, node: str) -> bool:
        self.asked += 1
        if self.asked == 2 and self.gate is not None:
            self.held.set()
            await self.gate.wait()
        return await super().alive(node)


@asynccontextmanager
async def serving_log(log: EventLog) -> AsyncIterator[httpx.AsyncClient]:
    app = App([DemoAgent()], stores=Stores(event_log=log))
    app.mount(SSEEventsTransport(app).mount)
    async with (
        wire.serving(app) as server,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as http,
    ):
        yield http


async def test_a_create_while_the_session_is_taken_on_is_a_duplicate(tmp_path: Path) -> None:
    """A session left in the log by a process that stopped is taken on by the next POST
    that names it; a create of that id meanwhile is refused, and the session taken on is
    served and logged."""
    path = tmp_path / "events.db"
    with trio.fail_after(TIMEOUT):
        async with serving_log(SqliteEventLog(path)) as http:
            sid = (await post(http, CREATE)).json()["session_id"]
            await turn(http, sid)
        log = HeldAlive(path)
        gate = log.gate = trio.Event()
        async with serving_log(log) as http:
            taken: list[httpx.Response] = []

            async def take_on() -> None:
                taken.append(await post(http, {"type": "ping"}, sid))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(take_on)
                await log.held.wait()
                again = await post(http, {**CREATE, "session_id": sid})
                gate.set()
            assert again.status_code == 400, again.text
            assert again.json()["error"]["code"] == "duplicate_session"
            assert taken[0].status_code == 200, taken[0].text
            await turn(http, sid)
            kinds = await logged(log, sid)
            assert kinds.count("session.created") == 1  # not begun afresh
            assert kinds.count("response.done") == 2 and kinds[-1] == "response.done"
