"""Serving a UAP agent through every transport: :func:`serve_agent`.

The transports serve anything that satisfies the agent boundary,
:class:`uamp_proto.responder.Responder`: a name, ``capabilities()`` and ``async
respond(request, emit)``, UAMP events in and out. :func:`serve_agent` wraps a
runtime :class:`~uamp_agents.agent.Agent` into such an object, an
:class:`AgentEndpoint`::

    from uamp_agents import agent
    from uamp_agents.bridge import serve_agent
    from uamp_trio.app import create_app

    app = create_app([serve_agent(agent(model=..., tools=[...], name="helper"))])

(``uamp serve --agent module:attr`` does this for any runtime agent it loads.)

Theory of operation
-------------------
One ``respond`` call is one streamed run of the agent driven inline
(:meth:`Agent.drive <uamp_agents.agent.Agent.drive>`): the run executes in
the transport's task and each of its events is mapped and handed to ``emit``
right there, with no channel and no task switch between the model's stream
and the transport's writer. When the transport cancels the
response, the run and every tool call in flight are cancelled with it and
nothing outlives the call.

*The request.* ``request.messages`` is the whole conversation. When it ends
with a user message, that message is the run's input and the rest its
history; otherwise (the ``role="tool"`` results of a client tool round trip,
or no messages at all) the run resumes the conversation without new input
(``resume=True``). ``request.instructions`` is appended to the agent's own
system prompt, ``request.response_format`` (JSON Schema, or any JSON object)
becomes the run's structured output, and the sampling parameters a transport
puts in ``request.metadata`` (``temperature``, ``top_p``, ``max_tokens``,
``stop``, ``seed``, ``presence_penalty``, ``frequency_penalty``), and the same
keys in ``request.extensions`` (``session.extensions``, where Robutler's
clients send model settings; the metadata wins), override the agent's
``params``. The run's ``state.metadata["uamp"]`` names the agent,
session, response and principal (``{"scheme", "id"}``), and carries the
client's merged capability declaration (``client_capabilities``, a dict or
``None``) and the ``context`` of its input (``input.text.context``: any keys,
``chat_id`` and ``sender_id`` among them), which tools read as
``ctx.metadata["uamp"]``.

*Client tools.* The tools the client declared (``request.tools``) are offered
to the model next to the agent's own, as deferred tools
(:func:`~uamp_agents.tools.deferred_tool`); a client tool named like one of
the agent's own is left out (the agent's tool wins). When the model calls a
client tool, the run executes that step's server-side calls, stops, and the
endpoint emits one :class:`~uamp_proto.events.ToolCall` per client call and
returns; the transport collects the results and calls ``respond`` again with
the conversation extended. ``request.tool_choice`` goes to the run: ``none``
for every model call, a forcing choice (``required`` or a named function) for
the first one only -- and not again when the run resumes after the client's
results, where the choice has been honoured already.

*Events out.* The model's events pass through as they are: text and tool-call
fragments (:class:`~uamp_proto.events.ResponseDelta`),
:class:`~uamp_proto.events.Thinking`, :class:`~uamp_proto.events.UsageDelta`.
The agent's own tool calls then get a ``tool_result`` delta with the result
text (status ``completed`` or ``failed``) and a ``tool.call_done``; a
server-side call the model did not stream as fragments gets one fragment
first. Agent-level events become :class:`~uamp_proto.events.Progress` with
``target="response"``, the step number and a ``stage``: ``step_start``,
``step_end``, ``reasoning`` (the message is the reasoning text),
``action`` (these four only when ``request.streamed``: nobody sees a
non-streamed response's progress, and its tracker ignores them),
``checkpoint``; a tool's ``tool_progress`` (a
delegated agent's thinking, UAMP 6.13) becomes a ``tool_progress`` delta
(6.6: ``call_id``, ``text``).
Usage: the model's ``usage.delta`` events are passed on as
they come, and when the run's total is larger (sub-agents, a provider that
reports usage only in its final response) one more ``usage.delta`` carries
the difference, so the transport's sum equals the run's usage and nothing is
counted twice.

*A tool by name.* A request whose ``metadata`` holds
:data:`~uamp_proto.responder.TOOL_CALL` (ACP ``tools/call``) runs that one
tool of the agent (its own or its tool sources', never a client's) with the
arguments given, without the model; the result text is the response's
text. No such tool: ``unknown_tool``; a failing one: ``tool_failed``.

*Failures.* Runtime errors become :class:`~uamp_proto.responder.ResponderError` with
a code: ``budget_exceeded``, ``provider_error`` (``rate_limit_exceeded`` for
a 429), ``guardrail_rejected``, ``invalid_structured_output``, ``plan_failed``,
``max_depth_exceeded``, ``no_model``, ``agent_error``; a run that used up its
steps without answering is ``max_steps``. An ``ResponderError`` or
``PaymentRequiredError`` raised by a tool's or a middleware's code passes as
it is; anything else is left to the transport (``internal_error``).
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import attrs

from uamp_proto import _fastinit
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.codec import unstructure
from uamp_proto.content_ids import with_content_ids
from uamp_proto.ids import random_ids, random_uuid4
from uamp_proto.interrupts import QUESTION, Answer, Interrupt
from uamp_proto.payment import PaymentRequiredError
from uamp_proto.responder import TOOL_CALL, Emit, ResponderError, TurnRequest
from uamp_proto.types import EMPTY

from .agent import Agent, NoModelError, agent
from .approval import ApprovalPolicy, tool_requires
from .content import PRESENT
from .errors import AgentRuntimeError, ProviderError, StructuredOutputError, SubAgentDepthError
from .execution import PlanError
from .mcp import McpServer, connect_mcp
from .middleware import BudgetExceededError, GuardrailError
from .providers.catalog import ModelInfo, model_info
from .state import ExecutionState
from .streaming import AgentStreamEvent, UAPEvent
from .tools import Tool, ToolContext, deferred_tool, format_result, tool
from .turn import Turn

__all__ = ["SAMPLING_PARAMS", "AgentEndpoint", "demo_agent", "serve_agent"]

log = logging.getLogger("uamp_agents.bridge")

#: ``request.metadata`` keys that become model parameters of the run.
SAMPLING_PARAMS = (
    "temperature",
    "top_p",
    "max_tokens",
    "stop",
    "seed",
    "presence_penalty",
    "frequency_penalty",
)

_SAMPLING = frozenset(SAMPLING_PARAMS)


def serve_agent(
    agent: Agent,
    *,
    name: str | None = None,
    capabilities: ty.Capabilities | None = None,
    checkpoints: bool = False,
) -> AgentEndpoint:
    """Wrap a runtime agent so that every transport can serve it.

    Args:
        agent: The agent (see :func:`uamp_agents.agent`).
        name: The name to serve it under (default: the agent's ``name``).
        capabilities: Use this declaration instead of the derived one.
        checkpoints: Announce a UAP checkpoint after every step (see
            :attr:`AgentEndpoint.checkpoints`).

    Raises:
        ValueError: Neither ``name`` nor the agent's ``name`` is set.
    """
    endpoint = AgentEndpoint(agent, name=name, capabilities=capabilities)
    endpoint.checkpoints = checkpoints
    return endpoint


@attrs.frozen
class _ModelName:
    """A provider's name and a model name: what :func:`model_info` looks up."""

    name: str
    model: str


class AgentEndpoint:
    """A runtime agent as a :class:`uamp_proto.responder.Responder`; see the module docstring.

    Attributes:
        agent: The wrapped runtime agent.
        checkpoints: Announce a UAP checkpoint (``progress`` stage
            ``checkpoint``, a fresh id) after every step of a run (spec 002,
            6.4 and level 2). The step's output -- its tool results included
            -- is then complete in the session's event log, and a response
            whose process is lost goes on from there in another process
            instead of ending ``interrupted`` (docs/resume.md, "Node loss").
            ``uamp serve --store`` with a SQLite file or Redis turns it on.
        tool_sources: Where more tools come from, asked at every run: objects
            with ``tools() -> list[Tool]`` (an
            :class:`~uamp_agents.mcp.McpToolset`, ``uamp serve --mcp``). The
            agent's own tools keep their names; a client's tool of the same
            name is shadowed.
    """

    checkpoints: bool = False
    #: Tools a person approves before each call, added to the agent's own
    #: approval policy (``uamp serve --approve``; docs/human-in-the-loop.md).
    approve: frozenset[str] = frozenset()

    def __init__(
        self,
        agent: Agent,
        *,
        name: str | None = None,
        capabilities: ty.Capabilities | None = None,
    ) -> None:
        served = name or agent.name
        if not served:
            raise ValueError("the agent has no name: give it agent(name=...) or pass name=")
        self.agent = agent
        self._name = served
        self._capabilities = capabilities
        self._cached: tuple[tuple[Any, ...], ty.Capabilities] | None = None
        self.tool_sources: list[Any] = []

    def __repr__(self) -> str:
        return f"<AgentEndpoint {self._name!r} {self.agent!r}>"

    @property
    def name(self) -> str:
        """The name the agent is served under."""
        return self._name

    def capabilities(self) -> ty.Capabilities:
        """The agent's capabilities: the model's real ones where known.

        The model's facts (:func:`uamp_agents.providers.catalog.model_info`:
        modalities, ``supports_thinking``, ``supports_caching``, tool
        support, context window, output limit) come from its provider where
        it knows them; otherwise the declaration given to :func:`serve_agent`
        stands, and without one the agent declares text, streaming and
        tools. ``provider`` is the model's provider name;
        ``tools.built_in_tools`` lists the agent's own tools;
        ``extensions["uap"]`` carries the agent id, model, strategy and
        description.

        Computed again only when what it is made of changed (the model, the
        tools, the declaration...): the server compares it around every
        response (UAMP 6.4), and building it costs more than a short turn's
        bookkeeping.
        """
        a = self.agent
        model = a.model
        key = (
            id(model),
            getattr(model, "name", None),
            getattr(model, "model", None),
            id(self._capabilities),
            tuple(map(id, a.resolved_tools)),
            a.description,
            a.execution.name,
            a.id,
        )
        cached = self._cached
        if cached is not None and cached[0] == key:
            return cached[1]
        if model is None:
            caps = self._declaration(None, None, None)
        else:
            caps = self._declaration(model.name, model.model, model_info(model))
        self._cached = (key, caps)
        return caps

    def capabilities_for(self, model: str) -> ty.Capabilities | None:
        """The agent's capabilities were it to run on ``model`` of its provider.

        What ``capabilities.query`` with ``model`` answers inside a session
        (UAMP 5.4). ``None`` when uamp knows nothing of that model.
        """
        current = self.agent.model
        if current is None:
            return None
        if model == current.model:
            return self.capabilities()
        info = model_info(_ModelName(current.name, model))
        return None if info is None else self._declaration(current.name, model, info)

    def _declaration(
        self, provider: str | None, model: str | None, info: ModelInfo | None
    ) -> ty.Capabilities:
        a = self.agent
        declared = self._capabilities
        if declared is not None and info is None:
            return declared
        own = [t.name for t in a.resolved_tools]
        uap: dict[str, Any] = {"agent_id": a.id, "execution": a.execution.name}
        if model is not None:
            uap["model"] = model
        if a.description:
            uap["description"] = a.description
        tools = ty.ToolCapabilities(
            supports_tools=True
            if info is None or info.supports_tools is None
            else info.supports_tools,
            supports_parallel_tools=(
                True
                if info is None or info.supports_parallel_tools is None
                else info.supports_parallel_tools
            ),
            supports_streaming_tools=True,
            built_in_tools=own or None,
        )
        if declared is None:
            declared = ty.Capabilities(
                id=self._name,
                provider=provider or "uamp",
                modalities=["text"],
                supports_streaming=True,
                tools=tools,
                extensions={"uap": uap},
            )
        if info is None:
            return declared
        return attrs.evolve(
            declared,
            modalities=list(info.modalities),
            supports_thinking=_known(info.supports_thinking, declared.supports_thinking),
            supports_caching=_known(info.supports_caching, declared.supports_caching),
            context_window=_known(info.context_window, declared.context_window),
            max_output_tokens=_known(info.max_output_tokens, declared.max_output_tokens),
            tools=attrs.evolve(
                declared.tools or tools,
                supports_tools=tools.supports_tools,
                supports_parallel_tools=tools.supports_parallel_tools,
            ),
        )

    # --- one response -----------------------------------------------------------

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        """Run the agent on the request's conversation; see the module docstring.

        Raises:
            ResponderError: The run failed (see the module docstring for codes).
        """
        call = request.metadata.get(TOOL_CALL)
        if isinstance(call, dict):
            await self._call_tool(request, emit, call)
            return
        servers = _mcp_servers(request) if request.mcp_servers else None
        if not servers:
            await self._respond(request, emit, self._variant(request, self.tool_sources))
            return
        # The turn's own MCP servers (ACP's mcpServers) live in this run's nursery.
        own = [t.name for t in self.agent.resolved_tools]
        async with connect_mcp(*servers, reserved=own) as toolset:
            await self._respond(
                request, emit, self._variant(request, [*self.tool_sources, toolset])
            )

    async def _call_tool(self, request: TurnRequest, emit: Emit, call: dict[str, Any]) -> None:
        """Run one of the agent's own tools by name (``TOOL_CALL``), not the model.

        The tool gets a fresh :class:`~uamp_agents.state.ExecutionState` with
        the same ``metadata["uamp"]`` a run's tools see.
        """
        name, arguments = call.get("name"), call.get("arguments") or {}
        found = self._own_tool(name) if isinstance(name, str) else None
        if found is None or not isinstance(arguments, dict):
            raise ResponderError(
                "unknown_tool", f"agent {self._name!r} has no tool {name!r}", {"name": name}
            )
        approve = self.agent.approve
        policy = ApprovalPolicy(approve) if approve is not None else None
        if await tool_requires(found, arguments) or (
            policy is not None and await policy.needs(found, arguments)
        ):
            # Fail closed: nobody is asked here, so a call a person must approve never runs.
            raise ResponderError(
                "approval_required",
                f"tool {found.name!r} needs a person's approval: ask for it in a prompt",
                {"name": found.name},
            )
        state = ExecutionState(metadata={"uamp": _uamp_metadata(request)})
        context: ToolContext[Any] = ToolContext(
            call_id=f"call_{uuid.uuid4().hex[:24]}",
            tool_name=found.name,
            agent_id=self.agent.id,
            turn_id=request.response_id,
            step=1,
            state=state,
            deps=None,
        )
        try:
            value = await found.invoke(arguments, context)
        except (ResponderError, PaymentRequiredError):
            raise
        except Exception as exc:
            text = str(exc)
            message = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
            raise ResponderError("tool_failed", message, {"name": found.name}) from None
        output = value if isinstance(value, ty.ToolOutput) else None
        text = output.result if output is not None else format_result(value)
        if output is not None and output.is_error:
            raise ResponderError("tool_failed", text, {"name": found.name})
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text=text)))

    def _own_tool(self, name: str) -> Tool | None:
        """The agent's tool ``name`` (its own, then its tool sources'), never a deferred one."""
        for found in self.agent.resolved_tools:
            if found.name == name:
                return None if found.deferred else found
        for source in self.tool_sources:
            for found in source.tools():
                if found.name == name and not found.deferred:
                    return found  # type: ignore[no-any-return]
        return None

    async def _respond(self, request: TurnRequest, emit: Emit, runner: Agent) -> None:
        # UAMP 8.5.4: every media item gets its content id (a content URL's UUID).
        messages = with_content_ids(request.messages, random_ids)
        resume = not messages or messages[-1].role != "user"
        history = messages if resume else messages[:-1]
        user = None if resume else messages[-1]
        choice = request.tool_choice
        if resume and choice is not None and choice not in ("none", "auto"):
            choice = None  # forced once already, before the client's results
        port = request.interrupts
        on_interrupt: Callable[[Interrupt], Awaitable[Answer]] = (
            port.ask if port is not None else _nobody_to_ask
        )
        if self.checkpoints and port is not None:
            on_interrupt = _checkpointed(port.ask, emit, request.response_id)
        mapper = _EventMapper(emit, _own_tools(runner), request.response_id, request.streamed)
        # Inline (no stream object, no channel); a response nobody watches
        # while it runs (not streamed) shows no step progress either.
        try:
            turn = await runner.drive(
                history,
                user,
                consumer=mapper.feed,
                upp=mapper.upp,
                uap=mapper.uap,
                resume=resume,
                tool_choice=choice,
                stream_model=request.streamed,
                stream_steps=request.streamed,
                on_interrupt=on_interrupt,
                answers=request.answers or None,
                on_step=_new_checkpoint if self.checkpoints else None,
                metadata={"uamp": _uamp_metadata(request)},
            )
        except Exception as exc:
            _log_provider_failure(exc, request.agent or self._name, runner.model)
            raise _agent_error(exc) from exc
        await mapper.finish(turn)
        if turn.stop_reason == "max_steps":
            raise ResponderError(
                "max_steps",
                f"The agent stopped after {turn.steps} steps without a final answer.",
                {"steps": turn.steps},
            )

    def _variant(self, request: TurnRequest, sources: list[Any]) -> Agent:
        """The agent with what the request adds (tools, instructions, params, format)."""
        a = self.agent if not self.approve else self._approving()
        if (
            not sources
            and not request.tools
            and not request.instructions
            and request.response_format is None
            and _SAMPLING.isdisjoint(request.metadata)
            and _SAMPLING.isdisjoint(request.extensions)
        ):
            return a  # nothing to add (the common request): no variant to make
        changes: dict[str, Any] = {}
        own = {t.name for t in a.resolved_tools}
        extra: list[Tool] = []
        for source in sources:
            for found in source.tools():
                if found.name not in own:
                    own.add(found.name)
                    extra.append(found)
        client: list[Tool] = []
        for definition in request.tools:
            fn = definition.function
            if fn.name in own or any(t.name == fn.name for t in client):
                log.debug("client tool %r is shadowed by the agent's own tool", fn.name)
                continue
            client.append(deferred_tool(fn.name, fn.description, fn.parameters))
        if extra or client:
            changes["tools"] = [*extra, *client]
        if request.instructions:
            changes["system"] = "\n\n".join(p for p in (a.system, request.instructions) if p)
        # Model settings in session.extensions (Robutler's clients put them
        # there), then the transport's own (a Chat Completions body), which win.
        params = {k: request.extensions[k] for k in SAMPLING_PARAMS if k in request.extensions}
        params.update((k, request.metadata[k]) for k in SAMPLING_PARAMS if k in request.metadata)
        if params:
            changes["params"] = {**a.params, **params}
        fmt = request.response_format
        if fmt is not None and fmt.type == "json_schema" and fmt.json_schema:
            schema = fmt.json_schema.get("schema", fmt.json_schema)
            if isinstance(schema, dict):
                changes["structure"] = schema
        elif fmt is not None and fmt.type == "json_object":
            changes["structure"] = {"type": "object"}
        return a.derive(**changes) if changes else a

    def _approving(self) -> Agent:
        """The agent with :attr:`approve` added to its policy (made once per setting)."""
        made = self.__dict__.get("_approved")
        if made is None or made[0] != self.approve:
            made = self.__dict__["_approved"] = (
                self.approve,
                self.agent.derive(approve=self.approve),
            )
        agent: Agent = made[1]
        return agent


