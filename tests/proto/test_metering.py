"""``InstrumentMeter``: what a run reports reaches its Prometheus instruments."""

from __future__ import annotations

import prometheus_client

from uamp_proto.metering import InstrumentMeter


def _samples(meter: InstrumentMeter) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in meter.registry.collect()
        for s in family.samples
    }


def test_runs_in_progress_deltas_and_first_deltas_are_counted() -> None:
    meter = InstrumentMeter()
    meter.create_instruments(prometheus_client)
    for agent in ("a", "a", "b", "a"):
        meter.run_started(agent)
    meter.run_ended("a")
    meter.run_ended("b")
    for _ in range(3):
        meter.sent_deltas("completions", "a", 5)
        meter.saw_first_delta("completions", "a", 0.002)
    samples = _samples(meter)
    assert samples["uamp_live_responses", frozenset({("agent", "a")})] == 2
    assert samples["uamp_live_responses", frozenset({("agent", "b")})] == 0
    by = frozenset({("transport", "completions"), ("agent", "a")})
    assert samples["uamp_deltas_total", by] == 15
    assert samples["uamp_time_to_first_delta_seconds_count", by] == 3
    assert samples["uamp_time_to_first_delta_seconds_bucket", by | {("le", "0.0025")}] == 3
    assert samples["uamp_time_to_first_delta_seconds_bucket", by | {("le", "0.001")}] == 0
    meter.run_ended("a")
    meter.run_ended("a")
    assert _samples(meter)["uamp_live_responses", frozenset({("agent", "a")})] == 0
