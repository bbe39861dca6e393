"""Background work under supervision: a failure ends that work, never the server.

Theory of operation
-------------------
Work that outlives the request that started it -- a chat room's answers and
its sessions' chat tasks, an A2A task's turn, a push delivery, a spec 003
exchange, an HTTP+SSE session, a response carried on after a lost process --
runs in the server's background nursery. A trio nursery ends when one of its
tasks raises, and the server's ends the process: one unexpected exception in
work a client's input started would stop everyone's service.

:func:`supervised` runs one unit of such work and keeps what it raises
(anything but cancellation) to itself: one log line with the traceback, then
the unit's ``on_error`` (which tells its client -- a ``session.error``, a
failed task -- and frees what the unit held), and the unit is over.
:class:`Background` is the nursery the server hands its app
(:attr:`Host.background <uamp_trio.hosting.host.Host.background>`): its
:meth:`~Background.start_soon` runs every task supervised, so no task started
there can end the process, whether or not its starter thought of it. A
store's loop is supervised by :func:`uamp_stores.health.supervise`
instead, which also starts it again.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import trio

__all__ = ["Background", "OnError", "Spawner", "supervised"]

log = logging.getLogger("uamp_trio.supervise")

#: Called with what a unit raised, after it was logged.
OnError = Callable[[BaseException], None]


class Spawner(Protocol):
    """Where background work starts: a :class:`Background` or a plain nursery."""

    def start_soon(
        self, async_fn: Callable[..., Awaitable[Any]], *args: Any, name: Any = None
    ) -> None:
        """Start ``async_fn(*args)`` as a task."""
        ...


def _what(fn: Callable[..., Any]) -> str:
    while isinstance(fn, functools.partial):
        fn = fn.func
    return getattr(fn, "__qualname__", None) or repr(fn)


async def supervised(
    fn: Callable[..., Awaitable[Any]],
    *args: Any,
    what: str | None = None,
    on_error: OnError | None = None,
) -> None:
    """Run ``fn(*args)``; log what it raises (not cancellation) and call ``on_error``.

    Args:
        what: The work, for the log line (default: ``fn``'s name).
        on_error: Ends the unit's work with its client; a failure of its own
            is logged too.
    """
    try:
        await fn(*args)
    except* Exception as group:
        # except* keeps trio.Cancelled (a BaseException) on its way out, even
        # when a nursery inside the unit raised it alongside an error.
        failure: BaseException = group.exceptions[0] if len(group.exceptions) == 1 else group
        log.error("%s failed; only this work ends", what or _what(fn), exc_info=failure)
        if on_error is not None:
            try:
                on_error(failure)
            except Exception:
                log.exception("ending %s after its failure failed too", what or _what(fn))


class Background:
    """A nursery whose tasks run :func:`supervised` (see the module docstring).

    Args:
        nursery: Where the tasks run (the server's connection nursery).
    """

    def __init__(self, nursery: trio.Nursery) -> None:
        self.nursery = nursery

    @property
    def cancel_scope(self) -> trio.CancelScope:
        """The nursery's cancel scope."""
        return self.nursery.cancel_scope

    def start_soon(
        self, async_fn: Callable[..., Awaitable[Any]], *args: Any, name: Any = None
    ) -> None:
        """Start ``async_fn(*args)`` supervised; a failure is logged and ends that task only."""
        what = name if isinstance(name, str) else _what(async_fn)
        job = functools.partial(supervised, async_fn, *args, what=what)
        self.nursery.start_soon(job, name=name or _what(async_fn))
