"""One OpenAI Realtime connection, run the same way by both servers.

``uamp serve`` (:mod:`uamp_trio.transports.realtime`) and the ASGI app
(:mod:`uamp_asgi.transports.realtime`) accept the WebSocket their own way
and hand it to :class:`RealtimeConnection`, which serves it until it closes.
The protocol is the sans-IO :class:`~uamp_proto.adapters.realtime.RealtimeSession`
(every client event's answer) and
:class:`~uamp_proto.adapters.realtime.ResponseEncoder` (a turn's UAMP events
as Realtime events); this module is what runs around them, on :mod:`anyio`,
so one implementation serves under Trio and under asyncio:

* ``session.created`` goes out first, unprompted;
* ``response.create`` takes its place in the conversation under the busy
  policy (:class:`~uamp_stores.busy.ConversationGate`; docs/busy.md): a
  refusal is the ``conversation_already_has_active_response`` error, a
  queued one starts when the responses before it ended, an interrupting one
  cancels the running response (a rolled-back one's items are deleted). It
  runs as one turn in the connection's task group, so the socket keeps
  reading. Client tools end the response with ``function_call`` items; the
  client answers with ``function_call_output`` items and a new
  ``response.create``;
* ``response.cancel`` cancels the running turn (``response.done``, status
  ``cancelled``);
* payment (spec 004): a ``response.create`` the session's token does not pay
  for is held and answered ``payment.required`` (its ``expires_at``
  ``payment_wait`` away; then the hold is dropped with an ``error``
  ``payment_required``); ``payment.submit`` with a token that pays gets
  ``payment.accepted`` (with ``balance_remaining``) and starts it, one that
  does not ``payment.error``. A mid-response top-up pauses the agent in its
  ``emit`` until a ``payment.submit`` locks the extra amount on the
  response's charge (:func:`uamp_proto.topup.pay_top_up`; ``response.cancel``
  ends the wait and the response);
* signing: with the terms' signer a completed ``response.done`` carries
  ``signature`` over the response's text and the ``response.create`` message
  that started it;
* calls (docs/voice.md): the first ``input_audio_buffer.append`` outside a
  call places one to the agent (:func:`uamp_proto.voice.answer_call`,
  awaited before the next client event is read). ``voice.end`` from the
  client, or the socket closing, ends the call and the agent's
  ``call_ended`` learns its duration;
* a client event after the upgrade's credential expired gets an ``error``
  ``unauthorized`` and the socket closes with 1008 (Realtime has no way to
  present a new token on an open socket; clients reconnect).

What differs between the servers is passed in: the socket, how a turn runs
(:class:`Runner`, each server's turn driver), the agent's payment terms
(:class:`Terms`) and the exceptions that say the socket closed.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

import anyio
import anyio.abc
import attrs
import orjson

from uamp_proto import events as ev
from uamp_proto import voice
from uamp_proto.adapters import realtime as rt
from uamp_proto.busy import BUSY, INVALID_POLICY, BusyError
from uamp_proto.codec import unstructure
from uamp_proto.ids import short_random_ids
from uamp_proto.outcome import ResponseOutcome
from uamp_proto.payment import Charge, PaymentRequiredError, bounded_wait
from uamp_proto.principal import Principal
from uamp_proto.responder import Responder, TurnRequest
from uamp_proto.response import ResponseTracker
from uamp_proto.signing import ResponseSigner
from uamp_proto.topup import pay_top_up

from .busy import ConversationGate, Slot

__all__ = ["RealtimeConnection", "Runner", "Socket", "Terms"]

#: Seconds the agent's ``call_ended`` may take once the socket has closed.
CALL_END_GRACE = 5.0

log = logging.getLogger("uamp_stores.realtime")


class Socket(Protocol):
    """The accepted WebSocket, as each server offers it."""

    async def send(self, message: str) -> None:
        """Send one text message."""

    async def receive(self) -> str | bytes:
        """The next message (raises the server's closed exception at the end)."""

    async def close(self, code: int = 1000) -> None:
        """Close with ``code``."""


class Runner(Protocol):
    """One turn of the agent (each server's turn driver)."""

    tracker: ResponseTracker

    async def run(self) -> ResponseOutcome:
        """Run the turn to its end."""

    def cancel(self) -> None:
        """End the turn with ``response.cancelled``."""


#: Makes a :class:`Runner`: ``(agent, request, sink, charge=...)``.
RunnerFactory = Callable[..., Runner]


class Terms(Protocol):
    """The agent on the terms the connection serves it: its payment and signer."""

    @property
    def agent(self) -> Responder:
        """The agent."""

    @property
    def signer(self) -> ResponseSigner | None:
        """Signs a completed response's text and request (``None``: unsigned)."""

    async def refusal(self, token: str | None) -> PaymentRequiredError | None:
        """Why ``token`` cannot pay for a response now, or ``None``."""

    async def balance(self, token: str | None) -> str | None:
        """What ``token`` has left, where the policy keeps balances."""

    async def open_charge(
        self, token: str | None, response_id: str, caller: Principal
    ) -> Charge | None:
        """Hold one response's price (``None``: free); raises PaymentRequiredError."""


@attrs.define
class _Active:
    response_id: str
    encoder: rt.ResponseEncoder
    request_bytes: bytes | str
    turn: Runner | None = None
    cancel_requested: bool = False
    charge: Charge | None = None
    #: A mid-response top-up the client has not paid yet: the amount asked
    #: and the event set once it is locked (or the response is cancelled).
    topup: tuple[str, anyio.Event] | None = None
    #: Its place in the session under the busy policy (docs/busy.md).
    slot: Slot | None = None


class RealtimeConnection:
    """One Realtime socket: reads client events, runs responses, writes events.

    Args:
        socket: The accepted WebSocket.
        terms: The agent, its payment and signer.
        session: The session :func:`~uamp_proto.adapters.realtime.open_session` opened.
        principal: Who the connection acts for (the upgrade's).
        runner: Makes each response's turn (``uamp_trio``'s ``ResponseRunner``,
            ``uamp_asgi``'s ``Turn``).
        closed: The exceptions the server's socket raises once it closed.
        conversations: The busy gate (default: one of the connection's own,
            the policy ``enqueue``).
        payment_wait: Longest a ``response.create`` is held for payment.
    """

    def __init__(
        self,
        socket: Socket,
        terms: Terms,
        session: rt.RealtimeSession,
        principal: Principal,
        *,
        runner: RunnerFactory,
        closed: tuple[type[BaseException], ...],
        conversations: ConversationGate | None = None,
        payment_wait: float,
    ) -> None:
        self.socket = socket
        self.terms = terms
        self.agent = terms.agent
        self.session = session
        self.principal = principal
        self.runner = runner
        self.closed = closed
        self.conversations = conversations or ConversationGate()
        self.payment_wait = payment_wait
        self.payment_token: str | None = None
        self.active: _Active | None = None
        #: A ``response.create`` awaiting payment, with its raw message, and its place.
        self.held: tuple[rt.CreateResponse, bytes | str] | None = None
        self.held_slot: Slot | None = None
        #: Ends the wait of the held response when it is paid or dropped.
        self._hold_expiry: anyio.CancelScope | None = None
        self._group: anyio.abc.TaskGroup | None = None
        self._lock = anyio.Lock()

    async def send(self, event: dict[str, Any]) -> None:
        async with self._lock:
            await self.socket.send(orjson.dumps(event).decode())

    async def error(self, message: str, code: str, client_event_id: str | None = None) -> None:
        event_id = self.session.ids("event")
        await self.send(
            rt.error_event(event_id, message, code=code, client_event_id=client_event_id)
        )

    async def run(self) -> None:
        """Serve the socket until it closes (or its credential expires)."""
        await self.send(self.session.created_event(unstructure(self.agent.capabilities())))
        async with anyio.create_task_group() as group:
            self._group = group
            try:
                while True:
                    message = await self.socket.receive()
                    if self.principal.expired(time.time()):
                        await self.error(
                            "The connection's token has expired; reconnect with a fresh one.",
                            "unauthorized",
                        )
                        await self.socket.close(1008)
                        return
                    await self._receive(message)
            except self.closed:
                pass
            finally:
                group.cancel_scope.cancel()
                if self.held_slot is not None:
                    self.held_slot.close()  # a response held for payment never runs
                with anyio.move_on_after(CALL_END_GRACE, shield=True):
                    await self._end_call("closed", tell_client=False)

    async def _receive(self, message: str | bytes) -> None:
        handled = self.session.handle_message(message)
        for reply in handled.replies:
            await self.send(reply)
        action = handled.action
        if isinstance(action, rt.CreateResponse):
            await self._create(action, message)
        elif isinstance(action, rt.CancelResponse):
            await self._cancel(action)
        elif isinstance(action, rt.SubmitPayment):
            await self._payment(action)
        elif isinstance(action, rt.PlaceCall):
            await self._place_call(action)
        elif isinstance(action, rt.EndCall):
            await self._end_call(action.reason or "ended")

    def _spawn(self, fn: Callable[..., Coroutine[Any, Any, None]], *args: Any) -> None:
        assert self._group is not None
        self._group.start_soon(fn, *args)

    # --- calls ---------------------------------------------------------------------

    async def _place_call(self, action: rt.PlaceCall) -> None:
        """Ask the agent to take the call the first audio placed; send what the session owes."""
        offer = self.session.call_offer(action, self.principal)
        answer = await voice.answer_call(
            self.agent, offer, move_on_after=anyio.move_on_after, log=log
        )
        for reply in self.session.call_answered(action, answer, anyio.current_time()):
            await self.send(reply)

    async def _end_call(self, reason: str, *, tell_client: bool = True) -> None:
        """End the call, if any: ``voice.end`` with its duration, and the agent is told."""
        replies, ended = self.session.end_call(anyio.current_time(), reason)
        if tell_client:
            for reply in replies:
                await self.send(reply)
        if ended is not None:
            await voice.call_ended(self.agent, ended, log=log)

    # --- responses ---------------------------------------------------------------

    async def _create(self, action: rt.CreateResponse, message: bytes | str) -> None:
        gate = self.conversations
        key = ("realtime", self.principal.key, self.session.session_id)
        try:
            # A response.create while one is active: the busy policy (docs/busy.md).
            slot = gate.enter(key, self.principal, gate.policy(action.options.metadata))
        except BusyError as exc:
            busy = self.active.response_id if self.active else "a response awaiting payment"
            codes = {
                BUSY: "conversation_already_has_active_response",
                INVALID_POLICY: "invalid_value",
            }
            await self.error(
                f"Conversation already has an active response in progress: {busy}. {exc}",
                codes.get(exc.code, exc.code),
                action.client_event_id,
            )
            return
        if slot.ready:
            await self._charge_and_start(action, message, slot)
            return
        self._spawn(self._start_in_turn, action, message, slot)

    async def _start_in_turn(
        self, action: rt.CreateResponse, message: bytes | str, slot: Slot
    ) -> None:
        """Start a queued ``response.create`` once the responses before it ended."""
        await slot.wait()
        try:
            await self._charge_and_start(action, message, slot)
        except BaseException:
            slot.close()
            raise

    async def _charge_and_start(
        self, action: rt.CreateResponse, message: bytes | str, slot: Slot
    ) -> None:
        """Hold the response's price (a ledger locks it) and start it, or ask for payment."""
        response_id = short_random_ids("resp")
        try:
            charge = await self.terms.open_charge(self.payment_token, response_id, self.principal)
        except PaymentRequiredError as unpaid:
            required, wait = bounded_wait(unpaid.event(), time.time(), self.payment_wait)
            self.held, self.held_slot = (action, message), slot
            self._spawn(self._expire_hold, self.held, wait)
            await self.send(rt.payment_event(required, self.session.ids("event")))
            return
        self._start(action, message, response_id, charge, slot)

    async def _expire_hold(self, held: tuple[rt.CreateResponse, bytes | str], wait: float) -> None:
        """Drop ``held`` if it is still unpaid after ``wait`` seconds (its ``expires_at``)."""
        with anyio.CancelScope() as scope:
            self._hold_expiry = scope
            await anyio.sleep(wait)
            if self.held is not held:
                return
            slot, self.held, self.held_slot = self.held_slot, None, None
            if slot is not None:
                slot.close()  # the next response.create may run
            await self.error(rt.hold_expired(wait), "payment_required", held[0].client_event_id)

    def _stop(self, active: _Active) -> None:
        """A later ``response.create`` cut in (interrupt, rollback): cancel ``active``."""
        active.cancel_requested = True
        if active.turn is not None:
            active.turn.cancel()
        if active.topup is not None:
            active.topup[1].set()

    def _start(
        self,
        action: rt.CreateResponse,
        message: bytes | str,
        response_id: str,
        charge: Charge | None,
        slot: Slot,
    ) -> None:
        options = action.options
        request = self.session.turn_request(
            options,
            agent=self.agent.name,
            response_id=response_id,
            payment_token=self.payment_token,
            principal=self.principal,
        )
        encoder = rt.ResponseEncoder(
            self.session,
            response_id,
            modalities=options.modalities or list(self.session.settings.modalities),
            conversation=options.conversation,
            metadata=options.metadata,
        )
        active = _Active(
            response_id=response_id,
            encoder=encoder,
            request_bytes=message,
            charge=charge,
            slot=slot,
        )
        self.active = active
        slot.bind(functools.partial(self._stop, active))
        self._spawn(self._respond, active, request, charge)

    async def _respond(self, active: _Active, request: TurnRequest, charge: Charge | None) -> None:
        encoder = active.encoder

        async def sink(event: ev.Event) -> None:
            # Inline (the agent's emit awaits this), so a top-up holds the agent itself.
            if type(event) is ev.PaymentRequired and event.is_topup:
                await self._top_up(active, event)
                return
            for out in encoder.feed(event):
                await self.send(self._signed(out, active, turn))

        turn = self.runner(self.agent, request, sink, charge=charge)
        active.turn = turn
        if active.cancel_requested:
            turn.cancel()
        try:
            outcome = await turn.run()
            if not encoder.finished:  # client tool calls pending: the response completes
                for out in encoder.finish("completed", usage=outcome.tracker.usage):
                    await self.send(self._signed(out, active, turn))
            if outcome.balance is not None:  # after response.done, as on UAMP
                await self.send(rt.payment_event(outcome.balance, self.session.ids("event")))
            if active.slot is not None and active.slot.dropped:
                await self._drop_turn(encoder)
        except self.closed:
            pass
        finally:
            if self.active is active:
                self.active = None
            if active.slot is not None:
                active.slot.close()  # the next response.create runs

    async def _drop_turn(self, encoder: rt.ResponseEncoder) -> None:
        """A rolled-back response leaves the conversation: its items are deleted, as told."""
        for item in encoder.output:
            delete = {"type": "conversation.item.delete", "item_id": item["id"]}
            handled = self.session.handle(delete)
            for reply in handled.replies:
                await self.send(reply)

    async def _top_up(self, active: _Active, required: ev.PaymentRequired) -> None:
        """Pause the response for a mid-response top-up (spec 004) until it is locked.

        The client gets ``payment.required`` (``extra.action: "topup"``); no
        content is sent meanwhile (the agent waits in its ``emit``). Each
        ``payment.submit`` tries to lock the extra amount on the response's
        charge: ``payment.accepted`` resumes the response, ``payment.error``
        (``can_retry``) keeps it paused. A ``response.cancel`` ends the wait
        and the response.
        """
        if active.charge is None:
            return  # nothing is held for this response: no top-up to lock
        paid = anyio.Event()
        active.topup = (required.requirements.amount, paid)
        event = attrs.evolve(required, response_id=active.response_id)
        await self.send(rt.payment_event(event, self.session.ids("event")))
        await paid.wait()
        active.topup = None

    def _signed(self, out: dict[str, Any], active: _Active, turn: Runner) -> dict[str, Any]:
        """``out``, with ``signature`` when it is a completed ``response.done`` to sign."""
        signer = self.terms.signer
        if signer is not None and rt.needs_signature(out):
            out["signature"] = signer(turn.tracker.text, active.request_bytes)
        return out

    async def _cancel(self, action: rt.CancelResponse) -> None:
        active = self.active
        refusal = rt.cancel_refusal(action.response_id, active.response_id if active else None)
        if refusal is not None:
            await self.error(refusal, "response_cancel_not_active", action.client_event_id)
            return
        assert active is not None  # cancel_refusal answers for a missing one
        self._stop(active)

    # --- payment -------------------------------------------------------------------

    async def _payment(self, action: rt.SubmitPayment) -> None:
        """A token for the paused response's top-up, or for the held response (or later ones)."""
        active = self.active
        if active is not None and active.topup is not None and active.charge is not None:
            await self._pay_top_up(active, active.charge, action)
            return
        self.payment_token = action.token
        unpaid = await self.terms.refusal(self.payment_token)
        if unpaid is not None:  # the held response waits for a better token
            await self.send(
                rt.payment_event(unpaid.submit_error_event(), self.session.ids("event"))
            )
            return
        remaining = await self.terms.balance(self.payment_token)
        accepted = ev.PaymentAccepted(
            payment_id=short_random_ids("pay"), balance_remaining=remaining
        )
        await self.send(rt.payment_event(accepted, self.session.ids("event")))
        held, self.held = self.held, None
        slot, self.held_slot = self.held_slot, None
        if self._hold_expiry is not None:
            self._hold_expiry.cancel()  # paid in time
        if held is not None and slot is not None:
            await self._charge_and_start(*held, slot)

    async def _pay_top_up(self, active: _Active, charge: Charge, action: rt.SubmitPayment) -> None:
        """Lock a paused response's top-up on the submitted token (or the one it holds)."""
        assert active.topup is not None
        amount, paid = active.topup
        if action.token is not None:
            self.payment_token = action.token
        answer, locked = await pay_top_up(
            charge,
            action.token,
            amount,
            balance=lambda: self.terms.balance(self.payment_token),
            payment_id=short_random_ids("pay"),
        )
        await self.send(rt.payment_event(answer, self.session.ids("event")))
        if locked:
            paid.set()
