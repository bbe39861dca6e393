"""The server's response output bound reaches the paths that once kept the 32 MiB default.

``uamp serve --max-response-output-bytes`` (``ServerConfig.max_response_output_bytes``)
must bound every turn the server runs, not only the transports of
``test_output_bound.py``: ACP (HTTP and WebSocket), AG-UI's parked runs,
Realtime (both servers), spec 003 envelope exchanges, a response carried on
after its process was lost, and a daemon's turns over the relay (its own
``Daemon(max_response_output_bytes)``, ``uamp connect
--max-response-output-bytes``). Each test serves :class:`Endless` with a
bound of :data:`BOUND` (1 MiB) and asserts the protocol's error naming it:
with the default in force, the agent would stream 32 MiB and the error
would name that.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from contextlib import ExitStack
from types import SimpleNamespace
from typing import Any

import httpx
import openai
import orjson
import pytest
import trio
import trio_websocket

from tests._support.endless import BOUND, Endless, assert_stopped_at_the_bound
from tests._support.rpc import agui_run
from tests._support.wire import create_session, send, texts, until
from tests.trio.hosting.test_continuation import lost_log
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.codec import decode
from uamp_proto.envelope import DeltaType
from uamp_proto.principal import ANONYMOUS
from uamp_proto.sse import SSEParser
from uamp_trio.app import App, create_app
from uamp_trio.client.envelope import EnvelopeHTTPClient, EnvelopeSigner
from uamp_trio.engines.server import ServerConfig
from uamp_trio.hosting.continuation import carry_on
from uamp_trio.relay.daemon import Daemon
from uamp_trio.transports.realtime import mount as mount_realtime

TIMEOUT = 60


def _rpc(id: int, method: str, params: Any) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": id, "method": method, "params": params})


async def _answer(ws: trio_websocket.WebSocketConnection, id: int) -> tuple[list[Any], Any]:
    """The notifications before the answer to request ``id``, and the answer."""
    notes: list[Any] = []
    while True:
        message = json.loads(await ws.get_message())
        if message.get("id") == id and "method" not in message:
            return notes, message
        notes.append(message)


async def test_acp_session_prompt_over_the_websocket(serve_app: Any) -> None:
    agent = Endless()
    server = await serve_app(create_app([agent]), max_response_output_bytes=BOUND)
    url = f"ws://127.0.0.1:{server.port}/agents/endless/acp/stream"
    with trio.fail_after(TIMEOUT):
        async with trio_websocket.open_websocket_url(url, max_message_size=2 * BOUND) as ws:
            await ws.send_message(_rpc(1, "session/new", {"cwd": "/", "mcpServers": []}))
            sid = (await _answer(ws, 1))[1]["result"]["sessionId"]
            prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "forever"}]}
            await ws.send_message(_rpc(2, "session/prompt", prompt))
            notes, answer = await _answer(ws, 2)
            error = answer["error"]
            assert error["data"] == {
                "code": "output_too_large",
                "details": {"max_output_bytes": BOUND},
            }
            got = sum(
                len(n["params"]["update"]["content"]["text"])
                for n in notes
                if n["params"]["update"].get("sessionUpdate") == "agent_message_chunk"
            )
            assert_stopped_at_the_bound(got)
            assert agent.emitted == [got]
            # The session goes on.
            prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "short"}]}
            await ws.send_message(_rpc(3, "session/prompt", prompt))
            assert (await _answer(ws, 3))[1]["result"]["stopReason"] == "end_turn"


async def test_acp_prompt_submit_over_http(serve_app: Any) -> None:
    agent = Endless()
    server = await serve_app(create_app([agent]), max_response_output_bytes=BOUND)
    body = _rpc(1, "prompt/submit", {"messages": [{"role": "user", "content": "forever"}]})
    with trio.fail_after(TIMEOUT):
        async with httpx.AsyncClient(base_url=server.url, timeout=TIMEOUT) as http:
            answer = (await http.post("/agents/endless/acp", content=body)).json()
    assert answer["error"]["data"] == {"code": "output_too_large"}
    assert str(BOUND) in answer["error"]["message"]
    assert len(agent.emitted) == 1 and agent.emitted[0] <= BOUND


async def test_agui_run_parked_on_the_server(serve_app: Any) -> None:
    """A served AG-UI run is parked (it may wait for a person): bounded all the same."""
    agent = Endless()
    server = await serve_app(create_app([agent]), max_response_output_bytes=BOUND)
    with trio.fail_after(TIMEOUT):
        async with httpx.AsyncClient(base_url=server.url, timeout=TIMEOUT) as http:
            r = await http.post("/agents/endless/agui", content=orjson.dumps(agui_run("forever")))
    parser = SSEParser()
    events = [orjson.loads(e.data) for e in parser.feed(r.content)]
    assert events[-1]["type"] == "RUN_ERROR", events[-1]
    assert events[-1]["code"] == "output_too_large"
    assert str(BOUND) in events[-1]["message"]
    got = sum(len(e.get("delta", "")) for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert_stopped_at_the_bound(got)
    assert agent.emitted == [got]


@pytest.fixture(params=["uamp serve", "uamp_asgi"])
def realtime_server(request: pytest.FixtureRequest, thread_server: Any) -> Any:
    """The endless agent's Realtime endpoint on either server, bounded at :data:`BOUND`."""
    agent = Endless()
    if request.param == "uamp serve":
        app = App([agent])
        mount_realtime(app)
        yield thread_server(app, max_response_output_bytes=BOUND), agent
        return
    import uamp_asgi
    from tests._support.asgi import uvicorn_server

    config = uamp_asgi.Config(transports=("realtime",), max_response_output_bytes=BOUND)
    with ExitStack() as stack:
        url = stack.enter_context(uvicorn_server(uamp_asgi.app([agent], config=config)))
        yield SimpleNamespace(url=url), agent


