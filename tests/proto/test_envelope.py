"""Spec 003 envelopes: schema checks, JSON round trips, canonical JSON, state table."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import attrs
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from uamp_proto import jsonbounds
from uamp_proto.envelope import (
    BACKEND_BUSY,
    DEFAULT_DELTA_WINDOW,
    ERROR_CODES,
    MISSING_DELTA_SEQ,
    PAYLOAD_TOO_LARGE,
    TRANSITIONS,
    UNAUTHENTICATED,
    UNAUTHORIZED,
    Body,
    ContextRef,
    Delta,
    DeltaType,
    Envelope,
    EnvelopeError,
    Exchange,
    ExchangeState,
    Intent,
    InvalidTransition,
    Trigger,
    canonical_json,
    decode_delta,
    decode_envelope,
    encode_delta,
    encode_envelope,
    envelope_canonical_json,
    envelope_sha256,
    is_date_time,
    trigger_for,
)
from uamp_proto.errors import ProtocolError

ID = "urn:uuid:0b6c1d3e-4f5a-4b6c-8d7e-9f0a1b2c3d4e"
ID2 = "5f0c6d2a-9b1e-4c3d-8a7f-1e2d3c4b5a69"
HASH = "sha256:" + "ab" * 32


def minimal() -> dict[str, Any]:
    """Appendix C.1's request, with a real UUID as its id."""
    return {
        "id": ID,
        "ts": "2025-07-10T10:00:00Z",
        "from": "did:web:client",
        "to": ["did:web:calc"],
        "intent": "ask",
        "body": {"type": "text/plain", "content": "2+2"},
        "sig": "abc..def",
    }


def full() -> dict[str, Any]:
    """Every member of section 4 present."""
    return {
        "id": ID,
        "ts": "2025-07-10T13:37:05.123+02:00",
        "from": "did:web:client.example",
        "to": ["did:web:worker.example", "https://agents.example/bob"],
        "intent": "subscribe",
        "reply_to": ID2,
        "context": [{"id": ID2, "hash": HASH}],
        "stream_id": "str-42",
        "delta_window": 8,
        "body": {
            "type": "text/markdown",
            "content": "# Draw me a sheep…",
            "encoding": "utf-8",
            "compression": "none",
        },
        "cap_token": "eyJ.x.y",
        "sig": "mG0Y..abc",
        "ext": {"x-trace": "b3:1", "nested": {"b": [1, 2.5, None, True]}},
    }


# --- decoding and encoding ------------------------------------------------------------


@pytest.mark.parametrize("make", [minimal, full])
def test_decode_then_encode_gives_back_the_same_members(make: Any) -> None:
    obj = make()
    env = decode_envelope(orjson.dumps(obj))
    assert orjson.loads(encode_envelope(env)) == obj
    assert decode_envelope(json.dumps(obj)) == env  # str input
    assert decode_envelope(obj) == env  # already-decoded input


def test_decoded_fields_are_typed() -> None:
    env = decode_envelope(full())
    assert env.from_ == "did:web:client.example"
    assert env.to == ("did:web:worker.example", "https://agents.example/bob")
    assert env.intent is Intent.SUBSCRIBE
    assert env.context == (ContextRef(id=ID2, hash=HASH),)
    assert env.body == Body(
        type="text/markdown", content="# Draw me a sheep…", encoding="utf-8", compression="none"
    )
    assert env.effective_delta_window == 8


def test_defaults_apply_but_are_not_written() -> None:
    env = decode_envelope(minimal())
    assert env.delta_window is None and env.effective_delta_window == DEFAULT_DELTA_WINDOW == 64
    assert env.body.encoding is None and env.body.effective_encoding == "utf-8"
    assert env.body.compression is None and env.body.effective_compression == "none"
    written = orjson.loads(encode_envelope(env))
    assert "delta_window" not in written and "encoding" not in written["body"]


def test_extra_members_of_body_and_context_are_kept() -> None:
    obj = minimal()
    obj["body"]["x-lang"] = "en"
    obj["context"] = [{"id": ID2, "hash": HASH, "note": {"k": 1}}]
    env = decode_envelope(obj)
    assert env.body.extra == {"x-lang": "en"}
    assert env.context is not None and env.context[0].extra == {"note": {"k": 1}}
    assert orjson.loads(encode_envelope(env)) == obj


def test_unsigned_envelope_is_refused_unless_asked() -> None:
    obj = minimal()
    del obj["sig"]
    with pytest.raises(EnvelopeError, match=r"missing required field.*'sig'"):
        decode_envelope(obj)
    assert decode_envelope(obj, require_sig=False).sig is None


