"""Stored OpenAI Responses API responses in the session event log (docs/responses.md).

A stored response *is* a session of the event log: its key is ``(owner's
principal key, response id)`` -- another principal's id is not found, like a
missing one -- its :class:`~uamp_stores.event_log.SessionRecord` holds the
agent, the conversation before it (``history``), its input, the echoed
request fields and listed input items (``config.extensions[ECHO_KEY]``) and,
while it runs, the process running it; its log holds UAMP events, from which
the Response object is rendered again (a pure function of the events). Both
servers keep their stored responses in this layout, so one store serves
``uamp serve`` and the ASGI app alike.
"""

from __future__ import annotations

from typing import Any

from uamp_proto import types as ty
from uamp_proto.adapters.responses import ECHO_KEY, ResponsesRequest
from uamp_proto.adapters.responses_render import stored_response
from uamp_proto.codec import decode, unstructure
from uamp_proto.resume import ResumeError

from .event_log import EventLog, LogKey, SessionRecord

__all__ = [
    "conclude",
    "dropped_conversation",
    "load_stored",
    "response_record",
    "stored_object",
    "stored_part",
]


def stored_part(record: SessionRecord) -> dict[str, Any] | None:
    """The Responses part of a record (``None``: a UAMP session, not a response)."""
    extensions = (record.config or {}).get("extensions") or {}
    kept = extensions.get(ECHO_KEY)
    return kept if isinstance(kept, dict) else None


def response_record(
    agent: str, parsed: ResponsesRequest, history: list[dict[str, Any]]
) -> SessionRecord:
    """The record of a response being stored: ``parsed.turn`` 's messages after ``history``
    are its input; it runs until :func:`conclude`."""
    turn = parsed.turn
    config = ty.SessionConfig(
        modalities=["text"],
        instructions=turn.instructions,
        tools=turn.tools or None,
        response_format=turn.response_format,
        extensions={ECHO_KEY: {"echo": parsed.echo, "input": parsed.input_items}},
    )
    given = len(turn.messages) - len(history)
    return SessionRecord(
        agent=agent,
        config=unstructure(config),
        history=history,
        running=turn.response_id,
        input=unstructure(turn.messages[len(turn.messages) - given :]),
    )


def conclude(record: SessionRecord, output: list[ty.Message] | None) -> None:
    """The response ended: nothing runs; with ``output`` the conversation gains its input
    and that output (``None``: rolled back, no trace)."""
    if output is not None:
        record.history = [*record.history, *record.input, *unstructure(output)]
    record.running, record.input = None, []


def dropped_conversation(rid: str, record: SessionRecord) -> str | None:
    """Why stored response ``rid`` cannot be continued (``previous_response_id``): the
    event log dropped its conversation to keep within its bounds; ``None`` when it can."""
    if not record.dropped:
        return None
    return (
        f"Response {rid!r} can no longer be continued: its conversation was dropped to keep "
        "the caller's stored conversations within the server's bounds. Continue from a newer "
        "response, or send the whole conversation as input."
    )


async def load_stored(event_log: EventLog, key: LogKey) -> SessionRecord | None:
    """The record of stored response ``key`` (``None``: none, expired, or not a response)."""
    try:
        record = await event_log.load(key)
    except ResumeError:
        return None
    return record if stored_part(record) is not None else None


async def stored_object(event_log: EventLog, key: LogKey, record: SessionRecord) -> dict[str, Any]:
    """The Response object of stored response ``key``, rendered from its logged events."""
    kept = stored_part(record)
    assert kept is not None
    entries = await event_log.read(key, 0, event_log.retention.max_events)
    return stored_response(key[1], kept["echo"], [decode(e.data) for e in entries])
