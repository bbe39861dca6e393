"""The agent boundary: the one interface every transport serves.

An agent is anything with a ``name``, a ``capabilities()`` declaration and an
``async respond(request, emit)`` method. For one response it receives a
:class:`TurnRequest` (the whole conversation so far plus the session's
configuration) and pushes outgoing UAMP events through ``emit``:

* :class:`~uamp_proto.events.ResponseDelta` for text, audio, and the
  fragments, results and progress of the agent's *own* (server-side) tools;
* :class:`~uamp_proto.events.Thinking`, :class:`~uamp_proto.events.Progress`,
  :class:`~uamp_proto.events.UsageDelta`,
  :class:`~uamp_proto.events.ToolCallDone`, and any other server event;
* :class:`~uamp_proto.events.ToolCall` to ask the *client* to run one of the
  tools it declared in ``request.tools``. Having emitted its tool calls the
  agent returns; the transport collects the client's results (a
  ``tool.result`` event, the next Chat Completions request, a Realtime
  ``function_call_output`` ...) and calls ``respond`` again with the
  conversation extended by the assistant's tool calls and ``role="tool"``
  messages.

The transport owns the response lifecycle: it sends ``response.created``
before the first event and ``response.done`` (with the accumulated output and
usage), ``response.cancelled`` or ``response.error`` after the last. An agent
reports a failure by raising :class:`ResponderError`; cancelling the task that
runs ``respond`` cancels the response.

Payment (spec 004): to ask the client for more funds in the middle of a
response, emit a :class:`~uamp_proto.events.PaymentRequired` (a top-up:
``extra={"action": "topup"}``). On the UAMP WebSocket and HTTP+SSE
transports ``emit`` then returns only once the client's payment was accepted
(no content flows meanwhile), so the agent simply continues; cancelling the
response while it waits raises ``Cancelled`` out of ``emit``; once it
returns, ``request.metadata[PAID_TOKEN]`` holds the token the client paid
with (behind a relay, the daemon's agent gets the relay's receipt instead:
the token itself never leaves the server that settles it). Raising
:class:`~uamp_proto.payment.PaymentRequiredError` instead abandons the call:
those transports re-run the agent on the conversation so far once paid, the
others report ``payment_required``.

``emit`` applies backpressure: it returns once the event has been accepted by
the transport's bounded buffer. Nothing here does I/O; the agent runs in
whatever event loop the transport uses.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol, runtime_checkable

import attrs

from . import _fastinit
from .errors import UampError
from .events import Event
from .interrupts import Answer, InterruptPort
from .principal import ANONYMOUS, Principal
from .types import Capabilities, Message, ResponseFormat, ToolDefinition

__all__ = [
    "PAID_TOKEN",
    "TOOL_CALL",
    "Emit",
    "Responder",
    "ResponderError",
    "TurnRequest",
    "placeholder_arguments",
    "with_interrupts",
]

#: ``TurnRequest.metadata`` key: the payment token that answered the
#: response's latest mid-stream ``payment.required`` (set once ``emit`` returns).
PAID_TOKEN: Final = "paid_token"

#: ``TurnRequest.metadata`` key set by a transport whose client calls one of the
#: agent's tools by name (ACP ``tools/call``): ``{"name", "arguments"}``. An
#: agent that runs its tools itself runs that tool and answers its result as
#: the response's text, without asking its model; an unknown tool is a
#: :class:`ResponderError` ``unknown_tool``, a failing one ``tool_failed``.
TOOL_CALL: Final = "tool_call"

#: Sends one outgoing event; awaits until the transport has accepted it.
Emit = Callable[[Event], Awaitable[None]]


@attrs.frozen(kw_only=True)
class TurnRequest:
    """Everything an agent is given to produce one response.

    Attributes:
        agent: The name the client addressed.
        session_id: The UAMP session the response belongs to.
        response_id: The id of the response being produced.
        messages: The conversation in order: history, the new user input
            (accumulated ``input.*`` events as one message with
            ``content_items``), and after a client tool round trip the
            assistant's ``tool_calls`` message and one ``role="tool"``
            message per result.
        instructions: System instructions of the session or response.
        tools: Tools the *client* declared and will run when asked.
        tool_choice: ``"auto"``, ``"none"``, ``"required"`` or
            ``{"type": "function", "function": {"name": ...}}``; ``None``
            means the transport did not say (treat as ``"auto"``).
        response_format: Structured-output request, if any.
        modalities: Output modalities asked for.
        token: The session's auth token, if any.
        payment_token: The session's payment token, if any.
        extensions: ``session.extensions`` (provider-specific settings).
        metadata: Transport-specific details (e.g. ``model``,
            ``temperature`` from a Chat Completions request).
        principal: Who the response is for, as the server authenticated
            the caller (:data:`~uamp_proto.principal.ANONYMOUS` without
            authentication).
        client_capabilities: What the client declared it can handle
            (``session.create.client_capabilities`` with every later
            ``client.capabilities`` merged over it; UAMP section 9), so an
            agent can, say, send no images to a text-only client. ``None``:
            the client declared nothing.
        context: ``input.text.context`` of the input this response answers
            (any keys; ``chat_id`` and ``sender_id`` among them, section 5.6).
        streamed: Whether the client sees the response while it is being
            produced. ``False`` (a non-streamed Chat Completions request):
            only the finished response reaches it, so an agent may produce
            the reply in one piece -- call its model without streaming --
            and emit it as one delta.
        mcp_servers: MCP servers whose tools the agent may use for this
            turn, as the client described them (ACP's ``mcpServers``:
            ``{name, command, args, env}`` or ``{type: "http", name, url,
            headers}``). Running a command is the host's to allow: only a
            transport whose caller may run programs here (``uamp acp`` on
            stdio, the local user) sets it.
        interrupts: Where the agent asks a person (tool approval, questions;
            docs/human-in-the-loop.md). ``None``: this transport cannot ask,
            and a call that needs approval is refused.
        answers: Answers to the interrupts of a run resumed from its
            checkpoint, by interrupt key (a run paused in a process that is
            gone, answered here).
    """

    agent: str
    session_id: str
    response_id: str
    messages: list[Message]
    instructions: str | None = None
    tools: list[ToolDefinition] = attrs.field(factory=list)
    tool_choice: str | dict[str, Any] | None = None
    response_format: ResponseFormat | None = None
    modalities: list[str] = attrs.field(factory=lambda: ["text"])
    token: str | None = None
    payment_token: str | None = None
    extensions: dict[str, Any] = attrs.field(factory=dict)
    metadata: dict[str, Any] = attrs.field(factory=dict)
    principal: Principal = ANONYMOUS
    client_capabilities: Capabilities | None = None
    context: dict[str, Any] = attrs.field(factory=dict)
    streamed: bool = True
    mcp_servers: list[dict[str, Any]] = attrs.field(factory=list)
    interrupts: InterruptPort | None = attrs.field(default=None, eq=False, repr=False)
    answers: dict[str, Answer] = attrs.field(factory=dict)


#: TurnRequest, copied with its interrupt port: see :func:`with_interrupts`.
_WITH_INTERRUPTS = _fastinit.replacer(TurnRequest, ("interrupts",))


def with_interrupts(request: TurnRequest, port: InterruptPort | None) -> TurnRequest:
    """``attrs.evolve(request, interrupts=port)``, compiled (every transport does it per turn)."""
    made: TurnRequest = _WITH_INTERRUPTS(request, port)
    return made


class ResponderError(UampError):
    """An agent's failure, reported to the client as ``response.error``.

    Args:
        code: A machine-readable code (``"rate_limit_exceeded"``,
            ``"tool_failed"`` ...).
        message: A sentence a person can act on.
        details: Extra JSON-ready data for the error object.
    """

    def __init__(self, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.details = details


@runtime_checkable
class Responder(Protocol):
    """What a transport needs from an agent. See the module docstring."""

    @property
    def name(self) -> str:
        """The name the agent is registered under."""
        ...

    def capabilities(self) -> Capabilities:
        """The agent's capability declaration (UAMP section 9)."""
        ...

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        """Produce one response's events through ``emit``."""
        ...


