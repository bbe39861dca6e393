"""Model Context Protocol <-> UAMP: every agent as an MCP server, as pure functions.

Theory of operation
-------------------
An MCP client (Claude Desktop, Cursor, VS Code, the ``mcp`` Python SDK,
``@modelcontextprotocol/sdk``) sees a uamp agent as an MCP server with one
tool named after the agent. Messages are JSON-RPC 2.0
(:mod:`uamp_proto.jsonrpc`); this module decides what each one means and
builds each answer, with no I/O:

* ``initialize`` -- :func:`negotiate` picks the protocol version (the
  client's when it is one of :data:`PROTOCOL_VERSIONS`, else the newest we
  speak, as the MCP lifecycle asks) and :func:`initialize_result` declares
  the ``tools`` capability and the server's name.
* ``server/discover`` (the stateless 2026-07-28 revision) is answered
  ``-32601``: clients that probe it (the ``mcp`` Python SDK 2.x in its
  ``auto`` mode) fall back to ``initialize`` (:data:`DISCOVER_METHOD`).
* ``tools/list`` -- :func:`tools_list_result`: one tool, :func:`tool_name`
  of the agent, whose input schema requires a string ``prompt`` and takes
  an optional ``session`` (a name the caller chooses; the same name
  continues the same conversation).
* ``tools/call`` -- :func:`parse_call` reads the tool's arguments, the
  ``_meta.progressToken`` and a ``_meta.payment_token``;
  :func:`call_result` builds the answer: the reply as text content, plus
  ``structuredContent`` when the reply is a JSON object; agent failures are
  results with ``isError: true`` (:func:`error_result`), never JSON-RPC
  errors, which are kept for protocol faults (an unknown tool, a malformed
  request). An unpaid call is such a tool error too
  (:func:`payment_result`): its text names what to pay, its ``_meta``
  carries spec 004's ``accepts``.
* ``notifications/progress`` -- :class:`Progress` turns text deltas into
  progress notifications whose ``progress`` is the number of characters
  answered so far and whose ``message`` is the delta.
* ``notifications/cancelled`` -- :func:`cancelled_request` names the
  request to cancel (which then gets no response, as MCP asks).
* a human in the loop -- when a call's run pauses on an interrupt and the
  client declared the ``elicitation`` capability (:func:`client_elicits`),
  the server asks it with ``elicitation/create`` in form mode
  (:func:`elicitation_params`: an approval is a form with one boolean
  ``approved``; a question keeps its own flat schema, or gets one string
  ``answer``) and reads the client's ``ElicitResult``
  (:func:`parse_elicitation_result`: ``accept`` with the form's content,
  ``decline`` denies, ``cancel`` abandons).

Nothing here reads the clock or makes ids.
"""

from __future__ import annotations

import re
from typing import Any, Final

import attrs
import orjson

from ..jsonrpc import INVALID_PARAMS, Id, JSONRPCError, Notification, notification
from ..payment import PaymentRequiredError
from ._human import Answer, AnswerError, Ask, answer_from_payload, describe, dismissed, is_approval

__all__ = [
    "DISCOVER_METHOD",
    "LATEST_VERSION",
    "PROTOCOL_VERSIONS",
    "CallParams",
    "Progress",
    "call_result",
    "cancelled_request",
    "client_elicits",
    "elicitation_params",
    "error_result",
    "initialize_result",
    "negotiate",
    "parse_call",
    "parse_elicitation_result",
    "payment_result",
    "tool_definition",
    "tool_name",
    "tools_list_result",
]

#: The handshake revisions of MCP this server speaks, newest first. The
#: stateless 2026-07-28 revision (``server/discover``) is not one of them.
PROTOCOL_VERSIONS: Final = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
#: What a client asking for a revision we do not know is offered.
LATEST_VERSION: Final = PROTOCOL_VERSIONS[0]
#: The 2026-07-28 revision's first request; answered ``-32601`` so clients fall back.
DISCOVER_METHOD: Final = "server/discover"

#: Longest session name a caller may choose.
MAX_SESSION_NAME: Final = 128

#: MCP tool names (SEP-986): 1-128 of ``A-Za-z0-9_-.``.
_TOOL_NAME_BAD = re.compile(r"[^A-Za-z0-9_.-]")


def _invalid(message: str) -> JSONRPCError:
    return JSONRPCError(INVALID_PARAMS, message)


def _params(params: object) -> dict[str, Any]:
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise _invalid("params must be an object.")
    return params


# --- lifecycle ------------------------------------------------------------------------


def negotiate(params: object) -> str:
    """The protocol version to answer ``initialize`` with.

    Raises:
        JSONRPCError: ``-32602`` when ``protocolVersion`` is not a string.
    """
    requested = _params(params).get("protocolVersion")
    if not isinstance(requested, str):
        raise _invalid("params.protocolVersion must be a string.")
    return requested if requested in PROTOCOL_VERSIONS else LATEST_VERSION


