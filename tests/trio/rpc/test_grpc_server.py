"""The gRPC layer against grpcio's own client, on a real server on 127.0.0.1.

A test service (``test.Echo``) is mounted on an :class:`~uamp_trio.App` with
protobuf's well-known ``StringValue``/``Int32Value`` as messages; grpcio's
synchronous client calls it over cleartext HTTP/2 (prior knowledge, as
``grpc.insecure_channel`` does).
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import grpc
import pytest
import trio
from google.protobuf import wrappers_pb2

from uamp_trio.app import App
from uamp_trio.grpc import Context, GrpcError, GrpcService, StatusCode, mount_service
from uamp_trio.hosting.middleware import Call, Next, Refusal, Reply

StringValue = wrappers_pb2.StringValue
Int32Value = wrappers_pb2.Int32Value


class EchoState:
    """What the handlers saw, for the tests to read from their thread."""

    def __init__(self) -> None:
        self.cancelled = threading.Event()
        self.started = threading.Event()
        self.metadata: dict[str, str | None] = {}


def echo_service(state: EchoState) -> GrpcService:
    service = GrpcService("test.Echo")

    @service.unary("Say", StringValue, StringValue)
    async def say(request: Any, context: Context) -> Any:
        state.metadata["x-tag"] = context.metadata.get("x-tag")
        if request.value == "fail":
            raise GrpcError(StatusCode.FAILED_PRECONDITION, "cannot say «fail» 100% of the time")
        if request.value == "crash":
            raise RuntimeError("secret detail")
        context.trailers.append(("x-said", str(len(request.value))))
        return StringValue(value=request.value.upper())

    @service.server_stream("Count", Int32Value, Int32Value)
    async def count(request: Any, context: Context, send: Callable[[Any], Any]) -> None:
        for i in range(request.value):
            await send(Int32Value(value=i))
        if request.value == 3:
            raise GrpcError(StatusCode.ABORTED, "stopped after three")

    @service.client_stream("Sum", Int32Value, Int32Value)
    async def total(requests: AsyncIterator[Any], context: Context) -> Any:
        return Int32Value(value=sum([r.value async for r in requests]))

    @service.bidi("Chat", StringValue, StringValue)
    async def chat(requests: AsyncIterator[Any], context: Context, send: Any) -> None:
        async for r in requests:
            await send(StringValue(value=f"echo:{r.value}"))

    @service.unary("Sleep", Int32Value, Int32Value)
    async def sleep(request: Any, context: Context) -> Any:
        state.started.set()
        try:
            await trio.sleep(request.value / 1000)
        except trio.Cancelled:
            state.cancelled.set()
            raise
        return Int32Value(value=request.value)

    @service.server_stream("Ticks", Int32Value, Int32Value)
    async def ticks(request: Any, context: Context, send: Any) -> None:
        try:
            for i in range(10_000):
                await send(Int32Value(value=i))
                state.started.set()
                await trio.sleep(0.01)
        except trio.Cancelled:
            state.cancelled.set()
            raise

    return service


MAX_MESSAGE = 2 * 1024 * 1024


@pytest.fixture
def echo(thread_server: Callable[..., Any]) -> Iterator[tuple[grpc.Channel, EchoState]]:
    state = EchoState()

    def transport(host: Any) -> None:
        mount_service(host.router, echo_service(state), transport="test", max_message=MAX_MESSAGE)

    app = App()
    app.mount(transport)
    server = thread_server(app)
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        yield channel, state


def stub(channel: grpc.Channel, shape: str, name: str, kind: Any) -> Any:
    """grpcio's callable for ``test.Echo/name``; ``shape``: ``unary_unary``, ``unary_stream``..."""
    make = getattr(channel, shape)
    return make(
        f"/test.Echo/{name}",
        request_serializer=kind.SerializeToString,
        response_deserializer=kind.FromString,
    )


def unary(channel: grpc.Channel, name: str, kind: Any = StringValue) -> Any:
    return stub(channel, "unary_unary", name, kind)


def test_unary_call_with_metadata_and_trailers(echo: tuple[grpc.Channel, EchoState]) -> None:
    channel, state = echo
    reply, call = unary(channel, "Say").with_call(
        StringValue(value="hello"), metadata=[("x-tag", "t1")], timeout=5
    )
    assert reply.value == "HELLO"
    assert call.code() == grpc.StatusCode.OK
    assert ("x-said", "5") in call.trailing_metadata()
    assert state.metadata["x-tag"] == "t1"


def test_handler_error_is_its_status_and_message(echo: tuple[grpc.Channel, EchoState]) -> None:
    channel, _ = echo
    with pytest.raises(grpc.RpcError) as info:
        unary(channel, "Say")(StringValue(value="fail"), timeout=5)
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    # Non-ASCII and '%' survive the percent-encoding of grpc-message.
    assert info.value.details() == "cannot say «fail» 100% of the time"


def test_unexpected_failure_is_internal_without_detail(
    echo: tuple[grpc.Channel, EchoState],
) -> None:
    channel, _ = echo
    with pytest.raises(grpc.RpcError) as info:
        unary(channel, "Say")(StringValue(value="crash"), timeout=5)
    assert info.value.code() == grpc.StatusCode.INTERNAL
    assert "secret" not in (info.value.details() or "")


