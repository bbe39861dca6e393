"""Held writes on the UAMP WebSocket: a response's events written by its own task.

While the connection's writer waits with nothing in hand, a session's worker
writes the events of each of its scheduler steps itself, in one write when
the step ends (``uamp_trio.hosting.ws_connection``, "Held writes"). These
tests hold that path to the writer's rules on real sockets: it is taken (the
writer does not run for a short response), what was held goes out before
the agent waits, order holds across concurrent sessions and when the kernel
takes only part of a write, a peer that stops reading is still dropped after
the send timeout, and no event reaches the peer before it is in the event
log, so a resume finds it.
"""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
import pytest
import trio
from trio_websocket import open_websocket_url as open_ws

from tests._support.agents import TestAgent
from tests._support.raw import open_raw_ws
from tests._support.steps import TaskSteps
from tests._support.wire import create_session, recv, resume_session, send, until
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.principal import ANONYMOUS
from uamp_proto.responder import Emit, TurnRequest
from uamp_stores.event_log import EventLog, MemoryEventLog
from uamp_stores.event_log_sqlite import SqliteEventLog
from uamp_trio import App, Server
from uamp_trio.engines import streams
from uamp_trio.engines.ws_frames import WebSocketClosed
from uamp_trio.hosting import ws_connection
from uamp_trio.stores import Stores
from uamp_trio.transports import uamp_ws

TIMEOUT = 30
#: What the ``wait`` answer of :class:`Says` waits for (one test sets it).
GATE = trio.Event()


class Says(TestAgent):
    """``"N"``: N deltas ``d0 d1 ...``; ``"big N"``: one delta of N bytes.

    ``"big-hold N"``: the same, then it waits forever; ``"wait N"``: N
    deltas, then ``after`` once :data:`GATE` is set; ``"hang"``: waits
    forever before any output.
    """

    name = "says"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        words = request.messages[-1].text.split()
        if words[0] == "hang":
            await trio.sleep_forever()
        if words[0].startswith("big"):
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text="x" * int(words[1]))))
            if words[0] == "big-hold":
                await trio.sleep_forever()
            return
        for i in range(int(words[-1])):
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text=f"d{i} ")))
        if words[0] == "wait":
            await GATE.wait()
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text="after ")))


@asynccontextmanager
async def serving(log: EventLog | None = None, **server: Any) -> AsyncIterator[Server]:
    app = App([Says()], stores=Stores(event_log=log) if log is not None else Stores())
    app.mount(uamp_ws.mount)
    instance = Server(app, port=0, shutdown_grace=0.5, **server)
    async with trio.open_nursery() as nursery:
        await nursery.start(instance.serve)
        yield instance
        nursery.cancel_scope.cancel()


def url(server: Server) -> str:
    return f"ws://127.0.0.1:{server.port}/agents/says/uamp"


async def ask(ws: Any, sid: str, text: str) -> None:
    await send(ws, type="input.text", session_id=sid, text=text)
    await send(ws, type="response.create", session_id=sid)


async def test_short_responses_are_written_by_their_worker_not_the_writer() -> None:
    steps = TaskSteps(lambda name: name.endswith("_Connection.writer"))
    with trio.fail_after(TIMEOUT):
        async with serving() as server, open_ws(url(server)) as ws:
            sid = await create_session(ws)
            trio.lowlevel.add_instrument(steps)
            try:
                for _ in range(20):
                    await ask(ws, sid, "1")
                    got = await until(ws, "response.done")
                    assert [e["type"] for e in got] == [
                        "response.created",
                        "response.delta",
                        "response.done",
                    ]
                    assert got[-1]["response"]["output"][0]["text"] == "d0 "
            finally:
                trio.lowlevel.remove_instrument(steps)
    # Before direct writes the writer ran twice per response (its batch, then
    # the step after trio's send_all); it is not woken for these at all now.
    assert steps.steps <= 2, steps.steps


async def test_order_holds_across_concurrent_sessions_held_and_queued() -> None:
    sizes = [1, 2, 300, 1, 3, 150, 1, 2]  # held while the writer is idle, else queued
    with trio.fail_after(TIMEOUT):
        async with serving() as server, open_ws(url(server)) as ws:
            sids = [await create_session(ws) for _ in sizes]
            for _round in range(3):
                for sid, n in zip(sids, sizes, strict=True):
                    await ask(ws, sid, str(n))
                got: dict[str, list[dict[str, Any]]] = {sid: [] for sid in sids}
                done = 0
                while done < len(sids):
                    event = await recv(ws)
                    got[event["session_id"]].append(event)
                    done += event["type"] == "response.done"
                for sid, n in zip(sids, sizes, strict=True):
                    events = got[sid]
                    assert [e["type"] for e in events] == [
                        "response.created",
                        *["response.delta"] * n,
                        "response.done",
                    ], sid
                    texts = [e["delta"]["text"] for e in events[1:-1]]
                    assert texts == [f"d{i} " for i in range(n)]
                    assert events[-1]["response"]["output"][0]["text"] == "".join(texts)
                    ids = [e["event_id"] for e in events]
                    assert len(set(ids)) == len(ids)


