"""HTTP/2 under hostile peers: rapid reset, streams that never end, stream and frame floods.

The client is h2 (or hand-built frames) over a raw socket on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import logging

import h2.config
import h2.connection
import h2.errors
import h2.events
import pytest
import trio
from hyperframe.frame import ContinuationFrame, HeadersFrame, PingFrame, SettingsFrame

from tests._support.raw import receive_or_eof
from uamp_trio.app import Router
from uamp_trio.engines.http import Request, Response, json_response

TIMEOUT = 30
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


class Counting:
    """An endpoint that counts its invocations; ``/hang`` waits for ``release``."""

    def __init__(self) -> None:
        self.calls = 0
        self.release = trio.Event()

    def router(self) -> Router:
        router = Router()

        async def hit(request: Request) -> Response:
            self.calls += 1
            if request.path == "/hang":
                await self.release.wait()
            return json_response({"ok": True})

        router.add(["GET", "POST"], "/hit", hit)
        router.add(["GET", "POST"], "/hang", hit)
        return router


def client() -> h2.connection.H2Connection:
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    return conn


def request_headers(path: str = "/hit") -> list[tuple[str, str]]:
    return [(":method", "GET"), (":path", path), (":scheme", "http"), (":authority", "t")]


async def read_events(
    stream: trio.SocketStream, conn: h2.connection.H2Connection, until: type | None = None
) -> list[h2.events.Event]:
    """h2 events from the server until EOF (or an event of type ``until``)."""
    events: list[h2.events.Event] = []
    while True:
        data = await receive_or_eof(stream)
        if not data:
            return events
        new = conn.receive_data(data)
        events += new
        conn.data_to_send()  # the client's ACKs are not needed here
        if until is not None and any(isinstance(e, until) for e in new):
            return events


async def send_quietly(stream: trio.SocketStream, data: bytes) -> None:
    """Send ``data``; the server may close before it has read all of it."""
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        await stream.send_all(data)


def goaway(events: list[h2.events.Event]) -> h2.events.ConnectionTerminated:
    ends = [e for e in events if isinstance(e, h2.events.ConnectionTerminated)]
    assert len(ends) == 1, events[-5:]
    return ends[0]


async def test_rapid_reset_never_runs_the_agent_and_ends_in_goaway(serve_app, caplog) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.DEBUG, logger="uamp_trio")
    pairs = 10_000
    with trio.fail_after(TIMEOUT):
        agent = Counting()
        server = await serve_app(agent.router())
        conn = client()
        for i in range(pairs):
            sid = 2 * i + 1
            conn.send_headers(sid, request_headers(), end_stream=True)
            conn.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        async with stream, trio.open_nursery() as nursery:
            nursery.start_soon(send_quietly, stream, conn.data_to_send())
            events = await read_events(stream, conn)
        end = goaway(events)
        assert end.error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
        assert end.last_stream_id < 2 * pairs - 1  # before the 10,000th stream
        assert agent.calls == 0
    # One warning naming the peer; no traceback per stream.
    mine = [r for r in caplog.records if r.name.startswith("uamp_trio")]
    assert len(mine) <= 5, [r.getMessage() for r in mine]
    warnings = [r for r in mine if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "127.0.0.1" in warnings[0].getMessage()
    assert not any(r.exc_info for r in mine)


async def test_streams_that_never_finish_are_reset(serve_app) -> None:  # type: ignore[no-untyped-def]
    with trio.fail_after(TIMEOUT):
        agent = Counting()
        server = await serve_app(agent.router(), body_timeout=0.5, header_timeout=0.5)
        conn = client()
        sids = [1, 3, 5]
        for sid in sids:
            conn.send_headers(sid, [*request_headers(), ("content-length", "10")])
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        async with stream:
            await stream.send_all(conn.data_to_send())
            reset: set[int] = set()
            while reset != set(sids):
                events = await read_events(stream, conn, until=h2.events.StreamReset)
                assert events, "the connection closed"
                reset |= {e.stream_id for e in events if isinstance(e, h2.events.StreamReset)}
        assert agent.calls == 0


async def test_max_concurrent_streams_is_advertised_and_enforced(serve_app) -> None:  # type: ignore[no-untyped-def]
    with trio.fail_after(TIMEOUT):
        agent = Counting()
        server = await serve_app(agent.router(), h2_max_concurrent_streams=5)
        conn = client()
        # Six requests written before the server's SETTINGS are read: the
        # client cannot know the limit yet, the server must enforce it.
        for i in range(6):
            conn.send_headers(2 * i + 1, request_headers("/hang"), end_stream=True)
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        async with stream:
            await stream.send_all(conn.data_to_send())
            events = await read_events(stream, conn, until=h2.events.StreamReset)
            settings = [e for e in events if isinstance(e, h2.events.RemoteSettingsChanged)]
            limit = h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS
            advertised = [
                s.changed_settings[limit].new_value for s in settings if limit in s.changed_settings
            ]
            assert advertised[-1] == 5
            refused = [e for e in events if isinstance(e, h2.events.StreamReset)]
            assert [(e.stream_id, e.error_code) for e in refused] == [
                (11, h2.errors.ErrorCodes.REFUSED_STREAM)
            ]
            agent.release.set()
            done: set[int] = set()
            while len(done) < 5:
                events = await read_events(stream, conn, until=h2.events.StreamEnded)
                assert events, "the connection closed"
                done |= {e.stream_id for e in events if isinstance(e, h2.events.StreamEnded)}
        assert agent.calls == 5


def raw_preface() -> bytes:
    return PREFACE + SettingsFrame(0).serialize()


@pytest.mark.parametrize("flood", ["continuation", "ping", "settings"])
async def test_frame_floods_end_in_goaway(serve_app, flood: str) -> None:  # type: ignore[no-untyped-def]
    with trio.fail_after(TIMEOUT):
        agent = Counting()
        server = await serve_app(agent.router(), max_header_size=16 * 1024)
        data = [raw_preface()]
        if flood == "continuation":
            # CVE-2024-27316: a header block that never ends (no END_HEADERS).
            data.append(HeadersFrame(1, data=b"\x82", flags=[]).serialize())
            junk = b"\x40\x01a\x01b" * 3000  # literal headers, 15 KB a frame
            data += [ContinuationFrame(1, data=junk).serialize() for _ in range(200)]
        elif flood == "ping":
            data += [PingFrame(0, opaque_data=b"%08d" % i).serialize() for i in range(10_000)]
        else:
            data += [SettingsFrame(0).serialize() for _ in range(10_000)]
        conn = client()  # only used to parse what the server sends
        conn.data_to_send()
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        async with stream, trio.open_nursery() as nursery:
            nursery.start_soon(send_quietly, stream, b"".join(data))
            events = await read_events(stream, conn)
        end = goaway(events)
        assert end.error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
        acks = [e for e in events if isinstance(e, h2.events.PingAckReceived)]
        assert len(acks) < 10_000
        assert agent.calls == 0
