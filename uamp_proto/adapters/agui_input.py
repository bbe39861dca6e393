"""What an AG-UI client sends: ``RunAgentInput`` validated, and the UAMP turn it asks for.

:func:`parse_run_input` reads the body (camelCase, as the TypeScript client
sends it) into a :class:`RunInput`: the conversation as UAMP messages (user
content parts, assistant tool calls, tool results; activity and reasoning
messages are UI state and left out), the client's tools, ``context`` as one
instruction text, the state, ``forwardedProps`` and ``resume``.
:func:`turn_request` makes the UAMP turn of a run (the thread id is the
session id). A bad body raises :class:`AguiError`: ``started=False`` when it
is not a RunAgentInput at all (HTTP 400), ``started=True`` when its thread and
run ids were readable (``RUN_STARTED`` then ``RUN_ERROR``). Every public name
here also imports from :mod:`uamp_proto.adapters.agui`, whose encoder turns
the run's events into AG-UI events.
"""

from __future__ import annotations

from typing import Any

import attrs

from .. import types as ty
from ..errors import UampError
from ..principal import ANONYMOUS, Principal
from ..responder import TurnRequest
from ._media import media_item

__all__ = ["AguiError", "RunInput", "parse_run_input", "turn_request"]

_ROLES = frozenset({"user", "assistant", "system", "developer", "tool", "activity", "reasoning"})
#: Keys of an input message echoed in ``MESSAGES_SNAPSHOT``.
_MESSAGE_KEYS = (
    "id",
    "role",
    "content",
    "name",
    "toolCalls",
    "toolCallId",
    "error",
    "activityType",
    "encryptedValue",
)


@attrs.define(auto_exc=True)
class AguiError(UampError):
    """A bad ``RunAgentInput``.

    Attributes:
        message: What is wrong, naming the field.
        code: A machine-readable code (``invalid_request``, ``invalid_messages`` ...).
        started: ``True`` when the thread and run ids were readable, so the
            binding answers ``RUN_STARTED`` + ``RUN_ERROR``; ``False`` when
            the body is not a RunAgentInput at all (HTTP 400).
        thread_id: The thread id, when readable.
        run_id: The run id, when readable.
    """

    message: str
    code: str = attrs.field(default="invalid_request", kw_only=True)
    started: bool = attrs.field(default=False, kw_only=True)
    thread_id: str | None = attrs.field(default=None, kw_only=True)
    run_id: str | None = attrs.field(default=None, kw_only=True)

    def body(self) -> dict[str, Any]:
        """The JSON error body of the HTTP 400 answer."""
        return {
            "error": {"message": self.message, "type": "invalid_request_error", "code": self.code}
        }


# --- input -------------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class RunInput:
    """A validated ``RunAgentInput``.

    Attributes:
        thread_id: ``threadId``.
        run_id: ``runId``.
        parent_run_id: ``parentRunId``, if given.
        has_state: Whether ``state`` was present (it may be any JSON value).
        state: ``state``.
        messages: The conversation as UAMP messages (activity and reasoning
            messages are left out).
        raw_messages: The input messages as sent (known keys only), for
            ``MESSAGES_SNAPSHOT``.
        tools: The client's tools.
        instructions: ``context`` entries as one instruction text.
        forwarded_props: ``forwardedProps``.
        resume: ``resume``: the answers to the interrupts a previous run
            ended with, as sent (read them with :func:`parse_resume`).
        raw: The whole ``RunAgentInput`` as sent (``RUN_STARTED.input``).
    """

    thread_id: str
    run_id: str
    parent_run_id: str | None = None
    has_state: bool = False
    state: Any = None
    messages: list[ty.Message] = attrs.field(factory=list)
    raw_messages: list[dict[str, Any]] = attrs.field(factory=list)
    tools: list[ty.ToolDefinition] = attrs.field(factory=list)
    instructions: str | None = None
    forwarded_props: Any = None
    resume: list[dict[str, Any]] = attrs.field(factory=list)
    raw: dict[str, Any] = attrs.field(factory=dict)


