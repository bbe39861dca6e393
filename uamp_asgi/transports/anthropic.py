"""The Anthropic Messages API on ASGI: ``POST .../v1/messages`` (plain and streamed).

As ``uamp serve``'s (:mod:`uamp_trio.transports.anthropic`), with the
translation of :mod:`uamp_proto.adapters.anthropic`: ``POST .../v1/messages``,
``.../v1/messages/count_tokens``, and ``GET .../v1/models`` for a request that
speaks Anthropic (``anthropic-version`` or ``x-api-key``; the OpenAI model
list answers the others). Stop sequences cut the text and stop the agent;
client tool calls end with ``stop_reason: "tool_use"``. A stream on which the
agent has said nothing for ``Config.anthropic_ping_interval`` seconds gets a
``ping`` event, so proxies and the SDK's read timeout keep it open.
"""

from __future__ import annotations

import math
import os
from typing import Any

import anyio
import attrs
import orjson

from uamp_proto.adapters import anthropic as wire
from uamp_proto.events import Event, ResponseDelta
from uamp_proto.outcome import ResponseOutcome
from uamp_proto.payment import PaymentRequiredError, balance_fields
from uamp_proto.responder import Responder
from uamp_proto.signing import SIGNATURE_HEADER
from uamp_proto.tool_rounds import ToolRoundStore
from uamp_proto.types import DeltaText

from ..app import Host
from ..http import HTTPError, JsonReply, Reply, Request, StreamReply, Write
from ..turns import Turn

__all__ = ["mount"]

BALANCE_HEADER = "x-uamp-payment-balance"


def _speaks(headers: dict[str, str]) -> bool:
    return wire.speaks_anthropic(headers.get)


@attrs.define
class _Cut:
    """A turn's stop-sequence scanner and what the client saw of its text."""

    scanner: wire.StopScanner | None
    text: list[str] = attrs.field(factory=list)
    turn: Turn | None = None

    def scan(self, text: str) -> str:
        if self.scanner is None:
            return text
        shown = self.scanner.feed(text)
        if self.scanner.matched is not None and self.turn is not None:
            self.turn.cancel()
        return shown

    @property
    def matched(self) -> str | None:
        return self.scanner.matched if self.scanner is not None else None

    def rest(self) -> str:
        return self.scanner.flush() if self.scanner is not None else ""


