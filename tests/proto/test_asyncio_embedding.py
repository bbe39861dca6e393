"""The sans-IO core runs under asyncio: the example server over a real socket."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path

import orjson
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, CloseConnection, Request, TextMessage

from uamp_proto import events as ev
from uamp_proto.connection import NEED_DATA, ClientConnection

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "asyncio_server.py"


def _load_example() -> object:
    spec = importlib.util.spec_from_file_location("asyncio_server_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


async def _conversation(port: int) -> list[ev.Event]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    ws = WSConnection(ConnectionType.CLIENT)
    client = ClientConnection()
    writer.write(ws.send(Request(host="127.0.0.1", target="/")))
    await writer.drain()
    accepted = False
    while not accepted:
        data = await asyncio.wait_for(reader.read(65536), timeout=10)
        assert data, "server closed during the handshake"
        ws.receive_data(data)
        accepted = any(isinstance(e, AcceptConnection) for e in ws.events())
    for payload in (
        client.create_session(agent="echo"),
        client.send(ev.InputText(text="hello asyncio")),
        client.send(ev.ResponseCreate()),
        b'{"type":"input.text"}',  # malformed: the server answers session.error
    ):
        writer.write(ws.send(TextMessage(data=payload.decode())))
    await writer.drain()
    received: list[ev.Event] = []
    errors: list[dict[str, object]] = []
    while not any(isinstance(e, ev.ResponseDone) for e in received) or not errors:
        data = await asyncio.wait_for(reader.read(65536), timeout=10)
        assert data, "server closed early"
        ws.receive_data(data)
        for wsev in ws.events():
            assert isinstance(wsev, TextMessage)
            message = orjson.loads(wsev.data)
            if message["type"] == "session.error":
                errors.append(message)
                continue
            client.receive(wsev.data)
            event = client.next_event()
            assert event is not NEED_DATA
            received.append(event)  # type: ignore[arg-type]
    writer.write(ws.send(CloseConnection(code=1000)))
    await writer.drain()
    writer.close()
    assert errors[0]["error"]["code"] == "invalid_event"  # type: ignore[index]
    return received


def test_example_server_serves_a_session_under_asyncio() -> None:
    example = _load_example()

    async def main() -> list[ev.Event]:
        server = await example.serve()  # type: ignore[attr-defined]
        port = server.sockets[0].getsockname()[1]
        async with server:
            return await _conversation(port)

    events = asyncio.run(main())
    types = [e.type for e in events]
    assert types[0] == "session.created"
    assert types[1] == "response.created"
    assert types[-1] == "response.done"
    done = events[-1]
    assert isinstance(done, ev.ResponseDone)
    text = "".join(item.text for item in done.response.output)  # type: ignore[union-attr]
    assert text.strip() == "You said: hello asyncio"
