"""``uamp bench``'s rules and arithmetic: durations, URLs, percentiles, the summary, --compare."""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from uamp_trio.bench.config import (
    BenchConfig,
    chat_completions_url,
    parse_header,
    realtime_url,
    uamp_ws_url,
)
from uamp_trio.bench.hdr import QUANTILES, Distribution
from uamp_trio.bench.report import COMPARED, print_compare
from uamp_trio.bench.stats import Sample, distribution, percentile, summarize
from uamp_trio.units import parse_duration

DURATIONS = [
    ("30s", 30.0),
    ("2m", 120.0),
    ("45", 45.0),
    ("2.5", 2.5),
    ("1.5m", 90.0),
    ("1h", 3600.0),
    ("500ms", 0.5),
    (" 10s ", 10.0),
]


@pytest.mark.parametrize(("text", "seconds"), DURATIONS)
def test_a_duration_reads_units_or_plain_seconds(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "s", "10x", "-5", "0", "0s", "2 minutes", "1e3", "m2"])
def test_a_bad_duration_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


@given(st.integers(min_value=1, max_value=10**6), st.sampled_from(["", "s", "m", "h", "ms"]))
def test_every_whole_duration_in_every_unit_parses(value: int, unit: str) -> None:
    factor = {"": 1, "s": 1, "m": 60, "h": 3600, "ms": 0.001}[unit]
    assert parse_duration(f"{value}{unit}") == pytest.approx(value * factor)


def test_a_header_is_name_colon_value() -> None:
    assert parse_header("Authorization: Bearer a:b") == ("Authorization", "Bearer a:b")
    with pytest.raises(ValueError):
        parse_header("no colon here")
    with pytest.raises(ValueError):
        parse_header(": empty name")


URLS = [
    ("http://h:1/agents/demo", None, "http://h:1/agents/demo/v1/chat/completions"),
    ("http://h:1/agents/demo/", None, "http://h:1/agents/demo/v1/chat/completions"),
    ("http://h:1/agents/demo/chat/completions", None, "http://h:1/agents/demo/chat/completions"),
    ("https://api.x/v1/chat/completions", None, "https://api.x/v1/chat/completions"),
    ("http://h:8000/v1", None, "http://h:8000/v1/chat/completions"),
    ("http://h:8000", None, "http://h:8000/v1/chat/completions"),
    ("http://h:1", "demo", "http://h:1/agents/demo/v1/chat/completions"),
    ("http://h:1/", "demo", "http://h:1/agents/demo/v1/chat/completions"),
]


@pytest.mark.parametrize(("url", "agent", "endpoint"), URLS)
def test_the_chat_completions_endpoint_of_a_url(url: str, agent: str | None, endpoint: str) -> None:
    assert chat_completions_url(url, agent) == endpoint


WS_URLS = [
    ("http://h:1/agents/demo", None, ("ws://h:1/agents/demo/uamp", None)),
    ("https://h:1/agents/demo/uamp", None, ("wss://h:1/agents/demo/uamp", None)),
    ("http://h:1", "demo", ("ws://h:1/ws", "demo")),
    ("http://h:1", None, ("ws://h:1/ws", None)),
    ("ws://h:1/agents/x/uamp", None, ("ws://h:1/agents/x/uamp", None)),
]


@pytest.mark.parametrize(("url", "agent", "expected"), WS_URLS)
def test_the_uamp_websocket_of_a_url(
    url: str, agent: str | None, expected: tuple[str, str | None]
) -> None:
    assert uamp_ws_url(url, agent) == expected


REALTIME_URLS = [
    ("http://h:1/agents/demo", None, "ws://h:1/agents/demo/realtime"),
    ("https://h:1/agents/demo/realtime", None, "wss://h:1/agents/demo/realtime"),
    ("http://h:1", "demo", "ws://h:1/agents/demo/realtime"),
    ("http://h:1/", None, "ws://h:1/v1/realtime"),
    ("ws://h:1/x/realtime?model=m", None, "ws://h:1/x/realtime?model=m"),
]


@pytest.mark.parametrize(("url", "agent", "expected"), REALTIME_URLS)
def test_the_realtime_websocket_of_a_url(url: str, agent: str | None, expected: str) -> None:
    assert realtime_url(url, agent) == expected


