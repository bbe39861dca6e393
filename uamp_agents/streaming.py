"""Streaming runs (UAP section 12): :class:`AgentStream` and its events.

A stream carries two kinds of event, told apart by ``source``:

* ``"uap"`` -- agent-level events (:class:`UAPEvent`): ``step_start``,
  ``step_end``, ``reasoning``, ``action``, ``observation``, ``checkpoint``,
  each with the step number and the agent id;
* ``"upp"`` -- the model provider's events, passed through unchanged: the
  uamp_proto :class:`~uamp_proto.events.ResponseDelta`,
  :class:`~uamp_proto.events.Thinking` and
  :class:`~uamp_proto.events.UsageDelta` events.

Theory of operation: the run executes in its own task and pushes events into
a bounded trio memory channel; the consumer pulls from the other end, so a
slow consumer slows the run down instead of growing a queue. The run task
lives in a nursery when the stream is used as an async context manager
(``async with agent.stream(...) as s``, the structured form: leaving the
block early aborts the run), and otherwise in a trio system task started on
first use, which copies the caller's context variables (so a stream opened
inside a parent run is still tracked as its child). :meth:`AgentStream.abort`
cancels the run, every tool call in flight with it, and the turn resolves
with the partial result (``turn.status == "aborted"``).

:meth:`AgentStream.drive` is the inline form, for a consumer that only
forwards events (a server writing them to a socket): the run executes in the
caller's task and awaits the consumer for each event, with no channel and no
task switch in between; the consumer's awaiting is the backpressure. A
consumer that fails stops the run the way a consumer leaving the channel does
(the run is aborted and resolves with its partial turn), then ``drive``
raises the consumer's error.
"""

from __future__ import annotations

import contextlib
import contextvars
import types
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Literal

import attrs
import trio

from uamp_proto import _fastinit
from uamp_proto.events import Event, ResponseDelta
from uamp_proto.types import DeltaText

from .turn import Turn

__all__ = [
    "DEFAULT_BUFFER",
    "AgentStream",
    "AgentStreamEvent",
    "Emitter",
    "UAPEvent",
    "UAPEventType",
    "UapEmitter",
    "UppEmitter",
]

#: Events buffered between the run task and the consumer before the run waits.
DEFAULT_BUFFER = 64

UAPEventType = Literal["step_start", "step_end", "reasoning", "action", "observation", "checkpoint"]


@attrs.frozen(kw_only=True)
class UAPEvent:
    """An agent-level stream event (section 12.2).

    Attributes:
        type: ``step_start``, ``step_end``, ``reasoning``, ``action``,
            ``observation`` or ``checkpoint``.
        step: The step number it belongs to.
        agent_id: The id of the agent that emitted it.
        data: ``{"step_number"}`` (step_start), ``{"step_number", "usage"}``
            (step_end, a UsageStats), ``{"text"}`` (reasoning),
            ``{"tool_calls"}`` (action, ToolInvocations), ``{"results",
            "text"}`` (observation, ToolOutputs and their formatted text),
            ``{"checkpoint_id"}`` (checkpoint). Strategies may add keys.
    """

    type: str
    step: int
    agent_id: str
    data: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class AgentStreamEvent:
    """One stream event: ``uap`` is set when ``source == "uap"``, ``upp`` otherwise."""

    source: Literal["uap", "upp"]
    uap: UAPEvent | None = None
    upp: Event | None = None

    @property
    def text(self) -> str:
        """The text of a ``upp`` text delta, else ``""`` (a display helper)."""
        if isinstance(self.upp, ResponseDelta) and isinstance(self.upp.delta, DeltaText):
            return self.upp.delta.text
        return ""


#: Pushes one event to the consumer; awaits while the channel is full.
Emitter = Callable[[AgentStreamEvent], Awaitable[None]]

#: Takes the model's own events (``AgentStreamEvent.upp``) as they are (``Agent.drive``'s ``upp``).
UppEmitter = Callable[[Event], Awaitable[None]]

#: Takes the agent's events (``AgentStreamEvent.uap``) as they are (``Agent.drive``'s ``uap``).
UapEmitter = Callable[["UAPEvent"], Awaitable[None]]

#: Runs the agent: given the emitter and the abort scope, returns the turn.
RunFn = Callable[[Emitter, trio.CancelScope], Awaitable[Turn]]


