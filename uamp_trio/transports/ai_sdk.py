"""The Vercel AI SDK transport: ``POST /agents/{name}/ai-sdk`` and its resume stream.

Endpoints (and the same at the root, for a single agent):

``POST /agents/{name}/ai-sdk``
    What ``DefaultChatTransport`` sends (``api`` set to this URL); the
    answer is a UI message stream (:mod:`uamp_proto.adapters.ai_sdk`). The
    chat ``id`` is the turn's UAMP session.
``GET /agents/{name}/ai-sdk/{chatId}/stream``
    The SDK's resume (``resume: true``, ``resumeStream()``): the chat's
    active answer replayed from its ``start`` chunk, then followed live;
    ``204`` when the chat has no answer in progress.

Theory of operation
-------------------
An answer does not belong to the request that asked for it: the POST starts
it as an :class:`Answer` in :attr:`Host.background
<uamp_trio.hosting.host.Host.background>` (the server's nursery, so a
graceful shutdown ends it) and then follows it like any reader. A client
that aborts its fetch (a page reload, a lost connection) stops reading, not
the agent; a resume reads the same answer again from its start. A new POST
for a chat whose answer still runs meets the busy policy (docs/busy.md;
the chat id is the conversation, ``"uamp.on_busy"`` in the body a request's
own policy): ``reject`` is ``409``, ``enqueue`` starts the new answer's
stream at once and runs its turn when the old one ends, ``interrupt`` and
``rollback`` end the old answer (``abort``, ``finish``; a rolled-back one's
``finish`` says ``messageMetadata["uamp.on_busy"] == "rollback"``: the
chat's messages are the client's, so the client drops the turn) and start
the new one.

Answers are found by ``(principal, agent, chat id)``: another principal's
chat answers ``204`` like one that never existed (docs/security.md,
Ownership). Each principal has at most :data:`MAX_ANSWERS` answers running,
read or not -- a client that left is noticed only at the stream's next
write, which a silent agent never makes -- (``429`` past it), and an
answer's chunks, kept for replays, are bounded by
:data:`MAX_ANSWER_BYTES` (past it the answer ends with an ``error`` chunk).

Across processes (docs/scale-out.md): when the event log is shared (Redis),
every answer's chunks also go to it, under the session id ``ai-sdk:{agent}:
{chat id}`` of the caller's principal, with a record naming the running
answer and its process. A resume that reaches another process streams the
answer from the log as it is written; when the writing process is gone the
replay ends ``interrupted``. A POST for a chat whose answer runs in another
live process asks that process to stop it first (:meth:`EventLog.ask
<uamp_stores.event_log.EventLog.ask>`) under ``interrupt`` and
``rollback``, is refused under ``reject``, and waits for it to end under
``enqueue``.

A human in the loop (docs/human-in-the-loop.md): when the agent asks to
run a tool call that needs approval, the answer shows the call and the
SDK's ``tool-approval-request`` (``approvalId`` = the interrupt id) and
finishes; the turn stays paused on the server (:attr:`AiSdkTransport.paused`).
The client's ``addToolApprovalResponse`` puts the decision on the tool part
and its next POST carries it: the decision answers the interrupt and that
POST streams the rest of the same turn, in the same assistant message. A
question (no SDK form) is a ``data-uamp-interrupt`` part naming it, to be
answered by id from a client that can; an interrupt answered from any other
transport lets the turn go on, and the chat's next POST streams what it
said meanwhile. A POST that answers nothing while the turn waits is a new
message on a busy chat: the policy decides.

Payment (spec 004): the price is locked before the stream starts; an unpaid
POST is answered ``402`` with the pre-flight JSON error of the Completions
endpoint. Signing and the payment balance go into the ``finish`` chunk's
``messageMetadata`` (``signature``, ``paymentBalance``), beside ``usage``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any, Final

import trio

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.adapters._human import ask_of, is_approval
from uamp_proto.adapters.ai_sdk import (
    HEADERS,
    MAX_CHAT_ID,
    AiSdkError,
    ChatRequest,
    StreamEncoder,
    frame,
    parse_approval_responses,
    parse_chat_request,
    replay_chunks,
    turn_request,
)
from uamp_proto.adapters.completions import payment_error
from uamp_proto.busy import POLICY_KEY, BusyError, BusyPolicy
from uamp_proto.ids import IdSource, random_ids
from uamp_proto.payment import Charge, PaymentRequiredError
from uamp_proto.principal import Principal
from uamp_proto.responder import Responder, with_interrupts
from uamp_proto.resume import ResumeError
from uamp_stores.busy import Slot, http_status
from uamp_stores.chat_answers import (
    HEARTBEAT,
    LOG_WAIT,
    MAX_ANSWER_BYTES,
    MAX_ANSWERS,
    Answer,
    AnswerKey,
    AnswerTask,
    AnswerTooLarge,
    RunningAnswers,
    follow_log,
    log_session,
    resumable,
    too_many_answers,
)
from uamp_stores.event_log import EventLog
from uamp_stores.health import StoreUnavailable

from ..engines.http import (
    HTTPError,
    Request,
    Response,
    SendChunk,
    StreamingResponse,
    json_response,
)
from ..hosting.host import Host
from ..hosting.interrupts import InterruptNotFound, InvalidAnswer, ResponsePort
from ..hosting.parked import DEFAULT_LINGER, waiting_on
from ..hosting.router import RouteMeta
from ..hosting.turns import ResponseRunner

__all__ = ["MAX_ANSWERS", "MAX_ANSWER_BYTES", "AiSdkTransport", "mount", "transport"]

#: What middleware knows of these routes: OpenAI-shaped error objects.
ROUTES = RouteMeta(transport="ai_sdk", error_style="openai")

log = logging.getLogger("uamp_trio.ai_sdk")

#: Events a turn paused for a person keeps while no answer shows them.
MAX_HELD: Final = 4096


class AiSdkTransport:
    """The AI SDK endpoints of an :class:`~uamp_trio.app.App` (see the module docstring).

    Args:
        app: The app to mount on.
        ids: Id source for messages, parts and responses.
        max_answers: Answers one principal may have running at once.
        max_answer_bytes: The most chunk bytes one answer keeps.
    """

    def __init__(
        self,
        app: Host,
        *,
        ids: IdSource = random_ids,
        max_answers: int = MAX_ANSWERS,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
    ) -> None:
        self.app = app
        self.ids = ids
        self.max_answers = max_answers
        self.max_answer_bytes = max_answer_bytes
        #: The answers running in this process.
        self.running = RunningAnswers()
        self.answers = self.running.answers
        #: Turns paused for a person whose answer has ended, by chat.
        self.paused: dict[AnswerKey, _Run] = {}

    @property
    def log(self) -> EventLog:
        """The app's event log, its flusher, heartbeat and inbox running once it is used."""
        store = self.app.stores.event_log
        store.ensure_running(self.app.background)
        return store

    def mount(self) -> None:
        """Register the routes on the app."""
        self.app.agent_route("POST", "/ai-sdk", self.chat, label="Vercel AI SDK", meta=ROUTES)
        self.app.agent_route("GET", "/ai-sdk/{chat_id}/stream", self.resume, meta=ROUTES)

    # --- POST: one answer ------------------------------------------------------

    async def chat(self, request: Request) -> Response | StreamingResponse:
        """``POST .../ai-sdk``: start an answer and stream it."""
        agent = self.app.resolve_agent(request.path_params)
        try:
            chat = parse_chat_request(await request.json())
        except AiSdkError as exc:
            raise HTTPError(400, exc.message, code=exc.code) from None
        principal = request.principal
        key: AnswerKey = (principal.key, agent.name, chat.chat_id)
        gate = self.app.conversations
        try:
            policy = gate.policy(chat.extra)
        except BusyError as exc:
            raise HTTPError(400, str(exc), code=exc.code) from None
        paused = self.paused.get(key)
        if paused is not None:
            went_on = await self._answer_paused(paused, chat, principal)
            if went_on is not None:
                return went_on
        # Superseding the chat's own answer leaves no more running: never refused.
        if key not in self.answers and self.running.held(principal.key) >= self.max_answers:
            raise HTTPError(
                429,
                too_many_answers(self.max_answers),
                code="too_many_answers",
                headers=[("retry-after", "1")],
            )
        await self._elsewhere(key, principal, policy)
        try:
            # The chat's answer running here: the busy policy (docs/busy.md).
            slot = gate.enter(("ai-sdk", *key), principal, policy)
        except BusyError as exc:
            raise HTTPError(http_status(exc), str(exc), code=exc.code) from None
        response_id = self.ids("resp")
        token = request.headers.get("x-payment")
        try:
            # Locked before the stream starts; the turn driver settles it.
            charge = await self.app.open_charge(agent.name, token, response_id, principal=principal)
        except PaymentRequiredError as unpaid:
            slot.close()
            return json_response(payment_error(unpaid.accepts(), unpaid.details()), 402)
        except BaseException:
            slot.close()
            raise
        answer = self._start(
            agent, chat, key, response_id, token, principal, charge, request.body, slot
        )
        if answer.logging:
            # The chat's record is in the shared log before the client hears
            # of the answer: a resume or a POST on another process finds it.
            with contextlib.suppress(StoreUnavailable):
                await self.log.flush()

        async def produce(send: SendChunk) -> None:
            await answer.follow(send, replay=False)

        return StreamingResponse(producer=produce, headers=list(HEADERS))

    async def _answer_paused(
        self, run: _Run, chat: ChatRequest, principal: Principal
    ) -> StreamingResponse | None:
        """A POST for a chat whose turn waits for a person: its decisions, and the rest.

        ``None`` when it answers nothing that is pending while the turn still
        waits: then it supersedes the turn like any new POST.
        """
        key = run.answer.key
        waiting = await waiting_on(self.app.interrupts, principal, key[1], key[2])
        pending = {it.id: it for it in waiting}
        decisions = parse_approval_responses(chat, pending)
        if not decisions and pending:
            return None  # a new message: the busy policy decides (the paused turn is active)
        try:
            for iid, decision in decisions:
                await self.app.interrupts.answer(principal, iid, decision)
        except (InterruptNotFound, InvalidAnswer) as exc:
            raise HTTPError(409, str(exc), code=exc.code) from None
        self.paused.pop(key, None)
        continued = chat.continued
        message_id = continued["id"] if continued is not None else self.ids("msg")
        encoder = StreamEncoder(message_id, self.ids, client_tools=chat.client_tools)
        prefix = replay_chunks(continued, self.ids) if continued is not None else []
        answer = Answer(
            key,
            self.ids("leg"),
            frame(encoder.start()[0]),
            [frame(c) for c in prefix],
            heartbeat=HEARTBEAT,
        )
        answer.runner = run.answer.runner
        self.answers[key] = answer
        self.running.started(principal.key)
        run.attach(answer, encoder)

        async def produce(send: SendChunk) -> None:
            await answer.follow(send, replay=False)

        return StreamingResponse(producer=produce, headers=list(HEADERS))

    async def _elsewhere(self, key: AnswerKey, principal: Principal, policy: BusyPolicy) -> None:
        """The busy policy for the chat's answer running in another process (a shared log).

        Raises:
            HTTPError: ``409`` ``conversation_busy`` under ``reject``.
        """
        if not self.app.stores.event_log.shared or key in self.answers:
            return
        store = self.log
        lkey = (principal.key, log_session(key[1], key[2]))
        while True:
            try:
                record = await store.load(lkey)
            except ResumeError:
                return
            node = record.node
            if record.running is None or node == store.node or not await store.alive(node):
                return
            if policy is BusyPolicy.REJECT:
                raise HTTPError(
                    409,
                    "An answer of this chat is running (in another process); wait for it to end.",
                    code="conversation_busy",
                )
            if policy is not BusyPolicy.ENQUEUE:
                drop = policy is BusyPolicy.ROLLBACK
                await store.ask(node, lkey, {"op": "cancel", "drop": drop})
                return
            await trio.sleep(LOG_WAIT)  # enqueue: until that answer ends

    def _start(
        self,
        agent: Responder,
        chat: ChatRequest,
        key: AnswerKey,
        response_id: str,
        token: str | None,
        principal: Principal,
        charge: Charge | None,
        body: bytes,
        slot: Slot,
    ) -> Answer:
        """Create the answer and start its task (no checkpoint: the charge is in its hands).

        An answer whose turn waits for the chat's earlier one (``slot``) is
        registered (and logged) once its turn comes.
        """
        continued = chat.continued
        message_id = continued["id"] if continued is not None else self.ids("msg")
        encoder = StreamEncoder(message_id, self.ids, client_tools=chat.client_tools)
        prefix = replay_chunks(continued, self.ids) if continued is not None else []
        answer = Answer(
            key,
            response_id,
            frame(encoder.start()[0]),
            [frame(c) for c in prefix],
            heartbeat=HEARTBEAT,
        )
        self.running.started(principal.key)
        turn = turn_request(
            chat,
            agent=agent.name,
            response_id=response_id,
            payment_token=token,
            principal=principal,
        )
        background = self.app.background
        port = self.app.interrupts.port(turn, supported=background is not None)
        turn = with_interrupts(turn, port)
        run = _Run(self, answer, encoder, charge, body, slot)
        run.port = port
        if slot.ready:
            run.begin()
        answer.runner = self.app.turns.runner(agent, turn, run.sink, stamp=False, charge=charge)
        port.emit = answer.runner.emit
        if background is not None:
            background.start_soon(run.run, name="uamp-ai-sdk-answer")
        else:
            trio.lowlevel.spawn_system_task(run.run, name="uamp-ai-sdk-answer")
        return answer

    def _forget(self, answer: Answer) -> None:
        self.running.forget(answer)

    # --- GET: resume -----------------------------------------------------------------

    async def resume(self, request: Request) -> Response | StreamingResponse:
        """``GET .../ai-sdk/{chatId}/stream``: the active answer from its start, or 204."""
        agent = self.app.resolve_agent(request.path_params)
        chat_id = request.path_params["chat_id"]
        if len(chat_id) > MAX_CHAT_ID:
            return Response(status=204)
        principal = request.principal
        answer = self.answers.get((principal.key, agent.name, chat_id))
        if answer is not None and not answer.done:
            found = answer

            async def replay(send: SendChunk) -> None:
                await found.follow(send, replay=True)

            return StreamingResponse(producer=replay, headers=list(HEADERS))
        if not self.app.stores.event_log.shared:
            return Response(status=204)
        store = self.log
        logged = await resumable(store, (principal.key, agent.name, chat_id))
        if logged is None:
            return Response(status=204)
        lkey, leg, node = logged

        async def from_log(send: SendChunk) -> None:
            await follow_log(store, send, lkey, leg, node)

        return StreamingResponse(producer=from_log, headers=list(HEADERS))


