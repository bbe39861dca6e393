"""The plain instruments scrape exactly as ``prometheus_client``'s own, whatever was counted."""

from __future__ import annotations

from typing import Any

import prometheus_client
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from uamp_proto import events as ev
from uamp_proto.metering import DURATION_BUCKETS, InstrumentMeter, MeteredAgent
from uamp_proto.plain_instruments import PlainCounter, PlainHistogram
from uamp_proto.types import DeltaText

LABELS = st.sampled_from(["completions", "a2a", "-", "x y", 'q"uote', "\\n"])
#: Values around and on the bucket bounds, tiny and huge ones.
SECONDS = st.one_of(
    st.sampled_from([0.0, *DURATION_BUCKETS]),
    st.floats(min_value=0, max_value=1e6, allow_nan=False),
)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("count"), LABELS, LABELS, st.integers(0, 5)),
        st.tuples(st.just("observe"), LABELS, LABELS, SECONDS),
    ),
    max_size=40,
)


@given(OPS)
def test_the_same_updates_scrape_the_same_text(ops: list[tuple[str, str, str, float]]) -> None:
    prometheus_client.disable_created_metrics()
    mine = prometheus_client.CollectorRegistry(auto_describe=True)
    theirs = prometheus_client.CollectorRegistry(auto_describe=True)
    names = ["transport", "agent"]
    counter = PlainCounter(prometheus_client, "c", "Things counted.", names, registry=mine)
    histogram = PlainHistogram(
        prometheus_client, "h_seconds", "Seconds.", names, registry=mine, buckets=DURATION_BUCKETS
    )
    ref_counter = prometheus_client.Counter("c", "Things counted.", names, registry=theirs)
    ref_histogram = prometheus_client.Histogram(
        "h_seconds", "Seconds.", names, buckets=DURATION_BUCKETS, registry=theirs
    )
    for op, a, b, amount in ops:
        if op == "count":
            counter.labels(a, b).inc(amount)
            ref_counter.labels(a, b).inc(amount)
        else:
            histogram.labels(a, b).observe(amount)
            ref_histogram.labels(a, b).observe(amount)
    assert prometheus_client.generate_latest(mine) == prometheus_client.generate_latest(theirs)


def test_label_values_are_text_and_counted_once() -> None:
    registry = prometheus_client.CollectorRegistry(auto_describe=True)
    counter = PlainCounter(prometheus_client, "c", "C.", ["status"], registry=registry)
    counter.labels(200).inc()
    counter.labels("200").inc()
    assert counter.labels(200) is counter.labels("200")
    assert b'c_total{status="200"} 2.0' in prometheus_client.generate_latest(registry)
    with pytest.raises(ValueError):
        counter.labels("200", "extra")
    with pytest.raises(ValueError):
        counter.labels(200).inc(-1)
    with pytest.raises(ValueError):  # a name taken twice in one registry
        PlainCounter(prometheus_client, "c", "C.", ["status"], registry=registry)


class _Agent:
    name = "a"

    def __init__(self, deltas: int) -> None:
        self.deltas = deltas

    def capabilities(self) -> None:
        return None

    async def respond(self, request: object, emit: Any) -> None:
        for _ in range(self.deltas):
            await emit(ev.ResponseDelta(delta=DeltaText(text="x")))


def test_a_run_without_deltas_makes_no_delta_series() -> None:
    """As with prometheus_client's children, made at the first delta: no zero series before."""
    meter = InstrumentMeter()
    meter.create_instruments(prometheus_client)
    sent: list[object] = []

    async def emit(event: object) -> None:
        sent.append(event)

    async def main() -> None:
        for deltas in (0, 3):
            agent = MeteredAgent(_Agent(deltas), meter, transport=lambda: "t", clock=lambda: 1.0)
            await agent.respond(None, emit)  # type: ignore[arg-type]

    text = prometheus_client.generate_latest(meter.registry).decode()
    assert "uamp_deltas_total{" not in text
    trio.run(main)
    text = prometheus_client.generate_latest(meter.registry).decode()
    assert 'uamp_deltas_total{agent="a",transport="t"} 3.0' in text
    assert 'uamp_time_to_first_delta_seconds_count{agent="a",transport="t"} 1.0' in text
    assert 'uamp_live_responses{agent="a"} 0.0' in text
    assert len(sent) == 3
