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

Quota: one principal holds at most ``max_per_principal`` tasks. At its quota
a new task first evicts that principal's own oldest finished task; when all
of its tasks are still running or paused the add is refused with
:func:`quota_exceeded` (JSON-RPC ``-32029``, REST 429) -- for that principal
only, so one caller cannot fill the store and lock everyone else out.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Iterator

from uamp_proto.adapters.a2a import INTERNAL_ERROR, TASK_NOT_FOUND, A2AError, A2ATask
from uamp_proto.principal import Principal

__all__ = ["QUOTA_EXCEEDED", "TaskStore", "quota_exceeded", "task_not_found"]

#: The JSON-RPC error of a principal over its task quota (a server-defined
#: code of JSON-RPC's -32000..-32099 range; 429 in its ``data`` and on REST).
QUOTA_EXCEEDED = -32029


def task_not_found(task_id: str) -> A2AError:
    """The one answer for a task id the caller may not see (absent, evicted or not theirs)."""
    return A2AError(TASK_NOT_FOUND, f"Task {task_id!r} was not found.", http_status=404)


def quota_exceeded(limit: int) -> A2AError:
    """The refusal of a principal that holds ``limit`` unfinished tasks already."""
    return A2AError(
        QUOTA_EXCEEDED,
        f"Too many unfinished tasks of yours (at most {limit}); wait for some to finish.",
        data={"status": 429, "code": "quota_exceeded", "limit": limit},
        http_status=429,
    )


class TaskStore:
    """A bounded in-memory task store, each task owned by a principal.

    When full, adding a task evicts the oldest *finished* task; when every
    task is still running or paused, the add is refused (refuse, don't grow).
    Each principal is held to its own quota (see the module docstring).

    Args:
        max_tasks: How many tasks to keep.
        max_per_principal: How many of them one principal may hold
            (default: a tenth of ``max_tasks``, at least 1).
    """

    def __init__(self, max_tasks: int = 1000, max_per_principal: int | None = None) -> None:
        if max_tasks < 1:
            raise ValueError("max_tasks must be at least 1")
        if max_per_principal is not None and max_per_principal < 1:
            raise ValueError("max_per_principal must be at least 1")
        self.max_tasks = max_tasks
        self.max_per_principal = (
            max(1, max_tasks // 10) if max_per_principal is None else max_per_principal
        )
        self._tasks: OrderedDict[str, A2ATask] = OrderedDict()
        self._owners: dict[str, tuple[str, str]] = {}
        self._held: Counter[tuple[str, str]] = Counter()

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
        key = owner.key
        if self._held[key] >= self.max_per_principal:
            self._drop(self._finished_of(key) or "")
            if self._held[key] >= self.max_per_principal:
                raise quota_exceeded(self.max_per_principal)
        while len(self._tasks) >= self.max_tasks:
            victim = next((t.id for t in self._tasks.values() if t.state.is_terminal), None)
            if victim is None:
                raise A2AError(
                    INTERNAL_ERROR,
                    "Too many unfinished tasks; try again later.",
                    http_status=503,
                )
            self._drop(victim)
        self._tasks[task.id] = task
        self._owners[task.id] = key
        self._held[key] += 1

    def check_quota(self, owner: Principal) -> None:
        """Refuse early (before money is locked) a principal whose next add would fail.

        Raises:
            A2AError: :data:`QUOTA_EXCEEDED` (HTTP 429).
        """
        key = owner.key
        if self._held[key] >= self.max_per_principal and self._finished_of(key) is None:
            raise quota_exceeded(self.max_per_principal)

    def _finished_of(self, key: tuple[str, str]) -> str | None:
        """The id of the oldest finished task of the principal ``key``."""
        owners = self._owners
        return next(
            (t.id for t in self._tasks.values() if t.state.is_terminal and owners[t.id] == key),
            None,
        )

    def _drop(self, task_id: str) -> None:
        if task_id in self._tasks:
            del self._tasks[task_id]
            key = self._owners.pop(task_id)
            self._held[key] -= 1
            if not self._held[key]:
                del self._held[key]

    def discard(self, task_id: str) -> None:
        """Forget a task (an agent that answered with a message made none to keep)."""
        self._drop(task_id)

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
