"""The turn driver meters a metered agent's runs itself: the same counts as the wrapper's own.

:class:`~uamp_proto.metering.MeteredAgent` counts a run when called directly
(any caller); :class:`~uamp_trio.hosting.turns.ResponseRunner` counts it
itself and calls the agent inside. For every way a run ends, both must leave
the same scrape behind.
"""

from __future__ import annotations

import contextlib

import prometheus_client
import pytest
import trio

from tests.trio.hosting.test_server_turns import ScriptedAgent, request
from uamp_proto import events as ev
from uamp_proto.metering import InstrumentMeter, MeteredAgent
from uamp_trio.hosting.turns import ResponseRunner, run_response

#: (mode, deltas): done, the agent's error, a crash, a hang that is cancelled.
CASES = [("ok", 0), ("ok", 3), ("agent_error", 2), ("crash", 1), ("tool", 1), ("hang", 2)]


def _scrape(meter: InstrumentMeter) -> str:
    text = prometheus_client.generate_latest(meter.registry).decode()
    # The time to first delta's sum is a clock reading: each run's own.
    return "\n".join(ln for ln in text.splitlines() if "first_delta_seconds_sum" not in ln)


def _meter() -> InstrumentMeter:
    meter = InstrumentMeter()
    meter.create_instruments(prometheus_client)
    return meter


async def _through_wrapper(agent: MeteredAgent, mode: str) -> None:
    async def emit(event: ev.Event) -> None:
        pass

    with trio.move_on_after(0.05 if mode == "hang" else 10):
        with contextlib.suppress(Exception):
            await agent.respond(request(), emit)


async def _through_runner(agent: MeteredAgent, mode: str, cancellable: bool) -> None:
    if cancellable:
        runner = ResponseRunner(agent, request(), None)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(runner.run)
            if mode == "hang":
                await trio.sleep(0.05)
                nursery.cancel_scope.cancel()  # from outside: no terminal event
    else:
        with trio.move_on_after(0.05 if mode == "hang" else 10):
            await run_response(agent, request(), None)


@pytest.mark.parametrize("cancellable", [True, False], ids=["runner", "run_response"])
@pytest.mark.parametrize(("mode", "deltas"), CASES)
def test_the_runner_counts_as_the_wrapper(mode: str, deltas: int, cancellable: bool) -> None:
    scrapes = []
    for driver in ("wrapper", "runner"):
        meter = _meter()
        agent = MeteredAgent(
            ScriptedAgent(mode, deltas), meter, transport=lambda: "t", clock=lambda: 0.0
        )
        for _ in range(2):
            if driver == "wrapper":
                trio.run(_through_wrapper, agent, mode)
            else:
                trio.run(_through_runner, agent, mode, cancellable)
        scrapes.append(_scrape(meter))
    assert scrapes[0] == scrapes[1]
    assert 'uamp_live_responses{agent="scripted"} 0.0' in scrapes[1]
    if deltas:
        assert (
            'uamp_deltas_total{agent="scripted",transport="t"} ' + f"{2.0 * deltas}" in scrapes[1]
        )
    failed = {"agent_error": "tool_failed", "crash": "internal_error"}.get(mode)
    if failed:
        assert f'code="{failed}",transport="t"}} 2.0' in scrapes[1]
    else:
        assert "uamp_errors_total{" not in scrapes[1]