def initialize_result(
    version: str, *, agent_name: str, server_version: str, instructions: str | None = None
) -> dict[str, Any]:
    """The ``initialize`` answer: the version, the ``tools`` capability, who we are."""
    result: dict[str, Any] = {
        "protocolVersion": version,
        "capabilities": {"tools": {"listChanged": False}},
        "serverInfo": {"name": agent_name, "version": server_version},
    }
    if instructions:
        result["instructions"] = instructions
    return result


# --- tools ------------------------------------------------------------------------------


def tool_name(agent_name: str) -> str:
    """The tool an agent is exposed as: its name, with characters MCP refuses as ``_``."""
    return _TOOL_NAME_BAD.sub("_", agent_name)[:128] or "agent"


def tool_definition(agent_name: str, description: str | None = None) -> dict[str, Any]:
    """The agent's tool: a ``prompt`` (required) and an optional ``session`` name."""
    return {
        "name": tool_name(agent_name),
        "title": agent_name,
        "description": description or f"Ask the agent {agent_name!r}; it answers in text.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "prompt": {"type": "string", "description": "What to ask the agent."},
                "session": {
                    "type": "string",
                    "description": "A name for the conversation: calls with the same name "
                    "continue it; without one every call starts afresh.",
                    "maxLength": MAX_SESSION_NAME,
                },
            },
            "required": ["prompt"],
        },
    }


def tools_list_result(agent_name: str, description: str | None = None) -> dict[str, Any]:
    """The ``tools/list`` answer: the agent's one tool."""
    return {"tools": [tool_definition(agent_name, description)]}


@attrs.frozen(kw_only=True)
class CallParams:
    """A ``tools/call`` of the agent's tool.

    Attributes:
        prompt: What the caller asks (``None`` when the arguments are bad:
            see ``problem``).
        session: The conversation name, or ``None`` for a fresh one.
        progress_token: ``_meta.progressToken``: the caller wants progress.
        payment_token: ``_meta.payment_token`` (spec 004), when sent.
        problem: Why the arguments are unusable; answered as a tool error
            (the MCP spec's "input validation errors" are tool results).
    """

    prompt: str | None
    session: str | None = None
    progress_token: str | int | None = None
    payment_token: str | None = None
    problem: str | None = None


def parse_call(params: object, agent_name: str) -> CallParams:
    """Read a ``tools/call``.

    Raises:
        JSONRPCError: ``-32602`` for a malformed request or a tool other
            than the agent's (protocol faults, per the MCP spec).
    """
    p = _params(params)
    name = p.get("name")
    if not isinstance(name, str):
        raise _invalid("params.name must be a string.")
    if name != tool_name(agent_name):
        raise _invalid(
            f"Unknown tool {name!r}: this server has one tool, {tool_name(agent_name)!r}."
        )
    meta = p.get("_meta")
    meta = meta if isinstance(meta, dict) else {}
    token = meta.get("progressToken")
    progress = token if isinstance(token, str | int) and not isinstance(token, bool) else None
    paying = meta.get("payment_token")
    payment = paying if isinstance(paying, str) and paying else None
    args = p.get("arguments", {})
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise _invalid("params.arguments must be an object.")
    prompt = args.get("prompt")
    session = args.get("session")
    problem = None
    if not isinstance(prompt, str) or not prompt.strip():
        problem = "The argument 'prompt' is required: a non-empty string."
    elif session is not None and (
        not isinstance(session, str) or not session or len(session) > MAX_SESSION_NAME
    ):
        problem = f"The argument 'session' must be a string of 1 to {MAX_SESSION_NAME} characters."
    if problem is not None:
        return CallParams(
            prompt=None, progress_token=progress, payment_token=payment, problem=problem
        )
    return CallParams(
        prompt=prompt,
        session=session,
        progress_token=progress,
        payment_token=payment,
    )


