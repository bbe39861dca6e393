"""What the spec 002 audit of issue 30 found: react thinking, step ids, sub-agent checkpoints."""

from __future__ import annotations

import uuid

from uamp_agents import agent, session, tool
from uamp_agents.execution import react
from uamp_agents.providers import _demo
from uamp_proto import events as ev
from uamp_proto.adapters.agui import RunEncoder
from uamp_proto.ids import counter_ids

ADD = tool(_demo.add, thread=False)


async def test_react_streams_its_reasoning_as_thinking_not_as_the_answer() -> None:
    a = agent(
        model=_demo.demo(),
        tools=[tool(_demo.multiply, thread=False)],
        execution=react(),
        name="r",
    )
    text, thoughts = [], []
    async with a.stream("what is 6*7?") as stream:
        async for event in stream:
            upp = event.upp
            if isinstance(upp, ev.ResponseDelta) and hasattr(upp.delta, "text"):
                text.append(upp.delta.text)
            elif isinstance(upp, ev.Thinking):
                thoughts.append(upp.content)
    assert "".join(text) == "6 * 7 = 42"
    assert "".join(thoughts)  # the reasoning went out, as thinking


async def test_a_step_checkpoint_holds_the_sub_agent_state_of_that_step() -> None:
    sub = agent(tools=[ADD], name="calculator", description="adds")
    boss = agent(model=_demo.demo(), tools=[sub], name="boss")
    s = session(boss)
    turn = await s.run("ask the calculator: what is 2+3?")
    assert "2 + 3 = 5" in turn.text
    steps = [c for c in s.checkpoints if c.metadata["reason"] == "step"]
    assert len(steps) == 2
    first, last = steps
    assert len(first.sub_agent_states) == 1  # the step that called the calculator
    [(sub_id, state)] = first.sub_agent_states.items()
    assert state["metadata"]["toolName"] == "calculator"
    assert last.sub_agent_states.keys() == first.sub_agent_states.keys()  # the same id
    assert s.sub_agent_states.keys() == {sub_id}
    assert all(uuid.UUID(c.metadata["stepId"]).version == 4 for c in steps)
    assert first.metadata["stepId"] != last.metadata["stepId"]


def test_agent_steps_become_ag_ui_steps() -> None:
    run = RunEncoder("t", "r", counter_ids())
    run.start()
    out = []
    for n in (1, 2):
        for stage in ("step_start", "step_end"):
            out += run.feed(ev.Progress(target="response", target_id="resp_1", stage=stage, step=n))
    assert [(e["type"], e["stepName"]) for e in out] == [
        ("STEP_STARTED", "step 1"),
        ("STEP_FINISHED", "step 1"),
        ("STEP_STARTED", "step 2"),
        ("STEP_FINISHED", "step 2"),
    ]
