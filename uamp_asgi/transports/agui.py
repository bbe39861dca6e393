"""AG-UI on ASGI: ``POST .../agui`` runs the agent, its events stream as SSE.

Parsing and rendering are :mod:`uamp_proto.adapters.agui`'s; the run's
closing events (error, finish, signature, balance) are its
:func:`~uamp_proto.adapters.agui.closing_events`, shared with ``uamp serve``.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from uamp_proto.adapters.agui import (
    AguiError,
    RunEncoder,
    closing_events,
    encode_sse,
    parse_run_input,
    turn_request,
)
from uamp_proto.events import Event
from uamp_proto.ids import random_ids
from uamp_proto.payment import PaymentRequiredError

from ..app import Host
from ..http import HTTPError, Reply, Request, StreamReply, Write

__all__ = ["mount"]


def _frame(events: list[dict[str, Any]]) -> bytes:
    """The events as SSE, each with its ``timestamp`` (milliseconds since the epoch)."""
    return encode_sse(events, time.time())


def _events(events: list[dict[str, Any]]) -> StreamReply:
    payload = _frame(events)

    async def produce(write: Write) -> None:
        await write(payload)

    return StreamReply(produce)


def mount(host: Host) -> None:
    """Register ``POST .../agui``."""

    async def run(request: Request) -> Reply:
        agent = host.resolve_agent(request.path_params)
        try:
            parsed = parse_run_input(request.json())
        except AguiError as exc:
            if not exc.started:
                raise HTTPError(400, exc.message, code=exc.code) from None
            assert exc.thread_id is not None and exc.run_id is not None
            return _events(
                RunEncoder(exc.thread_id, exc.run_id, random_ids).error(exc.message, exc.code)
            )
        encoder = RunEncoder(
            parsed.thread_id, parsed.run_id, random_ids, parent_run_id=parsed.parent_run_id
        )
        props = parsed.forwarded_props if isinstance(parsed.forwarded_props, dict) else {}
        token = request.headers.get("x-payment") or props.get("payment_token")
        token = token if isinstance(token, str) else None
        response_id = f"resp_{uuid.uuid4().hex}"
        try:
            charge = await host.open_charge(agent, token, response_id, request.principal)
        except PaymentRequiredError as refusal:
            events = encoder.start(parsed)
            events += encoder.error(
                "Payment required: retry with an X-PAYMENT header.",
                refusal.code,
                metadata={"status_code": 402, "accepts": refusal.accepts(), **refusal.details()},
            )
            return _events(events)
        turn = turn_request(
            parsed,
            agent=agent.name,
            response_id=response_id,
            payment_token=token,
            principal=request.principal,
        )
        signer = host.config.response_signer

        async def produce(write: Write) -> None:
            await write(_frame(encoder.start(parsed)))

            async def sink(event: Event) -> None:
                out = encoder.feed(event)
                if out:
                    await write(_frame(out))

            outcome = await host.turns.run(agent, turn, sink, charge=charge)
            signature = None
            if signer is not None and outcome.status == "completed":
                signature = signer(outcome.tracker.text, request.body)
            await write(_frame(closing_events(encoder, outcome, signature)))

        async def release() -> None:
            if charge is not None:
                await charge.settle(None, used=False)

        return StreamReply(produce, on_close=release)

    host.route("POST", "/agui", run)
