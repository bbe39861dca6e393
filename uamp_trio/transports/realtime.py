"""The OpenAI Realtime transport: ``WS /agents/{name}/realtime`` (spec 004).

The OpenAI SDK's ``client.realtime.connect(model=...)`` appends
``/realtime?model=...`` to its WebSocket base URL, so a client whose
``base_url`` (or ``websocket_base_url``) is ``http://host:port/agents/demo``
lands here. ``/v1/realtime`` is served at the root too, for a base URL of
``http://host:port/v1`` on a single-agent server.

The sans-IO :class:`~uamp_proto.adapters.realtime.RealtimeSession` answers
every client event; this module adds the I/O and runs the responses:

* ``session.created`` is sent first, unprompted;
* ``response.create`` starts one UAMP turn (:func:`~uamp_trio.hosting.turns.open_response`)
  in its own task, so the socket keeps reading; its events go out through a
  :class:`~uamp_proto.adapters.realtime.ResponseEncoder`. One response runs
  at a time (a second ``response.create`` gets an
  ``conversation_already_has_active_response`` error). A turn that ends with
  client tool calls completes with ``function_call`` output items; the client
  answers with ``function_call_output`` items and a new ``response.create``;
* ``response.cancel`` cancels the running turn (``response.done`` with status
  ``cancelled``);
* payment (spec 004): with a :class:`~uamp_proto.payment.PaymentPolicy`, a
  ``response.create`` the session's token does not pay for is held and
  answered with ``payment.required``; ``payment.submit`` with a good token
  gets ``payment.accepted`` and starts the held response, a bad one
  ``payment.error`` (``can_retry``). The wait is bounded
  (:attr:`RealtimeTransport.payment_wait`): ``requirements.expires_at``
  says until when (UAMP 7.2), and then the held response is dropped with an
  ``error`` event (``payment_required``);
* the session object carries ``expires_at`` when the upgrade's credential
  expires (the connection ends then); ``voice`` reaches the agent as the
  turn's ``metadata["voice"]`` (UAMP 8.1's ``{"voice_id": ...}``), and a
  voice the agent does not declare is refused at ``session.update``;
* signing (spec 004 "Response Signing"): with the app's ``response_signer``,
  a ``response.done`` whose status is ``completed`` carries ``signature``, an
  RS256 JWT over the response's text (its ``response.output_text.delta``
  deltas joined) and the exact bytes of the ``response.create`` message that
  started it.

* calls (docs/voice.md): the first ``input_audio_buffer.append`` outside a
  call places one to the agent (:func:`~uamp_trio.hosting.calls.answer_call`,
  awaited before the next client event is read); ``voice.accept`` or the
  audio's refusal goes out as the session says. ``voice.end`` from the
  client, or the socket closing, ends the call: the agent's ``call_ended``
  learns its duration.

Clients that send ``OpenAI-Beta: realtime=v1`` (or offer the
``openai-beta.realtime-v1`` subprotocol) get the beta event names.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Any
from urllib.parse import parse_qs

import attrs
import orjson
import trio

from uamp_proto import events as ev
from uamp_proto.adapters import realtime as rt
from uamp_proto.busy import BUSY, INVALID_POLICY, BusyError
from uamp_proto.codec import unstructure
from uamp_proto.ids import short_random_ids
from uamp_proto.payment import (
    Charge,
    PaymentPolicy,
    PaymentRequiredError,
    bounded_wait,
)
from uamp_proto.principal import Principal
from uamp_proto.topup import pay_top_up
from uamp_stores.busy import ConversationGate, Slot

from ..engines.http import HTTPError
from ..engines.websocket import ConnectionClosed, WebSocket, WebSocketRequest
from ..hosting.agents import ServedAgent
from ..hosting.calls import answer_call, call_ended
from ..hosting.host import Host, PolicyTransport
from ..hosting.middleware import reject_upgrade
from ..hosting.router import RouteMeta
from ..hosting.sessions import SessionLimits
from ..hosting.turns import ResponseRunner

__all__ = ["RealtimeTransport", "mount"]

#: Seconds the agent's ``call_ended`` may take once the socket has closed.
_CALL_END_GRACE = 5.0

#: What middleware knows of these routes: OpenAI error objects.
ROUTES = RouteMeta(transport="realtime", error_style="openai")

log = logging.getLogger("uamp_trio.realtime")


#: Longest a ``response.create`` is held for payment, by default (UAMP sessions' own).
_PAYMENT_WAIT = SessionLimits().payment_wait


@attrs.define
class _Active:
    response_id: str
    encoder: rt.ResponseEncoder
    request_bytes: bytes | str
    turn: ResponseRunner | None = None
    cancel_requested: bool = False
    charge: Charge | None = None
    #: A mid-response top-up the client has not paid yet: the amount asked
    #: and the event set once it is locked (or the response is cancelled).
    topup: tuple[str, trio.Event] | None = None
    #: Its place in the session under the busy policy (docs/busy.md).
    slot: Slot | None = None


class _RealtimeConnection:
    """One Realtime socket: reads client events, runs responses, writes events."""

    def __init__(
        self,
        ws: WebSocket,
        served: ServedAgent,
        session: rt.RealtimeSession,
        principal: Principal,
        conversations: ConversationGate | None = None,
        payment_wait: float = _PAYMENT_WAIT,
    ) -> None:
        self.ws = ws
        #: Longest a ``response.create`` is held for payment.
        self.payment_wait = payment_wait
        #: Ends the wait of the held response when it is paid or dropped.
        self._hold_expiry: trio.CancelScope | None = None
        #: The busy policy (docs/busy.md): the server's gate.
        self.conversations = conversations or ConversationGate()
        #: The place of the response held for payment.
        self.held_slot: Slot | None = None
        #: The agent, its payment policy and signer.
        self.served = served
        self.agent = served.agent
        #: Who the connection acts for (the upgrade request's principal).
        self.principal = principal
        self.session = session
        self.payment_token: str | None = None
        self.active: _Active | None = None
        #: A ``response.create`` awaiting payment, with its raw message.
        self.held: tuple[rt.CreateResponse, bytes | str] | None = None
        self._nursery: trio.Nursery | None = None

    async def send(self, event: dict[str, Any]) -> None:
        await self.ws.send(orjson.dumps(event).decode())

    async def error(self, message: str, code: str, client_event_id: str | None = None) -> None:
        await self.send(
            rt.error_event(
                self.session.ids("event"), message, code=code, client_event_id=client_event_id
            )
        )

    async def run(self) -> None:
        await self.send(self.session.created_event(unstructure(self.agent.capabilities())))
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                while True:
                    message = await self.ws.receive()
                    if self.principal.expired(time.time()):
                        await self._expired()
                        return
                    await self._receive(message)
            except ConnectionClosed:
                pass
            finally:
                nursery.cancel_scope.cancel()
                if self.held_slot is not None:
                    self.held_slot.close()  # a response held for payment never runs
                with trio.move_on_after(_CALL_END_GRACE, shield=True):
                    await self._end_call("closed", tell_client=False)

    async def _expired(self) -> None:
        """Refuse the first client event after the upgrade's token expired, and close.

        Realtime has no way to present a new token on an open socket (OpenAI's
        clients reconnect with a fresh key), so the refusal is an ``error``
        event with code ``unauthorized`` and the socket closes with 1008;
        the client reconnects with a fresh token.
        """
        await self.error(
            "The connection's token has expired; reconnect with a fresh one.", "unauthorized"
        )
        await self.ws.close(1008, "token expired")

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

    # --- calls ---------------------------------------------------------------------

    async def _place_call(self, action: rt.PlaceCall) -> None:
        """Ask the agent to take the call the first audio placed; send what the session owes."""
        offer = self.session.call_offer(action, self.principal)
        answer = await answer_call(self.agent, offer)
        for reply in self.session.call_answered(action, answer, trio.current_time()):
            await self.send(reply)

    async def _end_call(self, reason: str, *, tell_client: bool = True) -> None:
        """End the call, if any: ``voice.end`` with its duration, and the agent is told."""
        replies, ended = self.session.end_call(trio.current_time(), reason)
        if tell_client:
            for reply in replies:
                await self.send(reply)
        if ended is not None:
            await call_ended(self.agent, ended)

    # --- responses ---------------------------------------------------------------

    async def _charge_and_start(
        self, action: rt.CreateResponse, message: bytes | str, slot: Slot
    ) -> None:
        """Hold the response's price (a ledger locks it) and start it, or ask for payment."""
        response_id = short_random_ids("resp")
        try:
            charge = await self.served.open_charge(self.payment_token, response_id, self.principal)
        except PaymentRequiredError as unpaid:
            required, wait = bounded_wait(unpaid.event(), time.time(), self.payment_wait)
            self.held, self.held_slot = (action, message), slot
            assert self._nursery is not None
            self._nursery.start_soon(self._expire_hold, self.held, wait)
            await self.send(rt.payment_event(required, self.session.ids("event")))
            return
        self._start(action, message, response_id, charge, slot)

    async def _expire_hold(self, held: tuple[rt.CreateResponse, bytes | str], wait: float) -> None:
        """Drop ``held`` if it is still unpaid after ``wait`` seconds (its ``expires_at``)."""
        with trio.CancelScope() as scope:
            self._hold_expiry = scope
            await trio.sleep(wait)
            if self.held is not held:
                return
            slot, self.held, self.held_slot = self.held_slot, None, None
            if slot is not None:
                slot.close()  # the next response.create may run
            await self.error(rt.hold_expired(wait), "payment_required", held[0].client_event_id)

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
        assert self._nursery is not None
        self._nursery.start_soon(self._start_in_turn, action, message, slot)

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
        slot: Slot | None = None,
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
        self.active = _Active(
            response_id=response_id, encoder=encoder, request_bytes=message, charge=charge
        )
        if slot is not None:
            self.active.slot = slot
            slot.bind(functools.partial(self._stop, self.active))
        assert self._nursery is not None
        self._nursery.start_soon(self._respond, self.active, request, charge)

    async def _respond(self, active: _Active, request: Any, charge: Charge | None) -> None:
        encoder = active.encoder

        async def sink(event: ev.Event) -> None:
            # Inline (the agent's emit awaits this), so a top-up holds the agent itself.
            if type(event) is ev.PaymentRequired and event.is_topup:
                await self._top_up(active, event)
                return
            for out in encoder.feed(event):
                await self.send(self._signed(out, active, turn))

        turn = ResponseRunner(self.agent, request, sink, charge=charge)
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
        except ConnectionClosed:
            pass
        finally:
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
        (``can_retry``) keeps it paused. A
        ``response.cancel`` ends the wait and the response.
        """
        if active.charge is None:
            return  # nothing is held for this response: no top-up to lock
        paid = trio.Event()
        active.topup = (required.requirements.amount, paid)
        event = attrs.evolve(required, response_id=active.response_id)
        await self.send(rt.payment_event(event, self.session.ids("event")))
        await paid.wait()
        active.topup = None

    def _signed(self, out: dict[str, Any], active: _Active, turn: ResponseRunner) -> dict[str, Any]:
        """``out``, with ``signature`` when it is a completed ``response.done`` to sign."""
        signer = self.served.signer
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
        active.cancel_requested = True
        if active.turn is not None:
            active.turn.cancel()
        if active.topup is not None:
            active.topup[1].set()  # stop waiting for the top-up: the response ends

    async def _payment(self, action: rt.SubmitPayment) -> None:
        active = self.active
        if active is not None and active.topup is not None and active.charge is not None:
            await self._pay_top_up(active, active.charge, action)
            return
        self.payment_token = action.token
        unpaid = await self.served.refusal(self.payment_token)
        if unpaid is not None:
            await self.send(
                rt.payment_event(unpaid.submit_error_event(), self.session.ids("event"))
            )
            return
        remaining = await self.served.balance(self.payment_token)
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
            balance=lambda: self.served.balance(self.payment_token),
            payment_id=short_random_ids("pay"),
        )
        await self.send(rt.payment_event(answer, self.session.ids("event")))
        if locked:
            paid.set()


class RealtimeTransport(PolicyTransport):
    """The Realtime endpoint of an :class:`~uamp_trio.app.App` (see :class:`PolicyTransport`)."""

    #: Longest a ``response.create`` is held for payment (as UAMP sessions'
    #: :attr:`~uamp_trio.hosting.sessions.SessionLimits.payment_wait`).
    payment_wait: float = _PAYMENT_WAIT

    def mount(self) -> None:
        """Register ``WS .../realtime`` (and ``/v1/realtime`` at the root)."""
        self.app.agent_websocket("/realtime", self.websocket, label="Realtime", meta=ROUTES)
        self.app.router.add_websocket("/v1/realtime", self.websocket, meta=ROUTES)

    async def websocket(self, pending: WebSocketRequest) -> None:
        """Accept a Realtime connection and serve it until it closes."""
        request = pending.request
        query = parse_qs(request.query)
        models = query.get("model")
        model = models[0] if models else None
        try:
            agent = self.app.resolve_agent(request.path_params, model=model)
        except HTTPError as exc:
            await reject_upgrade(pending, ROUTES.error_style, exc)
            return
        session, subprotocol = rt.open_session(
            agent.capabilities(),
            model=model,
            openai_beta=request.headers.get("openai-beta"),
            subprotocols=list(pending.subprotocols),
            expires_at=request.principal.expires_at,
            ids=short_random_ids,
        )
        ws = await pending.accept(subprotocol=subprotocol)
        try:
            served = self.served(agent)
            gate = self.app.conversations
            connection = _RealtimeConnection(
                ws, served, session, request.principal, gate, self.payment_wait
            )
            await connection.run()
        finally:
            await ws.close()


def mount(
    app: Host, *, payment_policy: PaymentPolicy | None = None, payment_wait: float | None = None
) -> None:
    """Mount the Realtime transport on ``app`` (a :data:`~uamp_trio.app.Transport`).

    ``payment_wait``: longest a response is held for payment (default
    :attr:`RealtimeTransport.payment_wait`).
    """
    transport = RealtimeTransport(app, payment_policy=payment_policy)
    if payment_wait is not None:
        if payment_wait <= 0:
            raise ValueError("payment_wait must be positive")
        transport.payment_wait = payment_wait
    transport.mount()
