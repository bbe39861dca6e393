"""The session record's conversation as JSON: converted once per message, never shared-mutated."""

from __future__ import annotations

import pytest

from uamp_proto import types as ty
from uamp_proto.codec import unstructure
from uamp_stores.event_log import HistoryJSON


def msg(i: int) -> ty.Message:
    return ty.Message(role="user" if i % 2 else "assistant", content=f"m{i}")


# Each step: ("extend", n) appends n messages to the current list; ("replace", n)
# puts a new list of n messages in its place (stateless ``messages``, a restore).
CASES = [
    [("extend", 2), ("extend", 2), ("extend", 0), ("extend", 3)],
    [("extend", 3), ("replace", 1), ("extend", 2)],
    [("extend", 4), ("replace", 4), ("extend", 1)],
    [("replace", 0), ("extend", 1), ("replace", 5)],
]


@pytest.mark.parametrize("steps", CASES)
def test_history_json_matches_a_full_conversion_and_earlier_lists_stay(
    steps: list[tuple[str, int]],
) -> None:
    converted = HistoryJSON()
    history: list[ty.Message] = []
    handed: list[tuple[list[object], list[object]]] = []  # (list handed out, what it held)
    counter = 0
    for op, n in steps:
        new = [msg(counter + i) for i in range(n)]
        counter += n
        if op == "extend":
            history.extend(new)
        else:
            history = new
        out = converted.of(history)
        assert out == [unstructure(m) for m in history]
        handed.append((out, list(out)))
    for out, held in handed:
        assert out == held  # a record queued earlier keeps its conversation
