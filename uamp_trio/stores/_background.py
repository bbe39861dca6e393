"""Starting a store's background loop where the caller can, or where it must, under supervision.

Every loop runs under :func:`~.health.supervise`: a failure (the store went
away) is logged once per outage and the loop starts again after a backoff,
so no store outage reaches the nursery it runs in (the server's).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, ClassVar

import trio

from .health import StoreHealth, supervise

if TYPE_CHECKING:
    from ..engines.supervise import Spawner

log = logging.getLogger("uamp_trio.stores")


def start_background(
    nursery: Spawner | None,
    run: Callable[[], Awaitable[None]],
    name: str,
    what: str,
    health: StoreHealth | None = None,
) -> None:
    """Run ``run`` supervised in ``nursery``, or as a trio system task when there is none.

    ``health`` records the loop's outages (a new one when not given). A
    system task outlives every nursery but must never raise (trio would
    crash the run), so there anything else escaping is logged instead.
    """
    _start(nursery, functools.partial(supervise, run, health or StoreHealth(what)), name, what)


def _start(
    nursery: Spawner | None, run: Callable[[], Awaitable[None]], name: str, what: str
) -> None:
    if nursery is not None:
        nursery.start_soon(run, name=name)
    else:
        trio.lowlevel.spawn_system_task(_logged, run, what, name=name)


class BackgroundLoop:
    """Mixin of a store with a :meth:`run` loop that :meth:`ensure_running` starts once.

    The store sets ``_running`` in its ``__init__`` (and its ``run`` may
    clear it when the loop ends). Its loop calls ``self.health.ok()`` after
    a round that reached the store.
    """

    #: The trio task's name, and what a failure of the loop is logged as.
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
        """Start :meth:`run` in ``nursery`` (or as a system task) unless it runs."""
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
    except trio.Cancelled:
        raise
    except BaseException:  # a system task must never raise (e.g. its client closed at exit)
        log.exception("%s failed", what)
