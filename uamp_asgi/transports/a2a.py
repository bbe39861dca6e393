"""Google A2A over JSON-RPC on ASGI (both dialects a2a-sdk speaks: 1.0 and 0.3).

Endpoints, as ``uamp serve``'s (:mod:`uamp_trio.transports.a2a`):
``GET .../.well-known/agent-card.json`` (public), and ``POST .../a2a`` with
``SendMessage`` / ``message/send``, ``SendStreamingMessage`` /
``message/stream`` (SSE) and ``GetTask`` / ``tasks/get``. Parsing, the task
state machine (:class:`~uamp_proto.adapters.a2a.TaskRun`) and rendering are
:mod:`uamp_proto.adapters.a2a`'s; this module runs one turn per message
inside the request and keeps tasks in memory (bounded; another principal's
task answers like a missing one). A message with ``taskId`` continues a task
that paused (client tool results, input asked for). Cancelling, listing,
resubscribing, push notifications, the HTTP+JSON and gRPC bindings are
``uamp serve``'s: those methods answer ``UnsupportedOperationError``.
"""

from __future__ import annotations

import datetime
from collections.abc import Awaitable, Callable
from typing import Any, Final

import orjson

from uamp_proto.adapters import a2a, a2a_card, a2a_params
from uamp_proto.adapters.a2a import A2AError, A2ATask, Dialect, TaskRun, Trigger, Update
from uamp_proto.events import Event
from uamp_proto.ids import random_ids
from uamp_proto.payment import PaymentRequiredError
from uamp_proto.principal import Principal
from uamp_proto.responder import Responder, TurnRequest
from uamp_proto.sse import encode_json

from ..app import Host
from ..bounded import OwnedLRU
from ..http import JsonReply, Reply, Request, StreamReply, Write
from ..turns import run_turn

__all__ = ["MAX_TASKS", "mount"]

#: Tasks kept (all principals); the least recently used go first.
MAX_TASKS: Final = 4096
#: Tasks one principal keeps; its own oldest go first.
MAX_TASKS_PER_PRINCIPAL: Final = 512


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _rpc(request_id: Any, result: Any) -> JsonReply:
    return JsonReply(a2a.result_response(request_id, result))