@pytest.mark.parametrize("url", ["ftp://h/x", "h:1/agents/demo", "http://"])
def test_a_url_that_is_not_http_is_refused(url: str) -> None:
    with pytest.raises(ValueError):
        chat_completions_url(url)


def test_a_config_refuses_nonsense() -> None:
    with pytest.raises(ValueError):
        BenchConfig(url="http://h", concurrency=0)
    with pytest.raises(ValueError):
        BenchConfig(url="http://h", requests=0)
    with pytest.raises(ValueError):
        BenchConfig(url="http://h", transport="carrier-pigeon")


finite = st.floats(min_value=-1e9, max_value=1e9, allow_nan=False)


@given(st.lists(finite, min_size=1, max_size=200), st.floats(min_value=0, max_value=100))
def test_percentile_matches_numpy_linear(values: list[float], q: float) -> None:
    ours = percentile(sorted(values), q)
    reference = float(numpy.percentile(numpy.array(values), q, method="linear"))
    assert ours == pytest.approx(reference, rel=1e-9, abs=1e-6)


@given(st.lists(finite, min_size=1, max_size=200))
def test_an_exact_distribution_is_ordered_and_bounded(values: list[float]) -> None:
    d = Distribution(values, hdr=False).summary(scale=1.0)
    assert d["p50"] is not None and d["p90"] is not None and d["p99"] is not None
    assert min(values) <= d["p50"] <= d["p90"] <= d["p99"] <= max(values)
    assert d["mean"] == pytest.approx(math.fsum(values) / len(values), abs=1e-6)


latencies = st.floats(min_value=1e-3, max_value=600.0, allow_nan=False)


@settings(deadline=None)
@given(st.lists(latencies, min_size=1, max_size=300))
def test_hdr_percentiles_are_numpys_order_statistics_within_its_precision(
    values: list[float],
) -> None:
    d = distribution(values, scale=1.0)
    ordered = numpy.sort(numpy.array(values))
    for q in QUANTILES:
        # HdrHistogram's rank: round(q% of the count), at least 1; the value is the
        # top of that value's bucket: within 0.1 % (and the 1 us unit) above it.
        rank = max(1, int(q * len(values) / 100 + 0.5))
        exact = float(ordered[rank - 1])
        got = d[f"p{q:g}"]
        assert got is not None and exact - 1e-6 <= got <= exact * 1.001 + 1e-6, (q, exact, got)
    assert d["mean"] == pytest.approx(float(numpy.mean(ordered)), rel=1e-9)


@settings(deadline=None)
@given(st.lists(latencies, min_size=3, max_size=200), st.integers(1, 3))
def test_distributions_merge_exactly(values: list[float], parts: int) -> None:
    merged = Distribution()
    for k in range(parts):
        merged.add(Distribution.decode(Distribution(values[k::parts]).encode()))
    whole = Distribution(values)
    got, want = merged.summary(), whole.summary()
    assert {k: v for k, v in got.items() if k != "mean"} == {
        k: v for k, v in want.items() if k != "mean"
    }
    assert got["mean"] == pytest.approx(want["mean"]) and merged.count == len(values)
    with pytest.raises(ValueError, match="merge"):
        merged.add(Distribution(values, hdr=False))


def test_percentile_refuses_no_values_and_q_out_of_range() -> None:
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_the_summary_of_hand_made_samples() -> None:
    samples = [
        Sample(start=0.0, end=1.0, deltas=[0.25, 0.5, 1.0], bytes=100, text=3),
        Sample(start=1.0, end=1.5, deltas=[1.25], bytes=50, text=1),
        Sample(start=2.0, end=2.5, error="http_503", bytes=20),
        Sample(start=2.0, end=3.0, error="timeout"),
        Sample(start=3.0, end=3.5, error="timeout"),
    ]
    summary = summarize(samples, 4.0, transport="openai")
    data = summary.to_json()
    assert data["requests"] == 5 and data["ok"] == 2 and data["errors"] == 3
    assert data["errors_by_kind"] == {"http_503": 1, "timeout": 2}
    assert data["deltas"] == 4 and data["bytes"] == 170
    assert data["requests_per_s"] == pytest.approx(0.5)
    assert data["deltas_per_s"] == pytest.approx(1.0)
    assert data["transport"] == "openai"
    # TTFD 250 and 250 ms; ITL 250 and 500 ms (within the first response only);
    # E2E 1000 and 500 ms. HDR percentiles: the value at rank round(q% of 2), to 0.1 %.
    assert data["percentiles"] == "hdr"
    assert data["ttfd_ms"] == pytest.approx(
        {"p50": 250.0, "p90": 250.0, "p95": 250.0, "p99": 250.0, "p99.9": 250.0, "mean": 250.0},
        rel=1e-3,
    )
    assert data["itl_ms"]["p50"] == pytest.approx(250.0, rel=1e-3)
    assert data["itl_ms"]["p90"] == pytest.approx(500.0, rel=1e-3)
    assert data["e2e_ms"]["mean"] == pytest.approx(750.0)
    assert data["e2e_ms"]["p99"] == pytest.approx(1000.0, rel=1e-3)