def _own_tools(runner: Agent) -> frozenset[str]:
    """The names of the tools ``runner`` runs itself (made once per tool list)."""
    tools = runner._tools
    known = runner.__dict__.get("_own_tool_names")
    if known is None or known[0] is not tools:
        names = frozenset(t.name for t in tools if not t.deferred)
        known = runner.__dict__["_own_tool_names"] = (tools, names)
    own: frozenset[str] = known[1]
    return own


def _uamp_metadata(request: TurnRequest) -> dict[str, Any]:
    """What a run's hooks and tools read as ``ctx.metadata["uamp"]``."""
    return {
        "agent": request.agent,
        "session_id": request.session_id,
        "response_id": request.response_id,
        # Who the run is for, so an agent that persists state
        # (checkpoints, sessions) can key it by its owner.
        "principal": {"scheme": request.principal.scheme, "id": request.principal.id},
        # What the client can show, and the routing context of its
        # input (chat_id, sender_id ...).
        "client_capabilities": (
            unstructure(request.client_capabilities)
            if request.client_capabilities is not None
            else None
        ),
        "context": dict(request.context),
    }


def _mcp_servers(request: TurnRequest) -> list[McpServer]:
    """The request's MCP servers it describes well enough to connect (others are logged)."""
    out = []
    for described in request.mcp_servers:
        try:
            out.append(McpServer.from_acp(described))
        except ValueError as exc:
            log.warning("an MCP server of the request is left out: %s", exc)
    return out


