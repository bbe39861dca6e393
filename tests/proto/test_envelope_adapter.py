"""UAMP events onto spec 003 delta frames, envelope bodies onto user messages."""

from __future__ import annotations

import base64
from typing import Any

import jiter
import orjson
import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519
from hypothesis import given
from hypothesis import strategies as st

from uamp_proto import events as ev
from uamp_proto import jsonpatch
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
        (ev.ResponseCreated(response_id="r"), []),
        (ev.ResponseDelta(delta=ty.DeltaText(text="he")), [(DeltaType.CHUNK, {"text": "he"})]),
        (ev.ResponseDelta(delta=ty.DeltaText(text="y")), [(DeltaType.CHUNK, {"text": "y"})]),
        (ev.Thinking(content="hmm"), [(DeltaType.CHUNK, {"thinking": "hmm"})]),
    ]
    for event, frames in rows:
        assert enc.feed(event) == frames
    [progress] = enc.feed(ev.Progress(target="tool", stage="running"))
    assert progress[0] is DeltaType.PROGRESS
    assert progress[1]["event"]["type"] == "progress"
    [done] = enc.feed(
        ev.ResponseDone(response=ty.ResponseOutput(status="completed", output=[], usage=usage))
    )
    assert done[0] is DeltaType.DONE
    assert done[1]["text"] == "hey" and done[1]["usage"]["total_tokens"] == 3
    assert "mime" not in done[1]
    assert enc.feed(ev.ResponseCancelled()) == [(DeltaType.CANCEL, {"text": "hey"})]
    failed = enc.feed(ev.ResponseErrorEvent(error=ty.ErrorInfo(code="x", message="m")))
    assert failed == [(DeltaType.ERROR, {"code": "x", "message": "m"})]


def test_binary_output_items_stream_as_chunks_before_a_done_naming_the_mime() -> None:
    enc = DeltaEncoder()
    image = base64.b64encode(bytes(range(256)) * 400).decode()  # 100 KiB: three chunks
    output = [
        ty.TextContent(text="here"),
        ty.ImageContent(image=image, format="png"),
        ty.FileContent(
            file=ty.MediaURL(url="https://x.test/a.pdf"),
            filename="a.pdf",
            mime_type="application/pdf",
        ),
    ]
    frames = enc.feed(
        ev.ResponseDone(response=ty.ResponseOutput(status="completed", output=output))
    )
    chunks, done = frames[:-1], frames[-1]
    assert {kind for kind, _ in chunks} == {DeltaType.CHUNK}
    assert all(len(p["chunk_b64"]) % 4 == 0 and p["part"] == 0 for _, p in chunks[:-1])
    assert base64.b64decode("".join(p["chunk_b64"] for _, p in chunks)) == bytes(range(256)) * 400
    assert done[0] is DeltaType.DONE and done[1]["mime"] == "image/png"
    assert done[1]["parts"] == [
        {"mime": "image/png"},
        {"mime": "application/pdf", "filename": "a.pdf", "url": "https://x.test/a.pdf"},
    ]


def test_streamed_audio_is_chunk_b64_and_not_sent_again_at_the_end() -> None:
    enc = DeltaEncoder()
    assert enc.feed(ev.AudioDelta(audio="AAAA")) == [(DeltaType.CHUNK, {"chunk_b64": "AAAA"})]
    assert enc.feed(ev.ResponseDelta(delta=ty.DeltaAudio(audio="BBBB"))) == [
        (DeltaType.CHUNK, {"chunk_b64": "BBBB"})
    ]
    output = [ty.AudioContent(audio="AAAABBBB")]
    frames = enc.feed(
        ev.ResponseDone(response=ty.ResponseOutput(status="completed", output=output))
    )
    assert frames == [(DeltaType.DONE, {"text": "", "mime": "audio/pcm"})]


def test_structured_output_streams_as_json_patches_that_rebuild_it() -> None:
    # The text is always a JSON prefix here: jiter's partial mode reads it whole.
    enc = DeltaEncoder(
        structured=lambda text: jiter.from_json(text.encode(), partial_mode="trailing-strings")
    )
    text = '{"city": "Paris", "days": [{"t": 21}, {"t": 23}], "note": "sunny"}'
    doc: Any = None
    for i in range(0, len(text), 5):
        for kind, payload in enc.feed(ev.ResponseDelta(delta=ty.DeltaText(text=text[i : i + 5]))):
            assert kind is DeltaType.PATCH
            doc = jsonpatch.apply(doc, payload["ops"])
    assert doc == orjson.loads(text)
    [done] = enc.feed(ev.ResponseDone(response=ty.ResponseOutput(status="completed", output=[])))
    assert done[1]["json"] == orjson.loads(text) and done[1]["text"] == text


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=12,
)


@given(JSON_VALUES, JSON_VALUES)
def test_a_json_patch_turns_one_value_into_the_other(old: Any, new: Any) -> None:
    assert jsonpatch.apply(old, jsonpatch.diff(old, new)) == new


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
