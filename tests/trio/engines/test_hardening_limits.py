"""Connection, body-buffer, response-time and queue caps of the server (issue 14).

Real sockets on 127.0.0.1; HTTP/2 through h2 over a raw socket.
"""

from __future__ import annotations

import contextlib
import json
import re
import ssl

import h2.config
import h2.connection
import h2.errors
import h2.events
import pytest
import trio

from uamp_trio.app import App
from uamp_trio.cli import _LIMIT_FLAGS, build_parser
from uamp_trio.engines.http import Request, Response, SendChunk, StreamingResponse, json_response
from uamp_trio.engines.server import ServerConfig
from uamp_trio.hosting.outbox import Outbox, Quota
from uamp_trio.hosting.router import RouteMeta

TIMEOUT = 20
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
RPC = RouteMeta(transport="test", error_style="jsonrpc")


def make_app(hits: list[str]) -> App:
    """An app with an OpenAI-style ``/hit``, a JSON-RPC-style ``/rpc`` and streams."""
    app = App()

    async def hit(request: Request) -> Response:
        hits.append(request.path)
        return json_response({"size": len(request.body)})

    async def drip(request: Request) -> StreamingResponse:
        # ?gap=SECONDS&count=N: N chunks, GAP apart (count 0: forever).
        params = dict(p.split("=") for p in request.query.split("&") if p)
        gap, count = float(params.get("gap", "0.1")), int(params.get("count", "0"))

        async def produce(send: SendChunk) -> None:
            n = 0
            while count == 0 or n < count:
                await send(b"tick\n")
                n += 1
                await trio.sleep(gap)

        return StreamingResponse(producer=produce)

    async def hang(request: Request) -> Response:
        hits.append(request.path)
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    app.router.add(["GET", "POST"], "/hit", hit)
    app.router.add(["POST"], "/rpc", hit, meta=RPC)
    app.router.add(["GET"], "/drip", drip)
    app.router.add(["GET", "POST"], "/hang", hang)
    app.router.add(["POST"], "/rpc-hang", hang, meta=RPC)
    return app


async def read_response(stream: trio.SocketStream) -> tuple[bytes, bool]:
    """Everything the server sends until it closes (bytes, closed), at most 5 s."""
    parts: list[bytes] = []
    closed = False
    with trio.move_on_after(5):
        with contextlib.suppress(trio.BrokenResourceError):
            while chunk := await stream.receive_some(65536):
                parts.append(chunk)
        closed = True
    return b"".join(parts), closed


async def read_one_response(stream: trio.SocketStream) -> bytes:
    """One whole response with a Content-Length on a connection kept open, at most 5 s."""
    data = b""
    with trio.move_on_after(5):
        while True:
            head, blank, body = data.partition(b"\r\n\r\n")
            length = re.search(rb"\r\ncontent-length: *(\d+)", head.lower())
            if blank and length and len(body) >= int(length.group(1)):
                break
            chunk = await stream.receive_some(65536)
            if not chunk:
                break
            data += chunk
    return data


async def request_once(port: int, data: bytes) -> tuple[bytes, bool]:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(data)
        return await read_response(stream)


GET = b"GET /hit HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"


# --- maximum connections ---------------------------------------------------------