def test_a_run_with_no_success_has_empty_distributions() -> None:
    data = summarize([Sample(start=0.0, end=1.0, error="connect")], 1.0).to_json()
    assert set(data["ttfd_ms"]) == {"p50", "p90", "p95", "p99", "p99.9", "mean"}
    assert set(data["ttfd_ms"].values()) == {None}
    assert data["requests_per_s"] == 0.0


def _run(rps: float, ttfd_p50: float) -> dict[str, object]:
    return {
        "requests_per_s": rps,
        "deltas_per_s": rps * 10,
        "errors": 0,
        "ttfd_ms": {"p50": ttfd_p50, "p90": 2 * ttfd_p50, "p99": 3 * ttfd_p50, "mean": ttfd_p50},
        "itl_ms": {"p50": 1.0, "p90": 1.0, "p99": 1.0, "mean": 1.0},
        "e2e_ms": {"p50": None, "p90": None, "p99": None, "mean": None},
    }


def test_compare_prints_each_figure_with_its_ratio_and_the_better_run() -> None:
    out = io.StringIO()
    print_compare(_run(100.0, 4.0), _run(250.0, 2.0), ("before.json", "after.json"), out)
    rows = {line.split("│")[1].strip(): line for line in out.getvalue().splitlines() if "│" in line}
    assert {label for label, _, _ in COMPARED} <= set(rows)
    cells = lambda label: [c.strip() for c in rows[label].split("│")[2:-1]]  # noqa: E731
    assert cells("requests/s") == ["100.00", "250.00", "2.50x", "b"]
    assert cells("deltas/s") == ["1,000.00", "2,500.00", "2.50x", "b"]
    assert cells("TTFD p50 (ms)") == ["4.00", "2.00", "0.50x", "b"]  # lower is better
    assert cells("ITL p50 (ms)") == ["1.00", "1.00", "1.00x", "-"]
    assert cells("E2E p50 (ms)") == ["-", "-", "-", "-"]
    assert "before.json" in out.getvalue() and "after.json" in out.getvalue()


# --- the throughput chart of a short run ------------------------------------------


@pytest.mark.parametrize(
    ("span", "width"), [(0.4, 0.02), (5.0, 0.25), (20.0, 1.0), (300.0, 1.0), (0.0, 0.00005)]
)
def test_a_short_run_gets_narrow_bins(span: float, width: float) -> None:
    from uamp_trio.bench.plot import MIN_BINS, bin_width

    assert bin_width(span) == pytest.approx(width)
    assert max(span, 0.001) / bin_width(span) >= MIN_BINS - 1e-9  # never one lone bin


def test_a_sub_second_run_draws_its_rate_in_every_bin() -> None:
    """40 requests ending evenly over 0.4 s: 20 bins of 20 ms at 100 requests/s each."""
    from uamp_trio.bench.plot import _rates, bin_width

    ends = [0.01 * (i + 0.5) for i in range(40)]
    width = bin_width(0.4)
    rates = _rates(ends, 0.0, width, 20)
    assert rates == pytest.approx([100.0] * 20)
    assert _rates([0.4], 0.0, width, 20)[-1] == pytest.approx(50.0)  # the run's last instant


def test_plot_writes_a_png_for_a_sub_second_run(tmp_path: Path) -> None:
    from uamp_trio.bench.plot import plot

    samples = [
        Sample(start=0.01 * i, end=0.01 * i + 0.05, deltas=[0.01 * i + 0.02]) for i in range(30)
    ]
    out = tmp_path / "short.png"
    plot(samples, out)
    assert out.read_bytes().startswith(b"\x89PNG")
