"""What one OpenAI Realtime client event asks of the transport (:class:`Handled`).

:meth:`RealtimeSession.handle <uamp_proto.adapters.realtime_session.RealtimeSession.handle>`
answers most client events by itself; for the rest it returns one of these
actions beside its replies, and the transport acts: runs a response
(:class:`CreateResponse`), cancels one (:class:`CancelResponse`), hands a
payment on (:class:`SubmitPayment`), asks the agent about a call
(:class:`PlaceCall`) or ends it (:class:`EndCall`).
"""

from __future__ import annotations

from typing import Any

import attrs

from .. import types as ty

__all__ = [
    "Action",
    "CancelResponse",
    "CreateResponse",
    "EndCall",
    "Handled",
    "PlaceCall",
    "ResponseOptions",
    "SubmitPayment",
]

# --- actions -----------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class ResponseOptions:
    """What ``response.create`` asked for (``response`` object, all optional)."""

    instructions: str | None = None
    tools: list[ty.ToolDefinition] | None = None
    tool_choice: str | dict[str, Any] | None = None
    modalities: list[str] | None = None
    conversation: str = "auto"
    input: list[dict[str, Any]] | None = None
    metadata: dict[str, Any] | None = None
    max_output_tokens: int | None = None


@attrs.frozen(kw_only=True)
class CreateResponse:
    """``response.create``: start a response with these options."""

    options: ResponseOptions
    client_event_id: str | None = None


@attrs.frozen(kw_only=True)
class CancelResponse:
    """``response.cancel``: cancel the given (or the current) response."""

    response_id: str | None = None
    client_event_id: str | None = None


@attrs.frozen(kw_only=True)
class SubmitPayment:
    """``payment.submit``: a payment token for the pending (or next) response."""

    token: str | None
    scheme: str | None = None
    client_event_id: str | None = None


@attrs.frozen(kw_only=True)
class PlaceCall:
    """The first audio outside a call: ask the agent, then :meth:`RealtimeSession.call_answered`."""

    call_id: str
    #: The appended audio, buffered once the call is accepted.
    audio: bytes
    client_event_id: str | None = None


@attrs.frozen(kw_only=True)
class EndCall:
    """``voice.end`` from the client: end the call at the transport's clock."""

    reason: str | None = None
    client_event_id: str | None = None


Action = CreateResponse | CancelResponse | SubmitPayment | PlaceCall | EndCall


@attrs.frozen(kw_only=True)
class Handled:
    """The outcome of one client event: replies owed now and an action, if any."""

    replies: list[dict[str, Any]]
    action: Action | None = None