async def open_raw(port: int, rcvbuf: int) -> tuple[trio.SocketStream, Any, list[bytes]]:
    """A raw client socket with a small receive buffer, past the handshake."""
    return await open_raw_ws(port, "/agents/says/uamp", rcvbuf)


async def start(stream: trio.SocketStream, frames: Any, pending: list[bytes], text: str) -> None:
    """Create a session, read its two replies, then ask for ``text`` (a read of its own)."""
    create = {"type": "session.create", "uamp_version": "1.0", "session": {"modalities": ["text"]}}
    frames.text(orjson.dumps(create))
    await stream.send_all(frames.take())
    while len(pending) < 2:
        pending += frames.feed(bytes(await stream.receive_some(65536)))
    assert [orjson.loads(m)["type"] for m in pending] == ["session.created", "capabilities"]
    pending.clear()
    for event in ({"type": "input.text", "text": text}, {"type": "response.create"}):
        frames.text(orjson.dumps(event))
    await stream.send_all(frames.take())


async def test_a_held_write_the_socket_takes_in_part_is_finished_by_the_writer_in_order() -> None:
    size = 8 * 1024 * 1024  # far more than the socket buffers hold
    with trio.fail_after(TIMEOUT):
        async with serving() as server:
            stream, frames, pending = await open_raw(server.port, 32 * 1024)
            await start(stream, frames, pending, f"big {size}")
            await trio.sleep(0.2)  # let the server fill the buffers before we read
            types: list[str] = []
            delta = ""
            while not types or types[-1] != "response.done":
                while not pending:
                    pending = frames.feed(bytes(await stream.receive_some(1 << 20)))
                for raw in pending:
                    event = orjson.loads(raw)
                    types.append(event["type"])
                    if event["type"] == "response.delta":
                        delta = event["delta"]["text"]
                pending = []
            await stream.aclose()
    assert types == [
        "response.created",
        "response.delta",
        "response.done",
    ]
    assert delta == "x" * size


async def test_a_peer_that_stops_reading_a_held_write_is_dropped_after_the_send_timeout() -> None:
    size = 8 * 1024 * 1024
    with trio.fail_after(TIMEOUT):
        async with serving(websocket_send_timeout=0.3) as server:
            stream, frames, pending = await open_raw(server.port, 32 * 1024)
            await start(stream, frames, pending, f"big-hold {size}")
            # Never read until the server gave up: the rest of the held write
            # is the writer's, which waits at most the send timeout.
            while not server.connection_count:
                await trio.sleep(0.01)
            while server.connection_count:
                await trio.sleep(0.05)
            # What the kernel held arrives, then the connection ends without a
            # close frame (the peer could not be sent one): 1006.
            types = []
            try:
                while True:
                    for raw in pending:
                        types.append(orjson.loads(raw)["type"])
                    pending = frames.feed(bytes(await stream.receive_some(1 << 20)))
            except WebSocketClosed as closed:
                code = closed.code
            await stream.aclose()
    assert code == 1006
    assert types[:1] == ["response.created"]
    assert "response.delta" not in types  # it never arrived whole


async def test_a_resume_after_held_writes_finds_their_events_in_the_log() -> None:
    log = MemoryEventLog()
    with trio.fail_after(TIMEOUT):
        async with serving(log) as server:
            async with open_ws(url(server)) as ws:
                sid = await create_session(ws)
                await ask(ws, sid, "2")
                first = await until(ws, "response.done")
            async with open_ws(url(server)) as ws:
                created = await resume_session(ws, sid, first[0]["event_id"])
                assert created["extensions"] == {"resumed": True}
                replayed = await until(ws, "response.done")
    assert [e["event_id"] for e in replayed] == [e["event_id"] for e in first[1:]]
    assert [e["type"] for e in replayed] == ["response.delta"] * 2 + ["response.done"]


async def test_no_event_reaches_the_peer_before_a_store_that_writes_later_has_it(
    tmp_path: Any,
) -> None:
    log = SqliteEventLog(tmp_path / "log.db")
    key = (ANONYMOUS.key, "")
    with trio.fail_after(TIMEOUT):
        async with serving(log) as server, open_ws(url(server)) as ws:
            sid = await create_session(ws)
            key = (ANONYMOUS.key, sid)
            for _ in range(5):
                await ask(ws, sid, "2")
                while True:
                    event = await recv(ws)
                    # Read straight from the store: queued writes are not in it yet.
                    stored = {e.event_id for e in await log.read(key, 0, limit=10_000)}
                    assert event["event_id"] in stored, event["type"]
                    if event["type"] == "response.done":
                        break
    await log.aclose()


async def test_what_a_worker_held_is_written_before_its_agent_waits() -> None:
    global GATE
    GATE = trio.Event()
    with trio.fail_after(TIMEOUT):
        async with serving() as server, open_ws(url(server)) as ws:
            sid = await create_session(ws)
            await ask(ws, sid, "wait 2")  # two deltas, then the agent waits for GATE
            got = [await recv(ws) for _ in range(3)]
            assert [e["type"] for e in got] == ["response.created", *["response.delta"] * 2]
            GATE.set()
            rest = await until(ws, "response.done")
    assert [e["type"] for e in rest] == ["response.delta", "response.done"]
    assert rest[-1]["response"]["output"][0]["text"] == "d0 d1 after "


