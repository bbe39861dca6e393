"""Resumable sessions: event positions and the merge of a resumed stream (a uamp extension).

UAMP 1.0 leaves recovery to the client (spec 000, 14.4). uamp keeps a log of
every event a session sends and lets a client that lost its connection pick
the stream up where it broke: ``session.create`` with the session's id and
``extensions: {"resume_from": "<the last event_id it saw>"}``; the server
answers ``session.created`` with ``extensions: {"resumed": true}``, sends
every event the client missed in order, then the live stream
(docs/resume.md).

Theory of operation
-------------------
*Positions.* The ``event_id`` stays an event's identity; its **position**
orders it: 1, 2, 3 ... per session, assigned when the event is logged
(:class:`Positions`). A log keeps a window of positions ``first..last``;
older ones are dropped by the :class:`Retention` (a count per session),
and a whole session expires some time after its last activity.

*Where to start.* The client names an event id; the store finds its
position. :func:`start_after` turns that lookup into the position the
replay starts after, or a :class:`ResumeError`: an id not in the log while
the log has dropped older events is ``beyond_retention`` (the events in
between are gone, and the client is told so instead of being handed a
stream with a hole); an id the log never held is ``unknown_event``.

*The merge.* A resumed stream has two sources: what the log already holds
(the *backfill*, read from the store) and what is appended while that read
runs (the *live* entries, from a subscription opened **before** the read so
that nothing falls between the two). The sources overlap and may each arrive
in several pieces. :class:`ResumeStream` merges them into one stream in which
every position appears exactly once, in order:

=================  ==========================  =================================
state              input                       effect
=================  ==========================  =================================
REPLAYING          backfill entry > cursor     sent, cursor moves
REPLAYING          backfill entry <= cursor    duplicate, dropped
REPLAYING          backfill entry > cursor+1   hole: :class:`ResumeError`
REPLAYING          live entry                  held until the backfill ends
REPLAYING          backfill ends               held entries sent as LIVE would
LIVE               entry <= cursor             duplicate, dropped
LIVE               entry == cursor+1           sent, cursor moves
LIVE               entry > cursor+1            gap: back to REPLAYING, fetch
                                               the log after the cursor
=================  ==========================  =================================

Nothing here reads a clock or does I/O: the binding passes the time in and
performs the fetches a :class:`Step` asks for.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Iterable, Sequence
from typing import Any, Final

import attrs
import orjson

from . import events as ev
from .codec import DecodeError, decode, unstructure
from .errors import UampError
from .response import CHECKPOINT, MAX_OUTPUT_BYTES, RESTORED, ResponseTracker

__all__ = [
    "CHECKPOINT",
    "INTERRUPTED",
    "LAST_REQUEST",
    "RESTORED",
    "RESUMED",
    "RESUME_FROM",
    "LogEntry",
    "LogWindow",
    "Positions",
    "ResumeError",
    "ResumePoint",
    "ResumeState",
    "ResumeStream",
    "Retention",
    "Step",
    "event_id_of",
    "interrupted",
    "interrupted_event",
    "replayed",
    "resume_from",
    "resume_point",
    "start_after",
]

#: The ``session.create.extensions`` key naming the last event id the client saw.
RESUME_FROM: Final = "resume_from"
#: The ``session.created.extensions`` key saying the session was resumed.
RESUMED: Final = "resumed"
#: The ``session.created.extensions`` key of a resumed session naming the
#: ``event_id`` of the last ``response.create`` the server acted on: a client
#: whose later ``response.create`` got no ``response.created`` before its
#: connection broke sends that turn again (docs/resume.md).
LAST_REQUEST: Final = "last_request"


@attrs.define(auto_exc=True)
class ResumeError(UampError):
    """A stream cannot be resumed as asked.

    Attributes:
        message: What went wrong, for a person.
        code: ``beyond_retention`` (the log no longer holds events the client
            missed), ``unknown_event`` (the log never held that event id),
            ``unknown_session`` or ``session_expired`` (set by bindings).
    """

    message: str
    code: str = attrs.field(default="beyond_retention", kw_only=True)


@attrs.frozen
class LogEntry:
    """One logged event: its position in the session's log, its id and its JSON."""

    position: int
    event_id: str
    data: bytes


@attrs.frozen
class LogWindow:
    """What a log retains: positions ``first`` to ``last`` (``last`` is 0 before any event).

    ``first`` is ``last + 1`` when everything written was dropped.
    """

    first: int = 1
    last: int = 0

    @property
    def trimmed(self) -> bool:
        """Whether older events were dropped."""
        return self.first > 1


def event_id_of(data: bytes | str) -> str:
    """The ``event_id`` of one encoded event (``""`` when it has none).

    The core writes ``event_id`` as the last key of what it sends; that case
    is read off the end of the message without parsing it, anything else is
    parsed.
    """
    if type(data) is bytes and data.endswith(b'"}'):
        at = data.rfind(b'"event_id":"')
        if at > 0 and data[at - 1] in _KEY_START:
            value = data[at + 12 : -2]
            if b'"' not in value and b"\\" not in value:
                return value.decode()
    found = orjson.loads(data).get("event_id")
    return found if isinstance(found, str) else ""


