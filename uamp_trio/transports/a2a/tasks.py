"""The A2A transport's tasks: each turn run, followed, cancelled and announced.

Theory of operation
-------------------
Every binding admits a send through :func:`.sends.prepare`, which hands
:meth:`Tasks.execute` a :class:`Prepared` turn. Each task runs one UAMP turn
per message, its agent inline in a task of the server's background nursery
(``App.background``; :class:`uamp_trio.hosting.turns.ResponseRunner`: no
channel between the agent and the task's updates, which reach the request
without a checkpoint while it keeps up, so its writer sends them in batches):
a blocking send waits for it, a streaming send streams it, and a
``returnImmediately`` (1.0) / ``blocking: false`` (0.3) send answers at once
with the submitted task. (An app used without
:class:`~uamp_trio.engines.server.Server` has no background nursery and runs
each turn inside its request.)

A running task is a :class:`Live` in :attr:`Tasks.live`. The request that
started it follows it through a bounded channel (``primary``, fed with
backpressure until it goes away: a streaming client that disconnects leaves
its task running); while that request has written everything and waits, it
hands the turn a :class:`~.call.TextPen` and the turn writes its next text
chunks straight into the request's stream (:func:`_forward`). Subscribers
(``SubscribeToTask``) and push-notification webhooks get the updates through
the task store (:meth:`~uamp_stores.a2a_tasks.TaskStore.publish`), only when
someone watches. ``CancelTask`` (or ``DELETE``) from any request cancels the
running turn; a turn that pauses for a person (``input-required``) ends the
sending request, and a later message answers it (:mod:`.sends`).

With a store shared between processes (Redis): a cancel request reaches the
process running the turn (``store.on_cancel``), and a task whose process died
mid-turn is ended ``failed`` by one survivor (:meth:`Tasks.lost`), announced
to every subscriber and webhook.

Signing (spec 004 "Response Signing"): with the app's ``response_signer``,
a turn that completes its task is signed (RS256) over the turn's text (the
completed status message's text parts joined; empty when there is none) and
the HTTP body of the send as received. The JWT is the task's
``metadata.signature`` (``message/send``, ``tasks/get``, the stream's opening
snapshot of a later send replaces it), the final status update's
``metadata.signature`` on a stream, and ``signature`` in the REST form's
``task.completed`` event. A turn's ``payment.balance`` goes into the same
``metadata`` (A2A has no payment event).
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Awaitable, Callable

import attrs
import orjson
import trio

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.adapters import a2a, a2a_human, a2a_push
from uamp_proto.adapters._human import ask_of
from uamp_proto.adapters.a2a import A2ATask, TaskRun, Trigger, Update
from uamp_proto.events import PaymentBalance
from uamp_proto.ids import IdSource
from uamp_proto.payment import BALANCE_EVENT, Charge, PaymentPolicy, balance_fields
from uamp_proto.principal import Principal
from uamp_proto.responder import Responder, TurnRequest, with_interrupts
from uamp_stores.a2a_push import PushSender
from uamp_stores.a2a_tasks import TaskFeed
from uamp_stores.busy import Slot

from ...hosting.host import Host
from .call import TextPen

__all__ = ["SUBSCRIBER_BUFFER", "Live", "Prepared", "Tasks", "timestamp"]

log = logging.getLogger("uamp_trio.a2a")

#: Updates buffered for the request that started a detached run.
SUBSCRIBER_BUFFER = 64
#: How long a cancel request waits for the turn to wind down.
_CANCEL_WAIT = 10.0
#: How often a subscriber on a shared store checks that the task's runner lives.
_RUNNER_CHECK = 1.0
#: The failure of a task whose process died mid-turn (docs/scale-out.md).
_RUNNER_LOST = a2a.RUNNER_LOST


def timestamp() -> str:
    """The current time in RFC 3339 (what A2A's ``timestamp`` fields hold)."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@attrs.define
class Live:
    """A task whose turn is running in some request."""

    done: trio.Event = attrs.field(factory=trio.Event)
    cancel: Callable[[], None] | None = None
    cancel_requested: bool = False
    #: The request that started a detached run, fed with backpressure until
    #: it goes away (a client that disconnects no longer cancels the task).
    primary: trio.MemorySendChannel[Update] | None = None
    #: Set by that request while it has written every update so far and
    #: waits for the next: the turn may write its next text chunks straight
    #: into the request's stream (no update, no channel, no task switch).
    #: Whatever else the turn tells the request takes the pen back first.
    pen: TextPen | None = None
    #: The task as its turn updates it (what an answering send shows).
    task: A2ATask | None = None
    #: Set (and replaced) whenever the turn pauses for a person: a blocking
    #: send returns then, a stream ends.
    paused: trio.Event = attrs.field(factory=trio.Event)
    #: Messages that answered the turn's interrupts, for its history.
    answers: list[a2a.StoredMessage] = attrs.field(factory=list)

    def pause(self) -> None:
        """The turn now waits for a person."""
        self.paused.set()
        self.paused = trio.Event()


@attrs.define
class Prepared:
    """A validated send: the task to run and the turn request to run it with."""

    task: A2ATask
    turn: TurnRequest | None
    history_length: int | None
    new: bool
    #: The HTTP body that carried the message: what a signature covers.
    request_bytes: bytes = b""
    charge: Charge | None = None
    #: Set when the turn is handed to :meth:`Tasks.execute`, which
    #: settles the charge; before that, whoever drops the send releases it.
    started: bool = False
    #: The client activated :data:`~uamp_proto.adapters.a2a.UAMP_EVENTS_EXTENSION`.
    uamp_events: bool = False
    #: The agent's direct reply (a message instead of a task), once it came.
    reply: a2a.StoredMessage | None = None
    #: The message's place in its context (docs/busy.md); closed when the turn ends.
    slot: Slot | None = None
    #: The conversation before this message (what a rolled-back turn leaves).
    base: list[ty.Message] = attrs.Factory(list)
    #: What a cancelled turn had said (``None``: the turn was not cancelled).
    partial: list[ty.Message] | None = None
    #: A message that answered a paused turn's interrupts: the send follows
    #: that turn (through ``follow``, attached before the answer was given,
    #: or until ``paused_at`` is set) instead of running one.
    answering: Live | None = None
    follow: trio.MemoryReceiveChannel[Update] | None = None
    paused_at: trio.Event | None = None
    #: Writes several updates as the send's ``write`` would one by one, in
    #: one piece (a stream's batch of ready updates); ``None``: one by one.
    write_many: Callable[[list[Update]], Awaitable[None]] | None = None
    #: What writes the later text chunks of an update's shape as ``write``
    #: would (an SSE stream's :class:`TextPen`); ``None``: nothing does.
    pen_of: Callable[[Update], TextPen | None] | None = None
    #: A message that answered a turn paused on *another* process (a shared
    #: store): the send follows the task's updates from the store instead.
    elsewhere: TaskFeed | None = None
    principal: Principal | None = None

    async def release_unstarted(self) -> None:
        """Free the charge and the place of a turn that never started (a stream never begun)."""
        if self.started:
            return
        if self.slot is not None:
            self.slot.close()
        if self.charge is not None:
            await self.charge.settle(None, used=False)


class Tasks:
    """The tasks of one A2A transport and the turns that run them (module docstring).

    Args:
        app: The host (background nursery, interrupts, signer, payment, task store).
        payment_policy: Consulted before every turn instead of the app's
            (``None``: ask :meth:`App.payment_required`).
        ids: Id source for tasks, contexts and messages.
        push: Delivers push notifications.
    """

    def __init__(
        self,
        app: Host,
        *,
        payment_policy: PaymentPolicy | None,
        ids: IdSource,
        push: PushSender,
    ) -> None:
        self.app = app
        self._policy = payment_policy
        #: The app's task store (:attr:`Stores.a2a_tasks <uamp_trio.stores.Stores.a2a_tasks>`).
        self.store = app.stores.a2a_tasks
        self.ids = ids
        self.push = push
        #: The tasks whose turn runs (or waits for its place) in this process, by id.
        self.live: dict[str, Live] = {}
        self.store.on_cancel(self._cancel_requested)

    async def charge(
        self, agent: Responder, token: str | None, response_id: str, principal: Principal
    ) -> Charge | None:
        """Hold the price of one turn of ``agent`` (new task or resumed) before it runs.

        Raises:
            PaymentRequiredError: The turn may not run until paid.
        """
        return await self.app.open_charge(
            agent.name, token, response_id, policy=self._policy, principal=principal
        )

    @property
    def push_limits(self) -> a2a_push.PushLimits:
        """The server's limits of push-notification configs."""
        config = self.app.server_config
        return a2a_push.PushLimits(
            max_configs=config.a2a_max_push_configs,
            max_config_bytes=config.a2a_max_push_config_bytes,
        )

    async def find(self, agent: Responder, task_id: str, principal: Principal) -> A2ATask:
        """The caller's task ``task_id`` of ``agent``.

        Another principal's task, or another agent's, does not exist here:
        the answer is the store's one not-found error (no oracle).
        """
        task = await self.store.get(task_id, owner=principal)
        if task.agent != agent.name:
            raise a2a.task_not_found(task_id)
        return await self._end_orphan(task)

    async def _end_orphan(self, task: A2ATask) -> A2ATask:
        """``task``, ended ``failed``/``interrupted`` when the process running it died.

        Only a working task of a shared store that this process does not run
        can be an orphan; the store hands it to one survivor
        (:meth:`~uamp_stores.a2a_tasks.TaskStore.take_over`), which
        announces the end to every subscriber and webhook.
        """
        if task.state is a2a.TaskState.WORKING and task.id not in self.live and self.store.shared:
            await self.lost(task)
        return task

    async def watch_runner(self, agent: Responder, task_id: str, principal: Principal) -> None:
        """End ``task_id`` if its process dies while a subscriber here waits on it."""
        while True:
            await trio.sleep(_RUNNER_CHECK)
            task = await self.find(agent, task_id, principal)
            if task.state.is_terminal or task.state.is_interrupted:
                return

    async def follow(
        self, agent: Responder, task_id: str, principal: Principal
    ) -> tuple[A2ATask, TaskFeed]:
        """:meth:`find`, and a feed of its updates from then on."""
        task, feed = await self.store.follow(task_id, owner=principal)
        if task.agent != agent.name:
            feed.close()
            raise a2a.task_not_found(task_id)
        return task, feed

    async def _follow_elsewhere(
        self,
        agent: Responder,
        prepared: Prepared,
        write: Callable[[Update], Awaitable[None]] | None,
        *,
        wait: bool,
    ) -> None:
        """A send that answered a turn paused on another process: its updates, from the store.

        Until the turn pauses again or ends (a final update); a process that
        dies meanwhile ends the task ``failed`` (:meth:`watch_runner`).
        """
        feed, principal = prepared.elsewhere, prepared.principal
        assert feed is not None and principal is not None
        task_id = prepared.task.id
        try:
            if write is None and not wait:
                return
            async with trio.open_nursery() as watch:
                watch.start_soon(self._watch_paused, agent, task_id, principal)
                async for update in feed:
                    if write is not None and update.kind != "message":
                        await write(update)
                    if update.final:
                        break
                watch.cancel_scope.cancel()
        finally:
            feed.close()
        prepared.task = await self.find(agent, task_id, principal)

    async def lost(self, task: A2ATask) -> bool:
        """Whether ``task`` 's process is gone (then it ends failed here, announced to all)."""
        if not await self.store.take_over(task.id):
            return False
        log.warning("A2A task %s lost the process running it; it ends interrupted", task.id)
        await self._announce(task, TaskRun(task, self.ids).fail(_RUNNER_LOST, timestamp()))
        return True

    async def _watch_paused(self, agent: Responder, task_id: str, principal: Principal) -> None:
        """End ``task_id`` if its process dies, paused or working, while a send here follows it."""
        while True:
            await trio.sleep(_RUNNER_CHECK)
            task = await self.find(agent, task_id, principal)  # a working orphan ends here
            if task.state.is_terminal or (task.state.is_interrupted and await self.lost(task)):
                return

    async def execute(
        self,
        agent: Responder,
        prepared: Prepared,
        write: Callable[[Update], Awaitable[None]] | None,
        *,
        wait: bool = True,
    ) -> None:
        """Run a task's turn, detached from the request when the server allows.

        With the server's background nursery (``App.background``) the turn
        runs there: the request follows it through ``write`` (or waits for it
        when ``wait``), and a client that disconnects leaves the task running,
        so it can still be fetched, subscribed to or cancelled. Without one
        (an app used outside :class:`~uamp_trio.engines.server.Server`) the turn runs
        inside the request.
        """
        prepared.started = True  # from here _run settles the charge
        if prepared.answering is not None:
            await self._follow_answered(prepared, write, wait=wait)
            return
        if prepared.elsewhere is not None:
            await self._follow_elsewhere(agent, prepared, write, wait=wait)
            return
        nursery = self.app.background
        self.store.ensure_running(nursery)  # cancel requests from other processes reach it
        if nursery is None:
            await self._run(agent, prepared, write)
            return
        live = Live()
        self.live[prepared.task.id] = live
        receive: trio.MemoryReceiveChannel[Update] | None = None
        if write is not None:
            live.primary, receive = trio.open_memory_channel[Update](SUBSCRIBER_BUFFER)
        paused_at = live.paused
        nursery.start_soon(self._run, agent, prepared, None, live)
        if receive is not None and write is not None:
            await _forward(receive, write, prepared.write_many, live, prepared.pen_of)
        elif wait:
            await _first_of(live.done, paused_at)

    async def _follow_answered(
        self,
        prepared: Prepared,
        write: Callable[[Update], Awaitable[None]] | None,
        *,
        wait: bool,
    ) -> None:
        """A send that answered a paused turn follows it to its next pause or its end."""
        live = prepared.answering
        assert live is not None and prepared.follow is not None and prepared.paused_at is not None
        if write is not None:
            await _forward(prepared.follow, write, prepared.write_many, live, prepared.pen_of)
            return
        prepared.follow.close()
        if wait:
            await _first_of(live.done, prepared.paused_at)
        if live.task is not None:
            prepared.task = live.task

    async def _run(
        self,
        agent: Responder,
        prepared: Prepared,
        write: Callable[[Update], Awaitable[None]] | None,
        live: Live | None = None,
    ) -> None:
        """Run one turn of a task once its context lets it (docs/busy.md); see :meth:`_turn`.

        A task queued behind its context's running turn stays ``submitted``;
        ``CancelTask`` ends its wait (then it is ``canceled``).
        """
        slot = prepared.slot
        if slot is None:
            await self._turn(agent, prepared, write, live)
            return
        task = prepared.task
        if live is None:
            live = Live()
        self.live[task.id] = live
        ran = False
        try:
            with trio.CancelScope() as waiting:
                live.cancel = waiting.cancel
                if live.cancel_requested:
                    waiting.cancel()
                await slot.wait()
            live.cancel = None
            if waiting.cancelled_caught:
                return
            async with slot:
                if slot.waited and prepared.new and slot.inherited is not None:
                    # It waited for the context's earlier turns: it continues the
                    # conversation as they left it, not as it was when it was sent.
                    prepared.base = list(slot.inherited)
                    task.conversation = [*slot.inherited, task.conversation[-1]]
                    assert prepared.turn is not None
                    prepared.turn = attrs.evolve(prepared.turn, messages=list(task.conversation))
                ran = True
                try:
                    await self._turn(agent, prepared, write, live)
                finally:
                    # What the next message of the context continues.
                    if prepared.partial is None:
                        slot.handoff = list(task.conversation)
                    elif slot.dropped:  # rolled back: as if this message was never sent
                        slot.handoff = list(prepared.base)
                    else:  # interrupted: its partial answer stays
                        slot.handoff = [*task.conversation, *prepared.partial]
        finally:
            if not ran:  # cancelled while it waited: it never runs
                with trio.CancelScope(shield=True), trio.move_on_after(_CANCEL_WAIT):
                    if prepared.charge is not None:
                        await prepared.charge.settle(None, used=False)
                    if not task.state.is_terminal:
                        task.move(Trigger.CANCEL, timestamp())
                        canceled = TaskRun(task, self.ids).status()
                        await self._announce(task, [attrs.evolve(canceled, final=True)])
                self.live.pop(task.id, None)
                if live.primary is not None:
                    live.primary.close()
                live.done.set()

    async def _turn(
        self,
        agent: Responder,
        prepared: Prepared,
        write: Callable[[Update], Awaitable[None]] | None,
        live: Live | None = None,
    ) -> None:
        """Run one turn of a task, telling ``write`` and subscribers every update."""
        task = prepared.task
        turn_request = prepared.turn
        assert turn_request is not None
        if live is None:
            live = Live()
        self.live[task.id] = live
        live.task = task
        run = TaskRun(task, self.ids, uamp_events=prepared.uamp_events)
        current = live
        port = self.app.interrupts.port(turn_request, supported=self.app.background is not None)
        turn_request = with_interrupts(turn_request, port)

        def updates_of(event: ev.Event) -> list[Update]:
            if isinstance(event, ev.InterruptRequest):
                ask = ask_of(event)
                waiting = [*(a for a in task.pending_interrupts if a.id != ask.id), ask]
                return run.ask_human(ask, a2a_human.interrupt_message(waiting), timestamp())
            if isinstance(event, ev.InterruptResolved):
                task.history.extend(live.answers)
                live.answers.clear()
                return run.human_answered(event.interrupt_id, timestamp())
            return run.feed(event)

        async def deliver(updates: list[Update]) -> None:
            if run.reply is not None and prepared.reply is None:
                prepared.reply = run.reply
                updates = [_reply_update(task, run.reply), *updates]
                # A direct reply is not a task: it is forgotten before its sender
                # sees the reply (and may list tasks at once), and never stored again.
                await self.store.discard(task.id)
            # Nobody to tell (no subscriber in this process, no store shared
            # with others, no webhook): publishing would change nothing.
            if (
                updates
                and prepared.reply is None
                and (task.push_configs or self.store.watched(task.id))
            ):
                await self._announce(task, updates)
            if updates:
                current.pen = None  # these go first: the request writes them
            for update in updates:
                if current.primary is not None:
                    try:
                        # No checkpoint while the request keeps up: the turn's
                        # updates then reach it in batches (one write each).
                        current.primary.send_nowait(update)
                    except trio.WouldBlock:
                        try:
                            await current.primary.send(update)
                        except (trio.BrokenResourceError, trio.ClosedResourceError):
                            current.primary = None  # its request went away; the task goes on
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        current.primary = None
                if write is not None:
                    await write(update)
                if update.final and update.state is a2a.TaskState.INPUT_REQUIRED:
                    current.pause()

        try:
            if task.metadata:  # a signature (a balance) is of the turn that made it
                task.metadata.pop("signature", None)
                task.metadata.pop(BALANCE_EVENT, None)
            task.move(Trigger.START if prepared.new else Trigger.RESUME, timestamp())
            task.status_message = None
            await self.store.publish(task, [])  # working, in every process
            sid, rid = turn_request.session_id, turn_request.response_id
            watching = self.store.watching()  # (task_id in watching: store.watched(task_id))
            task_id, join, dumps = task.id, b"".join, orjson.dumps
            grow: Callable[[str], object] | None = None

            async def sink(event: ev.Event) -> None:
                nonlocal grow
                if type(event) is ev.ResponseDelta:
                    delta = event.delta
                    if type(delta) is ty.DeltaText:
                        # The hot path: more text of the open text artifact.
                        pen = current.pen
                        if pen is not None and not (task.push_configs or task_id in watching):
                            # Only the request to tell, and it has written
                            # every update so far (a text chunk last): the
                            # chunk goes straight into its stream, as a
                            # Completions chunk does.
                            text = delta.text
                            if not text:
                                return  # (no chunk: feed gives nothing either)
                            if grow is None:
                                grow = run.grower()
                            grow(text)
                            try:
                                await pen.send(join((pen.head, dumps(text), pen.tail)))
                            except trio.BrokenResourceError:  # the request went away
                                if current.pen is pen:
                                    current.pen = None
                            return
                        update = run.more_text(delta.text)
                        if update is not None:
                            # deliver([update]), for its common case: nobody
                            # but the request that follows the task to tell.
                            if not (write or task.push_configs or task_id in watching):
                                primary = current.primary
                                if primary is None:
                                    return
                                try:
                                    primary.send_nowait(update)
                                    return
                                except (
                                    trio.WouldBlock,  # deliver() waits for it
                                    trio.BrokenResourceError,  # deliver() lets it go
                                    trio.ClosedResourceError,
                                ):
                                    pass
                            await deliver([update])
                            return
                # What the runner stamps with stamp=True (feed names artifacts by it).
                event = ev.with_ids(event, session_id=sid, response_id=rid)
                await deliver(updates_of(event))

            # Inline: the agent's events reach deliver() with no channel hop
            # and no task switch (a checkpoint every YIELD_EVERY events). The
            # sink stamps the ids where the task's updates need them.
            turn = self.app.turns.runner(
                agent, turn_request, sink, stamp=False, charge=prepared.charge
            )
            port.emit = turn.emit
            live.cancel = turn.cancel
            if prepared.slot is not None:
                prepared.slot.bind(turn.cancel)  # a later message may interrupt it
            if live.cancel_requested:
                turn.cancel()
            outcome = await turn.run()
            if outcome.status == "cancelled":
                prepared.partial = outcome.tracker.messages()
            updates = run.end(outcome, timestamp())
            if outcome.status == "completed":
                updates = self._sign(updates, task, outcome.tracker.text, prepared)
            if outcome.balance is not None and updates:
                updates = _with_balance(updates, task, outcome.balance)
            await deliver(updates)
            if prepared.reply is not None and not task.state.is_terminal:
                task.move(Trigger.COMPLETE, timestamp())
        finally:
            if prepared.charge is not None:
                await prepared.charge.settle(None, used=False)  # never ran; else a no-op
            if prepared.reply is None and not (task.state.is_terminal or task.state.is_interrupted):
                # The request went away (client disconnect, shutdown): the
                # turn was cancelled with it, and so is the task.
                with trio.CancelScope(shield=True), trio.move_on_after(_CANCEL_WAIT):
                    await self._announce(task, run.cancel(timestamp()))
            self.live.pop(task.id, None)
            port.close()  # no cycle keeps the request (and its conversation) alive
            if live.primary is not None:
                live.primary.close()
            live.done.set()
            live.pause()  # nothing waits for a pause that cannot come

    def _sign(
        self, updates: list[Update], task: A2ATask, text: str, prepared: Prepared
    ) -> list[Update]:
        """Sign a completed turn (spec 004 "Response Signing") when the app has a signer.

        The signature covers ``text`` (the turn's text: the completed status
        message's text parts joined) and the HTTP body of the send; it goes
        into the task's ``metadata.signature`` and the final status update's.
        """
        signer = self.app.response_signer
        if signer is None:
            return updates
        signature = signer(text, prepared.request_bytes)
        task.metadata = {**(task.metadata or {}), "signature": signature}
        final = updates[-1]
        signed = attrs.evolve(final, metadata={**(final.metadata or {}), "signature": signature})
        return [*updates[:-1], signed]

    async def _announce(self, task: A2ATask, updates: list[Update]) -> None:
        """Store ``task`` and tell its subscribers and push-notification webhooks of ``updates``."""
        # A direct reply goes to its sender only.
        shown = [update for update in updates if update.kind != "message"]
        await self.store.publish(task, shown)
        if task.push_configs:
            for update in shown:
                self.push.notify(self.app.background, task, update)

    def _cancel_requested(self, task_id: str) -> None:
        """Cancel ``task_id`` 's turn if it runs in this process (a request from any process)."""
        live = self.live.get(task_id)
        if live is not None:
            live.cancel_requested = True
            if live.cancel is not None:
                live.cancel()

    async def _cancel_elsewhere(
        self, agent: Responder, task_id: str, principal: Principal
    ) -> A2ATask:
        """Ask the process running ``task_id`` 's turn to cancel it; the task once it ended.

        The task comes back unchanged when no process answered within
        :data:`_CANCEL_WAIT` (the one running it is gone).
        """
        self.store.ensure_running(self.app.background)
        await self.store.cancel_running(task_id, owner=principal, wait=_CANCEL_WAIT)
        return await self.find(agent, task_id, principal)

    async def cancel(self, agent: Responder, task_id: str, principal: Principal) -> A2ATask:
        """``CancelTask``: cancel the caller's task ``task_id`` (its turn, here or elsewhere)."""
        task = await self.find(agent, task_id, principal)
        live = self.live.get(task_id)
        running = not (task.state.is_terminal or task.state.is_interrupted)
        if live is None and running and self.store.shared:
            task = await self._cancel_elsewhere(agent, task_id, principal)
            if task.state.is_terminal:
                return task
        if live is None:
            task.move(Trigger.CANCEL, timestamp())  # paused tasks cancel here; finished ones raise
            task.status_message = None
            task.pending_tool_calls = []
            canceled = TaskRun(task, self.ids).status()
            await self._announce(task, [attrs.evolve(canceled, final=True)])
            return task
        live.cancel_requested = True
        if live.cancel is not None:
            live.cancel()
        with trio.move_on_after(_CANCEL_WAIT):
            await live.done.wait()
        return task


async def _forward(
    receive: trio.MemoryReceiveChannel[Update],
    write: Callable[[Update], Awaitable[None]],
    write_many: Callable[[list[Update]], Awaitable[None]] | None = None,
    live: Live | None = None,
    pen_of: Callable[[Update], TextPen | None] | None = None,
) -> None:
    """Write a turn's updates until it ends, or pauses for a person (a final update).

    Whatever else is ready goes out with each update, before the next
    checkpoint (through ``write_many`` when given: one piece for the lot),
    so the writer sends them in one write.

    With ``live`` and ``pen_of``: when the last update written was a chunk
    of the turn's text and nothing else is ready, the request hands
    ``live`` the pen for the chunks that follow it (``pen_of(update)``)
    while it waits, and the turn writes them itself until it has anything
    else to say (it takes the pen back first, so the order stays). The pen
    goes when this request does.
    """
    paused = a2a.TaskState.INPUT_REQUIRED
    pen: TextPen | None = None
    try:
        async with receive:
            while True:
                try:
                    update = receive.receive_nowait()
                except trio.WouldBlock:
                    if pen is not None and live is not None:
                        live.pen = pen  # everything is written: the turn may go on alone
                    try:
                        update = await receive.receive()
                    except trio.EndOfChannel:
                        return
                except trio.EndOfChannel:
                    return
                batch = [update]
                while not (update.final and update.state is paused):
                    try:
                        update = receive.receive_nowait()
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                    batch.append(update)
                if write_many is None or len(batch) == 1:
                    for update in batch:
                        await write(update)
                else:
                    await write_many(batch)
                if update.final and update.state is paused:
                    return  # the task waits for a message; this request is done
                pen = pen_of(update) if pen_of is not None and _continues_text(update) else None
    finally:
        if live is not None and pen is not None and live.pen is pen:
            live.pen = None


def _continues_text(update: Update) -> bool:
    """Whether ``update`` is a chunk of the turn's text whose successors have its shape."""
    return (
        update.text is not None
        and update.kind == "artifact"
        and update.append
        and not update.last_chunk
        and update.metadata is None
    )


async def _first_of(*events: trio.Event) -> None:
    """Wait until one of ``events`` is set."""
    async with trio.open_nursery() as nursery:

        async def wait(event: trio.Event) -> None:
            await event.wait()
            nursery.cancel_scope.cancel()

        for event in events:
            nursery.start_soon(wait, event)


def _reply_update(task: A2ATask, message: a2a.StoredMessage) -> Update:
    """The update that carries an agent's direct reply to the request that sent the message."""
    return Update(kind="message", task_id=task.id, context_id=task.context_id, message=message)


def _with_balance(updates: list[Update], task: A2ATask, balance: PaymentBalance) -> list[Update]:
    """The turn's updates, its ``payment.balance`` on the task's and the last update's metadata.

    A2A has no payment event; ``metadata`` is where it lets a server add its own.
    """
    fields = balance_fields(balance)
    task.metadata = {**(task.metadata or {}), BALANCE_EVENT: fields}
    final = updates[-1]
    noted = attrs.evolve(final, metadata={**(final.metadata or {}), BALANCE_EVENT: fields})
    return [*updates[:-1], noted]
