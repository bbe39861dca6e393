"""The AI SDK endpoint over real sockets: payment, signing, ownership, limits, supersession."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import trio
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests._support.agents import TestAgent, Words
from tests.trio.trust.issuer import Issuer
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.payment import TokenPolicy
from uamp_proto.responder import Emit, TurnRequest
from uamp_proto.signing import JWKS, verify_response_signature
from uamp_trio.app import create_app
from uamp_trio.cli import load_signer
from uamp_trio.demo import DemoAgent
from uamp_trio.transports import ai_sdk


@pytest.fixture(scope="module")
def key_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    path = tmp_path_factory.mktemp("keys") / "signing.pem"
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(path)


TIMEOUT = 15


def body(chat_id: str, text: str = "hello") -> dict[str, Any]:
    user = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": text}]}
    return {"id": chat_id, "messages": [user], "trigger": "submit-message"}


def chunks(raw: bytes) -> list[dict[str, Any]]:
    out = []
    for block in raw.split(b"\n\n"):
        if block.startswith(b"data: ") and block != b"data: [DONE]":
            out.append(orjson.loads(block[6:]))
    return out


async def test_unpaid_is_a_402_preflight_and_paid_runs(serve_app: Any) -> None:
    app = create_app([DemoAgent()], payment_policy=TokenPolicy({"tok_ok"}, amount="0.02"))
    server = await serve_app(app)
    with trio.fail_after(TIMEOUT):
        async with httpx.AsyncClient(base_url=server.url) as http:
            refused = await http.post("/agents/demo/ai-sdk", json=body("c1"))
            assert refused.status_code == 402
            error = refused.json()["error"]  # the Completions pre-flight's body
            assert error["code"] == "payment_required"
            assert error["accepts"][0]["amount"] == "0.02"
            paid = await http.post(
                "/agents/demo/ai-sdk", json=body("c1"), headers={"X-PAYMENT": "tok_ok"}
            )
    assert paid.status_code == 200
    assert paid.headers["x-vercel-ai-ui-message-stream"] == "v1"
    got = chunks(paid.content)
    assert got[-1]["type"] == "finish" and got[-1]["finishReason"] == "stop"
    assert paid.content.endswith(b"data: [DONE]\n\n")


async def test_the_finish_metadata_carries_a_signature_that_verifies(
    serve_app: Any, key_file: str
) -> None:
    app = create_app([DemoAgent()])
    app.response_signer = load_signer(key_file)
    server = await serve_app(app)
    sent = orjson.dumps(body("signed", "sign this"))
    with trio.fail_after(TIMEOUT):
        async with httpx.AsyncClient(base_url=server.url) as http:
            r = await http.post("/agents/demo/ai-sdk", content=sent)
            jwks = JWKS.parse((await http.get("/.well-known/jwks.json")).content)
    got = chunks(r.content)
    text = "".join(c["delta"] for c in got if c["type"] == "text-delta")
    signature = got[-1]["messageMetadata"]["signature"]
    verify_response_signature(signature, text, sent, jwks)


async def test_a_bad_body_is_a_400_naming_the_field(serve_app: Any) -> None:
    server = await serve_app(create_app([DemoAgent()]))
    with trio.fail_after(TIMEOUT):
        async with httpx.AsyncClient(base_url=server.url) as http:
            r = await http.post("/agents/demo/ai-sdk", json={"messages": []})
    assert r.status_code == 400 and "'id'" in r.json()["error"]["message"]


async def test_another_principals_chat_looks_like_none(serve_app: Any, tmp_path: Path) -> None:
    issuer = Issuer()
    slow = Words("slow", *[f"w{n} " for n in range(40)], pause=0.05)
    server = await serve_app(create_app([slow], authenticator=issuer.authenticator(tmp_path)))
    alice = {"Authorization": f"Bearer {issuer.token('alice')}"}
    mallory = {"Authorization": f"Bearer {issuer.token('mallory')}"}
    with trio.fail_after(TIMEOUT):
        async with httpx.AsyncClient(base_url=server.url) as http:
            async with http.stream("POST", "/agents/slow/ai-sdk", json=body("c"), headers=alice):
                theirs = await http.get("/agents/slow/ai-sdk/c/stream", headers=mallory)
                none = await http.get("/agents/slow/ai-sdk/other/stream", headers=alice)
                async with http.stream("GET", "/agents/slow/ai-sdk/c/stream", headers=alice) as own:
                    assert own.status_code == 200
            unauthenticated = await http.get("/agents/slow/ai-sdk/c/stream")
    assert theirs.status_code == none.status_code == 204
    assert unauthenticated.status_code == 401


class Silent(TestAgent):
    """Says nothing for a long while; counts its turns."""

    name = "silent"

    def __init__(self) -> None:
        self.started = 0

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        self.started += 1
        await trio.sleep(60)


async def test_each_caller_leaves_a_bounded_number_of_answers_running(
    serve_app: Any, tmp_path: Path
) -> None:
    # Answers outlive their requests: an abuser could start them and leave.
    # The server learns a client left only at its next write, which a silent
    # agent never makes: every admitted answer counts until it ends.
    issuer = Issuer()
    agent = Silent()
    app = create_app(
        [agent],
        transports=[ai_sdk.transport(max_answers=3)],
        authenticator=issuer.authenticator(tmp_path),
    )
    server = await serve_app(app)
    alice = {"Authorization": f"Bearer {issuer.token('alice')}"}
    mallory = {"Authorization": f"Bearer {issuer.token('mallory')}"}
    statuses: list[int] = []
    error = b""
    with trio.fail_after(TIMEOUT):
        async with httpx.AsyncClient(base_url=server.url) as http:
            for n in range(20):  # each client leaves at the status line
                url = "/agents/silent/ai-sdk"
                async with http.stream("POST", url, json=body(f"c{n}"), headers=alice) as r:
                    statuses.append(r.status_code)
                    if r.status_code == 429:
                        error = await r.aread()
            flood_runs = agent.started
            # Another caller is not starved by the flood.
            async with http.stream(
                "POST", "/agents/silent/ai-sdk", json=body("m"), headers=mallory
            ) as theirs:
                assert theirs.status_code == 200
            # A POST for a chat whose answer runs supersedes it: not refused.
            async with http.stream(
                "POST", "/agents/silent/ai-sdk", json=body("c0"), headers=alice
            ) as again:
                assert again.status_code == 200
    assert statuses == [200] * 3 + [429] * 17
    assert flood_runs <= 3 and agent.started <= 3 + 1 + 1  # the flood's, mallory's, c0's
    assert orjson.loads(error)["error"]["code"] == "too_many_answers"


class Counting(TestAgent):
    """Counts its turns and how many were cancelled."""

    name = "count"

    def __init__(self) -> None:
        self.started = 0
        self.cancelled = 0

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        self.started += 1
        try:
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text=f"turn {self.started} ")))
            await trio.sleep(0 if request.messages[-1].text == "quick" else 30)
        except trio.Cancelled:
            self.cancelled += 1
            raise


async def test_an_interrupting_post_supersedes_the_chats_running_answer(serve_app: Any) -> None:
    agent = Counting()
    server = await serve_app(create_app([agent]))
    with trio.fail_after(TIMEOUT):
        async with (
            httpx.AsyncClient(base_url=server.url) as http,
            http.stream("POST", "/agents/count/ai-sdk", json=body("c", "slow")) as first,
        ):
            parts = first.aiter_bytes()
            await parts.__anext__()  # the answer runs
            interrupt = {**body("c", "quick"), "uamp.on_busy": "interrupt"}
            second = await http.post("/agents/count/ai-sdk", json=interrupt)
            rest = b"".join([part async for part in parts])
    assert agent.cancelled == 1 and agent.started == 2
    assert [c["type"] for c in chunks(rest)][-2:] == ["abort", "finish"]
    assert chunks(second.content)[-1]["finishReason"] == "stop"


class Flood(TestAgent):
    """Streams text without end."""

    name = "flood"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        while True:
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text="x" * 1000)))


@pytest.mark.parametrize("limit", [20_000])
async def test_an_answer_past_its_byte_budget_ends_with_an_error(
    serve_app: Any, limit: int
) -> None:
    def mount(app: Any) -> None:
        ai_sdk.AiSdkTransport(app, max_answer_bytes=limit).mount()

    server = await serve_app(create_app([Flood()], transports=[mount]))
    with trio.fail_after(TIMEOUT):
        async with httpx.AsyncClient(base_url=server.url) as http:
            r = await http.post("/agents/flood/ai-sdk", json=body("c"))
    got = chunks(r.content)
    assert [c["type"] for c in got][-3:] == ["finish-step", "error", "finish"]
    assert str(limit) in got[-2]["errorText"]
    assert len(r.content) < 2 * limit
