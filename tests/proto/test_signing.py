"""Signatures: detached envelope JWS, capability tokens, response JWTs, JWKS.

Keys are generated here, in the tests (the library generates none).
"""

from __future__ import annotations

import base64
import hashlib
import hmac as hmac_mod
import json
from typing import Any

import attrs
import jwt
import orjson
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from hypothesis import given, settings
from hypothesis import strategies as st
from jwt.algorithms import ECAlgorithm

from uamp_proto.envelope import (
    UNAUTHENTICATED,
    UNAUTHORIZED,
    Body,
    Envelope,
    decode_envelope,
    encode_envelope,
    envelope_sha256,
)
from uamp_proto.jose import _DeterministicES256, b64url_decode, sign_compact
from uamp_proto.signing import (
    JWK,
    JWKS,
    CapTokenError,
    JWKSError,
    Reason,
    ResponseSigner,
    SignatureError,
    algorithm_for,
    issue_cap_token,
    load_private_key,
    public_jwk,
    request_hash,
    response_hash,
    response_signature_event,
    sign_envelope,
    sign_response,
    verify_cap_token,
    verify_envelope,
    verify_response_signature,
)

ID = "urn:uuid:0b6c1d3e-4f5a-4b6c-8d7e-9f0a1b2c3d4e"
AGENT = "did:web:worker.example"


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64json(obj: Any) -> str:
    return b64(json.dumps(obj).encode())


@pytest.fixture(scope="module")
def keys() -> dict[str, Any]:
    return {
        "ES256": ec.generate_private_key(ec.SECP256R1()),
        "ES256b": ec.generate_private_key(ec.SECP256R1()),
        "EdDSA": ed25519.Ed25519PrivateKey.generate(),
        "EdDSAb": ed25519.Ed25519PrivateKey.generate(),
        "RS256": rsa.generate_private_key(public_exponent=65537, key_size=2048),
        "RS256b": rsa.generate_private_key(public_exponent=65537, key_size=2048),
        "P384": ec.generate_private_key(ec.SECP384R1()),
    }


def envelope(**changes: Any) -> Envelope:
    env = Envelope(
        id=ID,
        ts="2025-07-10T13:37:05Z",
        from_="did:web:client.example",
        to=[AGENT],
        intent="ask",
        stream_id="str-42",
        body=Body(type="text/markdown", content="# Draw me a sheep…"),
        ext={"x-trace": "b3:1", "n": [1, {"b": 2, "a": 1}]},
    )
    return attrs.evolve(env, **changes) if changes else env


def reason_of(exc_info: pytest.ExceptionInfo[Any]) -> Reason:
    reason: Reason = exc_info.value.reason
    return reason


ENVELOPE_ALGS = ["ES256", "EdDSA"]


# --- known answers for the JWS layer ---------------------------------------------------


def test_eddsa_jws_matches_rfc_8037_a4() -> None:
    # RFC 8037 Appendix A.1/A.4: the Ed25519 key and its JWS of a fixed text.
    d = b64url_decode("nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A")
    key = ed25519.Ed25519PrivateKey.from_private_bytes(d)
    assert public_jwk(key)["x"] == "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"
    token = sign_compact(b"Example of Ed25519 signing", key, "EdDSA", None, None)
    assert token == (
        "eyJhbGciOiJFZERTQSJ9.RXhhbXBsZSBvZiBFZDI1NTE5IHNpZ25pbmc."
        "hgyY0il_MGCjP0JzlnLWG1PPOt7-09PGcvMg3AIbQR6dWbhijcNR4ki4iylGjg5BhVsPt9g7sVvpAr_MuM0KAg"
    )


def test_es256_signs_deterministically_per_rfc_6979_a25() -> None:
    # RFC 6979 A.2.5, P-256 with SHA-256, message "sample".
    x = int("C9AFA9D845BA75166B5C215767B1D6934E50C3DB36E89B127B8A622B120F6721", 16)
    key = ec.derive_private_key(x, ec.SECP256R1())
    sig = _DeterministicES256(ECAlgorithm.SHA256, ec.SECP256R1).sign(b"sample", key)
    assert sig.hex().upper() == (
        "EFD48B2AACB6A8FD1140DD9CD45E81D69D2C877B56AAF991C34D0EA84EAF3716"
        "F7CB1C942D657C41D436C7A1B6E29F65F3E900DBB9AFF4064DC4AB2F843ACDA8"
    )


# --- envelopes ----------------------------------------------------------------------------