def _text_of(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    return ""


def _media_part(part: dict[str, Any], where: str, fail: Any) -> ty.ContentItem:
    kind = part["type"]
    source = part.get("source")
    if not isinstance(source, dict) or source.get("type") not in ("data", "url", "file"):
        raise fail(f"'{where}.source' must be an object with type data, url or file.")
    value = source.get("value")
    if not isinstance(value, str):
        raise fail(f"'{where}.source.value' must be a string.")
    mime = source.get("mimeType")
    mime = mime if isinstance(mime, str) else None
    media: ty.Media = value if source["type"] == "data" else ty.MediaURL(url=value)
    meta = part.get("metadata")
    filename = meta.get("filename") if isinstance(meta, dict) else None
    return media_item(kind, media, mime, filename if isinstance(filename, str) else "document")


def _user_content(content: object, where: str, fail: Any) -> ty.Message:
    if isinstance(content, str):
        return ty.Message(role="user", content=content)
    if not isinstance(content, list):
        raise fail(f"'{where}.content' must be a string or an array of parts.")
    items: list[ty.ContentItem] = []
    for i, part in enumerate(content):
        at = f"{where}.content[{i}]"
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise fail(f"'{at}' must be an object with a type.")
        if part["type"] == "text":
            if not isinstance(part.get("text"), str):
                raise fail(f"'{at}.text' must be a string.")
            items.append(ty.TextContent(text=part["text"]))
        elif part["type"] in ("image", "audio", "video", "document"):
            items.append(_media_part(part, at, fail))
        else:
            raise fail(f"'{at}.type' {part['type']!r} is not a content part type.")
    return ty.Message(role="user", content_items=items)


def _message(obj: object, where: str, fail: Any) -> ty.Message | None:
    if not isinstance(obj, dict):
        raise fail(f"'{where}' must be an object.")
    role = obj.get("role")
    if type(role) is not str or role not in _ROLES:
        raise fail(f"'{where}.role' must be one of {', '.join(sorted(_ROLES))}.")
    if not isinstance(obj.get("id"), str):
        raise fail(f"'{where}.id' must be a string.")
    content = obj.get("content")
    if role == "user":
        return _user_content(content, where, fail)
    if role in ("system", "developer"):
        if not isinstance(content, str):
            raise fail(f"'{where}.content' must be a string.")
        return ty.Message(role="system", content=content)
    if role == "assistant":
        if content is not None and not isinstance(content, str):
            raise fail(f"'{where}.content' must be a string.")
        calls: list[ty.ToolInvocation] = []
        raw_calls = obj.get("toolCalls")
        if raw_calls is not None and not isinstance(raw_calls, list):
            raise fail(f"'{where}.toolCalls' must be an array.")
        for i, call in enumerate(raw_calls or []):
            fn = call.get("function") if isinstance(call, dict) else None
            if (
                not isinstance(call, dict)
                or not isinstance(call.get("id"), str)
                or not isinstance(fn, dict)
                or not isinstance(fn.get("name"), str)
                or not isinstance(fn.get("arguments"), str)
            ):
                raise fail(
                    f"'{where}.toolCalls[{i}]' must be "
                    '{"id", "type": "function", "function": {"name", "arguments"}}.'
                )
            calls.append(
                ty.ToolInvocation(id=call["id"], name=fn["name"], arguments=fn["arguments"])
            )
        return ty.Message(role="assistant", content=content, tool_calls=calls or None)
    if role == "tool":
        if not isinstance(obj.get("toolCallId"), str):
            raise fail(f"'{where}.toolCallId' must be a string.")
        if not isinstance(content, str | list):
            raise fail(f"'{where}.content' must be a string or an array of parts.")
        return ty.Message(role="tool", tool_call_id=obj["toolCallId"], content=_text_of(content))
    return None  # activity and reasoning messages are UI state, not conversation


def parse_run_input(obj: object) -> RunInput:
    """Validate a ``RunAgentInput`` body (already JSON-decoded).

    Raises:
        AguiError: see the class; ``started`` tells which answer is owed.
    """
    if not isinstance(obj, dict):
        raise AguiError("The body must be a RunAgentInput JSON object.")
    thread_id, run_id = obj.get("threadId"), obj.get("runId")
    if not isinstance(thread_id, str) or not thread_id:
        raise AguiError("'threadId' is required and must be a non-empty string.")
    if not isinstance(run_id, str) or not run_id:
        raise AguiError("'runId' is required and must be a non-empty string.")

    def fail(message: str, code: str = "invalid_input") -> AguiError:
        return AguiError(message, code=code, started=True, thread_id=thread_id, run_id=run_id)

    parent = obj.get("parentRunId")
    if parent is not None and not isinstance(parent, str):
        raise fail("'parentRunId' must be a string.")
    raw = obj.get("messages", [])
    if not isinstance(raw, list):
        raise fail("'messages' must be an array.")
    messages: list[ty.Message] = []
    raw_messages: list[dict[str, Any]] = []
    for i, m in enumerate(raw):
        converted = _message(m, f"messages[{i}]", fail)
        if converted is not None:
            messages.append(converted)
        raw_messages.append({k: m[k] for k in _MESSAGE_KEYS if k in m and m[k] is not None})
    tools: list[ty.ToolDefinition] = []
    raw_tools = obj.get("tools") or []
    if not isinstance(raw_tools, list):
        raise fail("'tools' must be an array.")
    for i, tool in enumerate(raw_tools):
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            raise fail(f"'tools[{i}]' must be an object with a string 'name'.")
        params = tool.get("parameters")
        if params is not None and not isinstance(params, dict):
            raise fail(f"'tools[{i}].parameters' must be a JSON Schema object.")
        desc = tool.get("description")
        tools.append(
            ty.ToolDefinition(
                function=ty.FunctionDefinition(
                    name=tool["name"],
                    description=desc if isinstance(desc, str) else None,
                    parameters=params,
                )
            )
        )
    context = obj.get("context") or []
    if not isinstance(context, list):
        raise fail("'context' must be an array.")
    lines: list[str] = []
    for i, entry in enumerate(context):
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("description"), str)
            or not isinstance(entry.get("value"), str)
        ):
            raise fail(f'\'context[{i}]\' must be {{"description": str, "value": str}}.')
        lines.append(f"- {entry['description']}: {entry['value']}")
    instructions = "Context from the application:\n" + "\n".join(lines) if lines else None
    resume = obj.get("resume") or []
    if not isinstance(resume, list) or not all(isinstance(e, dict) for e in resume):
        raise fail("'resume' must be an array of objects.")
    return RunInput(
        thread_id=thread_id,
        run_id=run_id,
        parent_run_id=parent,
        has_state="state" in obj,
        state=obj.get("state"),
        messages=messages,
        raw_messages=raw_messages,
        tools=tools,
        instructions=instructions,
        forwarded_props=obj.get("forwardedProps"),
        resume=resume,
        raw=dict(obj),
    )


def turn_request(
    run: RunInput,
    *,
    agent: str,
    response_id: str,
    payment_token: str | None = None,
    principal: Principal = ANONYMOUS,
) -> TurnRequest:
    """The UAMP turn for a run: the thread id is the session id.

    ``metadata`` carries ``agui_state``, ``agui_run_id`` and
    ``forwarded_props``; a ``forwardedProps.tool_choice`` is passed on.
    """
    props = run.forwarded_props if isinstance(run.forwarded_props, dict) else {}
    choice = props.get("tool_choice")
    return TurnRequest(
        agent=agent,
        session_id=run.thread_id,
        response_id=response_id,
        messages=list(run.messages),
        instructions=run.instructions,
        tools=list(run.tools),
        tool_choice=choice if isinstance(choice, str | dict) else None,
        payment_token=payment_token,
        principal=principal,
        metadata={
            "agui_state": run.state,
            "agui_run_id": run.run_id,
            "forwarded_props": run.forwarded_props,
        },
    )
