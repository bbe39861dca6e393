"""Signed A2A agent cards on uamp_asgi, configured as ``uamp serve --a2a-sign-cards``, checked
by a2a-sdk's own verifier (the key fetched from the signature's ``jku``) and by uamp's."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fastapi
import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.client.auth import AuthInterceptor
from a2a.client.auth.credentials import CredentialService
from a2a.client.client import ClientCallContext
from a2a.client.errors import A2AClientError
from a2a.types import a2a_pb2 as pb
from a2a.utils.signing import InvalidSignaturesError, create_signature_verifier
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from google.protobuf import json_format
from jwt import PyJWK

import uamp_asgi
from tests._support.agents import run_asyncio
from tests._support.asgi import uvicorn_server
from uamp_asgi.responders import function_agent
from uamp_proto.adapters import a2a_card
from uamp_proto.card_signing import verify_card
from uamp_proto.jose import JWKS, SignatureError, verify_detached
from uamp_proto.jose import b64url_decode as _b64
from uamp_trio.asgi_options import serve_options

from .test_uamp_ws import echo

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def key_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("keys") / "envelope.pem"
    path.write_bytes(
        ed25519.Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return path


@pytest.fixture(scope="module")
def mounted(key_file: Path) -> Iterator[str]:
    """A FastAPI app with uamp_asgi at ``/agents``, configured by uamp serve's flags."""
    options = serve_options(["--a2a-sign-cards", "--envelope-key", str(key_file)])
    api = fastapi.FastAPI()
    api.mount("/agents", uamp_asgi.app(function_agent(echo), config=uamp_asgi.Config(**options)))
    with uvicorn_server(api) as url:
        yield url


def _verifier(http: httpx.Client) -> Any:
    """a2a-sdk's verifier; the key is the JWKS entry the signature's jku and kid name."""

    def key_provider(kid: str | None, jku: str | None) -> PyJWK:
        assert jku is not None and jku.endswith("/.well-known/jwks.json")
        [jwk] = [k for k in http.get(jku).json()["keys"] if k.get("kid") == kid]
        return PyJWK(jwk)

    return create_signature_verifier(key_provider, ["EdDSA", "ES256"])


def test_the_card_verifies_with_a2a_sdks_verifier_and_a_changed_one_does_not(
    mounted: str,
) -> None:
    card_url = f"{mounted}/agents/echo/.well-known/agent-card.json"
    with httpx.Client(timeout=10) as http:
        verify = _verifier(http)
        raw = http.get(card_url).json()
        card = json_format.ParseDict(raw, pb.AgentCard(), ignore_unknown_fields=False)
        verify(card)  # raises unless one signature verifies
        [signature] = raw["signatures"]
        header = json.loads(_b64(signature["protected"]))
        assert header["alg"] == "EdDSA" and header["typ"] == "JOSE"
        # The jku is the JWKS beside the card, below the mount point.
        assert header["jku"] == f"{mounted}/agents/echo/.well-known/jwks.json"
        jwks = JWKS.parse(http.get(header["jku"]).json())
        verify_card(raw, jwks)  # and uamp's own check agrees
        changed = {**raw, "description": "something else"}
        with pytest.raises(InvalidSignaturesError):
            verify(json_format.ParseDict(changed, pb.AgentCard()))
        with pytest.raises(SignatureError):
            verify_card(changed, jwks)

    async def resolve() -> None:  # the SDK's resolver checks it as it fetches it
        async with httpx.AsyncClient(timeout=10) as ahttp:
            with httpx.Client(timeout=10) as sync_http:
                resolved = await A2ACardResolver(ahttp, f"{mounted}/agents/echo").get_agent_card(
                    signature_verifier=_verifier(sync_http)
                )
        assert resolved.name == "echo" and len(resolved.signatures) == 1

    run_asyncio(resolve)


def test_the_0_3_card_carries_a_signature_a2a_sdk_0_3_can_check(mounted: str) -> None:
    with httpx.Client(timeout=10) as http:
        raw = http.get(f"{mounted}/agents/echo/.well-known/agent.json").json()
        first, second = raw["signatures"]
        jwks = JWKS.parse(http.get(json.loads(_b64(first["protected"]))["jku"]).json())
    verify_card(raw, jwks)
    # The second covers what a2a-sdk 0.3 reads of the card (its own canonical form).
    detached = f"{second['protected']}..{second['signature']}"
    verify_detached(detached, a2a_card.sdk_0_3_payload(raw), jwks, {"EdDSA"}, SignatureError)
    with pytest.raises(SignatureError):
        changed = a2a_card.sdk_0_3_payload({**raw, "name": "other"})
        verify_detached(detached, changed, jwks, {"EdDSA"}, SignatureError)