@pytest.mark.parametrize("alg", ENVELOPE_ALGS)
def test_envelope_round_trip(keys: dict[str, Any], alg: str) -> None:
    key = keys[alg]
    signed = sign_envelope(envelope(), key, kid="k1")
    assert signed.sig is not None
    header_b64, middle, _ = signed.sig.split(".")
    assert middle == ""  # detached
    assert orjson.loads(b64url_decode(header_b64)) == {"alg": alg, "kid": "k1"}
    assert attrs.evolve(signed, sig=None) == envelope()  # nothing else changed
    verify_envelope(signed, key.public_key())
    verify_envelope(signed, key)  # a private key is reduced to its public half
    verify_envelope(signed, JWKS.from_keys((keys["RS256"], "other"), (key, "k1")))
    # Over the wire and back.
    verify_envelope(decode_envelope(encode_envelope(signed)), key.public_key())
    # Signing is deterministic, and re-signing replaces the old sig.
    assert sign_envelope(signed, key, kid="k1").sig == signed.sig


@pytest.mark.parametrize("alg", ENVELOPE_ALGS)
def test_envelope_sig_is_a_standard_jws_over_the_sha256_payload(
    keys: dict[str, Any], alg: str
) -> None:
    signed = sign_envelope(envelope(), keys[alg])
    assert signed.sig is not None
    header, _, signature = signed.sig.split(".")
    payload = b'{"sha256":"' + envelope_sha256(envelope()).encode() + b'"}'
    # pyjwt's plain API verifies it once the payload is put back (RFC 7515 App. F).
    out = jwt.api_jws.decode_complete(
        f"{header}.{b64(payload)}.{signature}", keys[alg].public_key(), algorithms=[alg]
    )
    assert out["payload"] == payload


@pytest.mark.parametrize("alg", ENVELOPE_ALGS)
def test_a_signature_made_elsewhere_verifies(keys: dict[str, Any], alg: str) -> None:
    # Another implementation: canonical JSON by hand, pyjwt's attached JWS,
    # then the payload cut out.
    env = envelope(ext=None, stream_id=None)
    canonical = (
        '{"body":{"content":"# Draw me a sheep…","type":"text/markdown"},'
        '"from":"did:web:client.example","id":"' + ID + '","intent":"ask",'
        '"to":["did:web:worker.example"],"ts":"2025-07-10T13:37:05Z"}'
    )
    digest = hashlib.sha256(canonical.encode()).hexdigest()
    token = jwt.api_jws.encode(json.dumps({"sha256": digest}).encode(), keys[alg], algorithm=alg)
    # json.dumps wrote '{"sha256": "..."}' with a space: not the canonical
    # payload, so that signature must fail ...
    h, _, s = token.split(".")
    with pytest.raises(SignatureError) as info:
        verify_envelope(attrs.evolve(env, sig=f"{h}..{s}"), keys[alg])
    assert reason_of(info) is Reason.BAD_SIGNATURE
    # ... and the canonical payload passes.
    token = jwt.api_jws.encode(('{"sha256":"' + digest + '"}').encode(), keys[alg], algorithm=alg)
    h, _, s = token.split(".")
    verify_envelope(attrs.evolve(env, sig=f"{h}..{s}"), keys[alg])


TAMPERS = [
    ("body content", {"body": Body(type="text/markdown", content="# Draw me a sheep!")}),
    ("body type", {"body": Body(type="text/plain", content="# Draw me a sheep…")}),
    (
        "body default made explicit",
        {"body": Body(type="text/markdown", content="# Draw me a sheep…", encoding="utf-8")},
    ),
    ("recipient", {"to": ["did:web:evil.example"]}),
    ("timestamp", {"ts": "2025-07-10T13:37:06Z"}),
    ("intent", {"intent": "cancel"}),
    ("ext", {"ext": {"x-trace": "b3:2", "n": [1, {"b": 2, "a": 1}]}}),
    ("ext removed", {"ext": None}),
    ("delta window added", {"delta_window": 64}),
    ("cap token added", {"cap_token": "eyJ.a.b"}),
]


@pytest.mark.parametrize("alg", ENVELOPE_ALGS)
@pytest.mark.parametrize(("what", "change"), TAMPERS, ids=[t[0] for t in TAMPERS])
def test_any_change_after_signing_is_caught(
    keys: dict[str, Any], alg: str, what: str, change: dict[str, Any]
) -> None:
    signed = sign_envelope(envelope(), keys[alg])
    with pytest.raises(SignatureError) as info:
        verify_envelope(attrs.evolve(signed, **change), keys[alg].public_key())
    assert reason_of(info) is Reason.BAD_SIGNATURE
    assert info.value.error_code is UNAUTHENTICATED


