"""AG-UI <-> UAMP, sans-IO (the AG-UI event protocol; UAMP 1.3).

Theory of operation
-------------------
An AG-UI client POSTs a ``RunAgentInput`` (``threadId``, ``runId``,
``messages``, ``tools``, ``state``, ``context``, ``forwardedProps``, camelCase
as the TypeScript client sends it) and reads a stream of AG-UI events.
:func:`parse_run_input` validates the body and turns it into a UAMP
:class:`~uamp_proto.responder.TurnRequest` (:func:`turn_request`); a body that
is not a RunAgentInput at all (not an object, no thread or run id) raises
:class:`AguiError` with ``started=False`` (answer HTTP 400), anything wrong
deeper raises it with ``started=True`` (answer ``RUN_STARTED`` then
``RUN_ERROR``). The input side lives in :mod:`uamp_proto.adapters.agui_input`;
its names import from here too.

:class:`RunEncoder` turns the run's UAMP events into AG-UI events. It is a
small state machine whose phases move by :data:`PHASES`; inside a run it
tracks what is open -- a text message, a reasoning block and its message,
tool calls, steps -- and closes it before opening something that cannot
interleave with it, and always before ``RUN_FINISHED`` / ``RUN_ERROR``, so
every ``*_START`` has its ``*_END`` whatever the agent emitted.

========================================  =====================================================
UAMP event                                AG-UI events
========================================  =====================================================
(run start)                               ``RUN_STARTED``; ``STATE_SNAPSHOT`` of the input state
``response.delta`` text                   ``TEXT_MESSAGE_START`` (once) + ``TEXT_MESSAGE_CONTENT``
``thinking``                              ``REASONING_START``, ``REASONING_MESSAGE_START`` (once),
                                          ``REASONING_MESSAGE_CONTENT``; a complete (non-delta)
                                          thought starts a new reasoning message
``response.delta`` tool_call fragments    ``TOOL_CALL_START`` (once, ``parentMessageId``
                                          naming the assistant message making the
                                          call) + ``TOOL_CALL_ARGS``
``tool.call`` (client tool)               ``TOOL_CALL_START``/``ARGS``/``END``; listed as
                                          pending in ``RUN_FINISHED.outcome``
``response.delta`` tool_result            ``TOOL_CALL_END`` (if open) + ``TOOL_CALL_RESULT``
``tool.call_done``                        ``TOOL_CALL_END`` (if open)
``response.delta`` tool_progress          ``ACTIVITY_SNAPSHOT`` (``TOOL_PROGRESS``)
``progress`` target ``state``             ``STATE_SNAPSHOT`` / ``STATE_DELTA`` (see below)
``progress`` stage start/end              ``STEP_STARTED`` / ``STEP_FINISHED``
                                          (also stages ``step_start``/``step_end``)
``progress`` other stages                 ``ACTIVITY_SNAPSHOT`` (``PROGRESS``)
``usage.delta``                           summed into ``RUN_FINISHED.usage``
other known events (audio, payment ...)   ``CUSTOM`` named after the UAMP event type
unknown delta types                       ``RAW`` (``source: "uamp"``)
(run end)                                 ``MESSAGES_SNAPSHOT`` (the input messages, then
                                          the run's, with exactly the stream's ids),
                                          ``RUN_FINISHED``
(run failure)                             ``RUN_ERROR``
========================================  =====================================================

**Agent state.** UAMP has no state event, so an agent reports AG-UI state
through ``progress`` events with ``target="state"`` and a JSON text in
``message`` (build them with :func:`state_snapshot`, :func:`state_delta`,
:func:`state_update`): stage ``snapshot`` replaces the state
(``STATE_SNAPSHOT``), stage ``delta`` carries RFC 6902 operations
(``STATE_DELTA``), stage ``update`` carries the whole new state and the
encoder sends the difference from the last known state as a
``STATE_DELTA`` (:func:`diff_state`). The agent sees the input state in
``request.metadata["agui_state"]``.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Mapping
from typing import Any

import orjson

from .. import events as ev
from .. import jsonpatch
from .. import types as ty
from ..codec import unstructure
from ..errors import LocalProtocolError
from ..ids import IdSource
from ..outcome import ResponseOutcome
from ..payment import BALANCE_EVENT, balance_fields
from ..response import add_usage
from ..saved_response import AGUI_SIGNATURE_EVENT
from ..sse import encode_json
from ._human import (
    Answered,
    AnswerError,
    Ask,
    answer_from_payload,
    describe,
    dismissed,
    is_approval,
    rfc3339,
)
from .agui_input import AguiError, RunInput, parse_run_input, turn_request

_RUN_BOUNDARIES = (ev.ResponseCreated, ev.ResponseDone, ev.ResponseCancelled, ev.ResponseErrorEvent)

__all__ = [
    "PHASES",
    "STATE_TARGET",
    "AguiError",
    "Phase",
    "RunEncoder",
    "RunInput",
    "apply_patch",
    "closing_events",
    "diff_state",
    "encode_sse",
    "interrupt_entry",
    "parse_resume",
    "parse_run_input",
    "state_delta",
    "state_snapshot",
    "state_update",
    "turn_request",
]

#: The ``progress.target`` that carries AG-UI agent state.
STATE_TARGET = "state"
_STEP_START = frozenset({"start", "started", "begin", "step_start"})
_STEP_END = frozenset(
    {"end", "done", "finished", "complete", "completed", "failed", "error", "step_end"}
)
# --- agent state (progress target "state") ------------------------------------------------------


def state_snapshot(state: Any) -> ev.Progress:
    """The UAMP event by which an agent replaces its AG-UI state."""
    return ev.Progress(target=STATE_TARGET, stage="snapshot", message=orjson.dumps(state).decode())


def state_delta(patch: list[dict[str, Any]]) -> ev.Progress:
    """The UAMP event by which an agent sends RFC 6902 operations on its state."""
    return ev.Progress(target=STATE_TARGET, stage="delta", message=orjson.dumps(patch).decode())


def state_update(state: Any) -> ev.Progress:
    """The UAMP event by which an agent reports its new state (sent as a delta)."""
    return ev.Progress(target=STATE_TARGET, stage="update", message=orjson.dumps(state).decode())


def diff_state(old: Any, new: Any) -> list[dict[str, Any]]:
    """An RFC 6902 patch turning ``old`` into ``new`` (:func:`uamp_proto.jsonpatch.diff`)."""
    return jsonpatch.diff(old, new)


#: Apply RFC 6902 operations (:func:`uamp_proto.jsonpatch.apply`).
apply_patch = jsonpatch.apply


# --- the run encoder ------------------------------------------------------------------------------


class Phase(enum.Enum):
    """Where a run's event stream is."""

    READY = "ready"
    RUNNING = "running"
    FINISHED = "finished"
    ERRORED = "errored"


