"""The A2A task store: the tasks an A2A server remembers between requests.

:mod:`uamp_proto.adapters.a2a` maps A2A onto UAMP and defines the task
(:class:`~uamp_proto.adapters.a2a.A2ATask`) and its state machine; keeping
tasks, looking them up and evicting old ones is the server's job, done here.
:class:`TaskStore` is bounded and in memory.

Ownership (docs/security.md): every task records the principal that created
it. A lookup names the caller's principal, and a task of any other principal
is answered exactly as a task that does not exist -- same error, same
message -- so an id cannot be probed. Listing and context lookups see only
the caller's tasks: a ``contextId`` of another principal is a fresh context.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator

from uamp_proto.adapters.a2a import INTERNAL_ERROR, TASK_NOT_FOUND, A2AError, A2ATask
from uamp_proto.principal import Principal

__all__ = ["TaskStore", "task_not_found"]


def task_not_found(task_id: str) -> A2AError:
    """The one answer for a task id the caller may not see (absent, evicted or not theirs)."""
    return A2AError(TASK_NOT_FOUND, f"Task {task_id!r} was not found.", http_status=404)


class TaskStore:
    """A bounded in-memory task store, each task owned by a principal.

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
        self._owners: dict[str, tuple[str, str]] = {}

    def __len__(self) -> int:
        return len(self._tasks)

    def __iter__(self) -> Iterator[A2ATask]:
        """Every task of every owner, oldest first (for the server, never a caller)."""
        return iter(list(self._tasks.values()))

    def add(self, task: A2ATask, *, owner: Principal) -> None:
        """Store a new task of ``owner``.

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
            del self._owners[victim]
        self._tasks[task.id] = task
        self._owners[task.id] = owner.key

    def get(self, task_id: str, *, owner: Principal) -> A2ATask:
        """The task with ``task_id``, if ``owner`` created it.

        Raises:
            A2AError: :data:`TASK_NOT_FOUND` (HTTP 404), the same for an
                unknown id and for another principal's task.
        """
        task = self._tasks.get(task_id)
        if task is None or self._owners[task_id] != owner.key:
            raise task_not_found(task_id)
        return task

    def owned_by(self, owner: Principal) -> list[A2ATask]:
        """The tasks of ``owner``, oldest first."""
        key = owner.key
        return [t for t in self._tasks.values() if self._owners[t.id] == key]

    def latest_in_context(self, context_id: str, *, owner: Principal) -> A2ATask | None:
        """The most recently created task of ``owner``'s conversation ``context_id``."""
        key = owner.key
        for task in reversed(self._tasks.values()):
            if task.context_id == context_id and self._owners[task.id] == key:
                return task
        return None