@pytest.mark.parametrize("alg", ENVELOPE_ALGS)
def test_one_byte_changed_on_the_wire_is_caught(keys: dict[str, Any], alg: str) -> None:
    wire = encode_envelope(sign_envelope(envelope(), keys[alg]))
    assert wire.count(b"sheep") == 1
    tampered = wire.replace(b"sheep", b"sheeP")
    with pytest.raises(SignatureError) as info:
        verify_envelope(decode_envelope(tampered), keys[alg])
    assert reason_of(info) is Reason.BAD_SIGNATURE
    verify_envelope(decode_envelope(wire), keys[alg])


def test_member_order_on_the_wire_does_not_matter(keys: dict[str, Any]) -> None:
    wire = encode_envelope(sign_envelope(envelope(), keys["EdDSA"]))
    obj = orjson.loads(wire)
    reordered = json.dumps(dict(reversed(list(obj.items()))), indent=3)
    verify_envelope(decode_envelope(reordered), keys["EdDSA"])


@pytest.mark.parametrize(("alg", "other"), [("ES256", "ES256b"), ("EdDSA", "EdDSAb")])
def test_another_key_of_the_same_type_fails(keys: dict[str, Any], alg: str, other: str) -> None:
    signed = sign_envelope(envelope(), keys[alg])
    with pytest.raises(SignatureError) as info:
        verify_envelope(signed, keys[other].public_key())
    assert reason_of(info) is Reason.BAD_SIGNATURE


@pytest.mark.parametrize(
    ("alg", "other"), [("ES256", "EdDSA"), ("EdDSA", "ES256"), ("ES256", "RS256")]
)
def test_a_key_of_another_type_is_the_wrong_key(keys: dict[str, Any], alg: str, other: str) -> None:
    signed = sign_envelope(envelope(), keys[alg])
    with pytest.raises(SignatureError) as info:
        verify_envelope(signed, keys[other].public_key())
    assert reason_of(info) is Reason.WRONG_KEY


def test_jwks_lookup_by_kid(keys: dict[str, Any]) -> None:
    signed = sign_envelope(envelope(), keys["ES256"], kid="a")
    jwks = JWKS.from_keys((keys["ES256b"], "b"), (keys["EdDSA"], "c"))
    with pytest.raises(SignatureError) as info:
        verify_envelope(signed, jwks)
    assert reason_of(info) is Reason.UNKNOWN_KID
    # The kid names a key of another type.
    with pytest.raises(SignatureError) as info:
        verify_envelope(signed, JWKS.from_keys((keys["EdDSA"], "a")))
    assert reason_of(info) is Reason.WRONG_KEY
    # The kid names a key of the right type that did not sign it.
    with pytest.raises(SignatureError) as info:
        verify_envelope(signed, JWKS.from_keys((keys["ES256b"], "a")))
    assert reason_of(info) is Reason.BAD_SIGNATURE


def test_jwks_without_kid_needs_exactly_one_candidate(keys: dict[str, Any]) -> None:
    signed = sign_envelope(envelope(), keys["ES256"])  # no kid
    verify_envelope(signed, JWKS.from_keys((keys["ES256"], "a"), (keys["EdDSA"], "b")))
    with pytest.raises(SignatureError) as info:
        verify_envelope(signed, JWKS.from_keys((keys["ES256"], "a"), (keys["ES256b"], "b")))
    assert reason_of(info) is Reason.UNKNOWN_KID


def _forged(header: dict[str, Any], signature: bytes = b"\x00" * 64) -> str:
    return f"{b64json(header)}..{b64(signature)}"


@pytest.mark.parametrize(
    "header",
    [{"alg": "none"}, {"alg": "None"}, {"alg": "HS256"}, {"alg": "RS256"}, {"alg": "ES384"},
     {"alg": ""}, {"alg": None}, {}],
)  # fmt: skip
def test_algorithms_other_than_es256_and_eddsa_are_refused(
    keys: dict[str, Any], header: dict[str, Any]
) -> None:
    env = envelope(sig=_forged(header))
    for key in (keys["ES256"], keys["EdDSA"]):
        with pytest.raises(SignatureError) as info:
            verify_envelope(env, key.public_key())
        assert reason_of(info) is Reason.BAD_ALG