#: ``{(phase, input): new phase}``; a missing key is a local protocol error.
PHASES: dict[tuple[Phase, str], Phase] = {
    (Phase.READY, "start"): Phase.RUNNING,
    (Phase.READY, "error"): Phase.ERRORED,
    (Phase.RUNNING, "event"): Phase.RUNNING,
    (Phase.RUNNING, "finish"): Phase.FINISHED,
    (Phase.RUNNING, "error"): Phase.ERRORED,
}

Out = list[dict[str, Any]]


class RunEncoder:
    """UAMP events of one run -> AG-UI events (camelCase dicts); see the module doc.

    Use: :meth:`start`, then :meth:`feed` per event, then :meth:`finish`
    (or :meth:`error` at any point, before or after start).

    Args:
        thread_id: The run's thread id.
        run_id: The run's id.
        ids: Makes message and reasoning ids.
        parent_run_id: Echoed in ``RUN_STARTED``.
    """

    def __init__(
        self, thread_id: str, run_id: str, ids: IdSource, *, parent_run_id: str | None = None
    ) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self.parent_run_id = parent_run_id
        self.phase = Phase.READY
        self._ids = ids
        self._text: str | None = None
        self._reasoning: str | None = None
        self._reasoning_message: str | None = None
        self._reasoning_text: list[str] = []
        self._tools: dict[str, str] = {}  # open tool calls: id -> name
        self._started_tools: set[str] = set()
        self._streamed_args: dict[str, bool] = {}
        self._steps: dict[str, str] = {}  # open steps: key -> name
        self._activities: dict[str, str] = {}  # activity key -> message id
        self._tool_progress: dict[str, list[str]] = {}
        self._pending: list[str] = []
        self._state: Any = None
        self._usage: ty.UsageStats | None = None
        self._input_messages: list[dict[str, Any]] = []
        self._output: list[dict[str, Any]] = []
        self._assistant: dict[str, Any] | None = None
        self._input: dict[str, Any] | None = None

    # --- phases -----------------------------------------------------------

    def _move(self, what: str) -> None:
        new = PHASES.get((self.phase, what))
        if new is None:
            raise LocalProtocolError(
                f"cannot {what} a run that is {self.phase.value}", code="invalid_agui_sequence"
            )
        self.phase = new

    @property
    def open_items(self) -> dict[str, list[str]]:
        """What is open right now (for tests and debugging)."""
        return {
            "text": [self._text] if self._text else [],
            "reasoning": [r for r in (self._reasoning, self._reasoning_message) if r],
            "tools": list(self._tools),
            "steps": list(self._steps.values()),
        }

    def start(self, run: RunInput | None = None) -> Out:
        """``RUN_STARTED`` (and ``STATE_SNAPSHOT`` of the input state)."""
        self._move("start")
        if run is not None:
            self._input = run.raw
        out: Out = [self._run_started()]
        if run is not None:
            self._input_messages = list(run.raw_messages)
            if run.has_state:
                self._state = run.state
                out.append({"type": "STATE_SNAPSHOT", "snapshot": run.state})
        return out

    def _run_started(self) -> dict[str, Any]:
        started: dict[str, Any] = {
            "type": "RUN_STARTED",
            "threadId": self.thread_id,
            "runId": self.run_id,
        }
        if self.parent_run_id:
            started["parentRunId"] = self.parent_run_id
        if self._input:
            started["input"] = self._input  # the exact RunAgentInput of this run
        return started

    # --- closing ------------------------------------------------------------

    def _close_text(self) -> Out:
        if self._text is None:
            return []
        mid, self._text = self._text, None
        return [{"type": "TEXT_MESSAGE_END", "messageId": mid}]

    def _end_reasoning_message(self) -> Out:
        """End the open reasoning message, if any, keeping its text in the run's output."""
        mid = self._reasoning_message
        if mid is None:
            return []
        self._output.append(
            {"id": mid, "role": "reasoning", "content": "".join(self._reasoning_text)}
        )
        self._reasoning_message = None
        self._reasoning_text = []
        return [{"type": "REASONING_MESSAGE_END", "messageId": mid}]

    def _close_reasoning(self) -> Out:
        out = self._end_reasoning_message()
        if self._reasoning is not None:
            out.append({"type": "REASONING_END", "messageId": self._reasoning})
            self._reasoning = None
        return out

    def _close_tools(self) -> Out:
        out: Out = [{"type": "TOOL_CALL_END", "toolCallId": cid} for cid in self._tools]
        self._tools.clear()
        return out

    def _close_all(self) -> Out:
        out = [*self._close_tools(), *self._close_text(), *self._close_reasoning()]
        for name in reversed(list(self._steps.values())):
            out.append({"type": "STEP_FINISHED", "stepName": name})
        self._steps.clear()
        return out

    # --- feeding ------------------------------------------------------------

    def feed(self, event: ev.Event) -> Out:
        """The AG-UI events for one UAMP event of the run."""
        self._move("event")
        kind = type(event)
        if kind is ev.ResponseDelta:
            assert isinstance(event, ev.ResponseDelta)
            return self._delta(event.delta)
        if kind is ev.Thinking:
            assert isinstance(event, ev.Thinking)
            return self._thinking(event)
        if kind is ev.ToolCall:
            assert isinstance(event, ev.ToolCall)
            return self._client_call(event)
        if kind is ev.ToolCallDone:
            assert isinstance(event, ev.ToolCallDone)
            if event.call_id in self._tools:
                del self._tools[event.call_id]
                return [{"type": "TOOL_CALL_END", "toolCallId": event.call_id}]
            return []
        if kind is ev.Progress:
            assert isinstance(event, ev.Progress)
            return self._progress(event)
        if kind is ev.UsageDelta:
            assert isinstance(event, ev.UsageDelta)
            self._usage = add_usage(self._usage, event.delta)
            return []
        if kind in _RUN_BOUNDARIES:
            return []  # the binding ends the run with finish() / error()
        return [{"type": "CUSTOM", "name": event.type, "value": _event_value(event)}]

    def _delta(self, delta: ty.Delta) -> Out:
        if isinstance(delta, ty.DeltaText):
            if not delta.text:
                return []
            out = [*self._close_tools(), *self._close_reasoning()]
            if self._text is None:
                self._text = self._ids("msg")
                self._assistant = {"id": self._text, "role": "assistant", "content": ""}
                self._output.append(self._assistant)
                out.append(
                    {"type": "TEXT_MESSAGE_START", "messageId": self._text, "role": "assistant"}
                )
            assert self._assistant is not None
            self._assistant["content"] += delta.text
            out.append(
                {"type": "TEXT_MESSAGE_CONTENT", "messageId": self._text, "delta": delta.text}
            )
            return out
        if isinstance(delta, ty.DeltaToolCall):
            frag = delta.tool_call
            out = self._open_tool(frag.id, frag.name or "tool")
            if frag.arguments:
                self._streamed_args[frag.id] = True
                self._append_args(frag.id, frag.arguments)
                out.append(
                    {"type": "TOOL_CALL_ARGS", "toolCallId": frag.id, "delta": frag.arguments}
                )
            return out
        if isinstance(delta, ty.DeltaToolResult):
            res = delta.tool_result
            out = []
            if res.call_id in self._tools:
                del self._tools[res.call_id]
                out.append({"type": "TOOL_CALL_END", "toolCallId": res.call_id})
            mid = self._ids("msg")
            content = res.result or ""
            out.append(
                {
                    "type": "TOOL_CALL_RESULT",
                    "messageId": mid,
                    "toolCallId": res.call_id,
                    "content": content,
                    "role": "tool",
                }
            )
            self._output.append(
                {"id": mid, "role": "tool", "toolCallId": res.call_id, "content": content}
            )
            self._assistant = None  # text after a result is a new assistant message
            return out
        if isinstance(delta, ty.DeltaToolProgress):
            prog = delta.tool_progress
            texts = self._tool_progress.setdefault(prog.call_id, [])
            texts.append(prog.text)
            return [
                self._activity(
                    f"tool:{prog.call_id}",
                    "TOOL_PROGRESS",
                    {"toolCallId": prog.call_id, "progress": list(texts)},
                )
            ]
        if isinstance(delta, ty.DeltaAudio):
            return [
                {"type": "CUSTOM", "name": "response.delta.audio", "value": {"audio": delta.audio}}
            ]
        assert isinstance(delta, ty.DeltaUnknown)
        return [{"type": "RAW", "event": delta.raw, "source": "uamp"}]

    def _open_tool(self, call_id: str, name: str) -> Out:
        if call_id in self._started_tools:
            return []
        out = [*self._close_text(), *self._close_reasoning()]
        if self._assistant is None:
            # A call with no text before it: the assistant message that makes
            # it is opened here, and the client learns its id from
            # parentMessageId -- the id MESSAGES_SNAPSHOT uses for it.
            self._assistant = {"id": self._ids("msg"), "role": "assistant"}
            self._output.append(self._assistant)
        parent = self._assistant["id"]
        self._assistant.setdefault("toolCalls", []).append(
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
        )
        self._started_tools.add(call_id)
        self._tools[call_id] = name
        start: dict[str, Any] = {
            "type": "TOOL_CALL_START",
            "toolCallId": call_id,
            "toolCallName": name,
            "parentMessageId": parent,
        }
        out.append(start)
        return out

    def _append_args(self, call_id: str, text: str, *, replace: bool = False) -> None:
        for message in self._output:
            for call in message.get("toolCalls", ()):
                if call["id"] == call_id:
                    fn = call["function"]
                    fn["arguments"] = text if replace else fn["arguments"] + text

    def _client_call(self, event: ev.ToolCall) -> Out:
        out = self._open_tool(event.call_id, event.name)
        if event.arguments and not self._streamed_args.get(event.call_id):
            self._append_args(event.call_id, event.arguments, replace=True)
            out.append(
                {"type": "TOOL_CALL_ARGS", "toolCallId": event.call_id, "delta": event.arguments}
            )
        if event.call_id in self._tools:
            del self._tools[event.call_id]
            out.append({"type": "TOOL_CALL_END", "toolCallId": event.call_id})
        if event.call_id not in self._pending:
            self._pending.append(event.call_id)
        return out

    def _thinking(self, event: ev.Thinking) -> Out:
        if not event.content:
            return []
        out = [*self._close_tools(), *self._close_text()]
        if not event.is_delta:
            # A complete thought: end the current reasoning message, start another.
            out += self._end_reasoning_message()
        if self._reasoning is None:
            self._reasoning = self._ids("reasoning")
            out.append({"type": "REASONING_START", "messageId": self._reasoning})
        if self._reasoning_message is None:
            self._reasoning_message = self._ids("msg")
            out.append(
                {
                    "type": "REASONING_MESSAGE_START",
                    "messageId": self._reasoning_message,
                    "role": "reasoning",
                }
            )
        self._reasoning_text.append(event.content)
        out.append(
            {
                "type": "REASONING_MESSAGE_CONTENT",
                "messageId": self._reasoning_message,
                "delta": event.content,
            }
        )
        return out

    def _activity(self, key: str, kind: str, content: dict[str, Any]) -> dict[str, Any]:
        mid = self._activities.get(key)
        if mid is None:
            mid = self._activities[key] = self._ids("activity")
        return {
            "type": "ACTIVITY_SNAPSHOT",
            "messageId": mid,
            "activityType": kind,
            "content": content,
        }

    def _progress(self, event: ev.Progress) -> Out:
        if event.stage == "ack":
            return []  # delta-window acknowledgements are not progress
        if event.target == STATE_TARGET and event.stage in ("snapshot", "delta", "update"):
            return self._state_event(event)
        key = event.target + (f":{event.target_id}" if event.target_id else "")
        stage = (event.stage or "").lower()
        if stage.startswith("step_") and event.step is not None:
            # A UAP step of the agent (uamp_agents.bridge): one AG-UI step each.
            key = f"{key}#{event.step}"
        if stage in _STEP_START and key not in self._steps:
            name = f"step {event.step}" if stage == "step_start" else (event.message or key)
            self._steps[key] = name
            return [{"type": "STEP_STARTED", "stepName": name}]
        if stage in _STEP_END and key in self._steps:
            return [{"type": "STEP_FINISHED", "stepName": self._steps.pop(key)}]
        content = {
            k: v
            for k, v in (
                ("target", event.target),
                ("targetId", event.target_id),
                ("stage", event.stage),
                ("message", event.message),
                ("percent", event.percent),
                ("step", event.step),
                ("totalSteps", event.total_steps),
            )
            if v is not None
        }
        return [self._activity(f"progress:{key}", "PROGRESS", content)]

    def _state_event(self, event: ev.Progress) -> Out:
        try:
            value = orjson.loads(event.message or "null")
        except orjson.JSONDecodeError:
            return [{"type": "CUSTOM", "name": event.type, "value": _event_value(event)}]
        if event.stage == "snapshot":
            self._state = value
            return [{"type": "STATE_SNAPSHOT", "snapshot": value}]
        if event.stage == "delta":
            if not isinstance(value, list) or not all(
                isinstance(op, dict) and "op" in op and "path" in op for op in value
            ):
                return [{"type": "CUSTOM", "name": event.type, "value": _event_value(event)}]
            # The client may know a state we do not: pass the patch on anyway.
            with contextlib.suppress(ValueError, KeyError, IndexError, TypeError):
                self._state = apply_patch(self._state, value)
            return [{"type": "STATE_DELTA", "delta": value}]
        patch = diff_state(self._state, value)
        self._state = value
        return [{"type": "STATE_DELTA", "delta": patch}] if patch else []

    # --- ending -------------------------------------------------------------

    def finish(
        self, *, cancelled: bool = False, result: Any = None, interrupts: list[Ask] | None = None
    ) -> Out:
        """Close everything, then ``MESSAGES_SNAPSHOT`` and ``RUN_FINISHED``.

        Args:
            cancelled: The run was stopped (outcome ``cancelled``).
            result: ``RUN_FINISHED.result``; default: the text the run's
                assistant messages said (none for a cancelled or paused run,
                or one that said nothing).
            interrupts: The run paused on these (outcome ``interrupt``, each
                rendered by :func:`interrupt_entry`; the next run's
                ``resume`` answers them).
        """
        self._move("finish")
        out = self._close_all()
        out.append(
            {"type": "MESSAGES_SNAPSHOT", "messages": [*self._input_messages, *self._output]}
        )
        done: dict[str, Any] = {
            "type": "RUN_FINISHED",
            "threadId": self.thread_id,
            "runId": self.run_id,
        }
        if result is None and not cancelled and not interrupts:
            # The run's answer: the text of its assistant messages.
            answer = "".join(
                m["content"]
                for m in self._output
                if m.get("role") == "assistant" and isinstance(m.get("content"), str)
            )
            result = answer or None
        if result is not None:
            done["result"] = result
        if cancelled:
            done["outcome"] = {"type": "cancelled"}
        elif interrupts:
            done["outcome"] = {
                "type": "interrupt",
                "interrupts": [interrupt_entry(ask) for ask in interrupts],
            }
        elif self._pending:
            done["outcome"] = {"type": "success", "pendingToolCallIds": list(self._pending)}
        usage = self._usage
        if usage is not None and (
            usage.input_tokens is not None or usage.output_tokens is not None
        ):
            entry = {
                k: v
                for k, v in (
                    ("inputTokens", usage.input_tokens),
                    ("outputTokens", usage.output_tokens),
                    (
                        "totalTokens",
                        usage.total_tokens
                        if usage.total_tokens is not None
                        else (usage.input_tokens or 0) + (usage.output_tokens or 0),
                    ),
                    ("cachedInputTokens", usage.cached_tokens),
                )
                if v is not None
            }
            done["usage"] = [entry]
        out.append(done)
        return out

    def error(
        self, message: str, code: str | None = None, *, metadata: Mapping[str, Any] | None = None
    ) -> Out:
        """Close everything, then ``RUN_ERROR`` (after ``RUN_STARTED`` if not started yet)."""
        out: Out = [self._run_started()] if self.phase is Phase.READY else []
        self._move("error")
        out.extend(self._close_all())
        err: dict[str, Any] = {"type": "RUN_ERROR", "message": message}
        if code is not None:
            err["code"] = code
        if metadata:
            err["metadata"] = dict(metadata)
        out.append(err)
        return out


