"""The OpenAI Realtime API over an ASGI WebSocket: ``WS .../realtime``, as ``uamp serve``.

The OpenAI SDK's ``client.realtime.connect(model=...)`` appends
``/realtime?model=...`` to its WebSocket base URL: a client whose
``base_url`` is ``http://host:port/agents/demo`` lands on that agent;
``/v1/realtime`` at the root picks the agent by ``model`` (or the only one).

The sans-IO :class:`~uamp_proto.adapters.realtime.RealtimeSession` answers
every client event and :class:`~uamp_proto.adapters.realtime.ResponseEncoder`
turns a turn's UAMP events into Realtime events; this module is the I/O:

* ``session.created`` goes out first, unprompted;
* ``response.create`` runs one turn (:class:`~uamp_asgi.turns.Turn`) in the
  connection's task group, so the socket keeps reading; one response at a
  time (another ``response.create`` meanwhile is the
  ``conversation_already_has_active_response`` error). Client tools end the
  response with ``function_call`` items; the client answers with
  ``function_call_output`` items and a new ``response.create``;
* ``response.cancel`` cancels the running turn (``response.done``, status
  ``cancelled``);
* payment: a ``response.create`` the session's token does not pay for is held
  and answered ``payment.required``, whose ``expires_at`` is ``Config.payment_wait``
  away (then the hold is dropped with an ``error``); ``payment.submit`` with a
  token that pays gets ``payment.accepted`` (with ``balance_remaining``) and
  starts it (no agent runs unpaid), one that does not gets ``payment.error``;
  an agent that emits a top-up ``payment.required`` mid-response waits in its
  ``emit`` until a ``payment.submit`` locks the amount on the response's
  charge (``payment.accepted``; ``payment.error`` keeps it waiting) or the
  client cancels;
* signing: with ``Config.response_signer`` a completed ``response.done``
  carries ``signature`` over the response's text and the ``response.create``
  message that started it.

* calls (docs/voice.md): the first ``input_audio_buffer.append`` outside a
  call places one to the agent (:func:`uamp_proto.voice.answer_call`, awaited
  before the next client event is read); ``voice.accept`` or the audio's
  refusal goes out as the session says. ``voice.end`` from the client, or the
  socket closing, ends the call: the agent's ``call_ended`` hook is told its
  duration (as ``uamp serve``).

Clients that send ``OpenAI-Beta: realtime=v1`` (or offer the
``openai-beta.realtime-v1`` subprotocol) get the beta event names. Busy
policies other than refusing are ``uamp serve``'s.
"""

from __future__ import annotations

import logging
import time
from typing import Any
from urllib.parse import parse_qs

import anyio
import anyio.abc
import attrs
import orjson

from uamp_proto import events as ev
from uamp_proto import voice
from uamp_proto.adapters import realtime as rt
from uamp_proto.codec import unstructure
from uamp_proto.ids import short_random_ids
from uamp_proto.payment import (
    Charge,
    PaymentRequiredError,
    balance_of,
    bounded_wait,
    pricing_of,
    refusal,
)
from uamp_proto.responder import Responder
from uamp_proto.topup import pay_top_up

from ..app import Host
from ..http import HTTPError
from ..turns import Turn
from ..websocket import Closed, WebSocket

__all__ = ["mount"]

#: Seconds the agent's ``call_ended`` may take once the socket has closed.
_CALL_END_GRACE = 5.0

log = logging.getLogger("uamp_asgi.realtime")


@attrs.define
class _Active:
    response_id: str
    encoder: rt.ResponseEncoder
    request_bytes: bytes | str
    turn: Turn | None = None
    cancel_requested: bool = False
    charge: Charge | None = None
    #: A mid-response top-up the client has not paid yet: the amount asked
    #: and the event set once it is locked (or the response is cancelled).
    topup: tuple[str, anyio.Event] | None = None


