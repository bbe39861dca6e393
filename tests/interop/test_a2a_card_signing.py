"""A2A 1.0 agent cards through a2a-sdk: signatures, security schemes, the extended card.

A real server on 127.0.0.1 in its own thread; the client is a2a-sdk 1.x:
its card resolver with its own signature verifier (``create_signature_verifier``,
the key fetched from the signature's ``jku``), its ``AuthInterceptor`` (which
attaches the bearer token only because the card's ``securitySchemes`` and
``securityRequirements`` say so) and ``get_extended_agent_card`` over
JSON-RPC, HTTP+JSON and gRPC.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.client.auth import AuthInterceptor
from a2a.client.auth.credentials import CredentialService
from a2a.client.client import ClientCallContext
from a2a.client.errors import A2AClientError
from a2a.types import a2a_pb2 as pb
from a2a.utils.signing import InvalidSignaturesError, create_signature_verifier
from google.protobuf import json_format
from jwt import PyJWK

from tests._support.agents import run_asyncio
from tests.trio.trust.issuer import Issuer
from uamp_proto.card_signing import verify_card
from uamp_proto.jose import JWKS, SignatureError
from uamp_proto.jose import b64url_decode as _b64
from uamp_trio.app import create_app, default_transports
from uamp_trio.demo import DemoAgent
from uamp_trio.transports import a2a

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

ISSUER = Issuer()
BINDINGS = pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON", "GRPC"])
MORE = {
    "description": "The demo agent, with what members may ask for.",
    "skills": [
        {
            "id": "members.ledger",
            "name": "ledger",
            "description": "Reads the members' ledger.",
            "tags": ["members"],
        }
    ],
}


def _app(tmp_path: Path, *, auth: bool, extended: dict[str, Any] | None, sign: bool) -> Any:
    configured = a2a.transport(sign_cards=sign, extended_card=extended)
    transports = [configured if t is a2a.mount else t for t in default_transports()]
    return create_app(
        [DemoAgent()],
        transports=transports,
        payment_policy=None,
        authenticator=ISSUER.authenticator(tmp_path) if auth else None,
    )


class _Token(CredentialService):
    def __init__(self, token: str) -> None:
        self.token = token

    async def get_credentials(self, scheme: str, context: ClientCallContext | None) -> str | None:
        return self.token if scheme == "bearer" else None


def _verifier(http: httpx.Client) -> Any:
    """a2a-sdk's verifier; the key is the JWKS entry the signature's jku and kid name."""

    def key_provider(kid: str | None, jku: str | None) -> PyJWK:
        assert jku is not None and jku.endswith("/.well-known/jwks.json")
        keys = http.get(jku).json()["keys"]
        [jwk] = [k for k in keys if k.get("kid") == kid]
        return PyJWK(jwk)

    return create_signature_verifier(key_provider, ["EdDSA", "ES256"])


def test_a_signed_card_verifies_with_a2a_sdks_verifier_and_a_changed_one_does_not(
    thread_server: Any, tmp_path: Path
) -> None:
    server = thread_server(_app(tmp_path, auth=False, extended=None, sign=True))
    with httpx.Client(timeout=10) as http:
        verify = _verifier(http)
        raw = http.get(f"{server.url}/agents/demo/.well-known/agent-card.json").json()
        jwks = JWKS.parse(http.get(f"{server.url}/.well-known/jwks.json").json())
        card = json_format.ParseDict(raw, pb.AgentCard(), ignore_unknown_fields=False)
        verify(card)  # raises unless one signature verifies
        verify_card(raw, jwks)  # and uamp's own check agrees
        [signature] = raw["signatures"]
        header = json.loads(_b64(signature["protected"]))
        assert header["alg"] == "EdDSA" and header["kid"] and header["typ"] == "JOSE"
        changed = json_format.ParseDict({**raw, "description": "something else"}, pb.AgentCard())
        with pytest.raises(InvalidSignaturesError):
            verify(changed)
        with pytest.raises(SignatureError):
            verify_card({**raw, "description": "something else"}, jwks)

    async def resolve() -> None:  # the SDK's resolver checks it too
        async with httpx.AsyncClient(timeout=10) as ahttp:
            with httpx.Client(timeout=10) as sync_http:
                resolved = await A2ACardResolver(ahttp, server.url).get_agent_card(
                    signature_verifier=_verifier(sync_http)
                )
        assert resolved.name == "demo" and len(resolved.signatures) == 1

    run_asyncio(resolve)


def test_an_unsigned_server_serves_no_signatures(thread_server: Any, tmp_path: Path) -> None:
    server = thread_server(_app(tmp_path, auth=False, extended=None, sign=False))
    card = httpx.get(f"{server.url}/.well-known/agent-card.json").json()
    assert "signatures" not in card


@BINDINGS
def test_the_extended_card_over_each_binding_with_the_sdks_auth_interceptor(
    thread_server: Any, tmp_path: Path, binding: str
) -> None:
    server = thread_server(_app(tmp_path, auth=True, extended=MORE, sign=True))

    async def main() -> None:
        async with httpx.AsyncClient(timeout=10) as http:
            card = await A2ACardResolver(http, server.url).get_agent_card()  # public
            assert card.capabilities.extended_agent_card
            assert card.security_schemes["bearer"].http_auth_security_scheme.scheme == "Bearer"
            assert list(card.security_requirements[0].schemes) == ["bearer"]
            config = ClientConfig(
                httpx_client=http,
                supported_protocol_bindings=[binding],
                grpc_channel_factory=grpc.aio.insecure_channel,
            )
            token = ISSUER.token("alice")
            client = ClientFactory(config).create(
                card, interceptors=[AuthInterceptor(_Token(token))]
            )
            with httpx.Client(timeout=10) as sync_http:
                extended = await client.get_extended_agent_card(
                    pb.GetExtendedAgentCardRequest(), signature_verifier=_verifier(sync_http)
                )
            assert extended.description == MORE["description"]
            assert [s.id for s in extended.skills][-1] == "members.ledger"
            assert "members.ledger" not in [s.id for s in card.skills]
            anonymous = ClientFactory(config).create(card)
            with pytest.raises(A2AClientError):
                await anonymous.get_extended_agent_card(pb.GetExtendedAgentCardRequest())

    run_asyncio(main)


def test_without_an_operator_extension_there_is_no_extended_card(
    thread_server: Any, tmp_path: Path
) -> None:
    server = thread_server(_app(tmp_path, auth=True, extended=None, sign=False))
    token = ISSUER.token("alice")
    with httpx.Client(timeout=10, headers={"Authorization": f"Bearer {token}"}) as http:
        card = http.get(f"{server.url}/.well-known/agent-card.json").json()
        assert card["capabilities"]["extendedAgentCard"] is False
        assert card["securitySchemes"] == {
            "bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}
        }
        r = http.post(
            f"{server.url}/agents/demo/a2a",
            json={"jsonrpc": "2.0", "id": 1, "method": "GetExtendedAgentCard", "params": {}},
            headers={"A2A-Version": "1.0"},
        )
        unauthenticated = httpx.post(
            f"{server.url}/agents/demo/a2a",
            json={"jsonrpc": "2.0", "id": 1, "method": "GetExtendedAgentCard", "params": {}},
            headers={"A2A-Version": "1.0"},
        )
    assert r.json()["error"]["code"] == -32007  # ExtendedAgentCardNotConfiguredError
    assert unauthenticated.status_code == 401


A2A_0_3_CLIENT = Path(__file__).parent / "a2a03" / "verify_card.py"


@pytest.mark.parametrize(
    ("path", "headers"),
    [
        ("/agents/demo/.well-known/agent.json", {}),
        ("/.well-known/agent-card.json", {"a2a-version": "0.3"}),
    ],
    ids=["agent.json", "A2A-Version-0.3"],
)
def test_the_0_3_card_is_signed_for_a2a_sdk_0_3_and_for_a_spec_verifier(
    thread_server: Any,
    tmp_path: Path,
    a2a_sdk_0_3_python: Path,
    path: str,
    headers: dict[str, str],
) -> None:
    server = thread_server(_app(tmp_path, auth=True, extended=MORE, sign=True))
    with httpx.Client(timeout=10) as http:
        raw = http.get(server.url + path, headers=headers).json()
        jwks = JWKS.parse(http.get(f"{server.url}/.well-known/jwks.json").json())
    assert raw["protocolVersion"] == "0.3.0" and len(raw["signatures"]) == 2
    verify_card(raw, jwks)  # RFC 8785 over the whole card, as served
    with pytest.raises(SignatureError):
        verify_card({**raw, "modelCapabilities": {}}, jwks)
    if headers:  # the resolver sends no A2A-Version: agent.json is the 0.3 client's path
        return
    ran = subprocess.run(
        [str(a2a_sdk_0_3_python), str(A2A_0_3_CLIENT), server.url, path],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    seen = json.loads(ran.stdout)
    assert seen["verified"] and seen["signatures"] == 2 and seen["changed_refused"]
    # The 0.3 shapes: a 1.0-shaped scheme reads as mutualTLS to this client.
    assert seen["scheme"] == {"type": "http", "scheme": "Bearer"}
    assert seen["security"] == [{"bearer": []}] and seen["extended"] is True
