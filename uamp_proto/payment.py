"""Payment negotiation of one session (UAMP 3.3 and 7.2; spec 004).

Theory of operation
-------------------
::

    NONE ──payment.required──▶ REQUIRED ──payment.submit──▶ SUBMITTED
                                   ▲                            │
                                   └──payment.error (can_retry)─┤
                                                                ├──payment.accepted──▶ ACCEPTED
                                                                └──payment.error──────▶ FAILED

While the state is REQUIRED or SUBMITTED no response content may flow: the
server must not send, and the client must not accept, deltas, tool calls,
thinking, audio or ``response.done`` (:attr:`PaymentNegotiation.blocks_content`).
A ``payment.required`` with ``extra.action == "topup"`` arrives in the middle of
a response (spec 004, mid-stream top-up): the response is *paused*, not
lost; its accumulated output stays in its tracker and streaming resumes
after ``payment.accepted``.

Tokens can also be preloaded: ``session.create``/``session.update`` carry
``payment_token``, and a ``payment.submit`` with nothing outstanding simply
records the token.
"""

from __future__ import annotations

import enum
import math
from typing import Protocol

import attrs

from . import events as ev
from . import types as ty
from .codec import unstructure
from .errors import UampError
from .ledger import Pricing
from .ratelimit import Verdict

__all__ = [
    "BALANCE_EVENT",
    "BLOCKING_STATES",
    "PAYMENT_ATTEMPTS_PER_MINUTE",
    "PAYMENT_ERROR_CODES",
    "Charge",
    "ChargingPolicy",
    "PaymentNegotiation",
    "PaymentPolicy",
    "PaymentRequiredError",
    "PaymentState",
    "TokenPolicy",
    "attempt_events",
    "balance_fields",
    "balance_of",
    "bounded_wait",
    "held_event",
    "open_charge",
    "pricing_of",
    "refusal",
    "settle_event",
]

PAYMENT_ERROR_CODES = ev.PAYMENT_ERROR_CODES


class PaymentState(enum.Enum):
    """Where a session's payment negotiation stands."""

    # Members are singletons: hash by identity (looked up on every delta).
    __hash__ = object.__hash__

    NONE = "none"
    REQUIRED = "required"
    SUBMITTED = "submitted"
    ACCEPTED = "accepted"
    FAILED = "failed"


#: The states in which no response content may be released or accepted.
BLOCKING_STATES = frozenset({PaymentState.REQUIRED, PaymentState.SUBMITTED})


#: The transitions of the negotiation: (state, event type) -> new state.
#: ``payment.error`` is resolved by its ``can_retry`` flag (see ``apply``).
TRANSITIONS: dict[tuple[PaymentState, str], PaymentState] = {
    (PaymentState.NONE, "payment.required"): PaymentState.REQUIRED,
    (PaymentState.ACCEPTED, "payment.required"): PaymentState.REQUIRED,
    (PaymentState.FAILED, "payment.required"): PaymentState.REQUIRED,
    (PaymentState.REQUIRED, "payment.required"): PaymentState.REQUIRED,
    (PaymentState.REQUIRED, "payment.submit"): PaymentState.SUBMITTED,
    (PaymentState.SUBMITTED, "payment.submit"): PaymentState.SUBMITTED,
    (PaymentState.SUBMITTED, "payment.accepted"): PaymentState.ACCEPTED,
    (PaymentState.NONE, "payment.submit"): PaymentState.NONE,
    (PaymentState.ACCEPTED, "payment.submit"): PaymentState.ACCEPTED,
    (PaymentState.FAILED, "payment.submit"): PaymentState.SUBMITTED,
    (PaymentState.NONE, "payment.accepted"): PaymentState.ACCEPTED,
    (PaymentState.ACCEPTED, "payment.accepted"): PaymentState.ACCEPTED,
    (PaymentState.REQUIRED, "payment.error"): PaymentState.REQUIRED,
    (PaymentState.SUBMITTED, "payment.error"): PaymentState.FAILED,
    (PaymentState.NONE, "payment.error"): PaymentState.FAILED,
    (PaymentState.ACCEPTED, "payment.error"): PaymentState.FAILED,
}

