"""Starting a store's background loop where the caller can, or where it must, under supervision.

Every loop runs under :func:`~.health.supervise`: a failure (the store went
away) is logged once per outage and the loop starts again after a backoff,
so no store outage reaches the task group it runs in (the server's).

A loop started without a task group outlives every request: on Trio it is a
system task; on asyncio a task of the running loop, kept referenced here
until it ends. Without a running asyncio loop the caller runs on Trio, which
is then imported (already loaded: it is running).
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, ClassVar, Protocol

import anyio

from .health import StoreHealth, supervise

__all__ = ["BackgroundLoop", "Spawner", "start_background", "start_detached"]

log = logging.getLogger("uamp_stores")


class Spawner(Protocol):
    """Where background work starts: a Trio nursery, an anyio task group, a supervisor."""

    def start_soon(
        self, async_fn: Callable[..., Coroutine[Any, Any, Any]], /, *args: Any, name: Any = None
    ) -> object:
        """Start ``async_fn(*args)`` as a task."""
        ...


#: The asyncio tasks started without a task group (the loop keeps only weak references).
_DETACHED: set[Any] = set()


def start_background(
    nursery: Spawner | None,
    run: Callable[[], Awaitable[None]],
    name: str,
    what: str,
    health: StoreHealth | None = None,
) -> None:
    """Run ``run`` supervised in ``nursery``, or detached when there is none.

    ``health`` records the loop's outages (a new one when not given). A
    detached task outlives every task group but must never raise (a Trio
    system task that raises crashes the run), so there anything else
    escaping is logged instead.
    """
    _start(nursery, functools.partial(supervise, run, health or StoreHealth(what)), name, what)


def start_detached(
    nursery: Spawner | None, run: Callable[[], Coroutine[Any, Any, None]], name: str, what: str
) -> None:
    """Run ``run`` once in ``nursery``, or detached when there is none (see the module).

    Not restarted: what it raises is logged (detached) or reaches the nursery.
    """
    _start(nursery, run, name, what)


def _start(
    nursery: Spawner | None, run: Callable[[], Coroutine[Any, Any, None]], name: str, what: str
) -> None:
    if nursery is not None:
        nursery.start_soon(run, name=name)
        return
    asyncio = sys.modules.get("asyncio")  # not loaded: not running either
    try:
        if asyncio is None:
            raise RuntimeError
        loop = asyncio.get_running_loop()
    except RuntimeError:  # no asyncio loop: Trio runs (and is loaded already)
        import trio

        trio.lowlevel.spawn_system_task(_logged, run, what, name=name)
        return
    task = loop.create_task(_logged(run, what), name=name)
    _DETACHED.add(task)
    task.add_done_callback(_DETACHED.discard)


class BackgroundLoop:
    """Mixin of a store with a :meth:`run` loop that :meth:`ensure_running` starts once.

    The store sets ``_running`` in its ``__init__`` (and its ``run`` may
    clear it when the loop ends). Its loop calls ``self.health.ok()`` after
    a round that reached the store.
    """

    #: The task's name, and what a failure of the loop is logged as.
    loop_name: ClassVar[str]
    loop_what: ClassVar[str]
    _running: bool

    @functools.cached_property
    def health(self) -> StoreHealth:
        """Whether the loop fails now (the store is down); see :mod:`.health`."""
        return StoreHealth(self.loop_what)

    async def run(self) -> None:
        """The loop; the store defines it."""
        raise NotImplementedError

    def ensure_running(self, nursery: Spawner | None) -> None:
        """Start :meth:`run` in ``nursery`` (or detached, see the module) unless it runs."""
        if self._running or self._supervising:
            return
        self._running = self._supervising = True
        _start(nursery, self._supervised, self.loop_name, self.loop_what)

    #: Whether :meth:`ensure_running` 's task is on (the loop may be waiting to restart).
    _supervising = False

    async def _supervised(self) -> None:
        try:
            await supervise(self.run, self.health)
        finally:
            self._supervising = False

    async def probe(self) -> None:
        """Raise :class:`~.health.StoreUnavailable` when the store does not answer now.

        Readiness asks it; a store in this process's memory always answers.
        """
        return


async def _logged(run: Callable[[], Awaitable[None]], what: str) -> None:
    try:
        await run()
    except anyio.get_cancelled_exc_class():
        raise
    except BaseException:  # a system task must never raise (e.g. its client closed at exit)
        log.exception("%s failed", what)
