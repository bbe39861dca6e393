"""``in_context``: a coroutine awaited with every step in a context of its own.

It stands in for a task of its own (each HTTP/1.1 request, each response of
a session), so it must behave like an await of the coroutine in every way
but the context: the value, the errors either way (a cancellation
included), the steps, and the context seen and left behind.
"""

from __future__ import annotations

import contextvars

import pytest
import trio

from uamp_trio.engines.contexts import in_context

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("test_in_context", default="unset")


async def steps(n: int, mark: str) -> list[str]:
    """Set ``VAR`` to ``mark``, then note what it holds at each of ``n`` checkpoints."""
    VAR.set(mark)
    seen = []
    for _ in range(n):
        await trio.lowlevel.checkpoint()
        seen.append(VAR.get())
    return seen


async def test_each_step_runs_in_the_context_and_the_caller_keeps_its_own() -> None:
    VAR.set("caller")
    context = contextvars.copy_context()
    seen = await in_context(steps(3, "inside"), context)
    assert seen == ["inside"] * 3  # every step, not only the first
    assert VAR.get() == "caller"  # nothing leaks out
    assert context[VAR] == "inside"  # it stays in the context given


async def test_what_was_set_before_is_seen() -> None:
    VAR.set("before")

    async def read() -> str:
        return VAR.get()

    assert await in_context(read(), contextvars.copy_context()) == "before"


async def test_two_units_in_one_task_do_not_see_each_other() -> None:
    async def unit(mark: str) -> str:
        found = VAR.get()
        VAR.set(mark)
        await trio.lowlevel.checkpoint()
        return found

    found = [await in_context(unit(m), contextvars.copy_context()) for m in ("a", "b", "c")]
    assert found == ["unset"] * 3


class Boom(Exception):
    pass


async def test_an_error_of_the_coroutine_comes_out_unchanged() -> None:
    async def fails() -> None:
        await trio.lowlevel.checkpoint()
        raise Boom("from inside")

    with pytest.raises(Boom, match="from inside"):
        await in_context(fails(), contextvars.copy_context())


@pytest.mark.parametrize("handled", [False, True])
async def test_a_cancellation_goes_in_and_the_coroutine_decides(handled: bool) -> None:
    # A cancel is thrown into the coroutine at its checkpoint, in its context;
    # a coroutine that handles it goes on (and its result comes out).
    seen: list[str] = []

    async def sleeper() -> str:
        VAR.set("sleeper")
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            seen.append(VAR.get())
            if not handled:
                raise
        return "went on"

    result = None
    with trio.CancelScope() as scope:
        scope.cancel()
        result = await in_context(sleeper(), contextvars.copy_context())
    assert seen == ["sleeper"]
    assert scope.cancelled_caught is not handled
    assert result == ("went on" if handled else None)
    assert VAR.get() == "unset"


async def test_closing_the_await_chain_closes_the_coroutine() -> None:
    # A coroutine dropped half way (its awaiting coroutine closed) runs its
    # finally blocks, as an await of it would.
    cleaned: list[str] = []

    async def holds() -> None:
        try:
            await trio.lowlevel.checkpoint()
        finally:
            cleaned.append(VAR.get())

    async def outer() -> None:
        await in_context(holds(), contextvars.copy_context())

    VAR.set("outer")
    coro = outer()
    coro.send(None)  # to the inner checkpoint's yield
    coro.close()
    assert cleaned == ["outer"]
