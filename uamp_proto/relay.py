"""The relay wire (spec 004 "Portal Connect", spec 000 section 10.2), as pure functions.

A *daemon* hosts agents without a public address: it dials a *relay* (a
platform), registers each agent with one multiplexed ``session.create``
(``{"session": {"agent": NAME, "token": T}}``), and from then on the roles
turn: the relay sends client events scoped by ``session_id`` and the daemon
answers with server events.

Turns are stateless ("platform routing", 000 section 10.2): the relay opens an
*interaction-scoped* session id per turn, names the agent on the frame
(``agent``) and sends the whole conversation so far as ``messages`` on the
``input.text`` that starts the turn; the daemon keeps nothing between turns.
What the relay's client declared rides along as extra fields of that
``input.text`` (``tools``, ``tool_choice``, ``instructions``, ``response_id``),
and who asked as ``caller`` (``{"user_id", "tier"}``). See docs/relay.md.

Money stays with the relay: the relay settles every turn with the caller's
payment token itself, so the ``input.text`` a daemon gets carries no token,
only ``paid`` (whether the relay took payment for the turn). A daemon's
mid-stream ``payment.required`` is a round trip through the relay: the
client pays the relay, and the daemon gets a ``payment.submit`` holding a
*receipt* (:func:`receipt`: the amount paid, under an id that is no
payment token anywhere) in place of the client's token.

Everything here is data in, data out: building and reading those frames,
the daemon's URL rule and the reconnect delay (randomness is passed in).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

import attrs

from . import events as ev
from . import types as ty
from .codec import DecodeError, decode_object, from_dict, unstructure
from .principal import Principal
from .responder import TurnRequest

__all__ = [
    "DEFAULT_PATH",
    "RECEIPT_SCHEME",
    "REGISTER",
    "backoff_delay",
    "daemon_event",
    "daemon_url",
    "for_daemon",
    "receipt",
    "turn_input",
    "turn_request",
]

#: The ``session.extensions`` flag of a daemon's ``session.create``: it registers
#: the agent, whatever the relay lists (on ``/ws`` the first message decides).
REGISTER: Final = "relay_register"

#: Where a daemon dials when its URL has no path (what platforms' clients default to).
DEFAULT_PATH: Final = "/ws"


def daemon_url(url: str) -> str:
    """The WebSocket URL a daemon dials for ``url``.

    ``http``/``https`` become ``ws``/``wss``; a URL without a path gets
    :data:`DEFAULT_PATH`.

    Raises:
        ValueError: Not an http(s) or ws(s) URL, or no host.
    """
    parts = urlsplit(url.strip())
    scheme = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}.get(parts.scheme.lower())
    if scheme is None or not parts.netloc:
        raise ValueError(f"{url!r} is not a ws://, wss://, http:// or https:// URL with a host")
    path = parts.path if parts.path not in ("", "/") else DEFAULT_PATH
    return urlunsplit((scheme, parts.netloc, path, parts.query, ""))


def backoff_delay(attempt: int, *, base: float, cap: float, jitter: float) -> float:
    """Seconds to wait before reconnect ``attempt`` (1 for the first retry).

    Exponential (``base * 2**(attempt-1)``, at most ``cap``) with "equal
    jitter": ``jitter`` in ``[0, 1)`` (the caller's random draw) spreads the
    second half, so daemons cut off together do not all return together.
    """
    if attempt < 1:
        return 0.0
    ceiling = min(cap, base * (2.0 ** min(attempt - 1, 62)))
    return ceiling / 2 + ceiling / 2 * jitter


#: What a daemon's terminal event may leave out, filled in as a relay reads it.
_TERMINAL_DEFAULTS: Final[dict[str, tuple[str, dict[str, Any]]]] = {
    "response.done": ("response", {"status": "completed", "output": []}),
    "response.error": ("error", {"code": "agent_error", "message": "The agent failed."}),
}


def daemon_event(obj: dict[str, Any]) -> ev.Event | ev.UnknownEvent:
    """Read one event a daemon sent, as a relay must.

    Daemons end a turn with a bare ``response.done`` (no ``response``
    object: the relay has the deltas) or a ``response.error`` without an
    error object; those are read as an empty completed output and a generic
    ``agent_error``, since a turn must end. Anything else decodes as usual.

    Raises:
        DecodeError: The event does not match its schema.
    """
    filled = _TERMINAL_DEFAULTS.get(obj.get("type"))  # type: ignore[arg-type]
    if filled is not None and not isinstance(obj.get(filled[0]), dict):
        obj = {**obj, filled[0]: filled[1]}
    return decode_object(obj)


def _caller(principal: Principal) -> dict[str, Any]:
    return {"user_id": f"{principal.scheme}:{principal.id}", "tier": "user"}


def turn_input(request: TurnRequest, session_id: str) -> ev.InputText:
    """The ``input.text`` that starts ``request`` on a daemon, under ``session_id``.

    It carries the whole conversation as ``messages`` (the daemon may keep
    no state), the newest user text as ``text``, the payment token, and the
    client's tools, tool choice and instructions as extra fields.
    """
    text = ""
    for message in reversed(request.messages):
        if message.role == "user":
            text = message.text
            break
    extra: dict[str, Any] = {
        "agent": request.agent,
        "response_id": request.response_id,
        "caller": _caller(request.principal),
    }
    if request.tools:
        extra["tools"] = [unstructure(tool) for tool in request.tools]
    if request.tool_choice is not None:
        extra["tool_choice"] = request.tool_choice
    if request.instructions is not None:
        extra["instructions"] = request.instructions
    return ev.InputText(
        session_id=session_id,
        text=text,
        messages=list(request.messages),
        payment_token=request.payment_token,
        unknown=extra,
    )


def for_daemon(start: ev.InputText, *, paid: bool) -> ev.InputText:
    """``start`` as a daemon may see it: no payment token, ``paid`` in its place."""
    return attrs.evolve(start, payment_token=None, unknown={**start.unknown, "paid": paid})


#: ``PaymentSubmission.scheme`` of a relay's receipt.
RECEIPT_SCHEME: Final = "relay-receipt"


def receipt(session_id: str, required: ty.PaymentRequirements, receipt_id: str) -> ev.PaymentSubmit:
    """What a daemon is told once the client paid its ``payment.required``: a receipt.

    ``token`` is ``receipt_id`` (made by the caller, say a random id): it
    names the payment, and spends nothing anywhere; ``amount`` and
    ``currency`` are what the client paid for.
    """
    extra = {} if required.currency is None else {"currency": required.currency}
    return ev.PaymentSubmit(
        session_id=session_id,
        payment=ty.PaymentSubmission(
            scheme=RECEIPT_SCHEME, token=receipt_id, amount=required.amount, unknown=extra
        ),
    )


def turn_request(
    event: ev.InputText, agent: str, response_id: str, metadata: Mapping[str, Any] = {}
) -> TurnRequest:
    """The :class:`TurnRequest` a daemon runs for an ``input.text`` of the relay.

    The conversation is ``messages`` when given, else the text as one user
    message. Tools the relay forwarded that do not parse are left out.

    Raises:
        DecodeError: ``tools`` is not a list of tool definitions.
    """
    session_id = event.session_id or ""
    messages = (
        list(event.messages) if event.messages else [ty.Message(role="user", content=event.text)]
    )
    extra = event.unknown
    tools: list[ty.ToolDefinition] = []
    raw_tools = extra.get("tools")
    if raw_tools is not None:
        if not isinstance(raw_tools, list):
            raise DecodeError("input.text: 'tools' must be a list")
        tools = [from_dict(ty.ToolDefinition, tool) for tool in raw_tools]
    choice = extra.get("tool_choice")
    instructions = extra.get("instructions")
    meta = dict(metadata)
    caller = extra.get("caller")
    if isinstance(caller, dict):
        meta["caller"] = caller
    if extra.get("paid") is True:
        meta["paid"] = True
    return TurnRequest(
        agent=agent,
        session_id=session_id,
        response_id=response_id,
        messages=messages,
        instructions=instructions if isinstance(instructions, str) else None,
        tools=tools,
        tool_choice=choice if isinstance(choice, str | dict) else None,
        payment_token=event.payment_token,
        metadata=meta,
    )
