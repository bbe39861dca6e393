"""The A2A operations on ASGI, for both bindings (:mod:`.a2a` JSON-RPC, :mod:`.a2a_rest`).

Parsing, the task state machine (:class:`~uamp_proto.adapters.a2a.TaskRun`)
and rendering are :mod:`uamp_proto.adapters.a2a`'s.

Theory of operation
-------------------
The operations here are binding-neutral: each returns the ``result`` object
(or a producer of stream results); JSON-RPC wraps them in responses, the
HTTP+JSON binding sends them as they are. Tasks live in memory (bounded;
another principal's task answers like a missing one). A turn runs inside
the request that sent its message -- a blocking send, or the stream -- or,
for a send with ``returnImmediately`` (0.3: ``blocking: false``), after the
answer went out (:attr:`~uamp_asgi.http.JsonReply.after`). While it runs the
task is *live*: ``CancelTask`` cancels its turn (the task ends canceled) and
``SubscribeToTask`` follows its updates (a bounded buffer each; a subscriber
that falls behind is dropped). A task paused for input or tool results is
canceled at once; a finished one is not cancelable. A streaming send whose
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
from collections.abc import Awaitable, Callable
from typing import Any, Final

import anyio
import attrs
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectSendStream

from uamp_proto.adapters import a2a, a2a_card, a2a_params, a2a_push
from uamp_proto.adapters.a2a import A2AError, A2ATask, Dialect, TaskRun, Trigger, Update
from uamp_proto.events import Event
from uamp_proto.ids import random_ids
from uamp_proto.payment import Charge, PaymentRequiredError
from uamp_proto.principal import Principal
from uamp_proto.responder import Responder, TurnRequest
from uamp_proto.signing import JWKS_PATH

from ..app import Host
from ..bounded import OwnedLRU
from ..config import PushDelivery
from ..http import JsonReply, Reply, Request, StreamReply, Write
from ..turns import Turn

__all__ = ["MAX_TASKS", "SUBSCRIBER_BUFFER", "A2AOperations", "Producer", "sse"]

#: Tasks kept (all principals); the least recently used go first.
MAX_TASKS: Final = 4096
#: Tasks one principal keeps; its own oldest go first.
MAX_TASKS_PER_PRINCIPAL: Final = 512
#: Updates a subscriber may be behind before it is dropped.
SUBSCRIBER_BUFFER: Final = 256
#: Subscribers one live task takes.
MAX_SUBSCRIBERS: Final = 16
#: How long ``CancelTask`` waits for a live turn to end (seconds).
CANCEL_WAIT: Final = 5.0

#: Writes one stream result (the binding frames it).
Emit = Callable[[dict[str, Any]], Awaitable[None]]
Producer = Callable[[Emit], Awaitable[None]]


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class _Live:
    """A task whose turn runs: how to cancel it, who follows it."""

    def __init__(self) -> None:
        self.turn: Turn | None = None
        self.cancel_requested = False
        self.done = anyio.Event()
        self.subscribers: list[MemoryObjectSendStream[Update]] = []

    def cancel(self) -> None:
        self.cancel_requested = True
        if self.turn is not None:
            self.turn.cancel()

    def publish(self, update: Update) -> None:
        for sub in list(self.subscribers):
            try:
                sub.send_nowait(update)
            except (anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError):
                self.subscribers.remove(sub)  # fell behind, or left
                sub.close()

    def close(self) -> None:
        for sub in self.subscribers:
            sub.close()
        self.subscribers.clear()
        self.done.set()


class A2AOperations:
    """The A2A operations of one app, for both bindings (see the module docstring)."""

    def __init__(self, host: Host) -> None:
        self.host = host
        config = host.config
        self.push_limits = a2a_push.PushLimits(
            max_configs=config.a2a_max_push_configs,
            max_config_bytes=config.a2a_max_push_config_bytes,
        )
        self.tasks: OwnedLRU[A2ATask] = OwnedLRU(per_owner=MAX_TASKS_PER_PRINCIPAL, total=MAX_TASKS)
        self.live: dict[str, _Live] = {}

    # --- the card ---------------------------------------------------------------

    def card(self, agent: Responder, request: Request) -> dict[str, Any]:
        base = f"{request.scheme}://{request.headers.get('host', '127.0.0.1')}"
        # The endpoint beside the card, wherever the app is mounted (root_path included).
        url = base + request.full_path.rsplit("/.well-known/", 1)[0] + "/a2a"
        description = getattr(agent, "description", None)
        secured = self.host.config.authenticator is not None
        return a2a_card.agent_card(
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
            security_schemes=(
                {"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}} if secured else None
            ),
        )

    async def agent_card(self, request: Request) -> Reply:
        agent = self.host.resolve_agent(request.path_params)
        card = self.card(agent, request)
        wanted = request.headers.get("a2a-version") or ""
        legacy = request.path.endswith("/agent.json") or wanted.strip().startswith("0.3")
        if legacy:
            card = a2a_card.legacy_card(card, rpc_url=card["supportedInterfaces"][0]["url"])
        key = self.host.config.a2a_card_key
        if key is not None:
            # The JWKS beside the card: the app serves it wherever it is mounted.
            beside = request.full_path.rsplit("/.well-known/", 1)[0]
            jku = f"{request.scheme}://{request.headers.get('host', '127.0.0.1')}{beside}"
            card = a2a_card.sign_served_card(
                card, key.key, key.kid, jku=jku + JWKS_PATH, legacy=legacy
            )
        return JsonReply(card)

    # --- the operations -------------------------------------------------------------

    async def send(
        self, agent: Responder, request: Request, params: dict[str, Any], dialect: Dialect
    ) -> tuple[dict[str, Any], Callable[[], Awaitable[object]] | None]:
        """``SendMessage``: the result, and the turn to run after answering (not blocking)."""
        task, turn, charge = await self._prepare(agent, request, params, dialect)
        if not a2a_params.blocking(params, dialect):
            live = self._go_live(task)
            rendered = a2a.render_task(task, dialect)

            async def later() -> None:
                await self._run(agent, task, turn, charge, None, live, request.background)

            return ({"task": rendered} if dialect is Dialect.V1 else rendered), later
        live = self._go_live(task)
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
                if not task.state.is_terminal:
                    task.move(Trigger.CANCEL, _now())
                if charge is not None:
                    await charge.settle(None, used=False)

        return produce, never_ran

    def get(self, principal: Principal, params: dict[str, Any], dialect: Dialect) -> Any:
        """``GetTask``."""
        task = self._task(a2a.task_id_param(params), principal)
        history = a2a.opt_int(params, "historyLength")
        return a2a.render_task(task, dialect, history_length=history)

    async def cancel(
        self,
        principal: Principal,
        params: dict[str, Any],
        dialect: Dialect,
        background: TaskGroup | None = None,
    ) -> Any:
        """``CancelTask``: a live turn is cancelled; a paused task ends canceled at once
        (its webhooks told, in ``background``)."""
        task = self._task(a2a.task_id_param(params), principal)
        live = self.live.get(task.id)
        if live is not None:
            live.cancel()
            with anyio.move_on_after(CANCEL_WAIT):
                await live.done.wait()
        else:
            task.move(Trigger.CANCEL, _now())  # a finished task raises TaskNotCancelable
            task.status_message = None
            task.pending_tool_calls = []
            canceled = attrs.evolve(TaskRun(task, random_ids).status(), final=True)
            self._push(task, canceled, background)
        return a2a.render_task(task, dialect)

    def list_tasks(self, agent: Responder, principal: Principal, params: dict[str, Any]) -> Any:
        """``ListTasks``: the caller's tasks of ``agent``, newest first, filtered and paged."""
        query = a2a_params.parse_list_params(params)
        mine = [
            t for t in self.tasks.owned_by(principal) if t.agent == agent.name and query.matches(t)
        ]
        mine.sort(key=lambda t: t.timestamp or "", reverse=True)  # last updated first
        return a2a_params.list_page(mine, query)

    def push_config(
        self, principal: Principal, method: str, params: dict[str, Any], dialect: Dialect
    ) -> Any:
        """The push-notification config methods (set, get, list, delete) of either dialect."""
        op = a2a_params.PUSH_METHODS[method]
        task = self._task(a2a_params.task_id_of(params, op, dialect), principal)
        sender = self._sender()  # after the task: another's answers like a missing one
        result, _ = a2a_push.config_call(
            task,
            op,
            params,
            dialect,
            ids=random_ids,
            limits=self.push_limits,
            check_target=sender.check_target,
        )
        return result

    def _sender(self) -> PushDelivery:
        sender = self.host.config.a2a_push
        if sender is None:
            raise A2AError(
                a2a.PUSH_NOTIFICATION_NOT_SUPPORTED,
                "This app delivers no push notifications (Config.a2a_push is not set).",
            )
        return sender

    def _push(self, task: A2ATask, update: Update, background: TaskGroup | None) -> None:
        """Tell ``task``'s webhooks of ``update``, in tasks of ``background``."""
        sender = self.host.config.a2a_push
        if task.push_configs and sender is not None and update.kind != "message":
            sender.notify(background, task, update)

    def subscribe(
        self, principal: Principal, params: dict[str, Any], dialect: Dialect
    ) -> tuple[Producer, Callable[[], Awaitable[object]]]:
        """``SubscribeToTask``: the task snapshot, then the live turn's updates until it ends.

        Returns the producer and what frees the subscription if it never runs.
        """
        task = self._task(a2a.task_id_param(params), principal)
        if task.state.is_terminal:
            raise A2AError(
                a2a.UNSUPPORTED_OPERATION,
                f"Task {task.id} is {task.state.value}; there is nothing left to stream.",
            )
        live = self.live.get(task.id)
        send, receive = anyio.create_memory_object_stream[Update](SUBSCRIBER_BUFFER)
        if live is None:
            send.close()  # paused: the snapshot is all there is until a message resumes it
        elif len(live.subscribers) >= MAX_SUBSCRIBERS:
            raise A2AError(
                a2a.UNSUPPORTED_OPERATION,
                f"Task {task.id} has {MAX_SUBSCRIBERS} subscribers already.",
            )
        else:
            live.subscribers.append(send)
        snapshot = a2a.stream_task(task, dialect)

        async def produce(emit: Emit) -> None:
            with receive:
                await emit(snapshot)
                async for update in receive:
                    if update.kind != "message":
                        await emit(a2a.render_update(update, dialect))

        async def never_ran() -> None:
            receive.close()

        return produce, never_ran

    # --- tasks and turns --------------------------------------------------------------

    def _task(self, task_id: str, principal: Principal) -> A2ATask:
        found = self.tasks.get(principal, task_id)
        if found is None:
            raise a2a.task_not_found(task_id)
        return found

    def _go_live(self, task: A2ATask) -> _Live:
        live = self.live[task.id] = _Live()
        return live

    def _forget_live(self, task: A2ATask, live: _Live) -> None:
        if self.live.get(task.id) is live:
            del self.live[task.id]
        live.close()

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

        As under ``uamp serve``, a caller who cannot pay leaves no task behind
        and a paused task unchanged.
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
        if message.task_id is not None:
            task = self._task(message.task_id, principal)
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
            response_id = random_ids("resp")
            charge = await self._charge(agent, request, response_id)
            task = A2ATask(
                id=random_ids("task"),
                context_id=message.context_id or random_ids("ctx"),
                agent=agent.name,
                timestamp=_now(),
                history=[stored],
                conversation=[message.to_uamp()],
                tools=tools,
            )
            self.tasks.put(principal, task.id, task)
            trigger = Trigger.START
        if push_config is not None:
            task.push_configs[push_config["id"]] = push_config
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
        subscribers and webhooks (delivered in ``background``); a direct reply."""
        run = TaskRun(task, random_ids)
        try:

            async def deliver(updates: list[Update]) -> None:
                if run.reply is None:
                    for update in updates:
                        live.publish(update)
                        self._push(task, update, background)
                        if write is not None:
                            await write(update)

            async def sink(event: Event) -> None:
                await deliver(run.feed(event))

            live.turn = Turn(agent, turn, sink, charge=charge)
            if live.cancel_requested:
                live.turn.cancel()
            try:
                outcome = await live.turn.run()
            except BaseException:
                # The request carrying the turn was cancelled (the server
                # stops): the task ends canceled rather than working for ever.
                if not (task.state.is_terminal or task.state.is_interrupted):
                    task.move(Trigger.CANCEL, _now())
                raise
            await deliver(run.end(outcome, _now()))
        finally:
            self._forget_live(task, live)
        if run.reply is not None:
            self.tasks.pop(turn.principal, task.id)  # a direct reply is no task
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