#: Server events that release response content to the client.
CONTENT_EVENTS = frozenset(
    {
        "response.delta",
        "response.done",
        "tool.call",
        "thinking",
        "audio.delta",
        "audio.done",
        "transcript.delta",
        "transcript.done",
    }
)


class PaymentNegotiation:
    """The payment state of one session; both ends use it.

    Attributes:
        state: The current :class:`PaymentState`.
        token: The latest payment token (preloaded or submitted).
        requirements: What the last ``payment.required`` asked for.
        paused_response: The id of a response paused by a top-up, if any.
        balance: The last ``payment.balance`` event seen.
        last_error: The last ``payment.error`` event seen.
    """

    def __init__(self, token: str | None = None) -> None:
        self.state = PaymentState.NONE
        self.token = token
        self.requirements: ty.PaymentRequirements | None = None
        self.paused_response: str | None = None
        self.topup = False
        self.balance: ev.PaymentBalance | None = None
        self.last_error: ev.PaymentErrorEvent | None = None

    @property
    def blocks_content(self) -> bool:
        """True while payment is required and not yet accepted."""
        return self.state in BLOCKING_STATES

    @property
    def low_balance(self) -> bool:
        """Whether the last balance update carried a low-balance warning."""
        return bool(self.balance and self.balance.low_balance_warning)

    def can_apply(self, event: ev.Event) -> bool:
        """Whether ``event`` is a legal next payment event."""
        if event.type == "payment.balance":
            return True
        return (self.state, event.type) in TRANSITIONS

    def apply(self, event: ev.Event, *, active_response: str | None = None) -> None:
        """Advance on a payment event (sent or received).

        Args:
            event: ``payment.required``, ``.submit``, ``.accepted``,
                ``.balance`` or ``.error``.
            active_response: The session's in-progress response, paused by a
                top-up ``payment.required``.

        Raises:
            ValueError: the event is not legal in the current state (the
                connection turns this into a local or remote protocol error).
        """
        kind = type(event)
        if kind is ev.PaymentBalance:
            self.balance = event  # type: ignore[assignment]
            return
        new = TRANSITIONS.get((self.state, event.type))
        if new is None:
            raise ValueError(f"{event.type} is not allowed while payment is {self.state.value}")
        if kind is ev.PaymentRequired:
            assert isinstance(event, ev.PaymentRequired)
            self.requirements = event.requirements
            self.topup = event.is_topup
            self.paused_response = event.response_id or active_response
        elif kind is ev.PaymentSubmit:
            assert isinstance(event, ev.PaymentSubmit)
            if event.payment.token is not None:
                self.token = event.payment.token
        elif kind is ev.PaymentAccepted:
            self.paused_response = None
            self.topup = False
        elif kind is ev.PaymentErrorEvent:
            assert isinstance(event, ev.PaymentErrorEvent)
            self.last_error = event
            if event.can_retry and self.state is PaymentState.SUBMITTED:
                new = PaymentState.REQUIRED
        self.state = new

    def preload(self, token: str | None) -> None:
        """Record a token delivered by ``session.create`` or ``session.update``."""
        if token is not None:
            self.token = token


# --- the payment policy every transport consults -----------------------------