class PeekingLog(MemoryEventLog):
    """Looks, when a response's records are put, at what the client's socket holds."""

    def __init__(self) -> None:
        super().__init__()
        self.client: socket.socket | None = None
        #: (running, what the client's socket held) at each record put while peeking.
        self.seen: list[tuple[str | None, bytes]] = []

    def put_record(self, key: Any, record: Any) -> None:
        if self.client is not None and record.history is not None:
            try:
                held = self.client.recv(1 << 20, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            except BlockingIOError:
                held = b""
            self.seen.append((record.running, held))
        super().put_record(key, record)


async def test_a_responses_first_delta_is_written_before_the_work_after_it() -> None:
    # The session's records (and the charge, the next capabilities check)
    # share the worker's step with the response; the client need not wait
    # for them: what was held is written as the first delta is held. The
    # opening record, which the memory log applies at once, comes right
    # after that write; response.done goes out when the step ends.
    log = PeekingLog()
    with trio.fail_after(TIMEOUT):
        async with serving(log) as server:
            stream, frames, pending = await open_raw(server.port, 1 << 20)
            with socket.socket(fileno=os.dup(stream.socket.fileno())) as peek:
                log.client = peek
                await start(stream, frames, pending, "2")
                while not any(b'"response.done"' in m for m in pending):
                    pending += frames.feed(bytes(await stream.receive_some(65536)))
                log.client = None
            await stream.aclose()
    (opening, first), (closing, second) = log.seen
    assert opening is not None and closing is None
    for held in (first, second):  # the first delta, alone: the second waits for the step's end
        assert held.count(b'"response.delta"') == 1 and b'"response.done"' not in held
    assert held.index(b'"response.created"') < held.index(b'"response.delta"')


async def test_a_store_that_queues_gets_the_opening_record_before_any_event() -> None:
    # SQLite queues its writes: the opening record is queued before the
    # response's first event, as it always was.
    order: list[str] = []

    class Watched(SqliteEventLog):
        def put_record(self, key: Any, record: Any) -> None:
            order.append(f"record {record.running is not None}")
            super().put_record(key, record)

        def append(self, key: Any, data: bytes, event_id: str) -> Any:
            order.append(orjson.loads(data)["type"])
            return super().append(key, data, event_id)

    with trio.fail_after(TIMEOUT):
        log = Watched(":memory:")
        async with serving(log) as server, open_ws(url(server)) as ws:
            sid = await create_session(ws)
            await ask(ws, sid, "1")
            await until(ws, "response.done")
        await log.aclose()
    start = order.index("record True")
    assert order[start:] == [
        "record True",
        "response.created",
        "response.delta",
        "response.done",
        "record False",
    ]


async def test_the_reader_waits_for_its_next_read_after_the_workers_first_write(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The reader that handed a worker a response lets the worker's step run
    # (and write the first delta) before it registers for its next read.
    order: list[str] = []
    real_wait, real_write = streams.receive_when_ready, streams.written_now

    async def wait(stream: Any, size: int) -> bytes:
        order.append("wait")
        return await real_wait(stream, size)

    def write(stream: Any, data: bytes) -> int:
        order.append("delta" if b'"response.delta"' in data else "write")
        return real_write(stream, data)

    monkeypatch.setattr(ws_connection, "receive_when_ready", wait)
    monkeypatch.setattr(ws_connection, "written_now", write)
    with trio.fail_after(TIMEOUT):
        async with serving() as server, open_ws(url(server)) as ws:
            sid = await create_session(ws)
            for _ in range(5):
                order.clear()
                await ask(ws, sid, "1")
                got = await until(ws, "response.done")
                assert [e["type"] for e in got][-1] == "response.done"
                await trio.sleep(0.05)  # the reader is back at its socket
                # The request's read, then: the first delta, the step's end
                # (response.done), and only then the reader's next wait.
                assert order[-3:] == ["delta", "write", "wait"], order


async def test_a_response_that_blocks_before_any_output_leaves_the_reader_reading() -> None:
    # The reader waits for the worker's step only; a worker whose agent
    # blocks ends its step at once, and a cancel is read and acted on.
    with trio.fail_after(TIMEOUT):
        async with serving() as server, open_ws(url(server)) as ws:
            sid = await create_session(ws)
            await ask(ws, sid, "hang")
            created = await recv(ws)
            assert created["type"] == "response.created"
            await send(ws, type="response.cancel", session_id=sid)
            got = await until(ws, "response.cancelled")
            assert got[-1]["response_id"] == created["response_id"]
            await ask(ws, sid, "2")  # the session goes on
            rest = await until(ws, "response.done")
    assert [e["type"] for e in rest] == [
        "response.created",
        "response.delta",
        "response.delta",
        "response.done",
    ]