def test_unsigned_alg_none_with_empty_signature_is_refused(keys: dict[str, Any]) -> None:
    env = envelope(sig=b64json({"alg": "none"}) + "..")
    with pytest.raises(SignatureError) as info:
        verify_envelope(env, keys["EdDSA"])
    assert reason_of(info) is Reason.BAD_ALG
    env = envelope(sig=b64json({"alg": "EdDSA"}) + "..")
    with pytest.raises(SignatureError) as info:
        verify_envelope(env, keys["EdDSA"])
    assert reason_of(info) is Reason.MALFORMED  # no signature at all


def test_hs256_made_with_the_public_key_is_refused(keys: dict[str, Any]) -> None:
    # The classic confusion: an HMAC keyed with the verifier's public key.
    pem = (
        keys["ES256"]
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    payload = b'{"sha256":"' + envelope_sha256(envelope()).encode() + b'"}'
    header = b64json({"alg": "HS256"})
    mac = hmac_mod.new(pem, f"{header}.{b64(payload)}".encode(), "sha256").digest()
    with pytest.raises(SignatureError) as info:
        verify_envelope(envelope(sig=f"{header}..{b64(mac)}"), keys["ES256"].public_key())
    assert reason_of(info) is Reason.BAD_ALG


@pytest.mark.parametrize(
    "sig",
    ["", "abc", "a.b.c", "a..b..c", "a...b", "!!..abc", "e30..a+b", "bm90IGpzb24..AAAA",
     f"{b64json([1])}..AAAA", f"{b64json({'alg': 'EdDSA'})}..A"],
)  # fmt: skip
def test_malformed_sigs(keys: dict[str, Any], sig: str) -> None:
    with pytest.raises(SignatureError) as info:
        verify_envelope(envelope(sig=sig), keys["EdDSA"])
    assert reason_of(info) is Reason.MALFORMED, str(info.value)


def test_unsigned_envelope(keys: dict[str, Any]) -> None:
    with pytest.raises(SignatureError) as info:
        verify_envelope(envelope(), keys["EdDSA"])
    assert reason_of(info) is Reason.UNSIGNED


@pytest.mark.parametrize("alg", ["RS256", "P384"])
def test_envelopes_cannot_be_signed_with_other_keys(keys: dict[str, Any], alg: str) -> None:
    with pytest.raises(ValueError):
        sign_envelope(envelope(), keys[alg])
    with pytest.raises(TypeError):
        sign_envelope(envelope(), keys["EdDSA"].public_key())  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(
    content=st.text(min_size=1, max_size=40),
    index=st.integers(min_value=0),
    replacement=st.characters(exclude_categories=["Cs"]),
)
def test_changing_any_character_of_the_body_breaks_the_signature(
    content: str, index: int, replacement: str
) -> None:
    key = _HYPOTHESIS_KEY
    i = index % len(content)
    changed = content[:i] + replacement + content[i + 1 :]
    signed = sign_envelope(envelope(body=Body(type="text/plain", content=content)), key)
    verify_envelope(signed, key.public_key())
    tampered = attrs.evolve(signed, body=Body(type="text/plain", content=changed))
    if changed == content:
        verify_envelope(tampered, key.public_key())
    else:
        with pytest.raises(SignatureError):
            verify_envelope(tampered, key.public_key())


_HYPOTHESIS_KEY = ed25519.Ed25519PrivateKey.generate()


# --- capability tokens -----------------------------------------------------------------

NOW = 1_752_150_000
EXP = NOW + 300


@pytest.mark.parametrize("alg", ["ES256", "EdDSA", "RS256"])
def test_cap_token_round_trip(keys: dict[str, Any], alg: str) -> None:
    token = issue_cap_token(
        {"iss": "did:web:hub", "iat": NOW}, keys[alg], AGENT, "chat tools:read", EXP, kid="c1"
    )
    header = orjson.loads(b64url_decode(token.split(".")[0]))
    assert header == {"alg": alg, "kid": "c1", "typ": "JWT"}
    claims = verify_cap_token(
        token, keys[alg].public_key(), audience=AGENT, required_scope="tools:read", now=NOW
    )
    assert claims == {
        "iss": "did:web:hub",
        "iat": NOW,
        "aud": AGENT,
        "scope": "chat tools:read",
        "exp": EXP,
    }
    # pyjwt's own JWT API reads it too (with its real clock: EXP is in 2025,
    # so only the signature and audience are checked there).
    out = jwt.decode(
        token,
        keys[alg].public_key(),
        algorithms=[alg],
        audience=AGENT,
        options={"verify_exp": False, "verify_iat": False},
    )
    assert out == claims
    # The token travels in an envelope's cap_token.
    env = sign_envelope(envelope(cap_token=token), keys["EdDSA"])
    assert env.cap_token == token


@pytest.mark.parametrize(
    ("now", "leeway", "reason"),
    [
        (EXP, 0, Reason.EXPIRED),
        (EXP + 1, 0, Reason.EXPIRED),
        (EXP + 1, 5, None),
        (EXP - 1, 0, None),
        (NOW - 11, 0, Reason.NOT_YET_VALID),  # before nbf
        (NOW - 11, 2, None),
        (NOW - 10, 0, None),
    ],
)
def test_cap_token_times_follow_the_given_now(
    keys: dict[str, Any], now: int, leeway: int, reason: Reason | None
) -> None:
    token = issue_cap_token({"nbf": NOW - 10}, keys["EdDSA"], AGENT, "chat", EXP)
    check = {"audience": AGENT, "required_scope": "chat", "now": now, "leeway": leeway}
    if reason is None:
        verify_cap_token(token, keys["EdDSA"], **check)
    else:
        with pytest.raises(CapTokenError) as info:
            verify_cap_token(token, keys["EdDSA"], **check)
        assert reason_of(info) is reason
        assert info.value.error_code is UNAUTHENTICATED


def test_cap_token_issued_in_the_future(keys: dict[str, Any]) -> None:
    token = issue_cap_token({"iat": NOW + 60}, keys["ES256"], AGENT, "chat", EXP)
    with pytest.raises(CapTokenError) as info:
        verify_cap_token(token, keys["ES256"], audience=AGENT, required_scope="chat", now=NOW)
    assert reason_of(info) is Reason.NOT_YET_VALID


@pytest.mark.parametrize(
    ("aud", "audience", "ok"),
    [
        (AGENT, AGENT, True),
        ([AGENT, "did:web:other"], AGENT, True),
        (["did:web:other"], AGENT, False),
        ("did:web:worker.example.evil", AGENT, False),
    ],
)
def test_cap_token_audience(keys: dict[str, Any], aud: Any, audience: str, ok: bool) -> None:
    token = issue_cap_token({}, keys["EdDSA"], aud, "chat", EXP)
    if ok:
        verify_cap_token(token, keys["EdDSA"], audience=audience, required_scope="chat", now=NOW)
        return
    with pytest.raises(CapTokenError) as info:
        verify_cap_token(token, keys["EdDSA"], audience=audience, required_scope="chat", now=NOW)
    assert reason_of(info) is Reason.WRONG_AUDIENCE
    assert info.value.error_code is UNAUTHORIZED


@pytest.mark.parametrize(
    ("granted", "required", "ok"),
    [
        ("chat", "chat", True),
        ("chat tools:read", ["tools:read", "chat"], True),
        (["chat", "pay"], "pay", True),
        ("chat", "", True),
        ("chat", "tools:write", False),
        ("chat tools:read", "chat tools:write", False),
        ("chatty", "chat", False),
    ],
)
def test_cap_token_scope(keys: dict[str, Any], granted: Any, required: Any, ok: bool) -> None:
    token = issue_cap_token({}, keys["EdDSA"], AGENT, granted, EXP)
    args = {"audience": AGENT, "required_scope": required, "now": NOW}
    if ok:
        verify_cap_token(token, keys["EdDSA"], **args)
        return
    with pytest.raises(CapTokenError) as info:
        verify_cap_token(token, keys["EdDSA"], **args)
    assert reason_of(info) is Reason.MISSING_SCOPE
    assert info.value.error_code is UNAUTHORIZED
    assert "tools:write" in str(info.value) or "chat" in str(info.value)


def _jwt(key: Any, alg: str, claims: dict[str, Any]) -> str:
    return jwt.encode(claims, key, algorithm=alg)


def test_cap_token_without_exp_or_aud(keys: dict[str, Any]) -> None:
    key = keys["ES256"]
    for claims in ({"aud": AGENT, "scope": "chat"}, {"exp": EXP, "scope": "chat"}):
        with pytest.raises(CapTokenError) as info:
            verify_cap_token(
                _jwt(key, "ES256", claims), key, audience=AGENT, required_scope="chat", now=NOW
            )
        assert reason_of(info) is Reason.MISSING_CLAIM
    # No scope claim at all: nothing granted.
    token = _jwt(key, "ES256", {"aud": AGENT, "exp": EXP})
    verify_cap_token(token, key, audience=AGENT, required_scope="", now=NOW)
    with pytest.raises(CapTokenError) as info:
        verify_cap_token(token, key, audience=AGENT, required_scope="chat", now=NOW)
    assert reason_of(info) is Reason.MISSING_SCOPE


def test_cap_token_forgeries(keys: dict[str, Any]) -> None:
    key = keys["EdDSA"]
    good = issue_cap_token({}, key, AGENT, "chat", EXP)
    header, _, signature = good.split(".")
    more = b64(canonical := orjson.dumps({"aud": AGENT, "exp": EXP, "scope": "chat admin"}))
    assert canonical
    check = {"audience": AGENT, "required_scope": "chat", "now": NOW}
    cases = {
        Reason.BAD_SIGNATURE: f"{header}.{more}.{signature}",  # swapped payload
        Reason.BAD_ALG: f"{b64json({'alg': 'none'})}.{more}.",
        Reason.MALFORMED: f"{header}.{more}",
    }
    for reason, token in cases.items():
        with pytest.raises(CapTokenError) as info:
            verify_cap_token(token, key, **check)
        assert reason_of(info) is reason, token
    with pytest.raises(CapTokenError) as info:
        verify_cap_token(good, keys["EdDSAb"], **check)
    assert reason_of(info) is Reason.BAD_SIGNATURE
    with pytest.raises(CapTokenError) as info:
        verify_cap_token(_jwt(b"k" * 32, "HS256", {"aud": AGENT, "exp": EXP}), key, **check)
    assert reason_of(info) is Reason.BAD_ALG


def test_issue_cap_token_refuses_bad_arguments(keys: dict[str, Any]) -> None:
    key = keys["ES256"]
    with pytest.raises(ValueError, match=r"aud"):
        issue_cap_token({"aud": "x"}, key, AGENT, "chat", EXP)
    with pytest.raises(ValueError, match=r"scope"):
        issue_cap_token({}, key, AGENT, [], EXP)
    with pytest.raises(ValueError, match=r"scope"):
        issue_cap_token({}, key, AGENT, ["a b"], EXP)
    with pytest.raises(ValueError, match=r"aud"):
        issue_cap_token({}, key, [], "chat", EXP)
    with pytest.raises(ValueError, match=r"exp"):
        issue_cap_token({}, key, AGENT, "chat", "soon")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"plain JSON"):
        issue_cap_token({"x": {1, 2}}, key, AGENT, "chat", EXP)
    with pytest.raises(ValueError):
        issue_cap_token({}, keys["P384"], AGENT, "chat", EXP)