class PaymentRequiredError(UampError):
    """A turn cannot run (or go on) until the client pays.

    Transports map it to their own signal (spec 004 "Payment Handling"):
    Completions and Responses answer ``402`` with OpenAI's error object
    (``error.code`` the reason, ``error.accepts`` the options) before any stream
    starts and accepts ``X-PAYMENT`` on the retry; UAMP WebSocket and Realtime
    send ``payment.required`` and retry after ``payment.submit``; A2A fails the
    task with ``code: "payment_required"``; ACP answers JSON-RPC error
    ``-32402`` and accepts ``payment_token`` on the retried prompt.

    Attributes:
        requirements: What must be paid.
        topup: True for a mid-stream top-up (the response pauses, not ends).
        code: Why: ``payment_required`` (no token), or the section 7.2 code
            of the presented token's refusal (``insufficient_balance``,
            ``token_expired``, ``token_invalid`` ...).
        reason: A sentence for the payer.
        balance_current: The token's balance, when that is the problem.
    """

    def __init__(
        self,
        requirements: ty.PaymentRequirements,
        *,
        topup: bool = False,
        code: str = "payment_required",
        reason: str | None = None,
        balance_current: str | None = None,
    ) -> None:
        super().__init__(f"payment required: {requirements.amount} {requirements.currency or ''}")
        self.requirements = requirements
        self.topup = topup
        self.code = code
        self.reason = reason or "Payment is required to continue."
        self.balance_current = balance_current

    def details(self) -> dict[str, object]:
        """What HTTP and JSON-RPC forms carry besides ``accepts``: the code and balances."""
        out: dict[str, object] = {"code": self.code, "message": self.reason}
        out["balance_required"] = self.requirements.amount
        if self.balance_current is not None:
            out["balance_current"] = self.balance_current
        return out

    def error_event(self, session_id: str | None = None) -> ev.PaymentErrorEvent:
        """The UAMP ``payment.error`` telling why a presented token was refused."""
        return ev.PaymentErrorEvent(
            session_id=session_id,
            code=self.code if self.code in PAYMENT_ERROR_CODES else "payment_failed",
            message=self.reason,
            balance_required=self.requirements.amount,
            balance_current=self.balance_current,
            can_retry=True,
        )

    def submit_error_event(self) -> ev.PaymentErrorEvent:
        """The ``payment.error`` of a refused ``payment.submit``: one that carried no
        token is ``token_invalid`` (``payment_required`` would ask for what it just got)."""
        if self.code == "payment_required":
            self.code, self.reason = "token_invalid", "No payment token was submitted."
        return self.error_event()

    def accepts(self) -> list[dict[str, object]]:
        """The ``accepts`` list of the HTTP/JSON-RPC forms (one entry per scheme)."""
        req = self.requirements
        schemes = req.schemes or [ty.PaymentScheme(scheme="token")]
        out: list[dict[str, object]] = []
        for scheme in schemes:
            entry: dict[str, object] = {"scheme": scheme.scheme, "amount": req.amount}
            if scheme.network is not None:
                entry["network"] = scheme.network
            if req.currency is not None:
                entry["currency"] = req.currency
            out.append(entry)
        return out

    def event(self, response_id: str | None = None) -> ev.PaymentRequired:
        """The UAMP ``payment.required`` event for this requirement."""
        return ev.PaymentRequired(
            response_id=response_id,
            requirements=self.requirements,
            extra={"action": "topup"} if self.topup else None,
        )


class PaymentPolicy(Protocol):
    """Decides whether a turn may run, the same way for every transport.

    ``check`` is called before a turn starts with the payment token the
    client presented (``X-PAYMENT`` header, ``payment_token`` of the session
    or of ``input.text``, ACP's ``payment_token`` param, a
    ``payment.submit``): it returns ``None`` when the turn may proceed, or
    the requirements the client must meet.
    """

    def check(self, agent: str, token: str | None) -> ty.PaymentRequirements | None:
        """``None`` to proceed, else what must be paid."""
        ...


class Charge(Protocol):
    """The money held for one response: settled once when the response ends.

    Both methods are coroutines: a ledger does its I/O off the event loop.
    ``settle`` must complete even when its caller is being cancelled (it
    runs in ``finally`` blocks), so implementations shield it.
    """

    async def settle(self, usage: ty.UsageStats | None, *, used: bool) -> ev.PaymentBalance | None:
        """Charge what the response used, free the rest; the balance update to send, if any.

        Settling again changes nothing (and returns ``None``).
        """
        ...

    async def extend(self, token: str | None, amount: str) -> None:
        """Lock ``amount`` more for this response (a mid-stream top-up).

        Raises:
            PaymentRequiredError: The token cannot cover it.
        """
        ...


