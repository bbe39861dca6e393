"""Counting the scheduler steps of chosen trio tasks (a trio instrument)."""

from __future__ import annotations

from collections.abc import Callable

import trio


class TaskSteps(trio.abc.Instrument):
    """Counts the steps run by tasks whose name ``match`` accepts."""

    def __init__(self, match: Callable[[str], bool]) -> None:
        self.match = match
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if self.match(task.name):
            self.steps += 1
