"""uamp_asgi under Trio: hypercorn's Trio worker serves it (anyio, no asyncio needed)."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import httpx
import pytest
import trio

import uamp_asgi
from uamp_asgi.responders import function_agent
from uamp_proto import events as ev
from uamp_proto.responder import TurnRequest
from uamp_trio.client import connect

hypercorn = pytest.importorskip("hypercorn")


async def echo(turn: TurnRequest) -> AsyncIterator[str | ev.Event]:
    """Says back what it was told, in two pieces."""
    yield "You said: "
    yield turn.messages[-1].text


async def test_completions_and_uamp_websocket_on_trio() -> None:
    from hypercorn.config import Config
    from hypercorn.trio import serve

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.accesslog = config.errorlog = None
    stop = trio.Event()
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            app = uamp_asgi.app([function_agent(echo)])
            nursery.start_soon(lambda: serve(app, config, shutdown_trigger=stop.wait))
            base = f"http://127.0.0.1:{port}/agents/echo"
            async with httpx.AsyncClient() as http:
                while True:
                    try:
                        await http.get(f"{base}/v1/models")
                        break
                    except httpx.ConnectError:
                        await trio.sleep(0.05)
                body = {"model": "echo", "messages": [{"role": "user", "content": "trio"}]}
                reply = await http.post(f"{base}/chat/completions", json=body)
                assert reply.json()["choices"][0]["message"]["content"] == "You said: trio"
                streamed = await http.post(
                    f"{base}/chat/completions", json={**body, "stream": True}
                )
                assert streamed.text.endswith("data: [DONE]\n\n")
            async with connect(base.replace("http://", "ws://") + "/uamp") as client:
                session = await client.create_session()
                assert (await session.ask("again")).text == "You said: again"
            stop.set()
