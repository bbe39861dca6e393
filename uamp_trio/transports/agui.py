"""The AG-UI transport: ``POST /agents/{name}/agui`` (and ``/agui`` at the root).

The body is AG-UI's ``RunAgentInput``; the answer is an SSE stream of AG-UI
events (``data: {json}`` per event), from ``RUN_STARTED`` to ``RUN_FINISHED``
or ``RUN_ERROR``. The translation is :mod:`uamp_proto.adapters.agui`; this
module runs the turn (:meth:`app.turns.open <uamp_trio.hosting.turns.TurnOptions.open>`,
on the server's turn options) and writes.

* A body that is not JSON, or not a RunAgentInput at all (no ``threadId`` /
  ``runId``), is answered ``400`` with a JSON error.
* A RunAgentInput with bad messages, tools or context is answered with
  ``RUN_STARTED`` then ``RUN_ERROR`` (code ``invalid_input``).
* Payment (spec 004): the app's payment policy is asked with the
  ``X-PAYMENT`` header (or ``forwardedProps.payment_token``); a refusal is
  ``RUN_ERROR`` with code ``payment_required`` and ``metadata``
  ``{"status_code": 402, "accepts": [...]}``.
* Client tool calls end the run with ``RUN_FINISHED`` whose outcome lists
  ``pendingToolCallIds``; the client sends the results as ``tool`` messages
  in its next run.
* A client that disconnects cancels the agent's turn.
* A human in the loop (docs/human-in-the-loop.md): when the agent asks a
  person (a tool that needs approval, a question), the run's stream ends
  with ``RUN_FINISHED`` whose outcome is ``interrupt`` (the interrupts'
  ids, reasons, prompts, answer schemas, expiries) while the agent's turn
  stays paused on the server (``app.parked``). The client's next run on the
  thread carries ``resume`` entries answering them by id: the answers go to
  ``app.interrupts`` and that run streams the rest of the paused turn. An
  interrupt may also be answered from any other transport; the next run of
  the thread then streams what the turn said meanwhile. A run that answers
  interrupts of a turn running on another transport (same thread id as the
  session id there) just answers them and finishes. A new run on a thread
  whose turn waits for answers is refused (``RUN_ERROR`` code
  ``interrupt_pending``).
* Signing (spec 004 "Response Signing"): with the app's ``response_signer``,
  a run that finishes (not cancelled, not failed) sends, just before
  ``RUN_FINISHED``, the AG-UI custom event ``{"type": "CUSTOM", "name":
  "uamp.response_signature", "value": {"signature": JWT}}``: an RS256 JWT
  over the run's text (its ``TEXT_MESSAGE_CONTENT`` deltas joined) and the
  request body as received.
"""

from __future__ import annotations

import time
import uuid
from contextlib import aclosing
from typing import Any

import attrs

from uamp_proto.adapters.agui import (
    AguiError,
    RunEncoder,
    RunInput,
    closing_events,
    encode_sse,
    parse_resume,
    parse_run_input,
    turn_request,
)
from uamp_proto.busy import INVALID_POLICY, POLICY_KEY, BusyError
from uamp_proto.ids import IdSource, random_ids
from uamp_proto.payment import PaymentRequiredError
from uamp_proto.responder import Responder
from uamp_stores.busy import Slot

from ..engines.http import SSE_HEADERS, HTTPError, Request, SendChunk, StreamingResponse
from ..hosting.host import Host, Transport
from ..hosting.interrupts import InterruptNotFound, InvalidAnswer
from ..hosting.parked import ParkedTurn, turn_key, waiting_on
from ..hosting.router import RouteMeta
from ..hosting.turns import ResponseOutcome

__all__ = ["AguiTransport", "mount", "transport"]

#: What middleware knows of this route: OpenAI-shaped error objects (as its own errors).
ROUTES = RouteMeta(transport="agui", error_style="openai")


#: UAMP events an AG-UI stream does not show as they come (RUN_FINISHED tells them).
_INTERRUPT_EVENTS = frozenset({"interrupt.request", "interrupt.resolved"})


def _frame(events: list[dict[str, Any]]) -> bytes:
    """The events as SSE, each with its ``timestamp`` (milliseconds since the epoch)."""
    return encode_sse(events, time.time())