_KEY_START: Final = frozenset(b",{")


def resume_from(extensions: Any) -> str | None:
    """The event id a ``session.create`` asks to resume after, or ``None``.

    Raises:
        ResumeError: ``resume_from`` is there but not a non-empty string
            (code ``invalid_event``).
    """
    if not isinstance(extensions, dict) or RESUME_FROM not in extensions:
        return None
    value = extensions[RESUME_FROM]
    if not isinstance(value, str) or not value:
        raise ResumeError(
            f"extensions.{RESUME_FROM} must be the event_id of the last event received",
            code="invalid_event",
        )
    return value


def start_after(window: LogWindow, found: int | None, event_id: str) -> int:
    """The position a resume after ``event_id`` starts after.

    Args:
        window: What the log retains.
        found: The position of ``event_id`` in the log, ``None`` when the log
            does not hold it.
        event_id: The id the client named (for the message).

    Raises:
        ResumeError: ``beyond_retention`` or ``unknown_event``.
    """
    if found is not None:
        if found < window.first - 1 or found > window.last:
            return _beyond(window, event_id)
        return found
    if window.trimmed:
        return _beyond(window, event_id)
    raise ResumeError(f"event {event_id!r} was never sent on this session", code="unknown_event")


def _beyond(window: LogWindow, event_id: str) -> int:
    raise ResumeError(
        f"event {event_id!r} is older than the session's log keeps (it holds positions "
        f"{window.first} to {window.last}): the events after it are lost",
        code="beyond_retention",
    )


@attrs.frozen
class Retention:
    """How much of a session's log is kept, and for how long.

    Attributes:
        max_events: Most events kept per session (older ones are dropped).
        max_age: Seconds a session is kept after its last activity; a resume
            later than that is refused as ``session_expired``, and after twice
            as long the session is forgotten (``unknown_session``).
    """

    max_events: int = 10_000
    max_age: float = 3600.0

    def __attrs_post_init__(self) -> None:
        if self.max_events < 1:
            raise ValueError("max_events must be at least 1")
        if self.max_age <= 0:
            raise ValueError("max_age must be positive")

    def first_kept(self, last: int) -> int:
        """The oldest position a log ending at ``last`` keeps."""
        return max(1, last - self.max_events + 1)

    def expired(self, updated: float, now: float) -> bool:
        """Whether a session last active at ``updated`` may no longer be resumed."""
        return now - updated > self.max_age

    def forgotten(self, updated: float, now: float) -> bool:
        """Whether a session last active at ``updated`` may be deleted."""
        return now - updated > 2 * self.max_age


class Positions:
    """Hands out a session's positions: 1, 2, 3 ... (restartable from a log's last)."""

    __slots__ = ("last",)

    def __init__(self, last: int = 0) -> None:
        self.last = last

    def next(self) -> int:
        """The next position."""
        self.last += 1
        return self.last


class ResumeState(enum.Enum):
    """Where a :class:`ResumeStream` is."""

    REPLAYING = "replaying"
    LIVE = "live"


@attrs.frozen
class Step:
    """What the binding does next: send ``send`` in order, then fetch the log after ``fetch_after``.

    ``fetch_after`` is ``None`` when nothing needs reading.
    """

    send: Sequence[LogEntry] = ()
    fetch_after: int | None = None


_NOTHING: Final = Step()


class ResumeStream:
    """Merges a log's backfill and its live entries into one ordered stream without duplicates.

    Args:
        after: The position the stream starts after (:func:`start_after`; 0 for all).
        max_held: Most live entries held while replaying; past it they are
            let go and the next fetch reads them from the log instead.
    """

    def __init__(self, after: int = 0, *, max_held: int = 4096) -> None:
        self.cursor = after
        self.state = ResumeState.REPLAYING
        self._held: list[LogEntry] = []
        self._max_held = max_held
        self._overflow = False

    def backfill(self, entries: Iterable[LogEntry]) -> Step:
        """Entries read from the log (a piece of the replay).

        Raises:
            ResumeError: The log skips a position after the cursor (it
                dropped events the client has not seen).
        """
        out: list[LogEntry] = []
        for entry in entries:
            if entry.position <= self.cursor:
                continue
            if entry.position != self.cursor + 1:
                raise ResumeError(
                    f"the log lost events {self.cursor + 1} to {entry.position - 1} "
                    "before they could be replayed",
                    code="beyond_retention",
                )
            out.append(entry)
            self.cursor = entry.position
        return Step(send=out)

    def backfill_done(self) -> Step:
        """The log read is complete: go live with the entries held meanwhile."""
        self.state = ResumeState.LIVE
        held, self._held = self._held, []
        if self._overflow:
            self._overflow = False
            self.state = ResumeState.REPLAYING
            return Step(fetch_after=self.cursor)
        out: list[LogEntry] = []
        for entry in sorted(held, key=_position):
            step = self._live(entry)
            out.extend(step.send)
            if step.fetch_after is not None:
                return Step(send=out, fetch_after=step.fetch_after)
        return Step(send=out)

    def live(self, entry: LogEntry) -> Step:
        """An entry appended to the log after the subscription opened."""
        if self.state is ResumeState.REPLAYING:
            if entry.position > self.cursor:
                if len(self._held) >= self._max_held:
                    self._overflow = True
                    self._held.clear()
                elif not self._overflow:
                    self._held.append(entry)
            return _NOTHING
        return self._live(entry)

    def _live(self, entry: LogEntry) -> Step:
        if entry.position <= self.cursor:
            return _NOTHING  # already sent (by the backfill or twice by the source)
        if entry.position == self.cursor + 1:
            self.cursor = entry.position
            return Step(send=(entry,))
        # A gap: entries between are in the log, not here. Read them.
        self.state = ResumeState.REPLAYING
        self._held.append(entry)
        return Step(fetch_after=self.cursor)


