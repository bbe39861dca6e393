"""The WebSocket engine's fast path against the library's parser: the same output, always.

:mod:`uamp_trio.engines.ws_frames` parses the common frames itself and hands
the first unusual one (and everything after it) to the ``websockets``
library. Here hypothesis builds streams of frames -- the common kinds, and
fragments, closes, reserved bits, wrong masking, over-limit and non-UTF-8
messages, long control frames -- cuts them at random points and feeds them to
one engine with the fast path and one without: the messages, the close code,
the pong owed, the pongs counted and the bytes to send must be the same.
"""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from uamp_trio.engines.ws_frames import WebSocketClosed, make_engine

LIMIT = 300


def frame(
    op: int,
    payload: bytes,
    *,
    fin: bool = True,
    mask: bool = True,
    rsv: int = 0,
    key: bytes = b"k3y!",
) -> bytes:
    """One frame as a peer would write it."""
    head = bytes([(0x80 if fin else 0) | rsv << 4 | op])
    bit = 0x80 if mask else 0
    size = len(payload)
    if size < 126:
        head += bytes([bit | size])
    elif size < 65536:
        head += bytes([bit | 126]) + struct.pack("!H", size)
    else:
        head += bytes([bit | 127]) + struct.pack("!Q", size)
    if not mask:
        return head + payload
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


texts = st.text(max_size=40).map(lambda t: t.encode())
common = st.one_of(
    st.tuples(st.just(1), texts),
    st.tuples(st.just(2), st.binary(max_size=40)),
    st.tuples(st.just(1), st.binary(min_size=126, max_size=LIMIT)),  # 16-bit length
    st.tuples(st.just(9), st.binary(max_size=20)),
    st.tuples(st.just(10), st.binary(max_size=20)),
).map(lambda f: frame(f[0], f[1]))
unusual = st.one_of(
    st.tuples(st.sampled_from([1, 2]), st.binary(max_size=20)).map(
        lambda f: frame(f[0], f[1], fin=False)
    ),
    st.binary(max_size=20).map(lambda b: frame(0, b)),  # a continuation
    st.binary(max_size=20).map(lambda b: frame(1, b)),  # maybe not UTF-8
    st.integers(1000, 4999).map(lambda code: frame(8, struct.pack("!H", code))),
    st.binary(max_size=10).map(lambda b: frame(1, b, rsv=4)),
    st.binary(max_size=10).map(lambda b: frame(2, b, mask=False)),
    st.binary(min_size=LIMIT + 1, max_size=LIMIT + 5).map(lambda b: frame(2, b)),
    st.binary(min_size=126, max_size=130).map(lambda b: frame(9, b)),  # a long ping
    st.sampled_from([3, 11]).map(lambda op: frame(op, b"")),  # reserved opcodes
    st.binary(max_size=12),  # noise
)


def run(stream: bytes, cuts: list[int], fast: bool) -> tuple[object, ...]:
    engine = make_engine(client=False, max_message_size=LIMIT, engine="websockets")
    if not fast:
        engine._pending = None  # type: ignore[attr-defined]
    messages: list[bytes] = []
    closed: tuple[int, str] | None = None
    pieces = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    for piece in [*pieces, b""]:
        try:
            messages.extend(engine.feed(piece))
        except WebSocketClosed as exc:
            closed = (exc.code, exc.reason)
            break
    return messages, closed, engine.pongs, engine.owes, engine.take()


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.one_of(common, common, common, unusual), max_size=12),
    st.lists(st.integers(0, 4000), max_size=6),
)
def test_fast_path_and_library_agree(frames: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(frames)
    cuts = sorted({c for c in cuts if 0 < c < len(stream)})
    assert run(stream, cuts, fast=True) == run(stream, cuts, fast=False)


def test_common_frames_never_reach_the_library() -> None:
    """Text, binary, ping and pong frames cut anywhere stay on the fast path."""
    engine = make_engine(client=False, max_message_size=1 << 20, engine="websockets")
    stream = b"".join(
        [frame(1, b'{"type": "ping"}'), frame(9, b"a"), frame(2, b"x" * 70_000), frame(10, b"")] * 3
    )
    messages: list[bytes] = []
    for start in range(0, len(stream), 777):
        messages.extend(engine.feed(stream[start : start + 777]))
    assert messages == [b'{"type": "ping"}', b"x" * 70_000] * 3
    assert engine.pongs == 3 and engine.take() == b"\x8a\x01a"  # one pong, for the latest ping
    assert engine._pending == bytearray()  # type: ignore[attr-defined]
    with_close = engine.feed(frame(1, b"last") + frame(8, struct.pack("!H", 1000)))
    assert with_close == [b"last"]
    assert engine._pending is None  # type: ignore[attr-defined]


@given(
    payload=st.one_of(
        st.text(max_size=300).map(lambda t: t.encode()), st.sampled_from([125, 126, 65535, 65536])
    )
)
@settings(max_examples=200, deadline=None)
def test_a_servers_text_frames_are_the_librarys(payload: bytes | int) -> None:
    from websockets.protocol import Protocol, Side, State

    data = b"x" * payload if isinstance(payload, int) else payload
    library = Protocol(Side.SERVER, state=State.OPEN, max_size=None)
    library.send_text(data)
    library.send_text(b"next")
    engine = make_engine(client=False, max_message_size=None, engine="websockets")
    engine.text(data)
    engine.text(b"next")
    assert engine.take() == b"".join(library.data_to_send())
    # The bytes parse back to the two messages.
    peer = make_engine(client=True, max_message_size=None, engine="websockets")
    assert peer.feed(frame(1, data, mask=False) + frame(1, b"next", mask=False)) == [data, b"next"]


def test_text_after_close_is_refused_as_the_library_refuses_it() -> None:
    from websockets.exceptions import InvalidState

    engine = make_engine(client=False, max_message_size=None, engine="websockets")
    engine.close(1000, "bye")
    try:
        engine.text(b"late")
    except InvalidState:
        pass
    else:  # pragma: no cover - the assertion below reports it
        raise AssertionError("a text frame after the close frame was queued")
