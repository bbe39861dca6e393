"""The OpenAI Responses API on ASGI: ``POST .../responses`` (plain and streamed).

Parsing and rendering are :mod:`uamp_proto.adapters.responses` and
``responses_render``'s, as for ``uamp serve``. Stored responses live in this
process's memory (bounded, oldest first out; another principal's id answers
like a missing one): ``GET .../responses/{id}``, ``DELETE`` and
``previous_response_id`` work while the process lives. Background responses
and the resumable stored event log are ``uamp serve``'s (they need its event
log stores): asking for ``background`` here is a 400.
"""

from __future__ import annotations

import os
import time
from typing import Any

import attrs
import orjson

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.adapters.completions import (
    SSE_DONE,
    STATUS_FOR_CODE,
    CompletionsError,
    error_object,
    payment_error,
)
from uamp_proto.adapters.responses import parse_request
from uamp_proto.adapters.responses_render import StreamEncoder, stored_response
from uamp_proto.outcome import ResponseOutcome
from uamp_proto.payment import BALANCE_EVENT, PaymentRequiredError, balance_fields
from uamp_proto.principal import Principal
from uamp_proto.responder import TurnRequest
from uamp_proto.signing import SIGNATURE_HEADER, response_signature_event
from uamp_proto.sse import encode_json
from uamp_proto.tool_rounds import ToolRoundStore

from ..app import Host
from ..bounded import OwnedLRU
from ..http import HTTPError, JsonReply, Reply, Request, StreamReply, Write
from ..turns import run_turn

__all__ = ["MAX_STORED", "mount"]

#: Stored responses kept (all principals); the least recently used go first.
MAX_STORED = 4096
#: Stored responses one principal keeps; its own oldest go first.
MAX_STORED_PER_PRINCIPAL = 512
BALANCE_HEADER = "x-uamp-payment-balance"


@attrs.frozen
class _Stored:
    body: dict[str, Any]
    history: list[ty.Message]


class _Responses:
    def __init__(self, host: Host) -> None:
        self.host = host
        self.rounds = ToolRoundStore()
        self.stored: OwnedLRU[_Stored] = OwnedLRU(
            per_owner=MAX_STORED_PER_PRINCIPAL, total=MAX_STORED
        )

    def _keep(self, principal: Principal, rid: str, item: _Stored) -> None:
        self.stored.put(principal, rid, item)

    def _find(self, request: Request) -> _Stored:
        rid = request.path_params["response_id"]
        found = self.stored.get(request.principal, rid)
        if found is None:
            raise HTTPError(404, f"No response found with id '{rid}'.", code="not_found")
        return found

    def _final(self, outcome: ResponseOutcome, turn: TurnRequest) -> ev.Event:
        if outcome.final is not None:
            return outcome.final
        self.rounds.keep(turn.principal, outcome)
        return outcome.tracker.done_event(session_id=outcome.tracker.response_id)

    async def create(self, request: Request) -> Reply:
        body = request.json()
        model = body.get("model") if isinstance(body, dict) else None
        agent = self.host.resolve_agent(
            request.path_params, model=model if isinstance(model, str) else None
        )
        rid = f"resp_{os.urandom(16).hex()}"
        principal = request.principal
        try:
            parsed = parse_request(
                body,
                agent=agent.name,
                response_id=rid,
                session_id=rid,
                created_at=int(time.time()),
                principal=principal,
            )
        except CompletionsError as exc:
            return JsonReply(exc.body(), exc.status)
        if parsed.background:
            raise HTTPError(
                400,
                "Background responses are served by `uamp serve`, not the ASGI app.",
                code="unsupported_value",
            )
        turn = parsed.turn
        if parsed.previous_response_id is not None:
            request.path_params["response_id"] = parsed.previous_response_id
            previous = self._find(request)
            turn = attrs.evolve(turn, messages=[*previous.history, *turn.messages])
        turn = self.rounds.restore(principal, turn)
        token = request.headers.get("x-payment")
        if token is not None:
            turn = attrs.evolve(turn, payment_token=token)
        try:
            charge = await self.host.open_charge(agent, token, rid, principal)
        except PaymentRequiredError as unpaid:
            return JsonReply(payment_error(unpaid.accepts(), unpaid.details()), 402)
        signer = self.host.config.response_signer
        created = ev.ResponseCreated(response_id=rid)

        def store(outcome: ResponseOutcome, final: ev.Event) -> dict[str, Any]:
            obj = stored_response(rid, parsed.echo, [created, final])
            if parsed.store:
                history = [*turn.messages, *outcome.tracker.messages()]
                self._keep(principal, rid, _Stored(obj, history))
            return obj

        if not parsed.stream:
            outcome = await run_turn(agent, turn, charge=charge)
            final = self._final(outcome, turn)
            headers: list[tuple[str, str]] = []
            if outcome.balance is not None:
                fields = orjson.dumps(balance_fields(outcome.balance)).decode()
                headers.append((BALANCE_HEADER, fields))
            error = outcome.error
            if outcome.status == "failed" and error is not None:
                status = STATUS_FOR_CODE.get(error.code)
                if status is not None:
                    return JsonReply(error_object(error.message, code=error.code), status, headers)
            if signer is not None and outcome.status in ("completed", "requires_action"):
                headers.append((SIGNATURE_HEADER, signer(outcome.tracker.text, request.body)))
            return JsonReply(store(outcome, final), headers=headers)

        encoder = StreamEncoder(rid, parsed.echo)

        async def produce(write: Write) -> None:
            async def sink(event: ev.Event) -> None:
                frame = encoder.sse(event)
                if frame:
                    await write(frame)

            outcome = await run_turn(agent, turn, sink, charge=charge)
            final = self._final(outcome, turn)
            store(outcome, final)
            tail = encoder.sse(final) if outcome.final is None else b""
            extra = b""
            if signer is not None and outcome.status in ("completed", "requires_action"):
                extra += response_signature_event(signer(outcome.tracker.text, request.body))
            if outcome.balance is not None:
                fields = orjson.dumps(balance_fields(outcome.balance))
                extra += encode_json(fields, event=BALANCE_EVENT)
            if extra:
                tail += SSE_DONE + extra
            await write(tail)

        async def release() -> None:
            if charge is not None:
                await charge.settle(None, used=False)

        return StreamReply(produce, on_close=release)

    async def retrieve(self, request: Request) -> Reply:
        return JsonReply(self._find(request).body)

    async def delete(self, request: Request) -> Reply:
        self._find(request)
        rid = request.path_params["response_id"]
        self.stored.pop(request.principal, rid)
        return JsonReply({"id": rid, "object": "response.deleted", "deleted": True})


def mount(host: Host) -> None:
    """Register the Responses routes."""
    t = _Responses(host)
    for prefix in ("", "/v1"):
        host.route("POST", f"{prefix}/responses", t.create)
        host.route("GET", f"{prefix}/responses/{{response_id}}", t.retrieve)
        host.route("DELETE", f"{prefix}/responses/{{response_id}}", t.delete)
