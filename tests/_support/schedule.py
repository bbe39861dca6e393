"""The order xdist hands the tests out in: the long modules first, one per worker.

pytest-xdist's ``worksteal`` mode gives each of its ``k`` workers one
contiguous share of the collected tests (the first ``n // k``, then a share
of the rest ...), and a worker that runs dry takes the second half of the
busiest worker's queue. A long module collected near the end of a share is
run last, alone: the other worker is idle for its whole length (the cluster
test's minute was the suite's tail). And a module split between two shares
sets its module fixtures up twice (the attack suite, a minute, ran twice).

:func:`arrange` reorders the collection: the modules (or single tests)
named in :data:`LONG_MODULES` are dealt to the shares, longest first, each
to the one with the least time dealt so far (so every share starts with its
long modules, whole), then the other tests fill the shares in their
collected order. A module missing from the table only runs in its usual place.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

__all__ = ["LONG_MODULES", "SLOW", "arrange", "is_slow", "shares"]

T = TypeVar("T")

#: Modules (or single tests, ``path::name``) that take many seconds (setup and
#: teardown included, measured with ``--durations``; roughly, on a 2-core
#: machine): run first, the longest first.
LONG_MODULES: dict[str, float] = {
    "tests/docs/test_snippets.py::test_first_hour_verbatim_in_a_fresh_venv": 90,
    # One group: the packaging tests share their process's sdist/wheel build
    # (tests/architecture/conftest.py), which a split would make twice.
    "tests/architecture": 90,
    # One group: the browser tests share their process's Chromium (tests/browser/conftest.py).
    "tests/browser": 75,
    "tests/bench/test_attacks.py": 60,
    # Not tests/trio/test_cluster.py: dealt here it ran beside the attack suite
    # and the fresh-venv installs, and its clients' deadlines ran out (two of
    # three CI runs); in its collected place it meets lighter neighbours.
    "tests/trio/test_scale_out_routing.py": 35,
    "tests/trio/transports/test_json_fuzz.py": 30,
    "tests/trio/test_chat_scale_out.py": 27,
    "tests/interop/test_relay_redis.py": 25,
    "tests/interop/test_responses_stores.py": 25,
    "tests/trio/rpc/test_chat_bindings.py": 19,
    "tests/trio/trust/test_ledger_postgres.py": 19,
    "tests/trio/trust/test_ledger_postgres_cli.py": 18,
    "tests/trio/bench/test_bench_live.py": 17,
    "tests/trio/test_scale_out.py": 17,
    "tests/interop/test_webagents_uamp.py": 10,
    "tests/interop/test_a2a_node_loss.py": 10,
    "tests/bench/test_cluster_bench.py": 30,
}


#: The slow end-to-end tests (modules or single tests, as in :data:`LONG_MODULES`):
#: marked ``slow`` and skipped unless ``pytest --slow``; ``.ci/run`` runs them
#: after the rest (``pytest --slow -m slow``), in one process. Each starts many
#: processes or a fresh environment and runs for tens of seconds alone.
SLOW: dict[str, str] = {
    "tests/trio/test_cluster.py::"
    "test_two_hundred_paid_conversations_on_five_transports_survive_a_kill_and_a_drain": "a "
    "cluster of uamp serve processes behind haproxy, on Redis and PostgreSQL, 200 conversations "
    "through a kill and a drain",
    "tests/bench/test_compare.py": "uamp, webagents and pydantic-ai servers driven by uamp bench",
    "tests/bench/test_cluster_bench.py": "bench/cluster.py against a cluster of processes",
    "tests/bench/test_attacks.py": "the attack suite against a real uamp serve",
    "tests/docs/test_snippets.py::test_first_hour_verbatim_in_a_fresh_venv": "docs/first-hour.md "
    "from a fresh virtual environment filled from the package index",
}


def is_slow(nodeid: str, slow: dict[str, str] = SLOW) -> str | None:
    """Why test ``nodeid`` is slow (its entry of ``slow``), or ``None``."""
    return next((why for key, why in slow.items() if _within(nodeid, key)), None)


def shares(count: int, workers: int) -> list[int]:
    """The sizes of the contiguous shares ``worksteal`` gives ``workers`` of ``count`` tests."""
    sizes = []
    left = count
    for i in range(workers):
        size = left // (workers - i)
        sizes.append(size)
        left -= size
    return sizes


def _within(nodeid: str, key: str) -> bool:
    """Whether test ``nodeid`` is ``key`` or in it (a folder, a module, a test's parameters)."""
    return nodeid == key or nodeid.startswith((key + "/", key + "::", key + "["))


def arrange(
    items: Sequence[T], nodeid: Callable[[T], str], workers: int, long: dict[str, float]
) -> list[T]:
    """``items`` reordered so that each of ``workers`` shares starts with its long groups.

    A key of ``long`` is a folder or a module's path (its tests stay together:
    their module or folder fixtures are set up once) or one test's
    ``path::name`` (that test alone).
    """
    groups: dict[str, list[T]] = {}
    rest: list[T] = []
    for item in items:
        found = nodeid(item)
        name = max((k for k in long if _within(found, k)), key=len, default="")
        if name:
            groups.setdefault(name, []).append(item)
        else:
            rest.append(item)
    if not groups:
        return list(items)
    sizes = shares(len(items), max(workers, 1))
    dealt: list[list[T]] = [[] for _ in sizes]
    seconds = [0.0 for _ in sizes]
    for name in sorted(groups, key=lambda n: (-long[n], n)):
        fits = [i for i, size in enumerate(sizes) if len(dealt[i]) + len(groups[name]) <= size]
        share = min(fits or range(len(sizes)), key=lambda i: (seconds[i], i))
        dealt[share] += groups[name]
        seconds[share] += long[name]
    arranged: list[T] = []
    for share, size in enumerate(sizes):
        take = max(size - len(dealt[share]), 0)
        arranged += dealt[share] + rest[:take]
        del rest[:take]
    return arranged + rest


if __name__ == "__main__":  # .ci/run: the slow tests' node ids, for ``pytest --slow``
    print("\n".join(SLOW))