def _event_value(event: ev.Event) -> Any:
    value = unstructure(event)
    if isinstance(value, dict):
        for key in ("event_id", "session_id", "response_id"):
            value.pop(key, None)
    return value


# --- interrupts (AG-UI's interrupt-aware run lifecycle) ----------------------------------------

#: ``Interrupt.reason`` of a tool call waiting for approval / of a question.
REASON_TOOL_APPROVAL = "tool_approval"
REASON_INPUT_REQUIRED = "input_required"


def interrupt_entry(ask: Ask) -> dict[str, Any]:
    """One ``Interrupt`` of a ``RUN_FINISHED`` interrupt outcome (``@ag-ui/core`` 1.0).

    ``id``, ``reason`` (``tool_approval`` or ``input_required``),
    ``message``, ``toolCallId`` (approvals), ``responseSchema`` (an approval
    answers ``{"approved": bool, "editedArgs"?: object, "reason"?: str}``),
    ``expiresAt`` (ISO 8601); ``metadata`` names the tool and its arguments.
    """
    entry: dict[str, Any] = {
        "id": ask.id,
        "reason": REASON_TOOL_APPROVAL if is_approval(ask) else REASON_INPUT_REQUIRED,
        "message": describe(ask),
    }
    if is_approval(ask):
        if ask.call_id is not None:
            entry["toolCallId"] = ask.call_id
        entry["responseSchema"] = {
            "type": "object",
            "properties": {
                "approved": {"type": "boolean"},
                "editedArgs": {"type": "object"},
                "reason": {"type": "string"},
            },
            "required": ["approved"],
        }
        entry["metadata"] = {"tool": ask.tool_name, "arguments": ask.arguments or {}}
    elif ask.schema is not None:
        entry["responseSchema"] = dict(ask.schema)
    if ask.expires_at is not None:
        entry["expiresAt"] = rfc3339(ask.expires_at)
    return entry


