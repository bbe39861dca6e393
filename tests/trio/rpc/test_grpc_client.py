"""uamp's own gRPC client (trio + h2) against the gRPC layer, in cleartext and over TLS."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import wrappers_pb2

from tests._support.tls import ThrowawayCA, make_ca
from tests.trio.rpc.test_grpc_server import EchoState, echo_service
from uamp_trio.app import App
from uamp_trio.grpc import GrpcError, StatusCode, mount_service
from uamp_trio.grpc.client import open_channel

Int32Value = wrappers_pb2.Int32Value
StringValue = wrappers_pb2.StringValue


def app() -> App:
    built = App()
    built.mount(lambda host: mount_service(host.router, echo_service(EchoState()), transport="t"))
    return built


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> ThrowawayCA:
    return make_ca(Path(tmp_path_factory.mktemp("ca")))


async def test_streams_statuses_and_bidi(serve_app: Callable[..., Any]) -> None:
    server = await serve_app(app())
    async with open_channel(f"http://127.0.0.1:{server.port}") as channel:
        counted = [
            m.value
            async for m in channel.unary_stream("/test.Echo/Count", Int32Value(value=4), Int32Value)
        ]
        assert counted == [0, 1, 2, 3]
        with pytest.raises(GrpcError) as info:
            async for _ in channel.unary_stream(
                "/test.Echo/Count", Int32Value(value=3), Int32Value
            ):
                pass
        assert info.value.code is StatusCode.ABORTED and info.value.message == "stopped after three"
        # Bidi: each answer read before the next request is sent.
        async with channel.call("/test.Echo/Chat", StringValue) as call:
            for word in ("a", "b", "c"):
                await call.send(StringValue(value=word))
                reply = await call.receive()
                assert reply is not None and reply.value == f"echo:{word}"
            await call.done_sending()
            assert await call.receive() is None
            await call.ended.wait()
        assert call.status == (StatusCode.OK, "")
        # Unknown method: trailers-only UNIMPLEMENTED.
        async with channel.call("/test.Echo/Nope", StringValue) as missing:
            await missing.send(StringValue(value="x"))
            await missing.done_sending()
            await missing.ended.wait()
        assert missing.status is not None and missing.status[0] is StatusCode.UNIMPLEMENTED


async def test_over_tls_with_alpn_h2(serve_app: Callable[..., Any], ca: ThrowawayCA) -> None:
    server = await serve_app(app(), certfile=ca.server.certfile, keyfile=ca.server.keyfile)
    async with open_channel(f"https://127.0.0.1:{server.port}", verify=ca.cafile) as channel:
        big = "q" * 300_000  # several flow-control windows each way
        async with channel.call("/test.Echo/Say", StringValue, timeout=5) as call:
            await call.send(StringValue(value=big))
            await call.done_sending()
            reply = await call.receive()
            await call.ended.wait()
        assert reply is not None and reply.value == big.upper()
        assert call.status == (StatusCode.OK, "")
