"""Vercel AI SDK UI message stream <-> UAMP, sans-IO (the npm ``ai`` package, 5.x to 7.x).

Theory of operation
-------------------
A chat UI built on the AI SDK (``useChat``, ``Chat``) sends its whole
conversation with ``DefaultChatTransport``: ``POST {api}`` with the JSON
``{"id": chatId, "messages": [UIMessage...], "trigger", "messageId", ...}``
(plus whatever ``body`` the app adds) and reads a *UI message stream*: SSE
whose ``data:`` lines are JSON chunks, ended by ``data: [DONE]``, under the
header ``x-vercel-ai-ui-message-stream: v1``.

:func:`parse_chat_request` validates the body into a :class:`ChatRequest`:
the UI messages (``parts`` of type ``text``, ``file``, ``reasoning``,
``step-start``, ``tool-{name}`` and ``dynamic-tool``) become UAMP messages in
conversation order -- each step's text and tool calls one assistant message,
its tool outputs ``role="tool"`` messages after it. A conversation whose last
message is the assistant's (a client tool's output was added to it) is a
*continuation*: the answer goes on in that same message, under its id.

:class:`StreamEncoder` turns the answer's UAMP events into chunks. It is a
small state machine (phases in :data:`PHASES`) that tracks the open step,
text part, reasoning part and tool inputs, and closes each before something
that cannot interleave with it, so every ``*-start`` has its ``*-end``:

========================================  =====================================================
UAMP event                                UI message chunks
========================================  =====================================================
(answer start)                            ``start`` (``messageId``)
``progress`` stage ``step_start``         ``start-step`` (the open step finished first)
``progress`` stage ``step_end``           ``finish-step``
``response.delta`` text                   ``text-start`` (once) + ``text-delta``
``thinking``                              ``reasoning-start`` (once) + ``reasoning-delta``
``response.delta`` tool_call fragments    ``tool-input-start`` (once) + ``tool-input-delta``;
                                          ``tool-input-available`` once the input is complete
                                          (the next event that is not one of its fragments)
``response.delta`` tool_result            ``tool-output-available`` (``tool-output-error``
                                          when its status is ``failed``)
``tool.call`` (client tool)               ``tool-input-available``; the answer then finishes
                                          with ``finishReason: "tool-calls"``
(a tool call waiting for approval)        ``tool-approval-request`` (see
                                          :meth:`StreamEncoder.request_approval`); answered by
                                          the next request's tool part ``approval``
``usage.delta``                           summed into ``finish.messageMetadata.usage``
(answer end)                              ``finish-step`` (if open), ``finish``
(failure)                                 ``error``, ``finish`` (``finishReason: "error"``)
========================================  =====================================================

Content that comes with no step open opens one (``start-step``), and text,
reasoning or a new tool call after a tool's output starts a new step: the
SDK's ``lastAssistantMessageIsCompleteWithToolCalls`` looks at the last step
only, so an answer whose final text shared a step with its tool calls would
be sent again by ``useChat``'s automatic resend, forever.

Tools: a call to a tool the client declared (``body.tools``) is a static
``tool-{name}`` part the client runs (``onToolCall``, then
``addToolOutput``); any other call is the agent's own, run on the server: a
``dynamic-tool`` part marked ``providerExecuted`` (the client neither runs it
nor waits for it).

Resume (``resumeStreamIsReplay``, the SDK's default) replays an answer from
its ``start`` chunk; for a continuation, the parts the message had before
come back as chunks too (:func:`replay_chunks`), so the replayed message is
whole.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, Final

import attrs
import orjson

from .. import events as ev
from .. import types as ty
from ..errors import LocalProtocolError, UampError
from ..ids import IdSource
from ..outcome import ResponseOutcome
from ..payment import balance_fields
from ..principal import ANONYMOUS, Principal
from ..responder import TurnRequest
from ..response import add_usage
from ._human import Answer, Answered, Ask
from ._media import media_item
from ._tools import ToolFormError, parse_tool_choice, parse_tools

__all__ = [
    "DONE",
    "FINISH_REASONS",
    "HEADERS",
    "MAX_CHAT_ID",
    "PHASES",
    "AiSdkError",
    "ChatRequest",
    "Phase",
    "StreamEncoder",
    "frame",
    "parse_approval_responses",
    "parse_chat_request",
    "replay_chunks",
    "turn_request",
    "usage_metadata",
]

#: The head of a UI message stream (``UI_MESSAGE_STREAM_HEADERS`` in ``ai``).
HEADERS: Final = [
    ("content-type", "text/event-stream"),
    ("cache-control", "no-cache"),
    ("x-vercel-ai-ui-message-stream", "v1"),
    ("x-accel-buffering", "no"),
]
#: The stream's last event.
DONE: Final = b"data: [DONE]\n\n"
#: The longest chat id taken (it names a URL path segment and a stored log).
MAX_CHAT_ID: Final = 256
#: ``finish.finishReason`` values the SDK accepts.
FINISH_REASONS: Final = frozenset(
    {"stop", "length", "content-filter", "tool-calls", "error", "interrupted", "other"}
)
#: Keys of the request body the SDK itself sends; the rest is the app's ``body``.
_OWN_KEYS: Final = frozenset({"id", "messages", "trigger", "messageId"})
_ROLES: Final = frozenset({"system", "user", "assistant"})
_TRIGGERS: Final = frozenset({"submit-message", "regenerate-message"})
#: The ``progress`` stages the agent runtime marks its model steps with.
_STEP_START: Final = "step_start"
_STEP_END: Final = "step_end"


def frame(chunk: Mapping[str, Any]) -> bytes:
    """One chunk as its SSE event."""
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


@attrs.define(auto_exc=True)
class AiSdkError(UampError):
    """A request body that is not what ``DefaultChatTransport`` sends (answered 400).

    Attributes:
        message: What is wrong, naming the field.
        code: A machine-readable code.
    """

    message: str
    code: str = attrs.field(default="invalid_request", kw_only=True)


# --- the request ------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class ChatRequest:
    """A validated chat request.

    Attributes:
        chat_id: The chat's ``id`` (the UAMP session of its turns).
        messages: The conversation as UAMP messages.
        trigger: ``submit-message`` or ``regenerate-message``.
        message_id: The request's ``messageId`` (the message regenerated or
            edited), if any.
        continued: The last message when it is the assistant's: the answer
            goes on in it (its ``id`` is the answer's message id).
        tools: The client's tools (``body.tools``, OpenAI function tools).
        tool_choice: ``body.tool_choice``, if given.
        extra: The rest of the body (what the app added).
    """

    chat_id: str
    messages: list[ty.Message]
    trigger: str = "submit-message"
    message_id: str | None = None
    continued: dict[str, Any] | None = None
    tools: list[ty.ToolDefinition] = attrs.field(factory=list)
    tool_choice: str | dict[str, Any] | None = None
    extra: dict[str, Any] = attrs.field(factory=dict)

    @property
    def client_tools(self) -> frozenset[str]:
        """The names of the client's tools."""
        return frozenset(t.function.name for t in self.tools)


def _tool_name(part: Mapping[str, Any]) -> str | None:
    """The tool a ``tool-{name}`` or ``dynamic-tool`` part is of (``None``: not a tool part)."""
    kind = part["type"]
    if kind == "dynamic-tool":
        name = part.get("toolName")
        return name if isinstance(name, str) else None
    if kind.startswith("tool-") and len(kind) > 5:
        return str(kind[5:])
    return None


def _as_text(value: object) -> str:
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def _file_item(part: Mapping[str, Any], where: str) -> ty.ContentItem:
    url, media_type = part.get("url"), part.get("mediaType")
    if not isinstance(url, str) or not isinstance(media_type, str):
        raise AiSdkError(f"'{where}' needs a string 'url' and 'mediaType'.")
    filename = part.get("filename")
    media: ty.Media = ty.MediaURL(url=url)
    if url.startswith("data:") and ";base64," in url[:200]:
        media = url.split(";base64,", 1)[1]
    kind = media_type.split("/", 1)[0]
    return media_item(kind, media, media_type, filename if isinstance(filename, str) else "file")


class _Steps:
    """Folds an assistant message's parts into UAMP messages, step by step."""

    def __init__(self) -> None:
        self.out: list[ty.Message] = []
        self.text: list[str] = []
        self.calls: list[ty.ToolInvocation] = []
        self.results: list[ty.Message] = []

    def flush(self) -> None:
        if self.text or self.calls:
            self.out.append(
                ty.Message(
                    role="assistant",
                    content="".join(self.text) or None,
                    tool_calls=list(self.calls) or None,
                )
            )
        self.out.extend(self.results)
        self.text, self.calls, self.results = [], [], []

    def add_text(self, text: str) -> None:
        if self.results:
            self.flush()  # text after a tool's output is the next step's
        self.text.append(text)

    def add_tool(self, part: Mapping[str, Any], name: str, where: str) -> None:
        call_id = part.get("toolCallId")
        if not isinstance(call_id, str):
            raise AiSdkError(f"'{where}.toolCallId' must be a string.")
        state = part.get("state")
        if state == "output-available":
            result = _as_text(part.get("output"))
        elif state == "output-error":
            result = f"Error: {_as_text(part.get('errorText') or 'the tool failed')}"
        elif state == "output-denied":
            result = "Error: the user denied this tool call."
        else:
            return  # no output (yet): nothing the model could be shown
        if self.results and not any(c.id == call_id for c in self.calls):
            self.flush()  # a call after another call's output: the next step
        arguments = part.get("input")
        self.calls.append(
            ty.ToolInvocation(
                id=call_id, name=name, arguments=_as_text({} if arguments is None else arguments)
            )
        )
        self.results.append(ty.Message(role="tool", tool_call_id=call_id, content=result))


def _parts(message: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
    parts = message.get("parts")
    if not isinstance(parts, list):
        raise AiSdkError(f"'{where}.parts' must be an array.")
    for i, part in enumerate(parts):
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise AiSdkError(f"'{where}.parts[{i}]' must be an object with a string 'type'.")
    return parts


def _message(message: object, where: str) -> list[ty.Message]:
    """The UAMP messages of one UI message."""
    if not isinstance(message, dict):
        raise AiSdkError(f"'{where}' must be an object.")
    role = message.get("role")
    if type(role) is not str or role not in _ROLES:
        raise AiSdkError(f"'{where}.role' must be one of {', '.join(sorted(_ROLES))}.")
    if not isinstance(message.get("id"), str):
        raise AiSdkError(f"'{where}.id' must be a string.")
    parts = _parts(message, where)
    if role == "assistant":
        steps = _Steps()
        for i, part in enumerate(parts):
            kind = part["type"]
            if kind == "step-start":
                steps.flush()
            elif kind == "text":
                text = part.get("text")
                if not isinstance(text, str):
                    raise AiSdkError(f"'{where}.parts[{i}].text' must be a string.")
                steps.add_text(text)
            else:
                name = _tool_name(part)
                if name is not None:
                    steps.add_tool(part, name, f"{where}.parts[{i}]")
        steps.flush()
        return steps.out
    items: list[ty.ContentItem] = []
    for i, part in enumerate(parts):
        kind = part["type"]
        if kind == "text":
            text = part.get("text")
            if not isinstance(text, str):
                raise AiSdkError(f"'{where}.parts[{i}].text' must be a string.")
            items.append(ty.TextContent(text=text))
        elif kind == "file" and role == "user":
            items.append(_file_item(part, f"{where}.parts[{i}]"))
    if all(isinstance(item, ty.TextContent) for item in items):
        return [ty.Message(role=role, content=ty.Message(role=role, content_items=items).text)]
    return [ty.Message(role="user", content_items=items)]


def parse_chat_request(obj: object) -> ChatRequest:
    """Validate the body ``DefaultChatTransport`` POSTs (already JSON-decoded).

    Raises:
        AiSdkError: the body is not a chat request, naming the field.
    """
    if not isinstance(obj, dict):
        raise AiSdkError("The body must be a JSON object, as DefaultChatTransport sends it.")
    chat_id = obj.get("id")
    if not isinstance(chat_id, str) or not chat_id or len(chat_id) > MAX_CHAT_ID:
        raise AiSdkError(f"'id' (the chat id) must be a string of 1 to {MAX_CHAT_ID} characters.")
    raw = obj.get("messages")
    if not isinstance(raw, list):
        raise AiSdkError("'messages' must be an array of UI messages.")
    trigger = obj.get("trigger", "submit-message")
    if type(trigger) is not str or trigger not in _TRIGGERS:
        raise AiSdkError(f"'trigger' must be one of {', '.join(sorted(_TRIGGERS))}.")
    message_id = obj.get("messageId")
    if message_id is not None and not isinstance(message_id, str):
        raise AiSdkError("'messageId' must be a string.")
    messages: list[ty.Message] = []
    for i, message in enumerate(raw):
        messages.extend(_message(message, f"messages[{i}]"))
    last = raw[-1] if raw else None
    continued = last if isinstance(last, dict) and last.get("role") == "assistant" else None
    try:
        tools = parse_tools(obj.get("tools"), "tools")
        choice = parse_tool_choice(obj.get("tool_choice"), "tool_choice", names=None)
    except ToolFormError as exc:
        raise AiSdkError(exc.message, code=exc.code) from None
    return ChatRequest(
        chat_id=chat_id,
        messages=messages,
        trigger=trigger,
        message_id=message_id,
        continued=continued,
        tools=tools,
        tool_choice=choice,
        extra={k: v for k, v in obj.items() if k not in _OWN_KEYS},
    )


def turn_request(
    chat: ChatRequest,
    *,
    agent: str,
    response_id: str,
    payment_token: str | None = None,
    principal: Principal = ANONYMOUS,
) -> TurnRequest:
    """The UAMP turn of a chat request: the chat id is the session id.

    ``metadata["ai_sdk_body"]`` holds what the app added to the body.
    """
    return TurnRequest(
        agent=agent,
        session_id=chat.chat_id,
        response_id=response_id,
        messages=list(chat.messages),
        tools=list(chat.tools),
        tool_choice=chat.tool_choice,
        payment_token=payment_token,
        principal=principal,
        metadata={"ai_sdk_body": chat.extra, "ai_sdk_trigger": chat.trigger},
    )


# --- replaying a continued message -----------------------------------------------------------


def replay_chunks(message: Mapping[str, Any], ids: IdSource) -> list[dict[str, Any]]:
    """Chunks that rebuild ``message`` 's parts (text, reasoning, tools, steps), for a replay.

    Parts of other kinds (files, sources, data) are left out.
    """
    out: list[dict[str, Any]] = []
    step = False
    for part in message.get("parts") or ():
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            continue
        kind = part["type"]
        if kind == "step-start":
            if step:
                out.append({"type": "finish-step"})
            out.append({"type": "start-step"})
            step = True
        elif kind in ("text", "reasoning") and isinstance(part.get("text"), str):
            pid = ids("txt" if kind == "text" else "rsn")
            out += [
                {"type": f"{kind}-start", "id": pid},
                {"type": f"{kind}-delta", "id": pid, "delta": part["text"]},
                {"type": f"{kind}-end", "id": pid},
            ]
        else:
            out += _replay_tool(part)
    if step:
        out.append({"type": "finish-step"})
    return out


def _replay_tool(part: Mapping[str, Any]) -> list[dict[str, Any]]:
    name, call_id = _tool_name(part), part.get("toolCallId")
    if name is None or not isinstance(call_id, str):
        return []
    flags: dict[str, Any] = {}
    if part["type"] == "dynamic-tool":
        flags["dynamic"] = True
    if part.get("providerExecuted") is True:
        flags["providerExecuted"] = True
    call = {"toolCallId": call_id, "toolName": name, **flags}
    out: list[dict[str, Any]] = [
        {"type": "tool-input-available", **call, "input": part.get("input")}
    ]
    state = part.get("state")
    if state == "output-available":
        out.append(
            {
                "type": "tool-output-available",
                "toolCallId": call_id,
                "output": part.get("output"),
                **flags,
            }
        )
    elif state == "output-error":
        text = part.get("errorText")
        out.append(
            {
                "type": "tool-output-error",
                "toolCallId": call_id,
                "errorText": text if isinstance(text, str) else "the tool failed",
                **flags,
            }
        )
    return out


# --- the answer's stream ------------------------------------------------------------------------


class Phase(enum.Enum):
    """Where an answer's stream is."""

    READY = "ready"
    STREAMING = "streaming"
    FINISHED = "finished"


#: ``{(phase, input): new phase}``; a missing key is a local protocol error.
PHASES: dict[tuple[Phase, str], Phase] = {
    (Phase.READY, "start"): Phase.STREAMING,
    (Phase.STREAMING, "event"): Phase.STREAMING,
    (Phase.STREAMING, "finish"): Phase.FINISHED,
    (Phase.STREAMING, "error"): Phase.FINISHED,
}

Chunks = list[dict[str, Any]]


def usage_metadata(usage: ty.UsageStats | None) -> dict[str, int] | None:
    """UAMP usage in the SDK's ``LanguageModelUsage`` names, or ``None`` for none."""
    if usage is None or (usage.input_tokens is None and usage.output_tokens is None):
        return None
    out = {
        "inputTokens": usage.input_tokens or 0,
        "outputTokens": usage.output_tokens or 0,
        "totalTokens": usage.total_tokens
        if usage.total_tokens is not None
        else (usage.input_tokens or 0) + (usage.output_tokens or 0),
    }
    if usage.cached_tokens is not None:
        out["cachedInputTokens"] = usage.cached_tokens
    return out


@attrs.define
class _Input:
    """A tool call whose input is streaming."""

    name: str
    client: bool
    text: list[str] = attrs.field(factory=list)


class StreamEncoder:
    """UAMP events of one answer -> UI message chunks; see the module docstring.

    Use: :meth:`start`, then :meth:`feed` per event, then :meth:`finish` or
    :meth:`error`.

    Args:
        message_id: The assistant message's id (the continued message's on a
            continuation).
        ids: Makes the ids of text and reasoning parts.
        client_tools: The names of the tools the client runs.
    """

    def __init__(
        self, message_id: str, ids: IdSource, *, client_tools: frozenset[str] = frozenset()
    ) -> None:
        self.message_id = message_id
        self.phase = Phase.READY
        self._ids = ids
        self._client_tools = client_tools
        self._step = False
        self._after_output = False
        self._text: str | None = None
        #: ``data: {"type":"text-delta","id":<open text part>,"delta":`` while one is open.
        self._text_head: bytes | None = None
        self._reasoning: str | None = None
        self._inputs: dict[str, _Input] = {}
        self._known: dict[str, bool] = {}  # every call seen: id -> is a client call
        self._usage: ty.UsageStats | None = None
        #: Client tool calls the answer ended waiting for.
        self.pending: list[str] = []

    def _move(self, what: str) -> None:
        new = PHASES.get((self.phase, what))
        if new is None:
            raise LocalProtocolError(
                f"cannot {what} an answer that is {self.phase.value}",
                code="invalid_ai_sdk_sequence",
            )
        self.phase = new

    @property
    def usage(self) -> ty.UsageStats | None:
        """The usage summed so far."""
        return self._usage

    def start(self, metadata: Mapping[str, Any] | None = None) -> Chunks:
        """The ``start`` chunk."""
        self._move("start")
        chunk: dict[str, Any] = {"type": "start", "messageId": self.message_id}
        if metadata:
            chunk["messageMetadata"] = dict(metadata)
        return [chunk]

    # --- parts ---------------------------------------------------------------

    def _close_text(self) -> Chunks:
        if self._text is None:
            return []
        pid, self._text = self._text, None
        self._text_head = None
        return [{"type": "text-end", "id": pid}]

    def _close_reasoning(self) -> Chunks:
        if self._reasoning is None:
            return []
        pid, self._reasoning = self._reasoning, None
        return [{"type": "reasoning-end", "id": pid}]

    def _flags(self, client: bool) -> dict[str, Any]:
        return {} if client else {"dynamic": True, "providerExecuted": True}

    def _available(self, call_id: str, entry: _Input, arguments: str | None = None) -> Chunks:
        text = "".join(entry.text) if arguments is None else arguments
        try:
            value: Any = orjson.loads(text) if text.strip() else {}
        except orjson.JSONDecodeError:
            value = text
        return [
            {
                "type": "tool-input-available",
                "toolCallId": call_id,
                "toolName": entry.name,
                "input": value,
                **self._flags(entry.client),
            }
        ]

    def _complete_inputs(self) -> Chunks:
        """``tool-input-available`` for every streaming input: it is complete."""
        out: Chunks = []
        for call_id, entry in self._inputs.items():
            out += self._available(call_id, entry)
        self._inputs.clear()
        return out

    def _close_parts(self) -> Chunks:
        return [*self._complete_inputs(), *self._close_text(), *self._close_reasoning()]

    def _finish_step(self) -> Chunks:
        out = self._close_parts()
        if self._step:
            out.append({"type": "finish-step"})
            self._step = False
        self._after_output = False
        return out

    def _open_content(self) -> Chunks:
        """Before new content: a step open, a new one after a tool's output."""
        out: Chunks = []
        if self._after_output:
            out += self._finish_step()
        if not self._step:
            out.append({"type": "start-step"})
            self._step = True
        return out

    def _open_call(self, call_id: str, name: str) -> Chunks:
        """``tool-input-start`` for a call not seen yet (after what it cannot interleave with)."""
        if call_id in self._known:
            return []
        client = name in self._client_tools
        self._known[call_id] = client
        out = [*self._close_text(), *self._close_reasoning(), *self._open_content()]
        self._inputs[call_id] = _Input(name, client)
        out.append(
            {
                "type": "tool-input-start",
                "toolCallId": call_id,
                "toolName": name,
                **self._flags(client),
            }
        )
        return out

    # --- feeding ------------------------------------------------------------

    def feed(self, event: ev.Event) -> Chunks:
        """The chunks for one UAMP event of the answer."""
        self._move("event")
        if isinstance(event, ev.ResponseDelta):
            delta = event.delta
            if isinstance(delta, ty.DeltaToolCall):
                return self._call_fragment(delta.tool_call)
            out = self._complete_inputs()
            if isinstance(delta, ty.DeltaText):
                return out + self._text_delta(delta.text)
            if isinstance(delta, ty.DeltaToolResult):
                return out + self._output(delta.tool_result)
            return out
        out = self._complete_inputs()
        if isinstance(event, ev.Thinking):
            return out + self._thinking(event)
        if isinstance(event, ev.ToolCall):
            return out + self._client_call(event)
        if isinstance(event, ev.Progress):
            if event.target == "response" and event.stage == _STEP_START:
                return out + self._finish_step() + self._open_content()
            if event.target == "response" and event.stage == _STEP_END:
                return out + self._finish_step()
            return out
        if isinstance(event, ev.UsageDelta):
            self._usage = add_usage(self._usage, event.delta)
        return out

    def text_frame(self, text: str) -> bytes | None:
        """The SSE frame of a text delta that continues the open text part, else ``None``.

        The hot path of a streamed answer: the same bytes :func:`frame` makes
        of :meth:`feed`'s ``text-delta`` chunk, from a template built when
        the part opened. ``None`` (use :meth:`feed`) when the delta would
        open or close anything, or is empty.
        """
        head = self._text_head
        if head is None or not text or self._after_output or self._inputs:
            return None
        return b"".join((head, orjson.dumps(text), b"}\n\n"))

    def _text_delta(self, text: str) -> Chunks:
        if not text:
            return []
        out = [*self._close_reasoning(), *self._open_content()]
        if self._text is None:
            self._text = self._ids("txt")
            out.append({"type": "text-start", "id": self._text})
            self._text_head = b'data: {"type":"text-delta","id":' + orjson.dumps(self._text)
            self._text_head += b',"delta":'
        out.append({"type": "text-delta", "id": self._text, "delta": text})
        return out

    def _thinking(self, event: ev.Thinking) -> Chunks:
        if not event.content:
            return []
        out = [*self._close_text(), *self._open_content()]
        if not event.is_delta:
            out += self._close_reasoning()  # a complete thought is a part of its own
        if self._reasoning is None:
            self._reasoning = self._ids("rsn")
            out.append({"type": "reasoning-start", "id": self._reasoning})
        out.append({"type": "reasoning-delta", "id": self._reasoning, "delta": event.content})
        return out

    def _call_fragment(self, fragment: ty.ToolCallFragment) -> Chunks:
        out = self._open_call(fragment.id, fragment.name or "tool")
        entry = self._inputs.get(fragment.id)
        if entry is not None and fragment.arguments:
            entry.text.append(fragment.arguments)
            out.append(
                {
                    "type": "tool-input-delta",
                    "toolCallId": fragment.id,
                    "inputTextDelta": fragment.arguments,
                }
            )
        return out

    def _output(self, result: ty.ToolResultFragment) -> Chunks:
        call_id = result.call_id
        out = self._open_call(call_id, "tool")
        out += self._complete_inputs()
        flags = self._flags(self._known[call_id])
        if result.status == "failed":
            text = result.result or "the tool failed"
            out.append(
                {"type": "tool-output-error", "toolCallId": call_id, "errorText": text, **flags}
            )
        else:
            out.append(
                {
                    "type": "tool-output-available",
                    "toolCallId": call_id,
                    "output": result.result or "",
                    **flags,
                }
            )
        self._after_output = True
        return out

    def _client_call(self, event: ev.ToolCall) -> Chunks:
        out: Chunks = []
        if event.call_id not in self._known:
            out += self._open_call(event.call_id, event.name)
            entry = self._inputs.pop(event.call_id)
            out += self._available(event.call_id, entry, event.arguments)
        if event.call_id not in self.pending:
            self.pending.append(event.call_id)
        return out

    # --- ending -------------------------------------------------------------

    def request_approval(self, ask: Ask) -> Chunks:
        """A tool call waiting for the human: ``tool-approval-request``, ``approvalId`` its id.

        The call's ``tool-input-available`` comes first when the stream has
        not shown it yet (the tool part the approval belongs to). The answer
        then finishes as usual; the client's ``addToolApprovalResponse`` puts
        ``approval: {id, approved, reason}`` on that part, and the next
        request carries it (:func:`parse_approval_responses`).
        """
        out = self._open_content()
        call_id = ask.call_id or ask.id
        if call_id in self._inputs:
            out += self._available(call_id, self._inputs.pop(call_id))
        elif call_id not in self._known:
            self._known[call_id] = False
            out += self._available(
                call_id,
                _Input(name=ask.tool_name or "approval", client=False),
                orjson.dumps(ask.arguments or {}).decode(),
            )
        out.append({"type": "tool-approval-request", "approvalId": ask.id, "toolCallId": call_id})
        return out

    def finish(self, reason: str = "stop", metadata: Mapping[str, Any] | None = None) -> Chunks:
        """Close everything, then ``finish`` (usage and ``metadata`` in its metadata).

        ``reason``: one of :data:`FINISH_REASONS`; ``"stop"`` becomes
        ``"tool-calls"`` when the answer waits for client tools.
        """
        self._move("finish")
        if reason not in FINISH_REASONS:
            raise LocalProtocolError(
                f"unknown finish reason {reason!r}", code="invalid_ai_sdk_sequence"
            )
        if reason == "stop" and self.pending:
            reason = "tool-calls"
        out = self._finish_step()
        out.append(self._finish_chunk(reason, metadata))
        return out

    def end(self, outcome: ResponseOutcome, signature: str | None = None) -> Chunks:
        """The chunks that end the answer of a turn that ended as ``outcome``.

        A failed turn's ``error``; a cancelled one's ``abort`` and ``finish``
        (reason ``other``); else ``finish`` with the ``signature``. The payer's
        balance rides in the finish metadata.
        """
        meta: dict[str, Any] = {}
        if outcome.balance is not None:
            meta["paymentBalance"] = balance_fields(outcome.balance)
        if outcome.status == "failed":
            error = outcome.error
            return self.error(error.message if error else "The agent failed.", meta)
        if outcome.status == "cancelled":
            out = self.finish("other", meta)
            out.insert(-1, {"type": "abort", "reason": "superseded or stopped"})
            return out
        if signature is not None:
            meta["signature"] = signature
        return self.finish("stop", meta)

    def error(self, text: str, metadata: Mapping[str, Any] | None = None) -> Chunks:
        """Close everything, then ``error`` and ``finish`` (``finishReason: "error"``)."""
        self._move("error")
        out = self._finish_step()
        out.append({"type": "error", "errorText": text})
        out.append(self._finish_chunk("error", metadata))
        return out

    def _finish_chunk(self, reason: str, metadata: Mapping[str, Any] | None) -> dict[str, Any]:
        meta: dict[str, Any] = {}
        usage = usage_metadata(self._usage)
        if usage is not None:
            meta["usage"] = usage
        meta.update(metadata or {})
        chunk: dict[str, Any] = {"type": "finish", "finishReason": reason}
        if meta:
            chunk["messageMetadata"] = meta
        return chunk


def parse_approval_responses(request: ChatRequest, pending: Mapping[str, Ask]) -> list[Answered]:
    """The approvals the client answered with ``addToolApprovalResponse``.

    They are the tool parts of the continued assistant message whose
    ``approval`` has an ``id`` that is a ``pending`` interrupt and an
    ``approved`` boolean (state ``approval-responded``); a ``reason`` goes
    with a denial. Parts answering nothing pending are history and are left
    alone.
    """
    message = request.continued
    answers: list[Answered] = []
    if message is None:
        return answers
    for part in message.get("parts", []):
        approval = part.get("approval") if isinstance(part, dict) else None
        if not isinstance(approval, dict):
            continue
        aid, approved = approval.get("id"), approval.get("approved")
        if not isinstance(aid, str) or aid not in pending or not isinstance(approved, bool):
            continue
        reason = approval.get("reason")
        answers.append(
            (aid, Answer(approved=approved, reason=reason if isinstance(reason, str) else None))
        )
    return answers
