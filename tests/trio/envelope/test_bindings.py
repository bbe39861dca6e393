"""Spec 003 over real sockets: POST /v1/messages + SSE, and the length-prefixed WebSocket."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import h2.config
import h2.connection
import h2.events
import h11
import httpx
import orjson
import pytest
import trio
import trio_websocket

from tests._support.agents import TestAgent, Words
from tests._support.envelopes import cap_token, capability_issuer, envelope, p256
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.adapters.envelope import prefix_frame, read_error, split_frames
from uamp_proto.envelope import (
    DeltaType,
    Envelope,
    decode_delta,
    decode_envelope,
    encode_envelope,
)
from uamp_proto.jose import JWKS
from uamp_proto.responder import Emit, TurnRequest
from uamp_proto.signing import verify_envelope
from uamp_trio.app import create_app
from uamp_trio.client.envelope import (
    EnvelopeClientError,
    EnvelopeHTTPClient,
    EnvelopeSigner,
    Reply,
    envelope_ws,
)
from uamp_trio.demo import DemoAgent
from uamp_trio.envelope.service import EnvelopeLimits

TIMEOUT = 15


class Echo(TestAgent):
    """A hand-written agent: the question, upper-cased, a word per delta."""

    name = "echo"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        for word in request.messages[-1].text.upper().split():
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text=word + " ")))


# --- bindings, parametrised so others can add theirs -------------------------------

Binding = Callable[[Any, EnvelopeSigner, str], Any]


@asynccontextmanager
async def http_binding(server: Any, signer: EnvelopeSigner, agent: str) -> AsyncIterator[Any]:
    base = f"{server.url}/agents/{agent}"
    async with EnvelopeHTTPClient(base, signer, to=f"urn:uamp:agent:{agent}") as client:
        yield client


@asynccontextmanager
async def ws_binding(server: Any, signer: EnvelopeSigner, agent: str) -> AsyncIterator[Any]:
    url = server.url.replace("http://", "ws://") + f"/agents/{agent}/uamp/1/ws"
    async with envelope_ws(url, signer, to=f"urn:uamp:agent:{agent}") as client:
        yield client


#: Every binding the cross-binding tests run over: ``name -> context manager``.
BINDINGS: dict[str, Callable[..., Any]] = {"http": http_binding, "ws": ws_binding}


@pytest.fixture
async def server(serve_app: Callable[..., Awaitable[Any]]) -> Any:
    app = create_app([DemoAgent(), Echo(), Words("slow", *["w "] * 40, pause=0.05)])
    return await serve_app(app)


def _shape(reply: Reply) -> list[tuple[int, str, Any]]:
    return [(d.delta_seq, d.type.value, d.payload) for d in reply.deltas]


@pytest.mark.parametrize("binding", sorted(BINDINGS))
@pytest.mark.parametrize("agent", ["demo", "echo"])
async def test_ask_streams_and_confirm_retires(server: Any, binding: str, agent: str) -> None:
    with trio.fail_after(TIMEOUT):
        async with BINDINGS[binding](server, EnvelopeSigner.ephemeral(), agent) as client:
            reply = await client.ask("hello envelope world", window=2, ack_every=1)
            assert reply.final is not None and reply.final.type is DeltaType.DONE
            assert [d.delta_seq for d in reply.deltas] == list(range(len(reply.deltas)))
            assert reply.acks == [d.delta_seq for d in reply.deltas]
            assert reply.final.payload["text"] == reply.text
            await client.reply("confirm", reply.envelope)
        if agent == "echo":
            assert reply.text == "HELLO ENVELOPE WORLD "


async def test_every_binding_gives_the_same_deltas(server: Any) -> None:
    shapes = {}
    with trio.fail_after(TIMEOUT):
        for name, binding in sorted(BINDINGS.items()):
            async with binding(server, EnvelopeSigner.ephemeral(), "echo") as client:
                first = await client.ask("one two three", window=3)
                second = await client.ask("four", window=3, context=[first.context()])
                await client.reply("confirm", second.envelope)
            shapes[name] = (_shape(first), _shape(second))
    reference = next(iter(shapes.values()))
    assert len(reference[0]) == 4  # three chunks and done
    assert all(shape == reference for shape in shapes.values()), shapes


async def test_the_http_answer_is_202_with_a_location(server: Any) -> None:
    env = envelope(to="urn:uamp:agent:echo")
    async with httpx.AsyncClient(base_url=server.url) as http:
        r = await http.post(
            "/agents/echo/v1/messages",
            content=encode_envelope(env),
            headers={"content-type": "application/uamp+json;v=1"},
        )
        assert r.status_code == 202
        assert r.headers["location"] == f"/agents/echo/v1/stream/{env.id}"
        assert r.json()["state"] == "in_progress"
        async with http.stream("GET", r.headers["location"]) as s:
            text = (await s.aread()).decode()
    frames = [decode_delta(line[6:]) for line in text.splitlines() if line.startswith("data: ")]
    assert frames[-1].type is DeltaType.DONE and frames[0].delta_seq == 0
    assert f"id: {frames[-1].delta_seq}" in text


async def test_root_paths_route_by_to_and_jwks_holds_the_envelope_key(server: Any) -> None:
    async with EnvelopeHTTPClient(
        server.url, EnvelopeSigner.ephemeral(), to="urn:uamp:agent:echo"
    ) as c:
        reply = await c.ask("root path")
    assert reply.text == "ROOT PATH "
    async with httpx.AsyncClient(base_url=server.url) as http:
        r = await http.post(
            "/v1/messages",
            content=encode_envelope(envelope("confirm")),
            headers={"content-type": "application/uamp+json"},
        )
        keys = JWKS.parse((await http.get("/.well-known/jwks.json")).content)
    error = decode_envelope(r.content)
    verify_envelope(error, keys)  # the error envelope is signed with the published key
    assert read_error(error)[0] == "4.00"


async def test_cancel_over_the_websocket_ends_with_a_cancel_frame(server: Any) -> None:
    signer = EnvelopeSigner.ephemeral()
    url = server.url.replace("http://", "ws://") + "/agents/slow/uamp/1/ws"
    with trio.fail_after(TIMEOUT):
        async with envelope_ws(url, signer, to="urn:uamp:agent:slow") as client:
            ask = signer.make("ask", "go", to="urn:uamp:agent:slow")
            async with trio.open_nursery() as nursery:
                got: list[Reply] = []

                async def run() -> None:
                    got.append(await client.exchange(ask))

                nursery.start_soon(run)
                await trio.sleep(0.2)
                await client.reply("cancel", ask)
    assert got[0].final is not None and got[0].final.type is DeltaType.CANCEL


# --- attacks, on both bindings -----------------------------------------------------


async def _post(server: Any, body: bytes, headers: dict[str, str] | None = None) -> httpx.Response:
    async with httpx.AsyncClient(base_url=server.url) as http:
        return await http.post(
            "/agents/echo/v1/messages",
            content=body,
            headers={"content-type": "application/uamp+json;v=1", **(headers or {})},
        )


async def _ws_exchange(server: Any, frames: list[bytes]) -> tuple[list[str], int | None]:
    """Send raw frames; the error codes received and the close code (if it closed)."""
    url = server.url.replace("http://", "ws://") + "/agents/echo/uamp/1/ws"
    codes: list[str] = []
    async with trio_websocket.open_websocket_url(url) as ws:
        for frame in frames:
            await ws.send_message(frame)
        try:
            with trio.move_on_after(1.5):
                while True:
                    message = await ws.get_message()
                    assert isinstance(message, bytes)
                    for part in split_frames(message, 1 << 24):
                        probe = orjson.loads(part)
                        if "intent" in probe:
                            codes.append(read_error(decode_envelope(part))[0])
        except trio_websocket.ConnectionClosed as closed:
            return codes, closed.reason.code
    return codes, None


def _tampered() -> bytes:
    return encode_envelope(envelope(text="pay 1")).replace(b"pay 1", b"pay 9")


def _replayed() -> Envelope:
    return envelope(to="urn:uamp:agent:echo")


ATTACKS: dict[str, tuple[Callable[[], list[bytes]], str, int, int | None]] = {
    # name: (frames to send, code, HTTP status, WebSocket close code)
    "bad-signature": (lambda: [_tampered()], "4.01", 401, 4401),
    "unsigned": (lambda: [encode_envelope(envelope(sign=False))], "4.01", 401, 4401),
    "stale-ts": (lambda: [encode_envelope(envelope(at=time.time() - 3600))], "4.01", 401, 4401),
    "not-an-envelope": (lambda: [b'{"intent": "ask"}'], "4.00", 400, None),
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
async def test_attacks_over_http(server: Any, attack: str) -> None:
    frames, code, status, _ = ATTACKS[attack]
    with trio.fail_after(TIMEOUT):
        r = await _post(server, frames()[0])
    assert r.status_code == status
    assert read_error(decode_envelope(r.content))[0] == code


@pytest.mark.parametrize("attack", sorted(ATTACKS))
async def test_attacks_over_the_websocket(server: Any, attack: str) -> None:
    frames, code, _, close = ATTACKS[attack]
    with trio.fail_after(TIMEOUT):
        codes, closed = await _ws_exchange(server, [prefix_frame(f) for f in frames()])
    assert codes[:1] == [code]
    assert closed == close


async def test_replay_is_4_03_on_both_bindings(server: Any) -> None:
    with trio.fail_after(TIMEOUT):
        env = encode_envelope(_replayed())
        assert (await _post(server, env)).status_code == 202
        r = await _post(server, env)
        assert (r.status_code, read_error(decode_envelope(r.content))[0]) == (403, "4.03")
        codes, closed = await _ws_exchange(server, [prefix_frame(env)])
    assert (codes, closed) == (["4.03"], 4403)


async def test_oversize_is_refused_from_the_declared_length(
    serve_app: Callable[..., Awaitable[Any]],
) -> None:
    app = create_app([Echo()], envelope_limits=EnvelopeLimits(max_size=2048))
    server = await serve_app(app)
    with trio.fail_after(TIMEOUT):
        big = encode_envelope(envelope(text="x" * 4096))
        r = await _post(server, big)
        assert (r.status_code, read_error(decode_envelope(r.content))[0]) == (413, "4.13")
        # The WebSocket frame only declares its length: nothing follows it.
        codes, closed = await _ws_exchange(server, [(10**6).to_bytes(4, "big")])
    assert (codes, closed) == (["4.13"], 4413)


async def test_acks_without_or_beyond_delta_seq_are_4_09(server: Any) -> None:
    env = envelope(to="urn:uamp:agent:slow", window=2)
    with trio.fail_after(TIMEOUT):
        r = await _post_to(server, "slow", env)
        assert r.status_code == 202
        async with httpx.AsyncClient(base_url=server.url) as http:
            where = r.headers["location"]
            missing = orjson.dumps({"stream_id": env.id, "ts": env.ts, "type": "progress"})
            beyond = orjson.dumps(
                {"delta_seq": 99, "stream_id": env.id, "ts": env.ts, "type": "progress"}
            )
            answers = [await http.post(where, content=body) for body in (missing, beyond)]
    assert [a.status_code for a in answers] == [409, 409]
    assert [read_error(decode_envelope(a.content))[0] for a in answers] == ["4.09", "4.09"]


async def test_ws_acks_without_delta_seq_are_4_09_and_the_socket_stays(server: Any) -> None:
    env = envelope(to="urn:uamp:agent:echo", window=1)
    bad = orjson.dumps({"stream_id": env.id, "ts": env.ts, "type": "progress"})
    with trio.fail_after(TIMEOUT):
        codes, closed = await _ws_exchange(
            server, [prefix_frame(encode_envelope(env)), prefix_frame(bad)]
        )
    assert codes == ["4.09"] and closed is None


async def test_saturation_is_5_04_with_retry_after(
    serve_app: Callable[..., Awaitable[Any]],
) -> None:
    app = create_app(
        [Words("slow", *["w "] * 40, pause=0.05)],
        envelope_limits=EnvelopeLimits(max_concurrent=1, retry_after=3),
    )
    server = await serve_app(app)
    with trio.fail_after(TIMEOUT):
        first = await _post_to(server, "slow", envelope(to="urn:uamp:agent:slow"))
        assert first.status_code == 202
        busy = await _post_to(server, "slow", envelope(to="urn:uamp:agent:slow"))
        url = server.url.replace("http://", "ws://") + "/agents/slow/uamp/1/ws"
        async with envelope_ws(url, EnvelopeSigner.ephemeral()) as client:
            with pytest.raises(EnvelopeClientError) as ws_busy:
                await client.ask("more")
    assert busy.status_code == 503 and busy.headers["retry-after"] == "3"
    assert read_error(decode_envelope(busy.content)) == (
        "5.04",
        "agent 'slow' is running 1 exchanges; retry later",
        True,
    )
    assert ws_busy.value.code == "5.04"


async def _post_to(server: Any, agent: str, env: Envelope) -> httpx.Response:
    async with httpx.AsyncClient(base_url=server.url) as http:
        return await http.post(
            f"/agents/{agent}/v1/messages",
            content=encode_envelope(env),
            headers={"content-type": "application/uamp+json;v=1"},
        )


# --- with authentication ------------------------------------------------------------


@pytest.fixture
async def auth_server(serve_app: Callable[..., Awaitable[Any]], tmp_path: Path) -> Any:
    issuer, auth = capability_issuer(tmp_path)
    server = await serve_app(create_app([Echo()], authenticator=auth))
    server.issuer = issuer  # type: ignore[attr-defined]
    return server


AUTH_CASES: dict[str, tuple[dict[str, Any] | None, str]] = {
    "no-token": (None, "4.01"),
    "wrong-audience": ({"aud": "demo"}, "4.03"),
    "missing-scope": ({"scope": "subscribe"}, "4.03"),
    "expired": ({"exp": int(time.time()) - 600}, "4.01"),
}


@pytest.mark.parametrize("binding", sorted(BINDINGS))
@pytest.mark.parametrize("case", sorted(AUTH_CASES))
async def test_cap_token_cases(auth_server: Any, binding: str, case: str) -> None:
    args, code = AUTH_CASES[case]
    holder = p256()
    token = None
    if args is not None:
        token = cap_token(auth_server.issuer, holder, **{"aud": "echo", **args})
    signer = EnvelopeSigner(holder, cap_token=token, embed_jwk=True)
    with trio.fail_after(TIMEOUT):
        async with BINDINGS[binding](auth_server, signer, "echo") as client:
            with pytest.raises(EnvelopeClientError) as info:
                await client.ask("hi")
    assert info.value.code == code


@pytest.mark.parametrize("binding", sorted(BINDINGS))
async def test_a_good_cap_token_is_served_and_its_stream_is_private(
    auth_server: Any, binding: str
) -> None:
    holder = p256()
    signer = EnvelopeSigner(holder, cap_token=cap_token(auth_server.issuer, holder, aud="echo"))
    with trio.fail_after(TIMEOUT):
        async with BINDINGS[binding](auth_server, signer, "echo") as client:
            reply = await client.ask("with a token")
        assert reply.text == "WITH A TOKEN "
        other = p256()
        stranger = cap_token(auth_server.issuer, other, aud="echo", sub="mallory")
        async with httpx.AsyncClient(base_url=auth_server.url) as http:
            where = f"/agents/echo/v1/stream/{reply.envelope.id}"
            theirs = await http.get(where, headers={"authorization": f"Bearer {stranger}"})
            missing = await http.get(
                "/agents/echo/v1/stream/urn:uuid:00000000-0000-4000-8000-000000000000",
                headers={"authorization": f"Bearer {stranger}"},
            )
            anonymous = await http.get(where)
    assert theirs.status_code == missing.status_code == 404
    assert read_error(decode_envelope(theirs.content))[1].replace(
        reply.envelope.id, "X"
    ) == read_error(decode_envelope(missing.content))[1].replace(
        "urn:uuid:00000000-0000-4000-8000-000000000000", "X"
    )
    assert anonymous.status_code == 401


async def _head_only(port: int, head: bytes) -> list[Any]:
    """Send only ``head`` (never the body it declares); the events the server answers."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    conn = h11.Connection(h11.CLIENT)
    events: list[Any] = []
    async with stream:
        await stream.send_all(head)
        # h11 parses a response only to a request it sent: the same head, as state.
        conn.send(h11.Request(method="POST", target="/", headers=[("host", "x")]))
        while not any(isinstance(e, h11.EndOfMessage) for e in events):
            data = await stream.receive_some(65536)
            conn.receive_data(data)
            while (event := conn.next_event()) not in (h11.NEED_DATA, h11.PAUSED):
                events.append(event)
                if isinstance(event, h11.ConnectionClosed):
                    return events
    return events


