"""A human in the loop over A2A: the ``input-required`` task and the message that answers it.

A2A has one native way to wait for the client: the task's state
``input-required`` with a status message saying what is needed. For an
interrupt (a tool call to approve, a question for the human) that message
has a text part a person can read and a data part a program can act on::

    {"interrupts": [{"id": "int_1", "kind": "approval", "prompt": "...",
                     "tool": "add", "arguments": {"a": 2, "b": 3},
                     "call_id": "call_1", "answer_schema": {...},
                     "expires_at": "2026-..."}]}

The client answers with a message on the same task (``taskId``): a data part
``{"interrupt_id": "int_1", "approved": true}`` per interrupt (or a list of
them, or ``{"interrupt_answers": [...]}``; ``"arguments"`` edits an approved
call, ``"value"`` answers a question), or, with exactly one interrupt
pending, plain text ("yes" / "no" for an approval, the answer itself for a
question). :func:`parse_answers` reads either form. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._human import (
    Answer,
    Answered,
    AnswerError,
    Ask,
    answer_from_payload,
    answer_schema,
    approval_word,
    describe,
    is_approval,
    rfc3339,
)
from .a2a_parts import data_entries

__all__ = ["ask_to_json", "interrupt_message", "parse_answers"]


def ask_to_json(ask: Ask) -> dict[str, Any]:
    """The data-part form of one interrupt (also how a task record keeps it)."""
    out: dict[str, Any] = {"id": ask.id, "kind": ask.kind, "prompt": describe(ask)}
    if ask.tool_name is not None:
        out["tool"] = ask.tool_name
        out["arguments"] = ask.arguments or {}
    if ask.call_id is not None:
        out["call_id"] = ask.call_id
    out["answer_schema"] = answer_schema(ask)
    if ask.expires_at is not None:
        out["expires_at"] = rfc3339(ask.expires_at)
    return out


def interrupt_message(asks: Sequence[Ask]) -> tuple[str, dict[str, Any]]:
    """The text and the data payload of an ``input-required`` status message."""
    lines = [describe(ask) for ask in asks]
    if len(asks) == 1:
        how = (
            'Reply "yes" or "no", or with a data part '
            '{"interrupt_id": ..., "approved": true|false}.'
            if is_approval(asks[0])
            else 'Reply with the answer, or a data part {"interrupt_id": ..., "value": ...}.'
        )
    else:
        how = (
            'Reply with one data part per question: {"interrupt_id": ..., "approved": ...} '
            'or {"interrupt_id": ..., "value": ...}.'
        )
    return "\n".join([*lines, how]), {"interrupts": [ask_to_json(a) for a in asks]}


def parse_answers(data: list[Any], text: str, pending: Sequence[Ask]) -> list[Answered]:
    """The answers a resuming message (its data parts and text) gives to ``pending``.

    Every pending interrupt must be answered; an answer naming an interrupt
    that is not pending is refused (exactly as an unknown one).

    Raises:
        AnswerError: what is missing or wrong, in words for the client.
    """
    by_id = {ask.id: ask for ask in pending}
    answers: dict[str, Answer] = {}
    for entry in data_entries(data, "interrupt_answers", "interrupt_id"):
        iid = entry["interrupt_id"]
        ask = by_id.get(iid) if isinstance(iid, str) else None
        if ask is None:
            raise AnswerError(f"{iid!r} names no interrupt this task waits on.")
        if is_approval(ask):
            answers[ask.id] = answer_from_payload(ask, entry)
        else:
            answers[ask.id] = answer_from_payload(ask, entry.get("value"))
    if not answers and len(pending) == 1 and text.strip():
        ask = pending[0]
        if is_approval(ask):
            word = approval_word(text)
            if word is None:
                what = ask.tool_name or "a step"
                raise AnswerError(f'The task waits for approval of {what}: reply "yes" or "no".')
            answers[ask.id] = Answer(approved=word)
        else:
            answers[ask.id] = Answer(value=text)
    missing = [ask.id for ask in pending if ask.id not in answers]
    if missing:
        raise AnswerError(
            "The task is waiting for a human: answer "
            + ", ".join(missing)
            + ' with a data part {"interrupt_id": ..., "approved": ...} (or "value").'
        )
    return [(ask.id, answers[ask.id]) for ask in pending]