def _structured(text: str) -> dict[str, Any] | None:
    stripped = text.strip()
    if not stripped.startswith("{"):
        return None
    try:
        value = orjson.loads(stripped)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def call_result(
    text: str, *, session: str | None = None, meta: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A successful ``tools/call`` answer.

    Args:
        text: The agent's reply; a JSON object also goes out as
            ``structuredContent``.
        session: The conversation the turn ran in, echoed in ``_meta.session``.
        meta: More ``_meta`` members (a signature, a payment balance).
    """
    result: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": False}
    structured = _structured(text)
    if structured is not None:
        result["structuredContent"] = structured
    extra = dict(meta or {})
    if session is not None:
        extra["session"] = session
    if extra:
        result["_meta"] = extra
    return result


def error_result(message: str, *, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """A ``tools/call`` answer for a turn that failed: ``isError: true``."""
    result: dict[str, Any] = {"content": [{"type": "text", "text": message}], "isError": True}
    if meta:
        result["_meta"] = meta
    return result


def payment_result(exc: PaymentRequiredError) -> dict[str, Any]:
    """The tool error of an unpaid call: the price in words, ``accepts`` in ``_meta``."""
    req = exc.requirements
    price = f"{req.amount} {req.currency}".strip() if req.currency else str(req.amount)
    text = (
        f"Payment required ({exc.code}): {exc.reason} This call costs {price}; "
        "send a payment token as _meta.payment_token of the tools/call request."
    )
    payment = {"accepts": exc.accepts(), "reason": req.reason, **exc.details()}
    return error_result(text, meta={"payment": payment})


# --- notifications ----------------------------------------------------------------------


class Progress:
    """Text deltas -> ``notifications/progress`` for one ``progressToken``.

    ``progress`` is the number of characters answered so far (it grows with
    every notification, as MCP requires); ``message`` is the delta.
    """

    __slots__ = ("_head", "_tail", "chars", "token")

    def __init__(self, token: str | int, *, before: bytes = b"", after: bytes = b"") -> None:
        self.token = token
        self.chars = 0
        #: What :meth:`encoded` puts before the ``progress`` value, and after the braces:
        #: ``before`` and ``after`` are the carrier's framing (an SSE event's lines).
        self._head = (
            before
            + b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":'
            + orjson.dumps(token)
            + b',"progress":'
        )
        self._tail = b"}}" + after

    def feed(self, delta: str) -> Notification | None:
        """The notification for one text delta (``None`` for an empty one)."""
        if not delta:
            return None
        self.chars += len(delta)
        params = {"progressToken": self.token, "progress": self.chars, "message": delta}
        return notification("notifications/progress", params)

    def encoded(self, delta: str) -> bytes | None:
        """``before + jsonrpc.encode(self.feed(delta)) + after``, without the dicts.

        The streamed hot path, the same bytes (a hypothesis test compares
        them): the head made once, then the count, the delta's JSON and the
        tail. ``None`` for an empty delta.
        """
        if not delta:
            return None
        chars = self.chars + len(delta)
        self.chars = chars
        return b"".join(
            (self._head, b"%d" % chars, b',"message":', orjson.dumps(delta), self._tail)
        )


def cancelled_request(params: object) -> Id | None:
    """The request a ``notifications/cancelled`` names (``None`` if it names none)."""
    if not isinstance(params, dict):
        return None
    rid = params.get("requestId")
    if isinstance(rid, str) or (isinstance(rid, int) and not isinstance(rid, bool)):
        return rid
    return None


# --- a human in the loop: elicitation/create ------------------------------------------------

#: The method a server asks the human with.
ELICIT_METHOD: Final = "elicitation/create"
_PRIMITIVE_TYPES = frozenset({"string", "number", "integer", "boolean"})


def client_elicits(initialize_params: object) -> bool:
    """Whether an ``initialize`` request declared the form-mode ``elicitation`` capability."""
    caps = initialize_params.get("capabilities") if isinstance(initialize_params, dict) else None
    elicitation = caps.get("elicitation") if isinstance(caps, dict) else None
    if not isinstance(elicitation, dict):
        return False
    # 2025-11-25: {} or {"form": {}} means form mode; {"url": {}} alone does not.
    return not elicitation or "form" in elicitation


def _flat(schema: object) -> bool:
    """Whether a schema is what MCP forms allow: an object of primitive properties."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return False
    props = schema.get("properties")
    return isinstance(props, dict) and all(
        isinstance(p, dict) and p.get("type") in _PRIMITIVE_TYPES for p in props.values()
    )


def _form(ask: Ask) -> dict[str, Any]:
    if is_approval(ask):
        return {
            "type": "object",
            "properties": {"approved": {"type": "boolean", "title": "Approve"}},
            "required": ["approved"],
        }
    if _flat(ask.schema):
        return dict(ask.schema or {})
    return {
        "type": "object",
        "properties": {"answer": {"type": "string", "title": "Answer"}},
        "required": ["answer"],
    }


def elicitation_params(ask: Ask) -> dict[str, Any]:
    """The params of ``elicitation/create`` (form mode) for ``ask``."""
    return {
        "mode": "form",
        "message": describe(ask),
        "requestedSchema": _form(ask),
        "_meta": {"uamp/interrupt_id": ask.id},
    }


def parse_elicitation_result(result: object, ask: Ask) -> Answer:
    """The answer an ``ElicitResult`` gives to ``ask``.

    ``accept`` answers with the form's ``content`` (an approval reads its
    ``approved``, true when left out; a question the whole content, or its
    ``answer`` when it was given the one-string form); ``decline`` denies
    (a question: abandoned); ``cancel`` abandons.

    Raises:
        JSONRPCError: ``-32602`` for a result of another shape.
    """
    action = result.get("action") if isinstance(result, dict) else None
    if action == "decline" or action == "cancel":
        return dismissed(ask)
    if action != "accept" or not isinstance(result, dict):
        raise _invalid("An elicitation result's action is accept, decline or cancel.")
    content = result.get("content") or {}
    if not isinstance(content, dict):
        raise _invalid("An accepted elicitation result's content must be an object.")
    if is_approval(ask):
        try:
            return answer_from_payload(ask, {"approved": content.get("approved", True)})
        except AnswerError as exc:
            raise _invalid(str(exc)) from None
    if not _flat(ask.schema) and set(content) == {"answer"}:
        return Answer(value=content["answer"])
    return Answer(value=content)
