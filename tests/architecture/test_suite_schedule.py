"""The order the suite's tests are handed to the xdist workers in (tests/_support/schedule.py)."""

from __future__ import annotations

import pytest

from tests._support.schedule import LONG_MODULES, SLOW, arrange, is_slow, shares


def _module(item: str) -> str:
    return item.split("::")[0]


def _items(spec: str) -> list[str]:
    """``"a3 b2"`` -> ``["a::0", "a::1", "a::2", "b::0", "b::1"]``."""
    return [f"{w[:-1]}::{i}" for w in spec.split() for i in range(int(w[-1]))]


@pytest.mark.parametrize(
    ("count", "workers", "sizes"),
    [(10, 2, [5, 5]), (11, 2, [5, 6]), (10, 3, [3, 3, 4]), (1, 2, [0, 1]), (7, 1, [7])],
)
def test_the_shares_are_worksteals(count: int, workers: int, sizes: list[int]) -> None:
    assert shares(count, workers) == sizes
    assert sum(sizes) == count


@pytest.mark.parametrize(
    ("spec", "workers", "long", "expected"),
    [
        # No long module: the collected order.
        ("a2 b2", 2, {}, "a a b b"),
        # The long module collected last runs first, on the first share.
        ("a3 b3 z2", 2, {"z": 9}, "z z a a a b b b"),
        # Two long ones: one at the head of each share, whole; the rest in order.
        ("a3 x2 b3 z2", 2, {"z": 9, "x": 5}, "z z a a a x x b b b"),
        # Three on two workers: the third goes where the least time was dealt.
        ("a4 x1 y1 z1", 2, {"z": 9, "y": 5, "x": 3}, "z a a y x a a"),
        # One worker (-n 0): the long ones first, longest first.
        ("a2 x1 z1", 1, {"z": 9, "x": 5}, "z x a a"),
        # One test of a module on its own ("path::name"); a longer key wins.
        ("a3 b2", 2, {"a::2": 9}, "a a a b b"),
        ("a3 b3", 2, {"b::1": 9, "b": 1}, "b a a b b a"),
        ("a3 b3", 2, {"b::": 9}, "a a a b b b"),  # "b::" names no test
        # A folder: its modules together ("d/x" and "d/y" are in "d").
        ("a2 d/x1 b2 d/y1", 2, {"d": 9}, "d/x d/y a a b b"),
    ],
)
def test_long_modules_lead_the_shares(
    spec: str, workers: int, long: dict[str, float], expected: str
) -> None:
    items = _items(spec)
    arranged = arrange(items, str, workers, long)
    assert sorted(arranged) == sorted(items)  # nothing lost or doubled
    assert " ".join(_module(i) for i in arranged) == expected
    # Within a module the collected order stays (unless one of its tests is named alone).
    for name in {_module(i) for i in items} - {_module(k) for k in long if "::" in k}:
        assert [i for i in arranged if _module(i) == name] == [
            i for i in items if _module(i) == name
        ]


@pytest.mark.parametrize(
    ("nodeid", "slow"),
    [
        ("a/m.py::test_x", True),  # the module's tests
        ("a/m.py::test_x[1-2]", True),
        ("a/m.py", True),
        ("a/m2.py::test_x", False),  # another module whose name starts alike
        ("b/n.py::test_y", True),  # the one test named
        ("b/n.py::test_y[p]", True),  # with its parameters
        ("b/n.py::test_yz", False),
        ("b/n.py::test_z", False),
    ],
)
def test_slow_tests_are_the_modules_and_tests_named(nodeid: str, slow: bool) -> None:
    table = {"a/m.py": "a", "b/n.py::test_y": "b"}
    assert (is_slow(nodeid, table) is not None) is slow


@pytest.mark.parametrize("table", [LONG_MODULES, SLOW], ids=["long", "slow"])
def test_every_long_and_slow_module_exists(table: dict[str, object]) -> None:
    from tests._support.checkout import ROOT

    missing = [m for m in table if not (ROOT / m.split("::")[0]).exists()]
    assert missing == []
    for key in table:
        if "::" in key:
            path, name = key.split("::", 1)
            assert f"def {name}(" in (ROOT / path).read_text(), key
