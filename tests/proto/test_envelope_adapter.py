"""UAMP events onto spec 003 delta frames, envelope bodies onto user messages."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.adapters.envelope import (
    BodyError,
    DeltaEncoder,
    EnvelopeRefused,
    read_error,
    user_message,
)
from uamp_proto.envelope import (
    BACKEND_BUSY,
    Body,
    DeltaType,
    Envelope,
    Intent,
)
from uamp_proto.jose import read_header
from uamp_proto.signing import issue_cap_token, sign_envelope, verify_cap_token


def _env(body: Body) -> Envelope:
    return Envelope(
        id="urn:uuid:11111111-1111-4111-8111-111111111111",
        ts="2025-07-10T10:00:00Z",
        from_="did:web:client",
        to=("did:web:calc",),
        intent=Intent.ASK,
        body=body,
    )


def test_the_encoder_maps_each_event_kind() -> None:
    enc = DeltaEncoder()
    usage = ty.UsageStats(input_tokens=1, output_tokens=2, total_tokens=3)
    rows = [
        (ev.ResponseCreated(response_id="r"), None),
        (ev.ResponseDelta(delta=ty.DeltaText(text="he")), (DeltaType.CHUNK, {"text": "he"})),
        (ev.ResponseDelta(delta=ty.DeltaText(text="y")), (DeltaType.CHUNK, {"text": "y"})),
        (ev.Thinking(content="hmm"), (DeltaType.CHUNK, {"thinking": "hmm"})),
    ]
    for event, frame in rows:
        assert enc.feed(event) == frame
    progress = enc.feed(ev.Progress(target="tool", stage="running"))
    assert progress is not None and progress[0] is DeltaType.PROGRESS
    assert progress[1]["event"]["type"] == "progress"
    done = enc.feed(
        ev.ResponseDone(response=ty.ResponseOutput(status="completed", output=[], usage=usage))
    )
    assert done is not None and done[0] is DeltaType.DONE
    assert done[1]["text"] == "hey" and done[1]["usage"]["total_tokens"] == 3
    assert enc.feed(ev.ResponseCancelled()) == (DeltaType.CANCEL, {"text": "hey"})
    failed = enc.feed(ev.ResponseErrorEvent(error=ty.ErrorInfo(code="x", message="m")))
    assert failed == (DeltaType.ERROR, {"code": "x", "message": "m"})


@pytest.mark.parametrize(
    "body",
    [
        Body(type="image/png", content="AAAA"),
        Body(type="text/plain", content="x", encoding="latin-1"),
        Body(type="text/plain", content="x", compression="gzip"),
    ],
)
def test_bodies_the_agent_cannot_take_are_refused(body: Body) -> None:
    with pytest.raises(BodyError):
        user_message(_env(body))


def test_a_text_body_is_the_user_message() -> None:
    message = user_message(_env(Body(type="text/markdown; charset=utf-8", content="# hi")))
    assert (message.role, message.content) == ("user", "# hi")


def test_an_error_body_round_trips() -> None:
    refused = EnvelopeRefused(BACKEND_BUSY, "busy", retry_after=3)
    assert read_error(_env(refused.body())) == ("5.04", "busy", True)


def test_embed_jwk_puts_the_public_key_in_the_protected_header() -> None:
    key = ed25519.Ed25519PrivateKey.generate()
    signed = sign_envelope(_env(Body(type="text/plain", content="x")), key, embed_jwk=True)
    assert signed.sig is not None
    header = read_header(signed.sig.split("..")[0])
    assert header["jwk"]["kty"] == "OKP" and "d" not in header["jwk"]


def test_a_cap_token_may_be_checked_against_several_audiences() -> None:
    key = ed25519.Ed25519PrivateKey.generate()
    token = issue_cap_token({}, key, "https://h/agents/a", "ask", 2_000)
    claims = verify_cap_token(
        token, key, audience=["a", "https://h/agents/a"], required_scope="ask", now=1_000
    )
    assert claims["aud"] == "https://h/agents/a"
