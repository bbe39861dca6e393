"""The Vercel AI SDK UI message stream on ASGI: ``POST .../ai-sdk`` and its resume stream.

As ``uamp serve``'s (:mod:`uamp_trio.transports.ai_sdk`), rendered by
:mod:`uamp_proto.adapters.ai_sdk`: the chat's messages in, the answer as the
UI message stream (SSE with ``x-vercel-ai-ui-message-stream: v1``), client
tools as tool-input chunks the page answers in its next request.

An answer does not belong to the request that asked for it
(:mod:`uamp_stores.chat_answers`, which both servers drive): the POST starts
it in the app's task group (its lifespan's, else detached) and follows it
like any reader, so a client that aborts its fetch stops reading, not the
agent, and ``GET .../ai-sdk/{chatId}/stream`` (the SDK's resume) replays the
chat's running answer from its ``start`` chunk, then follows it live; ``204``
when it has none. Answers are found by ``(principal, agent, chat id)``:
another principal's chat answers 204 like one that never existed. A
principal has at most :data:`~uamp_stores.chat_answers.MAX_ANSWERS` answers
running, read or not (429 past it), an answer keeps at most
:data:`~uamp_stores.chat_answers.MAX_ANSWER_BYTES` of chunks (past it it ends
with an ``error`` chunk). On a shared event log (Redis) every answer's chunks
go to the log too and a resume on another process follows them from there,
ending ``interrupted`` when the writing process is gone.

A new POST for a chat whose answer still runs here meets the busy policy as
under ``uamp serve`` (docs/busy.md; the chat id is the conversation,
``"uamp.on_busy"`` in the body a request's own policy, ``enqueue`` by
default; :class:`uamp_stores.busy.ConversationGate`, the same gate):
``reject`` is ``409``, ``enqueue`` starts the new answer's stream at once and
runs its turn when the old one ends, ``interrupt`` and ``rollback`` end the
old answer (``abort``, ``finish``; a rolled-back one's ``finish`` says
``messageMetadata["uamp.on_busy"] == "rollback"``). POSTs that meet an
answer running in another process, and tool approvals that pause an answer,
are ``uamp serve``'s.
"""

from __future__ import annotations

import contextlib
import logging

import anyio

from uamp_proto import events as ev
from uamp_proto.adapters.ai_sdk import (
    HEADERS,
    MAX_CHAT_ID,
    AiSdkError,
    ChatRequest,
    StreamEncoder,
    frame,
    parse_chat_request,
    replay_chunks,
    turn_request,
)
from uamp_proto.adapters.completions import payment_error
from uamp_proto.busy import POLICY_KEY, BusyError, BusyPolicy
from uamp_proto.ids import random_ids
from uamp_proto.outcome import ResponseOutcome
from uamp_proto.payment import Charge, PaymentRequiredError
from uamp_proto.principal import Principal
from uamp_proto.responder import Responder
from uamp_stores.background import start_detached
from uamp_stores.busy import Slot, http_status
from uamp_stores.chat_answers import (
    MAX_ANSWER_BYTES,
    MAX_ANSWERS,
    Answer,
    AnswerKey,
    AnswerTask,
    AnswerTooLarge,
    RunningAnswers,
    follow_log,
    resumable,
    too_many_answers,
)
from uamp_stores.event_log import EventLog
from uamp_stores.health import StoreUnavailable

from ..app import Host
from ..http import HTTPError, JsonReply, Reply, Request, StreamReply, Write
from ..turns import Turn

__all__ = ["mount"]

log = logging.getLogger("uamp_asgi.ai_sdk")