def test_unknown_top_level_members_are_all_named() -> None:
    obj = {**minimal(), "zeta": 1, "alpha": 2}
    with pytest.raises(EnvelopeError) as info:
        decode_envelope(obj)
    assert info.value.where == "$"
    assert "'alpha', 'zeta'" in info.value.reason
    assert "no additional properties" in info.value.reason


@pytest.mark.parametrize("member", ["id", "ts", "from", "to", "intent", "body", "sig"])
def test_each_required_member_is_required(member: str) -> None:
    obj = minimal()
    del obj[member]
    with pytest.raises(EnvelopeError, match=rf"missing required field.*'{member}'"):
        decode_envelope(obj)


def _set(obj: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    for seg in path[:-1]:
        obj = obj[seg]
    obj[path[-1]] = value


BAD_MEMBERS = [
    # (path, value, where the error must point, words in the reason)
    (("id",), "urn:uuid:1111", "$.id", "UUID"),  # Appendix C.1's placeholder id
    (("id",), 42, "$.id", "string"),
    (("ts",), "2025-07-10 10:00:00Z", "$.ts", "date-time"),
    (("ts",), "2025-02-29T00:00:00Z", "$.ts", "date-time"),  # not a leap year
    (("ts",), "2025-13-01T00:00:00Z", "$.ts", "date-time"),
    (("ts",), "2025-07-10T24:00:00Z", "$.ts", "date-time"),
    (("ts",), "2025-07-10T10:00:00", "$.ts", "date-time"),  # no offset
    (("ts",), "2025-07-10T10:00:00+25:00", "$.ts", "date-time"),
    (("from",), "client", "$.from", "absolute URI"),
    (("from",), "did:web:a b", "$.from", "absolute URI"),
    (("to",), [], "$.to", "at least one"),
    (("to",), "did:web:calc", "$.to", "array"),
    (("to",), ["did:web:ok", "not a uri"], "$.to[1]", "absolute URI"),
    (("intent",), "shout", "$.intent", "one of ask, inform"),
    (("reply_to",), "nope", "$.reply_to", "UUID"),
    (("reply_to",), None, "$.reply_to", "null"),
    (("context",), {"id": ID2}, "$.context", "array"),
    (("context",), [{"id": ID2, "hash": HASH}, {"id": ID2}], "$.context[1]", "'hash'"),
    (("context",), [{"id": ID2, "hash": HASH.upper()}], "$.context[0].hash", "sha256"),
    (("context",), [{"id": ID2, "hash": "sha256:abc"}], "$.context[0].hash", "sha256"),
    (("context",), [{"id": "x", "hash": HASH}], "$.context[0].id", "UUID"),
    (("context",), ["x"], "$.context[0]", "object"),
    (("stream_id",), 42, "$.stream_id", "string"),
    (("delta_window",), 0, "$.delta_window", "at least 1"),
    (("delta_window",), -3, "$.delta_window", "at least 1"),
    (("delta_window",), True, "$.delta_window", "integer"),
    (("delta_window",), "64", "$.delta_window", "integer"),
    (("delta_window",), 6.5, "$.delta_window", "integer"),
    (("body",), "text", "$.body", "object"),
    (("body", "content"), 4, "$.body.content", "string"),
    (("body", "type"), None, "$.body.type", "string"),
    (("body", "encoding"), 8, "$.body.encoding", "string"),
    (("cap_token",), {"jwt": 1}, "$.cap_token", "string"),
    (("sig",), 1, "$.sig", "string"),
    (("ext",), ["x"], "$.ext", "object"),
]


@pytest.mark.parametrize(("path", "value", "where", "words"), BAD_MEMBERS)
def test_bad_members_are_refused_with_their_path(
    path: tuple[Any, ...], value: Any, where: str, words: str
) -> None:
    obj = minimal()
    _set(obj, path, value)
    with pytest.raises(EnvelopeError) as info:
        decode_envelope(orjson.dumps(obj))
    assert info.value.where == where, str(info.value)
    assert words in info.value.reason
    assert str(info.value).startswith(where + ": ")


def test_body_missing_content_names_the_body() -> None:
    obj = minimal()
    del obj["body"]["content"]
    with pytest.raises(EnvelopeError, match=r"^\$\.body: missing required field.*'content'"):
        decode_envelope(obj)


@pytest.mark.parametrize(
    "value",
    [
        "2024-02-29T00:00:00Z",
        "2025-07-10T13:37:05Z",
        "2025-07-10t13:37:05z",
        "2025-07-10T13:37:05.123456+05:30",
        "2016-12-31T23:59:60Z",
        "2000-02-29T00:00:00-00:00",
    ],
)
def test_valid_date_times(value: str) -> None:
    assert is_date_time(value)


@pytest.mark.parametrize(
    "value",
    ["1900-02-29T00:00:00Z", "2025-04-31T00:00:00Z", "2025-07-10T12:60:00Z", "2025-07-10"],
)
def test_invalid_date_times(value: str) -> None:
    assert not is_date_time(value)


def test_bare_uuid_and_urn_forms_are_both_ids() -> None:
    for value in (ID, ID2, ID2.upper(), "URN:UUID:" + ID2):
        assert decode_envelope({**minimal(), "id": value}).id == value


def test_ext_must_be_plain_json_when_built_in_code() -> None:
    with pytest.raises(EnvelopeError, match=r"\$\.ext\.x.*NaN"):
        attrs.evolve(decode_envelope(minimal()), ext={"x": float("nan")})
    with pytest.raises(EnvelopeError, match=r"\$\.ext\.s.*not a JSON value"):
        attrs.evolve(decode_envelope(minimal()), ext={"s": {1, 2}})


def test_constructor_validates_like_the_decoder() -> None:
    body = Body(type="text/plain", content="x")
    with pytest.raises(EnvelopeError, match=r"^\$\.to: must name at least one"):
        Envelope(id=ID, ts="2025-07-10T10:00:00Z", from_="a:b", to=[], intent=Intent.ASK, body=body)
    env = Envelope(
        id=ID, ts="2025-07-10T10:00:00Z", from_="a:b", to=["c:d"], intent="inform", body=body
    )
    assert env.intent is Intent.INFORM and env.to == ("c:d",)
    with pytest.raises(EnvelopeError, match=r"declared field"):
        Body(type="t", content="c", extra={"type": "x"})


def test_not_json_not_an_object_and_too_large() -> None:
    with pytest.raises(EnvelopeError, match=r"^\$: not valid JSON"):
        decode_envelope(b"{nope")
    with pytest.raises(EnvelopeError, match=r"^\$: must be an object, not an array"):
        decode_envelope(b"[]")
    big = orjson.dumps(minimal())
    with pytest.raises(EnvelopeError) as info:
        decode_envelope(big, max_size=len(big) - 1)
    assert info.value.error_code is PAYLOAD_TOO_LARGE
    assert decode_envelope(big, max_size=len(big)).id == ID


def test_too_many_values_are_refused_unparsed_as_too_large() -> None:
    """Envelopes and frames are counted first (``--max-json-values``): 4.13, not parsed."""
    token = jsonbounds.limit_values(50)
    try:
        padded = orjson.dumps({**minimal(), "pad": list(range(60))})
        frame = orjson.dumps({**delta_obj(), "pad": list(range(60))})
        for decode, data in ((decode_envelope, padded), (decode_delta, frame)):
            with pytest.raises(EnvelopeError, match="more than 50 JSON values") as info:
                decode(data)
            assert info.value.error_code is PAYLOAD_TOO_LARGE
        # Under the count, the same limit lets an envelope through.
        assert decode_envelope(orjson.dumps(minimal())).id == ID
    finally:
        jsonbounds.reset_limit(token)


# --- deltas ----------------------------------------------------------------------------


def delta_obj() -> dict[str, Any]:
    return {
        "delta_seq": 17,
        "stream_id": "str-42",
        "ts": "2025-07-10T13:38:01Z",
        "type": "chunk",
        "payload": {"chunk_b64": "AAEC"},
    }


def test_delta_round_trip() -> None:
    delta = decode_delta(orjson.dumps(delta_obj()))
    assert delta == Delta(
        delta_seq=17,
        stream_id="str-42",
        ts="2025-07-10T13:38:01Z",
        type=DeltaType.CHUNK,
        payload={"chunk_b64": "AAEC"},
    )
    assert orjson.loads(encode_delta(delta)) == delta_obj()
    obj = delta_obj()
    del obj["payload"]
    assert orjson.loads(encode_delta(decode_delta(obj))) == obj


@pytest.mark.parametrize(
    ("change", "where", "words"),
    [
        ({"extra": 1}, "$", "'extra'"),
        ({"delta_seq": -1}, "$.delta_seq", "at least 0"),
        ({"delta_seq": "1"}, "$.delta_seq", "integer"),
        ({"type": "blob"}, "$.type", "one of patch, chunk"),
        ({"ts": "yesterday"}, "$.ts", "date-time"),
        ({"payload": None}, "$.payload", "null"),
        ({"payload": [1]}, "$.payload", "object"),
        ({"stream_id": 3}, "$.stream_id", "string"),
    ],
)
def test_bad_deltas(change: dict[str, Any], where: str, words: str) -> None:
    with pytest.raises(EnvelopeError) as info:
        decode_delta({**delta_obj(), **change})
    assert info.value.where == where and words in info.value.reason


def test_encode_delta_can_name_another_stream() -> None:
    delta = decode_delta(delta_obj())
    renamed = decode_delta(encode_delta(delta, stream_id="4"))
    assert renamed.stream_id == "4" and renamed.delta_seq == delta.delta_seq
    assert decode_delta(encode_delta(delta)).stream_id == delta.stream_id


@pytest.mark.parametrize("member", ["delta_seq", "stream_id", "ts", "type"])
def test_delta_required_members(member: str) -> None:
    obj = delta_obj()
    del obj[member]
    with pytest.raises(EnvelopeError, match=rf"missing required field.*'{member}'"):
        decode_delta(obj)


# --- canonical JSON (section 4.2) -------------------------------------------------------

# Expected strings written by hand from the rules: keys sorted at every level,
# no whitespace, UTF-8 text, arrays keep their order.
KNOWN_ANSWERS = [
    ({"b": 1, "a": 2}, '{"a":2,"b":1}'),
    (
        {"z": {"y": [3, {"d": None, "c": True}], "x": "é"}, "a": []},
        '{"a":[],"z":{"x":"é","y":[3,{"c":true,"d":null}]}}',
    ),
    ({"B": 0, "a": 0, "_": 0, "1": 0}, '{"1":0,"B":0,"_":0,"a":0}'),  # code point order
    ({"é": 1, "e": 2, "f": 3}, '{"e":2,"f":3,"é":1}'),
    (
        {"s": 'quote " back \\ nl \n tab \t bell \x07'},
        '{"s":"quote \\" back \\\\ nl \\n tab \\t bell \\u0007"}',
    ),
    ({"emoji": "🐑", "k": [1.5, -0, 10]}, '{"emoji":"🐑","k":[1.5,0,10]}'),
    ([{"b": 2, "a": 1}, "x"], '[{"a":1,"b":2},"x"]'),
]


@pytest.mark.parametrize(("value", "expected"), KNOWN_ANSWERS)
def test_canonical_json_known_answers(value: Any, expected: str) -> None:
    assert canonical_json(value) == expected.encode("utf-8")


def test_envelope_canonical_form_known_answer() -> None:
    obj = minimal()
    obj["ext"] = {"z": 1, "a": {"y": 2, "x": 1}}
    env = decode_envelope(obj)
    expected = (
        '{"body":{"content":"2+2","type":"text/plain"},"ext":{"a":{"x":1,"y":2},"z":1},'
        '"from":"did:web:client","id":"' + ID + '","intent":"ask","to":["did:web:calc"],'
        '"ts":"2025-07-10T10:00:00Z"}'
    ).encode()
    assert envelope_canonical_json(env) == expected  # sig left out
    assert envelope_sha256(env) == hashlib.sha256(expected).hexdigest()
    # The signature is not part of what it signs.
    assert envelope_sha256(attrs.evolve(env, sig="other..sig")) == envelope_sha256(env)
    assert envelope_sha256(attrs.evolve(env, sig=None)) == envelope_sha256(env)


def test_lone_surrogates_are_refused_everywhere() -> None:
    # Found by hypothesis: a Python str may hold one; UTF-8 (and JSON) cannot.
    with pytest.raises(EnvelopeError, match=r"^\$\.content: .*surrogate"):
        Body(type="text/plain", content="a\ud800")
    with pytest.raises(EnvelopeError, match=r"^\$\.ext\.k: .*surrogate"):
        attrs.evolve(decode_envelope(minimal()), ext={"k": "\udfff"})
    with pytest.raises(EnvelopeError, match="surrogate"):
        canonical_json({"\ud800": 1})


def test_canonical_json_refuses_what_json_cannot_carry() -> None:
    for bad in (float("inf"), {1: "a"}, 2**64, {"s": {1}}, b"bytes", "\ud800"):
        with pytest.raises(EnvelopeError):
            canonical_json(bad)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=5)
    ),
    max_leaves=20,
)


