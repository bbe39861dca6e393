"""The lifecycle of one response and the accumulation of its output.

Theory of operation
-------------------
A :class:`ResponseTracker` follows one response from ``response.created`` to
``response.done`` / ``response.cancelled`` / ``response.error`` (UAMP
sections 3, 6.5-6.11). Both ends use it: a server feeds it the events it
sends, a client the events it receives, and both end up with the same
output. Output items keep their order of first appearance:

* text deltas append to the current text item (a tool call, thinking or
  media item in between starts a new one);
* tool-call fragments are joined per call id (name from the first fragment
  that has one, argument fragments concatenated);
* ``tool.call`` (a *client* tool) registers an outstanding ``call_id`` that
  a ``tool.result`` must answer, once; server-side tool results arrive as
  ``tool_result`` deltas; ``tool_progress`` text is kept per call;
* consecutive ``thinking`` events with ``is_delta`` merge into one item
  (section 6.13); a complete thought starts a new one;
* audio chunks (``response.delta`` audio and ``audio.delta``) are decoded
  and joined into one audio item;
* ``usage.delta`` values are summed into the final usage;
* a ``progress`` event of stage ``checkpoint`` for the response marks the
  output so far (a UAP checkpoint, spec 002 section 6.4); one of stage
  ``restored`` rolls the output back to that mark: the response went on from
  its checkpoint in another process after the one running it was lost
  (docs/resume.md, "Node loss"), and what was sent after the checkpoint is
  replaced by what follows.

Output is bounded (:attr:`ResponseTracker.max_output_bytes`, by default
:data:`MAX_OUTPUT_BYTES`): every event is weighed before it is kept -- the
characters of its text, arguments, thinking, transcript or progress and the
bytes of its decoded audio, plus :data:`PART_BYTES` for each piece kept
(what CPython spends on a string besides its characters: a stream of
one-character deltas is bounded in memory, not only in text) and
:data:`ITEM_BYTES` for each output item or id it adds -- and one that would
take the total past the bound raises :class:`~uamp_proto.errors.OutputTooLarge`
having changed nothing. A text delta costs two subtractions and a comparison.
(An agent that streams without end, or a client that makes one, would
otherwise grow the tracker, and the ``response.done`` built from it, until
the process runs out of memory; a hostile server does the same to a client.)

Its :attr:`~ResponseTracker.state` is a :class:`ResponseState`, the one
enum of :mod:`uamp_proto._state`: a terminal event moves it to the state the
response table gives that event (``RESPONSE_OUTCOMES``). The tracker checks
no order; the connection does, against the same table, and allows one
response per session at a time. The tracker itself does not know sessions.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final, TypeVar

import attrs

from . import _fastinit, history
from . import events as ev
from . import types as ty
from ._state import RESPONSE_OUTCOMES, TERMINAL_RESPONSE_STATES, ResponseState
from .errors import OutputTooLarge, RemoteProtocolError

__all__ = [
    "CHECKPOINT",
    "ITEM_BYTES",
    "MAX_OUTPUT_BYTES",
    "PART_BYTES",
    "RESTORED",
    "AssistantGather",
    "ResponseState",
    "ResponseTracker",
    "add_usage",
]

#: The ``progress`` stage of a UAP checkpoint (spec 002, 6.4): the response's
#: output up to this event is complete state it can go on from.
CHECKPOINT: Final = "checkpoint"
#: The ``progress`` stage saying a response goes on from its last checkpoint
#: in another process: what was sent after that checkpoint is superseded.
RESTORED: Final = "restored"
#: The most output one response keeps by default, in bytes (characters of
#: text, plus :data:`PART_BYTES` a delta). A model's longest replies are well
#: below it: 128k output tokens (the most today's models write in one reply)
#: streamed token by token weigh about 7.5 MiB, and eleven minutes of 24 kHz
#: pcm16 speech fit. A response past it is an agent that does not stop, or
#: one made not to. (Past 16 MiB a ``response.done`` is larger than a UAMP
#: client takes by default, ``ConnectionConfig.max_event_size``, anyway.)
MAX_OUTPUT_BYTES: Final = 32 * 1024 * 1024
#: What each output item (and each call id a response registers) weighs
#: besides its content: about an empty item's own memory, so that endless
#: empty items are bounded as well as endless text.
ITEM_BYTES: Final = 64
#: What each piece of output kept (a delta's text, an audio chunk) weighs
#: besides its content: a string's header in CPython (49 bytes for ASCII, 33
#: for bytes) and its place in a list (8).
PART_BYTES: Final = 56
#: The classes of the common event, as module globals (read faster than
#: through their modules: they pay for the bound's count on the hot path).
_RESPONSE_DELTA: Final = ev.ResponseDelta
_DELTA_TEXT: Final = ty.DeltaText
#: The state ``response.created`` moves a response to.
_CREATED: Final = RESPONSE_OUTCOMES["response.created"]
#: Where a tracker starts (a module global reads faster than an enum's member).
_REQUESTED: Final = ResponseState.REQUESTED
#: What a tracker's tool-call, progress and transcript containers hold until
#: the response first puts something there (a text reply never does): shared
#: and read-only, so every read works on them and every write replaces them
#: first (:meth:`ResponseTracker._own`).
_NO_ENTRIES: Final[Mapping[str, Any]] = MappingProxyType({})
_NO_IDS: Final[frozenset[str]] = frozenset()
_NO_TEXTS: Final[tuple[str, ...]] = ()
#: What :meth:`ResponseTracker._own` makes of one of them.
_Container = TypeVar("_Container", dict[str, Any], set[str], list[str])


#: ``TextContent(text=...)``, ``ResponseOutput(id=..., ...)`` and
#: ``ResponseDone(response_id=..., ...)``, positionally (_fastinit.maker).
_make_text = _fastinit.maker(ty.TextContent, ("text",))
_make_output = _fastinit.maker(ty.ResponseOutput, ("id", "status", "output", "usage"))
#: A tool call's and a tool result's output items, positionally (a tool round's).
_make_call = _fastinit.maker(ty.ToolInvocation, ("id", "name", "arguments"))
_make_call_item = _fastinit.maker(ty.ToolCallContent, ("tool_call",))
_make_result = _fastinit.maker(ty.ToolOutput, ("call_id", "result", "is_error", "content_items"))
_make_result_item = _fastinit.maker(ty.ToolResultContent, ("tool_result",))
_make_done = _fastinit.maker(
    ev.ResponseDone, ("response_id", "response", "signature", "session_id")
)
#: ``Message(role=..., content=...)``: a text-only reply's message.
_make_message = _fastinit.maker(ty.Message, ("role", "content"))


class AssistantGather:
    """Gathers assistant text and tool calls into one assistant message per run of them.

    Used wherever a conversation is rebuilt from output in order (this
    module's :meth:`ResponseTracker.messages`, the Realtime adapter's
    conversation items): append to ``text`` and ``calls``, and call
    :meth:`flush` where something else (a tool result) comes between.
    """

    def __init__(self, messages: list[ty.Message]) -> None:
        self.messages = messages
        self.text: list[str] = []
        self.calls: list[ty.ToolInvocation] = []

    def flush(self) -> None:
        """Append the gathered assistant message, if there is one, to ``messages``."""
        if self.text or self.calls:
            self.messages.append(
                ty.Message(
                    role="assistant",
                    content="".join(self.text) if self.text else None,
                    tool_calls=list(self.calls) or None,
                )
            )
            self.text.clear()
            self.calls.clear()


def add_usage(a: ty.UsageStats | None, b: ty.UsageStats | None) -> ty.UsageStats | None:
    """The field-wise sum of two usage records (absent fields stay absent)."""
    if (
        type(a) is ty.UsageStats
        and type(b) is ty.UsageStats
        and a.cost is None
        and b.cost is None
        and a.audio is None
        and b.audio is None
    ):
        # Token counts only (a tool round's second model call): what
        # _add_fields comes to, without its walk over the fields (a
        # differential test holds the two together).
        return ty.UsageStats(
            input_tokens=_add_count(a.input_tokens, b.input_tokens),
            output_tokens=_add_count(a.output_tokens, b.output_tokens),
            total_tokens=_add_count(a.total_tokens, b.total_tokens),
            cached_tokens=_add_count(a.cached_tokens, b.cached_tokens),
        )
    summed: ty.UsageStats | None = _add_fields(a, b)
    return summed


def _add_count(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else a + b


#: Usage records :func:`add_usage` adds field by field (a cost, audio seconds).
_USAGE_RECORDS = (ty.UsageStats, ty.UsageCost, ty.AudioUsage)


def _add_fields(a: Any, b: Any) -> Any:
    """Numbers add, nested usage records add field-wise, text keeps the first
    present (a cost's currency); unknown members are not carried over."""
    if a is None:
        return b
    if b is None:
        return a
    if not isinstance(a, _USAGE_RECORDS):
        return (a or b) if isinstance(a, str) else a + b
    values = {
        f.name: _add_fields(getattr(a, f.name), getattr(b, f.name))
        for f in attrs.fields(type(a))
        if f.name != "unknown"
    }
    return type(a)(**values)


class _Slot:
    """A mutable output item under construction."""

    __slots__ = ("extra", "kind", "parts")

    def __init__(self, kind: str, extra: dict[str, Any] | None = None) -> None:
        self.kind = kind
        self.parts: list[Any] = []
        self.extra: dict[str, Any] = extra if extra is not None else {}


class ResponseTracker:
    """Follows one response and accumulates its output.

    Args:
        response_id: The id of the response.
        input_messages: The messages this response answers (the accumulated
            input), kept so a session can extend its history.
        max_output_bytes: The most output it keeps (see the module
            docstring); an event past it raises
            :class:`~uamp_proto.errors.OutputTooLarge`.
    """

    # Slots: one tracker per turn, built in half the time of a dict-backed one.
    __slots__ = (
        "_answered",
        "_calls",
        "_checkpoint",
        "_client_calls",
        "_done_calls",
        "_final_usage",
        "_left",
        "_progress",
        "_slots",
        "_transcript",
        "_usage",
        "context",
        "error",
        "input_messages",
        "max_output_bytes",
        "response_id",
        "state",
    )

    def __init__(
        self,
        response_id: str,
        input_messages: list[ty.Message] | None = None,
        max_output_bytes: int = MAX_OUTPUT_BYTES,
    ) -> None:
        self.response_id = response_id
        #: The bound on the output kept, and what is left of it.
        self.max_output_bytes = max_output_bytes
        self._left = max_output_bytes
        self.input_messages: list[ty.Message] = list(input_messages or ())
        #: ``input.text.context`` of the input this response answers (5.6).
        self.context: dict[str, Any] = {}
        self.state = _REQUESTED
        self._slots: list[_Slot] = []
        # Read-only empties until first written (see _NO_ENTRIES).
        self._calls: Mapping[str, _Slot] = _NO_ENTRIES
        self._client_calls: Mapping[str, ty.ToolInvocation] = _NO_ENTRIES
        self._answered: frozenset[str] | set[str] = _NO_IDS
        self._done_calls: frozenset[str] | set[str] = _NO_IDS
        self._progress: Mapping[str, list[str]] = _NO_ENTRIES
        self._usage: ty.UsageStats | None = None
        self._final_usage: ty.UsageStats | None = None
        self._transcript: tuple[str, ...] | list[str] = _NO_TEXTS
        self.error: ty.ErrorInfo | None = None
        #: The output at the last checkpoint (see :meth:`_mark`), or ``None``.
        self._checkpoint: tuple[Any, ...] | None = None

    # --- feeding -----------------------------------------------------------

    def apply(self, event: ev.Event) -> None:
        """Account for one server event of this response.

        Events that do not concern output (progress, payment, rate limits)
        are ignored.

        Raises:
            OutputTooLarge: The event would take the output past
                :attr:`max_output_bytes`; nothing of it was kept.
        """
        kind = type(event)
        if kind is _RESPONSE_DELTA:
            delta = event.delta  # type: ignore[attr-defined]
            if type(delta) is _DELTA_TEXT:
                # The common event, in place: the text goes to the last text item.
                slots = self._slots
                if slots and slots[-1].kind == "text":
                    text = delta.text
                    left = self._left - len(text) - PART_BYTES
                    if left < 0:
                        raise self._too_large(len(text) + PART_BYTES)
                    self._left = left
                    slots[-1].parts.append(text)
                    return
            self._delta(delta)
            return
        if kind is ev.Thinking:
            self._thinking(event)  # type: ignore[arg-type]
        elif kind is ev.UsageDelta:
            self._usage = add_usage(self._usage, event.delta)  # type: ignore[attr-defined]
        elif kind is ev.ToolCall:
            self._client_call(event)  # type: ignore[arg-type]
        elif kind is ev.ToolCallDone:
            call_id: str = event.call_id  # type: ignore[attr-defined]
            if call_id not in self._done_calls:
                self._spend(ITEM_BYTES + len(call_id))
                self._own("_done_calls", set).add(call_id)
        elif kind is ev.AudioDelta:
            self._audio(event.audio)  # type: ignore[attr-defined]
        elif kind is ev.TranscriptDelta:
            transcript: str = event.transcript  # type: ignore[attr-defined]
            self._spend(len(transcript) + PART_BYTES)
            self._own("_transcript", list).append(transcript)
        elif kind is ev.ResponseDone:
            self._final_usage = event.response.usage  # type: ignore[attr-defined]
        elif kind is ev.ResponseErrorEvent:
            self.error = event.error  # type: ignore[attr-defined]
        elif kind is ev.Progress:
            self._progress_event(event)  # type: ignore[arg-type]
        # The state follows the response table's outcome for the event (the
        # connection checked the move, when there is one).
        after = RESPONSE_OUTCOMES.get(event.type)
        if after is not None:
            self.state = after

    def created(self) -> None:
        """What :meth:`apply` does with ``response.created``, without the event."""
        self.state = _CREATED

    def _progress_event(self, event: ev.Progress) -> None:
        if event.target != "response" or event.target_id != self.response_id:
            return
        if event.stage == CHECKPOINT:
            self._checkpoint = self._mark()
        elif event.stage == RESTORED:
            self._roll_back(self._checkpoint)

    def _mark(self) -> tuple[Any, ...]:
        """What :meth:`_roll_back` needs to bring the output back to now."""
        return (
            self._left,
            [(s, len(s.parts), dict(s.extra)) for s in self._slots],
            dict(self._calls),
            dict(self._client_calls),
            set(self._answered),
            set(self._done_calls),
            {k: len(v) for k, v in self._progress.items()},
            self._usage,
            len(self._transcript),
        )

    def _roll_back(self, mark: tuple[Any, ...] | None) -> None:
        """Bring the output back to ``mark`` (``None``: to nothing)."""
        if mark is None:
            mark = (self.max_output_bytes, [], {}, {}, set(), set(), {}, None, 0)
        left, slots, calls, client, answered, done, progress, usage, transcript = mark
        self._left = left
        for slot, parts, extra in slots:
            del slot.parts[parts:]
            slot.extra = dict(extra)
        self._slots = [slot for slot, _, _ in slots]
        self._calls, self._client_calls = dict(calls), dict(client)
        self._answered, self._done_calls = set(answered), set(done)
        self._progress = {k: self._progress[k][:n] for k, n in progress.items()}
        self._usage = usage
        if transcript < len(self._transcript):
            del self._own("_transcript", list)[transcript:]
        self._checkpoint = self._mark()

    def _own(self, name: str, kind: type[_Container]) -> _Container:
        """The container ``name``, made writable (a new ``kind``) at its first write.

        They start as the shared read-only empties (:data:`_NO_ENTRIES`).
        """
        value = getattr(self, name)
        if type(value) is not kind:
            value = kind()
            setattr(self, name, value)
        return value

    def _spend(self, size: int) -> None:
        """Take ``size`` bytes of the bound, or raise :class:`OutputTooLarge` (nothing taken)."""
        left = self._left - size
        if left < 0:
            raise self._too_large(size)
        self._left = left

    def _too_large(self, size: int) -> OutputTooLarge:
        limit = self.max_output_bytes
        return OutputTooLarge(
            f"The output of response {self.response_id} passed its bound of {limit} bytes "
            f"(it held {limit - self._left}, and {size} more came); the response was stopped.",
            limit=limit,
        )

    def _last(self, kind: str, size: int) -> _Slot:
        """The last output item if it is a ``kind``, else a new one; ``size`` more bytes spent."""
        slots = self._slots
        if slots and slots[-1].kind == kind:
            self._spend(size)
            return slots[-1]
        self._spend(size + ITEM_BYTES)
        slot = _Slot(kind)
        slots.append(slot)
        return slot

    def _delta(self, delta: ty.Delta) -> None:
        kind = type(delta)
        if kind is ty.DeltaText:
            text: str = delta.text  # type: ignore[union-attr]
            slots = self._slots
            if slots and slots[-1].kind == "text":  # (a server's send: the hot path)
                left = self._left - len(text) - PART_BYTES
                if left < 0:
                    raise self._too_large(len(text) + PART_BYTES)
                self._left = left
                slots[-1].parts.append(text)
            else:
                # A new text item (a response's first delta): _last's new slot
                # and its _spend, inline (two calls before the first delta).
                size = len(text) + PART_BYTES + ITEM_BYTES
                left = self._left - size
                if left < 0:
                    raise self._too_large(size)
                self._left = left
                item = _Slot("text")
                slots.append(item)
                item.parts.append(text)
        elif kind is ty.DeltaToolCall:
            frag: ty.ToolCallFragment = delta.tool_call  # type: ignore[union-attr]
            slot = self._calls.get(frag.id)
            size = len(frag.arguments) + PART_BYTES if frag.arguments else 0
            if slot is None:
                size += ITEM_BYTES + len(frag.id) + (len(frag.name) if frag.name else 0)
            elif frag.name and not slot.extra["name"]:
                size += len(frag.name)
            self._spend(size)
            if slot is None:
                slot = self._own("_calls", dict)[frag.id] = _Slot(
                    "tool_call", {"id": frag.id, "name": ""}
                )
                self._slots.append(slot)
            if frag.name and not slot.extra["name"]:
                slot.extra["name"] = frag.name
            if frag.arguments:
                slot.parts.append(frag.arguments)
        elif kind is ty.DeltaAudio:
            self._audio(delta.audio)  # type: ignore[union-attr]
        elif kind is ty.DeltaToolResult:
            res: ty.ToolResultFragment = delta.tool_result  # type: ignore[union-attr]
            size = ITEM_BYTES + len(res.call_id) + PART_BYTES + len(res.result or "")
            if res.content_items:
                size += history.weight(res.content_items)
            self._spend(size)
            slot = _Slot(
                "tool_result",
                {"call_id": res.call_id, "status": res.status, "items": res.content_items},
            )
            slot.parts.append(res.result or "")
            self._slots.append(slot)
        elif kind is ty.DeltaToolProgress:
            prog: ty.ToolProgress = delta.tool_progress  # type: ignore[union-attr]
            texts = self._progress.get(prog.call_id)
            size = len(prog.text) + PART_BYTES
            if texts is None:
                self._spend(ITEM_BYTES + len(prog.call_id) + size)
                texts = self._own("_progress", dict)[prog.call_id] = []
            else:
                self._spend(size)
            texts.append(prog.text)

    def _thinking(self, event: ev.Thinking) -> None:
        slots = self._slots
        content = event.content
        if event.is_delta and slots and slots[-1].kind == "thinking":
            self._spend(len(content) + PART_BYTES)
            slots[-1].parts.append(content)
            return
        self._spend(ITEM_BYTES + len(content) + PART_BYTES)
        slot = _Slot("thinking", {"stage": event.stage, "redacted": event.redacted})
        slot.parts.append(content)
        slots.append(slot)

    def _audio(self, chunk: str) -> None:
        try:
            raw = base64.b64decode(chunk, validate=True)
        except ValueError:
            raw = chunk.encode()
        self._last("audio", len(raw) + PART_BYTES).parts.append(raw)

    def _client_call(self, event: ev.ToolCall) -> None:
        slot = self._calls.get(event.call_id)
        # The call's strings are kept once (the invocation and the item share them).
        size = len(event.arguments) + PART_BYTES
        if slot is None:
            size += ITEM_BYTES + len(event.call_id) + len(event.name)
        else:  # its fragments are replaced
            size -= sum(len(part) + PART_BYTES for part in slot.parts)
        if event.call_id not in self._client_calls:
            size += ITEM_BYTES
        self._spend(size)
        call = ty.ToolInvocation(id=event.call_id, name=event.name, arguments=event.arguments)
        self._own("_client_calls", dict)[event.call_id] = call
        if slot is None:
            slot = self._own("_calls", dict)[event.call_id] = _Slot(
                "tool_call", {"id": event.call_id, "name": event.name}
            )
            slot.parts.append(event.arguments)
            self._slots.append(slot)
        else:  # streamed as fragments first: tool.call carries the complete call
            slot.extra["name"] = event.name
            slot.parts[:] = [event.arguments]

    def add_tool_result(
        self, call_id: str, result: str, is_error: bool | None = None
    ) -> ty.ToolOutput:
        """Record the client's answer to a ``tool.call``.

        Raises:
            RemoteProtocolError: ``call_id`` names no outstanding call of this
                response, or was answered already (code ``invalid_tool_result``).
            OutputTooLarge: The result would take the output past its bound.
        """
        if call_id not in self._client_calls:
            raise RemoteProtocolError(
                f"call_id {call_id!r} does not match any tool.call of "
                f"response {self.response_id!r}",
                code="invalid_tool_result",
            )
        if call_id in self._answered:
            raise RemoteProtocolError(
                f"call_id {call_id!r} was already answered",
                code="invalid_tool_result",
            )
        self._spend(ITEM_BYTES + len(result) + PART_BYTES)
        self._own("_answered", set).add(call_id)
        slot = _Slot("tool_result", {"call_id": call_id, "is_error": is_error})
        slot.parts.append(result)
        self._slots.append(slot)
        return ty.ToolOutput(call_id=call_id, result=result, is_error=is_error)

    # --- reading -----------------------------------------------------------

    @property
    def is_finished(self) -> bool:
        """Whether the response reached a terminal state."""
        return self.state in TERMINAL_RESPONSE_STATES

    @property
    def pending_tool_calls(self) -> list[ty.ToolInvocation]:
        """Client tool calls still waiting for their ``tool.result``."""
        if not self._client_calls:
            return []
        return [c for cid, c in self._client_calls.items() if cid not in self._answered]

    @property
    def tool_calls(self) -> list[ty.ToolInvocation]:
        """Every tool call of the response so far, complete or streamed."""
        return [
            ty.ToolInvocation(id=s.extra["id"], name=s.extra["name"], arguments="".join(s.parts))
            for s in self._slots
            if s.kind == "tool_call"
        ]

    @property
    def text(self) -> str:
        """All output text so far, concatenated."""
        return "".join("".join(s.parts) for s in self._slots if s.kind == "text")

    @property
    def plain_text(self) -> str | None:
        """:attr:`text` when the output is text alone (no other item, no client
        tool call), else ``None``."""
        if self._client_calls:
            return None
        slots = self._slots
        for s in slots:
            if s.kind != "text":
                return None
        if len(slots) == 1:  # (as text deltas in a row make it)
            return "".join(slots[0].parts)
        return "".join(["".join(s.parts) for s in slots])

    @property
    def thinking(self) -> str:
        """All reasoning text so far."""
        return "".join("".join(s.parts) for s in self._slots if s.kind == "thinking")

    @property
    def transcript(self) -> str:
        """The accumulated transcript of output audio."""
        return "".join(self._transcript)

    @property
    def tool_progress(self) -> Mapping[str, list[str]]:
        """Progress texts of server-side tools, by call id."""
        return self._progress

    @property
    def completed_tool_calls(self) -> frozenset[str]:
        """Call ids announced complete by ``tool.call_done``."""
        return frozenset(self._done_calls)

    @property
    def usage(self) -> ty.UsageStats | None:
        """Usage: the ``response.done`` figure if seen, else the sum of ``usage.delta``."""
        usage = self._final_usage if self._final_usage is not None else self._usage
        if (
            usage is not None
            and usage.total_tokens is None
            and (usage.input_tokens is not None or usage.output_tokens is not None)
        ):
            usage = ty.UsageStats(
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                total_tokens=(usage.input_tokens or 0) + (usage.output_tokens or 0),
                cached_tokens=usage.cached_tokens,
                cost=usage.cost,
                audio=usage.audio,
            )
        return usage

    @property
    def output(self) -> list[ty.ContentItem]:
        """The output content items so far, in order."""
        out: list[ty.ContentItem] = []
        for s in self._slots:
            kind = s.kind
            if kind == "text":
                out.append(_make_text("".join(s.parts)))
            elif kind == "tool_call":
                extra = s.extra
                call = _make_call(extra["id"], extra["name"], "".join(s.parts))
                out.append(_make_call_item(call))
            elif kind == "tool_result":
                extra = s.extra
                result = _make_result(
                    extra["call_id"], "".join(s.parts), extra.get("is_error"), extra.get("items")
                )
                out.append(_make_result_item(result))
            elif kind == "thinking":
                out.append(
                    ty.ThinkingContent(
                        thinking="".join(s.parts),
                        stage=s.extra.get("stage"),
                        redacted=s.extra.get("redacted"),
                    )
                )
            elif kind == "audio":
                data = base64.b64encode(b"".join(s.parts)).decode("ascii")
                out.append(ty.AudioContent(audio=data))
        return out

    def messages(self) -> list[ty.Message]:
        """The conversation messages this response produced, in order.

        Assistant text and tool calls gather into one assistant message until
        a tool result follows; each result becomes a ``role="tool"`` message.
        Thinking is not part of the conversation.
        """
        slots = self._slots
        if not slots:
            return []
        if len(slots) == 1 and slots[0].kind == "text":
            # A text-only reply: the one message the loop below would build.
            return [_make_message("assistant", "".join(slots[0].parts))]
        msgs: list[ty.Message] = []
        gather = AssistantGather(msgs)
        for item in self.output:
            if isinstance(item, ty.TextContent):
                if gather.calls:
                    gather.flush()
                gather.text.append(item.text)
            elif isinstance(item, ty.ToolCallContent):
                gather.calls.append(item.tool_call)
            elif isinstance(item, ty.ToolResultContent):
                gather.flush()
                result = item.tool_result
                msgs.append(
                    ty.Message(
                        role="tool",
                        content=result.result,
                        tool_call_id=result.call_id,
                        # A failed result keeps its item: is_error reaches the model.
                        content_items=[item] if result.is_error else None,
                    )
                )
        gather.flush()
        return msgs

    # --- terminal events ---------------------------------------------------

    def done_event(
        self, *, signature: str | None = None, session_id: str | None = None
    ) -> ev.ResponseDone:
        """The ``response.done`` event carrying the accumulated output and usage."""
        rid = self.response_id
        output = _make_output(rid, "completed", self.output, self.usage)
        return _make_done(rid, output, signature, session_id)

    def cancelled_event(self, *, session_id: str | None = None) -> ev.ResponseCancelled:
        """The ``response.cancelled`` event with the partial output so far."""
        return ev.ResponseCancelled(
            response_id=self.response_id, partial_output=self.output, session_id=session_id
        )

    def error_event(
        self,
        code: str,
        message: str,
        details: dict[str, Any] | None = None,
        *,
        session_id: str | None = None,
    ) -> ev.ResponseErrorEvent:
        """A ``response.error`` event for this response."""
        return ev.ResponseErrorEvent(
            response_id=self.response_id,
            error=ty.ErrorInfo(code=code, message=message, details=details),
            session_id=session_id,
        )