def _checkpointed(
    ask: Callable[[Interrupt], Awaitable[Answer]], emit: Emit, response_id: str
) -> Callable[[Interrupt], Awaitable[Answer]]:
    """``ask``, announcing a checkpoint first: what the response streamed up to
    the pause (the call asked about included) is where another process goes
    on from if this one is lost while the person decides (docs/resume.md)."""

    async def asking(interrupt: Interrupt) -> Answer:
        await emit(
            ev.Progress(
                target="response",
                target_id=response_id,
                stage="checkpoint",
                message=str(uuid.uuid4()),
            )
        )
        return await ask(interrupt)

    return asking


async def _nobody_to_ask(interrupt: Interrupt) -> Answer:
    """A transport with no way to ask a person: the call is refused (fail closed)."""
    return Answer(
        approved=False,
        expired=interrupt.kind == QUESTION,
        reason="nobody can approve it on this connection",
    )


def _new_checkpoint(step: int, state: object) -> str:
    """A fresh checkpoint id: the step's state is in the session's event log."""
    return random_uuid4()


# Positional constructors of the events a tool round sends (uamp_proto._fastinit.maker).
_delta = _fastinit.maker(ev.ResponseDelta, ("delta",))
_call_fragment = _fastinit.maker(ty.ToolCallFragment, ("id", "name", "arguments"))
_call_delta = _fastinit.maker(ty.DeltaToolCall, ("tool_call",))
_result_fragment = _fastinit.maker(
    ty.ToolResultFragment, ("call_id", "result", "status", "content_items")
)
_result_delta = _fastinit.maker(ty.DeltaToolResult, ("tool_result",))
_call_done = _fastinit.maker(ev.ToolCallDone, ("call_id",))
_token_usage = _fastinit.maker(
    ty.UsageStats, ("input_tokens", "output_tokens", "total_tokens", "cached_tokens")
)

