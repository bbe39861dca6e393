"""HTTP/2 flow control: which credit from the peer lets a blocked response go on.

A raw h2 client on 127.0.0.1 reads large responses without acknowledging
them, so the server's senders run out of credit, then gives exactly one
kind of credit (a stream's WINDOW_UPDATE, the connection's, or a SETTINGS
change of the initial window) and expects the rest of the body.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import h2.config
import h2.connection
import h2.events
import h2.settings
import httpx
import pytest
import trio

from tests._support.raw import receive_or_eof
from uamp_trio.app import Router
from uamp_trio.engines.http import Request, StreamingResponse

TIMEOUT = 15
SIZE = 200_000  # about three default windows
BODY = bytes(range(256)) * (SIZE // 256) + b"x" * (SIZE % 256)
DEFAULT_WINDOW = 65_535
WINDOW = h2.settings.SettingCodes.INITIAL_WINDOW_SIZE


def router() -> Router:
    router = Router()

    async def big(request: Request) -> StreamingResponse:
        async def body() -> AsyncIterator[bytes]:
            yield BODY

        return StreamingResponse.from_iterable(body())

    router.add("GET", "/big", big)
    return router


class Peer:
    """An h2 client over a socket that acknowledges nothing unless told to."""

    def __init__(self, stream: trio.SocketStream, settings: dict[int, int]) -> None:
        self.stream = stream
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.conn.local_settings = h2.settings.Settings(client=True, initial_values=settings)
        self.conn.initiate_connection()
        self.received: dict[int, int] = {}
        self.ended: set[int] = set()

    def get(self, sid: int) -> None:
        headers = [(":method", "GET"), (":path", "/big"), (":scheme", "http"), (":authority", "t")]
        self.conn.send_headers(sid, headers, end_stream=True)
        self.received[sid] = 0

    async def send(self) -> None:
        await self.stream.send_all(self.conn.data_to_send())

    async def read_until(self, done: object) -> None:
        """Read until ``done()`` holds; fail if the server closes first."""
        while not done():  # type: ignore[operator]
            data = await receive_or_eof(self.stream)
            assert data, "the server closed the connection"
            for event in self.conn.receive_data(data):
                if isinstance(event, h2.events.DataReceived):
                    self.received[event.stream_id] += len(event.data)
                elif isinstance(event, h2.events.StreamEnded):
                    self.ended.add(event.stream_id)
            await self.send()  # SETTINGS and PING acks; never WINDOW_UPDATE


async def open_peer(port: int, settings: dict[int, int]) -> Peer:
    return Peer(await trio.open_tcp_stream("127.0.0.1", port), settings)


#: (case, the client's initial stream window, extra connection window)
CASES = [
    ("stream credit", DEFAULT_WINDOW, 10 * SIZE),
    ("connection credit", 10 * SIZE, 0),
    ("initial window raised", 0, 10 * SIZE),
]


@pytest.mark.parametrize(("case", "window", "extra"), CASES, ids=[c[0] for c in CASES])
async def test_blocked_sender_resumes_on_each_kind_of_credit(  # type: ignore[no-untyped-def]
    serve_app, case: str, window: int, extra: int
) -> None:
    with trio.fail_after(TIMEOUT):
        server = await serve_app(router())
        peer = await open_peer(server.port, {WINDOW: window})
        async with peer.stream:
            if extra:
                peer.conn.increment_flow_control_window(extra)
            peer.get(1)
            await peer.send()
            # What the windows allow arrives, then the sender waits.
            allowed = min(window, DEFAULT_WINDOW + extra)
            await peer.read_until(lambda: peer.received[1] >= allowed)
            assert peer.received[1] == allowed and 1 not in peer.ended
            if case == "stream credit":
                peer.conn.increment_flow_control_window(SIZE, stream_id=1)
            elif case == "connection credit":
                peer.conn.increment_flow_control_window(SIZE)
            else:
                peer.conn.update_settings({WINDOW: 10 * SIZE})
            await peer.send()
            await peer.read_until(lambda: 1 in peer.ended)
        assert peer.received[1] == SIZE


async def test_credit_for_one_stream_does_not_wait_for_another(serve_app) -> None:  # type: ignore[no-untyped-def]
    with trio.fail_after(TIMEOUT):
        server = await serve_app(router())
        peer = await open_peer(server.port, {WINDOW: DEFAULT_WINDOW})
        async with peer.stream:
            peer.conn.increment_flow_control_window(10 * SIZE)
            peer.get(1)
            peer.get(3)
            await peer.send()
            await peer.read_until(lambda: min(peer.received.values()) >= DEFAULT_WINDOW)
            # Stream 3 stays blocked; stream 1 alone gets credit and finishes.
            peer.conn.increment_flow_control_window(SIZE, stream_id=1)
            await peer.send()
            await peer.read_until(lambda: 1 in peer.ended)
            assert peer.received == {1: SIZE, 3: DEFAULT_WINDOW}
            peer.conn.increment_flow_control_window(SIZE, stream_id=3)
            await peer.send()
            await peer.read_until(lambda: 3 in peer.ended)
        assert peer.received == {1: SIZE, 3: SIZE}


async def test_many_blocked_streams_all_finish_with_a_real_client(serve_app) -> None:  # type: ignore[no-untyped-def]
    # httpx gives credit back per stream as the body is read: with eight
    # streams over their windows at once, every sender must be woken by its
    # own stream's WINDOW_UPDATE.
    with trio.fail_after(TIMEOUT):
        server = await serve_app(router())
        bodies: dict[int, bytes] = {}
        async with httpx.AsyncClient(base_url=server.url, http1=False, http2=True) as client:

            async def one(i: int) -> None:
                async with client.stream("GET", "/big") as r:
                    assert r.http_version == "HTTP/2"
                    bodies[i] = await r.aread()

            async with trio.open_nursery() as nursery:
                for i in range(8):
                    nursery.start_soon(one, i)
        assert bodies == {i: BODY for i in range(8)}


async def test_a_sender_reset_while_it_waits_for_credit_leaves_nothing_behind(serve_app) -> None:  # type: ignore[no-untyped-def]
    # The server resets a response that gets no credit for response_idle_timeout;
    # the connection must not keep the sender's wake-up (memory stays bounded
    # on a connection that lives long).
    with trio.fail_after(TIMEOUT):
        server = await serve_app(router(), response_idle_timeout=0.3)
        peer = await open_peer(server.port, {WINDOW: DEFAULT_WINDOW})
        async with peer.stream:
            peer.get(1)
            await peer.send()
            resets: list[h2.events.StreamReset] = []
            while not resets:
                data = await receive_or_eof(peer.stream)
                assert data, "the server closed the connection"
                events = peer.conn.receive_data(data)
                resets += [e for e in events if isinstance(e, h2.events.StreamReset)]
            (tracker,) = server._connections
            conn = tracker.on_shutdown.__self__  # the HTTP/2 connection
            while 1 in conn.streams or conn.blocked:
                await trio.sleep(0.01)  # the cancelled sender finishing
        assert resets[0].stream_id == 1
