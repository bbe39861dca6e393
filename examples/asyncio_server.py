"""A UAMP WebSocket server on asyncio: the sans-IO core in another event loop.

The same ``uamp_proto.ServerConnection`` that the Trio transports use is
driven here by asyncio streams and wsproto. The agent is a toy that echoes
the user's text back in a few deltas.

Run: ``python examples/asyncio_server.py --port 8766`` and point any UAMP
WebSocket client at ``ws://127.0.0.1:8766/``.
"""

from __future__ import annotations

import argparse
import asyncio

from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Request,
    TextMessage,
)

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.connection import NEED_DATA, ServerConnection
from uamp_proto.errors import RemoteProtocolError


async def _echo_reply(conn: ServerConnection, session_id: str) -> list[bytes]:
    """Produce one response to the session's input: created, deltas, done."""
    session = conn.session(session_id)
    tracker = session.response
    assert tracker is not None
    text = " ".join(m.text for m in tracker.input_messages) or "(nothing)"
    out = [conn.send(ev.ResponseCreated(session_id=session_id, response_id=tracker.response_id))]
    for word in f"You said: {text}".split(" "):
        out.append(
            conn.send(
                ev.ResponseDelta(
                    session_id=session_id,
                    response_id=tracker.response_id,
                    delta=ty.DeltaText(text=word + " "),
                )
            )
        )
    out.append(conn.send(tracker.done_event()))
    return out


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Serve one WebSocket connection carrying UAMP events."""
    ws = WSConnection(ConnectionType.SERVER)
    conn = ServerConnection()
    parts: list[str] = []

    async def send_text(payloads: list[bytes]) -> None:
        for payload in payloads:
            writer.write(ws.send(TextMessage(data=payload.decode())))
        await writer.drain()

    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            ws.receive_data(data)
            for wsev in ws.events():
                if isinstance(wsev, Request):
                    writer.write(ws.send(AcceptConnection()))
                elif isinstance(wsev, CloseConnection):
                    writer.write(ws.send(wsev.response()))
                    await writer.drain()
                    return
                elif isinstance(wsev, TextMessage | BytesMessage):
                    parts.append(wsev.data if isinstance(wsev.data, str) else wsev.data.decode())
                    if not wsev.message_finished:
                        continue
                    conn.receive("".join(parts))
                    parts.clear()
                    await _drain_events(conn, send_text)
            await writer.drain()
    finally:
        writer.close()


async def _drain_events(conn: ServerConnection, send_text: object) -> None:
    send = send_text  # typed loosely to keep the example short
    while True:
        try:
            event = conn.next_event()
        except RemoteProtocolError:
            await send(conn.data_to_send())  # type: ignore[operator]
            continue
        if event is NEED_DATA:
            break
        owed = conn.data_to_send()
        if isinstance(event, ev.SessionCreate):
            assert event.session_id is not None
            owed.append(conn.accept(event.session_id, agent="echo"))
        elif isinstance(event, ev.ResponseCreate):
            owed.extend(await _echo_reply(conn, conn.session(event.session_id).id))
        await send(owed)  # type: ignore[operator]


async def serve(host: str = "127.0.0.1", port: int = 0) -> asyncio.Server:
    """Start the server; the bound port is ``server.sockets[0].getsockname()[1]``."""
    return await asyncio.start_server(handle, host, port)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8766)
    args = parser.parse_args()

    async def run() -> None:
        server = await serve(args.host, args.port)
        print(f"UAMP over WebSocket on ws://{args.host}:{server.sockets[0].getsockname()[1]}/")
        async with server:
            await server.serve_forever()

    asyncio.run(run())


if __name__ == "__main__":
    main()
