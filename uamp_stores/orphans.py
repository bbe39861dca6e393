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

A client that resumed the session follows its log and asks
:func:`orphaned` whether the response it follows lost its writer. A writer
of this process writes the record (nothing runs) and then lets go; a read of
the record made before that write may be handed back after it let go (on
Redis the read runs in a worker thread). That record says the response runs
while nobody writes it -- the writer looks lost, and the response would be
carried on (or ended) a second time, after its end. So a record read while
this process wrote the log, which it no longer writes, is read again.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from uamp_proto import events as ev
from uamp_proto.codec import encode, unstructure
from uamp_proto.ids import random_ids
from uamp_proto.resume import interrupted_event, replayed

from .event_log import EventLog, LogKey, SessionRecord

__all__ = ["abandon", "append_event", "interrupt_lost", "orphaned"]


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

    A response whose end ``logged`` holds already is not ended again.

    The caller adopted ``key`` 's log with ``owner``. The record then says
    nothing runs; with ``logged`` its conversation gains the response's
    input and partial output, so the next turn sees them. ``exc``: why (a
    supervisor's ``on_error`` passes the failure of a continuation).
    """
    running = record.running
    if running is not None and event_log.writing(key):
        tracker = replayed(running, logged or [])
        if not tracker.is_finished:  # a response the log saw end ends once
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


async def orphaned(event_log: EventLog, key: LogKey) -> tuple[SessionRecord, bool]:
    """The record of a session a client follows, and whether its response lost its writer.

    Lost: ``record.running`` is set, this process does not write the log,
    and the process the record names is this one or has no heartbeat. A
    record read while this process wrote the log, which it no longer
    writes, is read again (the module docstring says why); what this
    process's writers queued before they let go is written before the record
    is read.

    Raises:
        ResumeError: As :meth:`EventLog.load`.
        StoreUnavailable: The store does not answer.
    """
    while True:
        held = event_log.writing(key)
        if not held:
            await event_log.flush()  # a writer here let go: its last record is read too
        record = await event_log.load(key, conversation=True)
        if record.running is None or event_log.writing(key):
            return record, False
        if held:
            continue  # let go while the record was read: the reply may predate its last write
        if record.node != event_log.node and await event_log.alive(record.node):
            return record, False
        return record, True
