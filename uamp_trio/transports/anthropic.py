"""The Anthropic Messages API transport (the ``anthropic`` SDK with ``base_url=`` an agent).

Endpoints, for every hosted agent under ``/agents/{name}`` and at the root
(the only agent, or the one a request's ``model`` names):

* ``POST /v1/messages`` -- a ``message`` object, or with ``stream: true`` the
  named SSE events of the Messages API (``message_start`` ... ``message_stop``,
  ``ping`` while the agent is silent, ``error`` if it fails mid-stream);
* ``POST /v1/messages/count_tokens`` -- ``{"input_tokens"}``: the agent's own
  count when it has an ``async count_tokens(turn) -> int`` method, else the
  demo model's (whitespace-separated words);
* ``GET /v1/models`` and ``/v1/models/{id}`` -- Anthropic's model objects
  (``type``, ``display_name``, ``created_at``): one per agent.

Sharing a path. Spec 003's envelope binding and the OpenAI model list use
``POST /v1/messages`` and ``GET /v1/models`` too. These routes match only a
request that says it speaks Anthropic's API (:func:`speaks_anthropic`): an
``anthropic-version`` or ``x-api-key`` header, and no
``application/uamp+json`` body. The route table decides from the request
head (:class:`~uamp_trio.hosting.router.Router`), so authentication, limits
and the error style are those of the protocol the client speaks.

Credentials: ``Authorization: Bearer`` (what the SDK sends) or
``x-api-key``, through the same gate as every route. Payment: the same
pre-flight and ledger as Chat Completions; an unpaid request is answered
402 ``billing_error`` with the accepted payment options. Signing: a
non-streamed reply carries ``X-UAMP-Signature``; a streamed one carries the
signature as a ``signature`` member of ``message_stop`` (and a paid one its
balance as ``payment_balance``), where the SDK keeps unknown members.

Each request is one UAMP turn run inline in the request's task; a streamed
turn renders each event to its SSE bytes as the agent emits it and queues
them, and the server's writer sends what is queued in one write. Client
tool calls end the reply with ``tool_use`` blocks and ``stop_reason:
"tool_use"``; the client's next request carries the ``tool_result`` blocks.
``stop_sequences`` are found in the text here (the agent is stopped at the
first one, and the reply ends ``stop_reason: "stop_sequence"``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Awaitable, Callable
from functools import partial, wraps
from typing import Any

import attrs
import orjson
import trio

from uamp_proto.adapters import anthropic as wire
from uamp_proto.events import Event, ResponseDelta
from uamp_proto.payment import Charge, PaymentRequiredError, balance_fields
from uamp_proto.responder import Responder
from uamp_proto.signing import SIGNATURE_HEADER
from uamp_proto.types import DeltaText

from ..engines.http import (
    SSE_HEADERS,
    Headers,
    HTTPError,
    Request,
    Response,
    SendChunk,
    StreamingResponse,
    json_response,
)
from ..hosting.agents import unwrapped
from ..hosting.host import Host
from ..hosting.middleware import render_error
from ..hosting.router import RouteMeta
from ..hosting.turns import ResponseOutcome, ResponseRunner

__all__ = ["ROUTES", "AnthropicTransport", "mount", "speaks_anthropic"]

#: What middleware knows of these routes: Anthropic's errors, ``x-api-key`` as a token.
ROUTES = RouteMeta(transport="anthropic", error_style="anthropic", key_header="x-api-key")

#: The header of a paid non-streamed reply: its ``payment.balance`` fields as JSON.
BALANCE_HEADER = "x-uamp-payment-balance"
#: Seconds of agent silence after which a stream gets a ``ping``.
PING_INTERVAL = 10.0


def speaks_anthropic(headers: Headers) -> bool:
    """Whether a request head is an Anthropic API call (see the module docstring)."""
    return wire.speaks_anthropic(headers.get)


def _anthropic_errors(
    endpoint: Callable[[Any, Request], Awaitable[Response | StreamingResponse]],
) -> Callable[[Any, Request], Awaitable[Response | StreamingResponse]]:
    """Answer an endpoint's ``HTTPError`` (unknown agent, bad JSON) in Anthropic's shape."""

    @wraps(endpoint)
    async def answer(self: Any, request: Request) -> Response | StreamingResponse:
        try:
            return await endpoint(self, request)
        except HTTPError as exc:
            return render_error("anthropic", exc)

    return answer


@attrs.define
class _Turn:
    """One request's turn: the runner, the stop-sequence scanner, what the client saw."""

    runner: ResponseRunner | None = None
    scanner: wire.StopScanner | None = None
    #: Text shown to the client (cut at a stop sequence).
    text: list[str] = attrs.field(factory=list)
    #: Frames queued since the watchdog last looked (it pings when none were).
    sent: int = 0

    def scan(self, text: str) -> str:
        """``text`` as far as the client may see it; stops the agent at a stop sequence."""
        scanner = self.scanner
        if scanner is None:
            return text
        shown = scanner.feed(text)
        if scanner.matched is not None and self.runner is not None:
            self.runner.cancel()
        return shown


