"""The A2A operations on ASGI, for both bindings (:mod:`.a2a` JSON-RPC, :mod:`.a2a_rest`).

Parsing, the task state machine (:class:`~uamp_proto.adapters.a2a.TaskRun`)
and rendering are :mod:`uamp_proto.adapters.a2a`'s.

Theory of operation
-------------------
The operations here are binding-neutral: each returns the ``result`` object
(or a producer of stream results); JSON-RPC wraps them in responses, the
HTTP+JSON binding sends them as they are.

Tasks live in the app's task store (``Config.a2a_tasks``:
:mod:`uamp_stores.a2a_tasks`, ``uamp serve``'s -- in memory, or in Redis
shared with other processes, ``uamp serve``'s or ASGI apps'): bounded, a
quota per principal, another principal's task answering like a missing one.
A turn runs inside the request that sent its message -- a blocking send, or
the stream -- or, for a send with ``returnImmediately`` (0.3: ``blocking:
false``), after the answer went out (:attr:`~uamp_asgi.http.JsonReply.after`).
While it runs the task is *live* here, and each batch of its updates is
published through the store (which writes the task): ``SubscribeToTask`` in
any process follows them (a bounded buffer each; a subscriber that falls
behind is dropped), ``GetTask`` anywhere sees the task as it is, and
``CancelTask`` in any process cancels the turn (the store carries the
request to the process running it; the task ends canceled). A task whose
process died mid-turn ends ``failed`` (``interrupted``) on the first
survivor that looks at it, as under ``uamp serve``. A task paused for input
or tool results is canceled at once; a finished one is not cancelable. A
message naming a ``contextId`` of the caller's (no ``taskId``) starts a task
that continues that context's latest task's conversation, as under ``uamp
serve``; another principal's context is a fresh one. A streaming send whose
client leaves leaves its task running, as under ``uamp serve``: the turn
goes on to its end in the request's task (:attr:`~uamp_asgi.http.StreamReply.detach`),
its updates reaching subscribers and webhooks; ``GetTask`` shows the end.

Push notifications: with ``Config.a2a_push`` (``uamp serve``'s webhook
client), a task's configs are set, read, listed and deleted by
:mod:`uamp_proto.adapters.a2a_push` (the bounds and SSRF check of ``uamp
serve``), and every update of the task -- its turn's, or the cancel of a
paused task -- is handed to the client, which POSTs it in the task group of
the request that made the update (:attr:`~uamp_asgi.http.Request.background`):
the answer does not wait for a webhook, the request ends once its
deliveries do. Without it those methods answer
``PushNotificationNotSupportedError``. gRPC is ``uamp serve``'s.
"""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, Final

import anyio
import attrs
from anyio.abc import TaskGroup

from uamp_proto.adapters import a2a, a2a_card, a2a_params, a2a_push
from uamp_proto.adapters.a2a import A2AError, A2ATask, Dialect, TaskRun, Trigger, Update
from uamp_proto.events import Event
from uamp_proto.ids import random_ids
from uamp_proto.payment import Charge, PaymentRequiredError
from uamp_proto.principal import Principal
from uamp_proto.responder import Responder, TurnRequest
from uamp_proto.signing import JWKS_PATH
from uamp_stores.a2a_tasks import TaskStore
from uamp_stores.health import StoreUnavailable

from ..app import Host
from ..config import PushDelivery
from ..http import JsonReply, Reply, Request, StreamReply, Write
from ..turns import Turn

__all__ = ["A2AOperations", "Producer", "sse", "unavailable"]

#: Subscribers one task takes in this process.
MAX_SUBSCRIBERS: Final = 16
#: How long ``CancelTask`` waits for a running turn to end (seconds).
CANCEL_WAIT: Final = 5.0
#: How often a subscriber on a shared store checks that the task's process lives.
RUNNER_CHECK: Final = 1.0

#: Writes one stream result (the binding frames it).
Emit = Callable[[dict[str, Any]], Awaitable[None]]
Producer = Callable[[Emit], Awaitable[None]]


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class _Live:
    """A task whose turn runs in this process: its task, how to cancel it, when it ended."""

    def __init__(self, task: A2ATask) -> None:
        self.task = task
        self.turn: Turn | None = None
        self.cancel_requested = False
        self.done = anyio.Event()

    def cancel(self) -> None:
        self.cancel_requested = True
        if self.turn is not None:
            self.turn.cancel()


