"""A response whose process was lost: ended ``interrupted`` in its session's log.

A session's record names the response in flight and the process writing it
(:class:`~uamp_stores.event_log.SessionRecord`). When a client resumes the
session and that process is gone (no heartbeat, or a single-process store
reopened by another process), the response would never end. The first
process to :meth:`~uamp_stores.event_log.EventLog.claim` the loss either
carries it on from a checkpoint (``uamp serve``'s continuation) or ends it
here: ``response.error`` ``interrupted`` with the output that was logged
(:func:`uamp_proto.resume.interrupted_event`), and a record that says
nothing runs, its conversation extended by the response's input and
partial output.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from uamp_proto import events as ev
from uamp_proto.codec import encode, unstructure
from uamp_proto.ids import random_ids
from uamp_proto.resume import interrupted_event, replayed

from .event_log import EventLog, LogKey, SessionRecord

__all__ = ["abandon", "append_event", "interrupt_lost"]


def append_event(event_log: EventLog, key: LogKey, event: ev.Event, session_id: str) -> None:
    """Log ``event`` for ``key`` with a new ``event_id`` (this process writes the log)."""
    event_id = random_ids("evt")
    data = encode(attrs.evolve(event, event_id=event_id, session_id=session_id))
    event_log.append(key, data, event_id)


def abandon(
    event_log: EventLog,
    key: LogKey,
    record: SessionRecord,
    owner: Callable[[], None] | None,
    exc: BaseException | None = None,
    *,
    logged: list[bytes] | None = None,
) -> None:
    """End ``record.running`` ``interrupted`` (with what ``logged`` holds of it) and let go.

    The caller adopted ``key`` 's log with ``owner``. The record then says
    nothing runs; with ``logged`` its conversation gains the response's
    input and partial output, so the next turn sees them. ``exc``: why (a
    supervisor's ``on_error`` passes the failure of a continuation).
    """
    running = record.running
    if running is not None and event_log.writing(key):
        tracker = replayed(running, logged or [])
        append_event(event_log, key, interrupted_event(tracker), key[1])
        if logged is not None:
            record.history = [*record.history, *record.input, *unstructure(tracker.messages())]
    record.running, record.input = None, []
    event_log.put_record(key, record.copy())
    event_log.release(key, owner)


async def interrupt_lost(event_log: EventLog, key: LogKey, record: SessionRecord) -> bool:
    """End the lost process's response of ``record`` in the log, once over all processes.

    Returns whether this call ended it (``False``: another claimed it first;
    it ends there). The log is written before this returns.
    """
    running = record.running
    assert running is not None
    if not await event_log.claim(key, f"{running}@{record.node}"):
        return False

    def ending() -> None:
        """This call's hold on the log."""

    await event_log.adopt(key, ending)
    held = [e.data for e in await event_log.read(key, 0, event_log.retention.max_events)]
    abandon(event_log, key, record, ending, logged=held)
    await event_log.flush()
    return True
