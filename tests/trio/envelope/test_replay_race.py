"""One signed envelope sent N times at once runs once, on every binding.

The replay check and the remembering of an id are one step, taken before
anything yields (the ledger's lock does): 30 copies of a paid ``ask`` on 30
connections give one 202 (one ``done`` stream, one gRPC call that streams)
and 29 replays, the agent runs once and the token is charged once. A
principal filling its share of the replay memory is refused alone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs
import grpc
import httpx
import orjson
import pytest
import trio
import trio_websocket
from cryptography.hazmat.primitives.asymmetric import ed25519

from tests._support.agents import TestAgent
from tests._support.envelopes import cap_token, capability_issuer, envelope, p256
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.adapters.envelope import prefix_frame, read_error, split_frames
from uamp_proto.envelope import Envelope, decode_envelope, encode_envelope
from uamp_proto.responder import Emit, TurnRequest
from uamp_proto.signing import sign_envelope
from uamp_trio.app import create_app
from uamp_trio.envelope.service import EnvelopeLimits
from uamp_trio.grpc.protos.uamp.v1 import agent_pb2
from uamp_trio.trust.ledger import Ledger
from uamp_trio.trust.payments import LedgerPolicy

COPIES = 30
TIMEOUT = 30
HEADERS = {"content-type": "application/uamp+json;v=1"}


class Counted(TestAgent):
    """Says one word and counts its runs."""

    name = "counted"

    def __init__(self) -> None:
        self.runs = 0
        self._lock = threading.Lock()

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        with self._lock:
            self.runs += 1
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="ok")))


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    with Ledger(tmp_path / "ledger.db") as book:
        yield book


def paid_ask(token: str) -> bytes:
    """A signed ``ask`` to ``counted`` paying with ``token`` (``ext.payment_token``)."""
    unsigned = attrs.evolve(
        envelope(to="urn:uamp:agent:counted", sign=False), ext={"payment_token": token}
    )
    key = ed25519.Ed25519PrivateKey.generate()
    return encode_envelope(sign_envelope(unsigned, key, None, embed_jwk=True))


async def _http(url: str, body: bytes) -> str:
    async with httpx.AsyncClient(base_url=url) as http:  # a connection of its own
        r = await http.post("/agents/counted/v1/messages", content=body, headers=HEADERS)
        if r.status_code != 202:
            return read_error(decode_envelope(r.content))[0]
        stream = await http.get(r.headers["location"])  # until the final frame
    return "taken" if '"type":"done"' in stream.text else f"odd: {stream.text}"


async def _ws(url: str, body: bytes) -> str:
    ws_url = url.replace("http://", "ws://") + "/agents/counted/uamp/1/ws"
    async with trio_websocket.open_websocket_url(ws_url) as ws:
        await ws.send_message(prefix_frame(body))
        try:
            while True:
                message = await ws.get_message()
                assert isinstance(message, bytes)
                for part in split_frames(message, 1 << 24):
                    probe = orjson.loads(part)
                    if "intent" in probe:
                        return read_error(decode_envelope(part))[0]
                    if probe.get("type") == "done":
                        return "taken"
        except trio_websocket.ConnectionClosed:
            return "closed"


def _grpc(port: int, body: bytes) -> str:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        send = channel.unary_stream(
            "/uamp.v1.Agent/Send",
            request_serializer=agent_pb2.Envelope.SerializeToString,
            response_deserializer=agent_pb2.Delta.FromString,
        )
        try:
            kinds = [d.type for d in send(agent_pb2.Envelope(json=body), timeout=TIMEOUT)]
        except grpc.RpcError as exc:
            trailers = dict(exc.trailing_metadata() or ())  # type: ignore[attr-defined]
            return str(trailers.get("uamp-error-code", exc.code()))
    return "taken" if kinds[-1:] == ["done"] else f"odd: {kinds}"


async def _copies(binding: str, server: Any, body: bytes) -> list[str]:
    results: list[str] = []

    async def one() -> None:
        if binding == "http":
            results.append(await _http(server.url, body))
        elif binding == "ws":
            results.append(await _ws(server.url, body))
        else:
            results.append(await trio.to_thread.run_sync(_grpc, server.port, body))

    async with trio.open_nursery() as nursery:
        for _ in range(COPIES):
            nursery.start_soon(one)
    return results


@pytest.mark.parametrize("binding", ["http", "ws", "grpc"])
async def test_concurrent_copies_of_a_paid_ask_run_and_charge_once(
    thread_server: Callable[..., Any], ledger: Ledger, binding: str
) -> None:
    token = ledger.issue("10.00", "USD")
    agent = Counted()
    server = thread_server(create_app([agent], payment_policy=LedgerPolicy(ledger, price="0.25")))
    with trio.fail_after(TIMEOUT):
        results = await _copies(binding, server, paid_ask(token))
        # The one taken has finished (its done frame was read): settled.
    assert sorted(results) == sorted(["taken"] + ["4.03"] * (COPIES - 1)), results
    assert agent.runs == 1
    account = ledger.show(token).account
    assert account.settled == Decimal("0.25") and account.locked == 0
    assert account.balance == Decimal("9.75")


# --- the replay memory, shared out per principal --------------------------------------


@pytest.fixture
def auth_server(thread_server: Callable[..., Any], tmp_path: Path) -> Any:
    issuer, auth = capability_issuer(tmp_path)
    limits = EnvelopeLimits(replay_memory=40, replay_per_principal=10)
    server = thread_server(create_app([Counted()], authenticator=auth, envelope_limits=limits))
    server.issuer = issuer
    return server


def _inform(server: Any, sub: str) -> Callable[[], Envelope]:
    holder = p256()
    token = cap_token(server.issuer, holder, aud="counted", scope="inform ask", sub=sub)

    def make() -> Envelope:
        return envelope(
            "inform",
            "note",
            to="urn:uamp:agent:counted",
            key=holder,
            cap_token=token,
            embed_jwk=False,
        )

    return make


async def test_a_principal_filling_its_share_is_refused_alone(auth_server: Any) -> None:
    mallory, alice = _inform(auth_server, "mallory"), _inform(auth_server, "alice")
    async with httpx.AsyncClient(base_url=auth_server.url) as http:

        async def post(env: Envelope) -> httpx.Response:
            return await http.post(
                "/agents/counted/v1/messages", content=encode_envelope(env), headers=HEADERS
            )

        with trio.fail_after(TIMEOUT):
            flood = [await post(mallory()) for _ in range(15)]
            others = [await post(alice()) for _ in range(10)]
    statuses = [r.status_code for r in flood]
    assert statuses == [202] * 10 + [503] * 5
    code, message, retry = read_error(decode_envelope(flood[-1].content))
    assert (code, retry) == ("5.04", True) and "10 envelopes" in message
    assert int(flood[-1].headers["retry-after"]) >= 1
    # Another principal is untouched by mallory's flood.
    assert [r.status_code for r in others] == [202] * 10
