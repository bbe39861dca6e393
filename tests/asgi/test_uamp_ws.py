"""UAMP over WebSocket from uamp_asgi under uvicorn, driven by uamp's own client, with resume."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator

import anyio
import pytest
import trio

import uamp_asgi
from tests._support.asgi import uvicorn_server
from uamp_asgi.responders import function_agent
from uamp_proto import events as ev
from uamp_proto.responder import TurnRequest
from uamp_trio.client import ClientError, connect

TIMEOUT = 30


class Gate:
    """``count`` deltas ``d0 d1 ...``; stops after ``pause_at`` until :attr:`gate` is set.

    The agent runs on uvicorn's asyncio loop, the test on Trio: threading events between.
    """

    def __init__(self, count: int = 8, pause_at: int = 3) -> None:
        self.count, self.pause_at = count, pause_at
        self.paused, self.gate = threading.Event(), threading.Event()
        self.requests: list[TurnRequest] = []

    async def __call__(self, turn: TurnRequest) -> AsyncIterator[str | ev.Event]:
        self.requests.append(turn)
        for i in range(self.count):
            if i == self.pause_at and not self.gate.is_set():
                self.paused.set()
                while not self.gate.is_set():
                    await anyio.sleep(0.01)
            yield f"d{i} "


GATE = Gate()


async def echo(turn: TurnRequest) -> AsyncIterator[str | ev.Event]:
    """Says back what it was told."""
    yield "You said: "
    yield turn.messages[-1].text


@pytest.fixture(scope="module")
def ws_base() -> Iterator[str]:
    agents = [function_agent(echo), function_agent(GATE, name="gated")]
    with uvicorn_server(uamp_asgi.app(agents)) as url:
        yield url.replace("http://", "ws://")


async def test_sessions_on_an_agents_url_and_on_ws(ws_base: str) -> None:
    with trio.fail_after(TIMEOUT):
        async with connect(f"{ws_base}/agents/echo/uamp") as client:
            session = await client.create_session()
            assert (await session.ask("hi")).text == "You said: hi"
            again = await session.ask("again")
            assert again.text == "You said: again"
        async with connect(f"{ws_base}/ws") as client:
            session = await client.create_session(agent="echo")
            assert (await session.ask("x")).text == "You said: x"


async def test_an_unknown_agent_is_a_session_error(ws_base: str) -> None:
    with trio.fail_after(TIMEOUT):
        async with connect(f"{ws_base}/ws") as client:
            with pytest.raises(ClientError) as caught:
                await client.create_session(agent="nobody")
    assert "agent_not_found" in str(caught.value)


async def test_a_dropped_connection_is_resumed_mid_response(ws_base: str) -> None:
    with trio.fail_after(TIMEOUT):
        async with connect(f"{ws_base}/agents/gated/uamp", auto_resume=True) as client:
            session = await client.create_session()
            texts = []
            async for event in session.respond("count"):
                if event.type == "response.delta":
                    texts.append(event.delta.text)  # type: ignore[attr-defined]
                    if len(texts) == 3:
                        await trio.to_thread.run_sync(GATE.paused.wait)
                        # The network drops: the socket dies under the client.
                        await trio.aclose_forcefully(client._stream)
                        GATE.gate.set()
            result = await session.ask("again")
    assert texts == [f"d{i} " for i in range(GATE.count)]
    assert client.reconnects == 1
    assert result.text == "".join(f"d{i} " for i in range(GATE.count))
    # The resumed session kept its conversation: the second turn saw the first.
    assert [m.text for m in GATE.requests[1].messages][:2] == ["count", "".join(texts)]


async def test_a_single_session_client_need_not_name_its_session(ws_base: str) -> None:
    """UAMP section 10: without ``session_id`` an event goes to the only session, as under
    ``uamp serve`` (a ``response.create`` without one used to end the connection)."""
    import json

    import trio_websocket

    with trio.fail_after(TIMEOUT):
        async with trio_websocket.open_websocket_url(f"{ws_base}/agents/echo/uamp") as ws:
            create = {"type": "session.create", "uamp_version": "1.0", "session": {}}
            await ws.send_message(json.dumps(create))
            assert json.loads(await ws.get_message())["type"] == "session.created"
            await ws.send_message(json.dumps({"type": "input.text", "text": "bare"}))
            await ws.send_message(json.dumps({"type": "response.create"}))
            text = ""
            while True:
                event = json.loads(await ws.get_message())
                if event["type"] == "response.delta":
                    text += event["delta"].get("text", "")
                if event["type"] == "response.done":
                    break
    assert text == "You said: bare"


@pytest.fixture(scope="module")
def small_ws_base() -> Iterator[str]:
    """An app taking WebSocket messages of 1 KiB at most (made outside any event loop)."""
    config = uamp_asgi.Config(websocket_max_message_size=1024)
    with uvicorn_server(uamp_asgi.app([function_agent(echo)], config=config)) as url:
        yield url.replace("http://", "ws://")


async def test_a_message_over_the_limit_closes_with_1009(small_ws_base: str) -> None:
    """As under uamp serve: a message past ``websocket_max_message_size`` ends the connection."""
    from trio_websocket import ConnectionClosed, open_websocket_url

    url = f"{small_ws_base}/agents/echo/uamp"
    with trio.fail_after(TIMEOUT):
        async with connect(url) as client:
            session = await client.create_session()
            # Under the limit (the whole event well under 1,024 bytes): answered.
            assert (await session.ask("é" * 300)).text == "You said: " + "é" * 300
        for big in ("é" * 600, b"x" * 1025):  # 1,200 UTF-8 bytes; 1,025 bytes
            async with open_websocket_url(url) as ws:
                await ws.send_message(big)
                with pytest.raises(ConnectionClosed) as closed:
                    await ws.get_message()
            assert closed.value.reason.code == 1009
        # The server goes on: a new connection is answered as before.
        async with connect(url) as client:
            session = await client.create_session()
            assert (await session.ask("again")).text == "You said: again"