@pytest.mark.parametrize("expect", [False, True])
async def test_oversize_post_is_refused_before_its_body_is_sent(
    serve_app: Callable[..., Awaitable[Any]], expect: bool
) -> None:
    app = create_app([Echo()], envelope_limits=EnvelopeLimits(max_size=2048))
    server = await serve_app(app)
    # Under the server's own --max-body-size: only the route's limit refuses it.
    declared = 1024 * 1024
    head = (
        b"POST /agents/echo/v1/messages HTTP/1.1\r\nhost: x\r\n"
        b"content-type: application/uamp+json\r\ncontent-length: %d\r\n"
        % declared
        + (b"expect: 100-continue\r\n" if expect else b"")
        + b"\r\n"
    )
    with trio.fail_after(TIMEOUT):
        events = await _head_only(server.port, head)
    answers = (h11.Response, h11.InformationalResponse)
    statuses = [e.status_code for e in events if isinstance(e, answers)]
    assert statuses == [413]  # no 100 Continue: the body is never asked for
    body = b"".join(bytes(e.data) for e in events if isinstance(e, h11.Data))
    code, message, _ = read_error(decode_envelope(body))
    assert code == "4.13" and "2048" in message


async def test_oversize_post_over_http2_is_refused_from_its_headers(
    serve_app: Callable[..., Awaitable[Any]],
) -> None:
    app = create_app([Echo()], envelope_limits=EnvelopeLimits(max_size=2048))
    server = await serve_app(app)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    # Headers only, no END_STREAM: the declared body is never sent.
    conn.send_headers(
        1,
        [
            (":method", "POST"),
            (":path", "/agents/echo/v1/messages"),
            (":scheme", "http"),
            (":authority", "x"),
            ("content-type", "application/uamp+json"),
            ("content-length", str(1024 * 1024)),
        ],
    )
    status, body, ended = None, b"", False
    with trio.fail_after(TIMEOUT):
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        async with stream:
            await stream.send_all(conn.data_to_send())
            while not ended:
                data = await stream.receive_some(65536)
                assert data, "the server closed before answering"
                for event in conn.receive_data(data):
                    if isinstance(event, h2.events.ResponseReceived):
                        status = dict(event.headers)[b":status"]
                    elif isinstance(event, h2.events.DataReceived):
                        body += event.data
                        conn.acknowledge_received_data(event.flow_controlled_length, 1)
                    elif isinstance(event, h2.events.StreamEnded | h2.events.StreamReset):
                        ended = True
                await stream.send_all(conn.data_to_send())
    assert status == b"413"
    code, message, _ = read_error(decode_envelope(body))
    assert code == "4.13" and "2048" in message
