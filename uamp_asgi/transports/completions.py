"""OpenAI Chat Completions (and the model list) on ASGI.

The paths and the wire format are those of ``uamp serve``
(:mod:`uamp_trio.transports.completions`): ``POST .../chat/completions`` and
``.../v1/chat/completions`` (JSON, or SSE with ``stream: true``),
``GET .../models``, ``.../v1/models``, ``.../models/{id}`` and
``.../capabilities``. The sans-IO adapter
:mod:`uamp_proto.adapters.completions` parses and renders; this module is
the I/O: payment pre-flight (402), the turn, signing and the balance.
"""

from __future__ import annotations

import os
import time

import attrs
import orjson

from uamp_proto.adapters.completions import (
    ChunkEncoder,
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
from uamp_proto.events import Event
from uamp_proto.payment import PaymentRequiredError, balance_fields
from uamp_proto.signing import SIGNATURE_HEADER
from uamp_proto.tool_rounds import ToolRoundStore

from ..app import Host
from ..http import HTTPError, JsonReply, Reply, Request, StreamReply, Write

__all__ = ["mount"]

BALANCE_HEADER = "x-uamp-payment-balance"


class _Completions:
    def __init__(self, host: Host) -> None:
        self.host = host
        self.rounds = ToolRoundStore()

    async def capabilities(self, request: Request) -> Reply:
        return JsonReply(unstructure(self.host.resolve_agent(request.path_params).capabilities()))

    async def models(self, request: Request) -> Reply:
        if "agent" in request.path_params:
            names = [self.host.resolve_agent(request.path_params).name]
        else:
            names = list(self.host.agents)
        return JsonReply({"object": "list", "data": [model_object(n) for n in names]})

    async def model(self, request: Request) -> Reply:
        wanted = request.path_params["model_id"]
        if "agent" in request.path_params:
            found = self.host.resolve_agent(request.path_params).name == wanted
        else:
            found = wanted in self.host.agents
        if not found:
            raise HTTPError(
                404, f"The model {wanted!r} does not exist here.", code="model_not_found"
            )
        return JsonReply(model_object(wanted))

    async def chat(self, request: Request) -> Reply:
        body = request.json()
        model = body.get("model") if isinstance(body, dict) else None
        agent = self.host.resolve_agent(
            request.path_params, model=model if isinstance(model, str) else None
        )
        rand = os.urandom(32).hex()
        cid = f"chatcmpl-{rand[:32]}"
        try:
            parsed = parse_request(
                body,
                agent=agent.name,
                response_id=cid,
                session_id=f"sess_{rand[32:]}",
                principal=request.principal,
            )
        except CompletionsError as exc:
            return JsonReply(exc.body(), exc.status)
        turn = self.rounds.restore(request.principal, parsed.turn)
        token = request.headers.get("x-payment")
        if token is not None:
            turn = attrs.evolve(turn, payment_token=token)
        parsed = attrs.evolve(parsed, turn=turn)
        try:
            charge = await self.host.open_charge(agent, token, cid, request.principal)
        except PaymentRequiredError as unpaid:
            return JsonReply(payment_error(unpaid.accepts(), unpaid.details()), 402)
        created = int(time.time())
        signer = self.host.config.response_signer
        if not parsed.stream:
            outcome = await self.host.turns.run(agent, parsed.turn, charge=charge)
            headers: list[tuple[str, str]] = []
            if outcome.balance is not None:
                fields = orjson.dumps(balance_fields(outcome.balance)).decode()
                headers.append((BALANCE_HEADER, fields))
            if outcome.status in ("failed", "cancelled"):
                status, err = outcome_error(outcome)
                return JsonReply(err, status, headers)
            self.rounds.keep(parsed.turn.principal, outcome)
            if signer is not None:
                headers.append((SIGNATURE_HEADER, signer(outcome.tracker.text, request.body)))
            reply = outcome_reply(outcome, parsed, completion_id=cid, created=created)
            return JsonReply(reply, headers=headers)

        encoder = ChunkEncoder(
            completion_id=cid,
            created=created,
            model=parsed.model or agent.name,
            include_usage=parsed.include_usage,
        )

        async def produce(write: Write) -> None:
            await write(sse_data(encoder.start()))

            async def sink(event: Event) -> None:
                frame = encoder.sse(event)
                if frame:
                    await write(frame)

            outcome = await self.host.turns.run(agent, parsed.turn, sink, charge=charge)
            signature = None
            if outcome.status not in ("failed", "cancelled"):
                self.rounds.keep(parsed.turn.principal, outcome)
                if signer is not None:
                    signature = signer(outcome.tracker.text, request.body)
            await write(stream_tail(encoder, parsed, outcome, signature))

        async def release() -> None:
            if charge is not None:
                await charge.settle(None, used=False)  # a no-op once the turn settled it

        return StreamReply(produce, on_close=release)


def mount(host: Host) -> None:
    """Register the Chat Completions routes."""
    t = _Completions(host)
    for prefix in ("", "/v1"):
        host.route("POST", prefix + "/chat/completions", t.chat)
        host.route("GET", prefix + "/models", t.models)
        host.route("GET", prefix + "/models/{model_id}", t.model)
    host.route("GET", "/capabilities", t.capabilities)