def _has_float(value: Any) -> bool:
    if isinstance(value, float):
        return True
    if isinstance(value, dict):
        return any(_has_float(v) for v in value.values())
    return isinstance(value, list) and any(_has_float(v) for v in value)


def _shuffled(value: Any, rnd: Any) -> Any:
    """The same value with every object's keys in a random insertion order."""
    if isinstance(value, dict):
        keys = list(value)
        rnd.shuffle(keys)
        return {k: _shuffled(value[k], rnd) for k in keys}
    if isinstance(value, list):
        return [_shuffled(v, rnd) for v in value]
    return value


@settings(max_examples=200, deadline=None)
@given(
    value=json_values, rnd=st.randoms(use_true_random=False), indent=st.sampled_from([None, 1, 4])
)
def test_canonical_form_ignores_key_order_and_whitespace(value: Any, rnd: Any, indent: Any) -> None:
    expected = canonical_json(value)
    # Reorder keys and re-read the value from a spaced-out text form.
    spaced = json.dumps(_shuffled(value, rnd), indent=indent, separators=(" , ", " : "))
    assert canonical_json(json.loads(spaced)) == expected
    if not _has_float(value):
        # An independent writer agrees: sorted keys, no whitespace, raw UTF-8.
        oracle = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        assert expected == oracle.encode("utf-8")
    assert orjson.loads(expected) == value
    assert canonical_json(orjson.loads(expected)) == expected  # idempotent


