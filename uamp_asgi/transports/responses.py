"""The OpenAI Responses API on ASGI: ``POST .../responses`` (plain and streamed).

Parsing and rendering are :mod:`uamp_proto.adapters.responses` and
``responses_render``'s, as for ``uamp serve``. Stored responses are kept in
the app's event log (``Config.event_log``) in ``uamp serve``'s layout
(:mod:`uamp_stores.responses`): in memory by default, or in a SQLite file or
Redis, where ``GET .../responses/{id}``, ``DELETE`` and
``previous_response_id`` reach them from any process of the store and after a
restart. Another principal's id answers like a missing one.

Background responses (``background: true``) are ``uamp serve``'s
(:mod:`uamp_stores.responses_background`, which both servers drive): the
create answers ``queued`` (or the stream) at once and the turn runs in the
app's task group (its lifespan's, else detached), every event logged as the
agent emits it; ``GET .../responses/{id}?stream=true&starting_after=N``
follows the log live; ``POST .../responses/{id}/cancel`` stops it on
whichever process of the store runs it. A response whose process was lost is
ended ``interrupted`` (rendered ``incomplete``) by the first process that
looks at it (:func:`uamp_stores.orphans.interrupt_lost`): ``uamp serve``
carries one on from its agent's checkpoint instead, which needs its runtime.
"""

from __future__ import annotations

import contextlib
import os
import time
from functools import partial
from typing import Any
from urllib.parse import parse_qs

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
from uamp_proto.adapters.responses_render import (
    StreamEncoder,
    input_items_page,
    response_object,
    stored_response,
)
from uamp_proto.codec import from_dict
from uamp_proto.outcome import ResponseOutcome
from uamp_proto.payment import BALANCE_EVENT, Charge, PaymentRequiredError, balance_fields
from uamp_proto.principal import Principal
from uamp_proto.responder import Responder, TurnRequest
from uamp_proto.signing import SIGNATURE_HEADER, response_signature_event
from uamp_proto.sse import encode_json
from uamp_proto.tool_rounds import ToolRoundStore
from uamp_stores.background import start_detached
from uamp_stores.event_log import EventLog, LogKey, SessionRecord
from uamp_stores.health import StoreUnavailable
from uamp_stores.orphans import append_event, interrupt_lost
from uamp_stores.responses import (
    conclude,
    dropped_conversation,
    load_stored,
    response_record,
    stored_object,
    stored_part,
)
from uamp_stores.responses_background import (
    TOO_MANY,
    BackgroundResponses,
    NotReplayable,
    follow,
    replayable_echo,
)

from ..app import Host
from ..http import HTTPError, JsonReply, Reply, Request, StreamReply, Write

__all__ = ["mount"]

BALANCE_HEADER = "x-uamp-payment-balance"


def _unavailable(down: StoreUnavailable) -> HTTPError:
    return HTTPError(503, "The response store does not answer; try again.", code=down.code)


