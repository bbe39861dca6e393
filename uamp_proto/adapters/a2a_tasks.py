"""An A2A task: its states, the moves between them, and what a server keeps of it.

A task is ``submitted``, then ``working`` while the agent runs, and ends
``completed``, ``failed``, ``canceled`` or ``rejected`` -- or pauses
``input-required`` (or ``auth-required``) until a message on it resumes it.
The legal moves are the table :data:`TRANSITIONS`; :func:`transition` raises
for any other (cancelling a finished task is A2A's "task not cancelable").
:class:`A2ATask` is the task as a store keeps it (history, artifacts, the
UAMP conversation, what a paused task waits on) and :class:`Update` one
change of it to tell subscribers; neither is a wire object
(:mod:`~uamp_proto.adapters.a2a_render` writes them in a dialect,
:mod:`~uamp_proto.adapters.a2a_records` as a shared store's JSON).
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any

import attrs

from .. import types as ty
from ..errors import LocalProtocolError
from ..interrupts import Interrupt
from .a2a_parts import A2AMessage
from .a2a_rpc import TASK_NOT_CANCELABLE, UNSUPPORTED_OPERATION, A2AError

if TYPE_CHECKING:
    from .a2a_run import TaskRun

__all__ = [
    "TERMINAL_STATES",
    "TRANSITIONS",
    "A2ATask",
    "Artifact",
    "StoredMessage",
    "TaskState",
    "Trigger",
    "Update",
    "stored_message",
    "transition",
]

# --- the task state machine ----------------------------------------------------------------


class TaskState(enum.Enum):
    """A task's lifecycle state; values are the 0.3 wire spellings."""

    SUBMITTED = "submitted"
    WORKING = "working"
    INPUT_REQUIRED = "input-required"
    COMPLETED = "completed"
    CANCELED = "canceled"
    FAILED = "failed"
    REJECTED = "rejected"
    AUTH_REQUIRED = "auth-required"

    @property
    def v1(self) -> str:
        """The 1.0 (ProtoJSON enum) spelling: ``TASK_STATE_INPUT_REQUIRED`` ..."""
        return "TASK_STATE_" + self.name

    @property
    def rest(self) -> str:
        """The spelling of spec 004's REST events (``running`` for working)."""
        return "running" if self is TaskState.WORKING else self.value

    @property
    def is_terminal(self) -> bool:
        """Whether no further transition is possible."""
        return self in TERMINAL_STATES

    @property
    def is_interrupted(self) -> bool:
        """Whether the task waits for the client (``input-required``/``auth-required``)."""
        return self in (TaskState.INPUT_REQUIRED, TaskState.AUTH_REQUIRED)


TERMINAL_STATES = frozenset(
    {TaskState.COMPLETED, TaskState.CANCELED, TaskState.FAILED, TaskState.REJECTED}
)


class Trigger(enum.Enum):
    """What moves a task from one state to the next."""

    START = "start"  #: the agent's turn begins
    REQUIRE_INPUT = "require_input"  #: the turn ended asking for input (or client tool results)
    REQUIRE_AUTH = "require_auth"  #: the turn ended asking for authorization
    RESUME = "resume"  #: a new message continues a paused task
    COMPLETE = "complete"  #: the turn ended with ``response.done``
    FAIL = "fail"  #: the turn ended with ``response.error`` (or never started)
    CANCEL = "cancel"  #: the client cancelled
    REJECT = "reject"  #: the server or the agent refused the task


#: ``{state: {trigger: new state}}``; a missing key is an illegal move.
TRANSITIONS: dict[TaskState, dict[Trigger, TaskState]] = {
    TaskState.SUBMITTED: {
        Trigger.START: TaskState.WORKING,
        Trigger.FAIL: TaskState.FAILED,
        Trigger.CANCEL: TaskState.CANCELED,
        Trigger.REJECT: TaskState.REJECTED,
    },
    TaskState.WORKING: {
        Trigger.REQUIRE_INPUT: TaskState.INPUT_REQUIRED,
        Trigger.REQUIRE_AUTH: TaskState.AUTH_REQUIRED,
        Trigger.REJECT: TaskState.REJECTED,
        Trigger.COMPLETE: TaskState.COMPLETED,
        Trigger.FAIL: TaskState.FAILED,
        Trigger.CANCEL: TaskState.CANCELED,
    },
    TaskState.INPUT_REQUIRED: {
        Trigger.RESUME: TaskState.WORKING,
        Trigger.FAIL: TaskState.FAILED,
        Trigger.CANCEL: TaskState.CANCELED,
    },
    TaskState.AUTH_REQUIRED: {
        Trigger.RESUME: TaskState.WORKING,
        Trigger.FAIL: TaskState.FAILED,
        Trigger.CANCEL: TaskState.CANCELED,
    },
}


