"""auto_resume across a lost link: a turn the server never acted on is sent again, once.

A small TCP relay stands between the client and a real server; the test
arms it to lose the link at the worst moment for a turn: its
``response.create`` swallowed on the way up (the server never acted on it),
or the server's answer swallowed on the way down (it did, the client saw
nothing). Either way the client resumes and gets the response whole, and the
agent runs once. The relay also stands in for a load balancer whose nodes
are away (503) while the client first dials.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

from tests._support.raw import receive_or_eof
from tests.trio.transports.test_uamp_resume import GatedAgent, serving
from uamp_stores.event_log import MemoryEventLog
from uamp_trio.client import ClientError, connect

TIMEOUT = 30
_UNAVAILABLE = b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


class Relay:
    """Forwards TCP connections to ``port``; :attr:`cut` loses the next one's link.

    ``cut``: ``"up"`` drops the client's next bytes and closes both sides;
    ``"down"`` forwards them and drops the server's next bytes instead.
    ``refuse``: how many connections to come get a 503 and are closed.
    """

    def __init__(self, port: int) -> None:
        self.target = port
        self.cut: str | None = None
        self.refuse = 0
        self.port = 0

    async def serve(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._link, listeners)

    async def _link(self, client: trio.SocketStream) -> None:
        if self.refuse:
            self.refuse -= 1
            await receive_or_eof(client)
            await client.send_all(_UNAVAILABLE)
            await client.aclose()
            return
        server = await trio.open_tcp_stream("127.0.0.1", self.target)
        async with client, server, trio.open_nursery() as nursery:
            nursery.start_soon(self._pump, client, server, "up", nursery.cancel_scope)
            nursery.start_soon(self._pump, server, client, "down", nursery.cancel_scope)

    async def _pump(
        self, source: trio.SocketStream, sink: trio.SocketStream, way: str, link: trio.CancelScope
    ) -> None:
        while data := await receive_or_eof(source):
            if self.cut == way:
                self.cut = None
                link.cancel()  # both sides close: the link is lost
                return
            try:
                await sink.send_all(data)
            except trio.BrokenResourceError:
                break
        link.cancel()


@asynccontextmanager
async def relayed(agent: GatedAgent) -> AsyncIterator[tuple[Relay, str]]:
    async with serving(agent, MemoryEventLog()) as url, trio.open_nursery() as nursery:
        relay = Relay(int(url.split(":")[2].split("/")[0]))
        await nursery.start(relay.serve)
        yield relay, url.replace(f":{relay.target}/", f":{relay.port}/")
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize(("cut", "resent"), [("up", 1), ("down", 0)])
async def test_a_turn_lost_with_the_link_is_answered_once(cut: str, resent: int) -> None:
    agent = GatedAgent(count=4)
    with trio.fail_after(TIMEOUT):
        async with relayed(agent) as (relay, url), connect(url, auto_resume=True) as client:
            session = await client.create_session()
            relay.cut = cut
            result = await session.ask("count")
            assert client.reconnects == 1
            assert client.resent == resent
            # The session goes on as before.
            again = await session.ask("again")
    assert result.text == again.text == "d0 d1 d2 d3 "
    assert len(agent.requests) == 2  # the lost turn ran once
    assert [m.text for m in agent.requests[1].messages] == ["count", result.text, "again"]


async def test_a_load_balancer_without_a_node_is_ridden_out_by_the_first_dial() -> None:
    agent = GatedAgent(count=1)
    with trio.fail_after(TIMEOUT):
        async with relayed(agent) as (relay, url):
            relay.refuse = 1
            with pytest.raises(ClientError) as caught:
                async with connect(url):
                    pass
            assert "503" in caught.value.message
            relay.refuse = 2
            async with connect(url, auto_resume=True) as client:
                session = await client.create_session()
                assert (await session.ask("hello")).text == "d0 "
            assert relay.refuse == 0
            # A refusal that is an answer (no such agent) is not dialled again.
            with pytest.raises(ClientError) as refused:
                async with connect(url.replace("/gated/", "/nobody/"), auto_resume=True):
                    pass
    assert refused.value.code == "agent_offline"
