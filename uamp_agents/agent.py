"""The agent: :func:`agent` and :class:`Agent` (UAP section 4).

An :class:`Agent` is configuration only -- model, tools, system prompt,
execution strategy, middleware, hooks -- and each call to :meth:`Agent.run`
or :meth:`Agent.stream` is a run of its own (STYLE section 6), so one agent
serves any number of concurrent runs.

A run goes through the middleware onion (section 10), then the execution
strategy (section 5) with an :class:`~uamp_agents.context.ExecutionContext`.
Identity and inheritance for sub-agents travel in a context variable (see
:mod:`uamp_agents.context`): a sub-agent without a model uses its parent's
model and provider configuration, resolved when it runs (section 8.3), and
nesting deeper than ``max_depth`` fails with
:class:`~uamp_agents.context.SubAgentDepthError` (section 16.1).
"""

from __future__ import annotations

import copy
import functools
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, TypedDict, Unpack, cast

import orjson
import trio

from uamp_proto.content_ids import find_content
from uamp_proto.errors import UampError
from uamp_proto.events import Thinking
from uamp_proto.ids import random_uuid4
from uamp_proto.interrupts import Answer
from uamp_proto.types import ContentItem, Message, TextContent

from ._schema import is_structured_class, schema_for
from .approval import ApprovalLike, ApprovalPolicy, Interrupter, InterruptHandler
from .context import (
    _CURRENT_RUN,
    ExecutionContext,
    RunInfo,
    StepCallback,
    _run_info,
    new_context,
)
from .errors import BudgetExceededError, NoModelError, SubAgentDepthError, ToolError
from .execution import LoopStrategy, ReactStrategy, StrategyLike, loop
from .hooks import AgentStrategy
from .middleware import MiddlewareContext, run_pipeline
from .providers.base import Provider
from .streaming import (
    DEFAULT_BUFFER,
    AgentStream,
    AgentStreamEvent,
    Emitter,
    UapEmitter,
    UAPEvent,
    UppEmitter,
)
from .tools import Tool, ToolContext, as_tool, format_result
from .tracing import tracing_off
from .turn import Turn

__all__ = [
    "DEFAULT_MAX_DEPTH",
    "SUB_AGENT_PARAMETERS",
    "Agent",
    "AgentInput",
    "NoModelError",
    "RunOptions",
    "agent",
    "to_message",
]

#: What a run takes as the user's input.
AgentInput = str | Message | Sequence[ContentItem]

#: Default limit of sub-agent nesting below a top-level run (section 16.1).
DEFAULT_MAX_DEPTH = 5

#: The parameter schema of an agent used as a tool (section 8.2).
SUB_AGENT_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "task": {"type": "string", "description": "The task for the sub-agent to perform"},
        # UAMP 8.5.4: media of the conversation handed on by content id.
        "attachments": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Content ids of images or files in the conversation to pass on",
        },
    },
    "required": ["task"],
}


class _Keep:
    """Marks an argument of :meth:`Agent.derive` that was not given."""


_KEEP = _Keep()


def to_message(value: AgentInput) -> Message:
    """Turn a run's input (text, a message, or content items) into a user message.

    Raises:
        TypeError: ``value`` is none of these.
    """
    if isinstance(value, str):
        return Message(role="user", content=value)
    if isinstance(value, Message):
        return value
    if isinstance(value, Sequence):
        items: list[ContentItem] = list(cast("Sequence[ContentItem]", value))
        if len(items) == 1 and isinstance(items[0], TextContent):
            return Message(role="user", content=items[0].text)
        return Message(role="user", content_items=items)
    raise TypeError(f"input must be a str, a Message or content items, not {type(value).__name__}")


def _history_of(value: Any) -> list[Message]:
    if type(value) is list:  # the usual history: a list of messages
        return list(value)
    history = getattr(value, "history", None)
    if callable(history):
        return list(history())
    if isinstance(value, Sequence) and not isinstance(value, str):
        return list(value)
    raise TypeError(
        f"history must be a list of messages or have a history() method, not {type(value).__name__}"
    )