@settings(max_examples=100, deadline=None)
@given(ext=st.dictionaries(st.text(max_size=5), json_values, max_size=4), rnd=st.randoms())
def test_envelope_digest_ignores_member_order(ext: dict[str, Any], rnd: Any) -> None:
    obj = {**minimal(), "ext": ext}
    env = decode_envelope(obj)
    reordered = decode_envelope(json.dumps(_shuffled(obj, rnd), indent=2))
    assert envelope_sha256(reordered) == envelope_sha256(env)


# --- state machine (section 10) ---------------------------------------------------------

S, T = ExchangeState, Trigger
LISTED = [
    # section 10 as drawn
    (S.NEW, T.ASK, S.IN_PROGRESS),
    (S.NEW, T.SUBSCRIBE, S.IN_PROGRESS),
    (S.IN_PROGRESS, T.CONFIRM, S.COMPLETED),
    (S.IN_PROGRESS, T.DONE, S.COMPLETED),
    (S.IN_PROGRESS, T.CANCEL, S.CANCELLED),
    (S.IN_PROGRESS, T.ERROR, S.ERROR),
    # the other intents of section 4.1 (uamp's decisions, docs/envelope.md)
    (S.NEW, T.PROPOSE, S.IN_PROGRESS),
    (S.NEW, T.INFORM, S.COMPLETED),
    (S.NEW, T.NOTIFY, S.COMPLETED),
    (S.NEW, T.PROGRESS, S.COMPLETED),
    (S.IN_PROGRESS, T.DENY, S.CANCELLED),
    (S.IN_PROGRESS, T.ANSWER, S.ANSWERED),
    (S.ANSWERED, T.CONFIRM, S.COMPLETED),
    (S.ANSWERED, T.DENY, S.CANCELLED),
    (S.ANSWERED, T.CANCEL, S.CANCELLED),
    (S.ANSWERED, T.ERROR, S.ERROR),
]
UNLISTED = [
    (state, trigger)
    for state in ExchangeState
    for trigger in Trigger
    if (state, trigger) not in {(a, b) for a, b, _ in LISTED}
]


