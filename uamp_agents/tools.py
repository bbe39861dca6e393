"""Tools: Python functions the model may call (UAP sections 2.6, 8).

A tool is any function, sync or async. :func:`tool` derives its JSON Schema
from the type hints and the docstring (description and ``Args:`` section),
or takes them explicitly. A parameter annotated :class:`ToolContext` is not
part of the schema: the runtime passes the context of the call there.

Failures are results: a tool that raises, an unknown tool name, arguments
that are not JSON or do not match the schema -- each becomes a tool result
with ``is_error=True`` that the model sees, never an exception that ends the
run (STYLE section 6).

Tool calls the model requests together run concurrently in a trio nursery
(:func:`run_tool_calls`); each call turns its own exception into an error
result stored by index, so results come back in call order and one failing
call never cancels its siblings. A tool marked ``sequential=True`` is a
barrier: the calls before it finish first, it runs alone, then the rest.
Sync functions run in a worker thread (they must be thread-safe, section
2.6) unless marked ``thread=False``.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

import attrs
import orjson
import trio

from uamp_proto.types import (
    FunctionDefinition,
    Message,
    ToolDefinition,
    ToolInvocation,
    ToolOutput,
)

from ._quickcheck import Check, compile_check
from ._schema import docstring_parts, parameters_schema, validate
from .errors import SchemaError, ToolError
from .hooks import maybe_await
from .state import ExecutionState

if TYPE_CHECKING:
    from .approval import Interrupter
    from .turn import Turn

__all__ = [
    "DepsT",
    "SchemaError",
    "Tool",
    "ToolContext",
    "ToolError",
    "as_tool",
    "deferred_tool",
    "format_result",
    "run_tool_calls",
    "tool",
]


#: The type of a run's dependencies, as a tool declares it (``ToolContext[Deps]``).
DepsT = TypeVar("DepsT")


@attrs.define(kw_only=True, eq=False)
class ToolContext(Generic[DepsT]):
    """What a tool sees of the run that called it.

    Generic over the run's dependencies: a tool that declares
    ``ctx: ToolContext[MyDeps]`` gets ``ctx.deps`` typed as ``MyDeps``, so a
    type checker verifies ``ctx.deps.db`` and friends. The object itself is
    the ``deps=`` given to ``Agent.run``/``stream`` (``None`` without one);
    it is not checked at run time. A bare ``ToolContext`` works as before,
    with ``deps`` of type ``Any``.

    Attributes:
        call_id: The id of this tool call.
        tool_name: The name the model called.
        agent_id: The id of the calling agent.
        turn_id: The id of the calling run's turn.
        step: The step number of the call.
        state: The calling run's execution state (``state.metadata`` is
            where a tool records facts for ``stop_condition``).
        deps: The run's dependencies (``Agent.run(..., deps=...)``).
        child_turns: Turns of sub-agents this call ran (filled by sub-agent
            tools; the runtime records them in the tool execution).
        conversation: The calling run's conversation so far (system prompt,
            history, this run's messages); ``None`` outside a run.
        progress: Reports a line of progress on this call to the calling
            run's stream (a UAP ``tool_progress`` event; a served agent's
            client gets UAMP ``progress`` with ``target: "tool"``); ``None``
            outside a run.
    """

    call_id: str
    tool_name: str
    agent_id: str
    turn_id: str
    step: int
    state: ExecutionState
    deps: DepsT
    child_turns: list[Turn] = attrs.field(factory=list)
    progress: Callable[[str], Awaitable[None]] | None = None
    conversation: Callable[[], list[Message]] | None = None
    step_id: str | None = None
    _interrupter: Interrupter | None = attrs.field(default=None, alias="interrupter", repr=False)
    _key: str = attrs.field(default="", alias="key", repr=False)
    _asks: int = attrs.field(default=0, init=False, repr=False)

    @property
    def metadata(self) -> dict[str, Any]:
        """Shortcut for ``state.metadata``."""
        return self.state.metadata

    def next_key(self) -> str:
        """The key of this call's next interrupt (its number within the call)."""
        key = f"{self._key or self.call_id}#{self._asks}"
        self._asks += 1
        return key

    async def ask_human(self, prompt: str, schema: Any = None) -> Any:
        """Ask a person ``prompt`` and return the answer (docs/human-in-the-loop.md).

        The run pauses until the answer comes. ``schema`` is a JSON Schema
        dict or a type (``int``, an attrs class ...); the answer is checked
        against it (asked again when it does not fit) and built as the type.

        Raises:
            ToolError: Nobody answered in time, or no answer fit.
            RuntimeError: The tool was not called by a run.
        """
        if self._interrupter is None:
            raise RuntimeError("ask_human() needs a tool call made by an agent run")
        from .approval import ask_question

        return await ask_question(
            self._interrupter,
            self.next_key(),
            prompt,
            schema,
            call_id=self.call_id,
            step_id=self.step_id,
        )