class _Anthropic:
    def __init__(self, host: Host) -> None:
        self.host = host
        self.rounds = ToolRoundStore()

    def _agent(self, request: Request, body: Any) -> Responder:
        model = body.get("model") if isinstance(body, dict) else None
        return self.host.resolve_agent(
            request.path_params, model=model if isinstance(model, str) else None
        )

    async def models(self, request: Request) -> Reply:
        if "agent" in request.path_params:
            names = [self.host.resolve_agent(request.path_params).name]
        else:
            names = list(self.host.agents)
        first, last = (names[0], names[-1]) if names else (None, None)
        data = [wire.model_info(n) for n in names]
        return JsonReply({"data": data, "has_more": False, "first_id": first, "last_id": last})

    async def count_tokens(self, request: Request) -> Reply:
        body = request.json()
        agent = self._agent(request, body)
        try:
            parsed = wire.parse_request(
                body, agent=agent.name, response_id="count", session_id="count", counting=True
            )
        except wire.AnthropicError as exc:
            return JsonReply(exc.body(), exc.status)
        return JsonReply({"input_tokens": wire.word_count(parsed.turn)})

    async def messages(self, request: Request) -> Reply:
        body = request.json()
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
            return JsonReply(exc.body(), exc.status)
        turn = self.rounds.restore(request.principal, parsed.turn)
        token = request.headers.get("x-payment")
        if token is not None:
            turn = attrs.evolve(turn, payment_token=token)
        parsed = attrs.evolve(parsed, turn=turn)
        try:
            charge = await self.host.open_charge(agent, token, message_id, request.principal)
        except PaymentRequiredError as unpaid:
            error = wire.error_body(str(unpaid) or "Payment required.", "billing_error")
            error["error"].update({"accepts": unpaid.accepts(), **unpaid.details()})
            return JsonReply(error, 402)
        cut = _Cut(wire.StopScanner(parsed.stop_sequences) if parsed.stop_sequences else None)
        signer = self.host.config.response_signer

        def failed(outcome: ResponseOutcome) -> bool:
            return outcome.status == "failed" or (
                outcome.status == "cancelled" and cut.matched is None
            )

        if not parsed.stream:

            async def collect(event: Event) -> None:
                if type(event) is ResponseDelta and type(event.delta) is DeltaText:
                    cut.text.append(cut.scan(event.delta.text))

            turn_ = cut.turn = self.host.turns.turn(agent, parsed.turn, collect, charge=charge)
            outcome = await turn_.run()
            headers: list[tuple[str, str]] = []
            if outcome.balance is not None:
                fields = orjson.dumps(balance_fields(outcome.balance)).decode()
                headers.append((BALANCE_HEADER, fields))
            if failed(outcome):
                status, kind, message = wire.failure(outcome)
                return JsonReply(wire.error_body(message, kind), status, headers)
            text = "".join(cut.text) + cut.rest()
            calls = [] if cut.matched is not None else outcome.pending_tool_calls
            self.rounds.keep(parsed.turn.principal, outcome)
            if signer is not None:
                headers.append((SIGNATURE_HEADER, signer(text, request.body)))
            usage = outcome.tracker.usage
            reply = wire.message_object(
                message_id=message_id,
                model=parsed.model,
                text=text,
                tool_calls=calls,
                stop_reason=wire.stop_reason_for(calls, usage, parsed.max_tokens, cut.matched),
                stop_sequence=cut.matched,
                usage=usage,
                thinking=(outcome.tracker.thinking or None) if parsed.thinking else None,
            )
            return JsonReply(reply, headers=headers)

        encoder = wire.StreamEncoder(
            message_id=message_id, model=parsed.model, thinking=parsed.thinking
        )

        async def produce(write: Write) -> None:
            interval = self.host.config.anthropic_ping_interval
            if math.isinf(interval):
                await answer(write)
                return
            sent = [0]

            async def counted(data: bytes) -> None:
                sent[0] += 1
                await write(data)

            async def pings() -> None:
                """``ping`` after every ``interval`` in which nothing else was sent."""
                seen = sent[0]
                while True:
                    await anyio.sleep(interval)
                    if sent[0] == seen:
                        try:
                            await write(wire.PING)
                        except Exception:
                            return  # the client left: the answer's own write says so
                    seen = sent[0]

            async with anyio.create_task_group() as group:
                group.start_soon(pings)
                await answer(counted)
                group.cancel_scope.cancel()

        async def answer(write: Write) -> None:
            await write(encoder.start())

            async def sink(event: Event) -> None:
                if type(event) is ResponseDelta and type(event.delta) is DeltaText:
                    text = cut.scan(event.delta.text)
                    if text:
                        cut.text.append(text)
                        await write(encoder.text(text))
                    return
                frame = encoder.feed(event)
                if frame:
                    await write(frame)

            turn_ = cut.turn = self.host.turns.turn(agent, parsed.turn, sink, charge=charge)
            outcome = await turn_.run()
            extra: dict[str, Any] = {}
            if outcome.balance is not None:
                extra["payment_balance"] = balance_fields(outcome.balance)
            if failed(outcome):
                _, kind, message = wire.failure(outcome)
                await write(wire.error_event(message, kind))
                return
            rest = cut.rest()
            tail = b""
            if rest:
                cut.text.append(rest)
                tail = encoder.text(rest)
            calls = [] if cut.matched is not None else outcome.pending_tool_calls
            self.rounds.keep(parsed.turn.principal, outcome)
            if signer is not None:
                extra["signature"] = signer("".join(cut.text), request.body)
            usage = outcome.tracker.usage
            reason = wire.stop_reason_for(calls, usage, parsed.max_tokens, cut.matched)
            await write(tail + encoder.finish(reason, usage, cut.matched, extra))

        async def release() -> None:
            if charge is not None:
                await charge.settle(None, used=False)

        return StreamReply(produce, on_close=release)


def mount(host: Host) -> None:
    """Register the Messages API routes."""
    t = _Anthropic(host)

    async def guarded(request: Request) -> Reply:
        try:
            return await t.messages(request)
        except HTTPError as exc:  # an unknown agent, bad JSON: in Anthropic's shape
            kind = wire.error_type_for(exc.status)
            return JsonReply(wire.error_body(exc.message, kind), exc.status)

    host.route("POST", "/v1/messages", guarded, style="anthropic")
    host.route("POST", "/v1/messages/count_tokens", t.count_tokens, style="anthropic")
    host.route("GET", "/v1/models", t.models, style="anthropic", when=_speaks)
