"""One-way envelopes pin no more memory than their sender's budget.

An ``inform`` without ``reply_to`` waits for its sender's next exchange; an
``inform`` with one joins that exchange's conversation. Both are bounded
per principal (count and bytes): past the budget the sender gets 4.13 or
5.04 over real sockets, and another principal is unaffected.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import hypothesis.strategies as st
import pytest
import trio
import trio_websocket
from hypothesis import given

from tests._support.agents import TestAgent
from tests._support.envelopes import cap_token, capability_issuer, envelope, p256
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.adapters.envelope import EnvelopeRefused, prefix_frame, read_error
from uamp_proto.envelope import Envelope, decode_envelope, encode_envelope
from uamp_proto.responder import Emit, TurnRequest
from uamp_trio.app import create_app
from uamp_trio.client.envelope import EnvelopeHTTPClient, EnvelopeSigner
from uamp_trio.envelope.notes import Notes
from uamp_trio.envelope.service import EnvelopeLimits

TIMEOUT = 20
HEADERS = {"content-type": "application/uamp+json;v=1"}
MIB = 1024 * 1024


class Recall(TestAgent):
    """Answers with how many messages its conversation holds."""

    name = "recall"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text=f"{len(request.messages)} messages")))


async def _post(http: httpx.AsyncClient, env: Envelope) -> tuple[int, str | None]:
    r = await http.post("/agents/recall/v1/messages", content=encode_envelope(env), headers=HEADERS)
    code = None if r.status_code == 202 else read_error(decode_envelope(r.content))[0]
    return r.status_code, code


async def test_a_large_inform_is_4_13_on_http_and_the_websocket(
    serve_app: Callable[..., Awaitable[Any]],
) -> None:
    # The envelope limit (4 MiB) lets it in; the waiting-message budget (1 MiB) does not.
    server = await serve_app(create_app([Recall()]))
    big = envelope("inform", "x" * (2 * MIB), to="urn:uamp:agent:recall")
    with trio.fail_after(TIMEOUT):
        async with httpx.AsyncClient(base_url=server.url) as http:
            assert await _post(http, big) == (413, "4.13")
        signer = EnvelopeSigner.ephemeral()
        url = server.url.replace("http://", "ws://") + "/agents/recall/uamp/1/ws"
        async with trio_websocket.open_websocket_url(url, max_message_size=8 * MIB) as ws:
            big_ws = signer.make("inform", "y" * (2 * MIB), to="urn:uamp:agent:recall")
            await ws.send_message(prefix_frame(encode_envelope(big_ws)))
            answer = await ws.get_message()
    assert isinstance(answer, bytes)
    assert read_error(decode_envelope(answer[4:]))[0] == "4.13"
    assert len(server.app.envelopes._notes) == 0


@pytest.fixture
async def auth_server(serve_app: Callable[..., Awaitable[Any]], tmp_path: Path) -> Any:
    issuer, auth = capability_issuer(tmp_path)
    limits = EnvelopeLimits(notes_per_principal=3, note_bytes_per_principal=1000)
    server = await serve_app(create_app([Recall()], authenticator=auth, envelope_limits=limits))
    server.issuer = issuer
    return server


def _signer(server: Any, sub: str) -> EnvelopeSigner:
    holder = p256()
    token = cap_token(server.issuer, holder, aud="recall", scope="inform ask", sub=sub)
    return EnvelopeSigner(holder, cap_token=token, embed_jwk=False)


async def test_waiting_informs_are_bounded_per_principal(auth_server: Any) -> None:
    mallory, alice = _signer(auth_server, "mallory"), _signer(auth_server, "alice")
    to = "urn:uamp:agent:recall"
    with trio.fail_after(TIMEOUT):
        async with httpx.AsyncClient(base_url=auth_server.url) as http:
            flood = [await _post(http, mallory.make("inform", "n" * 100, to=to)) for _ in range(4)]
            too_many_bytes = await _post(http, mallory.make("inform", "m" * 1001, to=to))
            others = [await _post(http, alice.make("inform", "a" * 300, to=to)) for _ in range(3)]
            alice_full = await _post(http, alice.make("inform", "a" * 300, to=to))
        # Mallory's next exchange takes its three notes: room for more.
        async with EnvelopeHTTPClient(f"{auth_server.url}/agents/recall", mallory, to=to) as c:
            reply = await c.ask("and now?")
        async with httpx.AsyncClient(base_url=auth_server.url) as http:
            after = await _post(http, mallory.make("inform", "n", to=to))
    assert flood == [(202, None)] * 3 + [(503, "5.04")]
    assert too_many_bytes == (413, "4.13")
    assert others == [(202, None)] * 3  # alice is not touched by mallory's full budget
    assert alice_full == (503, "5.04")  # 900 bytes + 300 > 1000
    assert reply.text == "4 messages"
    assert after == (202, None)


async def test_informs_joining_an_exchange_are_bounded(auth_server: Any) -> None:
    signer = _signer(auth_server, "bob")
    to = "urn:uamp:agent:recall"
    with trio.fail_after(TIMEOUT):
        async with EnvelopeHTTPClient(f"{auth_server.url}/agents/recall", signer, to=to) as c:
            first = await c.ask("hello")
        assert first.final is not None
        ask_id = first.envelope.id
        async with httpx.AsyncClient(base_url=auth_server.url) as http:
            joined = [
                await _post(http, signer.make("inform", "j" * 10, to=to, reply_to=ask_id))
                for _ in range(4)
            ]
    assert joined == [(202, None)] * 3 + [(413, "4.13")]


# --- the store itself ------------------------------------------------------------------


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b"]),  # owner
            st.sampled_from(["x", "y"]),  # address
            st.integers(0, 400),  # size
            st.booleans(),  # take instead of add
            st.floats(0, 50),  # time step
        ),
        max_size=60,
    )
)
def test_notes_never_exceed_a_budget_and_give_back_what_they_took(
    steps: list[tuple[str, str, int, bool, float]],
) -> None:
    notes = Notes(count=4, size=1000, ttl=100.0, principals=8)
    now = 0.0
    model: dict[tuple[str, str], list[tuple[float, str]]] = {}
    for owner, address, size, take, step in steps:
        now += step
        key = ((owner, owner), (address, address))
        live = {k: [m for m in v if now - m[0] <= 100.0] for k, v in model.items()}
        if take:
            got = [m.text for m in notes.take(key[0], key[1], now)]
            expected = [m[1] for m in live.get(key, [])]
            model[key] = []
            assert got == expected
            continue
        text = "z" * size
        try:
            notes.add(key[0], key[1], ty.Message(role="user", content=text), now)
        except EnvelopeRefused:
            mine = [m for k, v in live.items() if k[0] == key[0] for m in v]
            assert len(mine) >= 4 or sum(len(m[1]) for m in mine) + size > 1000
            continue
        model.setdefault(key, []).append((now, text))
        count, held = notes.held(key[0])
        assert count <= 4 and held <= 1000
