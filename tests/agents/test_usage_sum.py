"""``add_usage``'s shortcut for an empty left side against the general sum (differential)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from uamp_agents.turn import _add, _add_all, add_usage
from uamp_proto.types import AudioUsage, UsageCost, UsageStats

_COUNT = st.none() | st.integers(min_value=0, max_value=10**9) | st.booleans()
_COST = st.none() | st.builds(
    UsageCost,
    input_cost=st.none() | st.floats(0, 10),
    total_cost=st.none() | st.floats(0, 10),
    currency=st.none() | st.sampled_from(["USD", "EUR"]),
)
_USAGE = st.builds(
    UsageStats,
    input_tokens=_COUNT,
    output_tokens=_COUNT,
    total_tokens=_COUNT,
    cached_tokens=_COUNT,
    cost=_COST,
    audio=st.none() | st.builds(AudioUsage),
    unknown=st.sampled_from([{}, {"extra": 1}]),
)


@given(b=_USAGE, unknown=st.sampled_from([{}, {"kept": "no"}]))
def test_adding_to_nothing_is_the_general_sum(b: UsageStats, unknown: dict[str, int]) -> None:
    nothing = UsageStats(unknown=unknown)
    fast, general = add_usage(nothing, b), _add(nothing, b)
    assert fast == general
    counts = ("input_tokens", "output_tokens", "total_tokens", "cached_tokens")
    assert [type(getattr(fast, f)) for f in counts] == [type(getattr(general, f)) for f in counts]
    assert fast.unknown == general.unknown


@given(a=_USAGE, b=_USAGE)
def test_otherwise_it_is_the_general_sum(a: UsageStats, b: UsageStats) -> None:
    assert add_usage(a, b) == _add(a, b)
    assert add_usage(a, None) is a


@given(a=_USAGE, b=_USAGE)
def test_token_counts_sum_as_every_field_does(a: UsageStats, b: UsageStats) -> None:
    """``_add``'s way for records without cost or audio against the walk over every field."""
    fast, general = _add(a, b), _add_all(a, b)
    assert fast == general
    counts = ("input_tokens", "output_tokens", "total_tokens", "cached_tokens")
    assert [type(getattr(fast, f)) for f in counts] == [type(getattr(general, f)) for f in counts]
    assert fast.unknown == general.unknown