def _at(state: ExchangeState) -> Exchange:
    exchange = Exchange()
    exchange.state = state
    return exchange


def test_table_is_exactly_section_10_and_the_other_intents() -> None:
    table = {(s, t): n for s, moves in TRANSITIONS.items() for t, n in moves.items()}
    assert table == {(s, t): n for s, t, n in LISTED}
    assert set(TRANSITIONS) == set(ExchangeState)


@pytest.mark.parametrize(("state", "trigger", "after"), LISTED)
def test_listed_transitions(state: ExchangeState, trigger: Trigger, after: ExchangeState) -> None:
    exchange = _at(state)
    assert exchange.advance(trigger) is after
    assert exchange.state is after


@pytest.mark.parametrize(("state", "trigger"), UNLISTED)
def test_every_unlisted_move_raises(state: ExchangeState, trigger: Trigger) -> None:
    exchange = _at(state)
    with pytest.raises(InvalidTransition) as info:
        exchange.advance(trigger)
    assert isinstance(info.value, ProtocolError)
    assert info.value.state is state and info.value.trigger is trigger
    assert exchange.state is state  # unchanged


INTENT_TRIGGERS = {
    Intent.ASK: T.ASK,
    Intent.INFORM: T.INFORM,
    Intent.PROPOSE: T.PROPOSE,
    Intent.CONFIRM: T.CONFIRM,
    Intent.DENY: T.DENY,
    Intent.PROGRESS: T.PROGRESS,
    Intent.CANCEL: T.CANCEL,
    Intent.SUBSCRIBE: T.SUBSCRIBE,
    Intent.NOTIFY: T.NOTIFY,
    Intent.ERROR: T.ERROR,
}