# --- response signatures ---------------------------------------------------------------

REQUEST = b'{"model":"demo","messages":[{"role":"user","content":"hi"}]}'
TEXT = "The weather in Paris is 22°C and sunny."


def test_hashes_are_sha256_hex() -> None:
    assert response_hash(TEXT) == hashlib.sha256(TEXT.encode()).hexdigest()
    assert request_hash(REQUEST) == hashlib.sha256(REQUEST).hexdigest()
    assert request_hash(REQUEST.decode()) == request_hash(REQUEST)
    assert response_hash("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def test_response_signature_round_trip(keys: dict[str, Any]) -> None:
    key = keys["RS256"]
    token = sign_response(TEXT, REQUEST, key, "agent-1", NOW)
    assert orjson.loads(b64url_decode(token.split(".")[0])) == {
        "alg": "RS256",
        "kid": "agent-1",
        "typ": "JWT",
    }
    claims = verify_response_signature(token, TEXT, REQUEST, key.public_key())
    assert claims == {
        "response_hash": response_hash(TEXT),
        "request_hash": request_hash(REQUEST),
        "iat": NOW,
    }
    jwks = JWKS.parse(JWKS.from_keys((keys["RS256b"], "old"), (key, "agent-1")).to_json())
    assert verify_response_signature(token, TEXT, REQUEST, jwks) == claims
    # RS256 PKCS #1 v1.5 is deterministic.
    assert sign_response(TEXT, REQUEST, key, "agent-1", NOW) == token
    # A plain JWT library agrees.
    assert jwt.decode(token, key.public_key(), algorithms=["RS256"]) == claims


def test_response_signature_detects_changes(keys: dict[str, Any]) -> None:
    key = keys["RS256"]
    token = sign_response(TEXT, REQUEST, key, "agent-1", NOW)
    for text, request in ((TEXT + " ", REQUEST), (TEXT, REQUEST.replace(b"hi", b"ho"))):
        with pytest.raises(SignatureError) as info:
            verify_response_signature(token, text, request, key)
        assert reason_of(info) is Reason.TAMPERED
    with pytest.raises(SignatureError) as info:
        verify_response_signature(token, TEXT, REQUEST, keys["RS256b"])
    assert reason_of(info) is Reason.BAD_SIGNATURE
    with pytest.raises(SignatureError) as info:
        verify_response_signature(token, TEXT, REQUEST, JWKS.from_keys((key, "other")))
    assert reason_of(info) is Reason.UNKNOWN_KID


def test_response_signature_refuses_other_algorithms(keys: dict[str, Any]) -> None:
    claims = {"response_hash": response_hash(TEXT), "request_hash": request_hash(REQUEST)}
    for alg in ("ES256", "EdDSA"):
        with pytest.raises(SignatureError) as info:
            verify_response_signature(_jwt(keys[alg], alg, claims), TEXT, REQUEST, keys[alg])
        assert reason_of(info) is Reason.BAD_ALG
    with pytest.raises(SignatureError) as info:
        verify_response_signature(
            f"{b64json({'alg': 'none'})}.{b64json(claims)}.", TEXT, REQUEST, keys["RS256"]
        )
    assert reason_of(info) is Reason.BAD_ALG
    # A valid RS256 JWT without the hash claims.
    with pytest.raises(SignatureError) as info:
        verify_response_signature(
            _jwt(keys["RS256"], "RS256", {"iat": NOW}), TEXT, REQUEST, keys["RS256"]
        )
    assert reason_of(info) is Reason.MISSING_CLAIM


def test_sign_response_needs_a_strong_rsa_key(keys: dict[str, Any]) -> None:
    for alg in ("ES256", "EdDSA"):
        with pytest.raises(ValueError, match=r"RS256"):
            sign_response(TEXT, REQUEST, keys[alg], None, NOW)
    weak = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    with pytest.raises(ValueError, match=r"2048"):
        sign_response(TEXT, REQUEST, weak, None, NOW)
    with pytest.raises(ValueError, match=r"now"):
        sign_response(TEXT, REQUEST, keys["RS256"], None, 1.5)  # type: ignore[arg-type]


def test_response_signer_uses_its_clock(keys: dict[str, Any]) -> None:
    signer = ResponseSigner(keys["RS256"], "agent-1", clock=lambda: NOW + 7)
    token = signer(TEXT, REQUEST)
    assert verify_response_signature(token, TEXT, REQUEST, signer.jwks())["iat"] == NOW + 7
    assert signer.jwks().to_dict()["keys"][0]["kid"] == "agent-1"
    with pytest.raises(ValueError):
        ResponseSigner(keys["EdDSA"], "x", clock=lambda: 0)


def test_response_signature_event_bytes() -> None:
    assert response_signature_event("eyJ.a.b") == (
        b'event: response_signature\ndata: {"signature":"eyJ.a.b"}\n\n'
    )


# --- JWK and JWKS ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("alg", "members"),
    [
        ("ES256", {"kty", "crv", "x", "y"}),
        ("EdDSA", {"kty", "crv", "x"}),
        ("RS256", {"kty", "n", "e"}),
    ],
)
def test_public_jwk_shapes_and_interop(keys: dict[str, Any], alg: str, members: set[str]) -> None:
    jwk = public_jwk(keys[alg], "k")
    assert set(jwk) == members | {"alg", "use", "kid"}
    assert jwk["alg"] == alg and jwk["use"] == "sig" and "d" not in jwk
    assert public_jwk(keys[alg].public_key(), "k") == jwk
    # pyjwt reads our JWK and verifies a signature made with the private key.
    token = _jwt(keys[alg], alg, {"a": 1})
    assert jwt.decode(token, jwt.PyJWK(jwk).key, algorithms=[alg]) == {"a": 1}
    # And ours reads it back to the same public key.
    parsed = JWKS.parse({"keys": [jwk]}).keys[0]
    assert parsed.kid == "k" and parsed.alg == alg
    assert public_jwk(parsed.key, "k") == jwk