def _structure(structure: Any) -> tuple[dict[str, Any] | None, type | None]:
    if structure is None:
        return None, None
    if isinstance(structure, dict):
        return structure, None
    if is_structured_class(structure):
        return schema_for(structure), structure
    return schema_for(structure), None


class RunOptions(TypedDict, total=False):
    """The keyword options of :meth:`Agent.run` and :meth:`Agent.stream` (documented there)."""

    session: Any
    on_step: StepCallback | None
    metadata: dict[str, Any] | None
    resume: bool
    tool_choice: str | dict[str, Any] | None
    deps: Any
    stream_model: bool
    stream_steps: bool
    on_interrupt: InterruptHandler | None
    answers: dict[str, Answer] | None
    interrupt_timeout: float | None


class Agent:
    """An agent definition (section 4.3). Build it with :func:`agent`.

    Attributes:
        id: UUIDv4 of this agent.
        model: The bound model (``None``: inherit from the parent run).
        tools: The tools and sub-agents as given.
        system: The system prompt.
        execution: The execution strategy.
        strategy: The lifecycle hooks.
        middleware: The middleware, outermost first.
        structure: The structured-output spec as given; ``schema`` is its
            JSON Schema.

    Args:
        model: A provider from :mod:`uamp_agents.providers`; ``None`` makes a
            sub-agent that inherits its parent's model.
        params: Model parameters sent with every call (``max_tokens`` ...).
        config: Provider configuration; applied through the provider's
            ``with_config(config)`` when it has one, and inherited by
            model-less sub-agents.
        execution: The strategy (default :func:`~uamp_agents.execution.loop`).
        tools: Functions, :class:`~uamp_agents.tools.Tool` objects and agents.
        system: The system prompt.
        structure: Structured output: a JSON Schema dict, or an attrs class,
            dataclass or TypedDict (then ``turn.data`` is an instance of it,
            or a dict for a TypedDict).
        middleware: Middleware, outermost first.
        strategy: Lifecycle hooks: an :class:`AgentStrategy` or a dict of them.
        name: A name; also the default tool name when used as a sub-agent.
        description: The description used when used as a sub-agent.
        max_depth: Deepest sub-agent nesting allowed below this agent.
        stream_buffer: Events buffered between a stream's run and its reader.
        approve: Which tool calls a person approves first: a set of tool
            names, a callable ``(tool_name, arguments) -> bool`` or
            ``"side_effects"`` (every tool not marked ``read_only``).
            Sub-agents inherit it and cannot narrow it
            (docs/human-in-the-loop.md).

    Raises:
        TypeError: A tool, the strategy, ``structure`` or ``execution`` has
            the wrong shape.
        ValueError: Two tools share a name, or ``max_depth`` < 0.
        SchemaError: A tool's or the structure's type has no JSON Schema.
    """

    def __init__(
        self,
        *,
        model: Provider | None = None,
        params: dict[str, Any] | None = None,
        config: dict[str, Any] | None = None,
        execution: StrategyLike | None = None,
        tools: Sequence[Any] = (),
        system: str | None = None,
        structure: Any = None,
        middleware: Sequence[Any] = (),
        strategy: AgentStrategy | dict[str, Any] | None = None,
        name: str | None = None,
        description: str | None = None,
        max_depth: int = DEFAULT_MAX_DEPTH,
        stream_buffer: int = DEFAULT_BUFFER,
        approve: ApprovalLike = None,
    ) -> None:
        if max_depth < 0:
            raise ValueError(f"max_depth must not be negative, got {max_depth}")
        if execution is not None and not (
            isinstance(getattr(execution, "name", None), str)
            and callable(getattr(execution, "execute", None))
        ):
            raise TypeError("execution must have a name and an async execute(context) method")
        self.id = str(uuid.uuid4())
        self.model = model
        self.params = dict(params or {})
        self.config = dict(config or {})
        self.execution: StrategyLike = execution if execution is not None else loop()
        self.tools = list(tools)
        self.system = system
        self.structure = structure
        self.schema, self._structure_type = _structure(structure)
        self.middleware = list(middleware)
        self.strategy = AgentStrategy.coerce(strategy)
        self.name = name
        self.description = description
        self.max_depth = max_depth
        self.stream_buffer = stream_buffer
        self.approve = approve
        self._approval = None if approve is None else ApprovalPolicy(approve)
        self._tools = [as_tool(t) for t in self.tools]
        names = [t.name for t in self._tools]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"two tools share the name(s) {duplicates}; rename one with tool()")

    def __repr__(self) -> str:
        label = f" {self.name!r}" if self.name else ""
        return f"<Agent{label} {self.id}>"

    @property
    def resolved_tools(self) -> list[Tool]:
        """The tools as :class:`~uamp_agents.tools.Tool` objects (agents converted)."""
        return list(self._tools)

    def derive(
        self,
        *,
        tools: Sequence[Any] = (),
        system: str | _Keep | None = _KEEP,
        params: dict[str, Any] | None = None,
        structure: Any = _KEEP,
        approve: ApprovalLike = None,
    ) -> Agent:
        """A variant of this agent for some runs: same id, name and strategy.

        Used to serve an agent with what a request adds (the client's tools,
        its instructions, sampling parameters, a response format) without
        changing the agent itself.

        Args:
            tools: Tools added after the agent's own (e.g.
                :func:`~uamp_agents.tools.deferred_tool` objects).
            system: Replaces the system prompt.
            params: Replaces the model parameters.
            structure: Replaces the structured-output spec (``None``: none).
            approve: Added to the agent's approval policy (a call is asked
                about when either asks).

        Raises:
            ValueError: An added tool's name is already taken.
        """
        variant = copy.copy(self)
        if tools:
            added = [as_tool(t) for t in tools]
            taken = {t.name for t in self._tools}
            clash = sorted({t.name for t in added if t.name in taken})
            if clash or len({t.name for t in added}) != len(added):
                raise ValueError(f"added tools clash with other tools: {clash or 'duplicates'}")
            variant.tools = [*self.tools, *tools]
            variant._tools = [*self._tools, *added]
        if not isinstance(system, _Keep):
            variant.system = system
        if params is not None:
            variant.params = dict(params)
        if not isinstance(structure, _Keep):
            variant.structure = structure
            variant.schema, variant._structure_type = _structure(structure)
        if approve is not None:
            variant._approval = ApprovalPolicy(approve, self._approval)
        return variant

    # --- public API -----------------------------------------------------------

    async def run(
        self,
        history_or_input: Any,
        input: AgentInput | None = None,
        **options: Unpack[RunOptions],
    ) -> Turn:
        """Run the agent and return the turn (section 4.3).

        Call it as ``run(input)`` or ``run(history, input)``. ``input`` is
        text, a :class:`Message` or a list of content items; ``history`` is a
        list of messages or an object with a ``history()`` method.

        ``run(history, resume=True)`` continues a conversation that has no
        new user input -- typically one that ends with the ``role="tool"``
        results of calls a deferred tool handed out (see
        :func:`~uamp_agents.tools.deferred_tool`). The model is called on the
        history as it is; ``turn.messages`` then holds only the messages the
        run added, and middleware sees ``context.input is None``.

        Keyword Args:
            session (Any): The session the run belongs to (shown to middleware).
            on_step (StepCallback | None): Called as ``on_step(step, state)``
                after every step (after ``on_step_end``, before
                ``stop_condition``); if it returns a string, that is
                announced as a ``checkpoint`` event.
            metadata (dict[str, Any] | None): Initial ``state.metadata`` (and middleware metadata).
            resume (bool): Continue ``history`` without new input (see above).
            tool_choice (str | dict[str, Any] | None): ``"auto"``, ``"none"``,
                ``"required"`` or
                ``{"type": "function", "function": {"name": ...}}`` for the
                run's model calls; a forcing choice applies to the first
                model call that offers tools only (see
                :attr:`ExecutionContext.tool_choice
                <uamp_agents.context.ExecutionContext>`).
            deps (Any): The run's dependencies: any object (a database handle, a
                client, settings) that tools receive as ``ctx.deps`` when
                they take a ``ToolContext[YourDeps]`` parameter. Sub-agents
                called as tools get the same object.
            stream_model (bool): For :meth:`stream`: ``False`` calls the model for
                whole replies and emits each as one delta (with its thinking
                and usage) -- for a consumer that only keeps the finished
                turn, such as a non-streamed completion. Default ``True``.
            stream_steps (bool): For :meth:`stream` and :meth:`drive`:
                ``False`` leaves the ``step_start`` and ``step_end`` events
                out of the stream (middleware ``on_event`` still sees them)
                -- for a consumer that shows no progress. Default ``True``.
            on_interrupt (InterruptHandler | None): Asked about every
                approval and question of the run (and its sub-agents); the
                run waits for its answer. Without one the run stops at the
                first interrupt (``turn.stop_reason == "interrupted"``).
            answers (dict[str, Answer] | None): With ``resume=True``: answers
                to the interrupts a stopped run listed, by their ``key``.
            interrupt_timeout (float | None): Seconds ``on_interrupt`` may
                take; then the interrupt expires (a denial the model sees).

        Raises:
            NoModelError: No model, and no parent run to inherit one from.
            SubAgentDepthError: Sub-agents nested deeper than ``max_depth``.
            Exception: Whatever the model, a hook or a middleware raised,
                unless ``on_error`` or a middleware recovered.
        """
        history, user = _split(history_or_input, input, options.get("resume", False))
        # Nothing outside can abort a run: no cancel scope (entering one costs
        # as much as a fifth of a short run).
        return await self._execute(history, user, options, emitter=None, abort=None)

    def stream(
        self,
        history_or_input: Any,
        input: AgentInput | None = None,
        **options: Unpack[RunOptions],
    ) -> AgentStream:
        """Run the agent as a stream of events (section 12); same arguments as :meth:`run`.

        The run starts when the stream is first iterated, entered
        (``async with``) or its ``turn`` awaited.
        """
        history, user = _split(history_or_input, input, options.get("resume", False))

        async def runner(emit: Emitter, abort: trio.CancelScope) -> Turn:
            return await self._execute(history, user, options, emitter=emit, abort=abort)

        return AgentStream(runner, buffer=self.stream_buffer)

    async def drive(
        self,
        history_or_input: Any,
        input: AgentInput | None = None,
        *,
        consumer: Emitter,
        upp: UppEmitter | None = None,
        uap: UapEmitter | None = None,
        **options: Unpack[RunOptions],
    ) -> Turn:
        """Run the agent in this task, awaiting ``consumer(event)`` for each stream event.

        What ``stream(...).drive(consumer)`` does -- same arguments as
        :meth:`run`, the same events, the same turn, the consumer's error
        raised the same way -- for a caller that never aborts the run from
        outside: no stream object is made, and when nothing could see the
        difference the run has no abort scope of its own (see
        :meth:`_drives_bare`).

        ``upp`` and ``uap``: the model's own events (a stream event's
        ``upp``: text, thinking, usage...) go to ``upp(event)``, the agent's
        (a stream event's ``uap``: actions, observations...) to
        ``uap(event)``, as they are instead, with no stream event made around
        each; the order of all events is the same, and so is what a failing
        one does.

        Raises:
            Exception: The run's error, or the consumer's.
        """
        if not self._drives_bare():
            if upp is not None or uap is not None:
                consumer = functools.partial(_either, consumer, upp, uap)
            return await self.stream(history_or_input, input, **options).drive(consumer)
        history, user = _split(history_or_input, input, options.get("resume", False))
        # Each consumer through a closure of its own (cheaper to make and to
        # call than a bound method through a partial): the first failure is
        # kept, and every later event (the failing one's too) unwinds the run.
        failure: Exception | None = None

        async def forward(event: AgentStreamEvent) -> None:
            nonlocal failure
            if failure is None:
                try:
                    await consumer(event)
                    return
                except Exception as exc:
                    failure = exc
            raise _ConsumerGone

        direct: Callable[[Any], Awaitable[None]] | None = None
        if upp is not None or uap is not None:
            # The model's and the agent's events as they are, to ``upp`` and ``uap``
            # (the run hands this one only the kinds whose consumer was given).

            async def direct(event: Any) -> None:
                nonlocal failure
                if failure is None:
                    try:
                        await (uap if type(event) is UAPEvent else upp)(event)  # type: ignore[misc]
                        return
                    except Exception as exc:
                        failure = exc
                raise _ConsumerGone

        try:
            return await self._execute(
                history,
                user,
                options,
                emitter=forward,
                abort=None,
                upp=None if upp is None else direct,
                uap=None if uap is None else direct,
            )
        except _ConsumerGone:
            assert failure is not None
            raise failure from None

    def _drives_bare(self) -> bool:
        """Whether :meth:`drive` may run without an abort scope.

        A stream whose consumer fails aborts its run: a cancellation unwinds
        it, and the aborted run's partial turn reaches ``on_complete`` and
        middleware. Without the scope the run unwinds by an exception
        instead, from the consumer's call up, past nothing that could catch
        it: the loop and react strategies, no middleware, no ``on_complete``
        or ``on_error`` hook, no tool that is handed the run's context (its
        progress reports reach the consumer, and a tool may catch what they
        raise), no tracer (its spans record the exception's type).
        """
        strategy = self.strategy
        if (
            self.middleware
            or type(self.execution) not in _BARE_STRATEGIES
            or strategy.on_complete is not None
            or strategy.on_error is not None
            or not tracing_off()
        ):
            return False
        tools = self._tools
        known = self.__dict__.get("_quiet_tools")
        if known is None or known[0] is not tools:  # once per tool list
            known = self.__dict__["_quiet_tools"] = (
                tools,
                all(t.context_param is None for t in tools),
            )
        quiet: bool = known[1]
        return quiet

    def to_tool(
        self,
        name: str | None = None,
        description: str | None = None,
        parameter_schema: dict[str, Any] | None = None,
        *,
        forward_thinking: bool = False,
    ) -> Tool:
        """This agent as a tool for another agent (section 8.2).

        The tool's name defaults to the agent's ``name``, else
        ``agent_<id>``; its description to the agent's ``description``, else
        one made from the system prompt; its parameters to ``{"task": str}``.
        Calling it runs the agent on the task (or, with a custom schema and no
        ``task``, on the arguments as JSON) and returns the response text (the
        structured data as JSON for an agent with a ``structure``).

        ``forward_thinking`` (UAMP 6.13's ``DELEGATE_FORWARD_THINKING``, off
        by default here): the sub-agent's thinking, and the progress of its
        own tools, reach the caller's stream as the call's progress
        (:attr:`ToolContext.progress`) while it runs.
        """
        sub = self

        async def run_sub_agent(context: ToolContext[Any], **arguments: Any) -> str:
            task = arguments.get("task")
            text = task if isinstance(task, str) else orjson.dumps(arguments).decode()
            given: AgentInput = text
            attachments = arguments.get("attachments")
            if attachments:
                given = [TextContent(text=text), *_attachments(context, attachments)]
            report = context.progress if forward_thinking else None
            if report is None:
                turn = await sub.run(given, deps=context.deps)
            else:
                turn = await sub.stream(given, deps=context.deps).drive(
                    functools.partial(_forward_thinking, report)
                )
            context.child_turns.append(turn)
            if sub.schema is not None and turn.data is not None:
                return format_result(turn.data)
            return turn.response.text

        return Tool(
            name=name or self.name or f"agent_{self.id}",
            description=description or self.description or _describe(self.system),
            parameters=parameter_schema or SUB_AGENT_PARAMETERS,
            fn=run_sub_agent,
            context_param="context",
            thread=False,
            agent=self,
        )

    # --- one run ----------------------------------------------------------------

    async def _execute(
        self,
        history: list[Message],
        user: Message | None,
        options: RunOptions,
        *,
        emitter: Emitter | None,
        abort: trio.CancelScope | None,
        upp: UppEmitter | None = None,
        uap: UapEmitter | None = None,
    ) -> Turn:
        parent = _CURRENT_RUN.get()  # (current_run(), without its call)
        depth = 0 if parent is None else parent.depth + 1
        limit = self.max_depth if parent is None else min(parent.max_depth, self.max_depth)
        if depth > limit:
            raise SubAgentDepthError(
                f"sub-agent nesting depth {depth} exceeds the limit of {limit} "
                f"(agent {self.id}); raise max_depth on the top-level agent to allow it"
            )
        llm, config = self._bind_model(parent)
        if parent is None:
            approval = self._approval
            interrupter: Interrupter | None = Interrupter(
                options.get("on_interrupt"),
                options.get("answers"),
                options.get("interrupt_timeout"),
                self.name,
            )
        else:
            approval = ApprovalPolicy.combine(self._approval, parent.approval)
            interrupter = parent.interrupter
        info = _run_info(  # RunInfo(agent_id=..., turn_id=..., ...), positionally
            self.id,
            random_uuid4(),
            parent.agent_id if parent else None,
            parent.turn_id if parent else None,
            depth,
            limit,
            llm,
            config,
            approval,
            interrupter,
        )

        def context(
            input: Message | None,
            history: list[Message],
            checks: Sequence[Any],
            listeners: Sequence[Any],
            metadata: dict[str, Any] | None,
        ) -> ExecutionContext:
            return new_context(  # ExecutionContext(agent=..., ...), positionally
                self,
                llm,
                input,
                list(history),
                list(self._tools),
                self.strategy,
                info,
                self.params,
                self.system,
                self.schema,
                self._structure_type,
                emitter,
                upp,
                uap,
                checks,
                listeners,
                options.get("on_step"),
                metadata,  # (the run's state takes a copy)
                options.get("tool_choice"),
                options.get("deps"),
                options.get("stream_model", True),
                options.get("stream_steps", True),
            )

        if not self.middleware:
            # Nobody to see a middleware context (the common agent): none is made.
            exe = context(user, history, (), (), options.get("metadata"))
            token = _CURRENT_RUN.set(info)  # (a context manager's generator costs more)
            try:
                if abort is None and user is not None and self.strategy.on_complete is None:
                    # _run_strategy and _strategy_turn, inline (two coroutines less
                    # per run): nothing aborts the run, a new input suspends
                    # nothing, and no on_complete hook follows.
                    try:
                        turn: Turn | None = await self.execution.execute(exe)
                        if turn is None:
                            turn = exe.partial_turn()
                    except Exception as exc:
                        return await self._recover(exc, exe)
                    return turn
                return await self._run_strategy(exe, None, abort)
            finally:
                _CURRENT_RUN.reset(token)
        mctx = MiddlewareContext(
            agent=self,
            input=user,
            history=history,
            metadata=dict(options.get("metadata") or {}),
            session=options.get("session"),
        )

        async def core(ctx: MiddlewareContext) -> Turn:
            listeners = [
                functools.partial(mw.on_event, ctx)
                for mw in self.middleware
                if callable(getattr(mw, "on_event", None))
            ]
            exe = context(ctx.input, ctx.history, list(ctx.checks), listeners, ctx.metadata)
            token = _CURRENT_RUN.set(info)
            try:
                return await self._run_strategy(exe, ctx, abort)
            finally:
                _CURRENT_RUN.reset(token)

        return await run_pipeline(self.middleware, mctx, core)

    async def _run_strategy(
        self,
        exe: ExecutionContext,
        mctx: MiddlewareContext | None,
        abort: trio.CancelScope | None,
    ) -> Turn:
        turn: Turn | None = None
        try:
            if abort is None:  # nothing aborts the run: no scope to enter
                turn = await self._strategy_turn(exe, mctx)
            else:
                with abort:
                    turn = await self._strategy_turn(exe, mctx)
            if turn is None:  # aborted: resolve with what happened so far
                turn = exe.partial_turn()
        except Exception as exc:
            turn = await self._recover(exc, exe)
        if self.strategy.on_complete is not None:
            await self.strategy.call("on_complete", turn)
        return turn

    async def _recover(self, exc: Exception, exe: ExecutionContext) -> Turn:
        """The ``on_error`` hook's turn for the run's ``exc``; raises ``exc`` without one.

        Called in the ``except`` block that caught ``exc``.
        """
        recovered = await self.strategy.call("on_error", exc, exe.state)
        if recovered is None:
            raise exc
        if not isinstance(recovered, Turn):
            raise TypeError(
                f"on_error must return a Turn or None, not {type(recovered).__name__}"
            ) from exc
        return recovered

    async def _strategy_turn(self, exe: ExecutionContext, mctx: MiddlewareContext | None) -> Turn:
        if exe.input is None:
            await exe.resume_paused_calls()
        if exe.suspended:
            return exe.make_turn(exe.last_assistant(), stop_reason="interrupted")
        if mctx is None or mctx.deadline is None:
            return await self.execution.execute(exe)
        started = trio.current_time()  # (only a deadline needs the clock)
        turn: Turn | None = None
        with trio.move_on_at(mctx.deadline) as timer:
            turn = await self.execution.execute(exe)
        if timer.cancelled_caught:
            limit = float(mctx.metadata.get("budget_max_seconds", mctx.deadline - started))
            raise BudgetExceededError("seconds", limit, trio.current_time() - started)
        assert turn is not None
        return turn

    def _bind_model(self, parent: RunInfo | None) -> tuple[Provider, dict[str, Any]]:
        if self.model is not None:
            config = self.config
            return (_configured(self.model, config) if config else self.model), config
        if parent is None:
            raise NoModelError(
                f"agent {self.id} has no model: pass agent(model=...) or run it as a "
                f"sub-agent of an agent that has one"
            )
        config = {**parent.config, **self.config}
        return _configured(parent.llm, self.config) if self.config else parent.llm, config


