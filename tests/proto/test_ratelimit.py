"""The per-principal sliding window and its ``rate_limit`` notices (UAMP 6.17)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from uamp_proto.ratelimit import SlidingWindow, nearly_spent, notice


@pytest.mark.parametrize(
    ("limit", "remaining", "told"),
    [(100, 11, False), (100, 10, True), (100, 0, True), (5, 2, False), (5, 1, True), (1, 0, True)],
)
def test_a_notice_goes_out_at_a_tenth_left(limit: int, remaining: int, told: bool) -> None:
    assert nearly_spent(limit, remaining) is told
    event = notice(limit, remaining, 1000.5, "sess_1")
    assert (event is not None) is told
    if event is not None:
        assert (event.limit, event.remaining, event.reset_at) == (limit, remaining, 1000.5)
        assert event.session_id == "sess_1"


# (time of the hit, allowed?, remaining after it) for a window of 3 per 10 s.
STEPS = [
    (0.0, True, 2),
    (1.0, True, 1),
    (2.0, True, 0),
    (3.0, False, 0),  # full: refused, not counted
    (10.0, True, 0),  # the first left the window, this one took its place
    (11.5, True, 0),
    (12.0, True, 0),  # 2.0 left at 12.0
    (12.5, False, 0),
    (25.0, True, 2),  # all old ones gone
]


def test_the_window_counts_and_refuses_in_order() -> None:
    window = SlidingWindow(3, window=10.0)
    for now, allowed, remaining in STEPS:
        verdict = window.hit("alice", now, wall=1000.0 + now)
        assert (verdict.allowed, verdict.remaining) == (allowed, remaining), now
    assert window.hit("bob", 12.0, 1012.0).remaining == 2  # keys are apart


def test_reset_at_is_when_the_oldest_counted_hit_leaves() -> None:
    window = SlidingWindow(2, window=60.0)
    window.hit("k", 5.0, 1005.0)
    verdict = window.hit("k", 20.0, 1020.0)
    assert verdict.reset_at == 1065.0
    assert verdict.notice() is not None and verdict.notice().remaining == 0  # type: ignore[union-attr]


@given(st.lists(st.integers(min_value=0, max_value=50), max_size=200), st.integers(1, 8))
def test_memory_stays_bounded_whatever_the_keys(keys: list[int], max_keys: int) -> None:
    window = SlidingWindow(4, window=1.0, max_keys=max_keys)
    for i, key in enumerate(keys):
        window.hit(key, float(i), float(i))
        assert len(window) <= max_keys
        assert all(len(times) <= 4 for times in window._times.values())


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        SlidingWindow(0)