def test_without_the_flag_cards_are_unsigned_and_there_is_no_jwks() -> None:
    app = uamp_asgi.app(function_agent(echo), config=uamp_asgi.Config(**serve_options([])))
    with uvicorn_server(app) as url:
        card = httpx.get(f"{url}/agents/echo/.well-known/agent-card.json").json()
        assert "signatures" not in card
        assert httpx.get(f"{url}/.well-known/jwks.json").status_code == 404


MORE = {
    "description": "The echo agent, with what members may ask for.",
    "skills": [
        {
            "id": "members.ledger",
            "name": "ledger",
            "description": "Reads the members' ledger.",
            "tags": ["members"],
        }
    ],
}


@pytest.fixture(scope="module")
def members(key_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Signed cards, API keys and an extended card, by uamp serve's flags, mounted at /agents."""
    more = tmp_path_factory.mktemp("card") / "more.json"
    more.write_text(json.dumps(MORE))
    flags = ["--a2a-sign-cards", "--envelope-key", str(key_file), "--api-key", "alice:sk-alice"]
    options = serve_options([*flags, "--a2a-extended-card", str(more)])
    api = fastapi.FastAPI()
    api.mount("/agents", uamp_asgi.app(function_agent(echo), config=uamp_asgi.Config(**options)))
    with uvicorn_server(api) as url:
        yield url


class _Token(CredentialService):
    async def get_credentials(self, scheme: str, context: ClientCallContext | None) -> str | None:
        return "sk-alice" if scheme == "bearer" else None


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
def test_the_extended_card_with_the_sdks_auth_interceptor(members: str, binding: str) -> None:
    async def main() -> None:
        async with httpx.AsyncClient(timeout=10) as http:
            base = f"{members}/agents/echo"
            card = await A2ACardResolver(http, base).get_agent_card()  # public
            assert card.capabilities.extended_agent_card
            assert list(card.security_requirements[0].schemes) == ["bearer"]
            config = ClientConfig(httpx_client=http, supported_protocol_bindings=[binding])
            client = ClientFactory(config).create(card, interceptors=[AuthInterceptor(_Token())])
            with httpx.Client(timeout=10) as sync_http:
                extended = await client.get_extended_agent_card(
                    pb.GetExtendedAgentCardRequest(), signature_verifier=_verifier(sync_http)
                )
            assert extended.description == MORE["description"]
            assert [s.id for s in extended.skills][-1] == "members.ledger"
            assert "members.ledger" not in [s.id for s in card.skills]
            assert extended.supported_interfaces[0].url == f"{base}/a2a"
            anonymous = ClientFactory(config).create(card)
            with pytest.raises(A2AClientError):
                await anonymous.get_extended_agent_card(pb.GetExtendedAgentCardRequest())

    run_asyncio(main)


def test_without_an_extension_there_is_no_extended_card() -> None:
    options = serve_options(["--api-key", "alice:sk-alice"])
    app = uamp_asgi.app(function_agent(echo), config=uamp_asgi.Config(**options))
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "GetExtendedAgentCard", "params": {}}
    with uvicorn_server(app) as url:
        headers = {"Authorization": "Bearer sk-alice", "A2A-Version": "1.0"}
        card = httpx.get(f"{url}/agents/echo/.well-known/agent-card.json").json()
        refused = httpx.post(f"{url}/agents/echo/a2a", json=rpc, headers=headers)
        rest = httpx.get(f"{url}/agents/echo/a2a/extendedAgentCard", headers=headers)
        anonymous = httpx.post(f"{url}/agents/echo/a2a", json=rpc, headers={"A2A-Version": "1.0"})
    assert card["capabilities"]["extendedAgentCard"] is False
    assert refused.json()["error"]["code"] == -32007  # ExtendedAgentCardNotConfiguredError
    assert rest.status_code == 400
    assert anonymous.status_code == 401
