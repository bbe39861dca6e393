"""The router's index by first segment answers as a walk of the whole table does."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from uamp_trio.engines.http import Headers, HTTPError, Request, Response
from uamp_trio.hosting.router import Route, Router


async def _endpoint(request: Request) -> Response:
    return Response()


def _guard(headers: Headers) -> bool:
    return headers.get("x-guard") is not None


def _walk(router: Router, method: str, path: str, headers: Headers | None) -> object:
    """What ``match`` answered before the index: the first match of the whole table."""
    allowed: set[str] = set()
    for route in list(router.routes):
        m = route.regex.match(path)
        if m is None:
            continue
        if method in route.methods or (method == "HEAD" and "GET" in route.methods):
            if route.when is not None and (headers is None or not route.when(headers)):
                continue
            return route, m.groupdict()
        allowed |= route.methods
    return (405, ", ".join(sorted(allowed))) if allowed else 404


def _indexed(router: Router, method: str, path: str, headers: Headers | None) -> object:
    try:
        return router.match(method, path, headers)
    except HTTPError as exc:
        if exc.status == 405:
            return 405, dict(exc.headers)["allow"]
        return exc.status


_SEGMENTS = st.sampled_from(["a", "b", "v1", "a.b", "", "{p}", "{p}:go", "x{p}", "models"])


def _pattern(segments: list[str]) -> str:
    """``/``-joined segments, each ``{p}`` named after its place (names must differ)."""
    return "/" + "/".join(s.replace("{p}", f"{{p{i}}}") for i, s in enumerate(segments))


_PATTERNS = st.lists(_SEGMENTS, min_size=1, max_size=3).map(_pattern)
_PATH_SEGMENTS = st.sampled_from(["a", "b", "v1", "a.b", "", "q", "q:go", "xq", "models", "a\n"])
_PATHS = st.one_of(
    st.lists(_PATH_SEGMENTS, min_size=1, max_size=4).map(lambda s: "/" + "/".join(s)),
    st.text(alphabet="/ab\n.:{}", max_size=8),
)
_ROUTES = st.lists(
    st.tuples(
        st.sets(st.sampled_from(["GET", "POST", "DELETE"]), min_size=1), _PATTERNS, st.booleans()
    ),
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(
    routes=_ROUTES,
    probes=st.lists(
        st.tuples(
            st.sampled_from(["GET", "HEAD", "POST", "PUT"]),
            _PATHS,
            st.sampled_from([None, {}, {"x-guard": "1"}]),
        ),
        min_size=1,
        max_size=6,
    ),
    sort_after=st.booleans(),
)
def test_the_index_finds_what_a_walk_of_the_table_finds(
    routes: list[tuple[set[str], str, bool]],
    probes: list[tuple[str, str, dict[str, str] | None]],
    sort_after: bool,
) -> None:
    router = Router()
    for i, (methods, pattern, guarded) in enumerate(routes):
        router.add(methods, pattern, _endpoint, label=str(i), when=_guard if guarded else None)
    for step in range(2):
        for method, path, head in probes:
            headers = None if head is None else Headers(head.items())
            assert _indexed(router, method, path, headers) == _walk(router, method, path, headers)
        if step == 0 and sort_after:  # the table changed after the index was built
            router.routes.sort(key=lambda route: route.pattern)
        elif step == 0:
            router.add("GET", "/{x}", _endpoint, label="late")


def test_every_change_to_the_table_is_seen() -> None:
    router = Router()
    router.add("GET", "/a", _endpoint, label="first")
    assert router.match("GET", "/a")[0].label == "first"
    late = Route("/a", frozenset({"GET"}), _endpoint, "late")
    changes = [
        lambda: router.routes.insert(0, late),
        lambda: router.routes.__setitem__(0, late),
        lambda: router.routes.__setitem__(slice(0, 1), [late]),
        lambda: router.routes.reverse(),
        lambda: router.routes.sort(key=lambda r: r.label != "late"),
    ]
    for change in changes:
        router.routes[:] = [Route("/a", frozenset({"GET"}), _endpoint, "first")]
        assert router.match("GET", "/a")[0].label == "first"
        router.routes.append(late)
        assert router.match("GET", "/a")[0].label == "first"
        change()
        assert router.match("GET", "/a")[0].label == "late", change
    router.routes = []
    with pytest.raises(HTTPError):
        router.match("GET", "/a")


def test_a_line_feed_at_the_end_matches_as_the_regex_does() -> None:
    router = Router()
    router.add("GET", "/models", _endpoint, label="models")
    router.add("GET", "/{x}/y", _endpoint, label="y")
    # ``$`` matches before a final line feed: the walk's answer, kept.
    assert re.match(router.routes[0].regex, "/models\n") is not None
    assert router.match("GET", "/models\n")[0].label == "models"
    assert router.match("GET", "/a\n/y")[0].label == "y"
