"""UAP section 12.2 item by item: the UAP events a react() stream carries, and their data."""

from __future__ import annotations

from tests.agents.test_level5_strategies import add, react_model
from uamp_agents import agent
from uamp_agents.execution import react
from uamp_agents.streaming import AgentStreamEvent


async def test_a_react_stream_carries_every_uap_event_with_its_data() -> None:
    a = agent(model=react_model(), tools=[add], execution=react())
    events: list[AgentStreamEvent] = []
    async with a.stream("2+3?") as stream:
        async for event in stream:
            events.append(event)
    uap = [e.uap for e in events if e.source == "uap" and e.uap is not None]
    assert [u.type for u in uap] == [
        "step_start",
        "reasoning",
        "action",
        "observation",
        "step_end",
        "step_start",
        "reasoning",
        "step_end",
    ]
    assert {u.agent_id for u in uap} == {a.id}
    assert [u.step for u in uap] == [1, 1, 1, 1, 1, 2, 2, 2]
    by_type = {u.type: u.data for u in uap if u.step == 1}
    assert by_type["step_start"]["step_number"] == 1
    assert by_type["reasoning"]["text"] == "I should add 2 and 3"
    assert [c.name for c in by_type["action"]["tool_calls"]] == ["add"]
    assert [r.result for r in by_type["observation"]["results"]] == ["5"]
    assert by_type["step_end"]["usage"].output_tokens > 0
    assert all(e.upp is None for e in events if e.source == "uap")
    assert all(e.uap is None for e in events if e.source == "upp")