_PLACEHOLDER_BY_TYPE: dict[str, Any] = {
    "integer": 0,
    "number": 0,
    "boolean": False,
    "array": [],
    "object": {},
    "null": None,
}


def placeholder_arguments(tool: ToolDefinition, text: str) -> str:
    """Deterministic JSON arguments for calling ``tool`` about ``text``.

    For offline, demo and test models that must call a tool they know nothing
    about: every required string property gets ``text``, other required
    properties a neutral value of their type (0, false, [], {}); a tool with
    no required properties gets ``{"query": text}``.
    """
    schema = tool.function.parameters or {}
    props = schema.get("properties") or {}
    required = [r for r in schema.get("required") or [] if isinstance(r, str)]
    if not required:
        return json.dumps({"query": text}, ensure_ascii=False, separators=(",", ":"))
    args: dict[str, Any] = {}
    for key in required:
        spec = props.get(key) if isinstance(props, dict) else None
        kind = spec.get("type", "string") if isinstance(spec, dict) else "string"
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "string")
        args[key] = text if kind == "string" else _PLACEHOLDER_BY_TYPE.get(str(kind), text)
    return json.dumps(args, ensure_ascii=False, separators=(",", ":"))


#: The classes given a compiled ``__init__`` (uamp_proto._fastinit).
FAST_INIT = _fastinit.install(globals())