def parse_resume(run: RunInput, pending: Mapping[str, Ask]) -> list[Answered]:
    """The answers a run's ``resume`` entries give to the ``pending`` interrupts.

    ``{"interruptId", "status": "resolved", "payload"}`` answers with the
    payload (an approval: ``true``/``false`` or ``{"approved", "editedArgs",
    "reason"}``); ``"status": "cancelled"`` dismisses it (an approval is then
    denied). An entry naming an interrupt that is not pending is refused,
    exactly as an unknown one (it may be another principal's).

    Raises:
        AguiError: (``started=True``, code ``invalid_resume``) naming the
            entry at fault.
    """

    def fail(message: str) -> AguiError:
        return AguiError(
            message,
            code="invalid_resume",
            started=True,
            thread_id=run.thread_id,
            run_id=run.run_id,
        )

    answers: list[Answered] = []
    seen: set[str] = set()
    for i, entry in enumerate(run.resume):
        iid, status = entry.get("interruptId"), entry.get("status")
        if not isinstance(iid, str) or iid not in pending:
            raise fail(f"'resume[{i}].interruptId' names no pending interrupt of this thread.")
        if iid in seen:
            raise fail(f"'resume[{i}]' answers {iid!r} a second time.")
        seen.add(iid)
        ask = pending[iid]
        if status == "cancelled":
            answers.append((iid, dismissed(ask)))
        elif status == "resolved":
            try:
                answers.append((iid, answer_from_payload(ask, entry.get("payload"))))
            except AnswerError as exc:
                raise fail(f"'resume[{i}].payload': {exc.args[0]}") from None
        else:
            raise fail(f'\'resume[{i}].status\' must be "resolved" or "cancelled".')
    return answers


