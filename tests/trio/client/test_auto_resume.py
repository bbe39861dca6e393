"""connect(auto_resume=True): the client dials again and resumes its sessions by itself."""

from __future__ import annotations

import socket
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from functools import partial
from pathlib import Path

import pytest
import trio

from tests.trio.transports.test_uamp_resume import GatedAgent
from uamp_stores.event_log import EventLog, MemoryEventLog
from uamp_stores.event_log_sqlite import SqliteEventLog
from uamp_trio import Server, create_app
from uamp_trio.client import ClientError, connect
from uamp_trio.stores import Stores

TIMEOUT = 30


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@asynccontextmanager
async def serving(agent: GatedAgent, log: EventLog, port: int) -> AsyncIterator[Server]:
    server = Server(
        create_app([agent], stores=Stores(event_log=log)), port=port, shutdown_grace=0.2
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        yield server
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("window", [None, 4])
async def test_a_dropped_connection_is_resumed_mid_response(window: int | None) -> None:
    # With a delta window (docs/flow.md, "Across a resume") the response,
    # whose acks no longer come back, goes on past the window into the log;
    # the resumed session keeps its window for the next turn.
    agent = GatedAgent(count=40 if window else 8, pause_at=3)
    port = free_port()
    url = f"ws://127.0.0.1:{port}/agents/gated/uamp"
    with trio.fail_after(TIMEOUT):
        async with (
            serving(agent, MemoryEventLog(), port),
            connect(url, auto_resume=True, delta_window=window) as client,
        ):
            session = await client.create_session()
            assert session.delta_window == window
            texts = []
            async for event in session.respond("count"):
                if event.type == "response.delta":
                    texts.append(event.delta.text)  # type: ignore[attr-defined]
                    if len(texts) == 3:
                        await agent.paused.wait()
                        # The network drops: the socket dies under the client.
                        await trio.aclose_forcefully(client._stream)
                        agent.gate.set()
            result = await session.ask("again")
            assert session.delta_window == window
    assert texts == [f"d{i} " for i in range(agent.count)]
    assert client.reconnects == 1
    assert result.text == "".join(f"d{i} " for i in range(agent.count))
    assert [m.text for m in agent.requests[1].messages][:2] == ["count", "".join(texts)]


async def test_the_client_survives_a_server_restart_with_a_sqlite_store(tmp_path: Path) -> None:
    agent = GatedAgent(count=2)
    port = free_port()
    url = f"ws://127.0.0.1:{port}/agents/gated/uamp"
    with trio.fail_after(TIMEOUT):
        async with connect_later(url) as started:
            async with serving(agent, SqliteEventLog(tmp_path / "s.db"), port):
                client = await started()
                session = await client.create_session()
                first = await session.ask("one")
            # The server is gone; a new one starts on the same port and file.
            async with serving(agent, SqliteEventLog(tmp_path / "s.db"), port):
                second = await session.ask("two")
    assert first.text == second.text == "d0 d1 "
    assert [m.text for m in agent.requests[1].messages] == ["one", "d0 d1 ", "two"]


async def test_a_session_the_new_server_does_not_know_is_closed_with_its_code() -> None:
    agent = GatedAgent(count=1)
    port = free_port()
    url = f"ws://127.0.0.1:{port}/agents/gated/uamp"
    with trio.fail_after(TIMEOUT):
        async with connect_later(url) as started:
            async with serving(agent, MemoryEventLog(), port):
                client = await started()
                session = await client.create_session()
                await session.ask("one")
            async with serving(agent, MemoryEventLog(), port):
                with pytest.raises(ClientError) as caught:
                    await session.ask("two")
                # The connection itself is back: a new session works.
                fresh = await client.create_session()
                assert (await fresh.ask("three")).text == "d0 "
    assert caught.value.code == "unknown_session"


async def test_without_a_server_the_client_gives_up() -> None:
    agent = GatedAgent(count=1)
    port = free_port()
    with trio.fail_after(TIMEOUT):
        async with connect_later(f"ws://127.0.0.1:{port}/agents/gated/uamp", 0.5) as started:
            async with serving(agent, MemoryEventLog(), port):
                client = await started()
                session = await client.create_session()
            with pytest.raises(ClientError) as caught:
                await session.ask("anyone?")
    assert caught.value.code == "closed"


@asynccontextmanager
async def connect_later(url: str, resume_for: float = 20.0) -> AsyncIterator[object]:
    """A client that connects when asked (the server starts later) and outlives the server."""
    async with trio.open_nursery() as nursery:
        ready: list[object] = []
        go, done = trio.Event(), trio.Event()

        async def run() -> None:
            await go.wait()
            async with connect(url, auto_resume=True, resume_for=resume_for) as client:
                ready.append(client)
                await done.wait()

        async def started() -> object:
            go.set()
            while not ready:
                await trio.sleep(0.01)
            return ready[0]

        nursery.start_soon(run)
        try:
            yield started
        finally:
            done.set()


async def test_a_connection_reset_during_the_handshake_is_dialled_again() -> None:
    # A stopping server's listener resets the connections still in its
    # backlog: the client sees ECONNRESET in the middle of its handshake, a
    # server that is not there yet, not an error to end the client with.
    agent = GatedAgent(count=1)
    port = free_port()
    resets = 0

    async def front(client: trio.SocketStream) -> None:
        nonlocal resets
        if resets < 2:
            resets += 1
            await client.receive_some(65536)  # the upgrade request, unanswered
            client.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.socket.close()  # RST
            return
        async with await trio.open_tcp_stream("127.0.0.1", port) as upstream:
            await splice(client, upstream)

    with trio.fail_after(TIMEOUT):
        async with serving(agent, MemoryEventLog(), port), trio.open_nursery() as nursery:
            listeners = await nursery.start(partial(trio.serve_tcp, front, 0, host="127.0.0.1"))
            front_port = listeners[0].socket.getsockname()[1]
            url = f"ws://127.0.0.1:{front_port}/agents/gated/uamp"
            async with connect(url, auto_resume=True) as client:
                session = await client.create_session()
                answer = await session.ask("one")
            nursery.cancel_scope.cancel()
    assert resets == 2
    assert answer.text == "d0 "


async def splice(one: trio.SocketStream, other: trio.SocketStream) -> None:
    """Copy bytes both ways between two connections until both ends are done."""

    async def pipe(a: trio.SocketStream, b: trio.SocketStream) -> None:
        with suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            while data := await a.receive_some(65536):
                await b.send_all(data)
        with suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await b.send_eof()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(pipe, one, other)
        nursery.start_soon(pipe, other, one)
