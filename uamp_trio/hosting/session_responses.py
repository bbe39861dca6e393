"""The session host's responses: one worker per session, the busy gate, the turn.

Theory of operation
-------------------
A ``response.create`` the core accepts is handed to its session's worker
(:meth:`ResponsePart._start_response`): one task per session, started by its
first response, that runs the session's responses one after another under
one cancel scope, replaced after each cancel (spawning a task and entering a
scope per response cost about as much as the core's work on it). On a
transport whose reader can run a response itself (the WebSocket's,
:attr:`inline_reader`), a session without a worker has none started: the
reader runs the response after its read (:meth:`ResponsePart.run_inline`)
and stays with it as its worker if it blocks
(:mod:`~uamp_trio.hosting.ws_connection`, "The reader runs the response"). A response
that starts in an idle conversation takes its place in the server's busy gate
only once somebody arrives behind it (docs/busy.md, :meth:`ConversationGate.defer
<uamp_stores.busy.ConversationGate.defer>`); a ``response.create`` held
behind a running one runs when its place comes (:meth:`ResponsePart._take_held`).

Each response: the token is checked (verified, not expired), the price
locked (:mod:`~uamp_trio.hosting.session_payment`), its record opened in the
event log (deferred to just after its first write when the store applies
writes at once), then the agent runs through the inline turn runner
(:class:`~uamp_trio.hosting.turns.ResponseRunner`), whose sink passes each
event through the core into the outbox (:meth:`ResponsePart._send`) with no
channel hop; client tools and payment raises run it again under the same
response id. The worker holds the events of each scheduler step and writes
them when the step ends (:func:`~uamp_trio.hosting.outbox.write_at_yields`).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Final

import trio

from uamp_proto import events as ev
from uamp_proto import flow
from uamp_proto import types as ty
from uamp_proto.busy import BUSY, POLICY_KEY, BusyError, BusyPolicy
from uamp_proto.codec import unstructure
from uamp_proto.errors import FlowControlError, LocalProtocolError
from uamp_proto.interrupts import advertised
from uamp_proto.principal import Principal
from uamp_proto.responder import ResponderError, TurnRequest
from uamp_proto.response import ResponseTracker
from uamp_proto.session_request import recoded, spoken_format, turn_request
from uamp_stores.busy import Slot
from uamp_stores.health import STORE_UNAVAILABLE

from ..engines.contexts import in_context
from .agents import AGENT_OFFLINE
from .interrupts import ResponsePort
from .outbox import OutboxClosed, write_at_yields
from .session_log import EventLogPart
from .session_payment import HostPayingAgent, PaymentPart
from .session_state import ResponseState, SessionGone, SessionState, session_error
from .turns import YIELD_EVERY, ResponseRunner, TurnStatus

__all__ = ["ResponsePart"]

log = logging.getLogger("uamp_trio.sessions")

#: The events that end a response.
_TERMINAL: Final = (ev.ResponseDone, ev.ResponseCancelled, ev.ResponseErrorEvent)


class ResponsePart(PaymentPart, EventLogPart):
    """The session host's responses (module docstring)."""

    def _start_response(self, session: SessionState, create: ev.ResponseCreate) -> None:
        ctx = self._contexts.get(session.id)
        if ctx is None:  # pragma: no cover - the core checked
            return
        if ctx.held and ctx.held[-1].create is create:
            return  # held behind the running response (_busy_create); the worker starts it
        if ctx.response is None:  # pragma: no cover - the core checked
            return
        response = ResponseState(ctx.response.response_id, self._message)
        if self._app is not None:
            gate = self._app.conversations
            key = self._busy_key(session)
            if not create.unknown:
                # The server's policy, and the conversation idle as the core
                # found it: the response runs, and enters its place in the
                # gate only if another message arrives for it meanwhile.
                enter = functools.partial(
                    self._enter_late, session, response, key, session.principal
                )
                if gate.defer(key, enter):
                    response.deferred = enter
            if response.deferred is None:
                try:
                    slot = gate.enter(key, session.principal, gate.policy(create.unknown))
                except BusyError:  # a bad policy (the core found the slot idle)
                    slot = gate.free()
                self._hold_slot(session, response, slot)
        session.response = response
        session.queued = (response, create)
        if not session.worker:
            session.worker = True
            if self.inline_reader and self.inline is None:
                self.inline = session  # the reader runs it after its read (run_inline)
            else:
                self._nursery.start_soon(self._work, session)
                self.outbox.woken = True  # the reader lets the worker run first
        elif session.idle.wake():
            self.outbox.woken = True

    # --- a busy session (docs/busy.md) ----------------------------------------------

    @staticmethod
    def _busy_key(session: SessionState) -> tuple[str, object, str]:
        return ("uamp", session.principal.key, session.id)

    def _busy_policy(self, create: ev.ResponseCreate) -> BusyPolicy:
        assert self._app is not None
        try:
            return self._app.conversations.policy(create.unknown)
        except BusyError as exc:
            raise LocalProtocolError(str(exc), code="invalid_request", field=POLICY_KEY) from None

    def _busy_create(self, sid: str, create: ev.ResponseCreate) -> Slot:
        """The core's question on a ``response.create`` while a response runs: hold or refuse."""
        session = self._sessions.get(sid)
        if session is None or self._app is None:
            raise LocalProtocolError("a response is in progress", code="response_in_progress")
        try:
            slot = self._app.conversations.enter(
                self._busy_key(session), session.principal, self._busy_policy(create)
            )
        except BusyError as exc:
            code = "response_in_progress" if exc.code == BUSY else exc.code
            raise LocalProtocolError(
                f"{exc} (send response.cancel to stop the running response)", code=code
            ) from None
        session.slots.append(slot)
        return slot

    def _enter_late(
        self, session: SessionState, response: ResponseState, key: object, principal: Principal
    ) -> None:
        """The gate's call for a deferred response: it enters its place now (it runs)."""
        response.deferred = None
        assert self._app is not None
        gate = self._app.conversations
        self._hold_slot(session, response, gate.enter(key, principal, gate.default))

    def _undefer(self, response: ResponseState | None) -> None:
        """``response`` ended before anybody arrived behind it: the gate forgets it."""
        enter = response.deferred if response is not None else None
        if enter is not None:
            assert response is not None and self._app is not None
            response.deferred = None
            self._app.conversations.undefer(enter.args[2], enter)

    def _hold_slot(self, session: SessionState, response: ResponseState, slot: Slot) -> None:
        """Give ``response`` its place; a later message may stop it through the place."""
        response.slot = slot
        if slot not in session.slots:
            session.slots.append(slot)

        def stop() -> None:
            if slot.dropped:  # rolled back: the core leaves its turn out of the history
                ctx = self._contexts.get(session.id)
                if ctx is not None:
                    ctx.drop_response = response.id
            self._cancel(session, response.id)

        slot.bind(stop)

    def _release_slot(self, session: SessionState, response: ResponseState | None) -> None:
        """``response`` ended: its place goes to the next held ``response.create``."""
        if response is None:
            return
        if response.deferred is not None:
            self._undefer(response)
            return
        if response.slot is None:
            return
        slot, response.slot = response.slot, None
        slot.close()
        if slot in session.slots:
            session.slots.remove(slot)

    def _take_held(self, session: SessionState) -> bool:
        """Queue the held ``response.create`` whose turn has come; ``False``: none has."""
        ctx = self._contexts.get(session.id)
        if ctx is None or not ctx.held or ctx.response is not None:
            return False
        held = next((h for h in ctx.held if isinstance(h.token, Slot) and h.token.ready), None)
        if held is None:
            return False
        slot = held.token
        assert isinstance(slot, Slot)
        create = self.conn.start_held(session.id, slot)
        response = ResponseState(held.response_id, None)
        self._hold_slot(session, response, slot)
        session.response = response
        session.queued = (response, create)
        return True

    def _request(
        self, session: SessionState, response_id: str, create: ev.ResponseCreate, port: bool = False
    ) -> TurnRequest | None:
        """The agent's request for the response running on ``session`` (``None``: none runs).

        With ``port`` (and an app), the request carries the response's
        interrupt port (docs/human-in-the-loop.md), made before it and bound
        to it after: one request built, not one more copied to hold the port.
        """
        ctx = self._contexts.get(session.id)
        if ctx is None or ctx.response is None or ctx.response.response_id != response_id:
            return None
        interrupts: ResponsePort | None = None
        if port and self._app is not None:
            client = ctx.client_capabilities
            interrupts = self._app.interrupts.port(
                None, supported=advertised(client.extensions if client is not None else None)
            )
        request = turn_request(
            ctx,
            create,
            agent=session.agent.name,
            transport=self._transport,
            token=session.token if self._app and self._app.authenticator else ctx.token,
            principal=session.principal,
            interrupts=interrupts,
        )
        if interrupts is not None and request is not None:
            interrupts.bind(request)
        return request

    async def _work(self, session: SessionState) -> None:
        """Run the session's responses one after another, until the session ends.

        One task per session, started by its first ``response.create``, rather
        than a task and a cancel scope per response: responses of a session
        never overlap (the core allows one at a time), and spawning a task
        and entering a scope cost about as much as the core's work on
        ``response.create``. ``response.cancel`` cancels :attr:`SessionState.scope`,
        which ends the response (also a wait for payment or tool results);
        the worker sends ``response.cancelled`` and goes on in a new scope.

        The worker holds the events it sends during each of its scheduler
        steps and writes them when the step ends (:func:`write_at_yields`),
        when the transport can (the WebSocket's writer is idle).
        """
        await write_at_yields(self._responses(session), self.outbox, session.put_opening)

    async def _responses(self, session: SessionState) -> None:
        """The body of :meth:`_work`."""
        task = trio.lowlevel.current_task()
        try:
            while self._sessions.get(session.id) is session:
                scope = session.scope = trio.CancelScope()
                session.stopped = False
                with scope:
                    while True:
                        job = session.queued
                        if job is None:
                            if not self._take_held(session):
                                await session.idle.park(task)
                            continue
                        if session.stopped or job[0].cancel_requested:
                            # Cancelled before it started (maybe before this
                            # scope existed), or a cancel came late for the one
                            # before: settle that in a fresh scope first.
                            break
                        session.queued = None
                        # The worker's context is never changed: a copy is fresh.
                        await self._run_job(session, job, contextvars.copy_context())
                await self._settle_cancel(session)
        except OutboxClosed:
            pass  # the connection is closing
        finally:
            session.worker = False
            session.scope = None

    def _run_job(
        self,
        session: SessionState,
        job: tuple[ResponseState, ev.ResponseCreate],
        context: contextvars.Context,
    ) -> Awaitable[None]:
        """Run one queued response in ``context``, a context of its own (engines/contexts.py).

        A worker and a reading task each run many responses in turn: what
        one response's agent sets in context variables (its run, a tool
        call's key, a user) is not seen by the next, as if each ran in a
        task of its own.
        """
        return in_context(self._job(session, job), context)

    async def _job(
        self, session: SessionState, job: tuple[ResponseState, ev.ResponseCreate]
    ) -> None:
        """The body of :meth:`_run_job`: the agent's capabilities checked before and after."""
        caps = session.agent.capabilities()
        if caps is not session.announced:
            await self._announce(session, caps)  # changed, or only equal
        await self._respond(session, *job)
        self._release_slot(session, job[0])
        caps = session.agent.capabilities()
        if caps is not session.announced:
            await self._announce(session, caps)

    async def _settle_cancel(self, session: SessionState) -> None:
        """After a cancel of the worker's scope: the cancelled response says so.

        Running or not yet started, it ends with ``response.cancelled``; the
        partial output is what the client got.
        """
        cancelled = session.response
        job = session.queued
        if job is not None and job[0].cancel_requested:
            cancelled = job[0]
            session.queued = None
        if cancelled is not None and cancelled.cancel_requested:
            try:
                await self._send_cancelled(session, cancelled)
            except SessionGone:
                pass  # the response had ended before the cancel landed
            finally:
                if session.response is cancelled:
                    session.response = None
                self._release_slot(session, cancelled)

    # --- the reader runs a response (ws_connection's "inline" responses) ----------

    async def run_inline(
        self, session: SessionState, scope: trio.CancelScope, blocking: Callable[[], None]
    ) -> None:
        """Run ``session``'s queued responses in the calling task, the transport's reader.

        ``scope`` is the reader's own (entered once per reading task, not
        per response): ``response.cancel`` cancels it as it does a worker's.
        ``blocking`` is called each time the responses yield to the
        scheduler; the reader hands its reading to a new task there and
        stays with the responses (:mod:`~uamp_trio.hosting.ws_connection`).
        A response that never blocks costs no task switch at all.
        """
        session.scope = scope
        session.stopped = False
        try:
            # Each response in a context of its own, a copy of the reader's:
            # what the agent sets in context variables stays out of the
            # reader's, of the task it hands the reading to, and of the next
            # response. The first runs in the run's own context (no wrapper
            # on the way to its first delta); any later one in a copy of its
            # own (_run_job).
            reader = contextvars.copy_context()
            await write_at_yields(
                self._inline_responses(session, reader),
                self.outbox,
                session.put_opening,
                blocking,
                reader.copy(),
            )
        except OutboxClosed:
            pass  # the connection is closing
        finally:
            session.worker = False
            session.scope = None

    async def _inline_responses(self, session: SessionState, reader: contextvars.Context) -> None:
        """The body of :meth:`run_inline`: :meth:`_responses` until the session is idle.

        The first response runs in the run's context, a fresh copy of
        ``reader`` (the reading task's); each later one in a copy of its own.
        """
        first = True
        while self._sessions.get(session.id) is session:
            job = session.queued
            if job is None:
                if not self._take_held(session):
                    return
                continue
            if session.stopped:
                return  # the reader settles it outside the cancelled scope (settle_inline)
            if job[0].cancel_requested:  # cancelled in the read that asked for it
                await self._settle_cancel(session)
                continue
            session.queued = None
            if first:
                first = False
                await self._job(session, job)
            else:
                await self._run_job(session, job, reader.copy())

    async def settle_inline(self, session: SessionState) -> None:
        """A cancel ended :meth:`run_inline`: say so; work left goes to a worker task."""
        try:
            await self._settle_cancel(session)
        except OutboxClosed:
            return
        if self._sessions.get(session.id) is not session or session.worker:
            return
        if session.queued is not None or self._take_held(session):
            session.worker = True
            self._nursery.start_soon(self._work, session)

    def unclaim_inline(self) -> None:
        """The reader stops before running its pending response: a worker task runs it."""
        session, self.inline = self.inline, None
        if session is not None:
            self._nursery.start_soon(self._work, session)

    async def _respond(
        self, session: SessionState, response: ResponseState, create: ev.ResponseCreate
    ) -> None:
        """Run one response; a cancel of the worker's scope propagates out."""
        self.outbox.producers += 1
        logged = session.id in self._logged
        if logged:
            opening = functools.partial(self._open_record, session.id, response.id, create)
            assert self.event_log is not None
            if self.event_log.applies_at_once:
                # Deferred to just after the response's first write, or to the
                # end of the worker's step, whichever comes first (and before
                # any event that changes the conversation, :meth:`_send`), and
                # so are the log entries of the events sent before then
                # (``response.created``, that delta), in order after it: a
                # store that applies each write at once is read by no one
                # before the step ends, so this is the log every reader sees;
                # the client gets its first delta sooner.
                session.opening = opening
            else:
                opening()  # queued before any of the response's events
        try:
            await self._run_response(session, response, create)
        except SessionGone:
            pass
        finally:
            self.outbox.producers -= 1
            if logged:
                session.put_opening()  # if still owed (its events are logged with it)
                self._put_record(session.id, running=None, input=[])
            if session.response is response and not response.cancel_requested:
                session.response = None

    def _open_record(self, sid: str, rid: str, create: ev.ResponseCreate) -> None:
        """Put the record of response ``rid`` starting: what it runs on, for a resume.

        Then log the events of ``rid`` sent while the record was deferred.
        """
        ctx = self._contexts.get(sid)
        tracker = ctx.response if ctx is not None else None
        inputs = []
        if tracker is not None:  # each message by its compiled hook, not the list walk
            inputs = [unstructure(m) for m in tracker.input_messages]
        self._put_record(sid, running=rid, input=inputs, request=create.event_id)
        session, entry = self._sessions.get(sid), self._logged.get(sid)
        if session is None or not session.unlogged:
            return
        unlogged, session.unlogged = session.unlogged, []
        if entry is not None:
            assert self.event_log is not None
            for data, event_id in unlogged:
                self.event_log.append(entry[0], data, event_id)

    async def _run_response(
        self, session: SessionState, response: ResponseState, create: ev.ResponseCreate
    ) -> None:
        rid = response.id
        if session.verifying is not None or self._sessions.get(session.id) is not session:
            await self._verified(session)
        if session.principal.expires_at is not None and session.principal.expired(self._clock()):
            # Spec 000 section 10.3: the session lives on; a session.update
            # with a fresh token lets its next response run.
            error = ty.ErrorInfo(
                code="unauthorized",
                message="The session's token has expired; send session.update with a fresh one.",
            )
            await self._send(session, response, ev.ResponseErrorEvent(error=error))
            return
        down = self._store_down()
        if down is not None:
            # The agent does not run: what it sent could not be kept for a resume.
            error = ty.ErrorInfo(code=STORE_UNAVAILABLE, message=down)
            await self._send(session, response, ev.ResponseErrorEvent(error=error))
            return
        ctx = self._contexts.get(session.id)
        app = self._app
        try:
            if (
                ctx is None
                or ctx.payment.blocks_content
                or (app is not None and app.payment_policy is not None)
            ):
                await self._preflight(session, response)  # else nothing to hold or lock
        except ResponderError as exc:  # the payment's time ran out
            error = ty.ErrorInfo(code=exc.code, message=exc.message)
            await self._send(session, response, ev.ResponseErrorEvent(error=error))
            return
        ctx = self._contexts.get(session.id)
        tracker = ctx.response if ctx is not None else None
        if tracker is not None and tracker.response_id != rid:
            tracker = None
        try:
            # The agent's calls of one response: again after client tools or
            # a payment (inline: a coroutine less on the way to the first delta).
            agent = HostPayingAgent(self, session, response, create)
            first = True
            while True:
                request = self._request(session, rid, create, port=True)
                if request is None:
                    return
                status = await self._run_turn(session, response, agent, request, first)
                first = False
                if status != "requires_action":
                    return
                # Section 3.2: wait for the client's tool.result events.
                while True:
                    ctx = self._contexts.get(session.id)
                    if ctx is None or ctx.response is None or ctx.response.response_id != rid:
                        return
                    if not ctx.response.pending_tool_calls:
                        break
                    await session.wakeup.park()
        finally:
            # However the response ended (done, failed, cancelled, session
            # gone, or never started): charge what it used, free the rest.
            if response.charge is not None or response.balance is not None:
                await self._settle_charge(session, response, tracker)

    async def _run_turn(
        self,
        session: SessionState,
        response: ResponseState,
        agent: HostPayingAgent,
        request: TurnRequest,
        first: bool,
    ) -> TurnStatus:
        """One call of ``agent.respond`` through the inline turn runner; returns how it ended.

        :class:`~uamp_trio.hosting.turns.ResponseRunner` owns the lifecycle
        (``response.created`` first unless this is a later tool round, one
        terminal event unless client tools are pending, error mapping); its
        sink passes each event through the core straight into the outbox,
        without a channel or a task switch per event. The sink only waits
        when the outbox is full, the delta window is closed, or payment is
        open.

        The runner works on the core's tracker without applying events to it
        (``track=False``: the core's ``send`` does) and leaves the ids to the
        core (``stamp=False``: :meth:`_send` passes them to ``send``), so an
        event is neither copied nor counted twice.

        The sink's special cases: a terminal event is rebuilt from the core's
        tracker and signed when asked (``response.done`` carries the
        signature); G.711 speech is recoded. An emitted ``payment.required``
        never reaches it: :class:`HostPayingAgent` holds the agent in its ``emit``
        (spec 004's mid-stream top-up).
        """
        send = self._send
        recode = spoken_format(self._contexts.get(session.id))

        async def sink(event: ev.Event) -> None:
            kind = type(event)
            if kind is ev.AudioDelta and recode is not None:
                # UAMP 8.2: the agent speaks pcm16; the client asked for G.711.
                assert isinstance(event, ev.AudioDelta)
                event = recoded(event, recode)
            if kind is ev.ResponseDone or kind is ev.ResponseCancelled:
                event = self._final(session, response, event)
            if kind in _TERMINAL and response.charge is not None:
                await self._charge_now(response, tracker)  # charged before it is told
            await send(session, response, event)

        # One tracker per response: the runner reads the core's (which the
        # core's send updates) instead of applying every event to its own,
        # and the core writes the ids the agent left out (no copy per event).
        ctx = self._contexts.get(session.id)
        tracker = ctx.response if ctx is not None else None
        if tracker is None or tracker.response_id != response.id:
            raise SessionGone
        # The worker's scope is the only one: response.cancel cancels it and
        # the worker sends response.cancelled (cancellable=False).
        port = request.interrupts
        assert port is None or isinstance(port, ResponsePort)  # _request(port=True) made it
        # Built and initialised apart: a class call with keywords costs a
        # keyword dict that __init__ unpacks again (see TurnOptions.run).
        runner = ResponseRunner.__new__(ResponseRunner)
        runner.__init__(  # type: ignore[misc]
            agent,
            request,
            sink,
            tracker=tracker,
            created=first,
            yield_every=YIELD_EVERY,
            stamp=False,
            track=False,
            cancellable=False,
        )
        if port is not None:
            port.emit = runner.emit
        try:
            outcome = await runner.run()
        finally:
            if port is not None:
                port.close()  # no cycle keeps the request (and its conversation) alive
        error = outcome.error
        if error is not None and error.code == AGENT_OFFLINE and session.id in self._contexts:
            # The agent's daemon went away (docs/relay.md): the whole session
            # is told, after the response's own error, not only this response.
            offline = session_error(session.id, AGENT_OFFLINE, error.message)
            with contextlib.suppress(LocalProtocolError, OutboxClosed):
                await self.outbox.put(self.conn.send(offline))
        return outcome.status

    def _final(self, session: SessionState, response: ResponseState, event: ev.Event) -> ev.Event:
        """The runner's terminal event, signed if asked.

        The runner built it from the core's tracker (the runner shares it), so
        its output is what the client was sent, and both ids.
        """
        ctx = self._contexts.get(session.id)
        tracker = ctx.response if ctx is not None else None
        if tracker is None or tracker.response_id != response.id:
            raise SessionGone
        app = self._app
        if type(event) is ev.ResponseDone and app is not None and app.response_signer is not None:
            return self._done(tracker, response, session.id)
        return event

    def _done(
        self, tracker: ResponseTracker, response: ResponseState, session_id: str
    ) -> ev.ResponseDone:
        """``response.done``, signed when the app has a signer (spec 004 "Response Signing").

        The signature covers the response's whole text and the raw bytes of
        the ``response.create`` message that started it.
        """
        signer = self._app.response_signer if self._app is not None else None
        if signer is None or response.request_bytes is None:
            return tracker.done_event(session_id=session_id)
        return tracker.done_event(
            signature=signer(tracker.text, response.request_bytes), session_id=session_id
        )

    async def _send(self, session: SessionState, response: ResponseState, event: ev.Event) -> None:
        conn = self.conn
        etype = event.type
        if (
            session.opening is not None
            and etype != "response.created"
            and etype not in flow.FLOW_CONTROLLED_TYPES
        ):
            session.put_opening()  # before an event that may end the response
        while True:
            if session.id not in self._contexts:
                raise SessionGone
            if response.cancel_requested and etype in flow.FLOW_CONTROLLED_TYPES:
                return  # cancelled: the partial output is what the client was sent
            try:
                data = conn.send(event, session_id=session.id, response_id=response.id)
            except FlowControlError:
                await session.wakeup.park()  # until an ack (or a cancel) for this session
                continue
            except LocalProtocolError as exc:
                if isinstance(event, _TERMINAL):
                    raise SessionGone from None
                log.warning("dropping %s of agent %r: %s", event.type, session.agent.name, exc)
                return
            break
        logged = self._logged.get(session.id)
        if logged is not None:
            if session.opening is not None:  # logged with the deferred record (_respond)
                session.unlogged.append((data, conn.last_event_id))
            else:
                assert self.event_log is not None
                self.event_log.append(logged[0], data, conn.last_event_id)
        outbox, quota = self.outbox, session.quota
        if not outbox.offer(data, quota):
            try:
                if isinstance(event, _TERMINAL):
                    # The core has ended the response: a cancel landing now must
                    # not lose the event that tells the client so.
                    with trio.CancelScope(shield=True):
                        await outbox.put(data, quota)
                else:
                    await outbox.put(data, quota)  # waits for room, or raises OutboxClosed
            except OutboxClosed:
                if not self.detached:
                    raise  # else the log has it: the response goes on
        elif not response.written and etype in flow.FLOW_CONTROLLED_TYPES:
            # The response's first output (held with the rest of this step's:
            # ``response.created``, a ``capabilities`` before it): written now,
            # not after the work that follows it in the step -- the agent's
            # next deltas, the terminal event, the session's record, the
            # settled charge, the next capabilities check. The time to the
            # first delta is what the client waits for; the rest goes in the
            # step's one write (``response.done`` with it).
            response.written = True
            outbox.write_held()
            session.put_opening()

    async def _send_cancelled(self, session: SessionState, response: ResponseState) -> None:
        ctx = self._contexts.get(session.id)
        if ctx is None or ctx.response is None or ctx.response.response_id != response.id:
            raise SessionGone
        await self._send(session, response, ctx.response.cancelled_event(session_id=session.id))
