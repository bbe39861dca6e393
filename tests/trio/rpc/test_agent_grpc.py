"""spec 003's gRPC binding, ``uamp.v1.Agent``, driven by grpcio's own client.

A real server on 127.0.0.1 (its own thread) hosts a hand-written agent and
the demo agent; grpcio calls ``Send`` and ``Session`` with signed envelopes
made by the tests' helpers. Each attack of the issue (bad signature, replay,
wrong audience, oversize, missing ``delta_seq``) gets its gRPC status, its
``uamp-error-code`` trailer and, where something was read, an ``error``
delta frame carrying the code and the signed error envelope.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import orjson
import pytest

from tests._support.agents import TestAgent, Words
from tests._support.envelopes import cap_token, capability_issuer, envelope, p256
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.envelope import decode_envelope, encode_envelope
from uamp_proto.jose import JWKS
from uamp_proto.responder import Emit, TurnRequest
from uamp_proto.signing import verify_envelope
from uamp_trio.app import create_app
from uamp_trio.demo import DemoAgent
from uamp_trio.envelope.service import EnvelopeLimits
from uamp_trio.grpc.protos.uamp.v1 import agent_pb2

Envelope = agent_pb2.Envelope
Delta = agent_pb2.Delta


class Echo(TestAgent):
    """The question, upper-cased, a word per delta."""

    name = "echo"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        for word in request.messages[-1].text.upper().split():
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text=word + " ")))


def stubs(channel: grpc.Channel) -> tuple[Any, Any]:
    send = channel.unary_stream(
        "/uamp.v1.Agent/Send",
        request_serializer=Envelope.SerializeToString,
        response_deserializer=Delta.FromString,
    )
    session = channel.stream_stream(
        "/uamp.v1.Agent/Session",
        request_serializer=Envelope.SerializeToString,
        response_deserializer=Delta.FromString,
    )
    return send, session


@pytest.fixture
def served(thread_server: Callable[..., Any]) -> Iterator[tuple[Any, Any, Any]]:
    app = create_app(
        [Echo(), DemoAgent(), Words("slow", *["w "] * 30, pause=0.02)],
        envelope_limits=EnvelopeLimits(max_size=4096),
    )
    server = thread_server(app)
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        send, session = stubs(channel)
        yield server, send, session


def payload(delta: Any) -> dict[str, Any]:
    return orjson.loads(delta.payload) if delta.payload else {}


def test_send_streams_the_deltas_of_an_ask(served: tuple[Any, Any, Any]) -> None:
    _, send, _ = served
    env = envelope(text="hello grpc world", to="urn:uamp:agent:echo", window=2)
    deltas = list(send(Envelope(json=encode_envelope(env)), timeout=10))
    assert [d.delta_seq for d in deltas] == list(range(len(deltas)))
    assert [d.type for d in deltas] == ["chunk", "chunk", "chunk", "done"]
    assert {d.stream_id for d in deltas} == {env.id}
    text = "".join(payload(d)["text"] for d in deltas if d.type == "chunk")
    assert text == "HELLO GRPC WORLD " == payload(deltas[-1])["text"]
    # A window of 2 did not stall: frames the stream took count as acknowledged.


def test_send_picks_the_agent_from_metadata(served: tuple[Any, Any, Any]) -> None:
    _, send, _ = served
    env = envelope(text="hi there", to="urn:uamp:agent:nobody")
    deltas = list(send(Envelope(json=encode_envelope(env)), metadata=[("uamp-agent", "echo")]))
    assert payload(deltas[-1])["text"] == "HI THERE "


def test_session_acks_windows_and_interleaves(served: tuple[Any, Any, Any]) -> None:
    _, _, session = served
    outgoing: queue.Queue[Any] = queue.Queue()

    def requests() -> Iterator[Any]:
        while (item := outgoing.get(timeout=10)) is not None:
            yield item

    slow = envelope(text="go", to="urn:uamp:agent:slow", window=2)
    echo = envelope(text="a b", to="urn:uamp:agent:echo", window=2)
    outgoing.put(Envelope(json=encode_envelope(slow)))
    outgoing.put(Envelope(json=encode_envelope(echo)))
    seen: dict[str, list[int]] = {slow.id: [], echo.id: []}
    done: set[str] = set()
    for delta in session(requests(), timeout=20):
        seen[delta.stream_id].append(delta.delta_seq)
        # Acknowledge every frame: the window of 2 keeps moving.
        ack = {
            "delta_seq": delta.delta_seq,
            "stream_id": delta.stream_id,
            "ts": delta.ts,
            "type": "progress",
        }
        outgoing.put(Envelope(json=orjson.dumps(ack)))
        if delta.type == "done":
            done.add(delta.stream_id)
            if done == set(seen):
                outgoing.put(None)  # half-close: the call ends with its exchanges
    assert seen[slow.id] == list(range(31)) and seen[echo.id] == list(range(3))


def test_session_without_acks_stops_at_the_window(served: tuple[Any, Any, Any]) -> None:
    _, _, session = served
    outgoing: queue.Queue[Any] = queue.Queue()
    env = envelope(text="go", to="urn:uamp:agent:slow", window=3)
    outgoing.put(Envelope(json=encode_envelope(env)))

    def requests() -> Iterator[Any]:
        while (item := outgoing.get(timeout=10)) is not None:
            yield item

    call = session(requests(), timeout=20)
    first = [next(call) for _ in range(3)]
    assert [d.delta_seq for d in first] == [0, 1, 2]
    # No ack: nothing more comes.
    with pytest.raises(grpc.RpcError) as info:
        _next_within(call, 0.5)
    assert info.value.code() == grpc.StatusCode.CANCELLED
    outgoing.put(None)


def _next_within(call: Any, seconds: float) -> Any:
    """The next frame, or cancel the call after ``seconds`` (raising its RpcError)."""
    timer = threading.Timer(seconds, call.cancel)
    timer.start()
    try:
        return next(call)
    finally:
        timer.cancel()


def _tampered() -> bytes:
    return encode_envelope(envelope(text="pay 1", to="urn:uamp:agent:echo")).replace(
        b"pay 1", b"pay 9"
    )


def refused(send: Any, data: bytes) -> tuple[grpc.RpcError, list[Any]]:
    frames: list[Any] = []
    with pytest.raises(grpc.RpcError) as info:
        for delta in send(Envelope(json=data), timeout=10):
            frames.append(delta)
    return info.value, frames


def check_error_frame(frames: list[Any], code: str, server: Any) -> None:
    assert len(frames) == 1 and frames[0].type == "error" and frames[0].delta_seq == 0
    body = payload(frames[0])
    assert body["code"] == code
    signed = decode_envelope(orjson.dumps(body["envelope"]))
    keys = JWKS.parse(httpx.get(f"{server.url}/.well-known/jwks.json").content)
    verify_envelope(signed, keys)  # the signed error envelope, as HTTP would answer


ATTACKS = {
    "bad-signature": (_tampered, grpc.StatusCode.UNAUTHENTICATED, "4.01"),
    "unsigned": (
        lambda: encode_envelope(envelope(sign=False, to="urn:uamp:agent:echo")),
        grpc.StatusCode.UNAUTHENTICATED,
        "4.01",
    ),
    "stale-ts": (
        lambda: encode_envelope(envelope(at=time.time() - 3600, to="urn:uamp:agent:echo")),
        grpc.StatusCode.UNAUTHENTICATED,
        "4.01",
    ),
    "not-an-envelope": (lambda: b'{"intent": "ask"}', grpc.StatusCode.INVALID_ARGUMENT, "4.00"),
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_attacks_on_send(served: tuple[Any, Any, Any], attack: str) -> None:
    server, send, _ = served
    make, status, code = ATTACKS[attack]
    error, frames = refused(send, make())
    assert error.code() == status
    assert ("uamp-error-code", code) in error.trailing_metadata()
    check_error_frame(frames, code, server)


def test_replay_is_permission_denied(served: tuple[Any, Any, Any]) -> None:
    server, send, _ = served
    data = encode_envelope(envelope(text="once", to="urn:uamp:agent:echo"))
    assert list(send(Envelope(json=data), timeout=10))[-1].type == "done"
    error, frames = refused(send, data)
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    check_error_frame(frames, "4.03", server)


def test_send_of_a_one_way_envelope_ends_ok_without_frames(served: tuple[Any, Any, Any]) -> None:
    server, send, _ = served
    inform = envelope("inform", "fyi", to="urn:uamp:agent:echo")
    frames = send(Envelope(json=encode_envelope(inform)), timeout=10)
    assert list(frames) == [] and frames.code() == grpc.StatusCode.OK
    error, errors = refused(
        send, encode_envelope(envelope("progress", "about nothing", to="urn:uamp:agent:echo"))
    )
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT  # progress names its exchange
    check_error_frame(errors, "4.00", server)


def test_oversize_is_refused_from_the_message_prefix(served: tuple[Any, Any, Any]) -> None:
    _, send, _ = served
    big = encode_envelope(envelope(text="x" * 8000, to="urn:uamp:agent:echo"))
    error, frames = refused(send, big)
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert frames == []  # refused from the gRPC prefix: nothing was read


def test_session_ack_without_delta_seq_is_4_09_and_the_call_goes_on(
    served: tuple[Any, Any, Any],
) -> None:
    _, _, session = served
    env = envelope(text="one two", to="urn:uamp:agent:echo", window=8)
    bad = orjson.dumps({"stream_id": env.id, "ts": env.ts, "type": "progress"})
    later = envelope(text="after", to="urn:uamp:agent:echo")
    messages = [Envelope(json=encode_envelope(env)), Envelope(json=bad)]
    frames = []
    outgoing: queue.Queue[Any] = queue.Queue()
    for m in messages:
        outgoing.put(m)

    def requests() -> Iterator[Any]:
        while (item := outgoing.get(timeout=10)) is not None:
            yield item

    for delta in session(requests(), timeout=10):
        frames.append(delta)
        if delta.type == "error":
            outgoing.put(Envelope(json=encode_envelope(later)))
        if delta.type == "done" and delta.stream_id == later.id:
            outgoing.put(None)
    errors = [payload(f)["code"] for f in frames if f.type == "error"]
    assert errors == ["4.09"]
    assert [f.type for f in frames if f.stream_id == later.id][-1] == "done"


def test_session_bad_signature_ends_the_call(served: tuple[Any, Any, Any]) -> None:
    _, _, session = served
    frames = []
    with pytest.raises(grpc.RpcError) as info:
        for delta in session(iter([Envelope(json=_tampered())]), timeout=10):
            frames.append(delta)
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert [payload(f)["code"] for f in frames] == ["4.01"]


# --- with authentication ------------------------------------------------------------------


@pytest.fixture
def auth_served(thread_server: Callable[..., Any], tmp_path: Path) -> Iterator[tuple[Any, Any]]:
    issuer, auth = capability_issuer(tmp_path)
    server = thread_server(create_app([Echo()], authenticator=auth))
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        yield issuer, stubs(channel)[0]


AUTH_CASES = {
    "no-token": (None, grpc.StatusCode.UNAUTHENTICATED, "4.01"),
    "wrong-audience": ({"aud": "demo"}, grpc.StatusCode.PERMISSION_DENIED, "4.03"),
    "missing-scope": ({"scope": "subscribe"}, grpc.StatusCode.PERMISSION_DENIED, "4.03"),
    "expired": ({"exp": int(time.time()) - 600}, grpc.StatusCode.UNAUTHENTICATED, "4.01"),
}


@pytest.mark.parametrize("case", sorted(AUTH_CASES))
def test_cap_token_cases(auth_served: tuple[Any, Any], case: str) -> None:
    issuer, send = auth_served
    args, status, code = AUTH_CASES[case]
    holder = p256()
    token = None if args is None else cap_token(issuer, holder, **{"aud": "echo", **args})
    env = envelope(key=holder, cap_token=token, to="urn:uamp:agent:echo")
    error, frames = refused(send, encode_envelope(env))
    assert error.code() == status
    assert payload(frames[0])["code"] == code


def test_a_good_cap_token_is_served(auth_served: tuple[Any, Any]) -> None:
    issuer, send = auth_served
    holder = p256()
    token = cap_token(issuer, holder, aud="echo")
    env = envelope(key=holder, cap_token=token, text="with token", to="urn:uamp:agent:echo")
    deltas = list(send(Envelope(json=encode_envelope(env)), timeout=10))
    assert payload(deltas[-1])["text"] == "WITH TOKEN "