class ChargingPolicy(PaymentPolicy, Protocol):
    """A policy that holds money for each response (the ledger).

    ``declared`` is the agent's own pricing (its ``pricing`` attribute), if any.
    """

    async def verify(
        self, agent: str, token: str | None, declared: Pricing | None
    ) -> PaymentRequiredError | None:
        """Why ``token`` cannot pay a response of ``agent`` now, or ``None`` (locks nothing)."""
        ...

    async def open(
        self,
        agent: str,
        token: str | None,
        response_id: str,
        declared: Pricing | None = None,
        *,
        principal: str | None = None,
    ) -> Charge | None:
        """Lock the response's price on ``token``; ``None`` when ``agent`` is free.

        ``principal`` (the caller's id) is recorded with the lock.

        Raises:
            PaymentRequiredError: No token, or the token cannot pay (its
                ``code`` says why).
        """
        ...


def _charging(policy: PaymentPolicy) -> ChargingPolicy | None:
    return policy if hasattr(policy, "open") and hasattr(policy, "verify") else None  # type: ignore[return-value]


async def refusal(
    policy: PaymentPolicy | None, agent: str, token: str | None, declared: Pricing | None = None
) -> PaymentRequiredError | None:
    """Why ``policy`` would not let ``token`` pay a response of ``agent`` now (locks nothing)."""
    if policy is None:
        return None
    charging = _charging(policy)
    if charging is not None:
        return await charging.verify(agent, token, declared)
    requirements = policy.check(agent, token)
    return None if requirements is None else PaymentRequiredError(requirements)


async def balance_of(policy: PaymentPolicy | None, token: str | None) -> str | None:
    """What ``token`` has left to spend (``payment.accepted.balance_remaining``, spec 004).

    ``None`` when there is no token, or the policy keeps no balances (only a
    policy with an async ``balance_of(token)`` does, such as the ledger's).
    """
    reader = getattr(policy, "balance_of", None)
    if token is None or not callable(reader):
        return None
    remaining: str | None = await reader(token)
    return remaining


async def open_charge(
    policy: PaymentPolicy | None,
    agent: str,
    token: str | None,
    response_id: str,
    declared: Pricing | None = None,
    *,
    principal: str | None = None,
) -> Charge | None:
    """Hold the price of one response before the agent starts (``None``: nothing to settle).

    A plain :class:`PaymentPolicy` only decides; a :class:`ChargingPolicy`
    also locks money, settled through the returned :class:`Charge`.

    Raises:
        PaymentRequiredError: The response may not run until paid.
    """
    if policy is None:
        return None
    charging = _charging(policy)
    if charging is not None:
        return await charging.open(agent, token, response_id, declared, principal=principal)
    requirements = policy.check(agent, token)
    if requirements is not None:
        raise PaymentRequiredError(requirements)
    return None


#: What a ``payment.balance`` is called where a transport carries it in a frame
#: of its own (an AG-UI ``CUSTOM`` event's name, an SSE event name, a key of
#: A2A and ACP ``metadata``/``_meta``); docs/security.md lists each transport.
BALANCE_EVENT = "payment.balance"

_ENVELOPE = frozenset({"type", "event_id", "session_id", "response_id", "timestamp"})


def balance_fields(event: ev.PaymentBalance) -> dict[str, object]:
    """The balance update's own fields (balance, currency, ``low_balance_warning`` ...).

    Without the UAMP envelope (type and ids): what a transport that wraps
    the update in its own frame carries.
    """
    fields: dict[str, object] = unstructure(event)
    return {k: v for k, v in fields.items() if k not in _ENVELOPE}


def pricing_of(agent: object) -> Pricing | None:
    """The pricing an agent declares (its optional ``pricing`` attribute)."""
    declared = getattr(agent, "pricing", None)
    return declared if isinstance(declared, Pricing) else None


class TokenPolicy:
    """A policy that accepts a fixed set of payment tokens.

    Args:
        valid_tokens: Tokens that pay for a turn.
        amount: The price quoted in the requirements.
        currency: Its currency.
        agents: Only these agents are paid (``None``: all).
    """

    def __init__(
        self,
        valid_tokens: set[str] | frozenset[str],
        *,
        amount: str = "0.01",
        currency: str = "USD",
        agents: set[str] | None = None,
    ) -> None:
        self.valid_tokens = frozenset(valid_tokens)
        self.amount = amount
        self.currency = currency
        self.agents = agents

    def check(self, agent: str, token: str | None) -> ty.PaymentRequirements | None:
        """Require payment unless ``token`` is one of the valid tokens."""
        if self.agents is not None and agent not in self.agents:
            return None
        if token is not None and token in self.valid_tokens:
            return None
        return ty.PaymentRequirements(
            amount=self.amount,
            currency=self.currency,
            schemes=[ty.PaymentScheme(scheme="token", network="uamp")],
            reason="agent_usage",
        )


