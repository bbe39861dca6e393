"""The binding-neutral envelope service: verification, intents, windows, codes."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import trio
from cryptography.hazmat.primitives.asymmetric import ed25519

from tests._support.agents import Words
from tests._support.envelopes import ISSUER, cap_token, envelope, p256
from uamp_proto.adapters.envelope import EnvelopeRefused
from uamp_proto.envelope import ContextRef, Delta, DeltaType, ExchangeState, encode_envelope
from uamp_proto.jose import JWKS
from uamp_proto.principal import ANONYMOUS
from uamp_trio.app import create_app
from uamp_trio.demo import DemoAgent
from uamp_trio.envelope.keys import EnvelopeKey
from uamp_trio.envelope.service import EnvelopeLimits, EnvelopeService, close_code, http_status
from uamp_trio.trust.auth import JWTAuthenticator
from uamp_trio.trust.envelopes import EnvelopeTrust


def _service(agent: object = None, **limits: object) -> EnvelopeService:
    app = create_app([agent or DemoAgent()], transports=[])
    return EnvelopeService(app, EnvelopeKey.ephemeral_key(), limits=EnvelopeLimits(**limits))


def _ack(stream_id: str, seq: int) -> Delta:
    return Delta(delta_seq=seq, stream_id=stream_id, ts="2025-01-01T00:00:00Z", type="progress")


async def _collect(service: EnvelopeService, ex_id: str, *, ack: bool = True) -> list[Delta]:
    exchange = service.find(ex_id, ANONYMOUS)
    got: list[Delta] = []
    async for delta in exchange.deltas():
        got.append(delta)
        if ack:
            service.acknowledge(exchange, _ack(exchange.stream_id, delta.delta_seq), ANONYMOUS)
    return got


async def test_ask_streams_chunks_then_done_and_completes() -> None:
    service = _service()
    async with trio.open_nursery() as nursery:
        env = envelope(text="hello there")
        agent = service.resolve(None, env)
        done = await service.submit(agent, env, nursery=nursery)
        frames = await _collect(service, done.exchange.id)
    assert [f.delta_seq for f in frames] == list(range(len(frames)))
    assert frames[-1].type is DeltaType.DONE
    text = "".join(f.payload["text"] for f in frames if f.type is DeltaType.CHUNK)
    assert text and frames[-1].payload["text"] == text
    assert done.exchange.state is ExchangeState.COMPLETED
    assert done.location == f"/v1/stream/{env.id}"


async def test_the_producer_stops_at_the_window_until_acked() -> None:
    agent = Words("w", *[f"w{i} " for i in range(10)], pause=0)
    service = _service(agent)
    async with trio.open_nursery() as nursery:
        env = envelope(window=3)
        sub = await service.submit(agent, env, nursery=nursery)
        await trio.sleep(0.05)
        exchange = sub.exchange
        assert exchange.window.next_seq == 3  # three frames out, none acked
        service.acknowledge(exchange, _ack(exchange.stream_id, 1), ANONYMOUS)
        await trio.sleep(0.05)
        assert exchange.window.next_seq == 5
        rest = await _collect(service, env.id)
    assert rest[-1].type is DeltaType.DONE


@pytest.mark.parametrize(
    ("make", "code"),
    [
        (lambda: envelope(sign=False), "4.01"),
        (lambda: envelope(embed_jwk=False), "4.01"),
        (lambda: envelope(at=time.time() - 3600), "4.01"),
        (lambda: envelope(intent="progress"), "4.00"),
        (lambda: envelope(intent="confirm"), "4.00"),
    ],
    ids=["unsigned", "no-key", "stale-ts", "progress-without-reply_to", "confirm-without-reply_to"],
)
async def test_refusals_without_auth(make: object, code: str) -> None:
    service = _service()
    env = make()  # type: ignore[operator]
    with pytest.raises(EnvelopeRefused) as info:
        await service.submit(service.resolve(None, env), env)
    assert info.value.code == code


async def test_a_tampered_envelope_is_refused() -> None:
    service = _service()
    env = envelope(text="pay 1")
    raw = encode_envelope(env).replace(b"pay 1", b"pay 9")
    tampered = service.decode(raw)
    with pytest.raises(EnvelopeRefused) as info:
        await service.submit(service.resolve(None, tampered), tampered)
    assert info.value.code == "4.01"


async def test_replay_is_refused_with_4_03() -> None:
    service = _service()
    env = envelope()
    async with trio.open_nursery() as nursery:
        agent = service.resolve(None, env)
        await service.submit(agent, env, nursery=nursery)
        with pytest.raises(EnvelopeRefused) as info:
            await service.submit(agent, env, nursery=nursery)
        await _collect(service, env.id)
    assert info.value.code == "4.03"


async def test_saturation_is_5_04_with_retry_after_and_the_retry_is_not_a_replay() -> None:
    agent = Words("slow", "a", "b", pause=0.3)
    service = _service(agent, max_concurrent=1, retry_after=2)
    async with trio.open_nursery() as nursery:
        first, second = envelope(), envelope()
        await service.submit(agent, first, nursery=nursery)
        with pytest.raises(EnvelopeRefused) as info:
            await service.submit(agent, second, nursery=nursery)
        assert (info.value.code, info.value.retry_after) == ("5.04", 2)
        await _collect(service, first.id)
        await trio.sleep(0)  # the run's finally
        again = await service.submit(agent, second, nursery=nursery)
        await _collect(service, again.exchange.id)


async def test_oversize_is_4_13_from_the_declared_length() -> None:
    service = _service(max_size=100)
    with pytest.raises(EnvelopeRefused) as info:
        service.decode(b"{}", declared=101)
    assert info.value.code == "4.13"


async def test_acks_that_were_never_sent_or_lack_a_seq_are_4_09() -> None:
    agent = Words("w", "a", "b", "c", pause=0)
    service = _service(agent)
    async with trio.open_nursery() as nursery:
        env = envelope(window=1)
        sub = await service.submit(agent, env, nursery=nursery)
        await trio.sleep(0.02)
        stream = sub.exchange.stream_id
        with pytest.raises(EnvelopeRefused) as beyond:
            service.acknowledge(sub.exchange, _ack(stream, 5), ANONYMOUS)
        bad = b'{"stream_id": "%s", "ts": "2025-01-01T00:00:00Z", "type": "progress"}' % (
            stream.encode()
        )
        with pytest.raises(EnvelopeRefused) as missing:
            service.acknowledge(sub.exchange, bad, ANONYMOUS)
        await _collect(service, env.id)
    assert (beyond.value.code, missing.value.code) == ("4.09", "4.09")


async def test_cancel_stops_the_run_and_ends_with_a_cancel_frame() -> None:
    agent = Words("slow", *["x"] * 50, pause=0.05)
    service = _service(agent)
    key = ed25519.Ed25519PrivateKey.generate()
    async with trio.open_nursery() as nursery:
        ask = envelope(key=key)
        sub = await service.submit(agent, ask, nursery=nursery)
        await trio.sleep(0.08)
        await service.submit(agent, envelope("cancel", key=key, reply_to=ask.id))
        frames = await _collect(service, ask.id)
    assert frames[-1].type is DeltaType.CANCEL
    assert sub.exchange.state is ExchangeState.CANCELLED


async def test_context_continues_the_conversation() -> None:
    service = _service()
    async with trio.open_nursery() as nursery:
        first = envelope(text="remember the word kiwi")
        agent = service.resolve(None, first)
        await service.submit(agent, first, nursery=nursery)
        await _collect(service, first.id)
        ref = ContextRef(id=first.id, hash=service.find(first.id, ANONYMOUS).envelope_hash)
        second = envelope(text="and now?", context=[ref])
        sub = await service.submit(agent, second, nursery=nursery)
        await _collect(service, second.id)
    said = [m.content for m in sub.exchange.messages if m.role == "user"]
    assert said == ["remember the word kiwi", "and now?"]


def test_codes_map_to_statuses_and_close_codes() -> None:
    assert [http_status(c) for c in ("4.01", "4.03", "4.09", "4.13", "5.04")] == [
        401,
        403,
        409,
        413,
        503,
    ]
    assert [close_code(c) for c in ("4.01", "4.03", "4.13", "4.09")] == [4401, 4403, 4413, None]


# --- with authentication: capability tokens ---------------------------------------


@pytest.fixture
def issuer(tmp_path: Path) -> tuple[object, JWTAuthenticator]:
    key = p256()
    jwks = tmp_path / "jwks.json"
    jwks.write_bytes(JWKS.from_keys((key, "issuer-1")).to_json())
    return key, JWTAuthenticator(jwks, issuer=ISSUER, audience="uamp")


def _auth_service(issuer: tuple[object, JWTAuthenticator], trusted: JWKS | None = None):
    app = create_app([DemoAgent()], transports=[])
    trust = EnvelopeTrust(issuer[1], trusted=trusted)
    return EnvelopeService(app, EnvelopeKey.ephemeral_key(), trust=trust)


@pytest.mark.parametrize(
    ("token_args", "code"),
    [
        (None, "4.01"),
        ({"aud": "someone-else"}, "4.03"),
        ({"scope": "subscribe"}, "4.03"),
        ({"exp": int(time.time()) - 120}, "4.01"),
        ({"iss": "https://evil.test"}, "4.01"),
        ({"wrong_holder": True}, "4.01"),
        ({"other_issuer": True}, "4.01"),
    ],
    ids=["no-token", "wrong-aud", "missing-scope", "expired", "wrong-iss", "not-cnf", "forged"],
)
async def test_cap_token_refusals(issuer, token_args, code) -> None:
    service = _auth_service(issuer)
    holder = p256()
    token = None
    if token_args is not None:
        args = dict(token_args)
        signer = p256() if args.pop("other_issuer", False) else issuer[0]
        bound = p256() if args.pop("wrong_holder", False) else holder
        token = cap_token(signer, bound, **args)
    env = envelope(key=holder, cap_token=token, embed_jwk=True)
    with pytest.raises(EnvelopeRefused) as info:
        await service.submit(service.resolve(None, env), env)
    assert info.value.code == code


async def test_a_good_cap_token_runs_the_agent_as_its_subject(issuer) -> None:
    service = _auth_service(issuer)
    holder = p256()
    env = envelope(key=holder, cap_token=cap_token(issuer[0], holder), embed_jwk=False)
    async with trio.open_nursery() as nursery:
        sub = await service.submit(service.resolve(None, env), env, nursery=nursery)
        async for frame in sub.exchange.deltas():
            sub.exchange.acknowledge(frame.delta_seq)
    assert sub.principal.id == "alice"
    assert sub.exchange.state is ExchangeState.COMPLETED
    with pytest.raises(EnvelopeRefused) as info:
        service.find(env.id, ANONYMOUS)  # another caller: as if it did not exist
    assert info.value.code == "4.04"


async def test_a_trusted_peer_needs_no_cap_token(issuer) -> None:
    peer = p256()
    service = _auth_service(issuer, trusted=JWKS.from_keys((peer, "peer-1")))
    env = envelope(key=peer, kid="peer-1", embed_jwk=False)
    async with trio.open_nursery() as nursery:
        sub = await service.submit(service.resolve(None, env), env, nursery=nursery)
        async for frame in sub.exchange.deltas():
            sub.exchange.acknowledge(frame.delta_seq)
    assert sub.principal.id == "key:peer-1"
