"""The hand-written trio + h11 server both HTTP benchmarks measure against.

:func:`read_body` reads a request's body with h11 the plain way, and
:func:`json_reply` frames a complete JSON response; ``bench/http1.py`` (the
engine against h11 in memory) and ``bench/transports.py`` (the servers over
loopback) build their h11 baseline from these two, so both compare the
project against the same thing.
"""

from __future__ import annotations

import h11
import trio


async def read_body(conn: h11.Connection, stream: trio.abc.ReceiveStream) -> bytes:
    """The body of the request whose head ``conn`` just gave, read to its end."""
    body = b""
    while True:
        part = conn.next_event()
        if part is h11.NEED_DATA:
            conn.receive_data(await stream.receive_some(65536))
        elif isinstance(part, h11.Data):
            body += part.data
        else:
            return body


def json_reply(conn: h11.Connection, body: bytes) -> bytes:
    """The bytes of a 200 JSON response carrying ``body``, head to end."""
    head = h11.Response(
        status_code=200,
        headers=[("content-type", "application/json"), ("content-length", str(len(body)))],
    )
    return conn.send(head) + conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage())
