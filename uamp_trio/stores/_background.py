"""Starting a store's background loop where the caller can, or where it must."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import ClassVar

import trio

log = logging.getLogger("uamp_trio.stores")


def start_background(
    nursery: trio.Nursery | None, run: Callable[[], Awaitable[None]], name: str, what: str
) -> None:
    """Run ``run`` in ``nursery``, or as a trio system task when there is none.

    A system task outlives every nursery but must never raise (trio would
    crash the run), so there a failure of ``what`` is logged instead.
    """
    if nursery is not None:
        nursery.start_soon(run, name=name)
    else:
        trio.lowlevel.spawn_system_task(_logged, run, what, name=name)


class BackgroundLoop:
    """Mixin of a store with a :meth:`run` loop that :meth:`ensure_running` starts once.

    The store sets ``_running`` in its ``__init__`` (and its ``run`` may
    clear it when the loop ends).
    """

    #: The trio task's name, and what a failure of the loop is logged as.
    loop_name: ClassVar[str]
    loop_what: ClassVar[str]
    _running: bool

    async def run(self) -> None:
        """The loop; the store defines it."""
        raise NotImplementedError

    def ensure_running(self, nursery: trio.Nursery | None) -> None:
        """Start :meth:`run` in ``nursery`` (or as a system task) unless it runs."""
        if self._running:
            return
        self._running = True
        start_background(nursery, self.run, self.loop_name, self.loop_what)


async def _logged(run: Callable[[], Awaitable[None]], what: str) -> None:
    try:
        await run()
    except trio.Cancelled:
        raise
    except BaseException:  # a system task must never raise (e.g. its client closed at exit)
        log.exception("%s failed", what)
