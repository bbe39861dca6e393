"""UAMP on asyncio: the sans-IO core driven by another event loop.

The same ``uamp_proto.ServerConnection`` that the Trio transports use is
driven here by asyncio streams. :class:`EchoSession` is the whole embedding:
text frames in, text frames out, a toy agent that echoes the user's text back
in a few deltas. Two framings carry those frames:

* ``--framing lines`` (needs nothing but ``pip install uamp``): one UAMP event
  per line of JSON over TCP, as ACP does over stdio;
* ``--framing websocket`` (needs ``wsproto``, in ``uamp[trio]``): UAMP's
  WebSocket transport, reachable by any UAMP WebSocket client.

Run ``python examples/asyncio_server.py --demo`` to start a lines server and
talk to it with the core's ``ClientConnection`` in the same process, or
``python examples/asyncio_server.py --port 8766`` to serve WebSocket clients
at ``ws://127.0.0.1:8766/``.
"""

from __future__ import annotations

import argparse
import asyncio

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.connection import NEED_DATA, ClientConnection, ServerConnection
from uamp_proto.errors import RemoteProtocolError


class EchoSession:
    """One connection's core plus the echo agent: frames in, frames out."""

    def __init__(self) -> None:
        self.conn = ServerConnection()

    def receive(self, frame: str | bytes) -> list[bytes]:
        """Feed one text frame; return the frames owed to the peer, in order."""
        self.conn.receive(frame)
        out: list[bytes] = []
        while True:
            try:
                event = self.conn.next_event()
            except RemoteProtocolError:
                out.extend(self.conn.data_to_send())  # the session.error owed
                continue
            if event is NEED_DATA:
                return out
            out.extend(self.conn.data_to_send())
            if isinstance(event, ev.SessionCreate):
                assert event.session_id is not None
                out.append(self.conn.accept(event.session_id, agent="echo"))
            elif isinstance(event, ev.ResponseCreate):
                out.extend(self._reply(self.conn.session(event.session_id).id))

    def _reply(self, session_id: str) -> list[bytes]:
        tracker = self.conn.session(session_id).response
        assert tracker is not None
        text = " ".join(m.text for m in tracker.input_messages) or "(nothing)"
        rid = tracker.response_id
        out = [self.conn.send(ev.ResponseCreated(session_id=session_id, response_id=rid))]
        for word in f"You said: {text}".split(" "):
            delta = ev.ResponseDelta(
                session_id=session_id, response_id=rid, delta=ty.DeltaText(text=word + " ")
            )
            out.append(self.conn.send(delta))
        out.append(self.conn.send(tracker.done_event()))
        return out


async def _handle_lines(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, closed: asyncio.Event | None
) -> None:
    session = EchoSession()
    try:
        while line := await reader.readline():
            for frame in session.receive(line.rstrip(b"\n")):
                writer.write(frame + b"\n")
            await writer.drain()
    finally:
        writer.close()
        if closed is not None:
            closed.set()


async def serve_lines(
    host: str = "127.0.0.1", port: int = 0, *, closed: asyncio.Event | None = None
) -> asyncio.Server:
    """Serve UAMP as JSON lines over TCP; needs only the core. ``closed`` is set per hang-up."""
    return await asyncio.start_server(lambda r, w: _handle_lines(r, w, closed), host, port)


async def _handle_websocket(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    from wsproto import ConnectionType, WSConnection
    from wsproto.events import (
        AcceptConnection,
        BytesMessage,
        CloseConnection,
        Request,
        TextMessage,
    )

    ws = WSConnection(ConnectionType.SERVER)
    session = EchoSession()
    parts: list[str] = []
    try:
        while data := await reader.read(65536):
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
                    for frame in session.receive("".join(parts)):
                        writer.write(ws.send(TextMessage(data=frame.decode())))
                    parts.clear()
            await writer.drain()
    finally:
        writer.close()


async def serve(host: str = "127.0.0.1", port: int = 0) -> asyncio.Server:
    """Serve UAMP over WebSocket (needs wsproto); the port is ``sockets[0].getsockname()[1]``."""
    return await asyncio.start_server(_handle_websocket, host, port)


async def run_demo(text: str = "hello asyncio") -> str:
    """Start a lines server, ask it one question with the core's client; return the reply."""
    hung_up = asyncio.Event()
    server = await serve_lines(closed=hung_up)
    port = server.sockets[0].getsockname()[1]
    async with server:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        client = ClientConnection()
        for frame in (
            client.create_session(agent="echo"),
            client.send(ev.InputText(text=text)),
            client.send(ev.ResponseCreate()),
        ):
            writer.write(frame + b"\n")
        await writer.drain()
        reply = ""
        while not reply:
            line = await asyncio.wait_for(reader.readline(), timeout=10)
            if not line:
                raise ConnectionError("the server closed before response.done")
            client.receive(line.rstrip(b"\n"))
            while (event := client.next_event()) is not NEED_DATA:
                if isinstance(event, ev.ResponseDone):
                    reply = "".join(getattr(item, "text", "") for item in event.response.output)
        writer.close()
        await hung_up.wait()  # let the server's handler end before the server closes
        return reply.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8766)
    parser.add_argument("--framing", choices=("websocket", "lines"), default="websocket")
    parser.add_argument("--demo", action="store_true", help="one round trip over lines, then exit")
    args = parser.parse_args()
    if args.demo:
        print(asyncio.run(run_demo()))
        return

    async def run() -> None:
        start = serve if args.framing == "websocket" else serve_lines
        server = await start(args.host, args.port)
        port = server.sockets[0].getsockname()[1]
        scheme = "ws" if args.framing == "websocket" else "tcp"
        print(f"UAMP ({args.framing}) on {scheme}://{args.host}:{port}/")
        async with server:
            await server.serve_forever()

    asyncio.run(run())


if __name__ == "__main__":
    main()
