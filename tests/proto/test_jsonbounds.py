"""uamp_proto.jsonbounds: a document is refused exactly when it holds too many values."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from uamp_proto import DecodeError, decode, jsonbounds
from uamp_proto.jsonbounds import TooManyValues, check, count_elements

# Text full of what the count looks for: separators, brackets, quotes, escapes.
_tricky = st.text(alphabet=st.sampled_from(list(',[]{}"\\:ab \n\u00e9')), max_size=12)
_values = st.recursive(
    st.none() | st.integers() | st.booleans() | _tricky,
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(_tricky, inner, max_size=6),
    max_leaves=60,
)


def elements(value: Any) -> int:
    """What the bound counts, from the parsed value: separators and openings, plus one."""

    def walk(v: Any) -> int:
        if isinstance(v, list):
            return 1 + max(len(v) - 1, 0) + sum(walk(x) for x in v)
        if isinstance(v, dict):
            return 1 + max(len(v) - 1, 0) + sum(walk(x) for x in v.values())
        return 0

    return walk(value) + 1


@settings(max_examples=600)
@given(
    value=_values,
    limit=st.integers(min_value=1, max_value=40),
    spaced=st.booleans(),
    ascii_only=st.booleans(),
)
def test_refused_exactly_when_over_the_limit(
    value: Any, limit: int, spaced: bool, ascii_only: bool
) -> None:
    text = json.dumps(
        value, ensure_ascii=ascii_only, separators=(", ", ": ") if spaced else (",", ":")
    )
    want = elements(value)
    for data in (text, text.encode()):
        if want > limit:
            with pytest.raises(TooManyValues) as refused:
                check(data, limit)
            assert refused.value.limit == limit
            assert str(limit) in str(refused.value)
        else:
            check(data, limit)  # the assertion is that it passes: it raises when wrong
    count = count_elements(text.encode(), limit)
    assert (count > limit) == (want > limit)
    if want <= limit:
        assert want <= count <= limit


def test_length_shortcut_is_sound() -> None:
    # The densest document: empty arrays in an array, 2 elements per 3 bytes.
    for n in range(1, 60):
        data = orjson.dumps([[]] * n)
        assert count_elements(data, 10**9) == elements([[]] * n)
        for limit in range(1, 2 * n + 4):
            if elements([[]] * n) > limit:
                with pytest.raises(TooManyValues):
                    check(data, limit)


def test_text_with_separators_is_one_value() -> None:
    value = {"messages": [{"role": "user", "content": 'a,b,[c],{d}\\"e\n' * 5000}]}
    body = orjson.dumps(value)
    check(body, 100)
    assert count_elements(body, 100) == elements(value) == 5


def test_many_strings_refused_without_splitting() -> None:
    body = b"{" + b",".join(b'"k%d":"v"' % i for i in range(3000)) + b"}"
    with pytest.raises(TooManyValues):
        check(body, 1000)
    assert count_elements(body, 1000) > 1000


def test_the_context_variable_is_the_default_limit() -> None:
    body = orjson.dumps(list(range(50)))
    check(body)
    token = jsonbounds.limit_values(10)
    try:
        with pytest.raises(TooManyValues):
            check(body)
    finally:
        jsonbounds.reset_limit(token)


def test_the_codec_skips_the_count_only_below_every_limit_set() -> None:
    """A limit lowered for a context lowers the codec's floor: short events are counted then."""
    event = orjson.dumps(
        {"type": "response.delta", "response_id": "r", "delta": {"type": "text", "text": "hi"}}
    )
    many = orjson.dumps({**orjson.loads(event), "extra": list(range(30))})
    decode(many)  # within the default limit
    token = jsonbounds.limit_values(20)
    try:
        assert jsonbounds.FLOOR[0] <= 28 < len(many)
        decode(event)  # 7 values: within 20
        with pytest.raises(DecodeError, match="more than 20 JSON values"):
            decode(many)
    finally:
        jsonbounds.reset_limit(token)
    assert jsonbounds.max_values() == jsonbounds.DEFAULT_MAX_VALUES


def nesting(value: Any) -> int:
    """How deep the parsed value nests arrays and objects."""
    if isinstance(value, list):
        return 1 + max((nesting(x) for x in value), default=0)
    if isinstance(value, dict):
        return 1 + max((nesting(x) for x in value.values()), default=0)
    return 0


@settings(max_examples=600)
@given(value=_values, levels=st.integers(min_value=0, max_value=8), pretty=st.booleans())
def test_deeper_than_agrees_with_the_parsed_value(value: Any, levels: int, pretty: bool) -> None:
    data = json.dumps(value, indent=1 if pretty else None).encode()
    assert jsonbounds.deeper_than(data, levels) == (nesting(value) > levels)


@pytest.mark.parametrize("levels", [100, 126, 127, 300, 1000])
def test_a_document_nested_past_the_limit_is_refused_before_parsing(levels: int) -> None:
    inner = b'{"a":' * levels + b'"[[[]]]"' + b"}" * levels
    event = b'{"type":"session.create","session":{"extensions":' + inner + b"}}"
    if levels + 2 > jsonbounds.MAX_DEPTH:  # inside the event and its session
        with pytest.raises(DecodeError, match="levels deep"):
            decode(event)
    else:
        # Whatever is accepted can be written back, inside a reply of its own.
        reply = {"jsonrpc": "2.0", "result": {"task": {"metadata": orjson.loads(event)}}}
        orjson.dumps(reply)