def bounded_wait(
    required: ev.PaymentRequired, now: float, wait: float
) -> tuple[ev.PaymentRequired, float]:
    """``required`` with the ``expires_at`` of a wait for payment, and the seconds to wait.

    A response waits for payment at most ``wait`` seconds (UAMP 7.2:
    ``requirements.expires_at`` says until when, seconds since the epoch).
    An earlier ``expires_at`` the policy set (its quote ends first) stands
    and shortens the wait; otherwise it becomes ``now + wait``, rounded up.
    """
    asked = required.requirements
    if asked.expires_at is not None and now < asked.expires_at < now + wait:
        return required, asked.expires_at - now
    deadline = math.ceil(now + wait)
    return attrs.evolve(required, requirements=attrs.evolve(asked, expires_at=deadline)), wait


# --- a session's response held for payment (both servers' UAMP sessions) -------


def held_event(
    negotiation: PaymentNegotiation,
    response_id: str,
    session_id: str,
    unpaid: PaymentRequiredError | None = None,
) -> ev.PaymentRequired:
    """The ``payment.required`` that holds response ``response_id`` of a session.

    ``unpaid``: the policy just refused to lock its price (what it asks for
    now); ``None``: a negotiation still open (a response cancelled while it
    waited) is announced again with the requirements it had.
    """
    if unpaid is not None:
        required = unpaid.event(response_id)
    else:
        asked = negotiation.requirements
        assert asked is not None  # blocks_content implies a payment.required was sent
        required = ev.PaymentRequired(response_id=response_id, requirements=asked)
    return attrs.evolve(required, session_id=session_id)


def settle_event(
    negotiation: PaymentNegotiation,
    session_id: str,
    unpaid: PaymentRequiredError | None,
    remaining: str | None,
    payment_id: str,
) -> ev.PaymentAccepted | ev.PaymentErrorEvent:
    """The answer to a presented token: the policy's verdict ``unpaid`` as an event.

    ``payment.accepted`` (with ``remaining``, and the amount asked) releases
    a held or paused response; ``payment.error`` (``can_retry``: the response
    keeps waiting for a better token) refuses it, ``token_invalid`` when the
    submit carried no token.
    """
    if unpaid is not None:
        refused = unpaid.submit_error_event()
        return attrs.evolve(refused, session_id=session_id)
    asked = negotiation.requirements
    return ev.PaymentAccepted(
        session_id=session_id,
        payment_id=payment_id,
        balance_remaining=remaining,
        amount=asked.amount if asked is not None else None,
        currency=asked.currency if asked is not None else None,
    )


#: Payment tokens one principal may present per minute (``payment.submit``,
#: or a token answering ``payment.required``); past it ``payment.error``
#: ``rate_limited`` and the ledger is not asked (UAMP 7.2).
PAYMENT_ATTEMPTS_PER_MINUTE = 60


def attempt_events(verdict: Verdict, session_id: str) -> list[ev.Event]:
    """What a session is told when it presents a token (``verdict``: the principal's rate).

    A ``rate_limit`` warning as the rate comes near (UAMP 6.17); past it also
    ``payment.error`` ``rate_limited`` (``can_retry``: the response stays
    held), and the token is not judged.
    """
    out: list[ev.Event] = []
    warning = verdict.notice(session_id)
    if warning is not None:
        out.append(warning)
    if not verdict.allowed:
        message = (
            f"more than {verdict.limit} payment tokens a minute; try again "
            "after the rate_limit's reset_at"
        )
        out.append(
            ev.PaymentErrorEvent(
                session_id=session_id, code="rate_limited", message=message, can_retry=True
            )
        )
    return out