class _Responses:
    def __init__(self, host: Host) -> None:
        self.host = host
        self.rounds = ToolRoundStore()
        #: Background responses running in this process.
        self.jobs = BackgroundResponses()

    @property
    def log(self) -> EventLog:
        log = self.host.event_log
        log.ensure_running(self.host.background)  # its writer (and, on Redis, heartbeat)
        return log

    async def _find(self, principal: Principal, rid: str) -> SessionRecord:
        try:
            found = await load_stored(self.log, (principal.key, rid))
        except StoreUnavailable as down:
            raise _unavailable(down) from None
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
        if parsed.background and not self.jobs.room(principal.key):
            raise HTTPError(429, TOO_MANY, code="rate_limit_exceeded")
        turn = parsed.turn
        history: list[dict[str, Any]] = []
        if parsed.previous_response_id is not None:
            previous = await self._find(principal, parsed.previous_response_id)
            if previous.running is not None:
                raise HTTPError(
                    400,
                    f"Response {parsed.previous_response_id!r} has not ended yet; continue it "
                    "once it has.",
                    code="invalid_value",
                )
            dropped = dropped_conversation(parsed.previous_response_id, previous)
            if dropped is not None:
                raise HTTPError(400, dropped, code="invalid_value")
            history = list(previous.history)
            before = [from_dict(ty.Message, m) for m in history]
            turn = attrs.evolve(turn, messages=[*before, *turn.messages])
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
        key = (principal.key, rid)
        record = None
        log = self.log
        if parsed.store:
            if log.health.unavailable:
                raise HTTPError(
                    503, "The response store does not answer; try again.", code="store_unavailable"
                )
            record = response_record(agent.name, attrs.evolve(parsed, turn=turn), history)
            log.begin(key, record.copy())
            if parsed.background:
                return await self._start_background(
                    agent, turn, parsed.echo, key, record, charge, stream=parsed.stream
                )
            append_event(log, key, created, rid)

        async def store(outcome: ResponseOutcome, final: ev.Event) -> dict[str, Any]:
            obj = stored_response(rid, parsed.echo, [created, final])
            if record is not None and log.writing(key):
                append_event(log, key, final, rid)
                conclude(record, outcome.tracker.messages())
                log.put_record(key, record.copy())
                log.release(key)
                with contextlib.suppress(StoreUnavailable):  # written once it answers
                    await log.flush()
            return obj

        def drop_out() -> None:
            """The turn stopped before its end was stored (its client left)."""
            if record is not None and log.writing(key):
                conclude(record, None)
                log.put_record(key, record.copy())
                log.release(key)

        if not parsed.stream:
            try:
                outcome = await self.host.turns.run(agent, turn, charge=charge)
            except BaseException:
                drop_out()  # it did not end (the request was cancelled)
                raise
            final = self._final(outcome, turn)
            obj = await store(outcome, final)
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
            return JsonReply(obj, headers=headers)

        encoder = StreamEncoder(rid, parsed.echo)

        async def produce(write: Write) -> None:
            async def sink(event: ev.Event) -> None:
                frame = encoder.sse(event)
                if frame:
                    await write(frame)

            try:
                outcome = await self.host.turns.run(agent, turn, sink, charge=charge)
                final = self._final(outcome, turn)
                await store(outcome, final)
            finally:
                drop_out()
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
            drop_out()  # a stream that never ran
            if charge is not None:
                await charge.settle(None, used=False)

        return StreamReply(produce, on_close=release)

    # --- background responses ---------------------------------------------------

    async def _start_background(
        self,
        agent: Responder,
        turn: TurnRequest,
        echo: dict[str, Any],
        key: LogKey,
        record: SessionRecord,
        charge: Charge | None,
        *,
        stream: bool,
    ) -> Reply:
        log = self.log
        runner = self.host.turns.turn(agent, turn, partial(self._log_event, key), charge=charge)
        self.jobs.running[key] = runner
        try:
            await log.flush()  # findable on every process before its id is handed out
        except BaseException as exc:
            self.jobs.running.pop(key, None)
            log.release(key)
            if charge is not None:
                await charge.settle(None, used=False)
            if isinstance(exc, StoreUnavailable):
                raise _unavailable(exc) from None
            raise
        job = partial(
            self.jobs.run,
            log,
            key,
            runner,
            partial(self._final, turn=turn),
            partial(self._ended, key, record),
        )
        start_detached(self.host.background, job, "uamp-responses-background", "a response")
        if stream:
            return self._follow(key, echo, -1)
        return JsonReply(response_object(key[1], echo, status="queued", output=[]))

    async def _log_event(self, key: LogKey, event: ev.Event) -> None:
        append_event(self.log, key, event, key[1])

    def _ended(self, key: LogKey, record: SessionRecord, outcome: ResponseOutcome | None) -> None:
        """A background response ended: its record says so (``None``: its task was
        cancelled, the server stopping: the next look ends it ``interrupted``)."""
        log = self.log
        if not log.writing(key):
            return  # deleted meanwhile
        if outcome is not None:
            conclude(record, outcome.tracker.messages())
            log.put_record(key, record.copy())
        log.release(key)

    async def _check(self, key: LogKey, record: SessionRecord) -> None:
        """End ``interrupted`` a response whose process is gone (once over all processes)."""
        log = self.log
        node = record.node
        if record.running is None or node == log.node or key in self.jobs.running:
            return
        if not await log.alive(node):
            await interrupt_lost(log, key, record)

    def _follow(self, key: LogKey, echo: dict[str, Any], after: int) -> StreamReply:
        async def produce(write: Write) -> None:
            await follow(self.log, key, echo, after, write, partial(self._check, key))

        return StreamReply(produce)

    async def _stop(self, key: LogKey) -> None:
        await self.jobs.stop(self.log, key, partial(self._check, key))

    # --- stored responses -----------------------------------------------------------

    async def retrieve(self, request: Request) -> Reply:
        """``GET .../responses/{id}``; ``stream=true``: a background response's events."""
        rid = request.path_params["response_id"]
        key = (request.principal.key, rid)
        record = await self._find(request.principal, rid)
        query = {k: v[-1] for k, v in parse_qs(request.query).items()}
        try:
            if query.get("stream") in ("true", "1"):
                raw = query.get("starting_after", "-1")
                try:
                    after = int(raw)
                except ValueError:
                    raise HTTPError(
                        400, "'starting_after' must be an integer.", code="invalid_value"
                    ) from None
                try:
                    echo = await replayable_echo(self.log, key, record)
                except NotReplayable as exc:
                    raise HTTPError(exc.status, str(exc), code=exc.code) from None
                await self._check(key, record)
                return self._follow(key, echo, after)
            await self._check(key, record)
            return JsonReply(await stored_object(self.log, key, record))
        except StoreUnavailable as down:
            raise _unavailable(down) from None

    async def cancel(self, request: Request) -> Reply:
        """``POST .../responses/{id}/cancel``: background responses only."""
        rid = request.path_params["response_id"]
        key = (request.principal.key, rid)
        record = await self._find(request.principal, rid)
        kept = stored_part(record)
        assert kept is not None
        if not kept["echo"].get("background"):
            raise HTTPError(
                400, "Only a background response can be cancelled.", code="invalid_value"
            )
        try:
            if record.running is not None:
                await self._stop(key)
            record = await self._find(request.principal, rid)
            await self._check(key, record)
            return JsonReply(await stored_object(self.log, key, record))
        except StoreUnavailable as down:
            raise _unavailable(down) from None

    async def input_items(self, request: Request) -> Reply:
        """``GET .../responses/{id}/input_items``: ``after``, ``limit`` (1-100), ``order``."""
        kept = stored_part(await self._find(request.principal, request.path_params["response_id"]))
        assert kept is not None
        query = {k: v[-1] for k, v in parse_qs(request.query).items()}
        try:
            return JsonReply(input_items_page(kept["input"], query))
        except ValueError as bad:
            raise HTTPError(400, str(bad), code="invalid_value") from None

    async def delete(self, request: Request) -> Reply:
        """``DELETE .../responses/{id}``: a running one is cancelled first."""
        rid = request.path_params["response_id"]
        key = (request.principal.key, rid)
        record = await self._find(request.principal, rid)
        try:
            if record.running is not None:
                await self._stop(key)
            await self.log.drop(key)
            await self.log.flush()
        except StoreUnavailable as down:
            raise _unavailable(down) from None
        return JsonReply({"id": rid, "object": "response.deleted", "deleted": True})


def mount(host: Host) -> None:
    """Register the Responses routes."""
    t = _Responses(host)
    for prefix in ("", "/v1"):
        host.route("POST", f"{prefix}/responses", t.create)
        host.route("GET", f"{prefix}/responses/{{response_id}}", t.retrieve)
        host.route("DELETE", f"{prefix}/responses/{{response_id}}", t.delete)
        host.route("POST", f"{prefix}/responses/{{response_id}}/cancel", t.cancel)
        host.route("GET", f"{prefix}/responses/{{response_id}}/input_items", t.input_items)