#: Agent-level events that become progress alone: left out of a response nobody watches.
_UNSEEN = frozenset({"step_start", "step_end", "reasoning"})


class _EventMapper:
    """Turns one run's stream events into UAMP events for ``emit``."""

    __slots__ = (
        "emit",
        "own_tools",
        "presenting",
        "progress",
        "response_id",
        "sent_usage",
        "streamed_calls",
    )

    def __init__(
        self, emit: Emit, own_tools: frozenset[str], response_id: str, progress: bool = True
    ) -> None:
        self.emit = emit
        self.own_tools = own_tools
        self.response_id = response_id
        #: Whether the client sees progress (a streamed response); else only checkpoints go out.
        self.progress = progress
        self.sent_usage: ty.UsageStats | None = None
        self.streamed_calls: set[str] = set()
        #: The ``present`` calls of the run: their content goes to the client.
        self.presenting: set[str] = set()

    async def feed(self, event: AgentStreamEvent) -> None:
        upp = event.upp
        if upp is not None:
            await self.upp(upp)
        elif event.uap is not None:
            await self.uap(event.uap)

    async def upp(self, upp: ev.Event) -> None:
        """A model event, passed on as it is (``Agent.drive``'s ``upp``)."""
        if isinstance(upp, ev.ResponseDelta):  # nearly every event: checked first
            if isinstance(upp.delta, ty.DeltaToolCall):
                self.streamed_calls.add(upp.delta.tool_call.id)
        elif isinstance(upp, ev.UsageDelta):
            self.sent_usage = _plus(self.sent_usage, upp.delta)
        await self.emit(upp)

    async def uap(self, event: UAPEvent) -> None:
        """An agent-level event, mapped (``Agent.drive``'s ``uap``)."""
        kind, step, data = event.type, event.step, event.data
        if kind == "observation":
            for output in data.get("results", ()):
                await self._tool_done(output)
            return
        message: str | None = None
        if not self.progress and kind in _UNSEEN:
            return
        if kind in ("step_start", "step_end"):
            phase = data.get("phase")
            verb = "started" if kind == "step_start" else "done"
            message = f"Step {step} {verb}" + (f" ({phase})" if phase else "")
        elif kind == "reasoning":
            message = str(data.get("text", ""))
        elif kind == "action":
            calls: Sequence[ty.ToolInvocation] = data.get("tool_calls", ())
            for call in calls:
                if call.name == PRESENT:
                    self.presenting.add(call.id)
                if call.name in self.own_tools and call.id not in self.streamed_calls:
                    # Not streamed by the model: show the complete call once.
                    self.streamed_calls.add(call.id)
                    fragment = _call_fragment(call.id, call.name, call.arguments)
                    await self.emit(_delta(_call_delta(fragment)))
            if not self.progress:
                return  # the calls above are output; the "Calling" line only progress
            message = "Calling " + ", ".join(c.name for c in calls)
        elif kind == "checkpoint":
            message = str(data.get("checkpoint_id", ""))
        elif kind == "tool_progress":
            # A tool's progress (a delegated agent's thinking, UAMP 6.13).
            progress = ty.ToolProgress(
                call_id=str(data.get("call_id", "")), text=str(data.get("text", ""))
            )
            await self.emit(ev.ResponseDelta(delta=ty.DeltaToolProgress(tool_progress=progress)))
            return
        step_id = data.get("step_id")
        await self.emit(
            ev.Progress(
                target="response",
                target_id=self.response_id,
                stage=kind,
                message=message,
                step=step,
                # The step's UUIDv4 (spec 002 section 3.4), an extra field.
                unknown={"step_id": step_id} if step_id else EMPTY,
            )
        )

    async def _tool_done(self, output: ty.ToolOutput) -> None:
        status = "failed" if output.is_error else "completed"
        # UAMP 8.5.4: what the present tool shows goes out; other tools' media stay labels.
        shown = output.content_items if output.call_id in self.presenting else None
        result = _result_fragment(output.call_id, output.result, status, shown)
        await self.emit(_delta(_result_delta(result)))
        await self.emit(_call_done(output.call_id))

    async def finish(self, turn: Turn) -> None:
        """Top up the usage to the run's total, then hand client calls over."""
        missing = _minus(turn.usage, self.sent_usage)
        if missing is not None:
            self.sent_usage = _plus(self.sent_usage, missing)
            await self.emit(ev.UsageDelta(delta=missing))
        for call in turn.pending_tool_calls:
            await self.emit(ev.ToolCall(call_id=call.id, name=call.name, arguments=call.arguments))