class _AiSdk:
    """The AI SDK endpoints of a :class:`~uamp_asgi.app.Host` (see the module docstring)."""

    def __init__(
        self,
        host: Host,
        *,
        max_answers: int = MAX_ANSWERS,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
    ) -> None:
        self.host = host
        self.max_answers = max_answers
        self.max_answer_bytes = max_answer_bytes
        self.running = RunningAnswers()
        #: The busy policy per chat (docs/busy.md): the app's gate (``Config.on_busy``).
        self.gate = host.conversations

    @property
    def log(self) -> EventLog:
        store = self.host.event_log
        store.ensure_running(self.host.background)  # its writer, heartbeat and inbox
        return store

    async def chat(self, request: Request) -> Reply:
        """``POST .../ai-sdk``: start an answer and follow it."""
        agent = self.host.resolve_agent(request.path_params)
        try:
            parsed = parse_chat_request(request.json())
        except AiSdkError as exc:
            raise HTTPError(400, exc.message, code=exc.code) from None
        principal = request.principal
        key: AnswerKey = (principal.key, agent.name, parsed.chat_id)
        try:
            policy = self.gate.policy(parsed.extra)
        except BusyError as exc:
            raise HTTPError(400, str(exc), code=exc.code) from None
        # Superseding the chat's own answer leaves no more running: never refused.
        held = self.running.held(principal.key)
        if key not in self.running.answers and held >= self.max_answers:
            raise HTTPError(
                429,
                too_many_answers(self.max_answers),
                code="too_many_answers",
                headers=[("retry-after", "1")],
            )
        try:
            # The chat's answer running here: the busy policy (docs/busy.md).
            slot = self.gate.enter(("ai-sdk", *key), principal, policy)
        except BusyError as exc:
            raise HTTPError(http_status(exc), str(exc), code=exc.code) from None
        response_id = random_ids("resp")
        token = request.headers.get("x-payment")
        try:
            # Locked before the stream starts; the turn settles it.
            charge = await self.host.open_charge(agent, token, response_id, principal)
        except PaymentRequiredError as unpaid:
            slot.close()
            return JsonReply(payment_error(unpaid.accepts(), unpaid.details()), 402)
        except BaseException:
            slot.close()
            raise
        answer = self._start(
            agent, parsed, key, response_id, token, principal, charge, request, slot
        )
        if answer.logging:
            # In the shared log before the client hears of the answer: a
            # resume on another process finds it.
            with contextlib.suppress(StoreUnavailable):
                await self.log.flush()

        async def produce(write: Write) -> None:
            await answer.follow(write, replay=False)

        return StreamReply(produce, headers=list(HEADERS))

    def _start(
        self,
        agent: Responder,
        parsed: ChatRequest,
        key: AnswerKey,
        response_id: str,
        token: str | None,
        principal: Principal,
        charge: Charge | None,
        request: Request,
        slot: Slot,
    ) -> Answer:
        continued = parsed.continued
        message_id = continued["id"] if continued is not None else random_ids("msg")
        encoder = StreamEncoder(message_id, random_ids, client_tools=parsed.client_tools)
        prefix = replay_chunks(continued, random_ids) if continued is not None else []
        answer = Answer(key, response_id, frame(encoder.start()[0]), [frame(c) for c in prefix])
        turn = turn_request(
            parsed,
            agent=agent.name,
            response_id=response_id,
            payment_token=token,
            principal=principal,
        )
        run = _Run(self, answer, encoder, request.body, slot, charge)
        answer.runner = run.turn = self.host.turns.turn(agent, turn, run.sink, charge=charge)
        self.running.started(principal.key)
        if slot.ready:
            run.begin()
        start_detached(self.host.background, run.run, "uamp-ai-sdk-answer", "an AI SDK answer")
        return answer

    async def resume(self, request: Request) -> Reply:
        """``GET .../ai-sdk/{chatId}/stream``: the active answer from its start, or 204."""
        agent = self.host.resolve_agent(request.path_params)
        chat_id = request.path_params["chat_id"]
        if len(chat_id) > MAX_CHAT_ID:
            return JsonReply(b"", 204)
        key: AnswerKey = (request.principal.key, agent.name, chat_id)
        answer = self.running.answers.get(key)
        if answer is not None and not answer.done:
            found = answer

            async def replay(write: Write) -> None:
                await found.follow(write, replay=True)

            return StreamReply(replay, headers=list(HEADERS))
        if not self.host.event_log.shared:
            return JsonReply(b"", 204)
        store = self.log
        try:
            logged = await resumable(store, key)
        except StoreUnavailable as down:
            raise HTTPError(503, down.message, code=down.code) from None
        if logged is None:
            return JsonReply(b"", 204)
        lkey, leg, node = logged

        async def from_log(write: Write) -> None:
            await follow_log(store, write, lkey, leg, node)

        return StreamReply(from_log, headers=list(HEADERS))


class _Run(AnswerTask):
    """The task of one answer: runs the turn, renders its events, ends the answer."""

    def __init__(
        self,
        t: _AiSdk,
        answer: Answer,
        encoder: StreamEncoder,
        body: bytes,
        slot: Slot,
        charge: Charge | None,
    ) -> None:
        super().__init__(answer, encoder, t.host.event_log, t.running, body)
        self.t = t
        #: The chat's place under the busy policy, held until the turn ends.
        self.slot = slot
        self.charge = charge
        self.turn: Turn | None = None

    def begin(self) -> None:
        """The turn's time has come: the chat's answer is this one (and in the shared log)."""
        self.t.running.answers[self.answer.key] = self.answer
        if self.t.log.shared:  # (its writer runs once it is used)
            self.chatlog.open(self.answer)

    async def sink(self, event: ev.Event) -> None:
        """Render one event of the turn into the answer."""
        chunks = self.encoder.feed(event)
        if chunks:
            self._emit(chunks)
        if self.answer.size > self.t.max_answer_bytes:
            raise AnswerTooLarge

    async def run(self) -> None:
        try:
            await self._run()
        finally:
            self.slot.close()  # the chat's next message goes on
            if self.charge is not None:  # a turn that never ran (a no-op once it settled)
                with anyio.CancelScope(shield=True):
                    await self.charge.settle(None, used=False)

    async def _run(self) -> None:
        turn, slot = self.turn, self.slot
        assert turn is not None
        outcome: ResponseOutcome | None = None
        failure: str | None = None
        try:
            if not slot.ready:
                await slot.wait()  # enqueue: after the chat's earlier answers
                self.begin()
            slot.bind(turn.cancel)  # a later message may stop it (interrupt, rollback)
            outcome = await turn.run()
        except AnswerTooLarge:
            failure = f"The answer exceeded {self.t.max_answer_bytes} bytes and was stopped."
        except Exception:  # a background task must never raise
            log.exception("chat answer %s failed", self.answer.leg)
            failure = "The server failed while answering."
        except BaseException:  # cancelled: the server stops
            with anyio.CancelScope(shield=True):
                self._end(self._failed("The server stopped this answer."))
                await self._close_log()
            raise
        if outcome is None:
            tail = self._failed(failure or "The server failed while answering.")
        else:
            tail = self._signed_end(outcome, self.t.host.config.response_signer)
            if slot.dropped and outcome.status == "cancelled":
                # The chat's messages are the client's: a rolled-back answer says so.
                meta = tail[-1].setdefault("messageMetadata", {})
                meta[POLICY_KEY] = BusyPolicy.ROLLBACK.value
        self._end(tail)
        with anyio.CancelScope(shield=True):
            await self._close_log()


def mount(host: Host) -> None:
    """Register ``POST .../ai-sdk`` and its resume."""
    t = _AiSdk(host)
    host.route("POST", "/ai-sdk", t.chat)
    host.route("GET", "/ai-sdk/{chat_id}/stream", t.resume)
