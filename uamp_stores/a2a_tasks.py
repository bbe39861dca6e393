"""The A2A task store: the tasks an A2A server remembers between requests.

:mod:`uamp_proto.adapters.a2a` maps A2A onto UAMP and defines the task
(:class:`~uamp_proto.adapters.a2a.A2ATask`) and its state machine; keeping
tasks, looking them up, evicting old ones and telling subscribers of their
updates is the server's job, done here. :class:`TaskStore` is the
interface; :class:`MemoryTaskStore` (the default, one process) and
:class:`~uamp_stores.a2a_tasks_redis.RedisTaskStore` (several
processes on one Redis) implement it. The store is written on anyio: ``uamp
serve`` (Trio) and the ASGI app (``uamp_asgi.Config.a2a_tasks``, on asyncio)
keep their tasks in the same stores, and two such servers share a Redis one.

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

Updates: the process running a task's turn :meth:`~TaskStore.publish` es
each batch of its updates, which also writes the task. Every update gets the
task's next sequence number; :meth:`~TaskStore.follow` gives a subscriber
the task as it is and a :class:`TaskFeed` of the updates after that
snapshot (no update twice, none missed), in whichever process it runs. A
subscriber that cannot keep up is dropped, never queued for; feeds end when
the task ends. :meth:`~TaskStore.request_cancel` asks the process running a
task's turn to cancel it.

Node loss: a shared store remembers which process runs a working task's
turn, and each process keeps a short-lived heartbeat while it runs. When
that process dies mid-turn, the first survivor asked about the task
(:meth:`~TaskStore.take_over`) holds it, alone, and ends it ``failed`` with
code ``interrupted`` (docs/scale-out.md): a subscriber on a survivor gets
that terminal state rather than waiting for ever.
"""

from __future__ import annotations

import abc
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator, Callable, Container, Iterator
from typing import TYPE_CHECKING, Final

import anyio
import attrs
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from uamp_proto.adapters.a2a import (
    INTERNAL_ERROR,
    QUOTA_EXCEEDED,
    A2AError,
    A2ATask,
    Update,
    task_not_found,
)
from uamp_proto.principal import Principal

if TYPE_CHECKING:
    from .background import Spawner

__all__ = [
    "QUOTA_EXCEEDED",
    "MemoryTaskStore",
    "TaskFeed",
    "TaskStore",
    "quota_exceeded",
    "store_full",
    "task_not_found",
]


#: Updates buffered per subscriber before a slow one is dropped.
FEED_BUFFER: Final = 64


def quota_exceeded(limit: int) -> A2AError:
    """The refusal of a principal that holds ``limit`` unfinished tasks already."""
    return A2AError(
        QUOTA_EXCEEDED,
        f"Too many unfinished tasks of yours (at most {limit}); wait for some to finish.",
        data={"status": 429, "code": "quota_exceeded", "limit": limit},
        http_status=429,
    )


def store_full() -> A2AError:
    """The refusal of a new task when every stored task is still running or paused."""
    return A2AError(INTERNAL_ERROR, "Too many unfinished tasks; try again later.", http_status=503)


#: One update as a feed carries it: ``(sequence number, update)``.
Numbered = tuple[int, Update]


@attrs.define(eq=False)
class TaskFeed:
    """The updates of one task after a snapshot: iterate it, close it when done.

    Attributes:
        after: The snapshot's sequence number: earlier updates are skipped.
    """

    _receive: MemoryObjectReceiveStream[Numbered]
    after: int
    _close: Callable[[], None] = lambda: None

    async def __aiter__(self) -> AsyncIterator[Update]:
        async for seq, update in self._receive:
            if seq > self.after:
                self.after = seq
                yield update

    def close(self) -> None:
        """Stop following (the store forgets this subscriber)."""
        self._receive.close()
        self._close()


class _Watchers:
    """The open feeds of each task in this process."""

    def __init__(self) -> None:
        #: The open feeds' channels by task id (a task with none is absent).
        self.by_task: dict[str, list[MemoryObjectSendStream[Numbered]]] = {}

    def __contains__(self, task_id: str) -> bool:
        return task_id in self.by_task

    def open(self, task_id: str, after: int = 0) -> TaskFeed:
        send, receive = anyio.create_memory_object_stream[Numbered](FEED_BUFFER)
        self.by_task.setdefault(task_id, []).append(send)

        def forget() -> None:
            watchers = self.by_task.get(task_id)
            if watchers is not None and send in watchers:
                watchers.remove(send)
                if not watchers:
                    del self.by_task[task_id]
            send.close()

        return TaskFeed(receive, after, forget)

    def deliver(self, task_id: str, seq: int, update: Update) -> None:
        """Give every feed of ``task_id`` the update; end them all when the task ends."""
        watchers = self.by_task.get(task_id)
        if not watchers:
            return
        for send in list(watchers):
            try:
                send.send_nowait((seq, update))
            except (anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError):
                watchers.remove(send)  # too slow, or gone: dropped, never waited for
                send.close()
        if update.state is not None and update.state.is_terminal and update.final:
            self.close(task_id)

    def close(self, task_id: str) -> None:
        for send in self.by_task.pop(task_id, []):
            send.close()