class _A2A:
    def __init__(self, host: Host) -> None:
        self.host = host
        self.tasks: OwnedLRU[A2ATask] = OwnedLRU(per_owner=MAX_TASKS_PER_PRINCIPAL, total=MAX_TASKS)

    def card(self, agent: Responder, request: Request) -> dict[str, Any]:
        base = f"{request.scheme}://{request.headers.get('host', '127.0.0.1')}"
        # The JSON-RPC endpoint beside the card, wherever the app is mounted.
        url = base + request.full_path.rsplit("/.well-known/", 1)[0] + "/a2a"
        description = getattr(agent, "description", None)
        secured = self.host.config.authenticator is not None
        return a2a_card.agent_card(
            name=agent.name,
            capabilities=agent.capabilities(),
            interfaces=[
                a2a_card.Interface(url, "JSONRPC", "1.0"),
                a2a_card.Interface(url, "JSONRPC", "0.3"),
            ],
            base_url=base,
            description=description if isinstance(description, str) and description else None,
            security_schemes=(
                {"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}} if secured else None
            ),
        )

    async def agent_card(self, request: Request) -> Reply:
        agent = self.host.resolve_agent(request.path_params)
        card = self.card(agent, request)
        wanted = request.headers.get("a2a-version") or ""
        if request.path.endswith("/agent.json") or wanted.strip().startswith("0.3"):
            card = a2a_card.legacy_card(card, rpc_url=card["supportedInterfaces"][0]["url"])
        return JsonReply(card)

    async def rpc(self, request: Request) -> Reply:
        agent = self.host.resolve_agent(request.path_params)
        try:
            wanted = a2a.negotiate_version(request.headers.get("a2a-version"))
            call = a2a.parse_rpc(request.body)
        except a2a.RpcError as exc:
            return JsonReply(a2a.error_response(exc.request_id, exc, exc.dialect))
        except A2AError as exc:
            return JsonReply(a2a.error_response(None, exc))
        try:
            if wanted is Dialect.V1 and call.dialect is Dialect.V03:
                raise A2AError(a2a.METHOD_NOT_FOUND, f"{call.method} is an A2A 0.3 method.")
            params = call.params
            if call.dialect is Dialect.V1:
                params = a2a_params.camel_keys(params)
            op, dialect = call.operation, call.dialect
            if op == "get":
                task = self._task(a2a.task_id_param(params), request.principal)
                history = a2a.opt_int(params, "historyLength")
                return _rpc(call.id, a2a.render_task(task, dialect, history_length=history))
            if op not in ("send", "stream"):
                raise A2AError(
                    a2a.UNSUPPORTED_OPERATION,
                    f"{call.method} is served by `uamp serve`, not the ASGI app.",
                )
            task, turn = await self._prepare(agent, request, params)
            if op == "send":
                reply = await self._run(agent, task, turn, None)
                if reply is not None:
                    message = a2a.render_message(reply, dialect, context_id=task.context_id)
                    result = {"message": message} if dialect is Dialect.V1 else message
                else:
                    rendered = a2a.render_task(task, dialect)
                    result = {"task": rendered} if dialect is Dialect.V1 else rendered
                return _rpc(call.id, result)
            return self._stream(agent, task, turn, call.id, dialect)
        except A2AError as exc:
            return JsonReply(a2a.error_response(call.id, exc, call.dialect))

    def _task(self, task_id: str, principal: Principal) -> A2ATask:
        found = self.tasks.get(principal, task_id)
        if found is None:
            raise a2a.task_not_found(task_id)
        return found

    async def _prepare(
        self, agent: Responder, request: Request, params: dict[str, Any]
    ) -> tuple[A2ATask, TurnRequest]:
        if params.get("message") is None:
            raise A2AError(a2a.INVALID_PARAMS, "'message' is required.")
        message = a2a.parse_message(params.get("message"), message_id="")
        if message.role != "user":
            raise A2AError(a2a.INVALID_PARAMS, "'message.role' must be user.")
        principal = request.principal
        stored = a2a.StoredMessage(
            message_id=message.message_id,
            role="user",
            items=list(message.items),
            data=list(message.data),
            metadata=message.metadata,
        )
        metadata = params.get("metadata")
        tools = a2a.parse_tools(metadata if isinstance(metadata, dict) else None)
        if message.task_id is not None:
            task = self._task(message.task_id, principal)
            a2a.transition(task.state, Trigger.RESUME)  # raises unless paused
            if task.pending_tool_calls:
                task.conversation.extend(a2a.parse_tool_results(message, task.pending_tool_calls))
            else:
                task.conversation.append(message.to_uamp())
            task.pending_tool_calls = []
            task.history.append(stored)
            trigger = Trigger.RESUME
        else:
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
        token = request.headers.get("x-payment")
        turn = TurnRequest(
            agent=agent.name,
            principal=principal,
            session_id=task.context_id,
            response_id=random_ids("resp"),
            messages=list(task.conversation),
            tools=list(tools or task.tools),
            payment_token=token,
            metadata={"a2a_task_id": task.id, "a2a_context_id": task.context_id},
        )
        task.move(trigger, _now())
        return task, turn

    async def _run(
        self,
        agent: Responder,
        task: A2ATask,
        turn: TurnRequest,
        write: Callable[[Update], Awaitable[None]] | None,
    ) -> a2a.StoredMessage | None:
        """Run the task's turn; ``write`` gets every update. The agent's direct reply, if any."""
        run = TaskRun(task, random_ids)
        try:
            charge = await self.host.open_charge(
                agent, turn.payment_token, turn.response_id, turn.principal
            )
        except PaymentRequiredError as unpaid:
            task.move(Trigger.FAIL, _now())
            raise a2a.payment_error(unpaid) from None

        async def deliver(updates: list[Update]) -> None:
            if write is not None and run.reply is None:
                for update in updates:
                    await write(update)

        async def sink(event: Event) -> None:
            await deliver(run.feed(event))

        outcome = await run_turn(agent, turn, sink, charge=charge)
        updates = run.end(outcome, _now())
        await deliver(updates)
        if run.reply is not None:
            self.tasks.pop(turn.principal, task.id)  # a direct reply is no task
        return run.reply

    def _stream(
        self, agent: Responder, task: A2ATask, turn: TurnRequest, request_id: Any, dialect: Dialect
    ) -> StreamReply:
        snapshot = a2a.stream_task(task, dialect)

        def frame(result: Any) -> bytes:
            return encode_json(orjson.dumps(a2a.result_response(request_id, result)))

        async def produce(write: Write) -> None:
            opened = False

            async def send(update: Update) -> None:
                nonlocal opened
                if not opened:
                    opened = True
                    await write(frame(snapshot))
                await write(frame(a2a.render_update(update, dialect)))

            reply = await self._run(agent, task, turn, send)
            if reply is not None:
                message = a2a.render_message(reply, dialect, context_id=task.context_id)
                await write(frame({"message": message} if dialect is Dialect.V1 else message))
            elif not opened:
                await write(frame(snapshot))

        return StreamReply(produce)


def mount(host: Host) -> None:
    """Register the agent card and the JSON-RPC endpoint."""
    t = _A2A(host)
    for path in ("/.well-known/agent-card.json", "/.well-known/agent.json"):
        host.route("GET", path, t.agent_card, public=True)
    host.route("POST", "/a2a", t.rpc, style="jsonrpc")
    host.route("POST", "/a2a/", t.rpc, style="jsonrpc")
