"""The quick argument check (``uamp_agents._quickcheck``) against ``jsonschema``.

The quick check may only say "valid" where the full validation finds no
problem (differential, on generated schemas and values), and it must say so
for the usual arguments of the schemas ``tool()`` derives, or it saves
nothing; a tool's problems are still the full validation's words.
"""

from __future__ import annotations

from typing import Any, Literal

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from uamp_agents import tool
from uamp_agents._quickcheck import compile_check
from uamp_agents._schema import validate
from uamp_agents.errors import ToolError

_NAMES = st.sampled_from(["a", "b", "c"])
_TYPES = st.sampled_from(["string", "integer", "number", "boolean", "null", "object", "array"])

_LEAF: st.SearchStrategy[dict[str, Any]] = st.one_of(
    st.builds(lambda t: {"type": t}, _TYPES),
    st.builds(lambda ts: {"type": ts}, st.lists(_TYPES, min_size=1, max_size=3)),
    st.builds(lambda e: {"enum": e}, st.lists(st.sampled_from(["x", "y", "1"]), min_size=1)),
    st.just({}),
    st.just({"description": "anything"}),
)


def _nest(inner: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    obj = st.fixed_dictionaries(
        {"type": st.just("object")},
        optional={
            "properties": st.dictionaries(_NAMES, inner, max_size=3),
            "required": st.lists(_NAMES, max_size=3, unique=True),
            "additionalProperties": st.one_of(st.booleans(), inner),
        },
    )
    untyped = st.fixed_dictionaries(
        {}, optional={"properties": st.dictionaries(_NAMES, inner, max_size=2), "items": inner}
    )
    return st.one_of(
        obj,
        untyped,
        st.builds(lambda i: {"type": "array", "items": i}, inner),
        st.builds(lambda bs: {"anyOf": bs}, st.lists(inner, min_size=1, max_size=3)),
    )


SCHEMAS = st.recursive(_LEAF, _nest, max_leaves=8)

VALUES: st.SearchStrategy[Any] = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-3, 3),
        st.sampled_from([0.0, 1.0, 2.5, -1.5]),
        st.sampled_from(["x", "y", "1", ""]),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(_NAMES, inner, max_size=3)
    ),
    max_leaves=10,
)


@settings(max_examples=600, deadline=None)
@given(schema=SCHEMAS, value=VALUES)
def test_a_quick_yes_is_a_full_yes(schema: dict[str, Any], value: Any) -> None:
    check = compile_check(schema)
    assert check is not None  # every generated keyword is one it knows
    if check(value):
        assert validate(value, schema) == [], (schema, value)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "integer", "minimum": 1},
        {"$ref": "#/$defs/x", "$defs": {"x": {"type": "string"}}},
        {"type": "string", "format": "email"},
        {"enum": [1, 2]},
        {"type": "object", "properties": {"a": {"type": "string", "pattern": "^a"}}},
        {"oneOf": [{"type": "string"}]},
        {"type": "uuid"},
        False,
    ],
)
def test_keywords_it_does_not_know_mean_no_quick_check(schema: Any) -> None:
    assert compile_check(schema) is None


def test_where_json_schema_is_lenient_it_asks_the_full_validation() -> None:
    check = compile_check({"type": "integer"})
    assert check is not None
    assert not check(1.0) and validate(1.0, {"type": "integer"}) == []  # not sure: asks
    assert not check(True) and validate(True, {"type": "integer"}) != []


def lookup(key: str, count: int = 1, mode: Literal["fast", "slow"] = "fast") -> str:
    """Look a key up.

    Args:
        key: What to look up.
        count: How many.
        mode: How.
    """
    return f"{key}{count}{mode}"


def maybe(tags: list[str], limit: float | None = None) -> str:
    """Tags."""
    return ",".join(tags)


@pytest.mark.parametrize(
    ("fn", "arguments", "quick"),
    [
        (lookup, {"key": "k"}, True),
        (lookup, {"key": "k", "count": 3, "mode": "slow"}, True),
        (lookup, {"key": "k", "count": 3.0}, False),  # valid, but not at a glance
        (lookup, {"key": 1}, False),
        (lookup, {}, False),
        (lookup, {"key": "k", "other": 1}, False),
        (lookup, {"key": "k", "mode": "medium"}, False),
        (maybe, {"tags": ["a", "b"]}, True),
        (maybe, {"tags": ["a"], "limit": None}, True),
        (maybe, {"tags": ["a"], "limit": 2}, True),
        (maybe, {"tags": [1]}, False),
    ],
)
def test_derived_schemas_pass_their_usual_arguments_at_a_glance(
    fn: Any, arguments: dict[str, Any], quick: bool
) -> None:
    made = tool(fn, thread=False)
    assert compile_check(made.parameters) is not None
    assert made._valid_at_a_glance(arguments) is quick
    if quick:
        assert validate(arguments, made.parameters) == []


def test_invalid_arguments_still_get_the_full_validations_words() -> None:
    made = tool(lookup, thread=False)

    async def main() -> None:
        with pytest.raises(ToolError) as caught:
            await made.invoke({"key": 1, "count": "x"}, None)  # type: ignore[arg-type]
        problems = validate({"key": 1, "count": "x"}, made.parameters, "arguments")
        assert str(caught.value) == "invalid arguments for lookup: " + "; ".join(problems)
        assert await made.invoke({"key": "k", "count": 2.0}, None) == "k2.0fast"  # type: ignore[arg-type]

    trio.run(main)


def test_a_replaced_schema_is_compiled_again() -> None:
    made = tool(lookup, thread=False)
    assert made._valid_at_a_glance({"key": "k"})
    made.parameters = {"type": "object", "properties": {"key": {"type": "integer"}}}
    assert not made._valid_at_a_glance({"key": "k"})
    assert made._valid_at_a_glance({"key": 1})
    first = made.definition()
    assert made.definition() is first and first.function.parameters is made.parameters
    made.description = "changed"
    assert made.definition().function.description == "changed"
