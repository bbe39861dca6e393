"""Payment asked for while a UAMP response runs (spec 004 "Mid-Stream Token Top-Up").

Theory of operation
-------------------
An agent asks for more money in the middle of a response one of two ways,
and both servers (``uamp serve``'s UAMP sessions, ``uamp_asgi``'s UAMP
WebSocket and HTTP+SSE) answer both alike, through this module; only the
wait itself is theirs (a :data:`Hold`: send the ``payment.required``, park
the response until the session's payment negotiation is ``accepted``, and
raise when it will not be -- cancelled, the session gone, or nothing paid by
the requirements' ``expires_at``):

* It *emits* ``payment.required``: :func:`top_up` holds the response there,
  and once a token was accepted locks the requirements' amount more on the
  response's charge (:meth:`Charge.extend <uamp_proto.payment.Charge.extend>`);
  a token that cannot cover it is asked again with the ledger's reason.
  Then the agent's ``emit`` returns and its coroutine goes on where it was.
  No content flows meanwhile (the core refuses it while payment is open).
* It *raises* :class:`~uamp_proto.payment.PaymentRequiredError`:
  :meth:`TopUpAgent.respond` holds the response, then runs the agent again on
  the conversation so far (its output before the raise included), under the
  same response id, at most :data:`MAX_PAYMENT_ROUNDS` times a response
  (:class:`PaymentStops`); past that the error ends the response
  ``response.error`` ``payment_required``.

Realtime (OpenAI's protocol, no UAMP payment negotiation) pauses an emitted
top-up itself and locks it on each ``payment.submit`` with
:func:`pay_top_up`.

Either way a response is charged at most what was locked for it: the
opening lock plus the top-ups that were paid. A response whose top-up is
never paid stops, and settles from what it used within its lock.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final

import attrs

from . import events as ev
from .payment import Charge, PaymentRequiredError
from .responder import PAID_TOKEN, Emit, Responder, TurnRequest
from .types import Capabilities

__all__ = [
    "MAX_PAYMENT_ROUNDS",
    "Hold",
    "PayingAgent",
    "PaymentStops",
    "TopUpAgent",
    "pay_top_up",
    "payment_error",
    "top_up",
]

#: How many times one response may stop on a :class:`PaymentRequiredError`
#: raised by its agent (each one answered by a payment) before it fails with
#: ``response.error`` ``payment_required``: an agent that keeps refusing what
#: the policy accepted must not loop forever with a client that pays
#: automatically.
MAX_PAYMENT_ROUNDS: Final = 3

#: Sends ``payment.required`` and returns once a token was accepted; raises otherwise.
Hold = Callable[[ev.PaymentRequired], Awaitable[None]]


def payment_error(exc: BaseException) -> PaymentRequiredError | None:
    """The PaymentRequiredError behind ``exc`` (also a lone one inside a group)."""
    if isinstance(exc, PaymentRequiredError):
        return exc
    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        return payment_error(exc.exceptions[0])
    return None


async def top_up(
    required: ev.PaymentRequired,
    *,
    hold: Hold,
    charge: Callable[[], Charge | None],
    token: Callable[[], str | None],
    response_id: str,
    session_id: str,
) -> None:
    """Pause the response for the ``payment.required`` its agent emitted, until paid and locked.

    Args:
        required: What the agent asked for.
        hold: The server's wait (see the module docstring).
        charge: The response's charge now (``None``: a free app locks nothing).
        token: The session's payment token now (the one just accepted).
        response_id: The paused response.
        session_id: Its session.
    """
    required = attrs.evolve(required, response_id=response_id, session_id=session_id)
    while True:
        await hold(required)
        held = charge()
        if held is None:
            return
        try:
            await held.extend(token(), required.requirements.amount)
            return
        except PaymentRequiredError as unpaid:
            required = attrs.evolve(
                unpaid.event(response_id), extra=required.extra, session_id=session_id
            )


async def pay_top_up(
    charge: Charge,
    token: str | None,
    amount: str,
    *,
    balance: Callable[[], Awaitable[str | None]],
    payment_id: str,
) -> tuple[ev.PaymentAccepted | ev.PaymentErrorEvent, bool]:
    """Lock a paused response's top-up of ``amount`` on ``token`` (``None``: its own).

    Returns:
        ``payment.accepted`` (with the amount and what the token has left)
        and ``True``: the response goes on; or ``payment.error``
        (``can_retry``) and ``False``: it stays paused.
    """
    try:
        await charge.extend(token, amount)
    except PaymentRequiredError as unpaid:
        return unpaid.error_event(), False
    remaining = await balance()
    accepted = ev.PaymentAccepted(payment_id=payment_id, amount=amount, balance_remaining=remaining)
    return accepted, True


class PaymentStops:
    """How often one response stopped for a payment its agent raised for (all its rounds)."""

    __slots__ = ("count", "limit")

    def __init__(self, limit: int = MAX_PAYMENT_ROUNDS) -> None:
        self.count = 0
        self.limit = limit

    def take(
        self, exc: BaseException, response_id: str, session_id: str
    ) -> ev.PaymentRequired | None:
        """The ``payment.required`` to hold the response for, or ``None``: ``exc`` goes on."""
        unpaid = payment_error(exc)
        if unpaid is None or self.count >= self.limit:
            return None
        self.count += 1
        return attrs.evolve(unpaid.event(response_id), session_id=session_id)


class TopUpAgent:
    """``agent`` with both ways of asking for money mid-response answered (module docstring).

    Its ``emit`` holds on an emitted ``payment.required`` (:func:`top_up`)
    and returns once paid, with ``request.metadata[PAID_TOKEN]`` the token
    that paid; a raised :class:`PaymentRequiredError` is held and the agent
    run again (:meth:`respond`). A server supplies its side as the
    methods :meth:`hold`, :meth:`next_request`, :meth:`charge` and
    :meth:`token` (a subclass), or as callables (:class:`PayingAgent`).

    One object per response, with no closure per round: its ``respond``
    keeps the round's request and ``emit`` on itself while it runs (rounds
    of one response never overlap) and lets go of both when it returns, so
    nothing it holds outlives the round.

    Args:
        agent: The session's agent.
        stops: The response's count of raised stops (shared by its rounds).
    """

    def __init__(self, agent: Responder, stops: PaymentStops) -> None:
        self.agent = agent
        self._stops = stops
        #: The request of the agent's current run, and the ``emit`` it was given.
        self._current: TurnRequest | None = None
        self._emit: Emit | None = None

    @property
    def name(self) -> str:
        return self.agent.name

    def capabilities(self) -> Capabilities:
        return self.agent.capabilities()

    async def hold(self, required: ev.PaymentRequired) -> None:
        """The server's wait (see the module docstring)."""
        raise NotImplementedError

    def next_request(self) -> TurnRequest:
        """The request of a run after a raised stop; raises when the response is gone."""
        raise NotImplementedError

    def charge(self) -> Charge | None:
        """The response's charge now (``None``: a free app locks nothing)."""
        raise NotImplementedError

    def token(self) -> str | None:
        """The session's payment token now."""
        raise NotImplementedError

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        self._current, self._emit = request, emit
        try:
            # Held and run again on each PaymentRequiredError (module docstring).
            agent, paying = self.agent, self._paying
            while True:
                try:
                    await agent.respond(request, paying)
                    return
                except Exception as exc:
                    required = self._stops.take(exc, request.response_id, request.session_id)
                    if required is None:
                        raise
                await self.hold(required)
                request = self._again()
        finally:
            self._current = self._emit = None

    async def _paying(self, event: ev.Event) -> None:
        """The agent's ``emit``: a ``payment.required`` holds it until paid."""
        emit, current = self._emit, self._current
        if emit is None or current is None:
            raise RuntimeError("emit() called after the agent's respond() returned")
        if type(event) is not ev.PaymentRequired:
            await emit(event)
            return
        await top_up(
            event,
            hold=self.hold,
            charge=self.charge,
            token=self.token,
            response_id=current.response_id,
            session_id=current.session_id,
        )
        paid = self.token()
        if paid is not None:
            current.metadata[PAID_TOKEN] = paid

    def _again(self) -> TurnRequest:
        current = self._current = self.next_request()
        return current


class PayingAgent(TopUpAgent):
    """A :class:`TopUpAgent` whose server side is given as callables (``uamp_asgi``).

    Args:
        agent: The session's agent.
        stops: The response's count of raised stops (shared by its rounds).
        hold: The server's wait.
        again: The request of a run after a raised stop.
        charge: The response's charge now.
        token: The session's payment token now.
    """

    def __init__(
        self,
        agent: Responder,
        *,
        stops: PaymentStops,
        hold: Hold,
        again: Callable[[], TurnRequest],
        charge: Callable[[], Charge | None],
        token: Callable[[], str | None],
    ) -> None:
        super().__init__(agent, stops)
        self._hold, self._next, self._charge, self._token = hold, again, charge, token

    async def hold(self, required: ev.PaymentRequired) -> None:
        await self._hold(required)

    def next_request(self) -> TurnRequest:
        return self._next()

    def charge(self) -> Charge | None:
        return self._charge()

    def token(self) -> str | None:
        return self._token()
