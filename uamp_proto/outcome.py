"""How one response of an agent ended: the turn drivers' shared, pure part.

Every turn driver (Trio's :mod:`uamp_trio.hosting.turns`, the asyncio/anyio
one of :mod:`uamp_asgi`) calls the agent, notes what it raised and whether
the turn was cancelled, then asks :func:`conclude` for the status and the one
terminal event to send. What the driver does around it (cancel scopes,
checkpoints, where the events go) is its own business.
"""

from __future__ import annotations

from typing import Literal

import attrs

from . import events as ev
from . import types as ty
from .errors import OutputTooLarge
from .payment import PaymentRequiredError
from .responder import ResponderError
from .response import ResponseTracker

__all__ = ["ResponseOutcome", "TurnStatus", "agent_error", "conclude"]

TurnStatus = Literal["completed", "requires_action", "cancelled", "failed"]

#: The event that ends a response.
Final = ev.ResponseDone | ev.ResponseCancelled | ev.ResponseErrorEvent


@attrs.frozen(kw_only=True)
class ResponseOutcome:
    """How a turn ended.

    Attributes:
        status: ``completed``, ``requires_action`` (client tools pending),
            ``cancelled`` or ``failed``.
        tracker: The response's accumulated output, usage and tool calls.
        final: The terminal event sent, or ``None`` for ``requires_action``.
        balance: The payer's balance after the response settled (with a
            ledger), for transports that can send ``payment.balance``.
    """

    status: TurnStatus
    tracker: ResponseTracker
    final: Final | None
    balance: ev.PaymentBalance | None = None

    @property
    def pending_tool_calls(self) -> list[ty.ToolInvocation]:
        """Client tool calls waiting for results."""
        return self.tracker.pending_tool_calls

    @property
    def error(self) -> ty.ErrorInfo | None:
        """The error of a failed turn."""
        return self.final.error if isinstance(self.final, ev.ResponseErrorEvent) else None


def agent_error(exc: BaseException) -> ResponderError | None:
    """The ResponderError behind ``exc`` (also a lone one inside an exception group).

    A :class:`PaymentRequiredError` becomes ``payment_required`` with the
    accepted payment options in its details. An :class:`OutputTooLarge` (the
    response's output reached its bound; the driver stopped the agent) is
    ``output_too_large`` with the bound in its details.
    """
    if isinstance(exc, ResponderError):
        return exc
    if isinstance(exc, OutputTooLarge):
        return ResponderError(exc.code, exc.message, {"max_output_bytes": exc.limit})
    if isinstance(exc, PaymentRequiredError):
        return ResponderError(
            "payment_required",
            "Payment is required to continue this response.",
            {"accepts": exc.accepts()},
        )
    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        return agent_error(exc.exceptions[0])
    return None


def conclude(
    tracker: ResponseTracker,
    error: BaseException | None,
    cancelled: bool,
    *,
    session_id: str,
) -> tuple[TurnStatus, Final | None, bool]:
    """``(status, terminal event or None, unexpected)`` of a turn that just ended.

    ``error`` is what the agent raised (``None``: it returned); ``cancelled``
    wins over it. ``unexpected`` is true when the error was no
    :class:`ResponderError` (the driver logs it; the client sees only
    ``internal_error`` and the exception's type). ``requires_action`` (no
    terminal event) when the agent returned with client tool calls pending.
    """
    if cancelled:
        return "cancelled", tracker.cancelled_event(session_id=session_id), False
    if error is not None:
        known = agent_error(error)
        if known is not None:
            final = tracker.error_event(
                known.code, known.message, known.details, session_id=session_id
            )
            return "failed", final, False
        message = f"The agent failed: {type(error).__name__}"
        return "failed", tracker.error_event("internal_error", message, session_id=session_id), True
    if tracker.pending_tool_calls:
        return "requires_action", None, False
    return "completed", tracker.done_event(session_id=session_id), False
