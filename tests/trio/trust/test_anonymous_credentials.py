"""``allow_anonymous`` admits callers that present no credential, never a failing one.

A server with a JWT issuer and ``allow_anonymous``: a call without any
``Authorization`` is served as ``anonymous``; one whose ``Authorization``
holds no usable bearer token (``Basic``, a bare ``Bearer``, ``Token``) is
refused 401 in its route's error style, as a bad token is, on every route
of the app's table over HTTP/1.1 and HTTP/2, on every WebSocket upgrade
(the UAMP one included) and over gRPC (grpcio); the agent never runs for it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import trio
import trio_websocket

from tests._support.refusals import assert_unauthorized
from uamp_proto.principal import ANONYMOUS
from uamp_trio import create_app
from uamp_trio.app import App

from .agents import CountingAgent
from .issuer import Issuer
from .test_gate import concrete

#: What clients send that is a credential but no bearer token.
PRESENTED = ["Basic eDp5", "Bearer", "Token x", "bearer"]
CHALLENGE = 'Bearer realm="uamp", error="invalid_token"'


@pytest.fixture
def open_app(agent: CountingAgent, tmp_path: Path) -> App:
    return create_app([agent], authenticator=Issuer().authenticator(tmp_path), allow_anonymous=True)


@pytest.mark.parametrize("http2", [False, True], ids=["http1", "http2"])
async def test_a_presented_credential_that_fails_is_401_on_every_http_route(
    open_app: App, serve_app: Any, agent: CountingAgent, http2: bool
) -> None:
    server = await serve_app(open_app)
    client = httpx.AsyncClient(base_url=server.url, http1=not http2, http2=http2)
    checked = 0
    with trio.fail_after(60):
        async with client:
            for route in open_app.router.routes:
                if route.meta.public or route.meta.envelope:
                    continue  # envelopes carry their own credential
                extra = {"anthropic-version": "2023-06-01"} if route.when else {}
                for method in sorted(route.methods):
                    for credential in PRESENTED:
                        response = await client.request(
                            method,
                            concrete(route.pattern),
                            content=b"{}",
                            headers={**extra, "authorization": credential},
                        )
                        assert response.http_version == ("HTTP/2" if http2 else "HTTP/1.1")
                        assert_unauthorized(
                            route.meta.error_style,
                            response.status_code,
                            response.headers,
                            response.content,
                            challenge=CHALLENGE,
                            message=None,
                        )
                        checked += 1
            # No credential at all: anonymous, served.
            body = {"model": "demo", "messages": [{"role": "user", "content": "hi"}]}
            served = await client.post("/v1/chat/completions", json=body)
    assert checked > 50
    assert served.status_code == 200
    assert [p.id for p in agent.runs] == [ANONYMOUS.id]


async def test_a_presented_credential_that_fails_is_401_on_every_websocket_upgrade(
    open_app: App, serve_app: Any, agent: CountingAgent
) -> None:
    server = await serve_app(open_app)
    base = f"ws://127.0.0.1:{server.port}"
    routes = [r for r in open_app.router.websocket_routes if not r.meta.envelope]
    assert any(r.meta.transport == "uamp_ws" for r in routes)
    with trio.fail_after(60):
        for route in routes:
            for credential in PRESENTED:
                with pytest.raises(trio_websocket.ConnectionRejected) as info:
                    async with trio_websocket.open_websocket_url(
                        base + concrete(route.pattern),
                        extra_headers=[("authorization", credential)],
                    ):
                        pass
                rejected = info.value
                assert rejected.body is not None
                headers = [(k.decode(), v.decode()) for k, v in rejected.headers]
                assert_unauthorized(
                    route.meta.error_style,
                    rejected.status_code,
                    headers,
                    rejected.body,
                    challenge=CHALLENGE,
                    message=None,
                )
        # Without one the upgrade is anonymous and served.
        async with trio_websocket.open_websocket_url(base + "/agents/demo/realtime") as ws:
            assert b"session.created" in (await ws.get_message()).encode()
    assert agent.runs == []


def test_a_presented_credential_that_fails_is_unauthenticated_over_grpc(
    agent: CountingAgent, tmp_path: Path, thread_server: Callable[..., Any]
) -> None:
    app = create_app([agent], authenticator=Issuer().authenticator(tmp_path), allow_anonymous=True)
    server = thread_server(app)
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        send = channel.unary_unary(
            "/lf.a2a.v1.A2AService/SendMessage",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        for credential in PRESENTED:
            with pytest.raises(grpc.RpcError) as info:
                send(b"", metadata=[("authorization", credential)], timeout=10)
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED, credential
        # Without one: past the gate (an empty request is then the service's to refuse).
        with pytest.raises(grpc.RpcError) as anonymous:
            send(b"", timeout=10)
    assert anonymous.value.code() != grpc.StatusCode.UNAUTHENTICATED
    assert agent.runs == []
