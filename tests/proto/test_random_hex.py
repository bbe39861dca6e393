"""``uamp_proto.ids.random_hex``: 128 random bits as hex, drawn from the OS in batches.

(A forked child drawing its own: ``tests/agents/test_ids.py``, whose ids come from it.)
"""

from __future__ import annotations

import re

from uamp_proto.ids import RANDOM_BATCH, random_hex, random_ids, short_random_ids


def test_values_are_32_hex_digits_and_distinct_across_batches() -> None:
    made = [random_hex() for _ in range(RANDOM_BATCH * 3 + 1)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", m) for m in made)
    assert len(set(made)) == len(made)
    assert re.fullmatch(r"resp_[0-9a-f]{32}", random_ids("resp"))


def test_short_ids_are_24_hex_digits_and_distinct_across_batches() -> None:
    made = [short_random_ids("event") for _ in range(RANDOM_BATCH * 3 + 1)]
    assert all(re.fullmatch(r"event_[0-9a-f]{24}", m) for m in made)
    assert len(set(made)) == len(made)
