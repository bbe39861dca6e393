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
(:func:`uamp_trio.hosting.turns.run_response`): the sans-IO adapter
:mod:`uamp_proto.adapters.completions` validates the body into a
``TurnRequest`` and renders the turn's events as completion JSON or chunks.
A streamed turn renders each event to its SSE bytes as the agent emits it and
queues them on the response; the server's writer sends whatever is queued
in one write (:func:`uamp_trio.engines.http.batched_writer`). Client tool calls end
the response with ``finish_reason: "tool_calls"``; the client sends their
results in its next request.
"""

from __future__ import annotations

import logging
import os
import time
from functools import partial

import attrs
import orjson

from uamp_proto.adapters.completions import (
    ChunkEncoder,
    CompletionRequest,
    CompletionsError,
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
from uamp_proto.payment import Charge, PaymentRequiredError, balance_fields
from uamp_proto.responder import Responder
from uamp_proto.signing import SIGNATURE_HEADER
from uamp_proto.types import DeltaText

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
from ..hosting.router import RouteMeta
from ..hosting.turns import run_response

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
        # One read of the OS's randomness for both ids (the same 128 bits
        # each as uuid4().hex).
        rand = os.urandom(32).hex()
        completion_id = f"chatcmpl-{rand[:32]}"
        try:
            parsed = parse_request(
                body,
                agent=agent.name,
                response_id=completion_id,
                session_id=f"sess_{rand[32:]}",
                principal=request.principal,
            )
        except CompletionsError as exc:
            return json_response(exc.body(), exc.status)
        # The agent's own tool rounds of a turn that also called the client's
        # tools, which the client sending its results back never had.
        turn = self.app.stores.tool_rounds.restore(request.principal, parsed.turn)
        if turn is not parsed.turn:
            parsed = attrs.evolve(parsed, turn=turn)
        # Payment pre-flight (spec 004): lock the price before committing to a
        # 200 or a stream; the client retries the whole request with X-PAYMENT.
        token = request.headers.get("x-payment")
        try:
            charge = await self.app.open_charge(
                agent.name, token, completion_id, principal=request.principal
            )
        except PaymentRequiredError as unpaid:
            return json_response(payment_error(unpaid.accepts(), unpaid.details()), 402)
        if token is not None:
            parsed = attrs.evolve(parsed, turn=attrs.evolve(parsed.turn, payment_token=token))
        created = int(time.time())
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
        outcome = await run_response(agent, parsed.turn, None, stamp=False, charge=charge)
        headers: list[tuple[str, str]] = []
        if outcome.balance is not None:
            headers.append((BALANCE_HEADER, orjson.dumps(balance_fields(outcome.balance)).decode()))
        if outcome.status in ("failed", "cancelled"):
            status, err = outcome_error(outcome)
            return json_response(err, status, headers=headers)
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

        outcome = await run_response(agent, parsed.turn, sink, stamp=False, charge=charge)
        signature = None
        if outcome.status not in ("failed", "cancelled"):
            self.app.stores.tool_rounds.keep(parsed.turn.principal, outcome)
            signer = self.app.response_signer
            if signer is not None:
                signature = signer(outcome.tracker.text, request_body)
        await send(stream_tail(encoder, parsed, outcome, signature))


def mount(app: Host) -> None:
    """Mount the Chat Completions transport on ``app`` (a :data:`Transport`)."""
    CompletionsTransport(app).mount()
