"""A human in the loop where the protocol has no way to ask: the ``uamp_approve`` client tool.

OpenAI Chat Completions, OpenAI Responses, Anthropic Messages and the
Realtime API have no native form for "the agent waits for a person". They do
have client function tools, so uamp offers one, documented, opt-in:

* a client that wants to answer interrupts declares a function tool named
  ``uamp_approve`` (:func:`tool_definition` gives its declaration) among its
  tools;
* when the run pauses on an interrupt, the answer ends as any client tool
  round does (``finish_reason: "tool_calls"``, a ``function_call`` item, a
  ``tool_use`` block) with a call of ``uamp_approve`` whose **call id is the
  interrupt id** and whose arguments describe it (:func:`approve_call`):
  ``{"interrupt_id", "kind", "prompt", "tool", "arguments", "answer_schema"}``;
* the client answers with that call's tool result: ``{"approved": true}`` /
  ``{"approved": false, "reason": "..."}`` (or just ``yes`` / ``no``) for an
  approval, the value for a question (:func:`parse_results`).

A client that did not declare the tool gets the host's interrupt policy:
``deny`` (the default) refuses the call at once and the model is told so;
``wait`` keeps the run paused for an answer by id from any other transport
(UAMP, AG-UI, A2A, ACP, the playground). Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

import orjson

from .. import types as ty
from ._human import (
    Answer,
    Answered,
    AnswerError,
    Ask,
    answer_from_payload,
    answer_schema,
    describe,
    is_approval,
)

__all__ = [
    "TOOL_NAME",
    "approve_call",
    "declares",
    "parse_results",
    "tool_definition",
]

#: The client function tool that answers interrupts.
TOOL_NAME: Final = "uamp_approve"

_PARAMETERS: Final[Mapping[str, Any]] = {
    "type": "object",
    "properties": {
        "interrupt_id": {"type": "string"},
        "kind": {"type": "string", "enum": ["approval", "question"]},
        "prompt": {"type": "string"},
        "tool": {"type": "string"},
        "arguments": {"type": "object"},
        "answer_schema": {"type": "object"},
    },
    "required": ["interrupt_id", "kind", "prompt"],
}


def tool_definition() -> ty.ToolDefinition:
    """The declaration a client sends to opt in (an OpenAI function tool)."""
    return ty.ToolDefinition(
        function=ty.FunctionDefinition(
            name=TOOL_NAME,
            description=(
                "Asks the human to approve a step of the agent or to answer its question. "
                "Answer with the human's decision."
            ),
            parameters=dict(_PARAMETERS),
        )
    )


def declares(tools: Iterable[ty.ToolDefinition]) -> bool:
    """Whether the client's tools include ``uamp_approve``."""
    return any(t.function.name == TOOL_NAME for t in tools)


def approve_call(ask: Ask) -> ty.ToolInvocation:
    """The ``uamp_approve`` call standing for ``ask`` (its id is the interrupt id)."""
    args: dict[str, Any] = {"interrupt_id": ask.id, "kind": ask.kind, "prompt": describe(ask)}
    if ask.tool_name is not None:
        args["tool"] = ask.tool_name
        args["arguments"] = ask.arguments or {}
    args["answer_schema"] = answer_schema(ask)
    return ty.ToolInvocation(id=ask.id, name=TOOL_NAME, arguments=orjson.dumps(args).decode())


def _payload(content: str) -> Any:
    try:
        return orjson.loads(content)
    except orjson.JSONDecodeError:
        return content


def parse_results(messages: Iterable[ty.Message], pending: Mapping[str, Ask]) -> list[Answered]:
    """The answers in a follow-up request's tool results.

    A ``role="tool"`` message whose ``tool_call_id`` is a pending interrupt
    answers it: its content as JSON (``{"approved": ...}``, ``true``, a
    question's value) or as text (``yes`` / ``no``; a question's answer).

    Raises:
        AnswerError: a result that answers an approval with neither yes nor no.
    """
    answers: list[Answered] = []
    for message in messages:
        ask = pending.get(message.tool_call_id or "") if message.role == "tool" else None
        if ask is None:
            continue
        content = message.text
        try:
            answers.append((ask.id, answer_from_payload(ask, _payload(content))))
        except AnswerError:
            if is_approval(ask):
                raise
            answers.append((ask.id, Answer(value=content)))
    return answers