def _is_context_hint(hint: Any) -> bool:
    """Whether a parameter's annotation asks for the :class:`ToolContext`.

    ``ToolContext``, ``ToolContext[Deps]`` and ``Annotated[...]`` of either;
    also as strings, when a postponed annotation cannot be resolved (a deps
    class defined inside a function).
    """
    if isinstance(hint, str):
        return hint == "ToolContext" or hint.startswith("ToolContext[")
    if typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    return hint is ToolContext or typing.get_origin(hint) is ToolContext


@attrs.define(kw_only=True, eq=False)
class Tool:
    """A tool the model may call.

    Attributes:
        name: The function name the model uses.
        description: What the tool does (shown to the model).
        parameters: JSON Schema of the arguments (an object schema).
        fn: The function; called with the arguments as keywords.
        context_param: Name of the parameter that receives the
            :class:`ToolContext`, if any.
        sequential: Run alone, never concurrently with other calls.
        thread: Run a sync ``fn`` in a worker thread.
        validate_arguments: Check arguments against ``parameters`` first.
        agent: The sub-agent this tool runs, when it was made from an agent.
        deferred: The tool is run elsewhere (by the client of a served
            agent, see :func:`deferred_tool`): the model may call it, but the
            run stops instead of running it and the turn lists the call in
            ``pending_tool_calls``.
        requires_approval: A person approves each call first (``True``), or
            the calls for which this predicate over the arguments is true
            (docs/human-in-the-loop.md).
        read_only: The tool has no side effects (``approve="side_effects"``
            does not ask about it).
    """

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any]
    context_param: str | None = None
    sequential: bool = False
    thread: bool = True
    validate_arguments: bool = True
    agent: Any = None
    deferred: bool = False
    requires_approval: bool | Callable[[dict[str, Any]], Any] = False
    read_only: bool = False
    # Made once, not per model call or tool call (see definition, invoke);
    # made again when name, description or parameters are replaced.
    _definition: ToolDefinition | None = attrs.field(default=None, init=False, repr=False)
    _quick: tuple[Any, Check | None] | None = attrs.field(default=None, init=False, repr=False)

    def definition(self) -> ToolDefinition:
        """This tool as a uamp_proto tool definition for the model."""
        made = self._definition
        if made is not None:
            fn = made.function
            if (
                fn.name is self.name
                and fn.description is self.description
                and fn.parameters is self.parameters
            ):
                return made
        made = self._definition = ToolDefinition(
            function=FunctionDefinition(
                name=self.name, description=self.description, parameters=self.parameters
            )
        )
        return made

    def _valid_at_a_glance(self, arguments: dict[str, Any]) -> bool:
        """Whether the quick check of ``parameters`` (:mod:`._quickcheck`) passes ``arguments``."""
        quick = self._quick
        if quick is None or quick[0] is not self.parameters:
            quick = self._quick = (self.parameters, compile_check(self.parameters))
        check = quick[1]
        return check is not None and check(arguments)

    async def invoke(self, arguments: dict[str, Any], context: ToolContext[Any]) -> Any:
        """Call the function with ``arguments`` (and the context); return its value.

        Raises:
            ToolError: ``arguments`` do not match the schema.
            Exception: Whatever the function raises.
        """
        if self.validate_arguments and not self._valid_at_a_glance(arguments):
            problems = validate(arguments, self.parameters, "arguments")
            if problems:
                raise ToolError(f"invalid arguments for {self.name}: " + "; ".join(problems))
        kwargs = dict(arguments)
        if self.context_param is not None:
            kwargs[self.context_param] = context
        if not self.thread or inspect.iscoroutinefunction(self.fn):
            value = await maybe_await(self.fn(**kwargs))
        else:
            result = await trio.to_thread.run_sync(
                functools.partial(self.fn, **kwargs), abandon_on_cancel=True
            )
            value = await maybe_await(result)
        # A StructuredToolResult (uamp_agents.content) becomes its ToolOutput.
        convert = getattr(value, "as_tool_output", None)
        return convert(context.call_id) if callable(convert) else value


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    parameters: dict[str, Any] | None = None,
    sequential: bool = False,
    thread: bool = True,
    requires_approval: bool | Callable[[dict[str, Any]], Any] = False,
    read_only: bool = False,
) -> Callable[[Callable[..., Any]], Tool]: ...
@overload
def tool(
    fn: Callable[..., Any],
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    parameters: dict[str, Any] | None = None,
    sequential: bool = False,
    thread: bool = True,
    requires_approval: bool | Callable[[dict[str, Any]], Any] = False,
    read_only: bool = False,
) -> Tool: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    parameters: dict[str, Any] | None = None,
    sequential: bool = False,
    thread: bool = True,
    requires_approval: bool | Callable[[dict[str, Any]], Any] = False,
    read_only: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a :class:`Tool` from a function; also usable as a decorator.

    ``@tool``, ``@tool(name=...)`` and ``tool(fn, description=...)`` all
    work. The name defaults to the function's name, the description to its
    docstring's description, the parameters to the schema of its type hints
    (with ``Args:`` texts as property descriptions). ``requires_approval``
    (``True`` or a predicate over the arguments) makes a person approve calls
    first; ``read_only`` marks a tool without side effects.

    Raises:
        SchemaError: A parameter's type has no JSON Schema form and no
            explicit ``parameters`` were given.
        TypeError: ``fn`` is not callable.
    """

    def build(f: Callable[..., Any]) -> Tool:
        if not callable(f):
            raise TypeError(f"a tool must be callable, not {type(f).__name__}")
        context_param = _context_param(f)
        doc_text, _ = docstring_parts(getattr(f, "__doc__", None))
        schema = parameters if parameters is not None else parameters_schema(f, _is_context_hint)
        return Tool(
            name=name or str(getattr(f, "__name__", type(f).__name__)),
            description=description if description is not None else doc_text,
            parameters=schema,
            fn=f,
            context_param=context_param,
            sequential=sequential,
            thread=thread,
            requires_approval=requires_approval,
            read_only=read_only,
        )

    if fn is None:
        return build
    return build(fn)


def deferred_tool(
    name: str, description: str | None = None, parameters: dict[str, Any] | None = None
) -> Tool:
    """A tool the model may call but that this process does not run.

    It is how a served agent offers the tools its *client* declared: the
    model sees the definition next to the agent's own tools; when it calls
    it, the built-in ``loop`` and ``react`` strategies run the other calls of
    that step, then end the run with ``turn.stop_reason == "client_tool"``
    and the call in ``turn.pending_tool_calls``. The caller runs it and
    continues the conversation with the result (``Agent.run(history,
    resume=True)``). A strategy that does not hand calls over (``plan``)
    gets an error result for it instead.
    """

    def not_here(**_: Any) -> Any:
        raise ToolError(
            f"{name} is run by the client, and this strategy cannot hand calls over to it"
        )

    return Tool(
        name=name,
        description=description or "",
        parameters=parameters or {"type": "object", "properties": {}},
        fn=not_here,
        thread=False,
        validate_arguments=False,
        deferred=True,
    )


def _context_param(fn: Callable[..., Any]) -> str | None:
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:
        hints = {}
    for pname, param in inspect.signature(fn).parameters.items():
        if _is_context_hint(hints.get(pname, param.annotation)):
            return pname
    return None


def as_tool(value: Any) -> Tool:
    """Resolve a tools-list entry: a :class:`Tool`, an agent or a function.

    Raises:
        TypeError: The entry is none of these.
    """
    if isinstance(value, Tool):
        return value
    to_tool = getattr(value, "to_tool", None)
    if callable(to_tool) and hasattr(value, "id"):
        result = to_tool()
        if isinstance(result, Tool):
            return result
    if callable(value):
        made: Tool = tool(value)
        return made
    raise TypeError(f"tools must be functions, Tool objects or agents, not {type(value).__name__}")


def _default(value: Any) -> Any:
    if attrs.has(type(value)):
        return attrs.asdict(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return str(value)


def format_result(value: Any) -> str:
    """The text a tool's return value becomes: strings as they are, else JSON."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return orjson.dumps(value, default=_default).decode()


