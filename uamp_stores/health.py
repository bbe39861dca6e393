"""Store outages: loops that outlive them, calls that give up in time, and what readiness reports.

Theory of operation
-------------------
A store kept in another process (Redis) or on a disk can stop answering
while the server still runs. Nothing of the server may die of it:

* Each store's background loop (the event log's flusher, heartbeat and
  inbox; the chat feeds; the A2A task listener) runs under :func:`supervise`.
  A failure is recorded in the loop's :class:`StoreHealth` -- one warning per
  outage naming what failed and the error (the traceback only at debug level)
  -- and the loop is started again after a capped exponential backoff
  (:data:`MIN_DELAY` doubling to :data:`MAX_DELAY`). The store calls
  :meth:`StoreHealth.ok` after a round that reached the store again: one info
  line says the outage is over. An error that is no outage (a bug) gets the
  same backoff and a warning each time the backoff is at its cap, so it
  cannot spin, nor fail silently.
* A call made while serving a request is bounded (:func:`call_store`, at most
  :data:`STORE_TIMEOUT` seconds) and raises :class:`StoreUnavailable` when the
  store refuses, fails or hangs; transports answer it in their protocol's own
  format with the code ``store_unavailable``.
* ``/readyz`` asks each store of the app (:meth:`StoreHealth.down` and a
  bounded ping) and answers 503 naming the stores that are down, so a load
  balancer takes the process out until they answer again.
"""

from __future__ import annotations

import functools
import logging
import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, Final, TypeVar

import anyio
import attrs

from uamp_proto.errors import UampError

__all__ = [
    "MAX_DELAY",
    "MIN_DELAY",
    "PROBE_TIMEOUT",
    "STORE_TIMEOUT",
    "StoreHealth",
    "StoreUnavailable",
    "call_store",
    "is_outage",
    "supervise",
]

log = logging.getLogger("uamp_stores")

T = TypeVar("T")

#: The first wait before a failed loop is started again, and the longest.
MIN_DELAY: Final = 0.1
MAX_DELAY: Final = 5.0
#: The longest a request waits for one store call, and readiness for a store's ping.
STORE_TIMEOUT: Final = 5.0
PROBE_TIMEOUT: Final = 1.0
#: The UAMP error code (and JSON error code) of a refusal because a store is down.
STORE_UNAVAILABLE: Final = "store_unavailable"


@attrs.define(auto_exc=True)
class StoreUnavailable(UampError):
    """A store did not answer (refused, failed or timed out): the request cannot be served now.

    Attributes:
        message: What failed, for the operator and the client.
        code: ``store_unavailable``.
    """

    message: str
    code: str = attrs.field(default=STORE_UNAVAILABLE, kw_only=True)

    #: What an HTTP route that lets it escape answers (the engine renders it).
    http_status: ClassVar[int] = 503


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]


def is_outage(exc: BaseException) -> bool:
    """Whether ``exc`` says the store is unreachable or failing (not a bug of ours)."""
    leaves = _leaves(exc)
    return bool(leaves) and all(_outage_leaf(leaf) for leaf in leaves)


def _outage_leaf(exc: BaseException) -> bool:
    # TimeoutError: anyio's fail_after; Trio's TooSlowError is named (Trio is not imported here).
    if isinstance(exc, StoreUnavailable | OSError | sqlite3.OperationalError | TimeoutError):
        return True
    if type(exc).__name__ == "TooSlowError" and type(exc).__module__.startswith("trio"):
        return True
    # redis-py's connection, timeout and "busy loading" errors (the optional dependency).
    return any(
        cls.__module__ == "redis.exceptions" and cls.__name__ in ("ConnectionError", "TimeoutError")
        for cls in type(exc).__mro__
    )


def describe(exc: BaseException) -> str:
    """``Class: message`` of ``exc`` (of its first leaf, for an exception group)."""
    leaf = _leaves(exc)[0] if isinstance(exc, BaseExceptionGroup) else exc
    text = str(leaf).strip()
    return f"{type(leaf).__name__}: {text}" if text else type(leaf).__name__


class StoreHealth:
    """Whether a store's background work fails now; logs each outage once.

    Args:
        what: What the loop is, for the log (``"the event log flusher"``).
    """

    def __init__(self, what: str) -> None:
        self.what = what
        #: The last error (``Class: message``) while the store is down, else ``None``.
        self.error: str | None = None
        self._since = 0.0
        self._delay = MIN_DELAY
        #: Whether the outage was noticed by readiness's ping (which may then end it).
        self.by_probe = False
        #: Whether the last failure was the store's (unreachable, failing), not a bug.
        self.outage = False

    @property
    def down(self) -> bool:
        """Whether the loop's last round failed and none succeeded since."""
        return self.error is not None

    @property
    def unavailable(self) -> bool:
        """Whether the store itself is down now: new work that needs it is refused.

        A loop that failed of a bug (and starts again) leaves the store usable.
        """
        return self.error is not None and self.outage

    def failed(self, exc: BaseException) -> float:
        """Record a failure of the loop; returns how long to wait before starting it again."""
        text = describe(exc)
        outage = is_outage(exc)
        if self.error is None:
            self._since = anyio.current_time()
            self._delay = MIN_DELAY
            if outage:
                log.warning("%s failed, the store is unavailable (%s); retrying", self.what, text)
            else:
                log.warning("%s failed (%s); retrying", self.what, text)
        else:
            self._delay = min(self._delay * 2, MAX_DELAY)
            if self._delay >= MAX_DELAY and not outage:
                # A bug, not an outage: said at every capped retry (one line per MAX_DELAY).
                log.warning("%s still fails (%s); retrying", self.what, text)
        self.error = text
        self.outage = outage
        log.debug("%s failed", self.what, exc_info=exc)
        return self._delay

    def ok(self) -> None:
        """A round of the loop reached the store: an outage (if any) is over."""
        if self.error is None:
            return
        log.info("%s works again after %.1f s", self.what, anyio.current_time() - self._since)
        self.error = None
        self.by_probe = False


async def supervise(run: Callable[[], Awaitable[None]], health: StoreHealth) -> None:
    """Run ``run`` until it returns; after each failure wait (backoff) and run it again.

    Cancellation ends it. A run that lasted longer than :data:`MAX_DELAY`
    twice over before failing counts as recovered first (a loop that never
    calls :meth:`StoreHealth.ok` still gets one warning per outage).
    """
    while True:
        started = anyio.current_time()
        try:
            await run()
            return
        except Exception as exc:
            if anyio.current_time() - started > 2 * MAX_DELAY:
                health.ok()
            delay = health.failed(exc)
        await anyio.sleep(delay)


async def call_store(
    fn: Callable[..., T], *args: Any, where: str, timeout: float = STORE_TIMEOUT
) -> T:
    """``fn(*args)`` in a worker thread, within ``timeout`` seconds.

    Raises:
        StoreUnavailable: The store refused, failed to connect or did not
            answer in time (the thread is abandoned and ends on its socket's
            own timeout).
    """
    try:
        with anyio.fail_after(timeout):
            call = functools.partial(fn, *args)
            return await anyio.to_thread.run_sync(call, abandon_on_cancel=True)
    except TimeoutError:
        raise StoreUnavailable(f"{where} did not answer within {timeout:g} s") from None
    except Exception as exc:
        if isinstance(exc, StoreUnavailable) or not is_outage(exc):
            raise
        raise StoreUnavailable(f"{where} is unavailable ({describe(exc)})") from exc