def _position(entry: LogEntry) -> int:
    return entry.position


#: The ``response.error`` code of a response whose process was lost mid-stream.
INTERRUPTED: Final = "interrupted"


def _events_of(response_id: str, logged: Iterable[bytes]) -> list[ev.Event]:
    """The decodable events of ``response_id`` among ``logged``, in order."""
    out: list[ev.Event] = []
    for data in logged:
        try:
            event = decode(data)
        except DecodeError:
            continue
        if isinstance(event, ev.Event) and _response_of(event) == response_id:
            out.append(event)
    return out


def _response_of(event: ev.Event) -> str | None:
    if type(event) is ev.Progress:
        return event.target_id if event.target == "response" else None
    return getattr(event, "response_id", None)


def replayed(response_id: str, logged: Iterable[bytes]) -> ResponseTracker:
    """``response_id`` 's output as the events among ``logged`` (a session's log) built it."""
    return _tracked(response_id, _events_of(response_id, logged))


def _tracked(
    response_id: str, events: Iterable[ev.Event], max_output_bytes: int = MAX_OUTPUT_BYTES
) -> ResponseTracker:
    tracker = ResponseTracker(response_id, max_output_bytes=max_output_bytes)
    for event in events:
        with contextlib.suppress(UampError):
            tracker.apply(event)
    return tracker


def _is_stage(event: ev.Event, stage: str) -> bool:
    return type(event) is ev.Progress and event.stage == stage


@attrs.frozen
class ResumePoint:
    """Where an orphaned response can go on: its last UAP checkpoint in the log.

    Attributes:
        checkpoint: The checkpoint's id (the ``progress`` event's ``message``).
        tracker: The response's output up to the checkpoint (continue it).
        superseded: How many of the response's events were sent after the
            checkpoint (the continuation replaces them; 0: nothing to undo).
    """

    checkpoint: str
    tracker: ResponseTracker
    superseded: int


def resume_point(
    response_id: str, logged: Iterable[bytes], max_output_bytes: int = MAX_OUTPUT_BYTES
) -> ResumePoint | None:
    """The point ``response_id`` can go on from after its process was lost, or ``None``.

    ``logged`` is what the session's log holds, in order. A response goes on
    from its last ``progress`` event of stage :data:`CHECKPOINT` (target
    ``response``) if it had one -- and if it did not already go on from
    there (a :data:`RESTORED` after it: then from that restore, so a second
    loss does not undo the first continuation's completed work). A response
    that ended, or has no checkpoint, has none: it ends ``interrupted``.
    The point's tracker keeps at most ``max_output_bytes`` of output
    (:attr:`ResponseTracker.max_output_bytes`), the bound of its going on.
    """
    events = _events_of(response_id, logged)
    if any(type(e) in _ENDS for e in events):
        return None
    cut: int | None = None
    name = ""
    for i, event in enumerate(events):
        if _is_stage(event, CHECKPOINT) or _is_stage(event, RESTORED):
            cut, name = i, event.message or ""  # type: ignore[attr-defined]
    if cut is None:
        return None
    return ResumePoint(
        checkpoint=name,
        tracker=_tracked(response_id, events[: cut + 1], max_output_bytes),
        superseded=len(events) - cut - 1,
    )


_ENDS: Final = (ev.ResponseDone, ev.ResponseCancelled, ev.ResponseErrorEvent)


def interrupted(
    response_id: str, logged: Iterable[bytes], *, session_id: str | None = None
) -> ev.ResponseErrorEvent:
    """``response.error`` ``interrupted`` for a response whose process stopped mid-stream.

    ``logged`` is what the session's log holds (in order); the events of
    ``response_id`` among them rebuild the partial output the client was
    sent, which the error carries in ``details.partial_output`` (content
    items) and ``details.text``.
    """
    return interrupted_event(replayed(response_id, logged), session_id=session_id)


def interrupted_event(
    tracker: ResponseTracker, *, session_id: str | None = None
) -> ev.ResponseErrorEvent:
    """``response.error`` ``interrupted`` carrying ``tracker`` 's output so far."""
    return tracker.error_event(
        INTERRUPTED,
        "The response was interrupted: the process running it stopped before it ended. "
        "details.partial_output is what was sent until then.",
        {"partial_output": unstructure(tracker.output), "text": tracker.text},
        session_id=session_id,
    )
