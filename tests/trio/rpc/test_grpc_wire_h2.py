"""gRPC calls as frames: what the server sends, checked with h2 as the client.

grpcio hides the framing; these tests look at it: an error before any message
is one HEADERS frame that ends the stream (trailers-only), a success is
HEADERS, DATA, then trailers; and the head checks (content type, encoding,
timeout, HTTP version) answer as gRPC's HTTP/2 protocol says.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import h2.config
import h2.connection
import h2.events
import httpx
import pytest
import trio
from google.protobuf import wrappers_pb2

from uamp_proto.grpc import encode_message
from uamp_trio.app import App
from uamp_trio.grpc import Context, GrpcService, mount_service


def app() -> App:
    service = GrpcService("test.Echo")

    @service.unary("Say", wrappers_pb2.StringValue, wrappers_pb2.StringValue)
    async def say(request: Any, context: Context) -> Any:
        return wrappers_pb2.StringValue(value=request.value + "!")

    built = App()
    built.mount(lambda host: mount_service(host.router, service, transport="test"))
    return built


async def call(
    port: int, path: str, body: bytes, extra: list[tuple[str, str]] | None = None
) -> list[h2.events.Event]:
    """One request over a fresh HTTP/2 connection; the events of its stream until it ends."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    headers = [
        (":method", "POST"),
        (":path", path),
        (":scheme", "http"),
        (":authority", "t"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ]
    if extra is not None:
        names = {n for n, _ in extra}
        headers = [h for h in headers if h[0] not in names] + extra
    conn.send_headers(1, headers, end_stream=False)
    conn.send_data(1, body, end_stream=True)
    await stream.send_all(conn.data_to_send())
    events: list[h2.events.Event] = []
    with trio.fail_after(5):
        while not any(isinstance(e, h2.events.StreamEnded) for e in events):
            data = await stream.receive_some(65536)
            assert data, "the server closed before the stream ended"
            events += [e for e in conn.receive_data(data) if getattr(e, "stream_id", 0) == 1]
            await stream.send_all(conn.data_to_send())
    await stream.aclose()
    return events


def frames(events: list[h2.events.Event]) -> list[str]:
    kinds = {
        h2.events.ResponseReceived: "headers",
        h2.events.DataReceived: "data",
        h2.events.TrailersReceived: "trailers",
    }
    return [kinds[type(e)] for e in events if type(e) in kinds]


def head(events: list[h2.events.Event]) -> dict[str, str]:
    first = next(e for e in events if isinstance(e, h2.events.ResponseReceived))
    return {k.decode(): v.decode() for k, v in first.headers}


async def test_success_is_headers_data_trailers(serve_app: Callable[..., Any]) -> None:
    server = await serve_app(app())
    payload = wrappers_pb2.StringValue(value="hi").SerializeToString()
    events = await call(server.port, "/test.Echo/Say", encode_message(payload))
    assert frames(events) == ["headers", "data", "trailers"]
    body = b"".join(e.data for e in events if isinstance(e, h2.events.DataReceived))
    assert wrappers_pb2.StringValue.FromString(body[5:]).value == "hi!"
    trailers = next(e for e in events if isinstance(e, h2.events.TrailersReceived))
    assert (b"grpc-status", b"0") in trailers.headers


HEAD_CASES = [
    # (name, path, extra headers, body, (http status, grpc-status or None))
    ("unknown method", "/test.Echo/Nope", None, encode_message(b""), ("200", "12")),
    ("empty unary call", "/test.Echo/Say", None, b"", ("200", "13")),
    (
        "two messages to a unary call",
        "/test.Echo/Say",
        None,
        encode_message(b"") * 2,
        ("200", "13"),
    ),
    ("cut message", "/test.Echo/Say", None, encode_message(b"abc")[:6], ("200", "13")),
    ("compressed, no encoding", "/test.Echo/Say", None, b"\x01\x00\x00\x00\x00", ("200", "13")),
    (
        "unknown encoding",
        "/test.Echo/Say",
        [("grpc-encoding", "snappy")],
        encode_message(b""),
        ("200", "12"),
    ),
    (
        "bad timeout",
        "/test.Echo/Say",
        [("grpc-timeout", "soon")],
        encode_message(b""),
        ("200", "3"),
    ),
    ("not a protobuf message", "/test.Echo/Say", None, encode_message(b"\xff\xff"), ("200", "13")),
    ("not gRPC", "/test.Echo/Say", [("content-type", "application/json")], b"{}", ("415", None)),
]


@pytest.mark.parametrize(
    ("path", "extra", "body", "expected"),
    [c[1:] for c in HEAD_CASES],
    ids=[c[0] for c in HEAD_CASES],
)
async def test_refusals_before_any_message_are_trailers_only(
    serve_app: Callable[..., Any],
    path: str,
    extra: list[tuple[str, str]] | None,
    body: bytes,
    expected: tuple[str, str | None],
) -> None:
    server = await serve_app(app())
    events = await call(server.port, path, body, extra)
    status, grpc_status = expected
    assert head(events)[":status"] == status
    if grpc_status is None:
        return
    # One HEADERS frame, ending the stream, holding the status: trailers-only.
    assert frames(events) == ["headers"]
    assert head(events)["grpc-status"] == grpc_status
    assert head(events)["content-type"] == "application/grpc"


async def test_grpc_over_http1_is_refused(serve_app: Callable[..., Any]) -> None:
    server = await serve_app(app())
    async with httpx.AsyncClient() as client:
        reply = await client.post(
            f"http://127.0.0.1:{server.port}/test.Echo/Say",
            content=encode_message(b""),
            headers={"content-type": "application/grpc"},
        )
    assert reply.status_code == 505
