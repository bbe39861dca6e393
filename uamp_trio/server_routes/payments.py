"""``POST /api/payments/tokens/{id}/topup``: the ledger's operator adds money to a token.

Spec 004 ("Mid-Stream Token Top-Up") has the payer's side top a token up over
HTTP while a response waits on ``payment.required``, then ``payment.submit``
the same token. Here the route belongs to the ledger's operator, beside
``uamp tokens top-up``: the caller must be authenticated as one of the
principals ``uamp serve --ledger-operator`` names (a
:class:`~uamp_trio.trust.payments.LedgerPolicy`'s ``operators``).

Fail closed: a server without a ledger, a caller who is not an operator
(anonymous included) and a token id the ledger does not hold all get the same
``404`` -- nobody else learns whether a token exists. The body is
``{"amount": "5.00"}`` (a decimal string in the token's currency); the answer
is the token's state, as ``uamp tokens show`` prints it.
"""

from __future__ import annotations

from typing import Any

from uamp_proto.ledger import LedgerError

from ..engines.http import HTTPError, Request, Response, json_response
from ..hosting.host import Host
from ..hosting.router import RouteMeta

__all__ = ["PAYMENT_ROUTES", "mount"]

#: Authenticated (never public), OpenAI-style errors.
PAYMENT_ROUTES = RouteMeta(transport="server", error_style="openai", max_body=4096)

_MISSING = "No payment token with that id is known here."


def mount(host: Host) -> None:
    """Serve the top-up route on ``host``."""

    async def top_up(request: Request) -> Response:
        """``POST /api/payments/tokens/{id}/topup``."""
        policy: Any = host.payment_policy
        operators: frozenset[str] = getattr(policy, "operators", frozenset())
        caller = request.principal
        if caller.scheme == "anonymous" or caller.id not in operators:
            raise HTTPError(404, _MISSING, code="not_found")
        body = await request.json()
        amount = body.get("amount") if isinstance(body, dict) else None
        if not isinstance(amount, str):
            raise HTTPError(400, 'The body must be {"amount": "<decimal string>"}.', param="amount")
        ledger = policy.ledger
        try:
            state = await ledger.call(ledger.top_up_id, request.path_params["id"], amount)
        except LedgerError:
            raise HTTPError(404, _MISSING, code="not_found") from None
        except ValueError as exc:
            raise HTTPError(400, str(exc), code="invalid_amount", param="amount") from None
        return json_response(state.as_json())

    host.router.add("POST", "/api/payments/tokens/{id}/topup", top_up, meta=PAYMENT_ROUTES)
