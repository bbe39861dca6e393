"""One turn of an A2A task: the agent's UAMP events -> task updates (:class:`TaskRun`).

:class:`TaskRun` updates the stored :class:`~uamp_proto.adapters.a2a_tasks.A2ATask`
event by event and returns the :class:`~uamp_proto.adapters.a2a_tasks.Update`
objects to stream; its docstring says what maps to what. A streamed text
delta is its hot path (:meth:`TaskRun.more_text`, :meth:`TaskRun.grower`):
the task's text artifact grows in place. Here too is what an agent writes
to speak in A2A's own terms -- :func:`artifact_delta`, :func:`message_delta`,
:func:`data_item` -- and how a turn that stops short ends the task
(:data:`PAUSE_CODES`, :data:`RUNNER_LOST`).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

from .. import events as ev
from .. import types as ty
from ..codec import DecodeError, from_dict, unstructure
from ..ids import IdSource
from ..interrupts import Interrupt
from ..outcome import ResponseOutcome
from .a2a_tasks import A2ATask, Artifact, StoredMessage, TaskState, Trigger, Update

__all__ = [
    "PAUSE_CODES",
    "RUNNER_LOST",
    "UAMP_EVENTS_EXTENSION",
    "TaskRun",
    "artifact_delta",
    "data_item",
    "message_delta",
]

#: The extension (``A2A-Extensions``) under which a client asks to see UAMP's
#: own progress events (thinking, tool activity) as ``data`` parts of
#: ``working`` status messages; without it they stay inside the server.
UAMP_EVENTS_EXTENSION = "https://uamp.dev/extensions/events/v1"

#: :class:`~uamp_proto.responder.ResponderError` codes that end a turn in a
#: state other than ``failed``: the agent pauses for input or authorization,
#: or refuses the task.
PAUSE_CODES: dict[str, Trigger] = {
    "input_required": Trigger.REQUIRE_INPUT,
    "auth_required": Trigger.REQUIRE_AUTH,
    "rejected": Trigger.REJECT,
}

#: The error of a task whose server process stopped in the middle of its turn
#: (a shared task store ends it ``failed`` on a surviving process).
RUNNER_LOST = ty.ErrorInfo(
    code="interrupted", message="The server running this task stopped before the task finished."
)


def data_item(value: Any) -> ty.UnknownContent:
    """A UAMP content item holding structured JSON: ``{"type": "data", "data": value}``.

    It is A2A's data part on the wire (UAMP keeps unknown item types verbatim).
    """
    return ty.UnknownContent(raw={"type": "data", "data": value})


def artifact_delta(
    items: list[ty.ContentItem],
    *,
    artifact_id: str | None = None,
    name: str | None = None,
    description: str | None = None,
    append: bool = False,
    last_chunk: bool = False,
) -> ev.ResponseDelta:
    """The UAMP event by which an agent adds (a chunk of) an artifact to its task.

    A ``response.delta`` of type ``artifact`` whose ``content`` is a list of
    UAMP content items (text, file -- bytes or URL --, :func:`data_item`).
    ``append`` adds the parts to the artifact sent before under the same id;
    ``last_chunk`` says it is complete.
    """
    raw: dict[str, Any] = {
        "type": "artifact",
        "content": [unstructure(i) for i in items],
        "append": append,
        "last_chunk": last_chunk,
    }
    for key, value in (("artifact_id", artifact_id), ("name", name), ("description", description)):
        if value is not None:
            raw[key] = value
    return ev.ResponseDelta(delta=ty.DeltaUnknown(raw=raw))


def message_delta(items: list[ty.ContentItem]) -> ev.ResponseDelta:
    """The UAMP event by which an agent answers with a message instead of a task.

    Only as the turn's first output: the send answers with this message and
    no task is kept.
    """
    raw = {"type": "message", "content": [unstructure(i) for i in items]}
    return ev.ResponseDelta(delta=ty.DeltaUnknown(raw=raw))


def _content(raw: dict[str, Any]) -> list[ty.ContentItem]:
    """The content items of an ``artifact``/``message`` delta (invalid ones are dropped)."""
    items = raw.get("content")
    if not isinstance(items, list):
        return []
    try:
        message = from_dict(ty.Message, {"role": "assistant", "content_items": items})
    except DecodeError:
        return []
    return list(message.content_items or [])


#: Stores the text of a :class:`~uamp_proto.types.TextContent`, frozen as it
#: is (its slot's own setter; see :meth:`TaskRun.grow`).
_set_text = vars(ty.TextContent)["text"].__set__


class TaskRun:
    """Turns one UAMP response's events into updates of an :class:`A2ATask`.

    Feed every event of the turn to :meth:`feed` (an ``interrupt.request``
    to :meth:`ask_human`, an ``interrupt.resolved`` to
    :meth:`human_answered`); then call exactly one of :meth:`complete`,
    :meth:`require_input`, :meth:`pause`, :meth:`fail` or :meth:`cancel`. What maps to what:

    * the turn's first output announces ``working`` (an agent that only
      finishes never shows it) -- unless that output is a
      :func:`message_delta`: then the turn is a direct reply
      (:attr:`reply`) and no task update is made;
    * text deltas grow one text artifact (``<response id>-text``), each
      chunk sent as it comes (``append`` from the second on); when the turn
      ends an empty text chunk carries ``lastChunk: true``, so a client
      that concatenates the chunks has the answer exactly once;
    * :func:`artifact_delta` events are artifact updates as the agent wrote them;
    * ``progress`` with a message, and a tool's progress text, are
      ``working`` status updates whose agent message is that text;
    * thinking, tool calls and results stay inside unless the client
      activated :data:`UAMP_EVENTS_EXTENSION` (then: a data part
      ``{"uamp": <event>}``);
    * the final text becomes an agent message in the history and the final
      status.

    Args:
        task: The task being worked on (already ``working``).
        ids: Makes message ids.
        uamp_events: Whether the client activated :data:`UAMP_EVENTS_EXTENSION`.
    """

    def __init__(self, task: A2ATask, ids: IdSource, *, uamp_events: bool = False) -> None:
        self.task = task
        self._ids = ids
        self._uamp_events = uamp_events
        self._text: Artifact | None = None
        #: The text artifact's one item: the turn's text so far, grown in place
        #: (:meth:`grow`); its list, to see whether an artifact delta replaced it.
        self._item: ty.TextContent | None = None
        self._items: list[ty.ContentItem] = []
        #: What :meth:`grower` took that is not in the item yet (:meth:`settle`).
        self._pending: io.StringIO | None = None
        self._sent_text = False
        self._started = False
        #: The agent's direct reply, when it answered with a message.
        self.reply: StoredMessage | None = None

    def _status(
        self,
        message: StoredMessage | None = None,
        *,
        final: bool = False,
        metadata: dict[str, Any] | None = None,
    ) -> Update:
        task = self.task
        return Update(
            kind="status",
            task_id=task.id,
            context_id=task.context_id,
            state=task.state,
            timestamp=task.timestamp,
            message=message,
            final=final,
            metadata=metadata,
        )

    def status(self) -> Update:
        """The update announcing the task's current state (e.g. ``working``)."""
        return self._status(self.task.status_message)

    def _start(self) -> list[Update]:
        if self._started:
            return []
        self._started = True
        return [self.status()]

    def _say(self, text: str) -> Update:
        message = StoredMessage(
            message_id=self._ids("msg"), role="agent", items=[ty.TextContent(text=text)]
        )
        return self._status(message)

    def _note(self, event: ev.Event) -> list[Update]:
        if not self._uamp_events:
            return []
        body = unstructure(event)
        for key in ("event_id", "session_id", "response_id", "timestamp"):
            body.pop(key, None)
        message = StoredMessage(
            message_id=self._ids("msg"), role="agent", items=[], data=[{"uamp": body}]
        )
        return [
            *self._start(),
            self._status(message, metadata={UAMP_EVENTS_EXTENSION: {"event": event.type}}),
        ]

    def feed(self, event: ev.Event) -> list[Update]:
        """The updates one UAMP event causes (often none)."""
        if self.reply is not None:
            return []  # a direct reply ends what the task shows
        kind = type(event)
        if kind is ev.ResponseDelta:
            assert isinstance(event, ev.ResponseDelta)
            delta = event.delta
            if isinstance(delta, ty.DeltaText):
                return self._text_delta(delta.text, event.response_id or "response")
            if isinstance(delta, ty.DeltaToolProgress):
                text = delta.tool_progress.text
                return [*self._start(), self._say(text)] if text else []
            if isinstance(delta, ty.DeltaUnknown):
                return self._intent(delta.raw, event.response_id or "response")
            if isinstance(delta, ty.DeltaToolCall | ty.DeltaToolResult):
                return self._note(event)
            return []
        if kind is ev.Progress:
            assert isinstance(event, ev.Progress)
            if event.stage == "ack":
                return []
            if event.message:
                return [*self._start(), self._say(event.message)]
            return self._note(event)
        if kind in (ev.Thinking, ev.ToolCallDone):
            return self._note(event)
        return []

    def _intent(self, raw: dict[str, Any], response_id: str) -> list[Update]:
        kind = raw.get("type")
        if kind == "message" and not self._started:
            self.reply = StoredMessage(
                message_id=self._ids("msg"), role="agent", items=_content(raw)
            )
            return []
        if kind != "artifact":
            return []
        items = _content(raw)
        if not items:
            return []
        task = self.task
        artifact_id = raw.get("artifact_id")
        if not isinstance(artifact_id, str) or not artifact_id:
            artifact_id = f"{response_id}-artifact-{len(task.artifacts) + 1}"
        name = raw.get("name") if isinstance(raw.get("name"), str) else None
        description = raw.get("description")
        append = raw.get("append") is True
        kept = next((a for a in task.artifacts if a.artifact_id == artifact_id), None)
        if kept is None:
            kept = Artifact(
                artifact_id=artifact_id,
                name=name or "",
                description=description if isinstance(description, str) else None,
            )
            task.artifacts.append(kept)
        if kept is self._text:
            self.settle()  # the text streamed so far, then this
        if append:
            kept.items.extend(items)
        else:
            kept.items = list(items)
        if kept is self._text:  # the next text delta makes the text its one item again
            self._items = []
        chunk = Artifact(
            artifact_id=artifact_id,
            name=kept.name,
            items=items,
            description=kept.description,
        )
        update = Update(
            kind="artifact",
            task_id=task.id,
            context_id=task.context_id,
            artifact=chunk,
            append=append,
            last_chunk=raw.get("last_chunk") is True,
        )
        return [*self._start(), update]

    def _text_delta(self, text: str, response_id: str) -> list[Update]:
        if not text:
            return []
        task = self.task
        out = self._start()
        if self._text is None:
            self._text = Artifact(artifact_id=f"{response_id}-text", name="response")
            task.artifacts.append(self._text)
            self._item = ty.TextContent(text="")
        self.grow(text)
        out.append(self._text_chunk(text, last=False))
        return out

    @property
    def _said(self) -> str:
        """The turn's text so far."""
        self.settle()
        return "" if self._item is None else self._item.text

    def more_text(self, text: str) -> Update | None:
        """``feed`` of a text delta that only continues the text artifact, else ``None``.

        The streamed hot path: when the turn has started, its text artifact
        is open and ``text`` is not empty, the one update :meth:`feed` would
        give (the same text artifact grown in place, the same chunk);
        otherwise ``None`` and nothing changes (call :meth:`feed`).
        """
        return self._text_chunk(text, last=False) if self.grow(text) else None

    def grow(self, text: str) -> bool:
        """:meth:`more_text` for a caller that needs no update: the task changes alike.

        ``True`` when the text artifact grew by ``text`` (the update
        :meth:`more_text` would give is the text chunk of the artifact's
        next shape, ``append`` and not ``lastChunk``); ``False`` when
        ``more_text`` would give ``None``, and nothing changed.
        """
        if self._item is None or not text or self.reply is not None:
            return False  # (the item is there once the first text chunk is made)
        self.settle()  # what the grower took comes first
        self._extend(text)
        return True

    def grower(self) -> Callable[[str], object]:
        """:meth:`grow` for a streamed chunk's hot path: ``write`` of a text buffer.

        Only for a caller that knows :meth:`more_text` would give a chunk
        for any text now (the turn's first text chunk went out, it answered
        with no message) and passes non-empty texts. The texts wait in the
        buffer (compact, grown in place) and join the text artifact when the
        task is read (:meth:`A2ATask.settle`) or the run goes on: one C call
        per chunk instead of a method.
        """
        if self._pending is None:
            self._pending = io.StringIO()
        self.task._unsettled = self
        return self._pending.write

    def settle(self) -> None:
        """Put the texts :meth:`grower` took into the text artifact."""
        pending = self._pending
        if pending is not None and pending.tell():
            text = pending.getvalue()
            pending.seek(0)
            pending.truncate()
            self._extend(text)

    def _extend(self, text: str) -> None:
        """The text artifact's one item grows by ``text``, in place.

        The item is this run's own (made with the artifact; readers of the
        task render it at once and keep nothing), so it is changed where it
        is rather than made anew for each delta. Every other reference to
        the text is dropped first, so that CPython extends the string in
        place: a join of all the parts on every delta was quadratic in the
        turn's length.
        """
        item, artifact = self._item, self._text
        assert item is not None and artifact is not None
        said = item.text
        _set_text(item, "")
        said += text
        _set_text(item, said)
        if artifact.items is not self._items:
            # (an artifact delta of the agent's, under the text's id, changed it)
            artifact.items = self._items = [item]

    def _text_chunk(self, text: str, *, last: bool) -> Update:
        assert self._text is not None
        task = self.task
        append = self._sent_text
        self._sent_text = True
        return Update(
            kind="artifact",
            task_id=task.id,
            context_id=task.context_id,
            artifact=Artifact(
                artifact_id=self._text.artifact_id,
                name=self._text.name,
                items=[ty.TextContent(text=text)],
            ),
            append=append,
            last_chunk=last,
            text=text,
        )

    def _close_text(self) -> list[Update]:
        """The closing chunk of the text artifact: empty text, ``lastChunk``."""
        self.settle()
        if self.task._unsettled is self:
            self.task._unsettled = None
        if not self._sent_text:
            return []
        return [self._text_chunk("", last=True)]

    def _answer(self, text: str) -> StoredMessage | None:
        if not text:
            return None
        return StoredMessage(
            message_id=self._ids("msg"), role="agent", items=[ty.TextContent(text=text)]
        )

    def end(self, outcome: ResponseOutcome, timestamp: str | None) -> list[Update]:
        """The updates that end the task's turn, however it ended (:meth:`complete` ...)."""
        output = outcome.tracker.messages()
        if outcome.status == "completed":
            return self.complete(output, timestamp)
        if outcome.status == "requires_action":
            return self.require_input(output, outcome.pending_tool_calls, timestamp)
        if outcome.status == "cancelled":
            return self.cancel(timestamp)
        error = outcome.error
        if error is not None and error.code in PAUSE_CODES:
            return self.pause(PAUSE_CODES[error.code], error.message, output, timestamp)
        failed = error or ty.ErrorInfo(code="internal_error", message="The agent failed.")
        return self.fail(failed, timestamp)

    def complete(self, output: list[ty.Message], timestamp: str | None) -> list[Update]:
        """The turn ended with ``response.done``; ``output`` is what it said."""
        task = self.task
        task.conversation.extend(output)
        if self.reply is not None:
            return []
        answer = self._answer(self._said)
        if answer is not None:
            task.history.append(answer)
        task.pending_tool_calls = []
        task.move(Trigger.COMPLETE, timestamp)
        task.status_message = answer
        return [*self._close_text(), self._status(answer, final=True)]

    def require_input(
        self, output: list[ty.Message], calls: list[ty.ToolInvocation], timestamp: str | None
    ) -> list[Update]:
        """The turn asked the client to run ``calls`` (client tools): pause."""
        task = self.task
        task.conversation.extend(output)
        task.pending_tool_calls = list(calls)
        names = ", ".join(c.name for c in calls)
        request = StoredMessage(
            message_id=self._ids("msg"),
            role="agent",
            items=[
                ty.TextContent(
                    text=f"The agent needs the result of {names}: reply with a data part "
                    '{"call_id": ..., "result": ...} per call.'
                )
            ],
            data=[
                {
                    "tool_calls": [
                        {"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls
                    ]
                }
            ],
        )
        text = self._said
        answer = self._answer(text)
        if answer is not None:
            task.history.append(answer)
        task.history.append(request)
        task.move(Trigger.REQUIRE_INPUT, timestamp)
        task.status_message = request
        return [*self._close_text(), self._status(request, final=True)]

    def pause(
        self, trigger: Trigger, text: str, output: list[ty.Message], timestamp: str | None
    ) -> list[Update]:
        """The agent ended its turn asking for input or authorization, or refusing the task.

        ``trigger`` is one of :data:`PAUSE_CODES`' values; ``text`` (the
        agent's question or reason) becomes the status message and, for a
        pause, the assistant's last word in the conversation the next
        message resumes.
        """
        task = self.task
        said = self._said
        if said:
            task.conversation.extend(output)
        message = self._answer(text or said)
        if message is not None:
            task.history.append(message)
            if trigger is not Trigger.REJECT:
                task.conversation.append(ty.Message(role="assistant", content=text or said))
        task.move(trigger, timestamp)
        task.status_message = message
        return [*self._close_text(), self._status(message, final=True)]

    def ask_human(
        self, ask: Interrupt, message: tuple[str, dict[str, Any]], timestamp: str | None
    ) -> list[Update]:
        """The paused turn asks a person (``interrupt.request``): ``input-required``.

        ``message`` is the status message's text and data payload for every
        interrupt pending (:func:`uamp_proto.adapters.a2a_human.interrupt_message`):
        a second ask while the task waits replaces the status message. The
        update is ``final``: the task waits for a message on it.
        """
        task = self.task
        if all(a.id != ask.id for a in task.pending_interrupts):
            task.pending_interrupts.append(ask)
        text, data = message
        request = StoredMessage(
            message_id=self._ids("msg"),
            role="agent",
            items=[ty.TextContent(text=text)],
            data=[data],
        )
        out = self._start()
        if task.state is TaskState.INPUT_REQUIRED:
            task.timestamp = timestamp
        else:
            task.move(Trigger.REQUIRE_INPUT, timestamp)
        task.history.append(request)
        task.status_message = request
        return [*out, self._status(request, final=True)]

    def human_answered(self, interrupt_id: str, timestamp: str | None) -> list[Update]:
        """An interrupt was resolved (from any transport): back to ``working`` when none is left."""
        task = self.task
        task.pending_interrupts = [a for a in task.pending_interrupts if a.id != interrupt_id]
        if task.pending_interrupts or task.state is not TaskState.INPUT_REQUIRED:
            return []
        task.move(Trigger.RESUME, timestamp)
        task.status_message = None
        return [self._status()]

    def fail(self, error: ty.ErrorInfo, timestamp: str | None) -> list[Update]:
        """The turn failed with ``error``."""
        task = self.task
        task.error = error
        message = StoredMessage(
            message_id=self._ids("msg"),
            role="agent",
            items=[ty.TextContent(text=error.message)],
            metadata={"code": error.code},
        )
        task.move(Trigger.FAIL, timestamp)
        task.status_message = message
        return [
            *self._close_text(),
            self._status(message, final=True, metadata={"code": error.code}),
        ]

    def cancel(self, timestamp: str | None) -> list[Update]:
        """The turn was cancelled."""
        task = self.task
        if task.state is not TaskState.CANCELED:
            task.move(Trigger.CANCEL, timestamp)
        task.status_message = None
        return [*self._close_text(), self._status(final=True)]