def _known(fact: Any, declared: Any) -> Any:
    """The model's fact when known, else what the agent declared."""
    return declared if fact is None else fact


def _plus(a: ty.UsageStats | None, b: ty.UsageStats) -> ty.UsageStats:
    if a is None:
        return b
    return _token_usage(
        _add_count(a.input_tokens, b.input_tokens),
        _add_count(a.output_tokens, b.output_tokens),
        _add_count(a.total_tokens, b.total_tokens),
        _add_count(a.cached_tokens, b.cached_tokens),
    )


def _add_count(x: int | None, y: int | None) -> int | None:
    return None if x is None and y is None else (x or 0) + (y or 0)


def _minus(total: ty.UsageStats, sent: ty.UsageStats | None) -> ty.UsageStats | None:
    """The token counts in ``total`` not yet reported by ``sent`` (``None``: nothing)."""

    if (
        sent is not None
        and total.input_tokens == sent.input_tokens
        and total.output_tokens == sent.output_tokens
        and total.cached_tokens == sent.cached_tokens
    ):
        return None  # the usual end: the model reported the run's usage already

    def gap(x: int | None, y: int | None) -> int:
        return max(0, (x or 0) - (y or 0))

    sent = sent or ty.UsageStats()
    inp = gap(total.input_tokens, sent.input_tokens)
    out = gap(total.output_tokens, sent.output_tokens)
    cached = gap(total.cached_tokens, sent.cached_tokens)
    if not (inp or out or cached):
        return None
    return ty.UsageStats(
        input_tokens=inp, output_tokens=out, total_tokens=inp + out, cached_tokens=cached or None
    )