async def test_connections_over_the_limit_get_503_and_are_closed(serve_app) -> None:  # type: ignore[no-untyped-def]
    with trio.fail_after(TIMEOUT):
        hits: list[str] = []
        server = await serve_app(make_app(hits), max_connections=2)
        held = [await trio.open_tcp_stream("127.0.0.1", server.port) for _ in range(2)]
        while server.connection_count < 2:
            await trio.sleep(0.01)
        raw, closed = await request_once(server.port, GET)
        assert raw.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
        assert b"retry-after: 1" in raw.lower()
        assert json.loads(raw.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "server_busy"
        assert closed and hits == []
        # HTTP/2 prior knowledge: GOAWAY with no stream processed.
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        async with stream:
            client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
            client.initiate_connection()
            await stream.send_all(client.data_to_send())
            data, _ = await read_response(stream)
        events = client.receive_data(data)
        goaway = [e for e in events if isinstance(e, h2.events.ConnectionTerminated)]
        assert goaway and goaway[0].last_stream_id == 0
        assert goaway[0].error_code == h2.errors.ErrorCodes.REFUSED_STREAM
        # A slot freed is a slot served.
        await held[0].aclose()
        while server.connection_count > 1:
            await trio.sleep(0.01)
        raw, _ = await request_once(server.port, GET)
        assert raw.startswith(b"HTTP/1.1 200 OK\r\n") and hits == ["/hit"]
        await held[1].aclose()


async def test_tls_connections_over_the_limit_get_the_same_answers(  # type: ignore[no-untyped-def]
    serve_app, tls_files: tuple[str, str]
) -> None:
    certfile, keyfile = tls_files
    with trio.fail_after(TIMEOUT):
        hits: list[str] = []
        server = await serve_app(
            make_app(hits), max_connections=1, certfile=certfile, keyfile=keyfile
        )
        held = await trio.open_tcp_stream("127.0.0.1", server.port)
        while server.connection_count < 1:
            await trio.sleep(0.01)

        async def over_tls(alpn: str, data: bytes) -> bytes:
            ctx = ssl.create_default_context(cafile=certfile)
            ctx.set_alpn_protocols([alpn])
            stream = await trio.open_ssl_over_tcp_stream("127.0.0.1", server.port, ssl_context=ctx)
            async with stream:
                await stream.send_all(data)
                parts = []
                with contextlib.suppress(trio.BrokenResourceError):
                    while chunk := await stream.receive_some(65536):
                        parts.append(chunk)
            return b"".join(parts)

        raw = await over_tls("http/1.1", GET)
        assert raw.startswith(b"HTTP/1.1 503 Service Unavailable\r\n"), raw[:100]
        assert json.loads(raw.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "server_busy"
        client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        client.initiate_connection()
        events = client.receive_data(await over_tls("h2", client.data_to_send()))
        goaway = [e for e in events if isinstance(e, h2.events.ConnectionTerminated)]
        assert goaway and goaway[0].error_code == h2.errors.ErrorCodes.REFUSED_STREAM
        assert hits == []
        await held.aclose()


async def test_a_burst_of_connections_cannot_slip_past_the_limit(serve_app) -> None:  # type: ignore[no-untyped-def]
    # Counted when accepted, not when their tasks first run.
    with trio.fail_after(TIMEOUT):
        release = trio.Event()
        entered: list[str] = []
        app = App()

        async def hang(request: Request) -> Response:
            entered.append(request.path)
            await release.wait()
            return json_response({})

        app.router.add(["GET"], "/hang", hang)
        server = await serve_app(app, max_connections=3)
        answers: list[bytes] = []

        async def one() -> None:
            raw, _ = await request_once(
                server.port, b"GET /hang HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
            )
            answers.append(raw.split(b"\r\n", 1)[0])

        async with trio.open_nursery() as nursery:
            for _ in range(20):
                nursery.start_soon(one)
            while len(answers) < 17:
                await trio.sleep(0.01)
            assert len(entered) == 3
            release.set()
        assert sorted(answers).count(b"HTTP/1.1 503 Service Unavailable") == 17
        assert answers.count(b"HTTP/1.1 200 OK") == 3


async def test_no_connection_limit_by_default(serve_app) -> None:  # type: ignore[no-untyped-def]
    with trio.fail_after(TIMEOUT):
        server = await serve_app(make_app([]))
        assert server.config.max_connections is None
        held = [await trio.open_tcp_stream("127.0.0.1", server.port) for _ in range(50)]
        raw, _ = await request_once(server.port, GET)
        assert raw.startswith(b"HTTP/1.1 200 OK\r\n")
        for stream in held:
            await stream.aclose()


# --- body bytes buffered across connections -------------------------------------------


def post_head(path: str, length: int) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


async def fill_budget(port: int, path: str, sent: int, length: int) -> trio.SocketStream:
    """A connection that sent ``sent`` of a ``length``-byte body and stalls."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(post_head(path, length))
    await stream.send_all(b" " * sent)
    return stream


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
async def test_bodies_over_the_shared_budget_get_503_in_the_route_style(  # type: ignore[no-untyped-def]
    serve_app, chunked: bool
) -> None:
    with trio.fail_after(TIMEOUT):
        hits: list[str] = []
        server = await serve_app(
            make_app(hits), max_buffered_body=1_000_000, max_body_size=4_000_000
        )
        stalled = await fill_budget(server.port, "/hit", 800_000, 900_000)
        while server.body_budget.used < 700_000:
            await trio.sleep(0.01)
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        async with stream:
            if chunked:
                head = b"POST /rpc HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                await stream.send_all(head)
                with contextlib.suppress(trio.BrokenResourceError):
                    for _ in range(10):
                        await stream.send_all(b"%x\r\n%s\r\n" % (100_000, b" " * 100_000))
            else:
                await stream.send_all(post_head("/rpc", 900_000))
                with contextlib.suppress(trio.BrokenResourceError):
                    await stream.send_all(b" " * 500_000)
            raw, closed = await read_response(stream)
        assert raw.startswith(b"HTTP/1.1 503 Service Unavailable\r\n"), raw[:200]
        body = json.loads(raw.split(b"\r\n\r\n", 1)[1])
        # /rpc is a JSON-RPC route: the error comes as JSON-RPC.
        assert body["jsonrpc"] == "2.0" and body["error"]["data"]["code"] == "server_busy"
        assert closed and hits == []
        # The stalled body completes within the budget and is served.
        await stalled.send_all(b" " * 100_000)
        raw = await read_one_response(stalled)
        assert raw.startswith(b"HTTP/1.1 200 OK\r\n") and hits == ["/hit"]
        await stalled.aclose()
        while server.body_budget.used:
            await trio.sleep(0.01)
        # Given back: a new large body fits again.
        async with await trio.open_tcp_stream("127.0.0.1", server.port) as again:
            await again.send_all(post_head("/hit", 900_000) + b" " * 900_000)
            raw = await read_one_response(again)
        assert raw.startswith(b"HTTP/1.1 200 OK\r\n")


async def test_http2_bodies_over_the_shared_budget_get_503(serve_app) -> None:  # type: ignore[no-untyped-def]
    with trio.fail_after(TIMEOUT):
        hits: list[str] = []
        server = await serve_app(make_app(hits), max_buffered_body=300_000, max_body_size=4_000_000)
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        async with stream:
            client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
            client.initiate_connection()
            headers = [
                (":method", "POST"),
                (":path", "/hit"),
                (":scheme", "http"),
                (":authority", "t"),
            ]
            statuses: dict[int, bytes] = {}
            ended: set[int] = set()
            await stream.send_all(client.data_to_send())
            # Four streams, 100 kB each, none ended: the fourth goes over.
            for sid in (1, 3, 5, 7):
                client.send_headers(sid, headers)
            sent = dict.fromkeys((1, 3, 5, 7), 0)
            while any(n < 100_000 for n in sent.values()) and len(statuses) == 0:
                for sid in sent:
                    room = min(client.local_flow_control_window(sid), 16_384, 100_000 - sent[sid])
                    if room > 0:
                        client.send_data(sid, b" " * room)
                        sent[sid] += room
                await stream.send_all(client.data_to_send())
                with trio.move_on_after(0.2):
                    data = await stream.receive_some(65536)
                    for event in client.receive_data(data):
                        if isinstance(event, h2.events.ResponseReceived):
                            statuses[event.stream_id] = dict(event.headers)[b":status"]
                await stream.send_all(client.data_to_send())
            assert list(statuses.values()) == [b"503"], statuses
            refused = next(iter(statuses))
            for sid in sent:
                if sid != refused:
                    client.end_stream(sid)
                    ended.add(sid)
            await stream.send_all(client.data_to_send())
            while len(statuses) < 4:
                data = await stream.receive_some(65536)
                for event in client.receive_data(data):
                    if isinstance(event, h2.events.ResponseReceived):
                        statuses[event.stream_id] = dict(event.headers)[b":status"]
                await stream.send_all(client.data_to_send())
        assert sorted(statuses.values()) == [b"200", b"200", b"200", b"503"]
        assert len(hits) == 3
        while server.body_budget.used:
            await trio.sleep(0.01)


# --- responses that never end -------------------------------------------------------------


async def read_chunked(port: int, path: str) -> tuple[bytes, float]:
    """The raw response to ``GET path`` until the server closes or ends it; and the time."""
    start = trio.current_time()
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(f"GET {path} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
        out = b""
        while not out.endswith(b"0\r\n\r\n"):
            try:
                chunk = await stream.receive_some(65536)
            except trio.BrokenResourceError:
                break
            if not chunk:
                break
            out += chunk
    return out, trio.current_time() - start


@pytest.mark.parametrize(
    ("config", "path"),
    [
        ({"response_idle_timeout": 0.5}, "/drip?gap=60"),
        ({"response_timeout": 1.0}, "/drip?gap=0.05"),
    ],
    ids=["idle", "total"],
)
async def test_http1_response_that_never_ends_is_cut(  # type: ignore[no-untyped-def]
    serve_app, config: dict[str, float], path: str
) -> None:
    with trio.fail_after(TIMEOUT):
        server = await serve_app(make_app([]), **config)
        raw, _ = await read_chunked(server.port, path)
        assert raw.startswith(b"HTTP/1.1 200 OK\r\n")
        assert b"tick" in raw and not raw.endswith(b"0\r\n\r\n")  # cut, not ended
        while server.connection_count:  # and the connection closed (fail_after bounds it)
            await trio.sleep(0.01)


async def test_http1_long_stream_within_the_timeouts_completes(serve_app) -> None:  # type: ignore[no-untyped-def]
    with trio.fail_after(TIMEOUT):
        server = await serve_app(make_app([]), response_idle_timeout=0.5, response_timeout=10)
        raw, elapsed = await read_chunked(server.port, "/drip?gap=0.1&count=20")
        assert raw.endswith(b"0\r\n\r\n") and raw.count(b"tick") == 20
        assert elapsed > 1.5  # longer than the idle timeout, never idle that long


async def h2_stream(port: int, path: str) -> tuple[list[h2.events.Event], float]:
    start = trio.current_time()
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    events: list[h2.events.Event] = []
    async with stream:
        client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        client.initiate_connection()
        client.send_headers(
            1,
            [(":method", "GET"), (":path", path), (":scheme", "http"), (":authority", "t")],
            end_stream=True,
        )
        await stream.send_all(client.data_to_send())
        while not any(isinstance(e, h2.events.StreamEnded | h2.events.StreamReset) for e in events):
            data = await stream.receive_some(65536)
            if not data:
                break
            events += client.receive_data(data)
            await stream.send_all(client.data_to_send())
    return events, trio.current_time() - start


async def test_http2_response_that_never_ends_is_reset(serve_app) -> None:  # type: ignore[no-untyped-def]
    with trio.fail_after(TIMEOUT):
        server = await serve_app(make_app([]), response_idle_timeout=0.5)
        events, _ = await h2_stream(server.port, "/drip?gap=60")
        assert any(isinstance(e, h2.events.DataReceived) for e in events)
        resets = [e for e in events if isinstance(e, h2.events.StreamReset)]
        assert resets and resets[0].error_code == h2.errors.ErrorCodes.CANCEL
        server2 = await serve_app(make_app([]), response_timeout=1.0)
        events, _ = await h2_stream(server2.port, "/drip?gap=0.05")
        assert any(isinstance(e, h2.events.StreamReset) for e in events)
        events, _elapsed = await h2_stream(server2.port, "/drip?gap=0.05&count=10")
        assert any(isinstance(e, h2.events.StreamEnded) for e in events)
        assert not any(isinstance(e, h2.events.StreamReset) for e in events)


# --- handlers that never answer ------------------------------------------------------------


async def read_one(stream: trio.SocketStream) -> bytes:
    """One whole response with a Content-Length (head and body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += await stream.receive_some(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(
        next(
            v
            for k, v in (line.split(b": ", 1) for line in head.split(b"\r\n")[1:])
            if k.lower() == b"content-length"
        )
    )
    while len(body) < length:
        body += await stream.receive_some(65536)
    return head + b"\r\n\r\n" + body


@pytest.mark.parametrize(
    "framing",
    ["content-length", "chunked"],  # the fast path, and h11's
)
async def test_http1_handler_that_never_answers_gets_504_and_the_connection_goes_on(  # type: ignore[no-untyped-def]
    serve_app, framing: str
) -> None:
    with trio.fail_after(TIMEOUT):
        hits: list[str] = []
        server = await serve_app(make_app(hits), response_head_timeout=0.5)
        if framing == "chunked":
            late = b"POST /rpc-hang HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
            late += b"2\r\n{}\r\n0\r\n\r\n"
        else:
            late = b"POST /rpc-hang HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\n{}"
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        async with stream:
            start = trio.current_time()
            await stream.send_all(late)
            raw = await read_one(stream)
            assert raw.startswith(b"HTTP/1.1 504 Gateway Timeout\r\n"), raw[:200]
            assert trio.current_time() - start >= 0.5
            body = json.loads(raw.split(b"\r\n\r\n", 1)[1])
            # /rpc-hang is a JSON-RPC route: the error comes as JSON-RPC.
            assert body["jsonrpc"] == "2.0" and body["error"]["data"]["code"] == "response_timeout"
            # The connection is still usable: the next request is served on it.
            await stream.send_all(b"GET /hit HTTP/1.1\r\nHost: t\r\n\r\n")
            raw = await read_one(stream)
            assert raw.startswith(b"HTTP/1.1 200 OK\r\n"), raw[:200]
        assert hits == ["/rpc-hang", "/hit"]


async def test_http2_handler_that_never_answers_gets_504_and_other_streams_go_on(  # type: ignore[no-untyped-def]
    serve_app,
) -> None:
    with trio.fail_after(TIMEOUT):
        hits: list[str] = []
        server = await serve_app(make_app(hits), response_head_timeout=0.5)
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        client.initiate_connection()
        statuses: dict[int, bytes] = {}
        bodies: dict[int, bytes] = {}

        async def until(sid: int) -> None:
            while sid not in bodies:
                data = await stream.receive_some(65536)
                assert data, "the server closed the connection"
                for event in client.receive_data(data):
                    if isinstance(event, h2.events.ResponseReceived):
                        statuses[event.stream_id] = dict(event.headers)[b":status"]
                    elif isinstance(event, h2.events.DataReceived):
                        bodies[event.stream_id] = bodies.get(event.stream_id, b"") + event.data
                        client.acknowledge_received_data(
                            event.flow_controlled_length, event.stream_id
                        )
                    elif isinstance(event, h2.events.StreamEnded):
                        bodies.setdefault(event.stream_id, b"")
                await stream.send_all(client.data_to_send())

        async with stream:
            for sid, path in ((1, "/hang"), (3, "/hit")):
                headers = [
                    (":method", "GET"),
                    (":path", path),
                    (":scheme", "http"),
                    (":authority", "t"),
                ]
                client.send_headers(sid, headers, end_stream=True)
            await stream.send_all(client.data_to_send())
            await until(3)
            assert statuses[3] == b"200"  # served while stream 1 hangs
            await until(1)
        assert statuses[1] == b"504"
        assert json.loads(bodies[1])["error"]["code"] == "response_timeout"  # OpenAI style
        assert sorted(hits) == ["/hang", "/hit"]


# --- queued outbound events ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        # (quota name or None, offered?) in order; per connection 4, per quota 2.
        ([("a", True), ("a", True), ("a", False)], "a capped at its share"),
        ([("a", True), ("a", True), ("b", True), ("b", True), ("c", False)], "connection full"),
        ([("a", True), ("a", True), (None, True), (None, True), ("b", False)], "unowned fill it"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
async def test_outbox_caps_each_session_and_the_connection(
    steps: list[tuple[str | None, bool]], expected: str
) -> None:
    outbox = Outbox(size=4, max_owed=8, per_quota=2)
    quotas = {name: Quota() for name in "abc"}
    for name, accepted in steps:
        quota = quotas[name] if name is not None else None
        assert outbox.offer(b"x", quota) is accepted, (expected, name)
    taken = await outbox.take()
    assert len(taken) == sum(ok for _, ok in steps)
    assert all(q.queued == 0 for q in quotas.values())
    assert outbox.offer(b"x", quotas["a"]) and outbox.offer(b"x", quotas["a"])


async def test_a_full_session_share_waits_until_taken() -> None:
    with trio.fail_after(TIMEOUT):
        outbox = Outbox(size=10, max_owed=8, per_quota=1)
        quota = Quota()
        await outbox.put(b"1", quota)
        done = trio.Event()

        async def second() -> None:
            await outbox.put(b"2", quota)
            done.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(second)
            await trio.sleep(0.05)
            assert not done.is_set() and len(outbox) == 1
            assert await outbox.take() == [b"1"]
            await done.wait()
        assert await outbox.take() == [b"2"]


# --- configuration -------------------------------------------------------------------------


def test_every_limit_flag_sets_its_server_config_field() -> None:
    values = {
        "--limit-concurrency": "7",
        "--max-buffered-body": "12345",
        "--response-timeout": "inf",
        "--response-idle-timeout": "9.5",
        "--response-head-timeout": "7.5",
        "--max-queued-events": "16",
        "--max-session-queued-events": "4",
        "--max-json-values": "321",
        "--h2-max-concurrent-streams": "11",
        "--h2-max-resets": "12",
        "--h2-max-control-frames": "13",
        "--h2-flood-window": "2.5",
        "--header-timeout": "3",
        "--body-timeout": "4",
        "--idle-timeout": "5",
        "--max-header-size": "2048",
        "--acp-max-sessions": "21",
        "--acp-max-session-bytes": "22",
        "--acp-session-idle-timeout": "23.5",
        "--a2a-max-push-configs": "24",
        "--a2a-max-push-config-bytes": "25",
        "--sse-max-sessions": "26",
        "--sse-session-idle-timeout": "27.5",
        "--chat-max-message-bytes": "28",
        "--chat-room-messages": "29",
        "--chat-principal-messages": "30",
        "--chat-room-idle-timeout": "31.5",
        "--on-busy": "Rollback",
        "--busy-max-queued": "32",
        "--busy-max-queued-per-principal": "33",
        "--max-response-output-bytes": "34",
        "--max-history-bytes-per-principal": "35",
    }
    assert {flag for flag, *_ in _LIMIT_FLAGS} == set(values)
    argv = ["serve"] + [part for flag, value in values.items() for part in (flag, value)]
    args = build_parser().parse_args(argv)
    fields = {field: getattr(args, field) for _, field, _, _ in _LIMIT_FLAGS}
    config = ServerConfig(**fields)
    assert config.max_connections == 7 and config.max_buffered_body == 12345
    assert config.response_timeout == float("inf") and config.response_idle_timeout == 9.5
    assert config.response_head_timeout == 7.5
    assert (config.max_queued_events, config.max_session_queued_events) == (16, 4)
    assert (config.h2_max_concurrent_streams, config.h2_max_resets) == (11, 12)
    assert (config.h2_max_control_frames, config.h2_flood_window) == (13, 2.5)
    assert (config.header_timeout, config.body_timeout, config.idle_timeout) == (3, 4, 5)
    assert config.max_header_size == 2048 and config.max_json_values == 321
    assert (config.acp_max_sessions, config.acp_max_session_bytes) == (21, 22)
    assert (config.acp_session_idle_timeout, config.a2a_max_push_configs) == (23.5, 24)
    assert (config.a2a_max_push_config_bytes, config.sse_max_sessions) == (25, 26)
    assert config.sse_session_idle_timeout == 27.5
    assert config.max_response_output_bytes == 34
    assert config.max_history_bytes_per_principal == 35
    assert (config.chat_max_message_bytes, config.chat_room_messages) == (28, 29)
    assert (config.chat_principal_messages, config.chat_room_idle_timeout) == (30, 31.5)
    assert (config.on_busy, config.busy_max_queued, config.busy_max_queued_per_principal) == (
        "rollback",
        32,
        33,
    )
    defaults = build_parser().parse_args(["serve"])
    assert (
        ServerConfig(**{f: getattr(defaults, f) for _, f, _, _ in _LIMIT_FLAGS}) == ServerConfig()
    )


@pytest.mark.parametrize(
    "field",
    [
        "max_connections",
        "max_buffered_body",
        "response_timeout",
        "response_idle_timeout",
        "response_head_timeout",
        "websocket_max_message_size",
        "max_queued_events",
        "max_session_queued_events",
        "max_history_bytes_per_principal",
    ],
)
def test_limits_must_be_positive(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        ServerConfig(**{field: 0})


def test_on_busy_takes_the_four_policies_only(capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("reject", "enqueue", "interrupt", "rollback"):
        assert build_parser().parse_args(["serve", "--on-busy", name]).on_busy == name
    assert build_parser().parse_args(["serve"]).on_busy == "enqueue"
    with pytest.raises(SystemExit) as bad:
        build_parser().parse_args(["serve", "--on-busy", "later"])
    assert bad.value.code == 2
    assert "--on-busy" in capsys.readouterr().err