def closing_events(
    encoder: RunEncoder, outcome: ResponseOutcome, signature: str | None = None
) -> list[dict[str, Any]]:
    """The events that end a run after its turn ended as ``outcome``.

    ``RUN_ERROR`` for a failed turn, else the encoder's finish (``RUN_FINISHED``
    last). A ``CUSTOM`` event carries the response ``signature`` (a completed
    run only) and another the payer's ``payment.balance``, both before the
    last event.
    """
    if outcome.status == "failed":
        error = outcome.error
        code = error.code if error else "internal_error"
        message = error.message if error else "The agent failed."
        out = encoder.error(message, code)
    else:
        cancelled = outcome.status == "cancelled"
        out = encoder.finish(cancelled=cancelled)
        if signature is not None and not cancelled:
            signed = {"signature": signature}
            out.insert(-1, {"type": "CUSTOM", "name": AGUI_SIGNATURE_EVENT, "value": signed})
    if outcome.balance is not None:
        balance = balance_fields(outcome.balance)
        out.insert(-1, {"type": "CUSTOM", "name": BALANCE_EVENT, "value": balance})
    return out


def encode_sse(events: list[dict[str, Any]], now: float) -> bytes:
    """``events`` as SSE frames, each stamped ``timestamp`` (ms since the epoch; ``now`` in s)."""
    stamp = int(now * 1000)
    return b"".join([encode_json(orjson.dumps({**e, "timestamp": stamp})) for e in events])