class AguiTransport:
    """The AG-UI endpoint of an :class:`~uamp_trio.app.App`.

    Args:
        app: The app to mount on.
        ids: Id source for messages, reasoning blocks and responses.
    """

    def __init__(self, app: Host, *, ids: IdSource = random_ids) -> None:
        self.app = app
        self.ids = ids

    def mount(self) -> None:
        """Register the route on the app."""
        self.app.agent_route("POST", "/agui", self.run, label="AG-UI", meta=ROUTES)

    async def run(self, request: Request) -> StreamingResponse:
        """``POST .../agui``: one agent run."""
        agent = self.app.resolve_agent(request.path_params)
        body = await request.json()
        try:
            run = parse_run_input(body)
        except AguiError as exc:
            if not exc.started:
                raise HTTPError(400, exc.message, code=exc.code) from None
            assert exc.thread_id is not None and exc.run_id is not None
            failed = RunEncoder(exc.thread_id, exc.run_id, self.ids).error(exc.message, exc.code)
            return self._respond(failed)
        encoder = RunEncoder(run.thread_id, run.run_id, self.ids, parent_run_id=run.parent_run_id)
        parked = self.app.parked.find(turn_key(agent.name, run.thread_id, request.principal))
        if parked is not None and (parked.reading or not parked.parked):
            parked = None  # a run in progress: the busy policy decides (below)
        if run.resume or parked is not None:
            # It answers a paused run (its own turn holds the thread's place).
            return await self._resume(request, agent.name, run, encoder, parked)
        props = run.forwarded_props if isinstance(run.forwarded_props, dict) else {}
        gate = self.app.conversations
        try:
            # A run on a thread whose run is active: the busy policy (docs/busy.md).
            policy = gate.policy(props)
            key = ("agui", request.principal.key, agent.name, run.thread_id)
            slot = gate.enter(key, request.principal, policy)
        except BusyError as exc:
            status = 400 if exc.code == INVALID_POLICY else 409
            raise HTTPError(status, str(exc), code=exc.code) from None
        try:
            return await self._start(request, agent, run, encoder, props, slot)
        except BaseException:
            slot.close()
            raise

    async def _start(
        self,
        request: Request,
        agent: Responder,
        run: RunInput,
        encoder: RunEncoder,
        props: dict[str, Any],
        slot: Slot,
    ) -> StreamingResponse:
        """The run's stream, once it holds its thread's place (``slot``)."""
        token = request.headers.get("x-payment") or props.get("payment_token")
        token = token if isinstance(token, str) else None
        response_id = f"resp_{uuid.uuid4().hex}"
        try:
            # Lock the price before the run starts (settled when it ends).
            charge = await self.app.open_charge(
                agent.name, token, response_id, principal=request.principal
            )
        except PaymentRequiredError as refusal:
            events = encoder.start(run)
            events += encoder.error(
                "Payment required: retry with an X-PAYMENT header.",
                refusal.code,
                metadata={"status_code": 402, "accepts": refusal.accepts(), **refusal.details()},
            )
            slot.close()
            return self._respond(events)
        turn_req = turn_request(
            run,
            agent=agent.name,
            response_id=response_id,
            payment_token=token,
            principal=request.principal,
        )

        background = self.app.background
        if background is None:
            # No nursery outlives the request: nothing can wait for a person
            # (the host's interrupt policy answers for the absent client).
            port = self.app.interrupts.port(turn_req, supported=False)
            turn_req = attrs.evolve(turn_req, interrupts=port)

            async def produce(send: SendChunk) -> None:
                async with slot:  # waits for the thread's earlier runs (enqueue)
                    await send(_frame(encoder.start(run)))
                    async with self.app.turns.open(agent, turn_req, charge=charge) as turn:
                        slot.bind(turn.cancel)  # a later run may interrupt this one
                        async for event in turn:
                            out = encoder.feed(event)
                            if out:
                                await send(_frame(out))
                    assert turn.outcome is not None
                    await send(_frame(self._ending(encoder, turn.outcome, request.body, slot)))

            async def on_close() -> None:
                slot.close()  # a stream the server never ran gives its place up
                if charge is not None:
                    await charge.settle(None, used=False)

            return StreamingResponse(producer=produce, headers=list(SSE_HEADERS), on_close=on_close)
        port = self.app.interrupts.port(turn_req, supported=True)
        turn_req = attrs.evolve(turn_req, interrupts=port)
        started: list[ParkedTurn] = []

        async def produce_parked(send: SendChunk) -> None:
            await slot.wait()  # waits for the thread's earlier runs (enqueue)
            await send(_frame(encoder.start(run)))
            try:
                turn = self.app.parked.start(
                    background.start_soon,
                    agent,
                    turn_req,
                    key=turn_key(agent.name, run.thread_id, request.principal),
                    charge=charge,
                    port=port,
                    on_end=slot.close,  # a paused run keeps the thread's place
                )
            except RuntimeError:  # another run of the thread started meanwhile
                slot.close()
                busy = "Another run of this thread is in progress."
                await send(_frame(encoder.error(busy, "thread_busy")))
                return
            started.append(turn)
            slot.bind(turn.cancel)  # a later run on the thread may interrupt this one
            await self._relay(turn, encoder, send, request.body, slot)

        async def on_close_parked() -> None:
            if not started:
                slot.close()  # a stream the server never ran gives its place up
            if charge is not None:
                await charge.settle(None, used=False)  # a no-op once the turn settled it

        return StreamingResponse(
            producer=produce_parked, headers=list(SSE_HEADERS), on_close=on_close_parked
        )

    async def _relay(
        self,
        turn: ParkedTurn,
        encoder: RunEncoder,
        send: SendChunk,
        body: bytes,
        slot: Slot | None = None,
    ) -> None:
        """Stream a (parked) turn until it pauses for a person or ends."""
        while True:
            try:
                async with aclosing(turn.read()) as events:
                    async for event in events:
                        if event.type in _INTERRUPT_EVENTS:
                            continue  # told in RUN_FINISHED's outcome
                        out = encoder.feed(event)
                        if out:
                            await send(_frame(out))
            except BaseException:
                if not turn.paused and not turn.finished:
                    turn.cancel()  # the client left mid-run: the turn goes with it
                raise
            outcome = turn.outcome
            if outcome is not None:
                await send(_frame(self._ending(encoder, outcome, body, slot)))
                return
            interrupts = self.app.interrupts
            asks = [it for iid in turn.asked if (it := interrupts.get(turn.principal, iid))]
            if asks:
                await send(_frame(encoder.finish(interrupts=asks)))
                return
            # Paused on interrupts that ended meanwhile (expired): read on.

    def _ending(
        self,
        encoder: RunEncoder,
        outcome: ResponseOutcome,
        body: bytes,
        slot: Slot | None = None,
    ) -> list[dict[str, Any]]:
        """The run's last events for how its turn ended."""
        signer = self.app.response_signer
        signature = None
        if signer is not None and outcome.status == "completed":
            signature = signer(outcome.tracker.text, body)
        out = closing_events(encoder, outcome, signature)
        if slot is not None and slot.dropped and outcome.status == "cancelled":
            # The thread's messages are the client's: a rolled-back run says so.
            out[-1]["result"] = {POLICY_KEY: "rollback"}
        return out

    async def _resume(
        self,
        request: Request,
        agent: str,
        run: RunInput,
        encoder: RunEncoder,
        parked: ParkedTurn | None,
    ) -> StreamingResponse:
        """A run that answers interrupts (``resume``) or reads on a parked turn."""
        start = encoder.start(run)
        principal = request.principal
        if parked is not None and parked.reading:
            return self._respond(
                start + encoder.error("Another run reads this thread's turn.", "thread_busy")
            )
        waiting = await waiting_on(self.app.interrupts, principal, agent, run.thread_id)
        pending = {it.id: it for it in waiting}
        if parked is not None and not run.resume and parked.paused:
            return self._respond(
                start
                + encoder.error(
                    "The thread's run waits for answers: send them as 'resume' entries.",
                    "interrupt_pending",
                )
            )
        if parked is not None and not parked.paused:
            # Answered elsewhere meanwhile: entries for those are moot.
            kept = [e for e in run.resume if e.get("interruptId") in pending]
            run = attrs.evolve(run, resume=kept)
        try:
            answers = parse_resume(run, pending)
            for iid, answer in answers:
                await self.app.interrupts.answer(principal, iid, answer)
        except AguiError as exc:
            return self._respond(start + encoder.error(exc.message, exc.code))
        except (InterruptNotFound, InvalidAnswer) as exc:
            return self._respond(start + encoder.error(str(exc), exc.code))
        if parked is not None:
            parked.answered([iid for iid, _ in answers])
        turn = parked

        async def produce(send: SendChunk) -> None:
            await send(_frame(start))
            if turn is None:  # the run streams on another transport: answered, done
                await send(_frame(encoder.finish()))
                return
            await self._relay(turn, encoder, send, request.body)

        return StreamingResponse(producer=produce, headers=list(SSE_HEADERS))

    @staticmethod
    def _respond(events: list[dict[str, object]]) -> StreamingResponse:
        payload = _frame(events)

        async def produce(send: SendChunk) -> None:
            await send(payload)

        return StreamingResponse(producer=produce, headers=list(SSE_HEADERS))


def transport(*, ids: IdSource = random_ids) -> Transport:
    """A configured AG-UI transport to pass to :meth:`App.mount`."""

    def mount_configured(app: Host) -> None:
        AguiTransport(app, ids=ids).mount()

    return mount_configured


def mount(app: Host) -> None:
    """Mount the AG-UI transport on ``app`` (a :data:`Transport`)."""
    AguiTransport(app).mount()