class AgentStream:
    """A streaming run (section 12.1): iterate it for events, await ``turn``.

    Use it as ``async for event in stream`` or, to tie the run to a nursery,
    ``async with stream: async for event in stream``. ``await stream.turn``
    gives the final turn (draining any events nobody has read).
    """

    def __init__(self, run: RunFn, *, buffer: int = DEFAULT_BUFFER) -> None:
        self._run = run
        self._buffer = buffer
        self._opened = False  # the channel: made on first use (drive needs none)
        self._driven = False
        self._abort = trio.CancelScope()
        self._done = trio.Event()
        self._turn: Turn | None = None
        self._error: BaseException | None = None
        self._started = False
        self._context = contextvars.copy_context()
        self._stack: contextlib.AsyncExitStack | None = None

    _send: trio.MemorySendChannel[AgentStreamEvent]
    _recv: trio.MemoryReceiveChannel[AgentStreamEvent]

    def _open(self) -> None:
        """Make the channel between the run task and the consumer, once (closed after drive)."""
        if self._opened:
            return
        self._opened = True
        self._send, self._recv = trio.open_memory_channel[AgentStreamEvent](self._buffer)
        if self._driven:
            self._send.close()
            self._recv.close()

    # --- lifecycle ---------------------------------------------------------

    async def __aenter__(self) -> AgentStream:
        if self._started:
            raise RuntimeError("this stream has already started; enter it before iterating")
        self._open()
        self._stack = contextlib.AsyncExitStack()
        nursery = await self._stack.enter_async_context(trio.open_nursery())
        self._started = True
        nursery.start_soon(self._main)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: types.TracebackType | None,
    ) -> bool | None:
        if not self._done.is_set():
            self.abort()
        # Close without a checkpoint: when the surrounding scope is cancelled,
        # an await here would raise before the nursery is exited.
        self._recv.close()
        assert self._stack is not None
        return await self._stack.__aexit__(exc_type, exc, tb)

    def _ensure_started(self) -> None:
        self._open()
        if not self._started:
            self._started = True
            trio.lowlevel.spawn_system_task(
                self._main, name="uamp_agents.stream", context=self._context
            )

    async def _main(self) -> None:
        try:
            async with self._send:
                self._turn = await self._run(self._emit, self._abort)
        except Exception as exc:
            self._error = exc
        finally:
            self._done.set()

    async def _emit(self, event: AgentStreamEvent) -> None:
        try:
            await self._send.send(event)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            # Nobody will read any more: stop the run, keep its partial turn.
            self._abort.cancel()

    async def drive(self, consumer: Emitter) -> Turn:
        """Run the stream in this task, awaiting ``consumer(event)`` for each event.

        The inline form of ``async for`` + ``turn`` (see the module
        docstring): returns the final turn.

        Raises:
            RuntimeError: The stream has already started.
            Exception: The run's error, or the consumer's (the run is then
                aborted first, as when a reader leaves).
        """
        if self._started:
            raise RuntimeError("this stream has already started")
        self._started = True
        self._driven = True
        failure: Exception | None = None

        async def forward(event: AgentStreamEvent) -> None:
            nonlocal failure
            if failure is None:
                try:
                    await consumer(event)
                    return
                except Exception as exc:
                    failure = exc
                    self._abort.cancel()
            # Nobody reads any more: the abort lands here, as at a channel send.
            await trio.lowlevel.checkpoint()

        try:
            self._turn = await self._run(forward, self._abort)
        except Exception as exc:
            self._error = exc
            raise
        finally:
            self._done.set()
        if failure is not None:
            raise failure
        return self._turn

    # --- consumer side ------------------------------------------------------

    def __aiter__(self) -> AsyncIterator[AgentStreamEvent]:
        return self

    async def __anext__(self) -> AgentStreamEvent:
        self._ensure_started()
        try:
            return await self._recv.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            await self._done.wait()
            if self._error is not None:
                raise self._error from None
            raise StopAsyncIteration from None

    @property
    def turn(self) -> Awaitable[Turn]:
        """Awaitable final turn; resolves after the run ends (section 12.1).

        Awaiting it reads and discards the events nobody has consumed yet.
        Raises the run's error, if it failed.
        """
        return self._wait_turn()

    async def _wait_turn(self) -> Turn:
        self._ensure_started()
        with contextlib.suppress(trio.ClosedResourceError):
            async for _ in self._recv:
                pass
        await self._done.wait()
        if self._error is not None:
            raise self._error
        assert self._turn is not None
        return self._turn

    @property
    def done(self) -> bool:
        """Whether the run has finished (completed, failed or aborted)."""
        return self._done.is_set()

    def abort(self) -> None:
        """Cancel the run and every call in flight; ``turn`` gets the partial result."""
        self._abort.cancel()

    async def aclose(self) -> None:
        """Abort the run (if still going) and stop reading events."""
        if not self._done.is_set():
            self.abort()
        self._open()
        await self._recv.aclose()


#: Built once per streamed delta: the protocol's compiled constructor
#: (:mod:`uamp_proto._fastinit`), cheaper than attrs' frozen ``__init__``.
FAST_INIT = _fastinit.install(globals())