def _agent_base(full_path: str) -> str:
    """Where an agent's routes begin, from a card's path or one of its ``/a2a`` endpoints."""
    if "/.well-known/" in full_path:
        return full_path.rsplit("/.well-known/", 1)[0]
    return full_path.rsplit("/a2a", 1)[0]


def unavailable(down: StoreUnavailable) -> A2AError:
    """The answer when the task store (Redis) does not answer now, as ``uamp serve``'s."""
    return A2AError(a2a.INTERNAL_ERROR, down.message, data={"code": down.code}, http_status=503)


class A2AOperations:
    """The A2A operations of one app, for both bindings (see the module docstring)."""

    def __init__(self, host: Host) -> None:
        self.host = host
        config = host.config
        self.push_limits = a2a_push.PushLimits(
            max_configs=config.a2a_max_push_configs,
            max_config_bytes=config.a2a_max_push_config_bytes,
        )
        #: The app's task store (``Config.a2a_tasks``).
        self.store: TaskStore = host.a2a_tasks
        self.store.on_cancel(self._cancel_requested)
        #: The tasks whose turn runs in this process.
        self.live: dict[str, _Live] = {}
        #: Open subscriptions in this process, by task.
        self.following: Counter[str] = Counter()

    # --- the card ---------------------------------------------------------------

    def card(self, agent: Responder, request: Request, *, extended: bool = False) -> dict[str, Any]:
        base = f"{request.scheme}://{request.headers.get('host', '127.0.0.1')}"
        # The endpoint beside the card, wherever the app is mounted (root_path included).
        url = base + _agent_base(request.full_path) + "/a2a"
        description = getattr(agent, "description", None)
        secured = self.host.config.authenticator is not None
        more = self.host.config.a2a_extended_card
        card = a2a_card.agent_card(
            name=agent.name,
            capabilities=agent.capabilities(),
            interfaces=[
                a2a_card.Interface(url, "JSONRPC", "1.0"),
                a2a_card.Interface(url, "JSONRPC", "0.3"),
                a2a_card.Interface(url, "HTTP+JSON", "1.0"),
            ],
            base_url=base,
            description=description if isinstance(description, str) and description else None,
            push_notifications=self.host.config.a2a_push is not None,
            extended_card=secured and more is not None,
            security_schemes=(
                {"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}} if secured else None
            ),
        )
        return a2a_card.extend_card(card, more) if extended and more is not None else card

    async def agent_card(self, request: Request) -> Reply:
        agent = self.host.resolve_agent(request.path_params)
        wanted = request.headers.get("a2a-version") or ""
        legacy = request.path.endswith("/agent.json") or wanted.strip().startswith("0.3")
        return JsonReply(self.served_card(agent, request, legacy=legacy))

    def extended_card(self, agent: Responder, request: Request) -> dict[str, Any]:
        """``GetExtendedAgentCard``: the card for an authenticated caller, as ``uamp serve``.

        Raises:
            A2AError: :data:`~uamp_proto.adapters.a2a.EXTENDED_CARD_NOT_CONFIGURED`
                without authentication or an operator's extension (the card says
                ``extendedAgentCard: false`` then).
        """
        config = self.host.config
        if config.authenticator is None or config.a2a_extended_card is None:
            why = " (the server has no authentication)." if config.authenticator is None else "."
            raise A2AError(
                a2a.EXTENDED_CARD_NOT_CONFIGURED,
                "This agent has no authenticated extended card" + why,
            )
        return self.served_card(agent, request, extended=True)

    def served_card(
        self, agent: Responder, request: Request, *, legacy: bool = False, extended: bool = False
    ) -> dict[str, Any]:
        """The card as served: the 0.3 form if asked, signed with ``Config.a2a_card_key``."""
        card = self.card(agent, request, extended=extended)
        if legacy:
            card = a2a_card.legacy_card(card, rpc_url=card["supportedInterfaces"][0]["url"])
        key = self.host.config.a2a_card_key
        if key is not None:
            # The JWKS beside the card: the app serves it wherever it is mounted.
            beside = _agent_base(request.full_path)
            jku = f"{request.scheme}://{request.headers.get('host', '127.0.0.1')}{beside}"
            card = a2a_card.sign_served_card(
                card, key.key, key.kid, jku=jku + JWKS_PATH, legacy=legacy
            )
        return card

    # --- the operations -------------------------------------------------------------

    async def send(
        self, agent: Responder, request: Request, params: dict[str, Any], dialect: Dialect
    ) -> tuple[dict[str, Any], Callable[[], Awaitable[object]] | None]:
        """``SendMessage``: the result, and the turn to run after answering (not blocking)."""
        task, turn, charge = await self._prepare(agent, request, params, dialect)
        live = self._go_live(task)
        if not a2a_params.blocking(params, dialect):
            rendered = a2a.render_task(task, dialect)

            async def later() -> None:
                await self._run(agent, task, turn, charge, None, live, request.background)

            return ({"task": rendered} if dialect is Dialect.V1 else rendered), later
        reply = await self._run(agent, task, turn, charge, None, live, request.background)
        if reply is not None:
            message = a2a.render_message(reply, dialect, context_id=task.context_id)
            return ({"message": message} if dialect is Dialect.V1 else message), None
        rendered = a2a.render_task(task, dialect)
        return ({"task": rendered} if dialect is Dialect.V1 else rendered), None

    async def stream(
        self, agent: Responder, request: Request, params: dict[str, Any], dialect: Dialect
    ) -> tuple[Producer, Callable[[], Awaitable[object]]]:
        """``SendStreamingMessage``: the task snapshot, then its updates (or a message).

        Returns the producer and what frees the held charge if it never runs.
        """
        if agent.capabilities().supports_streaming is False:
            raise A2AError(
                a2a.UNSUPPORTED_OPERATION, "This agent does not stream (capabilities.streaming)."
            )
        task, turn, charge = await self._prepare(agent, request, params, dialect)
        live = self._go_live(task)
        started = False
        snapshot = a2a.stream_task(task, dialect)

        async def produce(emit: Emit) -> None:
            nonlocal started
            started = True
            opened = False

            async def send(update: Update) -> None:
                nonlocal opened
                if not opened:
                    opened = True
                    await emit(snapshot)
                await emit(a2a.render_update(update, dialect))

            reply = await self._run(agent, task, turn, charge, send, live, request.background)
            if reply is not None:
                message = a2a.render_message(reply, dialect, context_id=task.context_id)
                await emit({"message": message} if dialect is Dialect.V1 else message)
            elif not opened:
                await emit(snapshot)

        async def never_ran() -> None:
            if not started:  # the client left before the stream began: no turn runs
                self._forget_live(task, live)
                with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_WAIT):
                    if charge is not None:
                        await charge.settle(None, used=False)
                    if not task.state.is_terminal:
                        canceled = TaskRun(task, random_ids).cancel(_now())
                        await self._announce(task, canceled, request.background)

        return produce, never_ran

    async def get(self, principal: Principal, params: dict[str, Any], dialect: Dialect) -> Any:
        """``GetTask``."""
        task = await self._task(a2a.task_id_param(params), principal)
        history = a2a.opt_int(params, "historyLength")
        return a2a.render_task(task, dialect, history_length=history)

    async def cancel(
        self,
        principal: Principal,
        params: dict[str, Any],
        dialect: Dialect,
        background: TaskGroup | None = None,
    ) -> Any:
        """``CancelTask``: a running turn is cancelled, in this process or the one running
        it (a shared store); a paused task ends canceled at once (its webhooks told, in
        ``background``)."""
        task = await self._task(a2a.task_id_param(params), principal)
        live = self.live.get(task.id)
        if live is not None:
            live.cancel()
            with anyio.move_on_after(CANCEL_WAIT):
                await live.done.wait()
            return a2a.render_task(live.task, dialect)
        if self.store.shared and not (task.state.is_terminal or task.state.is_interrupted):
            self.store.ensure_running(self.host.background)
            task = await self.store.cancel_running(task.id, owner=principal, wait=CANCEL_WAIT)
            if task.state.is_terminal:
                return a2a.render_task(task, dialect)
        task.move(Trigger.CANCEL, _now())  # a finished task raises TaskNotCancelable
        task.status_message = None
        task.pending_tool_calls = []
        canceled = attrs.evolve(TaskRun(task, random_ids).status(), final=True)
        await self._announce(task, [canceled], background)
        return a2a.render_task(task, dialect)

    async def list_tasks(
        self, agent: Responder, principal: Principal, params: dict[str, Any]
    ) -> Any:
        """``ListTasks``: the caller's tasks of ``agent``, newest first, filtered and paged."""
        query = a2a_params.parse_list_params(params)
        owned = await self.store.owned_by(principal)
        mine = [t for t in owned if t.agent == agent.name and query.matches(t)]
        mine.sort(key=lambda t: t.timestamp or "", reverse=True)  # last updated first
        return a2a_params.list_page(mine, query)

    async def push_config(
        self, principal: Principal, method: str, params: dict[str, Any], dialect: Dialect
    ) -> Any:
        """The push-notification config methods (set, get, list, delete) of either dialect."""
        op = a2a_params.PUSH_METHODS[method]
        task = await self._task(a2a_params.task_id_of(params, op, dialect), principal)
        sender = self._sender()  # after the task: another's answers like a missing one
        result, changed = a2a_push.config_call(
            task,
            op,
            params,
            dialect,
            ids=random_ids,
            limits=self.push_limits,
            check_target=sender.check_target,
        )
        if changed:  # the process running the task's turn reads them on its next update
            await self.store.save_push_configs(task)
        return result

    def _sender(self) -> PushDelivery:
        sender = self.host.config.a2a_push
        if sender is None:
            raise A2AError(
                a2a.PUSH_NOTIFICATION_NOT_SUPPORTED,
                "This app delivers no push notifications (Config.a2a_push is None).",
            )
        return sender

    def _push(self, task: A2ATask, update: Update, background: TaskGroup | None) -> None:
        """Tell ``task``'s webhooks of ``update``, in tasks of ``background``."""
        sender = self.host.config.a2a_push
        if task.push_configs and sender is not None and update.kind != "message":
            sender.notify(background, task, update)

    async def _announce(
        self, task: A2ATask, updates: list[Update], background: TaskGroup | None
    ) -> None:
        """Store ``task`` and tell its subscribers (any process) and webhooks of ``updates``."""
        shown = [update for update in updates if update.kind != "message"]
        await self.store.publish(task, shown)
        for update in shown:
            self._push(task, update, background)

    async def subscribe(
        self, principal: Principal, params: dict[str, Any], dialect: Dialect
    ) -> tuple[Producer, Callable[[], Awaitable[object]]]:
        """``SubscribeToTask``: the task snapshot, then its turn's updates (from whichever
        process runs it) until it ends or pauses.

        Returns the producer and what frees the subscription if it never runs.
        """
        task_id = a2a.task_id_param(params)
        await self._task(task_id, principal)  # a task whose process died ends here
        self.store.ensure_running(self.host.background)
        task, feed = await self.store.follow(task_id, owner=principal)
        if task.state.is_terminal:
            feed.close()
            raise A2AError(
                a2a.UNSUPPORTED_OPERATION,
                f"Task {task.id} is {task.state.value}; there is nothing left to stream.",
            )
        if self.following[task_id] >= MAX_SUBSCRIBERS:
            feed.close()
            raise A2AError(
                a2a.UNSUPPORTED_OPERATION,
                f"Task {task.id} has {MAX_SUBSCRIBERS} subscribers already.",
            )
        # Paused: the snapshot is all there is until a message resumes it.
        paused = task.state.is_interrupted
        self.following[task_id] += 1
        snapshot = a2a.stream_task(task, dialect)
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                feed.close()
                self.following[task_id] -= 1
                if not self.following[task_id]:
                    del self.following[task_id]

        async def produce(emit: Emit) -> None:
            try:
                await emit(snapshot)
                if paused:
                    return
                async with anyio.create_task_group() as watch:
                    if self.store.shared and task_id not in self.live:
                        watch.start_soon(self._watch_runner, task_id, principal)
                    async for update in feed:
                        if update.kind != "message":
                            await emit(a2a.render_update(update, dialect))
                        if update.final:
                            break
                    watch.cancel_scope.cancel()
            finally:
                release()

        async def never_ran() -> None:
            release()

        return produce, never_ran

    # --- tasks and turns --------------------------------------------------------------

    async def _task(self, task_id: str, principal: Principal) -> A2ATask:
        """The caller's task (another principal's answers as a missing one); a task
        whose process died mid-turn (a shared store) ends ``failed`` first."""
        task = await self.store.get(task_id, owner=principal)
        live = self.live.get(task_id)
        if live is not None:
            return live.task  # the running turn's own copy
        if task.state is a2a.TaskState.WORKING and self.store.shared:
            await self._lost(task)
        return task

    async def _lost(self, task: A2ATask) -> bool:
        """Whether ``task``'s process is gone (then it ends failed here, announced to all)."""
        if not await self.store.take_over(task.id):
            return False
        failed = TaskRun(task, random_ids).fail(a2a.RUNNER_LOST, _now())
        await self._announce(task, failed, self.host.background)
        return True

    async def _watch_runner(self, task_id: str, principal: Principal) -> None:
        """End ``task_id`` if its process dies while a subscriber here waits on it."""
        while True:
            await anyio.sleep(RUNNER_CHECK)
            task = await self._task(task_id, principal)
            if task.state.is_terminal or task.state.is_interrupted:
                return

    def _cancel_requested(self, task_id: str) -> None:
        """Cancel ``task_id``'s turn if it runs here (asked by any process of the store)."""
        live = self.live.get(task_id)
        if live is not None:
            live.cancel()

    def _go_live(self, task: A2ATask) -> _Live:
        live = self.live[task.id] = _Live(task)
        return live

    def _forget_live(self, task: A2ATask, live: _Live) -> None:
        if self.live.get(task.id) is live:
            del self.live[task.id]
        live.done.set()

    async def _charge(self, agent: Responder, request: Request, response_id: str) -> Charge | None:
        """Hold the price of one turn before anything changes (``-32402`` when unpaid)."""
        try:
            return await self.host.open_charge(
                agent, request.headers.get("x-payment"), response_id, request.principal
            )
        except PaymentRequiredError as unpaid:
            raise a2a.payment_error(unpaid) from None

    async def _prepare(
        self, agent: Responder, request: Request, params: dict[str, Any], dialect: Dialect
    ) -> tuple[A2ATask, TurnRequest, Charge | None]:
        """Validate a send, hold its price, then create (or resume) its task.

        As under ``uamp serve``, a caller who cannot pay, or whose quota of
        unfinished tasks is full, leaves no task behind and a paused task
        unchanged.
        """
        if params.get("message") is None:
            raise A2AError(a2a.INVALID_PARAMS, "'message' is required.")
        message = a2a.parse_message(params.get("message"), message_id="")
        if message.role != "user":
            raise A2AError(a2a.INVALID_PARAMS, "'message.role' must be user.")
        configuration = a2a_params.send_configuration(params)
        push_config = a2a_params.inline_push_config(configuration, dialect, random_ids)
        if push_config is not None:
            a2a_push.check_config(push_config, self.push_limits, self._sender().check_target)
        principal = request.principal
        stored = a2a.stored_message(message)
        metadata = params.get("metadata")
        tools = a2a.parse_tools(metadata if isinstance(metadata, dict) else None)
        # Cancel requests from other processes reach this one while its turn runs.
        self.store.ensure_running(self.host.background)
        if message.task_id is not None:
            task = await self._task(message.task_id, principal)
            if task.id in self.live:
                raise A2AError(
                    a2a.UNSUPPORTED_OPERATION,
                    f"Task {task.id} is working; wait for it or cancel it.",
                    http_status=409,
                )
            a2a.transition(task.state, Trigger.RESUME)  # raises unless paused
            if push_config is not None:
                a2a_push.make_room(task, push_config, self.push_limits)  # before any money
            response_id = random_ids("resp")
            charge = await self._charge(agent, request, response_id)
            if task.pending_tool_calls:
                task.conversation.extend(a2a.parse_tool_results(message, task.pending_tool_calls))
            else:
                task.conversation.append(message.to_uamp())
            task.pending_tool_calls = []
            task.history.append(stored)
            trigger = Trigger.RESUME
        else:
            earlier = None
            if message.context_id:
                # Only the caller's own conversation continues: another
                # principal's contextId is a fresh context, as an unknown one is.
                earlier = await self.store.latest_in_context(message.context_id, owner=principal)
            if earlier is not None and earlier.agent != agent.name:
                raise A2AError(
                    a2a.INVALID_PARAMS, f"Context {message.context_id} belongs to another agent."
                )
            task = A2ATask(
                id=random_ids("task"),
                context_id=message.context_id or random_ids("ctx"),
                agent=agent.name,
                timestamp=_now(),
                history=[stored],
                conversation=[
                    *(earlier.conversation if earlier is not None else []),
                    message.to_uamp(),
                ],
                tools=tools or (earlier.tools if earlier is not None else []),
            )
            await self.store.check_quota(principal)  # before any money is locked
            response_id = random_ids("resp")
            charge = await self._charge(agent, request, response_id)
            try:
                await self.store.add(task, owner=principal)
            except BaseException:
                if charge is not None:  # the store refused the task: free its lock
                    with anyio.CancelScope(shield=True):
                        await charge.settle(None, used=False)
                raise
            trigger = Trigger.START
        if push_config is not None:
            task.push_configs[push_config["id"]] = push_config
            await self.store.save_push_configs(task)
        turn = TurnRequest(
            agent=agent.name,
            principal=principal,
            session_id=task.context_id,
            response_id=response_id,
            messages=list(task.conversation),
            tools=list(tools or task.tools),
            payment_token=request.headers.get("x-payment"),
            metadata={"a2a_task_id": task.id, "a2a_context_id": task.context_id},
        )
        task.move(trigger, _now())
        await self.store.publish(task, [])  # working, in every process (and who runs it)
        return task, turn, charge

    async def _run(
        self,
        agent: Responder,
        task: A2ATask,
        turn: TurnRequest,
        charge: Charge | None,
        write: Callable[[Update], Awaitable[None]] | None,
        live: _Live,
        background: TaskGroup | None,
    ) -> a2a.StoredMessage | None:
        """Run the task's turn (``charge`` settled by it), every update to ``write``,
        subscribers (through the store) and webhooks (delivered in ``background``);
        a direct reply."""
        run = TaskRun(task, random_ids)
        watched = self.store.watched
        try:

            async def deliver(updates: list[Update]) -> None:
                if run.reply is not None:
                    return
                # Nobody to tell (no subscriber here, no process sharing the
                # store, no webhook): publishing would change nothing.
                if updates and (task.push_configs or watched(task.id)):
                    await self._announce(task, updates, background)
                if write is not None:
                    for update in updates:
                        await write(update)

            async def sink(event: Event) -> None:
                await deliver(run.feed(event))

            live.turn = self.host.turns.turn(agent, turn, sink, charge=charge)
            if live.cancel_requested:
                live.turn.cancel()
            try:
                outcome = await live.turn.run()
            except BaseException:
                # The request carrying the turn was cancelled (the server
                # stops): the task ends canceled rather than working for ever.
                if run.reply is None and not (task.state.is_terminal or task.state.is_interrupted):
                    with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_WAIT):
                        await self._announce(task, run.cancel(_now()), background)
                raise
            await deliver(run.end(outcome, _now()))
        finally:
            self._forget_live(task, live)
        if run.reply is not None:
            await self.store.discard(task.id)  # a direct reply is no task
        return run.reply


def sse(
    produce: Producer,
    frame: Callable[[dict[str, Any]], bytes],
    on_close: Callable[[], Awaitable[object]] | None = None,
    *,
    detach: bool = False,
) -> StreamReply:
    """A stream reply writing each result ``produce`` emits, framed by ``frame``.

    ``detach``: a client that leaves does not stop ``produce`` (a send's task).
    """

    async def producer(write: Write) -> None:
        async def emit(result: dict[str, Any]) -> None:
            await write(frame(result))

        await produce(emit)

    return StreamReply(producer, on_close=on_close, detach=detach)
