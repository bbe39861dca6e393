"""Each unit of work in a context of its own, when one task does many in turn.

Theory of operation
-------------------
A context variable set while a task runs stays set in that task's context
(:mod:`contextvars`): trio runs every step of a task in ``task.context``. A
server that gives every request a task of its own (asyncio's servers, trio's
HTTP/2 streams here) therefore gives every request a clean slate: what a
handler sets and never resets goes away with its task.

Some of this server's tasks do many units of work one after another, to
save a task start each: an HTTP/1.1 connection's task serves its requests in
turn, a session's worker runs its responses in turn, and a WebSocket's
reading task runs the responses it reads. Without more, what one request's
agent, tool or middleware sets (a user, a tenant, a span) would still be
set for the next request on the same connection -- behind a proxy that
reuses connections, another client's request.

:func:`in_context` awaits a coroutine with each of its steps run in a
context of its own (``contextvars.copy_context()`` of the caller's: what was
set before the unit of work began is seen, what it sets is not seen after),
as a task's steps run in the task's. It costs one generator frame on the
await chain and one :meth:`contextvars.Context.run` per step.
"""

from __future__ import annotations

import contextvars
import types
from collections.abc import Coroutine, Generator
from typing import Any, TypeVar

__all__ = ["in_context"]

_T = TypeVar("_T")


@types.coroutine
def in_context(
    coro: Coroutine[Any, Any, _T], context: contextvars.Context
) -> Generator[Any, Any, _T]:
    """Await ``coro`` with each of its steps run in ``context``.

    What comes back to ``coro`` (a value, or an exception: a cancellation, or
    the ``GeneratorExit`` of an await chain being closed) goes in unchanged,
    and what ``coro`` returns or raises comes out unchanged.
    """
    run, send, throw = context.run, coro.send, coro.throw
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = run(send, value) if error is None else run(throw, error)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        try:
            value, error = (yield step), None
        except BaseException as exc:  # handed to coro, which decides
            value, error = None, exc
