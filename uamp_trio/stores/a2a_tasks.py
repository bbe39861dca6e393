"""The A2A task store: the tasks an A2A server remembers between requests.

:mod:`uamp_proto.adapters.a2a` maps A2A onto UAMP and defines the task
(:class:`~uamp_proto.adapters.a2a.A2ATask`) and its state machine; keeping
tasks, looking them up and evicting old ones is the server's job, done here.
:class:`TaskStore` is bounded and in memory.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator

from uamp_proto.adapters.a2a import INTERNAL_ERROR, TASK_NOT_FOUND, A2AError, A2ATask

__all__ = ["TaskStore"]


class TaskStore:
    """A bounded in-memory task store.

    When full, adding a task evicts the oldest *finished* task; when every
    task is still running or paused, the add is refused (refuse, don't grow).

    Args:
        max_tasks: How many tasks to keep.
    """

    def __init__(self, max_tasks: int = 1000) -> None:
        if max_tasks < 1:
            raise ValueError("max_tasks must be at least 1")
        self.max_tasks = max_tasks
        self._tasks: OrderedDict[str, A2ATask] = OrderedDict()

    def __len__(self) -> int:
        return len(self._tasks)

    def __iter__(self) -> Iterator[A2ATask]:
        return iter(list(self._tasks.values()))

    def add(self, task: A2ATask) -> None:
        """Store a new task.

        Raises:
            A2AError: :data:`INTERNAL_ERROR` (HTTP 503) when the store is full
                of unfinished tasks; ``ValueError`` for a duplicate id.
        """
        if task.id in self._tasks:
            raise ValueError(f"task {task.id!r} exists already")
        while len(self._tasks) >= self.max_tasks:
            victim = next((t.id for t in self._tasks.values() if t.state.is_terminal), None)
            if victim is None:
                raise A2AError(
                    INTERNAL_ERROR,
                    "Too many unfinished tasks; try again later.",
                    http_status=503,
                )
            del self._tasks[victim]
        self._tasks[task.id] = task

    def get(self, task_id: str) -> A2ATask:
        """The task with ``task_id``.

        Raises:
            A2AError: :data:`TASK_NOT_FOUND` (HTTP 404).
        """
        task = self._tasks.get(task_id)
        if task is None:
            raise A2AError(TASK_NOT_FOUND, f"Task {task_id!r} was not found.", http_status=404)
        return task

    def latest_in_context(self, context_id: str) -> A2ATask | None:
        """The most recently created task of a conversation."""
        for task in reversed(self._tasks.values()):
            if task.context_id == context_id:
                return task
        return None
