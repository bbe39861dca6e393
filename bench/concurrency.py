"""Concurrent tool calls: ten 100 ms tools requested in one step.

Runs the same agent twice in one process -- once with the tools concurrent
(the default), once with every tool marked ``sequential=True`` (the
baseline) -- and prints both wall times and their ratio. Expect about 0.1 s
against 1.0 s.

    /work/venv/bin/python bench/concurrency.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from uamp_agents import agent, tool
from uamp_agents.providers import function
from uamp_proto.types import Message, ToolDefinition

CALLS = 10
DELAY = 0.1


async def nap(i: int) -> int:
    """Sleep for DELAY seconds, then return ``i``."""
    await trio.sleep(DELAY)
    return i


def model() -> Any:
    def fn(messages: list[Message], tools: list[ToolDefinition]) -> Any:
        if messages[-1].role == "tool":
            return "done"
        return [("nap", {"i": i}) for i in range(CALLS)]

    return function(fn)


async def timed(sequential: bool) -> float:
    a = agent(model=model(), tools=[tool(nap, sequential=sequential)])
    start = time.perf_counter()
    turn = await a.run("go")
    elapsed = time.perf_counter() - start
    assert [e.output.result for e in turn.tool_executions] == [str(i) for i in range(CALLS)]
    return elapsed


async def main() -> None:
    await timed(False)  # warm-up
    concurrent = min([await timed(False) for _ in range(3)])
    sequential = await timed(True)
    print(f"{CALLS} tools x {DELAY * 1000:.0f} ms requested in one step")
    print(f"  concurrent (nursery): {concurrent:.3f} s")
    print(f"  sequential baseline : {sequential:.3f} s  (sum of the calls)")
    print(f"  speed-up            : {sequential / concurrent:.1f}x")


if __name__ == "__main__":
    trio.run(main)
