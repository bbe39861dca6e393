"""What h11 reads from a request head: the reference the fast head parser must match."""

from __future__ import annotations

import h11

from uamp_trio.engines.h1fast import Head

MAX = 64 * 1024


def h11_head(data: bytes, max_size: int = MAX) -> Head | Exception | None:
    """What h11 reads from ``data``: the same tuple as parse_head, its error, or
    ``None`` when it needs more bytes."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=max_size)
    conn.receive_data(data)
    try:
        event = conn.next_event()
    except h11.RemoteProtocolError as exc:
        return exc
    if not isinstance(event, h11.Request):
        return None
    headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in event.headers]
    length = int(dict(event.headers).get(b"content-length", b"0"))
    end = len(data) - len(conn.trailing_data[0])
    # h11's own reading of whether the connection closes after this request.
    close = not h11._connection._keep_alive(event)
    return event.method.decode(), event.target.decode(), headers, length, end, close