class _Connection:
    """One Realtime socket: reads client events, runs responses, writes events."""

    def __init__(
        self, host: Host, ws: WebSocket, agent: Responder, session: rt.RealtimeSession
    ) -> None:
        self.host = host
        self.ws = ws
        self.agent = agent
        self.session = session
        self.payment_token: str | None = None
        self.active: _Active | None = None
        #: A ``response.create`` awaiting payment, with its raw message.
        self.held: tuple[rt.CreateResponse, bytes | str] | None = None
        self.group: anyio.abc.TaskGroup | None = None
        #: What drops the held response at its ``expires_at``.
        self._hold_expiry: anyio.CancelScope | None = None
        self.lock = anyio.Lock()

    async def send(self, event: dict[str, Any]) -> None:
        async with self.lock:
            await self.ws.send(orjson.dumps(event).decode())

    async def error(self, message: str, code: str, client_event_id: str | None = None) -> None:
        event_id = self.session.ids("event")
        await self.send(
            rt.error_event(event_id, message, code=code, client_event_id=client_event_id)
        )

    async def run(self) -> None:
        await self.send(self.session.created_event(unstructure(self.agent.capabilities())))
        async with anyio.create_task_group() as group:
            self.group = group
            try:
                while True:
                    message = await self.ws.receive()
                    if self.ws.principal.expired(time.time()):
                        await self.error(
                            "The connection's token has expired; reconnect with a fresh one.",
                            "unauthorized",
                        )
                        await self.ws.close(1008)
                        return
                    await self._receive(message)
            except Closed:
                pass
            finally:
                group.cancel_scope.cancel()
                with anyio.move_on_after(_CALL_END_GRACE, shield=True):
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

    # --- calls ---------------------------------------------------------------------

    async def _place_call(self, action: rt.PlaceCall) -> None:
        """Ask the agent to take the call the first audio placed; send what the session owes."""
        offer = self.session.call_offer(action, self.ws.principal)
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

    async def _create(self, action: rt.CreateResponse, message: bytes | str) -> None:
        if self.active is not None or self.held is not None:
            busy = self.active.response_id if self.active else "a response awaiting payment"
            await self.error(
                f"Conversation already has an active response in progress: {busy}.",
                "conversation_already_has_active_response",
                action.client_event_id,
            )
            return
        await self._charge_and_start(action, message)

    async def _charge_and_start(self, action: rt.CreateResponse, message: bytes | str) -> bool:
        """Hold the response's price and start it (``True``), or ask for payment."""
        response_id = short_random_ids("resp")
        try:
            charge = await self.host.open_charge(
                self.agent, self.payment_token, response_id, self.ws.principal
            )
        except PaymentRequiredError as unpaid:
            wait = self.host.config.payment_wait
            required, wait = bounded_wait(unpaid.event(), time.time(), wait)
            self.held = held = (action, message)
            assert self.group is not None
            self.group.start_soon(self._expire_hold, held, wait)
            await self.send(rt.payment_event(required, self.session.ids("event")))
            return False
        self._start(action, message, response_id, charge)
        return True

    async def _expire_hold(self, held: tuple[rt.CreateResponse, bytes | str], wait: float) -> None:
        """Drop ``held`` if it is still unpaid after ``wait`` seconds (its ``expires_at``)."""
        with anyio.CancelScope() as scope:
            self._hold_expiry = scope
            await anyio.sleep(wait)
            if self.held is not held:
                return
            self.held = None  # the next response.create may run
            await self.error(rt.hold_expired(wait), "payment_required", held[0].client_event_id)

    def _start(
        self,
        action: rt.CreateResponse,
        message: bytes | str,
        response_id: str,
        charge: Charge | None,
    ) -> None:
        options = action.options
        request = self.session.turn_request(
            options,
            agent=self.agent.name,
            response_id=response_id,
            payment_token=self.payment_token,
            principal=self.ws.principal,
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
        assert self.group is not None
        self.group.start_soon(self._respond, self.active, request, charge)

    async def _respond(self, active: _Active, request: Any, charge: Charge | None) -> None:
        encoder = active.encoder

        async def sink(event: ev.Event) -> None:
            # Inline (the agent's emit awaits this), so a top-up holds the agent itself.
            if type(event) is ev.PaymentRequired and event.is_topup:
                await self._top_up(active, event)
                return
            for out in encoder.feed(event):
                await self.send(self._signed(out, active, turn))

        turn = Turn(self.agent, request, sink, charge=charge)
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
        except Closed:
            pass
        finally:
            self.active = None

    async def _top_up(self, active: _Active, required: ev.PaymentRequired) -> None:
        """Pause the response for a mid-response top-up (spec 004) until it is locked.

        As ``uamp serve``: the client gets ``payment.required``
        (``extra.action: "topup"``) and no content meanwhile (the agent waits
        in its ``emit``); each ``payment.submit`` tries to lock the amount on
        the response's charge (:func:`uamp_proto.topup.pay_top_up`);
        ``response.cancel`` ends the wait and the response.
        """
        if active.charge is None:
            return  # nothing is held for this response: no top-up to lock
        paid = anyio.Event()
        active.topup = (required.requirements.amount, paid)
        event = attrs.evolve(required, response_id=active.response_id)
        await self.send(rt.payment_event(event, self.session.ids("event")))
        await paid.wait()
        active.topup = None

    async def _pay_top_up(self, active: _Active, charge: Charge, action: rt.SubmitPayment) -> None:
        """Lock a paused response's top-up on the submitted token (or the one it holds)."""
        assert active.topup is not None
        amount, paid = active.topup
        if action.token is not None:
            self.payment_token = action.token
        policy = self.host.config.payment_policy
        answer, locked = await pay_top_up(
            charge,
            action.token,
            amount,
            balance=lambda: balance_of(policy, self.payment_token),
            payment_id=short_random_ids("pay"),
        )
        await self.send(rt.payment_event(answer, self.session.ids("event")))
        if locked:
            paid.set()

    def _signed(self, out: dict[str, Any], active: _Active, turn: Turn) -> dict[str, Any]:
        """``out``, with ``signature`` when it is a completed ``response.done`` to sign."""
        signer = self.host.config.response_signer
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
        """A token: ``payment.error`` if it cannot pay, else ``payment.accepted`` (with
        what it has left) and the held response, if any, starts on it (as ``uamp serve``).
        While a response waits for a top-up, the token pays that."""
        active = self.active
        if active is not None and active.topup is not None and active.charge is not None:
            await self._pay_top_up(active, active.charge, action)
            return
        self.payment_token = action.token
        policy = self.host.config.payment_policy
        unpaid = await refusal(policy, self.agent.name, action.token, pricing_of(self.agent))
        if unpaid is not None:  # the held response waits for a better token
            await self.send(
                rt.payment_event(unpaid.submit_error_event(), self.session.ids("event"))
            )
            return
        remaining = await balance_of(policy, action.token)
        accepted = ev.PaymentAccepted(
            payment_id=short_random_ids("pay"), balance_remaining=remaining
        )
        await self.send(rt.payment_event(accepted, self.session.ids("event")))
        held, self.held = self.held, None
        if self._hold_expiry is not None:
            self._hold_expiry.cancel()  # paid in time
        if held is not None:
            await self._charge_and_start(*held)


def mount(host: Host) -> None:
    """Serve the Realtime API at ``.../realtime`` and ``/v1/realtime``."""

    async def serve(ws: WebSocket) -> None:
        query = parse_qs(ws.scope.get("query_string", b"").decode("latin-1"))
        model = (query.get("model") or [None])[0]
        try:
            agent = host.resolve_agent(ws.path_params, model=model)
        except HTTPError:
            await ws.close(1008)
            return
        offered = [
            p.strip() for p in ws.headers.get("sec-websocket-protocol", "").split(",") if p.strip()
        ]
        session, subprotocol = rt.open_session(
            agent.capabilities(),
            model=model,
            openai_beta=ws.headers.get("openai-beta"),
            subprotocols=offered,
            expires_at=ws.principal.expires_at,
            ids=short_random_ids,
        )
        await ws.accept(subprotocol)
        try:
            await _Connection(host, ws, agent, session).run()
        finally:
            await ws.close()

    host.websocket("/realtime", serve)
    host.websocket("/v1/realtime", serve)