def _configured(provider: Provider, config: dict[str, Any]) -> Provider:
    """Apply provider configuration through the provider's ``with_config``, if it has one."""
    if not config:
        return provider
    with_config = getattr(provider, "with_config", None)
    if callable(with_config):
        configured: Provider = with_config(config)
        return configured
    return provider


def _attachments(context: ToolContext[Any], ids: Any) -> list[ContentItem]:
    """The media of the caller's conversation named by ``ids`` (UAMP 8.5.4).

    Raises:
        ToolError: An id is not a string, or names nothing in the conversation.
    """
    conversation = context.conversation() if context.conversation is not None else []
    found: list[ContentItem] = []
    for content_id in ids if isinstance(ids, list) else [ids]:
        item = find_content(conversation, content_id) if isinstance(content_id, str) else None
        if item is None:
            raise ToolError(f"attachment {content_id!r} is no content id of this conversation")
        found.append(item)
    return found


async def _either(
    consumer: Emitter, upp: UppEmitter | None, uap: UapEmitter | None, event: AgentStreamEvent
) -> None:
    """``drive``'s consumers as one: a model event to ``upp``, an agent's to ``uap``
    (each when given), any other to ``consumer``."""
    if upp is not None and event.upp is not None:
        await upp(event.upp)
    elif uap is not None and event.uap is not None:
        await uap(event.uap)
    else:
        await consumer(event)