def test_rsa_jwk_known_answer() -> None:
    # e = 65537 is "AQAB" in every JWK.
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = public_jwk(key)
    assert jwk["e"] == "AQAB"
    assert int.from_bytes(b64url_decode(jwk["n"]), "big") == key.public_key().public_numbers().n


def test_jwks_document_round_trip(keys: dict[str, Any]) -> None:
    jwks = JWKS.from_keys((keys["ES256"], "e"), (keys["EdDSA"], "o"), (keys["RS256"], "r"))
    doc = orjson.loads(jwks.to_json())
    assert [k["kid"] for k in doc["keys"]] == ["e", "o", "r"]
    again = JWKS.parse(jwks.to_json())
    assert again == JWKS.parse(json.dumps(doc)) and again.to_dict() == doc
    assert again.get("o") is not None and again.get("o").alg == "EdDSA"  # type: ignore[union-attr]
    assert again.get("zz") is None
    assert jwt.PyJWKSet.from_dict(doc)["r"].key_id == "r"


def test_jwks_parse_skips_keys_it_does_not_use(keys: dict[str, Any]) -> None:
    doc = {
        "keys": [
            {"kty": "OKP", "crv": "X25519", "x": "A" * 43},  # a key-agreement key
            {"kty": "EC-future", "x": "AAAA"},  # a type from the future
            {**public_jwk(keys["EdDSA"], "enc-key"), "use": "enc"},
            public_jwk(keys["EdDSA"], "sig-key"),
            {"kty": "EC", "crv": "P-384", "x": "AA", "y": "AA"},
        ]
    }
    assert [k.kid for k in JWKS.parse(doc).keys] == ["sig-key"]