def test_realtime_response_fails_at_the_bound(realtime_server: tuple[Any, Endless]) -> None:
    server, agent = realtime_server

    async def main() -> tuple[Any, int]:
        client = openai.AsyncOpenAI(
            api_key="k", base_url=f"{server.url}/agents/endless", max_retries=0
        )
        async with client.realtime.connect(model="endless") as conn:
            assert (await conn.recv()).type == "session.created"
            await conn.conversation.item.create(
                item={
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "forever"}],
                }
            )
            await conn.response.create()
            got = 0
            async for event in conn:
                if event.type == "response.output_text.delta":
                    got += len(event.delta)
                if event.type == "response.done":
                    return event, got
        raise AssertionError("closed before response.done")

    done, got = asyncio.run(asyncio.wait_for(main(), TIMEOUT))
    assert done.response.status == "failed"
    error = done.response.status_details.error
    assert error.code == "output_too_large" and str(BOUND) in error.message
    assert_stopped_at_the_bound(got)
    assert agent.emitted == [got]


async def test_an_envelope_exchange_ends_with_an_error_frame(serve_app: Any) -> None:
    agent = Endless()
    server = await serve_app(create_app([agent]), max_response_output_bytes=BOUND)
    base = f"{server.url}/agents/endless"
    with trio.fail_after(TIMEOUT):
        signer = EnvelopeSigner.ephemeral()
        async with EnvelopeHTTPClient(base, signer, to="urn:uamp:agent:endless") as client:
            reply = await client.ask("forever", window=1024)
    assert reply.final is not None and reply.final.type is DeltaType.ERROR
    payload = reply.final.payload or {}
    assert payload["code"] == "output_too_large", payload
    assert str(BOUND) in payload["message"]
    assert_stopped_at_the_bound(len(reply.text))
    assert agent.emitted == [len(reply.text)]


async def test_a_carried_on_response_keeps_the_servers_bound() -> None:
    """A response that goes on from its checkpoint after its process was lost."""
    agent = Endless()
    host = App([agent])
    host.server_config = ServerConfig(max_response_output_bytes=BOUND)
    key = (ANONYMOUS.key, "sess_1")
    logged = [
        ev.ResponseCreated(response_id="resp_1"),
        ev.Progress(target="response", target_id="resp_1", stage="checkpoint", message="c1"),
    ]
    log, record = lost_log(key, "endless", logged)
    record.input = [{"role": "user", "content": "forever"}]
    with trio.fail_after(TIMEOUT):
        await carry_on(log, key, record, agent, ANONYMOUS, host)
    events = [decode(e.data) for e in await log.read(key, 0, 10_000)]
    last = events[-1]
    assert isinstance(last, ev.ResponseErrorEvent), last
    assert last.error.code == "output_too_large"
    assert last.error.details == {"max_output_bytes": BOUND}
    got = sum(
        len(e.delta.text)
        for e in events
        if isinstance(e, ev.ResponseDelta) and isinstance(e.delta, ty.DeltaText)
    )
    assert_stopped_at_the_bound(got)


async def test_a_daemons_turns_are_bounded_by_its_own_setting(
    serve_app: Any, nursery: trio.Nursery
) -> None:
    """The relay forwards; the daemon runs the agent, at ``Daemon(max_response_output_bytes)``."""
    agent = Endless()
    server = await serve_app(create_app([], relay=True))  # the relay's own bound: the default
    daemon = Daemon(server.url, [agent], max_response_output_bytes=BOUND)
    nursery.start_soon(daemon.run)
    with trio.fail_after(TIMEOUT):
        await daemon.connected.wait()
        url = server.url.replace("http", "ws", 1) + "/agents/endless/uamp"
        async with trio_websocket.open_websocket_url(url, max_message_size=2 * BOUND) as ws:
            sid = await create_session(ws)
            await send(ws, type="input.text", session_id=sid, text="forever")
            await send(ws, type="response.create", session_id=sid)
            events = await until(ws, "response.error")
    daemon.stop()
    error = events[-1]["error"]
    assert error["code"] == "output_too_large", error
    assert str(BOUND) in error["message"]
    assert len(texts(events)) <= BOUND
    assert len(agent.emitted) == 1 and agent.emitted[0] <= BOUND


def test_uamp_connect_takes_the_bound() -> None:
    """``uamp connect --max-response-output-bytes`` reaches the daemon (validated there)."""
    flags = ["--agent", "uamp_trio.demo:DemoAgent", "--max-response-output-bytes", "0"]
    done = subprocess.run(
        [sys.executable, "-m", "uamp_trio", "connect", "http://127.0.0.1:9", *flags],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 2
    assert "max_response_output_bytes must be at least 1" in done.stderr, done.stderr