async def _forward_thinking(
    report: Callable[[str], Awaitable[None]], event: AgentStreamEvent
) -> None:
    """A delegated run's thinking, and its own tools' progress, as the caller's progress."""
    upp = event.upp
    if isinstance(upp, Thinking):
        if upp.content and not upp.redacted:
            await report(upp.content)
    elif event.uap is not None and event.uap.type == "tool_progress":
        await report(str(event.uap.data.get("text", "")))


class _ConsumerGone(UampError):
    """Unwinds a run whose consumer failed (:meth:`Agent.drive`)."""


#: The strategies :meth:`Agent.drive` runs without an abort scope: they catch
#: nothing an event's consumer raises (``plan`` runs its steps as errors it recovers from).
_BARE_STRATEGIES: Final = (LoopStrategy, ReactStrategy)


def _split(
    history_or_input: Any, input: AgentInput | None, resume: bool = False
) -> tuple[list[Message], Message | None]:
    if resume:
        if input is not None:
            raise TypeError("resume=True continues a history: pass no input")
        return _history_of(history_or_input), None
    if input is None:
        return [], to_message(history_or_input)
    return _history_of(history_or_input), to_message(input)


def _describe(system: str | None) -> str:
    if not system:
        return "A sub-agent that performs the given task and reports the result."
    text = " ".join(system.split())
    if len(text) > 300:
        text = text[:297] + "..."
    return f"A sub-agent. Its instructions: {text}"


#: Create an agent (section 4.1); the same as calling :class:`Agent`.
agent = Agent
