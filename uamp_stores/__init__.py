"""State that outlives one request, on any event loop: the stores both servers share.

``uamp serve`` (:mod:`uamp_trio`) and the ASGI app (:mod:`uamp_asgi`) keep
the event logs of resumable UAMP sessions (:mod:`.event_log`: in memory, in
a SQLite file, or in Redis Streams shared by several processes) and A2A
tasks (:mod:`.a2a_tasks`: in memory, or in Redis) in the same stores.
Their blocking calls (sqlite3, the synchronous redis-py client) run
in worker threads, and their waits, locks and background loops are
:mod:`anyio`'s, so one store runs under Trio and under asyncio alike;
nothing here imports an event loop of its own (on Trio, a loop started
without a task group becomes a Trio system task: :mod:`.background`).
A2A push delivery (:mod:`.a2a_push`, :mod:`.pinned`) lives here for the same
reason: both servers send task updates to webhooks with one sender; so do
the busy-conversation gate (:mod:`.busy`) and the Realtime connection
(:mod:`.realtime`), which both servers run on their own sockets and turns.

The pure parts (positions, the merge of a resumed stream, retention) are
state machines in :mod:`uamp_proto.resume`; this package is their I/O.
"""

from __future__ import annotations

from uamp_proto.resume import Retention

from .a2a_tasks import MemoryTaskStore, TaskStore
from .event_log import EventLog, LogKey, MemoryEventLog, SessionRecord, log_name
from .health import StoreHealth, StoreUnavailable

__all__ = [
    "REDIS_SCHEMES",
    "EventLog",
    "LogKey",
    "MemoryEventLog",
    "MemoryTaskStore",
    "SessionRecord",
    "StoreHealth",
    "StoreUnavailable",
    "TaskStore",
    "is_redis",
    "log_name",
    "open_event_log",
    "open_task_store",
]

#: The URL schemes of a Redis store (``--store redis://HOST:PORT/DB``).
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


def is_redis(where: str) -> bool:
    """Whether ``where`` (a ``--store`` value) names a Redis server."""
    return where.startswith(REDIS_SCHEMES)


def open_event_log(where: str = "memory", retention: Retention | None = None) -> EventLog:
    """The event log named by ``where``: ``memory``, ``redis://HOST:PORT/DB``, or a SQLite path.

    ``sqlite:PATH`` (or any other string, taken as a file path) is a SQLite
    file. What ``uamp serve --store WHERE`` opens, and what
    ``uamp_asgi.Config(event_log=...)`` takes.
    """
    if where == "memory":
        return MemoryEventLog(retention)
    if is_redis(where):
        from .event_log_redis import RedisEventLog

        return RedisEventLog(where, retention)
    from .event_log_sqlite import SqliteEventLog

    return SqliteEventLog(where.removeprefix("sqlite:"), retention)


def open_task_store(
    where: str = "memory", max_tasks: int = 1000, max_per_principal: int | None = None
) -> TaskStore:
    """The A2A task store named by ``where``: ``redis://HOST:PORT/DB``, else in memory.

    What ``uamp serve --store WHERE --a2a-max-tasks N`` opens, and what
    ``uamp_asgi.Config(a2a_tasks=...)`` takes. A SQLite ``WHERE`` keeps
    sessions; A2A tasks stay in memory then.
    """
    if is_redis(where):
        from .a2a_tasks_redis import RedisTaskStore

        return RedisTaskStore(where, max_tasks, max_per_principal)
    return MemoryTaskStore(max_tasks, max_per_principal)
