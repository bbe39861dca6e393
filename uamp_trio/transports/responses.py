"""The OpenAI Responses API transport (docs/responses.md).

Endpoints, for every hosted agent under ``/agents/{name}`` (and at the root,
like Chat Completions), each also under ``/v1``:

* ``POST /responses`` -- one turn: the Response object as JSON, or the
  Responses event stream with ``stream: true``; ``background: true`` answers
  ``queued`` at once and runs the agent without the connection;
* ``GET /responses/{id}`` -- a stored response (``?stream=true``: a background
  response's events from the start, or after ``starting_after``, then live
  until it ends);
* ``DELETE /responses/{id}``; ``GET /responses/{id}/input_items``
  (``after``, ``limit``, ``order``); ``POST /responses/{id}/cancel`` (background
  responses).

Theory of operation
-------------------
The sans-IO adapters do the protocol: :mod:`uamp_proto.adapters.responses`
parses the request into a turn, :mod:`uamp_proto.adapters.responses_render`
renders a turn's UAMP events as the Response object and the event stream.

A stored response *is* a resumable UAMP session of the event log
(:mod:`uamp_stores.event_log`): its log key is ``(owner's principal
key, response id)``, so another principal's id is not found, exactly like a
missing one; its :class:`~uamp_stores.event_log.SessionRecord` holds the
agent, the conversation before it (``history``), its input, the echoed
request fields and listed input items (``config.extensions``), and while it
runs, the process running it (``node``); its log holds UAMP events. A
foreground response logs ``response.created`` when it starts and its
terminal event (which carries the whole output) when it ends; a background
response logs every event as the agent emits it, so a stream can be rendered
again from the log at any time, on any process sharing the store -- the
renderer is a pure function of the events, so the ``sequence_number`` s are
the same each time. ``previous_response_id`` prepends the stored
conversation (history, input and output) to the new input.

A background response whose process died is found when someone asks for it
(``GET``, a stream waiting on it, ``cancel``): the first process to claim
the loss adopts its log and :func:`~uamp_trio.hosting.continuation.carry_on`
goes on from the agent's last checkpoint or ends it ``interrupted``
(rendered ``incomplete``), settling the lost process's payment lock once --
the machinery UAMP sessions resume with, unchanged.

Payment and signing are Chat Completions': a ``402`` with OpenAI's error
object before anything runs, the ``X-UAMP-Payment-Balance`` and
``X-UAMP-Signature`` headers on a JSON answer; a stream that has either ends
``data: [DONE]`` (where the SDK stops reading) followed by ``event:
response_signature`` and ``event: payment.balance``. A streamed turn renders
each event to its SSE bytes as the agent emits it and queues them on the
response, and the server's writer sends what is queued in one write, as for
Chat Completions.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Final
from urllib.parse import parse_qs

import attrs
import orjson
import trio

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.adapters.completions import (
    SSE_DONE,
    STATUS_FOR_CODE,
    CompletionsError,
    error_object,
    payment_error,
)
from uamp_proto.adapters.responses import ResponsesRequest, parse_request
from uamp_proto.adapters.responses_render import (
    StreamEncoder,
    input_items_page,
    response_object,
    stored_response,
)
from uamp_proto.busy import INVALID_POLICY, BusyError
from uamp_proto.codec import from_dict
from uamp_proto.ids import random_hex
from uamp_proto.payment import BALANCE_EVENT, Charge, PaymentRequiredError, balance_fields
from uamp_proto.principal import Principal
from uamp_proto.responder import Responder, TurnRequest
from uamp_proto.signing import SIGNATURE_HEADER, response_signature_event
from uamp_proto.sse import encode_json
from uamp_proto.types import DeltaText
from uamp_stores.busy import Slot, http_status
from uamp_stores.event_log import EventLog, LogKey, SessionRecord
from uamp_stores.orphans import append_event
from uamp_stores.responses import (
    conclude,
    dropped_conversation,
    load_stored,
    response_record,
    stored_object,
    stored_part,
)
from uamp_stores.responses_background import (
    MAX_BACKGROUND,
    MAX_BACKGROUND_PER_PRINCIPAL,
    TOO_MANY,
    BackgroundResponses,
    NotReplayable,
    follow,
    replayable_echo,
)

from ..engines.http import (
    SSE_HEADERS,
    HTTPError,
    Request,
    Response,
    SendChunk,
    StreamingResponse,
    json_response,
)
from ..hosting.continuation import carry_on
from ..hosting.host import Host
from ..hosting.router import RouteMeta
from ..hosting.turns import ResponseOutcome, ResponseRunner

__all__ = ["MAX_BACKGROUND", "MAX_BACKGROUND_PER_PRINCIPAL", "ResponsesTransport", "mount"]

#: What middleware knows of these routes: OpenAI error objects.
ROUTES = RouteMeta(transport="responses", error_style="openai")

log = logging.getLogger("uamp_trio.responses")

#: The header of a paid JSON answer: its ``payment.balance`` fields as JSON.
BALANCE_HEADER: Final = "x-uamp-payment-balance"


def _not_found(response_id: str, param: str | None = None) -> HTTPError:
    return HTTPError(
        404,
        f"No response with id {response_id!r} is stored here.",
        code="response_not_found",
        param=param,
    )


def _append(event_log: EventLog, key: LogKey, event: ev.Event) -> None:
    append_event(event_log, key, event, key[1])


def _query(request: Request) -> dict[str, str]:
    return {k: v[-1] for k, v in parse_qs(request.query).items()}


def _int_param(query: dict[str, str], name: str, default: int | None) -> int | None:
    raw = query.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise HTTPError(400, f"'{name}' must be an integer.", code="invalid_value") from None


class ResponsesTransport:
    """The Responses endpoints of an app (see the module docstring)."""

    def __init__(self, app: Host) -> None:
        self.app = app
        #: Background responses running in this process, by log key.
        self.jobs = BackgroundResponses()
        self.running = self.jobs.running
        #: The place each stored response running here holds (docs/busy.md).
        self._places: dict[LogKey, Slot] = {}

    def mount(self) -> None:
        """Register the routes on the app."""
        app = self.app
        for prefix in ("", "/v1"):
            label = "Responses" if prefix == "/v1" else None
            app.agent_route("POST", f"{prefix}/responses", self.create, label=label, meta=ROUTES)
            one = f"{prefix}/responses/{{response_id}}"
            app.agent_route("GET", one, self.retrieve, meta=ROUTES)
            app.agent_route("DELETE", one, self.delete, meta=ROUTES)
            app.agent_route("GET", f"{one}/input_items", self.input_items, meta=ROUTES)
            app.agent_route("POST", f"{one}/cancel", self.cancel, meta=ROUTES)

    @property
    def _log(self) -> EventLog:
        store = self.app.stores.event_log
        # Its flusher, heartbeat and inbox run once anything here uses it:
        # other processes see this one's writes, know it is alive, can ask it.
        store.ensure_running(self.app.background)
        return store

    # --- POST /responses -------------------------------------------------------

    def _agent(self, request: Request, model: object) -> Responder:
        named = model if isinstance(model, str) else None
        agent = self.app.resolve_agent(request.path_params, model=named)
        if named is not None and named != agent.name:
            raise HTTPError(
                404,
                f"The model {named!r} does not exist here: the agent is {agent.name!r}.",
                code="model_not_found",
                param="model",
            )
        return agent

    async def create(self, request: Request) -> Response | StreamingResponse:
        """``POST .../responses``."""
        body = await request.json()
        agent = self._agent(request, body.get("model") if isinstance(body, dict) else None)
        rid = f"resp_{random_hex()}"
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
            return json_response(exc.body(), exc.status)
        history: list[dict[str, Any]] = []
        if parsed.previous_response_id is not None:
            meta = body.get("metadata") if isinstance(body, dict) else None
            await self._after(principal, parsed.previous_response_id, meta)
            history = await self._conversation(principal, parsed.previous_response_id)
            before = [from_dict(ty.Message, m) for m in history]
            turn = parsed.turn
            parsed = attrs.evolve(
                parsed, turn=attrs.evolve(turn, messages=[*before, *turn.messages])
            )
        # The agent's own tool rounds of a turn that also called the client's
        # tools, which the client sending its results back never had.
        turn = self.app.stores.tool_rounds.restore(principal, parsed.turn)
        if turn is not parsed.turn:
            parsed = attrs.evolve(parsed, turn=turn)
        if parsed.background:
            self._check_room(principal)
        if parsed.store and self._log.health.down:
            raise HTTPError(
                503, "The response store does not answer; try again.", code="store_unavailable"
            )
        token = request.headers.get("x-payment")
        try:
            charge = await self.app.open_charge(agent.name, token, rid, principal=principal)
        except PaymentRequiredError as unpaid:
            return json_response(payment_error(unpaid.accepts(), unpaid.details()), 402)
        if token is not None:
            parsed = attrs.evolve(parsed, turn=attrs.evolve(parsed.turn, payment_token=token))
        key: LogKey = (principal.key, rid)
        record: SessionRecord | None = None
        if parsed.store:
            record = response_record(agent.name, parsed, history)
            self._log.begin(key, record)
            # A stored response holds its own place: a response continuing it
            # meanwhile meets the busy policy (docs/busy.md).
            gate = self.app.conversations
            self._places[key] = gate.enter(("responses", principal.key, rid), principal)
        if parsed.background:
            assert record is not None
            return await self._start_background(parsed, key, record, charge, request, agent)
        if parsed.stream:

            async def produce(send: SendChunk) -> None:
                await self._stream(agent, parsed, key, record, send, request.body, charge)

            async def on_close() -> None:
                self._release_place(key)  # a stream that never ran gives its place up
                if charge is not None:
                    await charge.settle(None, used=False)

            return StreamingResponse(producer=produce, headers=list(SSE_HEADERS), on_close=on_close)
        try:
            return await self._complete(agent, parsed, key, record, request.body, charge)
        finally:
            self._release_place(key)

    async def _after(self, principal: Principal, previous: str, metadata: object) -> None:
        """Wait until ``previous`` (running in this process) ended, as the busy policy says.

        Raises:
            HTTPError: ``409`` ``conversation_busy`` (reject), ``429``
                ``queue_full``, ``400`` for a bad ``metadata["uamp.on_busy"]``.
        """
        gate = self.app.conversations
        try:
            place = gate.enter(
                ("responses", principal.key, previous), principal, gate.policy(metadata)
            )
        except BusyError as exc:
            status = http_status(exc)
            param = "metadata" if exc.code == INVALID_POLICY else "previous_response_id"
            raise HTTPError(
                status, f"Response {previous!r}: {exc}", code=exc.code, param=param
            ) from None
        # Only the wait is held: responses that continue the same one fork from it.
        async with place:
            pass

    def _release_place(self, key: LogKey) -> Slot | None:
        """The stored response ``key`` ended: a response waiting to continue it goes on."""
        place = self._places.pop(key, None)
        if place is not None:
            place.close()
        return place

    async def _conversation(self, principal: Principal, previous: str) -> list[dict[str, Any]]:
        """The whole conversation of stored response ``previous`` (JSON messages)."""
        record = await self._record_of((principal.key, previous), param="previous_response_id")
        if record.running is not None:
            raise HTTPError(
                400,
                f"Response {previous!r} has not ended yet; continue it once it has.",
                code="invalid_value",
                param="previous_response_id",
            )
        dropped = dropped_conversation(previous, record)
        if dropped is not None:
            raise HTTPError(400, dropped, code="invalid_value", param="previous_response_id")
        return list(record.history)

    def _check_room(self, principal: Principal) -> None:
        if not self.jobs.room(principal.key):
            raise HTTPError(429, TOO_MANY, code="rate_limit_exceeded")

    def _finish(
        self, key: LogKey, record: SessionRecord | None, outcome: ResponseOutcome | None
    ) -> None:
        """Log the end of a stored response and let its log go."""
        event_log = self._log
        place = self._places.get(key)
        dropped = place is not None and place.dropped and outcome is not None
        self._release_place(key)
        if not event_log.writing(key):
            return  # not stored, or deleted meanwhile
        if outcome is not None and record is not None:
            rolled_back = dropped and outcome.status == "cancelled"  # no trace
            conclude(record, None if rolled_back else outcome.tracker.messages())
            event_log.put_record(key, record.copy())
        event_log.release(key)

    def _final(self, outcome: ResponseOutcome, turn: TurnRequest) -> ev.Event:
        """The terminal event of a turn (client tool calls: ``response.done`` too).

        A turn that called the client's tools keeps its own tool rounds for
        the request that brings the results (:func:`server_rounds`).
        """
        if outcome.final is not None:
            return outcome.final
        self.app.stores.tool_rounds.keep(turn.principal, outcome)
        return outcome.tracker.done_event(session_id=outcome.tracker.response_id)

    # --- a foreground turn -------------------------------------------------------

    async def _complete(
        self,
        agent: Responder,
        parsed: ResponsesRequest,
        key: LogKey,
        record: SessionRecord | None,
        request_body: bytes,
        charge: Charge | None,
    ) -> Response:
        if record is not None:
            _append(self._log, key, ev.ResponseCreated(response_id=key[1]))
        outcome = await self._run(
            key,
            self.app.turns.runner(agent, parsed.turn, None, stamp=False, charge=charge),
        )
        final = self._final(outcome, parsed.turn)
        if record is not None:
            _append(self._log, key, final)
            self._finish(key, record, outcome)
            await self._log.flush()
        headers: list[tuple[str, str]] = []
        if outcome.balance is not None:
            headers.append((BALANCE_HEADER, orjson.dumps(balance_fields(outcome.balance)).decode()))
        if outcome.status == "failed" and outcome.error is not None:
            status = STATUS_FOR_CODE.get(outcome.error.code)
            if status is not None:  # the caller's fault: an HTTP error, as OpenAI does
                body = error_object(outcome.error.message, code=outcome.error.code)
                return json_response(body, status, headers=headers)
        signer = self.app.response_signer
        if signer is not None and outcome.status in ("completed", "requires_action"):
            headers.append((SIGNATURE_HEADER, signer(outcome.tracker.text, request_body)))
        obj = stored_response(key[1], parsed.echo, [ev.ResponseCreated(response_id=key[1]), final])
        return json_response(obj, headers=headers)

    async def _stream(
        self,
        agent: Responder,
        parsed: ResponsesRequest,
        key: LogKey,
        record: SessionRecord | None,
        send: SendChunk,
        request_body: bytes,
        charge: Charge | None,
    ) -> None:
        store = record is not None
        encoder = StreamEncoder(key[1], parsed.echo)
        text = encoder.text
        render = encoder.sse

        async def sink(event: ev.Event) -> None:
            # The agent runs in this task; each event is rendered and queued
            # for the socket as it is emitted: no channel, no task switch.
            if type(event) is ev.ResponseDelta:
                delta = event.delta
                if type(delta) is DeltaText:
                    frame = text(delta.text)
                    if frame:
                        await send(frame)
                    return
            frame = render(event)
            if frame:
                await send(frame)

        if store:
            _append(self._log, key, ev.ResponseCreated(response_id=key[1]))
        outcome: ResponseOutcome | None = None
        final: ev.Event | None = None
        try:
            runner = self.app.turns.runner(agent, parsed.turn, sink, stamp=False, charge=charge)
            outcome = await self._run(key, runner)
            final = self._final(outcome, parsed.turn)
        finally:
            if store:
                # Without an outcome the client left: what it saw is all there is.
                _append(self._log, key, final or ev.ResponseCancelled(response_id=key[1]))
                self._finish(key, record, outcome)
        assert outcome is not None and final is not None
        tail = render(final) if outcome.final is None else b""
        signer = self.app.response_signer
        extra = b""
        if signer is not None and outcome.status in ("completed", "requires_action"):
            extra += response_signature_event(signer(outcome.tracker.text, request_body))
        if outcome.balance is not None:
            extra += encode_json(orjson.dumps(balance_fields(outcome.balance)), event=BALANCE_EVENT)
        if extra:
            tail += SSE_DONE + extra
        if store:
            await self._log.flush()
        if tail:
            await send(tail)

    async def _run(self, key: LogKey, runner: ResponseRunner) -> ResponseOutcome:
        """Run a foreground turn; a response continuing it may stop it (busy policy)."""
        place = self._places.get(key)
        if place is not None:
            place.bind(runner.cancel)
        return await runner.run()

    # --- background responses ------------------------------------------------------

    async def _start_background(
        self,
        parsed: ResponsesRequest,
        key: LogKey,
        record: SessionRecord,
        charge: Charge | None,
        request: Request,
        agent: Responder,
    ) -> Response | StreamingResponse:
        runner = self.app.turns.runner(
            agent, parsed.turn, partial(self._log_event, key), charge=charge
        )
        self.running[key] = runner
        place = self._places.get(key)
        if place is not None:
            place.bind(runner.cancel)  # a response continuing it may stop it
        try:
            await self._log.flush()  # findable on every process before its id is handed out
        except Exception:
            self.running.pop(key, None)
            self._release_place(key)
            self._log.release(key)
            if charge is not None:
                await charge.settle(None, used=False)
            raise
        self._launch(partial(self._run_background, key, runner, record))
        if parsed.stream:
            return self._follow_response(key, parsed.echo, -1, request.principal)
        return json_response(response_object(key[1], parsed.echo, status="queued", output=[]))

    async def _log_event(self, key: LogKey, event: ev.Event) -> None:
        _append(self._log, key, event)

    def _launch(self, job: Callable[[], Awaitable[None]]) -> None:
        background = self.app.background
        if background is not None:
            background.start_soon(job, name="uamp-responses-background")
        else:
            trio.lowlevel.spawn_system_task(job, name="uamp-responses-background")

    async def _run_background(
        self, key: LogKey, runner: ResponseRunner, record: SessionRecord
    ) -> None:
        await self.jobs.run(
            self._log,
            key,
            runner,
            partial(self._final, turn=runner.request),
            partial(self._finish, key, record),
        )

    async def _recover(self, key: LogKey, record: SessionRecord, principal: Principal) -> None:
        """Carry on (or end) a response whose process died, once over all processes."""
        event_log = self._log
        lost = record.node
        if record.running is None or lost == event_log.node or key in self.running:
            return
        if await event_log.alive(lost) or not await event_log.claim(key, f"adopt@{lost}"):
            return
        agent = self.app.agents.get(record.agent)
        if agent is None:
            return
        await event_log.adopt(key)
        log.info("response %s: carried on after process %s was lost", key[1], lost)
        self._launch(partial(carry_on, event_log, key, record, agent, principal, self.app))

    # --- stored responses ------------------------------------------------------------

    async def _record_of(self, key: LogKey, *, param: str | None = None) -> SessionRecord:
        record = await load_stored(self._log, key)
        if record is None:
            raise _not_found(key[1], param)
        return record

    async def _view(
        self, key: LogKey, principal: Principal
    ) -> tuple[SessionRecord, dict[str, Any]]:
        record = await self._record_of(key)
        await self._recover(key, record, principal)
        return record, await stored_object(self._log, key, record)

    async def retrieve(self, request: Request) -> Response | StreamingResponse:
        """``GET .../responses/{id}``, with ``stream=true``: the events, then live."""
        key: LogKey = (request.principal.key, request.path_params["response_id"])
        query = _query(request)
        if query.get("stream") not in ("true", "1"):
            _, obj = await self._view(key, request.principal)
            return json_response(obj)
        record = await self._record_of(key)
        after = _int_param(query, "starting_after", -1)
        try:
            echo = await replayable_echo(self._log, key, record)
        except NotReplayable as exc:
            raise HTTPError(exc.status, str(exc), code=exc.code, param=exc.param) from None
        await self._recover(key, record, request.principal)
        return self._follow_response(key, echo, after, request.principal)

    def _follow_response(
        self, key: LogKey, echo: dict[str, Any], after: int | None, principal: Principal
    ) -> StreamingResponse:
        async def produce(send: SendChunk) -> None:
            await self._follow(send, key, echo, -1 if after is None else after, principal)

        return StreamingResponse(producer=produce, headers=list(SSE_HEADERS))

    async def _follow(
        self, send: SendChunk, key: LogKey, echo: dict[str, Any], after: int, principal: Principal
    ) -> None:
        """Render ``key`` 's log as the Responses stream, live until its terminal event."""
        await follow(
            self._log, key, echo, after, send, partial(self._recover, key, principal=principal)
        )

    async def delete(self, request: Request) -> Response:
        """``DELETE .../responses/{id}``: a running one is cancelled first."""
        rid = request.path_params["response_id"]
        key: LogKey = (request.principal.key, rid)
        record = await self._record_of(key)
        if record.running is not None:
            await self._stop(key, record, request.principal)
        await self._log.drop(key)
        await self._log.flush()
        return json_response({"id": rid, "object": "response.deleted", "deleted": True})

    async def cancel(self, request: Request) -> Response:
        """``POST .../responses/{id}/cancel``: background responses only."""
        key: LogKey = (request.principal.key, request.path_params["response_id"])
        record = await self._record_of(key)
        kept = stored_part(record)
        assert kept is not None
        if not kept["echo"].get("background"):
            raise HTTPError(
                400, "Only a background response can be cancelled.", code="invalid_value"
            )
        if record.running is not None:
            await self._stop(key, record, request.principal)
        _, obj = await self._view(key, request.principal)
        return json_response(obj)

    async def _stop(self, key: LogKey, record: SessionRecord, principal: Principal) -> None:
        """Cancel a running response wherever it runs; wait (a while) for it to end."""
        await self.jobs.stop(self._log, key, partial(self._recover, key, principal=principal))

    async def input_items(self, request: Request) -> Response:
        """``GET .../responses/{id}/input_items``: ``after``, ``limit`` (1-100), ``order``."""
        key: LogKey = (request.principal.key, request.path_params["response_id"])
        kept = stored_part(await self._record_of(key))
        assert kept is not None
        try:
            return json_response(input_items_page(kept["input"], _query(request)))
        except ValueError as bad:
            raise HTTPError(400, str(bad), code="invalid_value") from None


def mount(app: Host) -> None:
    """Mount the Responses transport on ``app`` (a :data:`Transport`)."""
    ResponsesTransport(app).mount()