@pytest.mark.parametrize(
    ("mutate", "words"),
    [
        (lambda k: {**k, "d": "AAAA"}, "private key material"),
        (lambda k: {**k, "x": "not*b64"}, "base64url"),
        (lambda k: {**k, "x": k["x"] + "="}, "base64url"),
        (lambda k: {**k, "x": b64(b"\x01" * 31)}, "32 bytes"),
        (lambda k: {**k, "alg": "ES256"}, "alg"),
        (lambda k: {**k, "kid": 5}, "kid"),
        (lambda k: {**k, "kty": 7}, "kty"),
    ],
)
def test_jwks_parse_refuses_bad_keys(keys: dict[str, Any], mutate: Any, words: str) -> None:
    jwk = mutate(public_jwk(keys["EdDSA"], "k"))
    with pytest.raises(JWKSError, match=r"^keys\[1\]: .*" + words):
        JWKS.parse({"keys": [public_jwk(keys["ES256"], "a"), jwk]})


def test_jwks_parse_refuses_weak_and_off_curve_keys(keys: dict[str, Any]) -> None:
    weak = rsa.generate_private_key(public_exponent=65537, key_size=1024).public_key()
    nums = weak.public_numbers()
    small = {"kty": "RSA", "n": b64(nums.n.to_bytes(128, "big")), "e": "AQAB"}
    with pytest.raises(JWKSError, match=r"1024 bits"):
        JWKS.parse({"keys": [small]})
    ec_jwk = public_jwk(keys["ES256"])
    y = b64url_decode(ec_jwk["y"])
    off = {**ec_jwk, "y": b64(bytes([y[0] ^ 1]) + y[1:])}
    with pytest.raises(JWKSError, match=r"not a valid EC"):
        JWKS.parse({"keys": [off]})