@pytest.mark.parametrize("intent", list(Intent))
def test_trigger_of_each_intent(intent: Intent) -> None:
    env = decode_envelope({**minimal(), "intent": intent.value})
    assert trigger_for(env) is INTENT_TRIGGERS[intent]


@pytest.mark.parametrize("intent", list(Intent))
def test_every_intent_has_a_move_from_new_or_addresses_an_exchange(intent: Intent) -> None:
    trigger = INTENT_TRIGGERS[intent]
    opens = trigger in TRANSITIONS[S.NEW]
    addresses = any(trigger in TRANSITIONS[s] for s in (S.IN_PROGRESS, S.ANSWERED))
    assert opens or addresses


@pytest.mark.parametrize("kind", list(DeltaType))
def test_trigger_of_each_delta_type(kind: DeltaType) -> None:
    expected = {DeltaType.DONE: T.DONE, DeltaType.CANCEL: T.CANCEL, DeltaType.ERROR: T.ERROR}
    assert trigger_for(decode_delta({**delta_obj(), "type": kind.value})) is expected.get(kind)


def test_a_streamed_exchange() -> None:
    exchange = Exchange()
    assert exchange.observe(decode_envelope(minimal())) is S.IN_PROGRESS
    for kind in ("progress", "chunk", "patch"):
        assert exchange.observe(decode_delta({**delta_obj(), "type": kind})) is S.IN_PROGRESS
    assert exchange.observe(decode_delta({**delta_obj(), "type": "done"})) is S.COMPLETED
    with pytest.raises(InvalidTransition, match=r"has ended"):
        exchange.observe(decode_envelope({**minimal(), "intent": "cancel"}))


@pytest.mark.parametrize(("decision", "end"), [("confirm", S.COMPLETED), ("deny", S.CANCELLED)])
def test_a_proposal_waits_for_the_decision_after_its_answer(
    decision: str, end: ExchangeState
) -> None:
    exchange = Exchange()
    assert exchange.observe(decode_envelope({**minimal(), "intent": "propose"})) is S.IN_PROGRESS
    assert exchange.opened_by is Intent.PROPOSE
    assert exchange.observe(decode_delta({**delta_obj(), "type": "chunk"})) is S.IN_PROGRESS
    assert exchange.observe(decode_delta({**delta_obj(), "type": "done"})) is S.ANSWERED
    assert exchange.observe(decode_envelope({**minimal(), "intent": decision})) is end


@pytest.mark.parametrize("intent", ["inform", "notify", "progress"])
def test_one_way_intents_complete_on_receipt(intent: str) -> None:
    exchange = Exchange()
    assert exchange.observe(decode_envelope({**minimal(), "intent": intent})) is S.COMPLETED
    assert exchange.opened_by is Intent(intent)


# --- error codes (section 9) --------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "retryable", "retry_after"),
    [("4.01", False, False), ("4.03", False, False), ("4.09", True, False),
     ("4.13", False, False), ("5.04", True, True)],
)  # fmt: skip
def test_error_codes(code: str, retryable: bool, retry_after: bool) -> None:
    entry = ERROR_CODES[code]
    assert (entry.code, entry.retryable, entry.retry_after) == (code, retryable, retry_after)


def test_error_code_names() -> None:
    assert [ERROR_CODES[c] for c in ("4.01", "4.03", "4.09", "4.13", "5.04")] == [
        UNAUTHENTICATED,
        UNAUTHORIZED,
        MISSING_DELTA_SEQ,
        PAYLOAD_TOO_LARGE,
        BACKEND_BUSY,
    ]
    assert MISSING_DELTA_SEQ.condition == "Missing delta_seq"
