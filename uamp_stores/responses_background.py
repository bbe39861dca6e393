"""Background OpenAI Responses (``background: true``) on the event log, for both servers.

Theory of operation
-------------------
A background response is a stored response (:mod:`.responses`) that runs
without the request that created it: ``POST .../responses`` answers
``queued`` (or follows the stream) at once, and the turn runs in the
server's task group. Its process logs every event as the agent emits it, so
the Responses stream can be rendered again from the log at any time, on any
process sharing the store: the renderer
(:class:`uamp_proto.adapters.responses_render.StreamEncoder`) is a pure
function of the events, so the ``sequence_number`` s are the same each time
and ``starting_after`` skips what a client already saw (:func:`follow`).

While it runs, the process running it answers ``{"op": "cancel"}`` asked
through the event log (:func:`cancel_on_ask`), so ``POST .../cancel`` on any
process reaches it (:meth:`BackgroundResponses.stop`). Each process runs at
most :data:`MAX_BACKGROUND` of them, :data:`MAX_BACKGROUND_PER_PRINCIPAL` for
one principal (:meth:`BackgroundResponses.room`; the transports answer 429
past it).

Both servers' transports (``uamp_trio.transports.responses``, and
``uamp_asgi.transports.responses``) drive these with their own turn runner
(anything shaped as :class:`Runner`) and their own way of taking on a
response whose process was lost (the ``check`` they pass); this module is
the I/O they share, written on anyio (asyncio or Trio underneath).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol

import anyio

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.adapters.responses_render import StreamEncoder
from uamp_proto.codec import decode
from uamp_proto.errors import UampError
from uamp_proto.outcome import ResponseOutcome
from uamp_proto.responder import TurnRequest
from uamp_proto.response import ResponseTracker
from uamp_proto.resume import ResumeError

from .event_log import EventLog, Handler, LogKey, SessionRecord
from .orphans import append_event
from .responses import stored_part

__all__ = [
    "HEARTBEAT",
    "MAX_BACKGROUND",
    "MAX_BACKGROUND_PER_PRINCIPAL",
    "SETTLE_WAIT",
    "TOO_MANY",
    "BackgroundResponses",
    "NotReplayable",
    "Runner",
    "cancel_on_ask",
    "follow",
    "replayable_echo",
]

log = logging.getLogger("uamp_stores.responses")

#: Background responses running in one process at most ...
MAX_BACKGROUND: Final = 256
#: ... and per principal (a 429 past either).
MAX_BACKGROUND_PER_PRINCIPAL: Final = 16
#: What a request past either bound is told.
TOO_MANY: Final = "Too many background responses are running; wait for one to end."
#: A stream with nothing to say writes a comment this often (seconds), so
#: proxies keep it open and a gone client is noticed.
HEARTBEAT: Final = 15.0
#: How long ``cancel`` and ``DELETE`` wait for a running response to end (seconds).
SETTLE_WAIT: Final = 10.0
#: How long a follower waits for news before it looks at the record (seconds).
LOOK: Final = 1.0
#: How long a finished response's last writes may take to reach the store (seconds).
LAST_FLUSH: Final = 5.0

#: Writes bytes of a streamed answer.
Write = Callable[[bytes], Awaitable[None]]
#: Looks at a response's record while it is followed or stopped: the
#: transport takes on a response whose process is gone.
Check = Callable[[SessionRecord], Awaitable[None]]


class Runner(Protocol):
    """A turn driver: ``uamp_trio``'s ``ResponseRunner``, ``uamp_asgi``'s ``Turn``."""

    @property
    def request(self) -> TurnRequest:
        """The turn."""
        ...

    @property
    def tracker(self) -> ResponseTracker:
        """Its output so far."""
        ...

    def cancel(self) -> None:
        """End it ``cancelled``."""
        ...

    async def run(self) -> ResponseOutcome:
        """Run it to its end."""
        ...


class NotReplayable(UampError):
    """A stored response whose stream cannot be followed: ``status`` and ``code`` say why."""

    def __init__(self, status: int, message: str, code: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.param = status, code, param


def cancel_on_ask(cancel: Callable[[], None]) -> Handler:
    """An event-log message handler that calls ``cancel`` on ``{"op": "cancel"}``.

    What the process running a response answers when another process asks
    it to cancel (:meth:`~.event_log.EventLog.ask`).
    """

    async def on_message(message: dict[str, Any]) -> dict[str, Any]:
        if message.get("op") != "cancel":
            return {"error": "unsupported"}
        cancel()
        return {"cancelled": True}

    return on_message


async def replayable_echo(
    event_log: EventLog, key: LogKey, record: SessionRecord
) -> dict[str, Any]:
    """The echo fields of stored response ``key`` when its stream can be followed.

    Raises:
        NotReplayable: ``400`` not a background response; ``410`` the
            start of its events is no longer kept.
    """
    kept = stored_part(record)
    assert kept is not None
    if not kept["echo"].get("background"):
        raise NotReplayable(
            400,
            "Only a background response can be streamed again; retrieve this one as JSON.",
            "invalid_value",
            "stream",
        )
    if (await event_log.window(key)).trimmed:
        raise NotReplayable(
            410,
            "The start of this response's events is no longer kept; retrieve it as JSON.",
            "beyond_retention",
        )
    echo: dict[str, Any] = kept["echo"]
    return echo


def _lost_events() -> ev.ResponseErrorEvent:
    """What a stream says when the log dropped events it had not sent."""
    return ev.ResponseErrorEvent(
        error=ty.ErrorInfo(
            code="beyond_retention", message="Events of this response are no longer kept."
        )
    )


async def follow(
    event_log: EventLog,
    key: LogKey,
    echo: dict[str, Any],
    after: int,
    write: Write,
    check: Check,
) -> None:
    """Render ``key`` 's log as the Responses stream after ``after``, live until it ends.

    ``check`` sees the record whenever the log is quiet (a lost process's
    response is taken on there); a response deleted meanwhile ends the stream.
    """
    encoder = StreamEncoder(key[1], echo, after=after)
    cursor = 0
    quiet = anyio.current_time()
    while not encoder.finished:
        entries = await event_log.wait(key, cursor, timeout=LOOK)
        if entries:
            if entries[0].position != cursor + 1:
                await write(encoder.sse(_lost_events()))
                return
            cursor = entries[-1].position
            frames = b"".join([encoder.sse(decode(e.data)) for e in entries])
            if frames:
                await write(frames)
                quiet = anyio.current_time()
            continue
        try:
            record = await event_log.load(key)
        except ResumeError:
            return  # deleted meanwhile
        await check(record)
        if anyio.current_time() - quiet >= HEARTBEAT:
            await write(b": keep-alive\n\n")
            quiet = anyio.current_time()


class BackgroundResponses:
    """The background responses running in this process, by log key (see the module)."""

    def __init__(
        self,
        *,
        max_running: int = MAX_BACKGROUND,
        max_per_principal: int = MAX_BACKGROUND_PER_PRINCIPAL,
    ) -> None:
        self.max_running = max_running
        self.max_per_principal = max_per_principal
        self.running: dict[LogKey, Runner] = {}

    def room(self, owner: tuple[str, str]) -> bool:
        """Whether principal ``owner`` may start one more."""
        if len(self.running) >= self.max_running:
            return False
        return sum(1 for key in self.running if key[0] == owner) < self.max_per_principal

    async def run(
        self,
        event_log: EventLog,
        key: LogKey,
        runner: Runner,
        final: Callable[[ResponseOutcome], ev.Event],
        finish: Callable[[ResponseOutcome | None], None],
    ) -> None:
        """Run ``runner`` (its events logged by its sink) to its end; never raises but cancellation.

        ``final``: the terminal event of an outcome that sent none (client
        tool calls); ``finish``: the transport's last word on the record
        (the log is released there). The caller put ``runner`` in
        :attr:`running` before starting this.
        """
        on_message = cancel_on_ask(runner.cancel)
        event_log.register(key, on_message)
        outcome: ResponseOutcome | None = None
        try:
            outcome = await runner.run()
            if outcome.final is None and event_log.writing(key):
                append_event(event_log, key, final(outcome), key[1])
        except Exception:
            log.exception("background response %s failed", key[1])
            tracker = runner.tracker
            if event_log.writing(key) and not tracker.is_finished:
                error = tracker.error_event("internal_error", "The response failed.")
                append_event(event_log, key, error, key[1])
                outcome = ResponseOutcome(status="failed", tracker=tracker, final=error)
        finally:
            event_log.unregister(key, on_message)
            self.running.pop(key, None)
            finish(outcome)
            with anyio.move_on_after(LAST_FLUSH, shield=True):
                try:
                    await event_log.flush()
                except Exception:
                    log.warning("response %s: its end is written once the store answers", key[1])

    async def stop(self, event_log: EventLog, key: LogKey, check: Check) -> None:
        """Cancel running response ``key`` wherever it runs; wait (a while) for it to end."""
        runner = self.running.get(key)
        if runner is not None:
            runner.cancel()
        else:
            await check(await event_log.load(key))
            record = await event_log.load(key)
            if record.running is not None:
                await event_log.ask(record.node, key, {"op": "cancel"}, timeout=2.0)
        with anyio.move_on_after(SETTLE_WAIT):
            while True:
                record = await event_log.load(key)
                if record.running is None:
                    return
                await event_log.wait(key, (await event_log.window(key)).last, timeout=0.2)