#: What looks like a credential in a provider's error text: an ``sk-`` or
#: Google ``AIza`` key, a bearer token, a ``key=`` query parameter.
_SECRET = re.compile(
    r"(sk-(?:ant-|proj-)?[A-Za-z0-9_\-]{6,}|AIza[0-9A-Za-z_\-]{10,}|"
    r"(?i:bearer)\s+[A-Za-z0-9._\-~+/=]{6,}|(?i:(?:api[_-]?)?key)=[^&\s'\"]+)"
)


def redact(text: str) -> str:
    """``text`` with anything shaped like an API key replaced by ``[redacted]``."""
    return _SECRET.sub("[redacted]", text)


def _log_provider_failure(exc: BaseException, agent_name: str, model: Any) -> None:
    """One warning for a run a model provider failed: the operator sees what the client's
    ``provider_error`` does not say (provider, model, the underlying error's class)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if not isinstance(exc, ProviderError):
        return
    cause = exc.__cause__ or exc.__context__
    kind = type(cause).__name__ if cause is not None else type(exc).__name__
    status = f" (HTTP {exc.status})" if exc.status is not None else ""
    log.warning(
        "agent %s: model provider %s failed (model %s): %s%s: %s",
        agent_name,
        getattr(model, "name", None) or "-",
        getattr(model, "model", None) or "-",
        kind,
        status,
        redact(exc.message),
    )


def _agent_error(exc: BaseException) -> BaseException:
    """The error to raise to the transport for a failed run."""
    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        return _agent_error(exc.exceptions[0])
    if isinstance(exc, ResponderError | PaymentRequiredError):
        return exc
    if isinstance(exc, BudgetExceededError):
        details = {"kind": exc.kind, "limit": exc.limit, "used": exc.used}
        return ResponderError("budget_exceeded", str(exc), details)
    if isinstance(exc, ProviderError):
        code = "rate_limit_exceeded" if exc.status == 429 else "provider_error"
        extra = {"status": exc.status, "retry_after": exc.retry_after}
        return ResponderError(
            code,
            f"The model provider failed: {exc.message}",
            {k: v for k, v in extra.items() if v is not None} or None,
        )
    if isinstance(exc, GuardrailError):
        return ResponderError("guardrail_rejected", str(exc), {"stage": exc.stage})
    if isinstance(exc, StructuredOutputError):
        return ResponderError("invalid_structured_output", str(exc), {"problems": exc.problems})
    if isinstance(exc, PlanError):
        return ResponderError("plan_failed", str(exc))
    if isinstance(exc, SubAgentDepthError):
        return ResponderError("max_depth_exceeded", str(exc))
    if isinstance(exc, AgentRuntimeError):
        code = "no_model" if isinstance(exc, NoModelError) else "agent_error"
        return ResponderError(code, str(exc))
    return exc


# --- the default agent of ``uamp serve`` --------------------------------------------


def demo_agent(name: str = "demo") -> Agent:
    """The agent ``uamp serve`` hosts by default: the offline demo model with two tools.

    Its tools are ``add(a, b)`` and ``now()``; ask it "what is 2+3" or "what
    time is it". Like every served agent it also calls the client's tools
    (see :mod:`uamp_agents.providers._demo` for the demo model's rules: it
    calls a client tool the text names, or the one ``tool_choice`` forces,
    and answers ``Tool <name> returned: <result>`` from its result). It needs
    no network, and the same conversation always gets the same reply.
    """
    from .providers import _demo

    return agent(
        model=_demo.demo(),
        tools=[tool(_demo.add, thread=False), tool(_demo.now, thread=False)],
        system="You are the uamp demo agent. You can add numbers and tell the time.",
        name=name,
        description="The offline demo agent: adds numbers and tells the time.",
    )
