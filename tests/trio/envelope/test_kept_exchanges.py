"""One caller's asks never push another caller's finished exchanges out.

Finished exchanges are kept for late readers, ``confirm`` and history, at
most ``keep_finished`` in all and ``exchanges_per_principal`` per caller:
past its share a caller's own oldest goes first. Over real sockets: bob's
finished exchange is still read from ``/v1/stream/{id}`` after mallory ran
ten asks on a server that keeps eight.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

from tests._support.envelopes import cap_token, capability_issuer, p256
from uamp_trio.app import create_app
from uamp_trio.client.envelope import EnvelopeHTTPClient, EnvelopeSigner
from uamp_trio.demo import DemoAgent
from uamp_trio.envelope.service import EnvelopeLimits

TIMEOUT = 30
TO = "urn:uamp:agent:demo"


def _signer(issuer: Any, sub: str) -> EnvelopeSigner:
    holder = p256()
    token = cap_token(issuer, holder, aud="demo", sub=sub)
    return EnvelopeSigner(holder, cap_token=token, embed_jwk=False)


async def test_a_callers_asks_evict_only_its_own_exchanges(
    serve_app: Callable[..., Awaitable[Any]], tmp_path: Path
) -> None:
    issuer, auth = capability_issuer(tmp_path)
    limits = EnvelopeLimits(keep_finished=8, exchanges_per_principal=3)
    server = await serve_app(create_app([DemoAgent()], authenticator=auth, envelope_limits=limits))
    base = f"{server.url}/agents/demo"
    bob, mallory = _signer(issuer, "bob"), _signer(issuer, "mallory")
    with trio.fail_after(TIMEOUT):
        async with EnvelopeHTTPClient(base, bob, to=TO) as at_bob:
            kept = await at_bob.ask("what is 2+3?")
            async with EnvelopeHTTPClient(base, mallory, to=TO) as at_mallory:
                first = await at_mallory.ask("what is 1+1?")
                for n in range(10):
                    await at_mallory.ask(f"what is {n}+1?")
                mallorys_first = await at_mallory.http.get(
                    f"{base}/v1/stream/{first.envelope.id}",
                    headers={"authorization": f"Bearer {mallory.cap_token}"},
                )
            again = await at_bob.http.get(
                f"{base}/v1/stream/{kept.envelope.id}",
                headers={"authorization": f"Bearer {bob.cap_token}"},
            )
    assert again.status_code == 200  # still there for bob (its frames were all acknowledged)
    assert mallorys_first.status_code == 404  # its own oldest went
    assert len(server.app.envelopes._exchanges) <= 8
