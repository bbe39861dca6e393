"""One envelope conversation over all four spec 003 bindings, as spec 003 deploys them: TLS.

A server with a certificate from a CA made in the test and ``http3=True``
hosts a hand-written agent and the demo agent; the same conversation (ask ->
streamed deltas -> a second ask continuing it -> confirm) runs over HTTP +
SSE (HTTP/2 over TLS), the length-prefixed WebSocket (wss), HTTP/3 (QUIC)
and gRPC (``uamp.v1.Agent/Session``), each with uamp's own client, and gives
the same deltas on every one.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from tests._support.tls import ThrowawayCA, make_ca
from tests.trio.rpc.test_agent_grpc import Echo
from uamp_proto.envelope import DeltaType
from uamp_trio.app import create_app
from uamp_trio.client.envelope import (
    EnvelopeClientError,
    EnvelopeHTTPClient,
    EnvelopeSigner,
    Reply,
)
from uamp_trio.client.envelope_bindings import envelope_grpc, envelope_h3, envelope_wss
from uamp_trio.demo import DemoAgent

TIMEOUT = 20


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> ThrowawayCA:
    return make_ca(Path(tmp_path_factory.mktemp("ca")))


@pytest.fixture
async def server(serve_app: Callable[..., Any], ca: ThrowawayCA) -> Any:
    app = create_app([DemoAgent(), Echo()])
    return await serve_app(app, certfile=ca.server.certfile, keyfile=ca.server.keyfile, http3=True)


def trusted(ca: ThrowawayCA) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=ca.cafile)


@asynccontextmanager
async def http2(
    server: Any, ca: ThrowawayCA, signer: EnvelopeSigner, agent: str
) -> AsyncIterator[Any]:
    http = httpx.AsyncClient(verify=trusted(ca), http2=True)
    base = f"{server.url}/agents/{agent}"
    async with http, EnvelopeHTTPClient(base, signer, to=f"urn:uamp:agent:{agent}", http=http) as c:
        yield c


@asynccontextmanager
async def wss(
    server: Any, ca: ThrowawayCA, signer: EnvelopeSigner, agent: str
) -> AsyncIterator[Any]:
    url = server.url.replace("https://", "wss://") + f"/agents/{agent}/uamp/1/ws"
    to = f"urn:uamp:agent:{agent}"
    async with envelope_wss(url, signer, to=to, ssl_context=trusted(ca)) as client:
        yield client


@asynccontextmanager
async def h3(
    server: Any, ca: ThrowawayCA, signer: EnvelopeSigner, agent: str
) -> AsyncIterator[Any]:
    base = f"{server.url}/agents/{agent}"
    async with envelope_h3(base, signer, to=f"urn:uamp:agent:{agent}", verify=ca.cafile) as c:
        yield c


@asynccontextmanager
async def grpc(
    server: Any, ca: ThrowawayCA, signer: EnvelopeSigner, agent: str
) -> AsyncIterator[Any]:
    to = f"urn:uamp:agent:{agent}"
    async with envelope_grpc(server.url, signer, to=to, agent=agent, verify=ca.cafile) as c:
        yield c


BINDINGS = {"http2": http2, "wss": wss, "h3": h3, "grpc": grpc}


def shape(reply: Reply) -> list[tuple[int, str, Any]]:
    return [(d.delta_seq, d.type.value, d.payload) for d in reply.deltas]


async def test_the_same_conversation_gives_the_same_deltas_everywhere(
    server: Any, ca: ThrowawayCA
) -> None:
    shapes = {}
    with trio.fail_after(TIMEOUT):
        for name, binding in BINDINGS.items():
            async with binding(server, ca, EnvelopeSigner.ephemeral(), "echo") as client:
                first = await client.ask("one two three", window=2, ack_every=1)
                second = await client.ask("four", window=2, context=[first.context()])
                await client.reply("confirm", second.envelope)
            assert first.acks == [d.delta_seq for d in first.deltas], name
            shapes[name] = (shape(first), shape(second))
    reference = shapes["http2"]
    assert [t for _, t, _ in reference[0]] == ["chunk", "chunk", "chunk", "done"]
    assert reference[0][-1][2]["text"] == "ONE TWO THREE "
    assert all(found == reference for found in shapes.values()), shapes


@pytest.mark.parametrize("binding", ["h3", "grpc"])
async def test_the_demo_agent_and_a_refusal(server: Any, ca: ThrowawayCA, binding: str) -> None:
    signer = EnvelopeSigner.ephemeral()
    with trio.fail_after(TIMEOUT):
        async with BINDINGS[binding](server, ca, signer, "demo") as client:
            reply = await client.ask("what is 2+3?", window=4)
            assert reply.final is not None and reply.final.type is DeltaType.DONE
            assert reply.text
            # A replayed envelope is refused with 4.03 on this binding too.
            with pytest.raises(EnvelopeClientError) as info:
                await client.exchange(reply.envelope)
    assert info.value.code == "4.03"
