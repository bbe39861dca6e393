"""``receive_when_ready``: wait for the socket, then read once -- and every way a read ends.

The UAMP WebSocket reader reads with it instead of trio's ``receive_some``
(one read and a dozen Python calls fewer per message). It must end as
``receive_or_eof`` does: the bytes, or ``b""`` for the end however the
stream ended (the peer closed or reset it, it was closed here before or
while waiting), and a cancellation stays a cancellation.
"""

from __future__ import annotations

import socket
import struct

import pytest
import trio
import trio.testing

from uamp_trio.engines.streams import receive_when_ready


async def pair() -> tuple[trio.SocketStream, trio.SocketStream]:
    a, b = trio.socket.socketpair()
    return trio.SocketStream(a), trio.SocketStream(b)


async def test_reads_what_is_waiting_and_what_arrives_later() -> None:
    mine, peer = await pair()
    await peer.send_all(b"first")
    assert await receive_when_ready(mine) == b"first"
    async with trio.open_nursery() as nursery:
        nursery.start_soon(peer.send_all, b"later")
        assert await receive_when_ready(mine) == b"later"
    await peer.send_all(b"x" * 100)
    assert await receive_when_ready(mine, 30) == b"x" * 30  # at most max_bytes


@pytest.mark.parametrize("how", ["peer closes", "peer resets", "closed here", "closed meanwhile"])
async def test_every_end_is_empty_bytes(how: str) -> None:
    mine, peer = await pair()
    if how == "peer closes":
        await peer.aclose()
    elif how == "peer resets":
        peer.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        await peer.aclose()
    elif how == "closed here":
        await mine.aclose()
    if how != "closed meanwhile":
        assert await receive_when_ready(mine) == b""
        return
    async with trio.open_nursery() as nursery:

        async def close_soon() -> None:
            await trio.testing.wait_all_tasks_blocked()
            await mine.aclose()

        nursery.start_soon(close_soon)
        assert await receive_when_ready(mine) == b""


async def test_a_cancelled_wait_is_cancelled_and_the_socket_reads_on() -> None:
    mine, peer = await pair()
    with trio.move_on_after(0.05) as scope:
        await receive_when_ready(mine)
    assert scope.cancelled_caught
    await peer.send_all(b"still here")
    assert await receive_when_ready(mine) == b"still here"


async def test_another_kind_of_stream_is_read_by_trio() -> None:
    mine, peer = trio.testing.memory_stream_pair()
    await peer.send_all(b"hi")
    assert await receive_when_ready(mine) == b"hi"
    await peer.aclose()
    assert await receive_when_ready(mine) == b""
