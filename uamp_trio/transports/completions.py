"""The OpenAI Chat Completions transport (UAMP section 13.3, spec 004).

Endpoints, for every hosted agent (and at the root for a single agent, or
for the agent a root request's ``model`` names):

* ``POST /agents/{name}/chat/completions`` and ``/agents/{name}/v1/chat/completions``
  -- JSON, or SSE (``data: {chunk}`` ... ``data: [DONE]``) with ``stream: true``;
* ``GET /agents/{name}/capabilities`` -- the agent's capabilities (section 9);
* ``GET /agents/{name}/models`` and ``/agents/{name}/v1/models`` -- OpenAI's
  model list, one model per agent (at the root: every hosted agent), so an
  OpenAI client works with either the agent's URL or its ``/v1`` as base URL;
* ``GET /agents/{name}/models/{id}`` (and under ``/v1``) -- one model: the
  agent itself (at the root: the hosted agent named ``id``); any other id is
  a 404 ``model_not_found``;

(The public keys of response signatures, ``/.well-known/jwks.json``, are the
server's route, mounted by :mod:`uamp_trio.app` whatever the transports.)

Response signing (spec 004, "Response Signing"): with ``App.response_signer``
set, a successful non-streamed completion carries an RS256 JWT over the
response text and the request body in the ``X-UAMP-Signature`` header, and a
successful stream ends ``data: [DONE]`` followed by ``event:
response_signature`` / ``data: {"signature": ...}``. The signed response
text is the assistant message content (all text deltas joined; empty for a
tool-calls-only answer); the signed request is the HTTP body as received.

Payment balance: a paid completion carries the token's ``payment.balance``
fields (``balance``, ``currency``, ``low_balance_warning`` ...) as JSON in
the ``X-UAMP-Payment-Balance`` header; a paid stream ends, after ``[DONE]``
(and the signature), with ``event: payment.balance``. Both sit where OpenAI
clients do not look (clients stop reading at ``[DONE]``), as the signature does.

Each request is one UAMP turn, run inline in the request's task
(:meth:`app.turns.run <uamp_trio.hosting.turns.TurnOptions.run>`, on the
server's turn options): the sans-IO adapter
:mod:`uamp_proto.adapters.completions` validates the body into a
``TurnRequest`` and renders the turn's events as completion JSON or chunks.
A streamed turn renders each event to its SSE bytes as the agent emits it and
queues them on the response; the server's writer sends whatever is queued
in one write (:func:`uamp_trio.engines.http.batched_writer`). Client tool calls end
the response with ``finish_reason: "tool_calls"``; the client sends their
results in its next request.

A human in the loop (docs/human-in-the-loop.md): Chat Completions has no
way to ask a person, so uamp offers an opt-in client function tool,
``uamp_approve`` (:mod:`uamp_proto.adapters.approve_tool`). A request that
declares it runs its turn parked (``app.parked``): when the agent asks, the
completion ends with ``finish_reason: "tool_calls"`` and a call of
``uamp_approve`` whose id is the interrupt id, while the turn waits. The
client's next request carries that call's tool result (``{"approved":
true}``, ``"no"``, a question's value): it answers the interrupt and its
completion is the rest of the same turn. A request without the tool gets the
host's interrupt policy (deny: the model is told the call was refused).
"""

from __future__ import annotations

import logging
import time
from contextlib import aclosing
from functools import partial
from typing import Any

import attrs
import orjson

from uamp_proto import events as ev
from uamp_proto.adapters import approve_tool
from uamp_proto.adapters._human import AnswerError
from uamp_proto.adapters.completions import (
    SSE_DONE,
    ChunkEncoder,
    CompletionRequest,
    CompletionsError,
    completion_response,
    finish_reason_for,
    model_object,
    outcome_error,
    outcome_reply,
    parse_request,
    payment_error,
    sse_data,
    stream_tail,
)
from uamp_proto.codec import unstructure
from uamp_proto.events import Event, ResponseDelta
from uamp_proto.ids import random_hex
from uamp_proto.outcome import ResponseOutcome
from uamp_proto.payment import Charge, PaymentRequiredError, balance_fields
from uamp_proto.responder import Responder
from uamp_proto.signing import SIGNATURE_HEADER
from uamp_proto.types import DeltaText, Message