class _EveryId:
    """The ids a shared store's :meth:`TaskStore.watching` holds: all of them."""

    def __contains__(self, task_id: object) -> bool:
        return True


_EVERY_ID: Final = _EveryId()


class TaskStore(abc.ABC):
    """Where A2A tasks are kept, each owned by a principal; see the module docstring.

    When full, adding a task evicts the oldest *finished* task; when every
    task is still running or paused, the add is refused (refuse, don't grow).

    Args:
        max_tasks: How many tasks to keep (in the whole store: a shared
            store holds them for every process).
        max_per_principal: How many of them one principal may hold
            (default: a tenth of ``max_tasks``, at least 1).
    """

    #: Whether other processes share the store (a task may run elsewhere).
    shared: bool = False

    def __init__(self, max_tasks: int = 1000, max_per_principal: int | None = None) -> None:
        if max_tasks < 1:
            raise ValueError("max_tasks must be at least 1")
        if max_per_principal is not None and max_per_principal < 1:
            raise ValueError("max_per_principal must be at least 1")
        self.max_tasks = max_tasks
        self.max_per_principal = (
            max(1, max_tasks // 10) if max_per_principal is None else max_per_principal
        )
        self._watchers = _Watchers()
        self._cancel_handlers: list[Callable[[str], None]] = []

    @abc.abstractmethod
    async def add(self, task: A2ATask, *, owner: Principal) -> None:
        """Store a new task of ``owner``.

        Raises:
            A2AError: :data:`QUOTA_EXCEEDED` (HTTP 429) for a principal at its
                quota; :data:`INTERNAL_ERROR` (HTTP 503) when the store is
                full of unfinished tasks. ``ValueError`` for a duplicate id.
        """

    @abc.abstractmethod
    async def check_quota(self, owner: Principal) -> None:
        """Refuse early (before money is locked) a principal whose next add would fail.

        Raises:
            A2AError: :data:`QUOTA_EXCEEDED` (HTTP 429).
        """

    @abc.abstractmethod
    async def discard(self, task_id: str) -> None:
        """Forget a task (an agent that answered with a message made none to keep)."""

    @abc.abstractmethod
    async def get(self, task_id: str, *, owner: Principal) -> A2ATask:
        """The task with ``task_id``, if ``owner`` created it.

        Raises:
            A2AError: :data:`TASK_NOT_FOUND` (HTTP 404), the same for an
                unknown id and for another principal's task.
        """

    @abc.abstractmethod
    async def owned_by(self, owner: Principal) -> list[A2ATask]:
        """The tasks of ``owner``, oldest first."""

    @abc.abstractmethod
    async def latest_in_context(self, context_id: str, *, owner: Principal) -> A2ATask | None:
        """The most recently created task of ``owner``'s conversation ``context_id``."""

    @abc.abstractmethod
    async def save(self, task: A2ATask) -> None:
        """Write ``task`` as it is now, push-notification configs included."""

    @abc.abstractmethod
    async def save_push_configs(self, task: A2ATask) -> None:
        """Write only ``task`` 's push-notification configs (the task may run elsewhere)."""

    @abc.abstractmethod
    async def publish(self, task: A2ATask, updates: list[Update]) -> None:
        """Write ``task`` (not its push configs) and give ``updates`` to every subscriber.

        A shared store refreshes ``task.push_configs`` from what is stored
        (another process may have changed them). A task no longer stored
        is not written back.
        """

    @abc.abstractmethod
    async def follow(self, task_id: str, *, owner: Principal) -> tuple[A2ATask, TaskFeed]:
        """The task (as :meth:`get`) and a feed of the updates published after that snapshot."""

    def watched(self, task_id: str) -> bool:
        """Whether :meth:`publish` of ``task_id`` 's updates may reach anyone.

        ``False`` only for a store no other process shares with no
        subscriber of the task here: then publishing changes nothing and a
        running turn may skip it.
        """
        return self.shared or task_id in self._watchers.by_task

    def watching(self) -> Container[str]:
        """The ids :meth:`watched` says yes for, as a view that follows the store.

        ``task_id in view`` answers as ``watched(task_id)`` would at that
        moment, without a method call (a dict's keys; every id when other
        processes share the store): for a running turn to ask on every
        streamed chunk.
        """
        return _EVERY_ID if self.shared else self._watchers.by_task.keys()

    async def request_cancel(self, task_id: str) -> None:
        """Ask whichever process runs ``task_id`` 's turn to cancel it (it may be none)."""
        self._cancel_here(task_id)

    async def cancel_running(self, task_id: str, *, owner: Principal, wait: float) -> A2ATask:
        """Have ``task_id`` 's turn cancelled wherever it runs; the task once it ended.

        Follows the task, asks for the cancel (:meth:`request_cancel`), then
        waits for the turn's final update, at most ``wait`` seconds: a task
        still running after that comes back as it is (its process is gone or
        did not answer). A finished or paused task comes back at once.

        Raises:
            A2AError: :data:`TASK_NOT_FOUND`, as :meth:`get`.
        """
        task, feed = await self.follow(task_id, owner=owner)
        try:
            if task.state.is_terminal or task.state.is_interrupted:
                return task
            await self.request_cancel(task_id)
            with anyio.move_on_after(wait):
                async for update in feed:
                    if update.final:
                        break
        finally:
            feed.close()
        return await self.get(task_id, owner=owner)

    def on_cancel(self, handler: Callable[[str], None]) -> None:
        """Call ``handler(task_id)`` for each cancel request reaching this process."""
        self._cancel_handlers.append(handler)

    def _cancel_here(self, task_id: str) -> None:
        for handler in self._cancel_handlers:
            handler(task_id)

    async def take_over(self, task_id: str) -> bool:
        """Whether the process running ``task_id`` 's turn died and this one now holds the task.

        Exactly one process gets ``True`` for a task whose runner is gone; a
        single-process store never loses its runner without losing itself.
        """
        return False

    def ensure_running(self, nursery: Spawner | None) -> None:  # noqa: B027 - optional
        """Start what the store runs in the background (a shared store listens to the others)."""

    async def aclose(self) -> None:  # noqa: B027 - optional for stores holding nothing open
        """Release what the store holds open."""


class MemoryTaskStore(TaskStore):
    """A bounded task store in this process's memory (the default).

    Tasks are kept by reference: what a running turn changes is seen at
    once, and :meth:`save` has nothing to write.
    """

    def __init__(self, max_tasks: int = 1000, max_per_principal: int | None = None) -> None:
        super().__init__(max_tasks, max_per_principal)
        self._tasks: OrderedDict[str, A2ATask] = OrderedDict()
        self._owners: dict[str, tuple[str, str]] = {}
        self._held: Counter[tuple[str, str]] = Counter()
        self._seq: Counter[str] = Counter()

    def __len__(self) -> int:
        return len(self._tasks)

    def __iter__(self) -> Iterator[A2ATask]:
        """Every task of every owner, oldest first (for the server, never a caller)."""
        return iter(list(self._tasks.values()))

    async def add(self, task: A2ATask, *, owner: Principal) -> None:
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
                raise store_full()
            self._drop(victim)
        self._tasks[task.id] = task
        self._owners[task.id] = key
        self._held[key] += 1

    async def check_quota(self, owner: Principal) -> None:
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
            self._seq.pop(task_id, None)
            self._watchers.close(task_id)

    async def discard(self, task_id: str) -> None:
        self._drop(task_id)

    async def get(self, task_id: str, *, owner: Principal) -> A2ATask:
        task = self._tasks.get(task_id)
        if task is None or self._owners[task_id] != owner.key:
            raise task_not_found(task_id)
        return task

    async def owned_by(self, owner: Principal) -> list[A2ATask]:
        key = owner.key
        return [t for t in self._tasks.values() if self._owners[t.id] == key]

    async def latest_in_context(self, context_id: str, *, owner: Principal) -> A2ATask | None:
        key = owner.key
        for task in reversed(self._tasks.values()):
            if task.context_id == context_id and self._owners[task.id] == key:
                return task
        return None

    async def save(self, task: A2ATask) -> None:
        return  # kept by reference

    async def save_push_configs(self, task: A2ATask) -> None:
        return  # kept by reference

    async def publish(self, task: A2ATask, updates: list[Update]) -> None:
        if task.id not in self._tasks:
            return
        for update in updates:
            self._seq[task.id] += 1
            self._watchers.deliver(task.id, self._seq[task.id], update)

    async def follow(self, task_id: str, *, owner: Principal) -> tuple[A2ATask, TaskFeed]:
        task = await self.get(task_id, owner=owner)
        return task, self._watchers.open(task_id, self._seq[task_id])
