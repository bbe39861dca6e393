"""Human in the loop: tool approval policies and interrupts of a run.

Theory of operation
-------------------
*Who must approve what.* A tool asks for approval when it was made with
``tool(requires_approval=True)`` (or a predicate over its arguments), or when
the agent's ``approve=`` policy says so (:class:`ApprovalPolicy`: a set of
tool names, a callable, or :data:`SIDE_EFFECTS` for every tool not marked
``read_only``). A sub-agent's run inherits its parent's policy and adds its
own: a call is asked about when *either* asks (spec 002 section 16.1: the
parent's approval handler applies to sub-agent tools, and a sub-agent cannot
widen what runs without approval).

*How the run asks.* One :class:`Interrupter` per top-level run, shared by its
sub-agents. :meth:`Interrupter.ask` returns the :class:`~uamp_proto.interrupts.Answer`:

1. from ``answers`` when the run resumes with answers keyed by the
   interrupt's key (:attr:`~uamp_proto.interrupts.Interrupt.key`);
2. else from the ``on_interrupt`` handler, awaited in place (the run waits
   there; ``interrupt_timeout`` bounds the wait, after which the answer is
   an expiry);
3. else the run *suspends*: the interrupt is recorded, :class:`Suspended`
   unwinds the tool call, the strategy ends the run with
   ``turn.stop_reason == "interrupted"`` and ``turn.interrupts``. The turn's
   messages are the checkpoint: ``Agent.run(history + turn.messages,
   resume=True, answers={key: answer})`` runs the paused calls again, and
   each ask of theirs finds its answer by key (an ask's key is its tool
   call's key and its number within that call, so a call that is run again
   asks the same keys in the same order).

Nothing here runs for a call when no policy is set: the check is one
attribute test.
"""

from __future__ import annotations

import contextvars
import inspect
import uuid
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any, Final

import trio

from uamp_proto.errors import UampError
from uamp_proto.interrupts import APPROVAL, QUESTION, Answer, Interrupt

if TYPE_CHECKING:
    from .tools import Tool

__all__ = [
    "SIDE_EFFECTS",
    "ApprovalLike",
    "ApprovalPolicy",
    "InterruptHandler",
    "Interrupter",
    "Suspended",
]

#: ``approve=SIDE_EFFECTS``: ask before every tool not marked ``read_only``.
SIDE_EFFECTS: Final = "side_effects"

#: Asked about each interrupt; returns the person's answer.
InterruptHandler = Callable[[Interrupt], Awaitable[Answer]]

#: What ``agent(approve=...)`` takes.
ApprovalLike = str | Collection[str] | Callable[..., Any] | None

#: The key prefix of the tool call a sub-agent runs in (set around sub-agent calls).
CALL_KEY: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "uamp_agents_call_key", default=None
)


class Suspended(UampError):
    """Unwinds a tool call whose interrupt has no answer yet (suspend mode).

    A tool that catches it by accident does not hide the pause: the run
    counts the interrupts recorded during the call.
    """


class ApprovalPolicy:
    """Which calls need a person's approval; see the module docstring.

    Args:
        approve: A set of tool names, a callable ``(tool_name, arguments) ->
            bool`` (may be async), or :data:`SIDE_EFFECTS`.
        parent: The policy inherited from the parent run, if any.

    Raises:
        ValueError: A string other than :data:`SIDE_EFFECTS`.
    """

    __slots__ = ("_also", "_names", "_parent", "_predicate", "_side_effects")

    def __init__(self, approve: ApprovalLike, parent: ApprovalPolicy | None = None) -> None:
        self._parent = parent
        self._also: ApprovalPolicy | None = None
        self._names: frozenset[str] = frozenset()
        self._predicate: Callable[..., Any] | None = None
        self._side_effects = False
        if approve is None:
            return
        if isinstance(approve, str):
            if approve != SIDE_EFFECTS:
                raise ValueError(
                    f"approve={approve!r}: use a set of tool names, a callable or {SIDE_EFFECTS!r}"
                )
            self._side_effects = True
        elif callable(approve):
            self._predicate = approve
        else:
            self._names = frozenset(approve)

    @staticmethod
    def combine(own: ApprovalPolicy | None, parent: ApprovalPolicy | None) -> ApprovalPolicy | None:
        """The policy of a sub-agent's run: its agent's added to its parent's."""
        if own is None:
            return parent
        if parent is None:
            return own
        both = ApprovalPolicy(None, parent)
        both._also = own
        return both

    async def needs(self, tool: Tool, arguments: dict[str, Any]) -> bool:
        """Whether a call of ``tool`` with ``arguments`` needs approval."""
        if self._parent is not None and await self._parent.needs(tool, arguments):
            return True
        if self._also is not None and await self._also.needs(tool, arguments):
            return True
        if tool.name in self._names:
            return True
        if self._side_effects and not tool.read_only and tool.agent is None:
            return True
        if self._predicate is not None:
            verdict = self._predicate(tool.name, arguments)
            if inspect.isawaitable(verdict):
                verdict = await verdict
            return bool(verdict)
        return False