@pytest.mark.parametrize("doc", [b"nope", b"[]", b'{"keys": {}}', b'{"keys": [1]}'])
def test_jwks_parse_refuses_bad_documents(doc: bytes) -> None:
    with pytest.raises(JWKSError):
        JWKS.parse(doc)


def test_jwks_kids_are_unique(keys: dict[str, Any]) -> None:
    with pytest.raises(JWKSError, match=r"two keys"):
        JWKS.from_keys((keys["ES256"], "a"), (keys["EdDSA"], "a"))
    with pytest.raises(TypeError):
        JWK(key=keys["EdDSA"])  # a private key is not a JWKS member


def test_algorithm_for_and_pem_loading(keys: dict[str, Any]) -> None:
    assert [algorithm_for(keys[a]) for a in ("ES256", "EdDSA", "RS256")] == [
        "ES256",
        "EdDSA",
        "RS256",
    ]
    with pytest.raises(ValueError, match=r"P-256"):
        algorithm_for(keys["P384"])
    for alg in ("ES256", "EdDSA", "RS256"):
        pem = keys[alg].private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"pw"),
        )
        loaded = load_private_key(pem, b"pw")
        assert public_jwk(loaded) == public_jwk(keys[alg])
        with pytest.raises(ValueError, match=r"cannot read"):
            load_private_key(pem, b"wrong")
    with pytest.raises(ValueError, match=r"cannot read"):
        load_private_key(b"-----BEGIN NOTHING-----")