# --- concurrent execution ---------------------------------------------------

#: Runs one call, returns its output and any sub-agent turns it produced.
CallRunner = Callable[[int, ToolInvocation], Awaitable[None]]


async def run_tool_calls(
    calls: Sequence[ToolInvocation],
    run_one: CallRunner,
    *,
    sequential: Callable[[ToolInvocation], bool],
) -> None:
    """Run ``run_one(index, call)`` for every call, concurrently where allowed.

    Consecutive calls run together in one nursery; a call for which
    ``sequential(call)`` is true waits for the ones before it and runs alone.
    ``run_one`` must not raise (it stores its own result by index).
    """
    batch: list[tuple[int, ToolInvocation]] = []

    async def flush() -> None:
        if not batch:
            return
        if len(batch) == 1:
            await run_one(*batch[0])
        else:
            async with trio.open_nursery() as nursery:
                for index, call in batch:
                    nursery.start_soon(run_one, index, call)
        batch.clear()

    for index, call in enumerate(calls):
        if sequential(call):
            await flush()
            await run_one(index, call)
        else:
            batch.append((index, call))
    await flush()


def parse_arguments(call: ToolInvocation) -> dict[str, Any]:
    """Decode a call's JSON arguments into a dict.

    Raises:
        ToolError: The arguments are not a JSON object.
    """
    text = call.arguments.strip() or "{}"
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ToolError(f"arguments of {call.name} are not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ToolError(f"arguments of {call.name} must be a JSON object, got {text[:80]}")
    return value


def error_output(call_id: str, message: str) -> ToolOutput:
    """An error tool result."""
    return ToolOutput(call_id=call_id, result=message, is_error=True)
