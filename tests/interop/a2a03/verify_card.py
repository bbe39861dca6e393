"""Run by a throwaway virtualenv's python with a2a-sdk 0.3: resolve a card, check its signatures.

Usage: ``python verify_card.py BASE_URL CARD_PATH``. Prints one JSON object:
whether the SDK's resolver with its signature verifier accepted the card as
served, whether the verifier refused a copy with a changed description, and
what the SDK read of the card's security.
"""

from __future__ import annotations

import asyncio
import json
import sys

import httpx
from a2a.client import A2ACardResolver
from a2a.utils.signing import SignatureVerificationError, create_signature_verifier
from jwt import PyJWK


async def main(base: str, path: str) -> dict[str, object]:
    async with httpx.AsyncClient(timeout=10) as http:
        keys: dict[str, object] = {}

        def key_provider(kid: str | None, jku: str | None) -> PyJWK:
            assert jku is not None, "the signature names its JWKS"
            [jwk] = [k for k in keys[jku]["keys"] if k.get("kid") == kid]  # type: ignore[index]
            return PyJWK(jwk)

        raw = (await http.get(base + path)).json()
        for signature in raw.get("signatures", []):
            header = json.loads(_b64(signature["protected"]))
            keys[header["jku"]] = (await http.get(header["jku"])).json()
        verify = create_signature_verifier(key_provider, ["EdDSA", "ES256"])
        card = await A2ACardResolver(http, base, path).get_agent_card(signature_verifier=verify)
        changed = card.model_copy(update={"description": "something else"})
        try:
            verify(changed)
            refused = False
        except SignatureVerificationError:
            refused = True
        scheme = card.security_schemes["bearer"].root if card.security_schemes else None
        return {
            "verified": True,
            "signatures": len(card.signatures or []),
            "changed_refused": refused,
            "scheme": scheme.model_dump(mode="json", exclude_none=True) if scheme else None,
            "security": card.security,
            "extended": card.supports_authenticated_extended_card,
        }


def _b64(text: str) -> bytes:
    import base64

    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2]))))
