"""Where the server keeps state that outlives one request.

The core (:mod:`uamp_proto`) maps protocols onto UAMP and keeps nothing;
what a server must remember between requests lives here, each kind behind a
small interface a database-backed store can implement: A2A tasks
(:mod:`uamp_stores.a2a_tasks`, shared with the ASGI app: in memory or Redis),
ACP sessions (:mod:`.acp_sessions`), the live HTTP+SSE sessions
(:mod:`.sessions`), the server-side tool rounds of
Chat Completions turns (:mod:`.tool_rounds`), the event logs of resumable
UAMP sessions (:mod:`uamp_stores.event_log`, shared with the ASGI app: in
memory, SQLite or Redis Streams) and
chat rooms (:mod:`.chats`: in memory, SQLite or Redis). :class:`Stores` is the set the
composition root creates once per app and hands to the transports; no
transport creates one of its own.

Where this wing sits: docs/architecture.md.
"""

from __future__ import annotations

import logging
from typing import Any

import attrs
import trio

from uamp_stores import REDIS_SCHEMES, open_event_log, open_task_store
from uamp_stores.a2a_tasks import MemoryTaskStore, TaskStore
from uamp_stores.background import BackgroundLoop
from uamp_stores.event_log import EventLog, MemoryEventLog, SessionRecord
from uamp_stores.health import describe

from .acp_sessions import AcpSessionStore
from .chats import ChatStore, MemoryChatStore
from .mcp_sessions import McpSessionStore
from .sessions import SessionTracker
from .tool_rounds import ToolRoundStore

log = logging.getLogger("uamp_trio.stores")

__all__ = [
    "AcpSessionStore",
    "ChatStore",
    "EventLog",
    "McpSessionStore",
    "MemoryChatStore",
    "MemoryEventLog",
    "MemoryTaskStore",
    "SessionRecord",
    "SessionTracker",
    "Stores",
    "TaskStore",
    "ToolRoundStore",
    "open_chat_store",
    "open_event_log",
    "open_interrupt_relay",
    "open_task_store",
]


def open_chat_store(where: str = "memory") -> ChatStore:
    """The chat store named by ``where``: ``memory``, ``redis://HOST:PORT/DB``, or a SQLite path."""
    if where == "memory":
        return MemoryChatStore()
    if where.startswith(REDIS_SCHEMES):
        from .chats_redis import RedisChatStore

        return RedisChatStore(where)
    from .chats_sqlite import SqliteChatStore

    return SqliteChatStore(where.removeprefix("sqlite:"))


def open_interrupt_relay(where: str = "memory") -> Any:
    """Pending interrupts shared between processes for a Redis ``where``, else ``None``
    (each process answers its own; docs/human-in-the-loop.md)."""
    if where.startswith(REDIS_SCHEMES):
        from .interrupts_redis import RedisInterruptRelay

        return RedisInterruptRelay(where)
    return None


@attrs.define(kw_only=True)
class Stores:
    """The server-side state of one app, shared by its transports.

    Each field defaults to an empty in-memory store; pass your own to size
    or share one (``Stores(a2a_tasks=MemoryTaskStore(max_tasks=50))``).

    Attributes:
        a2a_tasks: A2A tasks (the A2A transport): in memory or Redis.
        acp_sessions: ACP sessions, for ``session/load`` on any carrier.
        http_sessions: Live UAMP HTTP+SSE sessions (the session tracker).
        event_log: What resumable UAMP sessions sent (docs/resume.md).
        tool_rounds: The agent's own tool rounds of Chat Completions turns
            that also asked the client for a tool (the Completions transport).
        chats: Chat rooms: settings, messages, read marks (docs/chat.md).
        mcp_sessions: MCP sessions over Streamable HTTP and the named
            conversations of the agents' MCP tools (docs/mcp.md).
    """

    a2a_tasks: TaskStore = attrs.field(factory=MemoryTaskStore)
    acp_sessions: AcpSessionStore = attrs.field(factory=AcpSessionStore)
    http_sessions: SessionTracker[Any] = attrs.field(factory=SessionTracker)
    event_log: EventLog = attrs.field(factory=MemoryEventLog)
    tool_rounds: ToolRoundStore = attrs.field(factory=ToolRoundStore)
    chats: ChatStore = attrs.field(factory=MemoryChatStore)
    mcp_sessions: McpSessionStore = attrs.field(factory=McpSessionStore)

    async def flush(self) -> None:
        """Write what the stores still queue: the event logs and the chat feeds.

        The server's last step of a graceful shutdown, once its connections
        are closed: a chat answer's last feed entries, queued for the
        writer's next round, reached nobody when the process exited first.
        A store that fails is logged and the others are still flushed.
        """
        for name, store in (("event_log", self.event_log), ("chats", self.chats)):
            try:
                await store.flush()
            except Exception as exc:
                log.warning("the %s store lost what it held at shutdown: %s", name, describe(exc))

    def _loops(self) -> list[tuple[str, BackgroundLoop]]:
        found = [(name, getattr(self, name)) for name in ("event_log", "chats", "a2a_tasks")]
        return [(name, store) for name, store in found if isinstance(store, BackgroundLoop)]

    def failing(self) -> dict[str, str]:
        """The stores whose background loop fails now (:mod:`.health`): name -> the error."""
        return {name: s.health.error for name, s in self._loops() if s.health.error is not None}

    async def unreachable(self) -> dict[str, str]:
        """The stores that do not answer a ping within :data:`~.health.PROBE_TIMEOUT`: name ->
        the error (``Class: message``); the stores are asked at once."""
        down: dict[str, str] = {}

        async def check(name: str, store: BackgroundLoop) -> None:
            health = store.health
            try:
                await store.probe()
            except Exception as exc:
                down[name] = describe(exc)
                if not health.down:
                    # Work is refused from now on, before a loop's call times out.
                    health.failed(exc)
                    health.by_probe = True
            else:
                if health.down and health.by_probe:
                    health.ok()

        async with trio.open_nursery() as nursery:
            for name, store in self._loops():
                nursery.start_soon(check, name, store)
        return down