def test_server_streaming(echo: tuple[grpc.Channel, EchoState]) -> None:
    channel, _ = echo
    stream = stub(channel, "unary_stream", "Count", Int32Value)
    assert [m.value for m in stream(Int32Value(value=5), timeout=5)] == [0, 1, 2, 3, 4]
    # An error after some messages: the messages arrive, then the status.
    got: list[int] = []
    with pytest.raises(grpc.RpcError) as info:
        for m in stream(Int32Value(value=3), timeout=5):
            got.append(m.value)
    assert got == [0, 1, 2]
    assert info.value.code() == grpc.StatusCode.ABORTED
    assert info.value.details() == "stopped after three"


def test_client_streaming(echo: tuple[grpc.Channel, EchoState]) -> None:
    channel, _ = echo
    total = stub(channel, "stream_unary", "Sum", Int32Value)
    assert total(iter([Int32Value(value=v) for v in range(1, 101)]), timeout=5).value == 5050
    assert total(iter([]), timeout=5).value == 0


def test_bidi_streaming_interleaves(echo: tuple[grpc.Channel, EchoState]) -> None:
    channel, _ = echo
    chat = stub(channel, "stream_stream", "Chat", StringValue)
    # Each request is sent only after the answer to the previous one came
    # back: the server must answer while the request stream is still open.
    answers: list[str] = []
    turn = threading.Semaphore(1)

    def requests() -> Iterator[Any]:
        for i in range(5):
            assert turn.acquire(timeout=5), "no answer while the request stream was open"
            yield StringValue(value=str(i))

    for reply in chat(requests(), timeout=10):
        answers.append(reply.value)
        turn.release()
    assert answers == [f"echo:{i}" for i in range(5)]


def test_deadline_exceeded(echo: tuple[grpc.Channel, EchoState]) -> None:
    channel, state = echo
    began = time.monotonic()
    with pytest.raises(grpc.RpcError) as info:
        unary(channel, "Sleep", Int32Value)(Int32Value(value=10_000), timeout=0.3)
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert time.monotonic() - began < 5
    # The server's own deadline (from grpc-timeout) cancelled the handler.
    assert state.cancelled.wait(5)


def test_unknown_method_is_unimplemented(echo: tuple[grpc.Channel, EchoState]) -> None:
    channel, _ = echo
    for path in ("/test.Echo/Nope", "/no.Such/Service", "/v1/chat/completions"):
        call = channel.unary_unary(path, request_serializer=None, response_deserializer=None)
        with pytest.raises(grpc.RpcError) as info:
            call(b"", timeout=5)
        assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED, path


def test_oversize_message_is_resource_exhausted(echo: tuple[grpc.Channel, EchoState]) -> None:
    channel, _ = echo
    with pytest.raises(grpc.RpcError) as info:
        unary(channel, "Say")(StringValue(value="x" * (MAX_MESSAGE + 1)), timeout=5)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    # The connection and the server are fine after it.
    assert unary(channel, "Say")(StringValue(value="ok"), timeout=5).value == "OK"


def test_messages_larger_than_the_flow_control_window(
    echo: tuple[grpc.Channel, EchoState],
) -> None:
    # 1.5 MB and 300 kB messages: many stream windows each, given back as the
    # handler reads, in both directions and on a stream that stays open.
    channel, _ = echo
    big = "a" * 1_500_000
    assert unary(channel, "Say")(StringValue(value=big), timeout=10).value == big.upper()
    chat = stub(channel, "stream_stream", "Chat", StringValue)
    sent = [StringValue(value=str(i) * 300_000) for i in range(4)]
    assert [r.value for r in chat(iter(sent), timeout=10)] == [f"echo:{m.value}" for m in sent]


def test_client_cancel_cancels_the_handler(echo: tuple[grpc.Channel, EchoState]) -> None:
    channel, state = echo
    stream = stub(channel, "unary_stream", "Ticks", Int32Value)
    call = stream(Int32Value(value=0), timeout=30)
    assert next(call).value == 0
    assert state.started.wait(5)
    call.cancel()  # RST_STREAM CANCEL
    assert state.cancelled.wait(5), "the handler was not cancelled"
    assert call.code() == grpc.StatusCode.CANCELLED


def test_gzip_requests_are_inflated(echo: tuple[grpc.Channel, EchoState]) -> None:
    channel, _ = echo
    reply = unary(channel, "Say")(
        StringValue(value="squeeze " * 100), timeout=5, compression=grpc.Compression.Gzip
    )
    assert reply.value == "SQUEEZE " * 100


def test_refusal_by_middleware_is_a_grpc_status(thread_server: Callable[..., Any]) -> None:
    async def gate(call: Call, call_next: Next) -> Reply:
        if call.request.headers.get("authorization") != "Bearer good":
            raise Refusal(401, "A bearer token is required.", code="unauthorized")
        return await call_next(call)

    def transport(host: Any) -> None:
        mount_service(host.router, echo_service(EchoState()), transport="test")

    app = App(middleware=[gate])
    app.mount(transport)
    server = thread_server(app)
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        with pytest.raises(grpc.RpcError) as info:
            unary(channel, "Say")(StringValue(value="hi"), timeout=5)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert info.value.details() == "A bearer token is required."
        reply = unary(channel, "Say")(
            StringValue(value="hi"), metadata=[("authorization", "Bearer good")], timeout=5
        )
        assert reply.value == "HI"
