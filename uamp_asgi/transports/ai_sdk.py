"""The Vercel AI SDK UI message stream on ASGI: ``POST .../ai-sdk``.

As ``uamp serve``'s (:mod:`uamp_trio.transports.ai_sdk`), rendered by
:mod:`uamp_proto.adapters.ai_sdk`: the chat's messages in, the answer as the
UI message stream (SSE with ``x-vercel-ai-ui-message-stream: v1``), client
tools as tool-input chunks the page answers in its next request. The answer
runs inside its request: a client that leaves stops it, so
``GET .../ai-sdk/{chatId}/stream`` (the SDK's resume) answers 204, "no
active answer". Detached answers that outlive their request and their resume
are ``uamp serve``'s.
"""

from __future__ import annotations

from uamp_proto.adapters.ai_sdk import (
    DONE,
    HEADERS,
    AiSdkError,
    StreamEncoder,
    frame,
    parse_chat_request,
    replay_chunks,
    turn_request,
)
from uamp_proto.adapters.completions import payment_error
from uamp_proto.events import Event
from uamp_proto.ids import random_ids
from uamp_proto.payment import PaymentRequiredError

from ..app import Host
from ..http import HTTPError, JsonReply, Reply, Request, StreamReply, Write
from ..turns import run_turn

__all__ = ["mount"]


def mount(host: Host) -> None:
    """Register ``POST .../ai-sdk`` and its resume, which finds nothing to resume."""

    async def chat(request: Request) -> Reply:
        agent = host.resolve_agent(request.path_params)
        try:
            parsed = parse_chat_request(request.json())
        except AiSdkError as exc:
            raise HTTPError(400, exc.message, code=exc.code) from None
        response_id = random_ids("resp")
        token = request.headers.get("x-payment")
        try:
            charge = await host.open_charge(agent, token, response_id, request.principal)
        except PaymentRequiredError as unpaid:
            return JsonReply(payment_error(unpaid.accepts(), unpaid.details()), 402)
        continued = parsed.continued
        message_id = continued["id"] if continued is not None else random_ids("msg")
        encoder = StreamEncoder(message_id, random_ids, client_tools=parsed.client_tools)
        prefix = replay_chunks(continued, random_ids) if continued is not None else []
        turn = turn_request(
            parsed,
            agent=agent.name,
            response_id=response_id,
            payment_token=token,
            principal=request.principal,
        )
        signer = host.config.response_signer

        async def produce(write: Write) -> None:
            await write(b"".join(frame(c) for c in [*encoder.start(), *prefix]))

            async def sink(event: Event) -> None:
                chunks = encoder.feed(event)
                if chunks:
                    await write(b"".join(frame(c) for c in chunks))

            outcome = await run_turn(agent, turn, sink, charge=charge)
            signature = None
            if signer is not None and outcome.status == "completed":
                signature = signer(outcome.tracker.text, request.body)
            await write(b"".join(frame(c) for c in encoder.end(outcome, signature)) + DONE)

        async def release() -> None:
            if charge is not None:
                await charge.settle(None, used=False)

        return StreamReply(produce, headers=list(HEADERS), on_close=release)

    async def resume(request: Request) -> Reply:
        host.resolve_agent(request.path_params)
        return JsonReply(b"", 204)

    host.route("POST", "/ai-sdk", chat)
    host.route("GET", "/ai-sdk/{chat_id}/stream", resume)