class AnthropicTransport:
    """The Messages API endpoints of a host.

    Args:
        app: The host.
        ping_interval: Seconds of silence after which a stream gets a
            ``ping`` (``math.inf``: never).
    """

    def __init__(self, app: Host, *, ping_interval: float = PING_INTERVAL) -> None:
        self.app = app
        self.ping_interval = ping_interval

    def mount(self) -> None:
        """Register the routes."""
        app, when = self.app, speaks_anthropic
        app.agent_route(
            "POST",
            "/v1/messages",
            self.messages,
            label="Anthropic Messages",
            meta=ROUTES,
            when=when,
        )
        app.agent_route("POST", "/v1/messages/count_tokens", self.count_tokens, meta=ROUTES)
        app.agent_route("GET", "/v1/models", self.models, meta=ROUTES, when=when)
        app.agent_route("GET", "/v1/models/{model_id}", self.model, meta=ROUTES, when=when)

    # --- models and token counts -------------------------------------------------

    @_anthropic_errors
    async def models(self, request: Request) -> Response:
        """``GET .../v1/models``: Anthropic's model list, one model per agent."""
        if "agent" in request.path_params:
            names = [self.app.resolve_agent(request.path_params).name]
        else:
            names = list(self.app.agents)
        data = [wire.model_info(n) for n in names]
        return json_response(
            {
                "data": data,
                "has_more": False,
                "first_id": names[0] if names else None,
                "last_id": names[-1] if names else None,
            }
        )

    @_anthropic_errors
    async def model(self, request: Request) -> Response:
        """``GET .../v1/models/{id}``: the agent ``id`` names."""
        wanted = request.path_params["model_id"]
        if "agent" in request.path_params:
            found = self.app.resolve_agent(request.path_params).name == wanted
        else:
            found = wanted in self.app.agents
        if not found:
            raise HTTPError(404, f"model: {wanted}", code="not_found")
        return json_response(wire.model_info(wanted))

    @_anthropic_errors
    async def count_tokens(self, request: Request) -> Response:
        """``POST .../v1/messages/count_tokens``: the input's token count."""
        body = await request.json()
        agent = self._agent(request, body)
        try:
            parsed = wire.parse_request(
                body, agent=agent.name, response_id="count", session_id="count", counting=True
            )
        except wire.AnthropicError as exc:
            return json_response(exc.body(), exc.status)
        counter = getattr(unwrapped(agent), "count_tokens", None)
        if callable(counter):
            # An agent that knows its model's tokenizer counts for itself.
            count = await counter(parsed.turn)
        else:
            count = wire.word_count(parsed.turn)
        return json_response({"input_tokens": count})

    def _agent(self, request: Request, body: object) -> Responder:
        model = body.get("model") if isinstance(body, dict) else None
        return self.app.resolve_agent(
            request.path_params, model=model if isinstance(model, str) else None
        )

    # --- messages ---------------------------------------------------------------------

    @_anthropic_errors
    async def messages(self, request: Request) -> Response | StreamingResponse:
        """``POST .../v1/messages``."""
        body = await request.json()
        agent = self._agent(request, body)
        rand = os.urandom(24).hex()
        message_id = f"msg_{rand[:24]}"
        try:
            parsed = wire.parse_request(
                body,
                agent=agent.name,
                response_id=message_id,
                session_id=f"sess_{rand[24:]}",
                principal=request.principal,
            )
        except wire.AnthropicError as exc:
            return json_response(exc.body(), exc.status)
        # The agent's own tool rounds of a turn that also called the client's
        # tools, which the client sending its results back never had.
        turn = self.app.stores.tool_rounds.restore(request.principal, parsed.turn)
        if turn is not parsed.turn:
            parsed = attrs.evolve(parsed, turn=turn)
        token = request.headers.get("x-payment")
        try:
            charge = await self.app.open_charge(
                agent.name, token, message_id, principal=request.principal
            )
        except PaymentRequiredError as unpaid:
            error = wire.error_body(str(unpaid) or "Payment required.", "billing_error")
            error["error"].update({"accepts": unpaid.accepts(), **unpaid.details()})
            return json_response(error, 402)
        if token is not None:
            parsed = attrs.evolve(parsed, turn=attrs.evolve(parsed.turn, payment_token=token))
        if parsed.stream:

            async def produce(send: SendChunk) -> None:
                await self._stream(agent, parsed, message_id, send, request.body, charge)

            return StreamingResponse(
                producer=produce,
                headers=list(SSE_HEADERS),
                on_close=None if charge is None else partial(charge.settle, None, used=False),
            )
        return await self._complete(agent, parsed, message_id, request.body, charge)

    async def _run(
        self,
        agent: Responder,
        parsed: wire.MessagesRequest,
        state: _Turn,
        sink: Callable[[Event], Any] | None,
        charge: Charge | None,
    ) -> ResponseOutcome:
        runner = self.app.turns.runner(
            agent,
            parsed.turn,
            sink,
            stamp=False,
            cancellable=state.scanner is not None,
            charge=charge,
        )
        state.runner = runner
        return await runner.run()

    async def _complete(
        self,
        agent: Responder,
        parsed: wire.MessagesRequest,
        message_id: str,
        request_body: bytes,
        charge: Charge | None,
    ) -> Response:
        state = _Turn(
            scanner=wire.StopScanner(parsed.stop_sequences) if parsed.stop_sequences else None
        )
        sink = None
        if state.scanner is not None:

            async def sink(event: Event) -> None:
                if type(event) is ResponseDelta and type(event.delta) is DeltaText:
                    state.text.append(state.scan(event.delta.text))

        outcome = await self._run(agent, parsed, state, sink, charge)
        headers: list[tuple[str, str]] = []
        if outcome.balance is not None:
            headers.append((BALANCE_HEADER, orjson.dumps(balance_fields(outcome.balance)).decode()))
        matched = state.scanner.matched if state.scanner is not None else None
        if outcome.status == "failed" or (outcome.status == "cancelled" and matched is None):
            status, kind, message = wire.failure(outcome)
            return json_response(wire.error_body(message, kind), status, headers=headers)
        tracker = outcome.tracker
        if state.scanner is not None:
            text = "".join(state.text) + state.scanner.flush()
            matched = state.scanner.matched  # the flush may find it (StopScanner.flush)
        else:
            text = tracker.text
        calls = [] if matched is not None else outcome.pending_tool_calls
        self.app.stores.tool_rounds.keep(parsed.turn.principal, outcome)
        signer = self.app.response_signer
        if signer is not None:
            headers.append((SIGNATURE_HEADER, signer(text, request_body)))
        usage = tracker.usage
        reply = wire.message_object(
            message_id=message_id,
            model=parsed.model,
            text=text,
            tool_calls=calls,
            stop_reason=wire.stop_reason_for(calls, usage, parsed.max_tokens, matched),
            stop_sequence=matched,
            usage=usage,
            thinking=(tracker.thinking or None) if parsed.thinking else None,
        )
        return json_response(reply, headers=headers)

    async def _stream(
        self,
        agent: Responder,
        parsed: wire.MessagesRequest,
        message_id: str,
        send: SendChunk,
        request_body: bytes,
        charge: Charge | None,
    ) -> None:
        encoder = wire.StreamEncoder(
            message_id=message_id, model=parsed.model, thinking=parsed.thinking
        )
        state = _Turn(
            scanner=wire.StopScanner(parsed.stop_sequences) if parsed.stop_sequences else None
        )
        await send(encoder.start())
        render, text_frames = encoder.feed, encoder.text
        scanned = state.scanner is not None
        signed = self.app.response_signer is not None
        shown = state.text

        async def sink(event: Event) -> None:
            if type(event) is ResponseDelta:
                delta = event.delta
                if type(delta) is DeltaText:
                    text = state.scan(delta.text) if scanned else delta.text
                    if text:
                        if signed or scanned:
                            shown.append(text)
                        state.sent += 1
                        await send(text_frames(text))
                    return
            frame = render(event)
            if frame:
                state.sent += 1
                await send(frame)

        if math.isinf(self.ping_interval):
            outcome = await self._run(agent, parsed, state, sink, charge)
        else:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._ping, state, send)
                outcome = await self._run(agent, parsed, state, sink, charge)
                nursery.cancel_scope.cancel()
        await send(self._tail(parsed, encoder, state, outcome, request_body))

    async def _ping(self, state: _Turn, send: SendChunk) -> None:
        """Send ``ping`` after every ``ping_interval`` in which nothing else was sent."""
        seen = state.sent
        while True:
            await trio.sleep(self.ping_interval)
            if state.sent == seen:
                await send(wire.PING)
            seen = state.sent

    def _tail(
        self,
        parsed: wire.MessagesRequest,
        encoder: wire.StreamEncoder,
        state: _Turn,
        outcome: ResponseOutcome,
        request_body: bytes,
    ) -> bytes:
        """The stream's last events: the stop (or the error), with signature and balance."""
        matched = state.scanner.matched if state.scanner is not None else None
        extra: dict[str, Any] = {}
        if outcome.balance is not None:
            extra["payment_balance"] = balance_fields(outcome.balance)
        if outcome.status == "failed" or (outcome.status == "cancelled" and matched is None):
            _, kind, message = wire.failure(outcome)
            return wire.error_event(message, kind)
        tail = b""
        if state.scanner is not None:
            rest = state.scanner.flush()
            matched = state.scanner.matched  # the flush may find it (StopScanner.flush)
            if rest:
                state.text.append(rest)
                tail = encoder.text(rest)
        calls = [] if matched is not None else outcome.pending_tool_calls
        self.app.stores.tool_rounds.keep(parsed.turn.principal, outcome)
        signer = self.app.response_signer
        if signer is not None:
            extra["signature"] = signer("".join(state.text), request_body)
        usage = outcome.tracker.usage
        reason = wire.stop_reason_for(calls, usage, parsed.max_tokens, matched)
        return tail + encoder.finish(reason, usage, matched, extra)


def mount(app: Host) -> None:
    """Mount the Anthropic Messages transport on ``app`` (a :data:`Transport`)."""
    AnthropicTransport(app).mount()
