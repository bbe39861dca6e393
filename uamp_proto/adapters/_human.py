"""A human in the loop, as every adapter sees it: one pending question, one answer.

The runtime pauses a run on an *interrupt* (a tool that needs approval, or a
step that asks the human a question); the host keeps it pending until an
answer comes from any transport. Each protocol asks and answers in its own
native way (AG-UI's interrupt outcome, A2A's ``input-required`` task, ACP's
``session/request_permission``, the AI SDK's tool approval, MCP's
elicitation ...). The adapters translate between those forms and the two
records of :mod:`uamp_proto.interrupts`:

* :class:`Ask` (:class:`uamp_proto.interrupts.Interrupt`) -- what the
  adapter renders: the interrupt's id, whether it is an approval or a
  question, the prompt, the tool call it concerns, the answer's JSON Schema,
  when it expires;
* :class:`~uamp_proto.interrupts.Answer` -- what the adapter parses back, paired with the id it
  answers (:data:`Answered`): approved or denied (an approval, maybe with
  edited arguments), or a value (a question). An interrupt the human
  dismissed (:func:`dismissed`) is a denial, or for a question an expiry.

:func:`approval_word` reads a plain-text yes/no, for protocols whose only
answer channel is text; :func:`rfc3339` writes an expiry the way the
protocols want it. Nothing here does I/O or reads the clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import orjson

from ..errors import UampError
from ..events import InterruptRequest
from ..interrupts import APPROVAL, QUESTION, Answer
from ..interrupts import Interrupt as Ask

__all__ = [
    "APPROVAL",
    "APPROVAL_SCHEMA",
    "DISMISSED",
    "QUESTION",
    "Answer",
    "AnswerError",
    "Answered",
    "Ask",
    "answer_from_payload",
    "answer_schema",
    "approval_word",
    "ask_of",
    "describe",
    "dismissed",
    "is_approval",
    "rfc3339",
]

#: The JSON Schema of an approval's answer, where a protocol carries one.
APPROVAL_SCHEMA: Final[Mapping[str, Any]] = {
    "type": "object",
    "properties": {
        "approved": {"type": "boolean", "description": "Run the tool call (true) or not."},
        "arguments": {"type": "object", "description": "Edited arguments to run it with."},
        "reason": {"type": "string", "description": "Why (shown to the model on a denial)."},
    },
    "required": ["approved"],
}

_YES: Final = frozenset(
    {"y", "yes", "approve", "approved", "allow", "ok", "okay", "accept", "true"}
)
_NO: Final = frozenset({"n", "no", "deny", "denied", "reject", "decline", "refuse", "false"})


class AnswerError(UampError):
    """An answer that answers nothing pending, or not in the form asked for.

    Adapters convert it into their protocol's own error at the boundary.
    """


#: An answer and the interrupt id it answers.
Answered = tuple[str, Answer]

#: The reason given for an interrupt the human dismissed without answering.
DISMISSED: Final = "dismissed without an answer"


def is_approval(ask: Ask) -> bool:
    """Whether ``ask`` waits on an approval (else on a question's answer)."""
    return ask.kind == APPROVAL


def answer_schema(ask: Ask) -> dict[str, Any]:
    """The JSON Schema of an answer (any JSON value for a question without one)."""
    if is_approval(ask):
        return dict(APPROVAL_SCHEMA)
    return dict(ask.schema) if ask.schema is not None else {}


def describe(ask: Ask) -> str:
    """One line for a human: the prompt, or the tool call to approve."""
    if ask.prompt:
        return ask.prompt
    if ask.tool_name is not None:
        args = orjson.dumps(ask.arguments or {}).decode()
        return f"Allow the agent to run {ask.tool_name}({args})?"
    return "The agent needs an answer."


def ask_of(event: InterruptRequest) -> Ask:
    """The interrupt an ``interrupt.request`` event shows (what a transport renders)."""
    return Ask(
        id=event.interrupt_id,
        kind=event.kind,
        key=event.call_id or event.interrupt_id,
        prompt=event.prompt,
        tool_name=event.tool_name,
        call_id=event.call_id,
        arguments=event.arguments,
        schema=event.schema,
        expires_at=event.expires_at,
        step_id=event.step_id,
        response_id=event.response_id,
    )


def dismissed(ask: Ask) -> Answer:
    """The answer of an interrupt the human dismissed (an approval is denied)."""
    if is_approval(ask):
        return Answer(approved=False, reason=DISMISSED)
    return Answer(expired=True, reason=DISMISSED)


def rfc3339(seconds: float) -> str:
    """``seconds`` since the epoch as an RFC 3339 UTC time (``2026-12-06T08:30:00Z``)."""
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    # Civil date from days since 1970-01-01 (the proleptic Gregorian calendar).
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    year = yoe + era * 400 + (month <= 2)
    hour, rest = divmod(rest, 3600)
    minute, second = divmod(rest, 60)
    return f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}Z"


def approval_word(text: str) -> bool | None:
    """``True``/``False`` for a plain yes or no (``"approve"``, ``"deny"`` ...), else ``None``."""
    word = text.strip().strip(".!").lower()
    if word in _YES:
        return True
    if word in _NO:
        return False
    return None


def answer_from_payload(ask: Ask, payload: Any, *, reason: str | None = None) -> Answer:
    """Read one answer payload for ``ask`` (the forms every JSON channel shares).

    An approval takes a boolean, a yes/no word, or an object
    ``{"approved": bool, "arguments"?: object, "reason"?: str}``
    (``editedArgs`` is accepted for ``arguments``: AG-UI's name). A question
    takes any JSON value but ``null``.

    Raises:
        AnswerError: an approval answer that says neither yes nor no, edited
            arguments that are not an object, a question answered ``null``.
    """
    if not is_approval(ask):
        if payload is None:
            raise AnswerError(f"Answer {ask.id!r} with a value.")
        return Answer(value=payload, reason=reason)
    if isinstance(payload, bool):
        return Answer(approved=payload, reason=reason)
    if isinstance(payload, str):
        word = approval_word(payload)
        if word is None:
            raise AnswerError(f"Answer {ask.id!r} with approved true or false, not {payload!r}.")
        return Answer(approved=word, reason=reason)
    if not isinstance(payload, Mapping) or not isinstance(payload.get("approved"), bool):
        raise AnswerError(f'Answer {ask.id!r} with {{"approved": true|false}}.')
    edited = payload.get("arguments", payload.get("editedArgs"))
    if edited is not None and not isinstance(edited, Mapping):
        raise AnswerError(f"The edited arguments for {ask.id!r} must be a JSON object.")
    said = payload.get("reason")
    return Answer(
        approved=payload["approved"],
        arguments=dict(edited) if edited is not None else None,
        reason=said if isinstance(said, str) else reason,
    )
