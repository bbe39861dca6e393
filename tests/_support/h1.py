"""What h11 reads from a head: the reference the fast head parsers must match; mutated heads."""

from __future__ import annotations

import h11
from hypothesis import strategies as st

from uamp_trio.engines.h1fast import Head

MAX = 64 * 1024


def first_event(conn: h11.Connection, data: bytes) -> object:
    """The first event h11 reads from ``data`` on ``conn``, or its error."""
    conn.receive_data(data)
    try:
        return conn.next_event()
    except h11.RemoteProtocolError as exc:
        return exc


def replaced(data: bytes, old: bytes, new: bytes) -> bytes:
    """``data`` with its first ``old`` replaced by ``new`` (which must change it)."""
    changed = data.replace(old, new, 1)
    assert changed != data
    return changed


def mutate(draw: st.DrawFn, data: bytes, splices: list[bytes]) -> bytes:
    """``data`` with one to three pieces spliced in, dropped or replaced: mostly invalid."""
    mutated = bytearray(data)
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(mutated)))
        action = draw(st.sampled_from(["insert", "delete", "replace"]))
        if action == "delete":
            del mutated[at : at + draw(st.integers(1, 3))]
        else:
            piece = draw(st.sampled_from(splices) | st.binary(min_size=1, max_size=2))
            mutated[at : at + (len(piece) if action == "replace" else 0)] = piece
    return bytes(mutated)


def h11_head(data: bytes, max_size: int = MAX) -> Head | Exception | None:
    """What h11 reads from ``data``: the same tuple as parse_head, its error, or
    ``None`` when it needs more bytes."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=max_size)
    event = first_event(conn, data)
    if isinstance(event, Exception):
        return event
    if not isinstance(event, h11.Request):
        return None
    headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in event.headers]
    length = int(dict(event.headers).get(b"content-length", b"0"))
    end = len(data) - len(conn.trailing_data[0])
    # h11's own reading of whether the connection closes after this request.
    close = not h11._connection._keep_alive(event)
    return event.method.decode(), event.target.decode(), headers, length, end, close