async def tool_requires(tool: Tool, arguments: dict[str, Any]) -> bool:
    """Whether the tool itself asks for approval of this call."""
    flag = tool.requires_approval
    if callable(flag):
        verdict = flag(arguments)
        if inspect.isawaitable(verdict):
            verdict = await verdict
        return bool(verdict)
    return bool(flag)


class Interrupter:
    """The interrupts of one top-level run and its sub-agents; see the module docstring.

    Args:
        handler: Asked about each interrupt (``None``: suspend the run).
        answers: Answers by interrupt key, for a resumed run.
        timeout: Seconds the handler may take; then the answer is an expiry.
        agent: The agent's name, recorded on interrupts.
    """

    def __init__(
        self,
        handler: InterruptHandler | None = None,
        answers: Mapping[str, Answer] | None = None,
        timeout: float | None = None,
        agent: str | None = None,
    ) -> None:
        self.handler = handler
        self.answers = dict(answers or {})
        self.timeout = timeout
        self.agent = agent
        #: Interrupts the run suspended on (suspend mode), in order.
        self.pending: list[Interrupt] = []

    async def ask(self, interrupt: Interrupt) -> Answer:
        """The answer to ``interrupt``; raises :class:`Suspended` without one.

        Raises:
            Suspended: No answer, no handler: the run suspends.
        """
        known = self.answers.get(interrupt.key)
        if known is not None:
            return known
        if self.handler is None:
            self.pending.append(interrupt)
            raise Suspended
        if self.timeout is None:
            return await self.handler(interrupt)
        with trio.move_on_after(self.timeout):
            return await self.handler(interrupt)
        return Answer.expiry()

    def approval(
        self, key: str, tool_name: str, call_id: str, arguments: dict[str, Any], step_id: str | None
    ) -> Interrupt:
        """The interrupt that asks to approve a call."""
        return Interrupt(
            id=str(uuid.uuid4()),
            kind=APPROVAL,
            key=key,
            prompt=f"Allow the agent to run {tool_name}?",
            tool_name=tool_name,
            call_id=call_id,
            arguments=arguments,
            agent=self.agent,
            step_id=step_id,
        )

    def question(
        self,
        key: str,
        prompt: str,
        schema: dict[str, Any] | None,
        call_id: str | None,
        step_id: str | None,
    ) -> Interrupt:
        """The interrupt that asks a question."""
        return Interrupt(
            id=str(uuid.uuid4()),
            kind=QUESTION,
            key=key,
            prompt=prompt,
            schema=schema,
            call_id=call_id,
            agent=self.agent,
            step_id=step_id,
        )


#: How often a question is asked again when the answer does not fit its schema.
QUESTION_ATTEMPTS: Final = 3


async def ask_question(
    interrupter: Interrupter,
    key: str,
    prompt: str,
    schema: Any,
    *,
    call_id: str | None,
    step_id: str | None,
) -> Any:
    """Ask a person ``prompt``; return the answer as ``schema`` describes it.

    ``schema`` is a JSON Schema dict, a type (``int``, an attrs class, a
    dataclass ... the answer is then built as one) or ``None`` (any value).

    Raises:
        ToolError: Nobody answered in time, or no answer fit after
            :data:`QUESTION_ATTEMPTS` tries.
        Suspended: No answer yet and nobody to ask in place.
    """
    from ._schema import is_structured_class, schema_for, validate
    from .errors import ToolError

    if schema is None or isinstance(schema, dict):
        json_schema, target = schema, None
    else:
        json_schema = schema_for(schema)
        target = schema if is_structured_class(schema) else None
    text = prompt
    for attempt in range(QUESTION_ATTEMPTS):
        asked = interrupter.question(
            key if attempt == 0 else f"{key}~{attempt}", text, json_schema, call_id, step_id
        )
        answer = await interrupter.ask(asked)
        if answer.expired:
            raise ToolError(f"nobody answered {prompt!r} in time")
        problems = validate(answer.value, json_schema, "answer") if json_schema else []
        if not problems:
            if target is None:
                return answer.value
            import cattrs

            return cattrs.Converter().structure(answer.value, target)
        text = f"{prompt}\n(The previous answer did not fit: {'; '.join(problems)})"
    raise ToolError(f"no answer to {prompt!r} fit its schema after {QUESTION_ATTEMPTS} tries")
