"""The turn driver: runs one response of an :class:`~uamp_proto.responder.Responder`.

Two ways to run a turn, with one contract and one implementation
(:class:`ResponseRunner`):

* **inline**, for transports on the hot path: the agent runs in the caller's
  task and every event goes straight to an async ``sink`` callback, with no
  channel and no task switch in between (on trio a channel hop costs more
  than encoding the event)::

      runner = ResponseRunner(agent, request, sink)
      outcome = await runner.run()     # runner.cancel() from elsewhere

* **iterated**, for transports that want to pull events::

      async with open_response(agent, request) as turn:
          async for event in turn:
              ...                       # write it in the transport's format
      outcome = turn.outcome

  :func:`open_response` runs a :class:`ResponseRunner` in a task of its own whose
  sink is a bounded memory channel, so a slow reader slows the agent down
  (backpressure) instead of growing a queue.

The contract (the agent boundary's; the runner owns the response lifecycle):

1. it sends ``response.created`` first (a later tool round of the same
   response may leave it out: ``created=False``);
2. it calls ``agent.respond(request, emit)``; ``emit`` stamps the
   ``response_id`` and ``session_id`` the agent left out, feeds the turn's
   :class:`~uamp_proto.response.ResponseTracker` and awaits the sink, so
   the sink's backpressure holds the agent back (a sink that writes the ids
   and updates the tracker itself asks for neither: ``stamp=False``,
   ``track=False``). An agent never sends a
   terminal event itself (``emit`` refuses one), nor emits after
   ``respond`` returned;
3. it ends with exactly one terminal event: ``response.done`` with the
   accumulated output and usage; ``response.cancelled`` with the partial
   output when :meth:`ResponseRunner.cancel` was called (a cancel scope around
   ``respond``; a cancel before :meth:`~ResponseRunner.run` counts too);
   ``response.error`` with the :class:`ResponderError`'s code,
   ``payment_required`` for a
   :class:`~uamp_proto.payment.PaymentRequiredError`, or ``internal_error``
   for any other exception (logged, never re-raised, so the server keeps
   running);
4. except when the agent asked the client to run tools (``tool.call``) and
   returned: then no terminal event is sent, the outcome's status is
   ``requires_action`` and :attr:`ResponseOutcome.pending_tool_calls` lists the
   calls. Completions ends its HTTP response with ``finish_reason:
   "tool_calls"``; a UAMP WebSocket waits for ``tool.result`` and runs the
   agent again with the extended conversation.

Metrics: when the agent is the metrics' :class:`~uamp_proto.metering.MeteredAgent`
wrapper, the runner counts the run itself (:meth:`MeteredAgent.start_run
<uamp_proto.metering.MeteredAgent.start_run>`; ``emit`` reports each
``response.delta``) and calls the agent inside: the same counts, without a
wrapper frame per run and a call per event.

Payment: a runner given a ``charge`` (the money the host locked for the
response before it started, :meth:`uamp_trio.hosting.host.Host.open_charge`)
settles it exactly once when the response ends, however it ends -- done,
failed, cancelled, or its sink gone -- with the tracker's usage: the real
cost is charged and the rest of the lock freed. The ``payment.balance``
update lands in :attr:`ResponseOutcome.balance` for transports that can
carry it.

Turn options: the settings every turn of a server shares (today the bound on
its output) are one :class:`TurnOptions`, which the host builds once from its
configuration (:attr:`uamp_trio.hosting.host.Host.turns`, from
``ServerConfig``). A transport starts its turn through it --
``host.turns.runner(...)``, ``await host.turns.run(...)``,
``async with host.turns.open(...)`` -- and the runner reads the options
itself, once per turn: no transport passes a setting by hand. The bare
:class:`ResponseRunner`, :func:`run_response` and :func:`open_response` run
on the defaults (``uamp acp`` and ``uamp mcp`` on stdio, tests).

Bounded output: the tracker keeps at most ``options.max_output_bytes`` of
output (:class:`~uamp_proto.response.ResponseTracker`). The event that would pass
the bound -- refused by the tracker, or by the sink's own (the UAMP session
driver's core) -- is not delivered; the agent is stopped as for a failed
sink (``emit`` raises, now and at every later call) and the turn ends with
``response.error`` ``output_too_large``, whatever the agent raised then.

A failure of the *sink* (the peer went away: ``BrokenResourceError`` ...) is
not the agent's: the runner stops the agent and re-raises it from
:meth:`~ResponseRunner.run`, without a terminal event, since there is nowhere to
send one. Cancellation from outside (not :meth:`~ResponseRunner.cancel`)
propagates as usual.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any, Final

import attrs
import trio

from uamp_proto import _fastinit
from uamp_proto import events as ev
from uamp_proto.errors import OutputTooLarge, UampError
from uamp_proto.metering import MeteredAgent, MeteredRun
from uamp_proto.outcome import ResponseOutcome, TurnStatus, conclude
from uamp_proto.payment import Charge
from uamp_proto.responder import Responder, TurnRequest
from uamp_proto.response import MAX_OUTPUT_BYTES, ResponseTracker
from uamp_stores.responses_background import cancel_on_ask

from .interrupts import ResponsePort

__all__ = [
    "DEFAULT_BUFFER",
    "DEFAULT_TURN_OPTIONS",
    "YIELD_EVERY",
    "ResponseOutcome",
    "ResponseRun",
    "ResponseRunner",
    "Sink",
    "TurnOptions",
    "TurnStatus",
    "cancel_handler",
    "open_response",
    "run_response",
]

log = logging.getLogger("uamp_trio.turns")

#: Events buffered between the agent and the transport before ``emit`` waits.
DEFAULT_BUFFER = 16

#: An inline agent whose sink never has to wait still passes a scheduler
#: checkpoint this often (events), so other tasks run and a cancel lands. It
#: is also how many events a streaming writer gathers into one write: 64 took
#: a fifth less server CPU per SSE chunk than 32 (bench/transports.py), and
#: holds other tasks back for about 0.2 ms at most.
YIELD_EVERY: Final = 64

#: Takes one event of the turn; awaiting it is the agent's backpressure.
Sink = Callable[[ev.Event], Awaitable[None]]

_TERMINAL: Final = (ev.ResponseDone, ev.ResponseCancelled, ev.ResponseErrorEvent)

#: ``ResponseOutcome(status=..., tracker=..., final=..., balance=...)``, positionally.
_make_outcome = _fastinit.maker(ResponseOutcome, ("status", "tracker", "final", "balance"))
#: ``ev.ResponseCreated(response_id=..., session_id=...)``, positionally.
_make_created = _fastinit.maker(ev.ResponseCreated, ("response_id", "session_id"))


@attrs.frozen(kw_only=True)
class TurnOptions:
    """The settings every turn a server runs shares, and its turns started on them.

    A host builds one from its configuration when it gets it
    (:attr:`uamp_trio.hosting.host.Host.turns`); every turn it runs starts
    through :meth:`runner`, :meth:`run` or :meth:`open`, and the runner reads
    the options itself (once, when it is built). ``TurnOptions()`` holds the
    defaults: what stdio ACP and MCP, and a bare :class:`ResponseRunner`, use.

    Attributes:
        max_output_bytes: The most output one response keeps
            (``ServerConfig.max_response_output_bytes``); the event past it
            ends the turn with ``output_too_large``.
    """

    max_output_bytes: int = MAX_OUTPUT_BYTES

    def runner(
        self,
        agent: Responder,
        request: TurnRequest,
        sink: Sink | None,
        *,
        tracker: ResponseTracker | None = None,
        created: bool = True,
        stamp: bool = True,
        cancellable: bool = True,
        charge: Charge | None = None,
    ) -> ResponseRunner:
        """A :class:`ResponseRunner` of one turn on these options (its arguments)."""
        return ResponseRunner(
            agent,
            request,
            sink,
            tracker=tracker,
            created=created,
            stamp=stamp,
            cancellable=cancellable,
            charge=charge,
            options=self,
        )

    def run(
        self,
        agent: Responder,
        request: TurnRequest,
        sink: Sink | None,
        *,
        tracker: ResponseTracker | None = None,
        created: bool = True,
        stamp: bool = True,
        charge: Charge | None = None,
    ) -> Coroutine[Any, Any, ResponseOutcome]:
        """Run one response of ``agent`` inline, every event to ``sink`` (``None``: nowhere).

        Shorthand for ``await self.runner(agent, request, sink, ...).run()``
        when nothing else needs to cancel the turn: ``await`` it for the
        outcome.
        """
        # No runner is handed out, so nothing can cancel the turn: no scope.
        # No coroutine of its own either: the caller awaits the runner's run()
        # (the Chat Completions hot path). Built and initialised apart: a
        # class call with keywords costs CPython a keyword dict that __init__
        # unpacks again; a method call does not.
        runner = ResponseRunner.__new__(ResponseRunner)
        runner.__init__(  # type: ignore[misc]
            agent,
            request,
            sink,
            tracker=tracker,
            created=created,
            stamp=stamp,
            cancellable=False,
            charge=charge,
            options=self,
        )
        return runner.run()

    @asynccontextmanager
    async def open(
        self,
        agent: Responder,
        request: TurnRequest,
        *,
        buffer: int = DEFAULT_BUFFER,
        charge: Charge | None = None,
        port: ResponsePort | None = None,
    ) -> AsyncIterator[ResponseRun]:
        """Start one response of ``agent`` in its own task; see the module docstring.

        The events arrive through a memory channel of ``buffer`` events.
        Leaving the block before the events are exhausted cancels the agent.
        ``charge`` is settled when the response ends (also when it never
        started). ``port``, the response's interrupt port, sends its events
        to the runner's ``emit`` while the agent runs, and is closed when it
        ends.
        """
        send, receive = trio.open_memory_channel[ev.Event](buffer)
        turn = ResponseRun(agent, request, receive, charge, port, self)
        try:
            async with trio.open_nursery() as nursery, receive:
                nursery.start_soon(turn._drive, send)
                try:
                    yield turn
                finally:
                    if not turn._done:
                        nursery.cancel_scope.cancel()
        finally:
            if charge is not None:
                await charge.settle(None, used=False)  # the runner never ran; else a no-op


#: The defaults (:class:`TurnOptions`).
DEFAULT_TURN_OPTIONS: Final = TurnOptions()


class _SinkFailed(UampError):
    """Raised inside the agent when the sink failed; carries nothing itself."""


class ResponseRunner:
    """Runs one response of ``agent`` in the caller's task; see the module docstring.

    Args:
        agent: The agent to run.
        request: What it answers.
        sink: Receives every event, ``response.created`` and the terminal
            event included, in order; awaiting it holds the agent back.
            ``None``: nobody needs the events, only :attr:`tracker` (a
            non-streamed reply built from the tracker at the end).
        tracker: Continue this tracker instead of starting a new one (a later
            tool round of the same response). The runner applies every event
            it hands to the sink to it, so it must be nobody else's.
        created: Whether to send ``response.created`` first (``False`` for a
            later tool round: the client saw it already).
        yield_every: Pass a scheduler checkpoint after this many events, so
            an agent whose sink never waits does not starve other tasks.
        stamp: Fill in the ``response_id`` and ``session_id`` the agent left
            out (a copy of the event). ``False`` hands the agent's events to
            the sink as they are: for a sink that adds the ids itself while
            encoding (the UAMP session driver passes them to the core's
            ``send``). The runner's own events (``response.created`` and the
            terminal event) carry both ids either way.
        track: Apply every event to :attr:`tracker`. ``False`` when the sink
            applies them to that same tracker itself (the UAMP session
            driver hands the core's tracker, which the core's ``send``
            updates), so nothing is counted twice; :attr:`tracker` must then
            see every event the sink accepts for ``requires_action`` and the
            terminal events to be right.
        cancellable: Run the agent under a cancel scope of the runner's own,
            which :meth:`cancel` cancels and after which the runner sends
            ``response.cancelled``. ``False`` skips that scope (entering and
            leaving one is not free on trio): for a caller that nothing
            cancels (:func:`run_response`), or that runs the turn inside a scope
            of its own and sends ``response.cancelled`` itself when it
            cancels it (the UAMP session driver); :meth:`cancel` then only
            records the request.
        charge: Money held for this response; settled once when it ends.
        options: The server's turn options (:class:`TurnOptions`), read here
            once: ``max_output_bytes`` bounds the output of the tracker the
            runner starts (a ``tracker`` given keeps its own bound).

    A runner runs once. :meth:`cancel` may be called at any time, from any
    task of the same trio run, also before :meth:`run`.
    """

    __slots__ = (
        "_cancel_requested",
        "_cancellable",
        "_charge",
        "_count",
        "_created",
        "_finished",
        "_metered",
        "_scope",
        "_sink",
        "_sink_error",
        "_stamp",
        "_started",
        "_track",
        "_yield_every",
        "agent",
        "balance",
        "outcome",
        "request",
        "tracker",
    )

    def __init__(
        self,
        agent: Responder,
        request: TurnRequest,
        sink: Sink | None,
        *,
        tracker: ResponseTracker | None = None,
        created: bool = True,
        yield_every: int = YIELD_EVERY,
        stamp: bool = True,
        track: bool = True,
        cancellable: bool = True,
        charge: Charge | None = None,
        options: TurnOptions = DEFAULT_TURN_OPTIONS,
    ) -> None:
        if yield_every < 1:
            raise ValueError("yield_every must be at least 1")
        self.agent = agent
        self.request = request
        self.tracker = tracker or ResponseTracker(
            request.response_id, request.messages, options.max_output_bytes
        )
        #: Set once the runner has sent its last event.
        self.outcome: ResponseOutcome | None = None
        self._sink = sink
        self._created = created
        self._yield_every = yield_every
        self._stamp = stamp
        self._track = track
        self._scope: trio.CancelScope | None = None
        self._cancel_requested = False
        self._sink_error: BaseException | None = None
        self._finished = False
        self._started = False
        self._count = 0
        self._cancellable = cancellable
        self._charge = charge
        self._metered: MeteredRun | None = None
        #: The balance update of the settled charge.
        self.balance: ev.PaymentBalance | None = None

    @property
    def cancel_requested(self) -> bool:
        """Whether :meth:`cancel` was called."""
        return self._cancel_requested

    def cancel(self) -> None:
        """Cancel the agent; the turn ends with ``response.cancelled``."""
        self._cancel_requested = True
        if self._scope is not None:
            self._scope.cancel()

    async def emit(self, event: ev.Event) -> None:
        """The ``emit`` the agent is given (exposed for tests and adapters)."""
        if self._finished:
            raise RuntimeError("emit() called after the agent's respond() returned")
        if self._sink_error is not None:
            raise _SinkFailed
        if self._stamp:
            event = ev.with_ids(
                event,
                session_id=self.request.session_id,
                response_id=self.request.response_id,
            )
        if type(event) is ev.ResponseDelta:
            if self._metered is not None:
                self._metered.delta()
        elif isinstance(event, _TERMINAL):
            raise RuntimeError("the turn driver sends the terminal event, not the agent")
        # cancel() lands at the next emit even when the sink never waits. Any
        # other cancellation lands where the sink waits or at the checkpoint
        # every yield_every events (a check here on every event, for what
        # trio delivers at checkpoints anyway, cost as much as the sink).
        if self._cancel_requested:
            await trio.lowlevel.checkpoint_if_cancelled()
        if self._track:
            try:
                self.tracker.apply(event)
            except OutputTooLarge as exc:
                self._sink_error = exc  # the turn ends output_too_large (run)
                raise _SinkFailed from None
        # The sink, inline: this is the hot path of every streamed event.
        sink = self._sink
        if sink is None:
            return
        try:
            await sink(event)
        except Exception as exc:
            self._sink_error = exc
            raise _SinkFailed from None
        count = self._count + 1
        if count >= self._yield_every:
            self._count = 0
            await trio.lowlevel.checkpoint()
        else:
            self._count = count

    async def run(self) -> ResponseOutcome:
        """Run the turn to its end; returns (and sets) :attr:`outcome`.

        Raises:
            RuntimeError: The runner ran already.
            BaseException: Whatever the sink raised (the agent is stopped and
                no terminal event is sent), or an outside cancellation.
        """
        if self._started:
            raise RuntimeError("a ResponseRunner runs once")
        self._started = True
        # The turn itself is this method's body (no coroutine of its own on
        # the way to the first delta).
        try:
            request, tracker = self.request, self.tracker
            rid, sid = request.response_id, request.session_id
            if self._created:
                if self._sink is None:
                    # Nobody sees the event: only its effect on the tracker.
                    if self._track:
                        tracker.created()
                else:
                    created = _make_created(rid, sid)
                    if self._track:
                        tracker.apply(created)
                    # Delivered as emit delivers (no coroutine of its own before the
                    # first delta): the sink's error is the run's, the event counts.
                    try:
                        await self._sink(created)
                    except Exception as exc:
                        self._sink_error = exc
                        raise exc from None
                    self._count += 1
                    if self._count >= self._yield_every:
                        self._count = 0
                        await trio.lowlevel.checkpoint()
            error: BaseException | None = None
            cancelled = False
            agent = self.agent
            metered = None
            if type(agent) is MeteredAgent:
                # The metrics' wrapper: the run is counted here (emit counts the
                # deltas) and its agent called without the wrapper's frame.
                metered = self._metered = agent.start_run()
                agent = agent.agent
            try:
                if self._cancellable:
                    with trio.CancelScope() as scope:
                        self._scope = scope
                        if self._cancel_requested:
                            scope.cancel()
                        error = await self._respond(agent)
                    self._scope = None
                    cancelled = scope.cancelled_caught
                else:
                    # _respond, inline (a coroutine less per turn).
                    try:
                        await agent.respond(request, self.emit)
                    except Exception as exc:
                        error = exc
            finally:
                if metered is not None:
                    metered.end(error)
            self._finished = True
            if self._sink_error is not None:
                if type(self._sink_error) is not OutputTooLarge:
                    raise self._sink_error
                # The output reached its bound: the agent was stopped for it.
                error, self._sink_error = self._sink_error, None
            status, final, unexpected = conclude(tracker, error, cancelled, session_id=sid)
            if unexpected:
                log.error("agent %r failed", request.agent, exc_info=error)
            # Caught in this frame, the error's traceback holds the frame, and the
            # frame the error (and the request): a cycle only the collector frees.
            error = None
            if final is not None and self._track:
                tracker.apply(final)  # built with both ids: nothing to stamp
            if self._charge is not None:
                await self._settle()
            outcome = self.outcome = _make_outcome(status, tracker, final, self.balance)
            if final is not None and self._sink is not None:
                await self._sink(final)
            return outcome
        finally:
            if self._charge is not None:
                await self._settle()  # however it ended (the normal path settled already)
            # Nothing is sent after the end. The sink's owner often holds this
            # runner (to cancel it): without the sink there is no cycle, and
            # the request with its conversation is freed when the owner is.
            self._sink = None

    async def _settle(self) -> None:
        charge = self._charge
        if charge is None:
            return
        self._charge = None
        tracker = self.tracker
        used = tracker.usage is not None or bool(tracker.output)
        self.balance = await charge.settle(tracker.usage, used=used)

    async def _respond(self, agent: Responder) -> Exception | None:
        """Call ``agent``; returns what it raised (``None`` when it returned)."""
        try:
            await agent.respond(self.request, self.emit)
        except Exception as exc:
            return exc
        return None


def cancel_handler(
    runner: ResponseRunner,
) -> Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]:
    """An event-log message handler that cancels ``runner`` on ``{"op": "cancel"}``.

    What the process running a response answers when another process asks
    it to cancel (``EventLog.ask``).
    """

    return cancel_on_ask(runner.cancel)


#: Run one response on the defaults, inline (:meth:`TurnOptions.run`):
#: ``await run_response(agent, request, sink)``, when nothing else needs to
#: cancel the turn. A host's turns run on its own options, ``host.turns.run(...)``.
run_response = DEFAULT_TURN_OPTIONS.run


class ResponseRun:
    """One running response: iterate it for its events, then read :attr:`outcome`."""

    def __init__(
        self,
        agent: Responder,
        request: TurnRequest,
        receive: trio.MemoryReceiveChannel[ev.Event],
        charge: Charge | None = None,
        port: ResponsePort | None = None,
        options: TurnOptions = DEFAULT_TURN_OPTIONS,
    ) -> None:
        self.agent = agent
        self._charge = charge
        self._port = port
        self.request = request
        self._receive = receive
        self._runner: ResponseRunner | None = None
        self._cancel_requested = False
        self.tracker = ResponseTracker(
            request.response_id, request.messages, options.max_output_bytes
        )
        self._done = False

    @property
    def outcome(self) -> ResponseOutcome | None:
        """Set once the driver has sent its last event."""
        return self._runner.outcome if self._runner is not None else None

    def cancel(self) -> None:
        """Cancel the agent; the turn ends with ``response.cancelled``."""
        self._cancel_requested = True
        if self._runner is not None:
            self._runner.cancel()

    def __aiter__(self) -> AsyncIterator[ev.Event]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[ev.Event]:
        async for event in self._receive:
            yield event

    async def _drive(self, send: trio.MemorySendChannel[ev.Event]) -> None:
        async with send:
            runner = ResponseRunner(
                self.agent, self.request, send.send, tracker=self.tracker, charge=self._charge
            )
            port = self._port
            if port is not None:
                port.emit = runner.emit
            if self._cancel_requested:
                runner.cancel()
            self._runner = runner
            try:
                await runner.run()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return  # the reader left; open_response cancels us anyway
            finally:
                if port is not None:
                    port.close()  # no cycle keeps the request (and its conversation) alive
        self._done = True


#: Start one response on the defaults in its own task (:meth:`TurnOptions.open`):
#: ``async with open_response(agent, request) as turn: async for event in turn: ...``.
#: A host's turns open through its own options, ``host.turns.open(...)``.
open_response = DEFAULT_TURN_OPTIONS.open
