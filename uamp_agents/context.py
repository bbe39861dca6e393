"""Execution state and context (UAP sections 5.1, 8.4).

:class:`ExecutionState` is the mutable state of one run (step number,
messages, user metadata, ReAct reasoning, the plan). :class:`ExecutionContext`
is what a strategy receives: the agent, the bound model, the input, the
history, the resolved tools, the hooks and the state -- plus the operations
every strategy needs (call the model, run tool calls concurrently, mark step
boundaries, emit stream events, build the turn), so that strategies only
decide *what* to do next.

Parent/child tracking (section 8.4) uses a context variable holding the
current run's :class:`RunInfo`. Trio copies context variables into child
tasks, so a sub-agent started from a tool call sees its parent's run: that
gives it the parent's ids, the nesting depth, and the model to inherit when
it has none (section 8.3, resolved at execution time).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import cattrs
import orjson
import trio

from uamp_proto import _fastinit
from uamp_proto.events import Event, ResponseDelta, Thinking, UsageDelta
from uamp_proto.ids import random_uuid4
from uamp_proto.interrupts import Answer, refusal
from uamp_proto.types import (
    ContentItem,
    DeltaText,
    Message,
    ResponseFormat,
    ToolInvocation,
    ToolOutput,
    ToolResultContent,
    UsageStats,
)

from ._schema import validate
from .approval import CALL_KEY, ApprovalPolicy, Interrupter, Suspended, ask_question, tool_requires
from .errors import (
    AgentRuntimeError,
    ProviderError,
    StructuredOutputError,
    SubAgentDepthError,
    ToolError,
)
from .hooks import AgentStrategy, StepResult, maybe_await
from .providers.base import ModelRequest, ModelResponse, Provider
from .state import ExecutionState, PlanStep
from .streaming import AgentStreamEvent, Emitter, UapEmitter, UAPEvent, UppEmitter
from .tools import (
    Tool,
    ToolContext,
    error_output,
    format_result,
    parse_arguments,
    run_tool_calls,
)
from .tracing import NO_SPAN, model_span, tool_span
from .turn import ToolExecution, Turn, add_usage

if TYPE_CHECKING:
    from .agent import Agent

__all__ = [
    "AgentRuntimeError",
    "ExecutionContext",
    "ExecutionState",
    "PlanStep",
    "RunInfo",
    "StructuredOutputError",
    "SubAgentDepthError",
    "current_run",
]


@attrs.frozen(kw_only=True)
class RunInfo:
    """Identity and inherited settings of a run in progress (section 8.4).

    Attributes:
        agent_id: The running agent.
        turn_id: The id of the turn the run will return.
        parent_agent_id: The parent agent, for a sub-agent run.
        parent_turn_id: The parent's turn id, for a sub-agent run.
        depth: 0 for a top-level run, parent depth + 1 for a sub-agent.
        max_depth: The deepest sub-agent nesting allowed below the root.
        llm: The model the run uses (what a model-less child inherits).
        config: The provider configuration a model-less child inherits.
        approval: The run's approval policy (its agent's added to its
            parent's), inherited by sub-agents.
        interrupter: Where the run's interrupts go (the top-level run's,
            shared by its sub-agents).
    """

    agent_id: str
    turn_id: str
    parent_agent_id: str | None
    parent_turn_id: str | None
    depth: int
    max_depth: int
    llm: Provider
    config: dict[str, Any]
    approval: ApprovalPolicy | None = None
    interrupter: Interrupter | None = None


_CURRENT_RUN: contextvars.ContextVar[RunInfo | None] = contextvars.ContextVar(
    "uamp_agents_current_run", default=None
)


def current_run() -> RunInfo | None:
    """The run the calling code executes in (inside a tool, its caller's run)."""
    return _CURRENT_RUN.get()


@contextlib.contextmanager
def _running(info: RunInfo) -> Any:
    token = _CURRENT_RUN.set(info)
    try:
        yield info
    finally:
        _CURRENT_RUN.reset(token)


#: Budget-style check called at every step start and after every model call.
Check = Callable[["ExecutionState", UsageStats], None]
#: Called with every UAP event (middleware ``on_event``).
Listener = Callable[[UAPEvent], Any]
#: Sessions' per-step callback; may return a checkpoint id to announce.
StepCallback = Callable[[int, "ExecutionState"], Any]

_FENCE = re.compile(r"^```[a-zA-Z0-9_-]*\s*\n(.*)\n```\s*$", re.DOTALL)
_structurer = cattrs.Converter()


#: No usage yet: the start of every sum (frozen, so one record serves every run).
_NO_USAGE = UsageStats()
#: No model call streaming: no partial text (never appended to: a streamed call
#: gathers its text in a list of its own).
_NOT_STREAMING: list[str] = []


# No on_setattr hooks: with them (attrs' default when a field has a converter)
# every store, the 25 of __init__ included, ran through attrs' setter pipeline.
@attrs.define(slots=False, kw_only=True, eq=False, on_setattr=attrs.setters.NO_OP)
class ExecutionContext:
    """Everything a strategy works with (section 5.1), plus its operations.

    Attributes:
        agent: The agent being run.
        llm: The bound model (the agent's, or the inherited one).
        input: The user input message; ``None`` when the run resumes a
            conversation without new input (``Agent.run(..., resume=True)``).
        history: The conversation before this run.
        tools: Resolved tools, sub-agents included.
        strategy: The agent's lifecycle hooks.
        state: The mutable execution state.
        run: Identity of this run (ids, parent ids, depth).
        params: Model parameters sent with every request.
        system: The system prompt, if any.
        structure: The JSON Schema of the structured output, if any.
        usage: Usage so far, summed over every model call and sub-agent.
        tool_executions: Every tool call so far, in call order.
        tool_choice: The run's tool choice (``"auto"``, ``"none"``,
            ``"required"`` or a named function), used by :meth:`generate`
            when its caller gives none. ``"none"`` holds for the whole run; a
            forcing choice applies to the first model call that offers
            tools, after which it becomes ``None`` (the model's own choice),
            so a forced tool is called once rather than in every step.
        pending_tool_calls: Calls of deferred tools handed back to the
            caller (see :meth:`defer`).
        deps: The run's dependencies (``Agent.run(..., deps=...)``), handed
            to every tool as ``ToolContext.deps``.
        stream_model: In a streaming run, whether the model's replies are
            streamed (``False``: each is fetched whole and emitted as one
            delta, see ``Agent.run``'s ``stream_model``).
        stream_steps: In a streaming run, whether ``step_start`` and
            ``step_end`` reach the stream (listeners get them either way).
    """

    agent: Agent
    llm: Provider
    input: Message | None
    history: list[Message]
    tools: list[Tool]
    strategy: AgentStrategy
    run: RunInfo
    params: dict[str, Any]
    system: str | None
    structure: dict[str, Any] | None = None
    structure_type: type | None = None
    tool_choice: str | dict[str, Any] | None = None
    deps: Any = None
    stream_model: bool = True
    stream_steps: bool = True
    state: ExecutionState = attrs.field(init=False)
    # (Frozen: one shared record to start every run's sum, not one per run.)
    usage: UsageStats = attrs.field(init=False, default=_NO_USAGE)
    tool_executions: list[ToolExecution] = attrs.field(init=False, factory=list)
    pending_tool_calls: list[ToolInvocation] = attrs.field(init=False, factory=list)
    _emitter: Emitter | None = attrs.field(default=None, alias="emitter")
    # The model's own events as they are, when the consumer takes them so (Agent.drive).
    _upp_emitter: UppEmitter | None = attrs.field(default=None, alias="upp_emitter")
    _uap_emitter: UapEmitter | None = attrs.field(default=None, alias="uap_emitter")
    # Read only (iterated): kept as given (Agent hands each run copies of its own).
    _checks: Sequence[Check] = attrs.field(default=(), alias="checks")
    _listeners: Sequence[Listener] = attrs.field(default=(), alias="listeners")
    _on_step: StepCallback | None = attrs.field(default=None, alias="on_step")
    # The run's starting metadata; the run's own copy is ``state.metadata``.
    _metadata: dict[str, Any] | None = attrs.field(default=None, alias="metadata", repr=False)
    _tools: dict[str, Tool] = attrs.field(init=False, repr=False)
    _step_usage: dict[int, UsageStats] = attrs.field(init=False, factory=dict, repr=False)
    _step_start_index: dict[int, int] = attrs.field(init=False, factory=dict, repr=False)
    _suspended: set[str] = attrs.field(init=False, factory=set, repr=False)
    # Two fields only a streamed model call and a question set: class defaults until
    # then, so a context stays within the 30 keys CPython shares between instance dicts.
    _partial_text = _NOT_STREAMING  # the text a streamed model call has sent so far
    _asks = 0  # questions asked by the strategy itself

    def __attrs_post_init__(self) -> None:
        messages = [self.input] if self.input is not None else []
        self.state = _state(  # ExecutionState(messages=..., metadata=..., tool_executions=...)
            messages,
            dict(self._metadata or {}),
            self.tool_executions,  # one list: the state sees every call
        )
        self._tools = {t.name: t for t in self.tools}

    # --- read-only views ------------------------------------------------------

    @property
    def agent_id(self) -> str:
        """The running agent's id."""
        return self.run.agent_id

    @property
    def turn_id(self) -> str:
        """The id of the turn this run returns."""
        return self.run.turn_id

    @property
    def streaming(self) -> bool:
        """Whether the run is streaming (events reach a consumer)."""
        return self._emitter is not None

    def tool(self, name: str) -> Tool | None:
        """The tool called ``name``, if the agent has one."""
        return self._tools.get(name)

    def conversation(self, *extra: Message) -> list[Message]:
        """System prompt, history, this run's messages, then ``extra``."""
        head = [Message(role="system", content=self.system)] if self.system else []
        return [*head, *self.history, *self.state.messages, *extra]

    def response_format(self) -> ResponseFormat | None:
        """The structured-output request for the final answer, if any."""
        if self.structure is None:
            return None
        name = self.structure_type.__name__ if self.structure_type else "output"
        return ResponseFormat(
            type="json_schema", json_schema={"name": name, "schema": self.structure}
        )

    # --- model calls ----------------------------------------------------------

    async def generate(
        self,
        messages: list[Message],
        *,
        tools: Sequence[Tool] | None = None,
        response_format: ResponseFormat | None = None,
        tool_choice: str | dict[str, Any] | None = None,
        step: int | None = None,
        thinking: bool = False,
    ) -> ModelResponse:
        """Call the model once; stream its events to the consumer when streaming.

        ``tools`` defaults to all of the agent's tools (pass ``[]`` for none);
        ``tool_choice`` to the run's :attr:`tool_choice` when tools are
        offered. The usage is added to the run's and the step's totals, then
        budget checks run. ``thinking``: the reply is the agent's reasoning,
        not its answer (``react``'s reasoning phase): its text is streamed
        as :class:`~uamp_proto.events.Thinking`.

        Raises:
            ProviderError: The provider failed, or its stream had no response.
        """
        use = self.tools if tools is None else list(tools)
        if tool_choice is None and use and self.tool_choice is not None:
            tool_choice = self.tool_choice
            if tool_choice != "none" and tool_choice != "auto":
                self.tool_choice = None  # forced once, then the model decides
        request = _model_request(
            messages, [t.definition() for t in use], tool_choice, response_format, dict(self.params)
        )
        with model_span(self.agent_id, self.llm) as span:
            if self._emitter is None:
                response = await self.llm.generate(request)
            elif thinking:
                response = await self._stream_thoughts(request)
            elif self.stream_model:
                response = await self._stream_model(request)
            else:
                response = await self.llm.generate(request)
                await self._emit_whole(response)
            if span is not NO_SPAN:  # (an untraced call records nothing)
                span.set("uap.step_id", self.state.step_id)
                span.set("gen_ai.response.model", response.model)
                span.set("gen_ai.response.finish_reasons", [response.finish_reason])
                if response.usage is not None:
                    span.set("gen_ai.usage.input_tokens", response.usage.input_tokens)
                    span.set("gen_ai.usage.output_tokens", response.usage.output_tokens)
        self.add_usage(response.usage, self.state.step if step is None else step)
        if self._checks:  # (most runs have none: no call)
            self.run_checks()
        return response

    async def _wrap_upp(self, event: Event) -> None:
        assert self._emitter is not None
        await self._emitter(AgentStreamEvent(source="upp", upp=event))

    async def _stream_model(self, request: ModelRequest) -> ModelResponse:
        # The model's events: to the direct consumer, else to the stream as stream events.
        emitter = self._upp_emitter or self._wrap_upp
        response: ModelResponse | None = None
        partial: list[str] = []
        self._partial_text = partial
        events = self.llm.stream(request)
        try:
            async for event in events:
                # Deltas first: nearly every event of a stream is one.
                if isinstance(event, ResponseDelta):
                    if isinstance(event.delta, DeltaText):
                        partial.append(event.delta.text)
                elif isinstance(event, ModelResponse):
                    response = event
                    continue
                await emitter(event)
        finally:
            await _close_stream(events)
        if response is None:
            raise ProviderError(f"the {self.llm.name} stream ended without a response")
        self._partial_text = _NOT_STREAMING
        return response

    async def _stream_thoughts(self, request: ModelRequest) -> ModelResponse:
        """A model call whose reply is reasoning: its text goes out as thinking."""
        emitter = self._upp_emitter or self._wrap_upp
        if not self.stream_model:
            response = await self.llm.generate(request)
            text = response.message.text or response.thinking
            if text:
                thought = Thinking(content=text, is_delta=True, stage="reasoning")
                await emitter(thought)
            if response.usage is not None:
                await emitter(UsageDelta(delta=response.usage))
            return response
        found: ModelResponse | None = None
        events = self.llm.stream(request)
        try:
            async for event in events:
                if isinstance(event, ModelResponse):
                    found = event
                    continue
                if isinstance(event, ResponseDelta):
                    if not isinstance(event.delta, DeltaText):
                        continue  # a reasoning call offers no tools
                    event = Thinking(content=event.delta.text, is_delta=True, stage="reasoning")
                await emitter(event)
        finally:
            await _close_stream(events)
        if found is None:
            raise ProviderError(f"the {self.llm.name} stream ended without a response")
        return found

    async def _emit_whole(self, response: ModelResponse) -> None:
        """Emit a reply fetched whole as a stream of it would end: thinking, text, usage."""
        emitter = self._upp_emitter or self._wrap_upp
        # Each event built once the one before it is out (no list of them).
        if response.thinking:
            await emitter(Thinking(content=response.thinking, is_delta=True))
        text = response.message.text
        if text:
            await emitter(_text_delta(_delta_text(text)))
        if response.usage is not None:
            await emitter(_usage_delta(response.usage))

    def add_usage(self, usage: UsageStats | None, step: int) -> None:
        """Add ``usage`` to the run's total and to step ``step``'s total."""
        if usage is None:
            return
        self.usage = add_usage(self.usage, usage)
        self._step_usage[step] = add_usage(self._step_usage.get(step, _NO_USAGE), usage)

    def run_checks(self) -> None:
        """Run the budget checks against the current state and usage."""
        for check in self._checks:
            check(self.state, self.usage)

    # --- tools ----------------------------------------------------------------

    def split_calls(
        self, calls: Sequence[ToolInvocation]
    ) -> tuple[list[ToolInvocation], list[ToolInvocation]]:
        """Split calls into those run here and those of deferred tools, in order."""
        local: list[ToolInvocation] = []
        deferred: list[ToolInvocation] = []
        for call in calls:
            found = self._tools.get(call.name)
            (deferred if found is not None and found.deferred else local).append(call)
        return local, deferred

    def defer(self, calls: Sequence[ToolInvocation]) -> None:
        """Hand calls of deferred tools back to the caller.

        They are not run; they go to :attr:`pending_tool_calls` (and the turn's
        ``pending_tool_calls``). A strategy that defers calls ends the run
        with ``make_turn(..., stop_reason="client_tool")``.
        """
        self.pending_tool_calls.extend(calls)

    async def run_and_defer(
        self, calls: Sequence[ToolInvocation]
    ) -> tuple[list[ToolInvocation], list[ToolOutput], list[ToolInvocation]]:
        """Run the calls of local tools and defer those of deferred tools.

        Returns the local calls, their outputs (in order) and the deferred
        calls. Used by the ``loop`` and ``react`` strategies.
        """
        local, deferred = self.split_calls(calls)
        outputs = await self.run_tools(local) if local else []
        if deferred:
            self.defer(deferred)
        if self._suspended:
            kept = [
                (c, o) for c, o in zip(local, outputs, strict=True) if c.id not in self._suspended
            ]
            local, outputs = [c for c, _ in kept], [o for _, o in kept]
        return local, outputs, deferred

    @property
    def suspended(self) -> bool:
        """Whether a call waits for a person's answer (the run must stop: ``interrupted``)."""
        return bool(self._suspended)

    async def _approve(
        self, found: Tool, call: ToolInvocation, arguments: dict[str, Any], tctx: ToolContext[Any]
    ) -> Answer | None:
        """Ask a person about this call if the tool or the policy says so (``None``: no need)."""
        policy = self.run.approval
        needed = await tool_requires(found, arguments) or (
            policy is not None and await policy.needs(found, arguments)
        )
        interrupter = self.run.interrupter
        if not needed or interrupter is None:
            return None
        ask = interrupter.approval(tctx.next_key(), call.name, call.id, arguments, tctx.step_id)
        return await interrupter.ask(ask)

    async def ask_human(self, prompt: str, schema: Any = None) -> Any:
        """Ask a person ``prompt`` from a step; see :meth:`ToolContext.ask_human
        <uamp_agents.tools.ToolContext.ask_human>`.

        Raises:
            ToolError: Nobody answered in time, or no answer fit.
        """
        assert self.run.interrupter is not None
        key = f"step{self.state.step}#{self._asks}"
        self._asks += 1
        return await ask_question(
            self.run.interrupter, key, prompt, schema, call_id=None, step_id=self.state.step_id
        )

    async def resume_paused_calls(self) -> None:
        """Run the calls a suspended run left without results (resuming with answers).

        The newest assistant message of the history with tool calls that no
        ``role="tool"`` message answers: its calls of local tools run now
        (each ask finds its answer by key) and their results follow the
        history.
        """
        for index in range(len(self.history) - 1, -1, -1):
            message = self.history[index]
            if message.role != "assistant" or not message.tool_calls:
                continue
            answered = {m.tool_call_id for m in self.history[index + 1 :] if m.role == "tool"}
            paused = [
                c
                for c in message.tool_calls
                if c.id not in answered and (t := self._tools.get(c.name)) and not t.deferred
            ]
            if paused:
                done, outputs, _ = await self.run_and_defer(paused)
                if done:
                    text = "\n".join(
                        f"{c.name}: {o.result}" for c, o in zip(done, outputs, strict=True)
                    )
                    await self.emit("observation", {"results": outputs, "text": text})
            return

    async def run_tools(
        self, calls: Sequence[ToolInvocation], *, step: int | None = None, record: bool = True
    ) -> list[ToolOutput]:
        """Run the calls (concurrently where allowed); return outputs in call order.

        With ``record`` the tool messages are appended to ``state.messages``
        in call order. If the run is cancelled meanwhile, calls that did not
        finish get an error result ``"cancelled"`` (so the conversation stays
        well-formed for the partial turn) and the cancellation continues.
        """
        step_no = self.state.step if step is None else step
        outputs: list[ToolOutput | None] = [None] * len(calls)
        executions: list[ToolExecution | None] = [None] * len(calls)

        async def run_one(index: int, call: ToolInvocation) -> None:
            started = trio.current_time()
            prefix = CALL_KEY.get()
            run, state = self.run, self.state
            interrupter = run.interrupter
            tctx: ToolContext[Any] = _tool_context(  # ToolContext(call_id=..., ...)
                call.id,
                call.name,
                run.agent_id,
                run.turn_id,
                step_no,
                state,
                self.deps,
                state.step_id,
                interrupter,
                f"{prefix}/{call.id}" if prefix else call.id,
                functools.partial(self._tool_progress, call.id, step_no),
                self.conversation,
            )
            asked = len(interrupter.pending) if interrupter is not None else 0
            with tool_span(self.agent_id, call.name, call.id) as span:
                try:
                    found = self._tools.get(call.name)
                    if found is None:
                        known = ", ".join(sorted(self._tools)) or "none"
                        raise ToolError(f"unknown tool {call.name!r} (available: {known})")
                    arguments = parse_arguments(call)
                    answer = None
                    if found.requires_approval or self.run.approval is not None:
                        answer = await self._approve(found, call, arguments, tctx)
                    if answer is not None and not answer.approved:
                        output = error_output(call.id, refusal(call.name, answer))
                    else:
                        if answer is not None and answer.arguments is not None:
                            arguments = answer.arguments
                        if found.agent is not None:
                            token = CALL_KEY.set(tctx.next_key())
                            try:
                                value = await found.invoke(arguments, tctx)
                            finally:
                                CALL_KEY.reset(token)
                        else:
                            value = await found.invoke(arguments, tctx)
                        if isinstance(value, ToolOutput):
                            output = attrs.evolve(value, call_id=call.id)
                        else:
                            output = _tool_output(call.id, format_result(value))
                except ToolError as exc:
                    output = error_output(call.id, str(exc))
                except Exception as exc:
                    output = error_output(call.id, _describe(exc))
                if interrupter is not None and len(interrupter.pending) > asked:
                    # The call asked and has no answer yet (however the
                    # Suspended raised in it travelled): it pauses the run.
                    if self.run.depth > 0:
                        raise Suspended  # the parent's call is what pauses
                    self._suspended.add(call.id)
                    return
                if span is not NO_SPAN:  # (an untraced call records nothing)
                    span.set("uap.step_id", tctx.step_id)
                    if output.is_error:
                        span.set("error.type", "tool_error")
            outputs[index] = output
            executions[index] = _tool_execution(  # ToolExecution(call=..., ...)
                call, output, step_no, trio.current_time() - started, tctx.child_turns
            )
            for child in tctx.child_turns:
                self.add_usage(child.usage, step_no)

        def sequential(call: ToolInvocation) -> bool:
            found = self._tools.get(call.name)
            return found is not None and found.sequential

        final: list[ToolOutput] = []
        try:
            if len(calls) == 1:  # one call runs alone either way: no batching to do
                await run_one(0, calls[0])
            else:
                await run_tool_calls(calls, run_one, sequential=sequential)
        finally:
            suspended = self._suspended
            for index, call in enumerate(calls):
                output = outputs[index]
                if output is None:
                    output = error_output(call.id, "cancelled")
                    if call.id not in suspended:
                        executions[index] = ToolExecution(call=call, output=output, step=step_no)
                final.append(output)
            self.tool_executions.extend([e for e in executions if e is not None])
            if record:
                messages = self.state.messages
                for c, o in zip(calls, final, strict=True):
                    if c.id not in suspended:
                        messages.append(tool_message(c, o))
        if self._checks:  # (most runs have none: no call)
            self.run_checks()
        return final

    # --- steps and events -----------------------------------------------------

    async def emit(
        self,
        type: str,
        data: dict[str, Any] | None = None,
        *,
        step: int | None = None,
        stream: bool = True,
    ) -> None:
        """Emit a UAP event (to middleware listeners, and to the stream if any).

        ``stream=False``: to the listeners only.
        """
        emitter = self._emitter if stream else None
        if emitter is None and not self._listeners:
            return  # nobody to tell: no event to build
        event = _uap_event(  # UAPEvent(type=..., step=..., agent_id=..., data=...)
            type, self.state.step if step is None else step, self.run.agent_id, data or {}
        )
        for listener in self._listeners:
            await maybe_await(listener(event))
        if emitter is not None:
            direct = self._uap_emitter
            if direct is not None:
                await direct(event)
            else:
                await emitter(AgentStreamEvent(source="uap", uap=event))

    async def _tool_progress(self, call_id: str, step: int, text: str) -> None:
        """A tool's progress line: UAP ``tool_progress`` ``{"call_id", "text"}``."""
        await self.emit("tool_progress", {"call_id": call_id, "text": text}, step=step)

    async def begin_step(self, data: dict[str, Any] | None = None) -> int:
        """Start the next step: number it, run checks, call ``on_step_start``, emit.

        ``data`` is added to the ``step_start`` event's data.
        """
        self.state.step += 1
        step = self.state.step
        step_id = self.state.step_id = random_uuid4()
        self._step_start_index[step] = len(self.state.messages)
        if self._checks:  # (most runs have none: no call)
            self.run_checks()
        if self.strategy.on_step_start is not None:
            await self.strategy.call("on_step_start", step, self.state)
        stream = self.stream_steps
        if self._listeners or (stream and self._emitter is not None):
            await self.emit(
                "step_start",
                {"step_number": step, "step_id": step_id, **(data or {})},
                step=step,
                stream=stream,
            )
        return step

    async def end_step(
        self,
        step: int,
        response: Message,
        *,
        messages: list[Message] | None = None,
        data: dict[str, Any] | None = None,
    ) -> bool:
        """Finish step ``step``; return whether the stop condition says stop.

        Calls ``on_step_end`` with a turn covering this step (its messages
        default to those appended to ``state.messages`` since the step began),
        emits ``step_end``, lets the session checkpoint (emitting
        ``checkpoint`` when it reports an id), then evaluates
        ``stop_condition`` (section 11.4).
        """
        usage = self._step_usage.get(step, _NO_USAGE)
        if self.strategy.on_step_end is not None:  # the step's own turn only for the hook
            if messages is None:
                messages = self.state.messages[self._step_start_index.get(step, 0) :]
            step_turn = Turn(
                messages=list(messages),
                response=response,
                usage=usage,
                steps=1,
                agent_id=self.agent_id,
                parent_turn_id=self.run.parent_turn_id,
                parent_agent_id=self.run.parent_agent_id,
            )
            await self.strategy.call(
                "on_step_end", step, StepResult(turn=step_turn, state=self.state)
            )
        stream = self.stream_steps
        if self._listeners or (stream and self._emitter is not None):
            ended = {"step_number": step, "step_id": self.state.step_id, "usage": usage}
            await self.emit("step_end", {**ended, **(data or {})}, step=step, stream=stream)
        if self._on_step is not None:
            checkpoint_id = await maybe_await(self._on_step(step, self.state))
            if isinstance(checkpoint_id, str):
                await self.emit("checkpoint", {"checkpoint_id": checkpoint_id}, step=step)
        if self.strategy.stop_condition is None:
            return False
        return bool(await self.strategy.call("stop_condition", self.state))

    # --- results --------------------------------------------------------------

    def parse_structured(self, text: str) -> Any:
        """Decode and validate the final answer against ``structure``.

        Returns the JSON value, or an instance of the structure class when
        one was given. Raises:
            StructuredOutputError: Not JSON, or not matching the schema.
        """
        assert self.structure is not None
        body = text.strip()
        fenced = _FENCE.match(body)
        if fenced:
            body = fenced.group(1)
        try:
            value = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise StructuredOutputError([f"not valid JSON ({exc})"], text) from None
        problems = validate(value, self.structure)
        if problems:
            raise StructuredOutputError(problems, text)
        if self.structure_type is not None and not _is_typeddict(self.structure_type):
            try:
                return _structurer.structure(value, self.structure_type)
            except Exception as exc:
                raise StructuredOutputError(
                    [f"cannot build {self.structure_type.__name__}: {exc}"], text
                ) from None
        return value

    def make_turn(
        self,
        response: Message,
        *,
        data: Any = None,
        stop_reason: str = "end_turn",
        status: str = "completed",
    ) -> Turn:
        """Build the run's turn from the state."""
        run, state = self.run, self.state
        return _turn(  # Turn(messages=..., response=..., ...), positionally
            list(state.messages),
            response,
            self.usage,
            data,
            state.step,
            run.turn_id,
            run.agent_id,
            run.parent_turn_id,
            run.parent_agent_id,
            list(self.tool_executions),
            status,
            stop_reason,
            state.metadata,
            list(self.pending_tool_calls),
            list(run.interrupter.pending) if run.interrupter is not None and run.depth == 0 else [],
        )

    def last_assistant(self) -> Message:
        """The newest assistant message of this run (an empty one if none)."""
        for message in reversed(self.state.messages):
            if message.role == "assistant":
                return message
        return Message(role="assistant", content="")

    def partial_turn(self) -> Turn:
        """The turn of an aborted run: what happened so far (section 12.5 rule 5)."""
        if self._partial_text:
            self.state.messages.append(
                Message(role="assistant", content="".join(self._partial_text))
            )
            self._partial_text = _NOT_STREAMING
        return self.make_turn(self.last_assistant(), stop_reason="aborted", status="aborted")


async def _close_stream(events: Any) -> None:
    """Close a model's event stream, shielded from cancellation.

    An async generator that ran to its end is closed already: no scope to
    enter for it (entering one costs more than a short stream's events).
    """
    aclose = getattr(events, "aclose", None)
    if aclose is not None and getattr(events, "ag_frame", True) is not None:
        with trio.CancelScope(shield=True):
            await aclose()


#: ``ExecutionContext(agent=..., ...)`` as ``Agent`` builds one per run, positionally.
new_context = _fastinit.maker(
    ExecutionContext,
    (
        "agent",
        "llm",
        "input",
        "history",
        "tools",
        "strategy",
        "run",
        "params",
        "system",
        "structure",
        "structure_type",
        "emitter",
        "upp_emitter",
        "uap_emitter",
        "checks",
        "listeners",
        "on_step",
        "metadata",
        "tool_choice",
        "deps",
        "stream_model",
        "stream_steps",
    ),
)


def tool_message(call: ToolInvocation, output: ToolOutput) -> Message:
    """The ``role="tool"`` message carrying a tool call's result.

    A failed call's message also carries the result as a content item, so
    ``is_error`` reaches the model (providers read it there); so does a
    result with media (UAMP 8.5.4: the conversation is the content registry).
    """
    items: list[ContentItem] | None = (
        [ToolResultContent(tool_result=output)] if output.is_error or output.content_items else None
    )
    return _tool_message("tool", call.id, call.name, output.result, items)


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _is_typeddict(tp: type) -> bool:
    return issubclass(tp, dict) and hasattr(tp, "__total__")


#: Built once per run: the protocol's compiled constructor (:mod:`uamp_proto._fastinit`).
FAST_INIT = _fastinit.install(globals())

# Positional constructors for the calls every turn or tool call makes (_fastinit.maker).
_run_info = _fastinit.maker(
    RunInfo,
    (
        "agent_id",
        "turn_id",
        "parent_agent_id",
        "parent_turn_id",
        "depth",
        "max_depth",
        "llm",
        "config",
        "approval",
        "interrupter",
    ),
)
_model_request = _fastinit.maker(
    ModelRequest, ("messages", "tools", "tool_choice", "response_format", "params")
)
_text_delta = _fastinit.maker(ResponseDelta, ("delta",))
_delta_text = _fastinit.maker(DeltaText, ("text",))
_usage_delta = _fastinit.maker(UsageDelta, ("delta",))
_tool_output = _fastinit.maker(ToolOutput, ("call_id", "result"))
_uap_event = _fastinit.maker(UAPEvent, ("type", "step", "agent_id", "data"))
_state = _fastinit.maker(ExecutionState, ("messages", "metadata", "tool_executions"))
_tool_context = _fastinit.maker(
    ToolContext,
    (
        "call_id",
        "tool_name",
        "agent_id",
        "turn_id",
        "step",
        "state",
        "deps",
        "step_id",
        "interrupter",
        "key",
        "progress",
        "conversation",
    ),
)
_tool_execution = _fastinit.maker(
    ToolExecution, ("call", "output", "step", "duration", "child_turns")
)
_turn = _fastinit.maker(
    Turn,
    (
        "messages",
        "response",
        "usage",
        "data",
        "steps",
        "id",
        "agent_id",
        "parent_turn_id",
        "parent_agent_id",
        "tool_executions",
        "status",
        "stop_reason",
        "metadata",
        "pending_tool_calls",
        "interrupts",
    ),
)
_tool_message = _fastinit.maker(
    Message, ("role", "tool_call_id", "name", "content", "content_items")
)
