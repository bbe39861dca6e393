"""The AG-UI transport: ``POST /agents/{name}/agui`` (and ``/agui`` at the root).

The body is AG-UI's ``RunAgentInput``; the answer is an SSE stream of AG-UI
events (``data: {json}`` per event), from ``RUN_STARTED`` to ``RUN_FINISHED``
or ``RUN_ERROR``. The translation is :mod:`uamp_proto.adapters.agui`; this
module runs the turn (:func:`uamp_trio.hosting.turns.open_response`) and writes.

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
* Signing (spec 004 "Response Signing"): with the app's ``response_signer``,
  a run that finishes (not cancelled, not failed) sends, just before
  ``RUN_FINISHED``, the AG-UI custom event ``{"type": "CUSTOM", "name":
  "uamp.response_signature", "value": {"signature": JWT}}``: an RS256 JWT
  over the run's text (its ``TEXT_MESSAGE_CONTENT`` deltas joined) and the
  request body as received.
"""

from __future__ import annotations

import uuid
from typing import Any

import orjson

from uamp_proto.adapters.agui import (
    AguiError,
    RunEncoder,
    RunInput,
    closing_events,
    parse_run_input,
    turn_request,
)
from uamp_proto.busy import INVALID_POLICY, POLICY_KEY, BusyError
from uamp_proto.ids import IdSource, random_ids
from uamp_proto.payment import PaymentRequiredError
from uamp_proto.responder import Responder
from uamp_proto.sse import encode_json

from ..engines.http import SSE_HEADERS, HTTPError, Request, SendChunk, StreamingResponse
from ..hosting.busy import Slot
from ..hosting.host import Host, Transport
from ..hosting.router import RouteMeta
from ..hosting.turns import open_response

__all__ = ["AguiTransport", "mount", "transport"]

#: What middleware knows of this route: OpenAI-shaped error objects (as its own errors).
ROUTES = RouteMeta(transport="agui", error_style="openai")


def _frame(events: list[dict[str, object]]) -> bytes:
    return b"".join([encode_json(orjson.dumps(e)) for e in events])


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
        props = run.forwarded_props if isinstance(run.forwarded_props, dict) else {}
        gate = self.app.conversations
        try:
            # A run on a thread whose run is active: the busy policy (docs/busy.md).
            policy = gate.policy(props)
            key = ("agui", request.principal.key, agent.name, run.thread_id)
            # A run that resumes an interrupted one answers it: not a new turn.
            slot = gate.free() if run.resume else gate.enter(key, request.principal, policy)
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

        async def produce(send: SendChunk) -> None:
            async with slot:  # waits for the thread's earlier runs (enqueue)
                await run_turn(send)

        async def run_turn(send: SendChunk) -> None:
            await send(_frame(encoder.start(run)))
            async with open_response(agent, turn_req, charge=charge) as turn:
                slot.bind(turn.cancel)  # a later run on the thread may interrupt this one
                async for event in turn:
                    out = encoder.feed(event)
                    if out:
                        await send(_frame(out))
            outcome = turn.outcome
            assert outcome is not None
            signer = self.app.response_signer
            signature = None
            if signer is not None and outcome.status == "completed":
                signature = signer(outcome.tracker.text, request.body)
            out = closing_events(encoder, outcome, signature)
            if slot.dropped and outcome.status == "cancelled":
                # The thread's messages are the client's: a rolled-back run says so.
                out[-1]["result"] = {POLICY_KEY: "rollback"}
            await send(_frame(out))

        # The turn runs inside the producer: when the server drops the
        # response the turn has settled, or never started (then this frees
        # the lock).
        async def on_close() -> None:
            slot.close()  # a stream the server never ran gives its place up
            if charge is not None:
                await charge.settle(None, used=False)

        return StreamingResponse(producer=produce, headers=list(SSE_HEADERS), on_close=on_close)

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