from ..engines.http import (
    SSE_HEADERS,
    HTTPError,
    Request,
    Response,
    SendChunk,
    StreamingResponse,
    json_response,
)
from ..hosting.host import Host
from ..hosting.interrupts import InterruptNotFound, InvalidAnswer
from ..hosting.parked import ParkedTurn, turn_key
from ..hosting.router import RouteMeta

__all__ = ["CompletionsTransport", "mount"]

#: What middleware knows of these routes: OpenAI error objects.
ROUTES = RouteMeta(transport="completions", error_style="openai")

log = logging.getLogger("uamp_trio.completions")

#: The header of a paid non-streamed completion: its ``payment.balance`` fields as JSON.
BALANCE_HEADER = "x-uamp-payment-balance"


class CompletionsTransport:
    """The Chat Completions endpoints of an :class:`~uamp_trio.app.App`."""

    def __init__(self, app: Host) -> None:
        self.app = app

    def mount(self) -> None:
        """Register the routes on the app."""
        app = self.app
        app.agent_route(
            "POST",
            "/chat/completions",
            self.chat_completions,
            label="Chat Completions",
            meta=ROUTES,
        )
        app.agent_route("POST", "/v1/chat/completions", self.chat_completions, meta=ROUTES)
        app.agent_route(
            "GET", "/capabilities", self.capabilities, label="Capabilities", meta=ROUTES
        )
        app.agent_route("GET", "/models", self.models, meta=ROUTES)
        app.agent_route("GET", "/v1/models", self.models, label="Models", meta=ROUTES)
        app.agent_route("GET", "/models/{model_id}", self.model, meta=ROUTES)
        app.agent_route("GET", "/v1/models/{model_id}", self.model, meta=ROUTES)

    # --- endpoints -------------------------------------------------------------

    async def capabilities(self, request: Request) -> Response:
        """``GET .../capabilities``: the agent's UAMP capabilities."""
        agent = self.app.resolve_agent(request.path_params)
        return json_response(unstructure(agent.capabilities()))

    async def models(self, request: Request) -> Response:
        """``GET .../models``: one OpenAI model object per agent."""
        if "agent" in request.path_params:
            agents = [self.app.resolve_agent(request.path_params)]
        else:
            agents = list(self.app.agents.values())
        return json_response({"object": "list", "data": [model_object(a.name) for a in agents]})

    async def model(self, request: Request) -> Response:
        """``GET .../models/{id}``: the agent ``id`` names, as an OpenAI model object."""
        wanted = request.path_params["model_id"]
        if "agent" in request.path_params:
            found = self.app.resolve_agent(request.path_params).name == wanted
        else:
            found = wanted in self.app.agents
        if not found:
            raise HTTPError(
                404,
                f"The model {wanted!r} does not exist here.",
                code="model_not_found",
                param="model",
            )
        return json_response(model_object(wanted))

    async def chat_completions(self, request: Request) -> Response | StreamingResponse:
        """``POST .../chat/completions``."""
        body = await request.json()
        model = body.get("model") if isinstance(body, dict) else None
        agent = self.app.resolve_agent(
            request.path_params, model=model if isinstance(model, str) else None
        )
        # 128 random bits each, as uuid4().hex (drawn from the OS 64 at a time).
        completion_id = f"chatcmpl-{random_hex()}"
        try:
            parsed = parse_request(
                body,
                agent=agent.name,
                response_id=completion_id,
                session_id=f"sess_{random_hex()}",
                principal=request.principal,
            )
        except CompletionsError as exc:
            return json_response(exc.body(), exc.status)
        if self.app.background is not None and _tool_results(parsed.turn.messages):
            answered = await self._answers(parsed, request)
            if answered is not None:
                now = int(time.time())
                return await self._go_on(agent, parsed, completion_id, now, answered)
        # The agent's own tool rounds of a turn that also called the client's
        # tools, which the client sending its results back never had.
        turn = self.app.stores.tool_rounds.restore(request.principal, parsed.turn)
        if turn is not parsed.turn:
            parsed = attrs.evolve(parsed, turn=turn)
        # Payment pre-flight (spec 004): lock the price before committing to a
        # 200 or a stream; the client retries the whole request with X-PAYMENT.
        token = request.headers.get("x-payment")
        charge = None  # free: open_charge's answer without a policy, without its coroutine
        if self.app.payment_policy is not None:
            try:
                charge = await self.app.open_charge(
                    agent.name, token, completion_id, principal=request.principal
                )
            except PaymentRequiredError as unpaid:
                return json_response(payment_error(unpaid.accepts(), unpaid.details()), 402)
        if token is not None:
            parsed = attrs.evolve(parsed, turn=attrs.evolve(parsed.turn, payment_token=token))
        created = int(time.time())
        background = self.app.background
        if (
            background is not None
            and parsed.turn.tools
            and approve_tool.declares(parsed.turn.tools)
        ):
            tools = [t for t in parsed.turn.tools if t.function.name != approve_tool.TOOL_NAME]
            turn_req = attrs.evolve(parsed.turn, tools=tools)
            port = self.app.interrupts.port(turn_req, supported=True)
            turn_req = attrs.evolve(turn_req, interrupts=port)
            parked = self.app.parked.start(
                background.start_soon,
                agent,
                turn_req,
                key=turn_key(agent.name, turn_req.session_id, request.principal),
                charge=charge,
                port=port,
            )
            return await self._go_on(agent, parsed, completion_id, created, parked)
        if parsed.stream:

            async def produce(send: SendChunk) -> None:
                await self._stream(
                    agent, parsed, completion_id, created, send, request.body, charge
                )

            # The lock is released when the server drops the response, also
            # when the body never starts (the client left first); a no-op
            # after the turn settled it.
            return StreamingResponse(
                producer=produce,
                headers=list(SSE_HEADERS),
                on_close=None if charge is None else partial(charge.settle, None, used=False),
            )
        return await self._complete(agent, parsed, completion_id, created, request.body, charge)

    # --- one turn --------------------------------------------------------------

    async def _complete(
        self,
        agent: Responder,
        parsed: CompletionRequest,
        completion_id: str,
        created: int,
        request_body: bytes,
        charge: Charge | None,
    ) -> Response:
        # The tracker accumulates the reply; the events themselves go nowhere
        # (no sink) and are not stamped with ids.
        outcome = await self.app.turns.run(agent, parsed.turn, None, stamp=False, charge=charge)
        headers: list[tuple[str, str]] = []
        if outcome.balance is not None:
            headers.append((BALANCE_HEADER, orjson.dumps(balance_fields(outcome.balance)).decode()))
        if outcome.status in ("failed", "cancelled"):
            status, err = outcome_error(outcome)
            return json_response(err, status, headers=headers)
        if outcome.status == "requires_action":  # (a completed turn has no client calls)
            self.app.stores.tool_rounds.keep(parsed.turn.principal, outcome)
        signer = self.app.response_signer
        if signer is not None:
            headers.append((SIGNATURE_HEADER, signer(outcome.tracker.text, request_body)))
        reply = outcome_reply(outcome, parsed, completion_id=completion_id, created=created)
        return json_response(reply, headers=headers)

    async def _stream(
        self,
        agent: Responder,
        parsed: CompletionRequest,
        completion_id: str,
        created: int,
        send: SendChunk,
        request_body: bytes,
        charge: Charge | None,
    ) -> None:
        encoder = ChunkEncoder(
            completion_id=completion_id,
            created=created,
            model=parsed.model or agent.name,
            include_usage=parsed.include_usage,
        )
        await send(sse_data(encoder.start()))
        # The agent runs in this task and each event is rendered and queued
        # for the socket as it is emitted: no channel, no task switch.
        render = encoder.sse
        template = encoder.text_frame
        head, tail = template if template is not None else (b"", b"")
        join, dumps = b"".join, orjson.dumps

        async def sink(event: Event) -> None:
            if type(event) is ResponseDelta and template is not None:
                # A text delta, the usual event: its frame from the template.
                delta = event.delta
                if type(delta) is DeltaText:
                    if delta.text:
                        await send(join((head, dumps(delta.text), tail)))
                    return
            frame = render(event)
            if frame:
                await send(frame)

        outcome = await self.app.turns.run(agent, parsed.turn, sink, stamp=False, charge=charge)
        signature = None
        if outcome.status not in ("failed", "cancelled"):
            self.app.stores.tool_rounds.keep(parsed.turn.principal, outcome)
            signer = self.app.response_signer
            if signer is not None:
                signature = signer(outcome.tracker.text, request_body)
        await send(stream_tail(encoder, parsed, outcome, signature))

    # --- a human in the loop: the uamp_approve tool ------------------------------

    async def _answers(self, parsed: CompletionRequest, request: Request) -> ParkedTurn | None:
        """Answer the interrupts a request's ``uamp_approve`` results name; their parked turn.

        ``None`` when it answers none (an ordinary request).
        """
        interrupts, principal = self.app.interrupts, request.principal
        pending = {}
        for message in parsed.turn.messages:
            if message.role == "tool" and message.tool_call_id:
                found = interrupts.get(principal, message.tool_call_id)
                if found is not None:
                    pending[found.id] = found
        if not pending:
            return None
        try:
            answers = approve_tool.parse_results(parsed.turn.messages, pending)
            for iid, answer in answers:
                await interrupts.answer(principal, iid, answer)
        except AnswerError as exc:
            raise HTTPError(400, exc.args[0], code="invalid_answer") from None
        except (InterruptNotFound, InvalidAnswer) as exc:
            raise HTTPError(400, str(exc), code=exc.code) from None
        first = next(iter(pending.values()))
        assert first.agent is not None and first.session_id is not None
        turn = self.app.parked.find(turn_key(first.agent, first.session_id, principal))
        if turn is None or turn.reading:
            raise HTTPError(
                409,
                "Answered; the run that asked is not one this request can follow "
                "(it runs on another transport, or another request follows it).",
                code="interrupt_elsewhere",
            )
        turn.answered([iid for iid, _ in answers])
        return turn

    async def _go_on(
        self,
        agent: Responder,
        parsed: CompletionRequest,
        completion_id: str,
        created: int,
        turn: ParkedTurn,
    ) -> Response | StreamingResponse:
        """A completion of a parked turn: what it says until it pauses or ends.

        A pause ends it with ``uamp_approve`` calls (``finish_reason: "tool_calls"``).
        """
        encoder = ChunkEncoder(
            completion_id=completion_id,
            created=created,
            model=parsed.model or agent.name,
            include_usage=parsed.include_usage,
        )

        async def events(send: Any) -> tuple[str, list[Any], ResponseOutcome | None]:
            text: list[str] = []
            while True:
                async with aclosing(turn.read()) as read:
                    async for event in read:
                        if isinstance(event, ev.InterruptRequest | ev.InterruptResolved):
                            continue
                        delta = getattr(event, "delta", None)
                        if isinstance(delta, DeltaText):
                            text.append(delta.text)
                        if send is not None:
                            frame = encoder.sse(event)
                            if frame:
                                await send(frame)
                if turn.outcome is not None:
                    return "".join(text), [], turn.outcome
                asks = [self.app.interrupts.get(turn.principal, iid) for iid in turn.asked]
                calls = [approve_tool.approve_call(a) for a in asks if a is not None]
                if calls:
                    return "".join(text), calls, None

        if parsed.stream:

            async def produce(send: SendChunk) -> None:
                await send(sse_data(encoder.start()))
                try:
                    _, calls, outcome = await events(send)
                except BaseException:
                    if not turn.paused and not turn.finished:
                        turn.cancel()
                    raise
                if outcome is None:
                    for call in calls:
                        await send(encoder.sse(_call_event(call)))
                    tail = [sse_data(c) for c in encoder.finish("tool_calls", None)]
                    await send(b"".join(tail) + SSE_DONE)
                else:
                    await send(stream_tail(encoder, parsed, outcome))

            return StreamingResponse(producer=produce, headers=list(SSE_HEADERS))
        text, calls, outcome = await events(None)
        if outcome is not None and outcome.status in ("failed", "cancelled"):
            status, err = outcome_error(outcome)
            return json_response(err, status)
        client_calls = outcome.pending_tool_calls if outcome is not None else calls
        usage = outcome.tracker.usage if outcome is not None else None
        return json_response(
            completion_response(
                completion_id=completion_id,
                created=created,
                model=parsed.model or agent.name,
                text=text,
                tool_calls=client_calls,
                finish_reason=finish_reason_for(client_calls, usage, parsed.max_tokens),
                usage=usage,
            )
        )


def _tool_results(messages: list[Message]) -> bool:
    """Whether the conversation carries a tool result (one may answer an interrupt)."""
    for message in messages:  # noqa: SIM110 (a loop: no generator per request)
        if message.role == "tool":
            return True
    return False


def _call_event(call: Any) -> ev.ToolCall:
    """The ``tool.call`` event a ``uamp_approve`` call is shown as."""
    return ev.ToolCall(call_id=call.id, name=call.name, arguments=call.arguments)


def mount(app: Host) -> None:
    """Mount the Chat Completions transport on ``app`` (a :data:`Transport`)."""
    CompletionsTransport(app).mount()
