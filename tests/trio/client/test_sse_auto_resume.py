"""connect_sse(auto_resume=True): a broken event stream is opened again where it broke."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import pytest
import trio

from tests.trio.client.test_auto_resume import free_port, serving, splice
from tests.trio.transports.test_uamp_resume import GatedAgent
from uamp_stores.event_log import MemoryEventLog
from uamp_stores.event_log_sqlite import SqliteEventLog
from uamp_trio.client import ClientError, connect_sse

TIMEOUT = 30


@asynccontextmanager
async def cuttable_front(port: int) -> AsyncIterator[tuple[int, Callable[[], Awaitable[None]]]]:
    """A TCP front to ``port``; yields its port and a function that cuts every connection."""
    open_pairs: list[tuple[trio.SocketStream, trio.SocketStream]] = []

    async def front(client: trio.SocketStream) -> None:
        async with await trio.open_tcp_stream("127.0.0.1", port) as upstream:
            pair = (client, upstream)
            open_pairs.append(pair)
            try:
                await splice(client, upstream)
            finally:
                if pair in open_pairs:
                    open_pairs.remove(pair)

    async def cut() -> None:
        for pair in list(open_pairs):
            for stream in pair:
                await trio.aclose_forcefully(stream)
        open_pairs.clear()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, front, 0, host="127.0.0.1"))
        yield listeners[0].socket.getsockname()[1], cut
        nursery.cancel_scope.cancel()


async def test_a_cut_stream_goes_on_where_it_broke_mid_response() -> None:
    agent = GatedAgent(count=8, pause_at=3)
    port = free_port()
    with trio.fail_after(TIMEOUT):
        async with (
            serving(agent, MemoryEventLog(), port),
            cuttable_front(port) as (front, cut),
            connect_sse(f"http://127.0.0.1:{front}", auto_resume=True) as client,
        ):
            session = await client.create_session(agent="gated")
            texts = []
            async for event in session.respond("count"):
                if event.type == "response.delta":
                    texts.append(event.delta.text)  # type: ignore[attr-defined]
                    if len(texts) == 3:
                        await agent.paused.wait()
                        await cut()  # every connection, the event stream's too
                        agent.gate.set()
            again = await session.ask("again")
    assert texts == [f"d{i} " for i in range(8)]  # nothing lost, nothing twice
    assert client.reconnects >= 1
    assert again.text == "".join(f"d{i} " for i in range(8))
    assert [m.text for m in agent.requests[1].messages][:2] == ["count", "".join(texts)]


async def test_without_auto_resume_a_cut_stream_ends_the_session() -> None:
    agent = GatedAgent(count=8, pause_at=3)
    port = free_port()
    with trio.fail_after(TIMEOUT):
        async with (
            serving(agent, MemoryEventLog(), port),
            cuttable_front(port) as (front, cut),
            connect_sse(f"http://127.0.0.1:{front}") as client,
        ):
            session = await client.create_session(agent="gated")
            with pytest.raises(ClientError) as caught:
                async for event in session.respond("count"):
                    if event.type == "response.delta":
                        await agent.paused.wait()
                        await cut()
                        agent.gate.set()
    assert caught.value.code == "closed"
    assert client.reconnects == 0


async def test_the_session_survives_a_server_restart_with_a_sqlite_store(tmp_path: Path) -> None:
    agent = GatedAgent(count=2)
    port = free_port()
    with trio.fail_after(TIMEOUT):
        async with connect_sse(f"http://127.0.0.1:{port}", auto_resume=True) as client:
            async with serving(agent, SqliteEventLog(tmp_path / "s.db"), port):
                session = await client.create_session(agent="gated")
                first = await session.ask("one")
            # The server is gone; a new one starts on the same port and file.
            async with serving(agent, SqliteEventLog(tmp_path / "s.db"), port):
                second = await session.ask("two")
    assert first.text == second.text == "d0 d1 "
    assert [m.text for m in agent.requests[1].messages] == ["one", "d0 d1 ", "two"]


async def test_a_session_the_new_server_does_not_know_ends_with_its_code() -> None:
    agent = GatedAgent(count=1)
    port = free_port()
    with trio.fail_after(TIMEOUT):
        async with connect_sse(f"http://127.0.0.1:{port}", auto_resume=True) as client:
            async with serving(agent, MemoryEventLog(), port):
                session = await client.create_session(agent="gated")
                await session.ask("one")
            async with serving(agent, MemoryEventLog(), port):
                with pytest.raises(ClientError) as caught:
                    await session.ask("two")
                fresh = await client.create_session(agent="gated")
                assert (await fresh.ask("three")).text == "d0 "
    assert caught.value.code == "unknown_session"