class _Run(AnswerTask):
    """The task of one answer: runs the turn, renders its events, ends the answer."""

    def __init__(
        self,
        transport: AiSdkTransport,
        answer: Answer,
        encoder: StreamEncoder,
        charge: Charge | None,
        body: bytes,
        slot: Slot | None = None,
    ) -> None:
        super().__init__(answer, encoder, transport.app.stores.event_log, transport.running, body)
        self.transport = transport
        #: The chat's place under the busy policy, held until the turn ends.
        self.slot = slot
        self.charge = charge
        self.app = transport.app
        #: Paused for a person: the answer ended, the turn waits (see the module docstring).
        self.paused = False
        #: What the turn said while no answer showed it.
        self.held: list[ev.Event] = []
        #: A newer POST superseded the paused turn.
        self.dropped = False
        self._attached = trio.Event()
        #: The turn's interrupt port, closed when the turn ends.
        self.port: ResponsePort | None = None

    def cancel(self) -> None:
        """Stop the turn (a newer POST interrupts or rolls it back)."""
        self.dropped = True
        if self.answer.runner is not None:
            self.answer.runner.cancel()

    def begin(self) -> None:
        """The turn's time has come: the chat's answer is this one (and in the log)."""
        self.transport.answers[self.answer.key] = self.answer
        self.open_log()

    def attach(self, answer: Answer, encoder: StreamEncoder) -> None:
        """A POST takes the paused turn up: show the rest in ``answer``."""
        self.answer, self.encoder = answer, encoder
        self.paused = False
        self.open_log()
        held, self.held = self.held, []
        for event in held:
            self._show(event)
        self._attached.set()
        self._attached = trio.Event()

    def _pause(self, chunks: list[dict[str, Any]]) -> None:
        """Show the ask, end the answer; the turn waits for the person."""
        chunks += self.encoder.finish("tool-calls")
        self._emit(chunks)
        self.paused = True
        answer = self.answer
        answer.close()
        answer.finished.set()
        self.transport._forget(answer)
        self.transport.paused[answer.key] = self

    def open_log(self) -> None:
        """Start the chat's log in the shared event log (when there is one); never waits."""
        if not self.app.stores.event_log.shared:
            return
        self.transport.log.ensure_running(self.app.background)
        self.chatlog.open(self.answer, self._answer_message)

    async def _answer_message(self, message: dict[str, Any]) -> dict[str, Any]:
        """Another process asks about this chat: a newer POST stops this answer."""
        if message.get("op") == "cancel":
            if message.get("drop") is True and self.slot is not None:
                self.slot.stopped = "drop"  # rolled back from another process
            self.answer.cancel()
            with trio.move_on_after(5):
                await self.answer.finished.wait()
                # Its last writes are in the store before the asker starts anew.
                with contextlib.suppress(StoreUnavailable):
                    await self.transport.log.flush()
            return {"ok": True}
        return {"error": "unsupported"}

    async def sink(self, event: ev.Event) -> None:
        if type(event) is ev.ResponseDelta and not self.paused:
            delta = event.delta
            # The hot path: a text delta continuing the open text part is one
            # frame from the encoder's template, no chunk dicts.
            data = self.encoder.text_frame(delta.text) if type(delta) is ty.DeltaText else None
            if data is not None:
                answer = self.answer
                # answer.push_one(data), inline: this runs for every delta.
                answer.buf += data
                answer.size += len(data)
                if answer.waiting:
                    answer.wake()
                if answer.logging:
                    self.chatlog.append(data)
                if answer.size > self.transport.max_answer_bytes:
                    raise AnswerTooLarge
                return
        if self.paused:
            self.held.append(event)
            if len(self.held) > MAX_HELD:
                raise AnswerTooLarge
            return
        self._show(event)
        if self.answer.size > self.transport.max_answer_bytes:
            raise AnswerTooLarge

    def _show(self, event: ev.Event) -> None:
        """Render one event into the answer (an interrupt pauses it)."""
        if isinstance(event, ev.InterruptRequest):
            if self.paused:
                self.held.append(event)
                return
            ask = ask_of(event)
            if is_approval(ask):
                chunks = self.encoder.request_approval(ask)
            else:
                shown = {"id": ask.id, "kind": ask.kind, "prompt": ask.prompt, "schema": ask.schema}
                chunks = [{"type": "data-uamp-interrupt", "id": ask.id, "data": shown}]
            self._pause(chunks)
            return
        if isinstance(event, ev.InterruptResolved):
            return
        if self.paused:
            self.held.append(event)
            return
        chunks = self.encoder.feed(event)
        if chunks:
            self._emit(chunks)

    async def run(self) -> None:
        slot = self.slot
        try:
            await self._run()
        finally:
            if slot is not None:
                slot.close()  # the chat's next message goes on
            if self.port is not None:
                self.port.close()  # no cycle keeps the request (and its conversation) alive

    async def _run(self) -> None:
        answer, runner = self.answer, self.answer.runner
        assert isinstance(runner, ResponseRunner)
        outcome = None
        failure: str | None = None
        try:
            slot = self.slot
            if slot is not None:
                if not slot.ready:
                    await slot.wait()  # enqueue: after the chat's earlier answers
                    self.begin()
                slot.bind(self.cancel)
            outcome = await runner.run()
        except AnswerTooLarge:
            failure = (
                f"The answer exceeded {self.transport.max_answer_bytes} bytes and was stopped."
            )
        except Exception:  # a background task must never raise
            log.exception("chat answer %s failed", answer.leg)
            failure = "The server failed while answering."
        except BaseException:  # cancelled: the server stops
            with trio.CancelScope(shield=True):
                self._end(self._failed("The server stopped this answer."))
                await self._close_log()
            raise
        finally:
            if self.charge is not None:
                with trio.CancelScope(shield=True):
                    await self.charge.settle(None, used=False)  # a no-op once the turn settled it
        while self.paused and not self.dropped:
            # It ended while paused (answered elsewhere): the chat's next POST shows the end.
            attached = self._attached
            with trio.move_on_after(DEFAULT_LINGER):
                await attached.wait()
            if not attached.is_set():
                break
        key = self.answer.key
        if self.transport.paused.get(key) is self:
            del self.transport.paused[key]
        if self.paused:  # nobody took it up, or a newer POST dropped it
            with trio.CancelScope(shield=True):
                await self._close_log()
            return
        tail = self._failed(failure) if failure is not None else self._tail(outcome)
        self._end(tail)
        with trio.CancelScope(shield=True):
            await self._close_log()

    def _tail(self, outcome: Any) -> list[dict[str, Any]]:
        tail = self._signed_end(outcome, self.app.response_signer)
        if self.slot is not None and self.slot.dropped and outcome.status == "cancelled":
            # The chat's messages are the client's: a rolled-back answer says so.
            tail[-1].setdefault("messageMetadata", {})[POLICY_KEY] = BusyPolicy.ROLLBACK.value
        return tail


def transport(
    *, ids: IdSource = random_ids, max_answers: int = MAX_ANSWERS
) -> Callable[[Host], None]:
    """A configured AI SDK transport to pass to :meth:`App.mount`."""

    def mount_configured(app: Host) -> None:
        AiSdkTransport(app, ids=ids, max_answers=max_answers).mount()

    return mount_configured


def mount(app: Host) -> None:
    """Mount the AI SDK transport on ``app`` (a :data:`Transport`)."""
    AiSdkTransport(app).mount()