def transition(state: TaskState, trigger: Trigger) -> TaskState:
    """The state after ``trigger``.

    Raises:
        A2AError: :data:`TASK_NOT_CANCELABLE` when cancelling a finished task;
            :data:`UNSUPPORTED_OPERATION` when resuming a task that is not
            paused.
        LocalProtocolError: any other move the table does not list.
    """
    new = TRANSITIONS.get(state, {}).get(trigger)
    if new is not None:
        return new
    if trigger is Trigger.CANCEL:
        raise A2AError(
            TASK_NOT_CANCELABLE,
            f"The task is {state.value} and can no longer be canceled.",
            http_status=409,
        )
    if trigger is Trigger.RESUME:
        raise A2AError(
            UNSUPPORTED_OPERATION,
            f"The task is {state.value}; only a task that is input-required can take "
            "another message.",
            http_status=409,
        )
    raise LocalProtocolError(
        f"task cannot go from {state.value} on {trigger.value}", code="invalid_task_transition"
    )


# --- tasks -------------------------------------------------------------------------------------


@attrs.define(kw_only=True)
class StoredMessage:
    """A message kept in a task's history (dialect-neutral)."""

    message_id: str
    role: str  # "user" | "agent"
    items: list[ty.ContentItem]
    data: list[Any] = attrs.field(factory=list)
    metadata: dict[str, Any] | None = None


def stored_message(message: A2AMessage) -> StoredMessage:
    """A received message as a task's history keeps it."""
    return StoredMessage(
        message_id=message.message_id,
        role=message.role,
        items=list(message.items),
        data=list(message.data),
        metadata=message.metadata,
    )


@attrs.define(kw_only=True)
class Artifact:
    """An artifact of a task: accumulated output of one kind."""

    artifact_id: str
    name: str
    items: list[ty.ContentItem] = attrs.field(factory=list)
    description: str | None = None


@attrs.define(kw_only=True)
class A2ATask:
    """One task as the store keeps it.

    Attributes:
        id: The task id.
        context_id: Its conversation id.
        agent: The agent that runs it.
        state: The current :class:`TaskState`.
        timestamp: RFC 3339 time of the last state change.
        status_message: The message attached to the current status.
        history: User and agent messages, in order.
        artifacts: Output artifacts.
        conversation: The UAMP conversation so far (for resuming and for
            later tasks in the same context).
        pending_tool_calls: Client tool calls an ``input-required`` task waits on.
        pending_interrupts: The interrupts (a tool call to approve, a
            question) an ``input-required`` task waits on while its turn is
            paused (:mod:`uamp_proto.adapters.a2a_human`).
        error: The error of a failed task.
        tools: Client tools declared for the task (``metadata.tools``).
        push_configs: Its push-notification configs by id (1.0
            ``TaskPushNotificationConfig`` fields: ``id``, ``url``,
            ``token``, ``authentication``).
    """

    id: str
    context_id: str
    agent: str
    state: TaskState = TaskState.SUBMITTED
    timestamp: str | None = None
    status_message: StoredMessage | None = None
    history: list[StoredMessage] = attrs.field(factory=list)
    artifacts: list[Artifact] = attrs.field(factory=list)
    conversation: list[ty.Message] = attrs.field(factory=list)
    pending_tool_calls: list[ty.ToolInvocation] = attrs.field(factory=list)
    pending_interrupts: list[Interrupt] = attrs.field(factory=list)
    error: ty.ErrorInfo | None = None
    tools: list[ty.ToolDefinition] = attrs.field(factory=list)
    metadata: dict[str, Any] | None = None
    push_configs: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    #: A turn that streams text it has not put into its text artifact yet.
    _unsettled: TaskRun | None = attrs.field(default=None, init=False, eq=False, repr=False)

    def settle(self) -> None:
        """Put the text a running turn streamed into its text artifact: before reading artifacts.

        :func:`render_task` and :func:`~uamp_proto.adapters.a2a_records.task_to_json`
        do it (see :meth:`TaskRun.grower`).
        """
        run = self._unsettled
        if run is not None:
            run.settle()

    def move(self, trigger: Trigger, timestamp: str | None = None) -> TaskState:
        """Apply ``trigger`` (see :func:`transition`) and stamp the time."""
        self.state = transition(self.state, trigger)
        self.timestamp = timestamp
        return self.state


@attrs.frozen(kw_only=True)
class Update:
    """One change of a task to tell subscribers about.

    ``kind`` is ``"status"`` (state and optional message; ``final`` when the
    task finished or paused) or ``"artifact"`` (``artifact`` holds only the
    new parts; ``append`` when they extend an artifact sent before).
    ``text`` is the new text for the REST form's ``task.message`` event.
    """

    kind: str
    task_id: str
    context_id: str
    state: TaskState | None = None
    timestamp: str | None = None
    message: StoredMessage | None = None
    artifact: Artifact | None = None
    append: bool = False
    last_chunk: bool = False
    final: bool = False
    text: str | None = None
    metadata: dict[str, Any] | None = None
