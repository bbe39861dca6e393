"""The Google A2A transport (A2A 1.0 and 0.3; spec 004 "A2A Transport"; UAMP 1.3, 9.2).

Endpoints, for every hosted agent (and at the root for a single agent):

* ``GET /agents/{name}/.well-known/agent-card.json`` -- the A2A 1.0 card
  (the 0.3 card when the request says ``A2A-Version: 0.3``), and
  ``.../agent.json`` -- the 0.3 card with UAMP's ``modelCapabilities``;
  interface URLs are absolute, built from the request's ``Host`` (or the
  ``public_url`` given to :func:`transport`); ``Cache-Control``, ``ETag``,
  ``Last-Modified`` and ``304`` on ``If-None-Match``;
* ``POST /agents/{name}/a2a`` (and ``.../a2a/``) -- JSON-RPC 2.0, both
  dialects a2a-sdk speaks: 1.0 (``SendMessage``, ``SendStreamingMessage``,
  ``GetTask``, ``CancelTask``, ``ListTasks``, ``SubscribeToTask``, the
  push-notification config methods, ``GetExtendedAgentCard``) and 0.3
  (``message/send``, ``message/stream``, ``tasks/get``, ``tasks/cancel``,
  ``tasks/resubscribe``, ``tasks/pushNotificationConfig/*``); streams are SSE;
* ``.../a2a/message:send`` and the other HTTP+JSON routes
  (:mod:`uamp_trio.transports.a2a_rest`);
* ``POST /agents/{name}/tasks`` -- spec 004's REST form: an SSE stream of
  ``task.started``, ``task.message`` ..., ``task.completed`` /
  ``task.failed`` / ``task.canceled`` / ``task.input_required``;
  ``GET /agents/{name}/tasks/{id}`` and ``DELETE /agents/{name}/tasks/{id}``
  (cancel).

Every binding calls the same operations (:meth:`A2ATransport.send`,
:meth:`~A2ATransport.stream`, :meth:`~A2ATransport.get` ...), which take
the request's params as ProtoJSON (1.0) or 0.3 JSON and answer the same
objects: a conversation gives the same tasks over every binding. The
``A2A-Version`` header picks the protocol version
(:func:`uamp_proto.adapters.a2a.negotiate_version`); an unknown one is
``VersionNotSupportedError``.

Every send is admitted by :func:`.sends.prepare` (the message checked, the
task created or resumed, its place in the context and the turn's price held:
payment refusals are JSON-RPC error ``-32402`` with ``data``
``{"status_code": 402, "accepts": [...]}``, ``task.failed`` with ``code:
"payment_required"`` on the REST form) and run by :class:`.tasks.Tasks`: in
the server's background nursery, followed by the request that sent it,
cancelled from any request, signed when the app signs responses.

Ownership (docs/security.md): a task belongs to the principal whose request
created it (``request.principal``). Every operation that names a task --
``GetTask``, ``CancelTask``, ``SubscribeToTask``, a send with ``taskId``,
the REST ``GET``/``DELETE`` -- answers another principal's task exactly as a
task that does not exist; ``ListTasks`` lists the caller's tasks only, and a
send into another principal's ``contextId`` starts a fresh conversation, as
it does for an unknown one.
"""

from __future__ import annotations

import email.utils
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import attrs
import orjson
import trio

from uamp_proto.adapters import a2a, a2a_card, a2a_params, a2a_push
from uamp_proto.adapters.a2a import QUOTA_EXCEEDED, A2AError, A2ATask, Dialect, Update
from uamp_proto.adapters.a2a_card import Interface
from uamp_proto.ids import IdSource, random_ids
from uamp_proto.payment import Charge, PaymentPolicy
from uamp_proto.principal import Principal
from uamp_proto.responder import Responder
from uamp_proto.signing import JWKS_PATH
from uamp_stores.a2a_push import PushSender
from uamp_stores.health import StoreUnavailable

from ...engines import http as web
from ...engines.http import JSON_HEADERS, Request, Response, StreamingResponse, json_response
from ...grpc import AVAILABLE as GRPC_AVAILABLE
from ...hosting.host import Host, Transport
from ...hosting.router import RouteMeta
from . import rest as a2a_rest
from .call import SSE_HEADERS, Call, Emit, Opened, SseEmit, TextPen, check_json_body, sse
from .sends import PaymentRefused, prepare
from .tasks import Prepared, Tasks
from .tasks import _forward as _forward  # (tests of its batching import it from here)

if GRPC_AVAILABLE:  # the grpc extra; without it the gRPC binding is not mounted
    from . import grpc as a2a_grpc

__all__ = ["A2ATransport", "mount", "transport"]

#: What middleware knows of these routes: the agent card is public; JSON-RPC
#: refusals are JSON-RPC errors; the REST binding answers OpenAI-shaped objects
#: (as its own errors).
CARD_ROUTES = RouteMeta(transport="a2a", error_style="openai", public=True)
RPC_ROUTES = RouteMeta(transport="a2a", error_style="jsonrpc")
REST_ROUTES = RouteMeta(transport="a2a", error_style="openai")

#: How long a client may cache a card (A2A 1.0 section 8.6).
_CARD_MAX_AGE = 300


class A2ATransport:
    """The A2A endpoints of an :class:`~uamp_trio.app.App`.

    Args:
        app: The app to mount on.
        payment_policy: Consulted before every new task instead of the app's
            (``None``: ask :meth:`App.payment_required`).
        public_url: Base URL for the card's interface URLs (default: from
            the request's scheme and ``Host``).
        ids: Id source for tasks, contexts and messages.
        push: Delivers push notifications (default: a
            :class:`~uamp_stores.a2a_push.PushSender` that refuses
            private and loopback targets).
        sign_cards: Sign every card (``signatures``: a JWS over its RFC 8785
            form, :mod:`uamp_proto.card_signing`) with the server's envelope
            key, whose ``kid`` and ``jku`` (``/.well-known/jwks.json``) the
            signature names.
        extended_card: Card members authenticated callers get from
            ``GetExtendedAgentCard`` (:func:`~uamp_proto.adapters.a2a_card.extend_card`);
            served, and announced by ``capabilities.extendedAgentCard``, only
            when the server authenticates.
    """

    def __init__(
        self,
        app: Host,
        *,
        payment_policy: PaymentPolicy | None = None,
        public_url: str | None = None,
        ids: IdSource = random_ids,
        push: PushSender | None = None,
        sign_cards: bool = False,
        extended_card: Mapping[str, Any] | None = None,
    ) -> None:
        self.app = app
        #: Cards are signed with the server's envelope key (published in its JWKS).
        self.sign_cards = sign_cards
        if sign_cards:
            if app.envelopes is None:
                raise ValueError("signing agent cards needs the server's envelope key")
            app.envelopes.key_in_use = True
        #: What authenticated callers see besides the public card (``GetExtendedAgentCard``).
        self.card_extension = dict(extended_card) if extended_card is not None else None
        self.public_url = public_url.rstrip("/") if public_url else None
        #: The app's task store (:attr:`Stores.a2a_tasks <uamp_trio.stores.Stores.a2a_tasks>`).
        self.store = app.stores.a2a_tasks
        self.ids = ids
        self.push = push if push is not None else PushSender()
        #: The tasks and their turns (:mod:`.tasks`).
        self.tasks = Tasks(app, payment_policy=payment_policy, ids=ids, push=self.push)
        #: When the cards last changed (the server started): ``Last-Modified``.
        self._since = email.utils.formatdate(usegmt=True)

    async def charge(
        self, agent: Responder, token: str | None, response_id: str, principal: Principal
    ) -> Charge | None:
        """Hold the price of one turn of ``agent`` (new task or resumed) before it runs.

        Raises:
            PaymentRequiredError: The turn may not run until paid.
        """
        return await self.tasks.charge(agent, token, response_id, principal)

    def mount(self) -> None:
        """Register the routes on the app."""
        app = self.app
        card = "/.well-known/agent-card.json"
        app.agent_route("GET", card, self.card, label="A2A agent card", meta=CARD_ROUTES)
        app.agent_route("GET", "/.well-known/agent.json", self.card, meta=CARD_ROUTES)
        app.agent_route("POST", "/a2a", self.rpc, label="A2A JSON-RPC", meta=RPC_ROUTES)
        app.agent_route("POST", "/a2a/", self.rpc, meta=RPC_ROUTES)
        a2a_rest.mount(app, self)
        if GRPC_AVAILABLE:
            a2a_grpc.mount(app, self)
        app.agent_route(
            "POST", "/tasks", self.rest_create, label="A2A tasks (REST)", meta=REST_ROUTES
        )
        app.agent_route("GET", "/tasks/{task_id}", self.rest_get, meta=REST_ROUTES)
        app.agent_route("DELETE", "/tasks/{task_id}", self.rest_cancel, meta=REST_ROUTES)

    # --- the agent card ----------------------------------------------------------------

    def _base_url(self, request: Request) -> str:
        if self.public_url:
            return self.public_url
        host = request.headers.get("host") or "127.0.0.1"
        return f"{request.scheme}://{host}{request.root_path}"

    def agent_card(
        self, agent: Responder, request: Request, *, extended: bool = False, legacy: bool = False
    ) -> dict[str, Any]:
        """The A2A 1.0 card of ``agent`` as seen through ``request`` (signed when configured).

        ``extended``: the authenticated extended card (the operator's additions).
        ``legacy``: the 0.3 card instead, signed twice (over the whole card,
        and over what a2a-sdk 0.3 reads of it).
        """
        base = self._base_url(request)
        prefix = f"/agents/{agent.name}" if "agent" in request.path_params else ""
        url = f"{base}{prefix}/a2a"
        description = getattr(agent, "description", None)
        tenant = agent.name if prefix else None
        interfaces = [
            Interface(url, "JSONRPC", "1.0"),
            Interface(url, "JSONRPC", "0.3"),
            Interface(url, "HTTP+JSON", "1.0"),
        ]
        if GRPC_AVAILABLE:
            # gRPC dials host:port (same port, HTTP/2); the tenant names the agent.
            interfaces.append(Interface(urlsplit(base).netloc, "GRPC", "1.0", tenant=tenant))
        secured = self.app.authenticator is not None
        card = a2a_card.agent_card(
            name=agent.name,
            capabilities=agent.capabilities(),
            interfaces=interfaces,
            base_url=base,
            description=description if isinstance(description, str) else None,
            push_notifications=True,
            extended_card=secured and self.card_extension is not None,
            security_schemes=(
                {"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}} if secured else None
            ),
        )
        if extended and self.card_extension is not None:
            card = a2a_card.extend_card(card, self.card_extension)
        if legacy:
            card = a2a_card.legacy_card(card, rpc_url=url)
        envelopes = self.app.envelopes
        if self.sign_cards and envelopes is not None:
            key, jku = envelopes.key, f"{base}{JWKS_PATH}"
            card = a2a_card.sign_served_card(card, key.key, key.kid, jku=jku, legacy=legacy)
        return card

    async def card(self, request: Request) -> Response:
        """``GET .../.well-known/agent-card.json`` (and ``agent.json``): the card, cacheable.

        ``agent-card.json`` is the 1.0 card unless the request asks for
        ``A2A-Version: 0.3``; ``agent.json`` is always the 0.3 card (with
        UAMP's ``modelCapabilities``).
        """
        agent = self.app.resolve_agent(request.path_params)
        wanted = request.headers.get("a2a-version") or ""
        legacy = request.path.endswith("/agent.json") or wanted.strip().startswith("0.3")
        card = self.agent_card(agent, request, legacy=legacy)
        body = orjson.dumps(card)
        etag = a2a_card.card_etag(body)
        headers = [
            ("cache-control", f"public, max-age={_CARD_MAX_AGE}"),
            ("etag", etag),
            ("last-modified", self._since),
            ("vary", "Host, A2A-Version"),
        ]
        match = request.headers.get("if-none-match") or ""
        if etag in (tag.strip() for tag in match.split(",")) or match.strip() == "*":
            return Response(status=304, headers=headers)
        return Response(status=200, headers=[*JSON_HEADERS, *headers], body=body)

    # --- JSON-RPC ------------------------------------------------------------------------

    async def rpc(self, request: Request) -> Response | StreamingResponse:
        """``POST .../a2a``: one JSON-RPC request (batches are refused)."""
        agent = self.app.resolve_agent(request.path_params)
        try:
            check_json_body(request)
            wanted = a2a.negotiate_version(request.headers.get("a2a-version"))
            call = a2a.parse_rpc(request.body)
        except a2a.RpcError as exc:
            return json_response(a2a.error_response(exc.request_id, exc, exc.dialect))
        except A2AError as exc:
            return json_response(a2a.error_response(None, exc))
        try:
            if wanted is Dialect.V1 and call.dialect is Dialect.V03:
                raise A2AError(
                    a2a.METHOD_NOT_FOUND,
                    f"Method not found: {call.method} is an A2A 0.3 method; "
                    "A2A-Version 1.0 was asked for.",
                )
            if call.dialect is Dialect.V1:  # ProtoJSON readers take proto field names too
                call = attrs.evolve(call, params=a2a_params.camel_keys(call.params))
            return await self._dispatch(Call(agent, request, call.dialect), call)
        except A2AError as exc:
            return json_response(a2a.error_response(call.id, exc, call.dialect))
        except StoreUnavailable as exc:  # the task store (Redis) does not answer now
            error = A2AError(
                a2a.INTERNAL_ERROR, exc.message, data={"code": exc.code}, http_status=503
            )
            return json_response(a2a.error_response(call.id, error, call.dialect))

    async def _dispatch(self, call: Call, rpc: a2a.RpcCall) -> Response | StreamingResponse:
        op, params = rpc.operation, rpc.params

        def answer(result: Any) -> Response:
            return json_response(a2a.result_response(rpc.id, result))

        if op in ("stream", "subscribe"):
            opener = self.stream if op == "stream" else self.subscribe
            opened = await opener(call, params)
            return opened.sse(lambda result: a2a.result_response(rpc.id, result))
        if op == "send":
            return answer(await self.send(call, params))
        if op == "get":
            return answer(await self.get(call, params))
        if op == "cancel":
            return answer(await self.cancel(call, params))
        if op == "list":
            return answer(await self.list_tasks(call, params))
        if op == "extended_card":
            return answer(self.extended_card(call))
        return answer(await self.push_config(call, rpc.method, params))

    # --- the operations (every binding) ----------------------------------------------------

    async def send(self, call: Call, params: dict[str, Any]) -> dict[str, Any]:
        """``SendMessage``: the task (or the agent's direct message) as a send's result."""
        prepared = await prepare(self.tasks, call, params, rest=False)
        await self.tasks.execute(
            call.agent, prepared, None, wait=a2a_params.blocking(params, call.dialect)
        )
        if prepared.reply is not None:
            return _message_result(prepared, call.dialect)
        rendered = a2a.render_task(
            prepared.task, call.dialect, history_length=prepared.history_length
        )
        return {"task": rendered} if call.dialect is Dialect.V1 else rendered

    async def stream(self, call: Call, params: dict[str, Any]) -> Opened:
        """``SendStreamingMessage``: the task snapshot (or a message), then its updates."""
        if call.agent.capabilities().supports_streaming is False:
            raise A2AError(
                a2a.UNSUPPORTED_OPERATION, "This agent does not stream (capabilities.streaming)."
            )
        prepared = await prepare(self.tasks, call, params, rest=False)
        dialect = call.dialect
        # The task as submitted: sent before its first update, unless the
        # agent answers with a message (then no task is shown at all).
        snapshot = a2a.stream_task(prepared.task, dialect)

        async def produce(emit: Emit) -> None:
            opened = False

            async def write(update: Update) -> None:
                nonlocal opened
                if update.kind == "message":
                    await emit(_message_result(prepared, dialect))
                    return
                if not opened:
                    opened = True
                    await emit(snapshot)
                if isinstance(emit, SseEmit):  # text chunks from a template
                    await emit.update(update, dialect)
                else:
                    await emit(a2a.render_update(update, dialect))

            async def write_many(updates: list[Update]) -> None:
                # No direct reply comes once the first update is out (a
                # reply is the first thing a turn shows): frames alone.
                if opened and prepared.reply is None and isinstance(emit, SseEmit):
                    await emit.updates(updates, dialect)
                else:
                    for update in updates:
                        await write(update)

            def pen_of(update: Update) -> TextPen | None:
                if opened and prepared.reply is None and isinstance(emit, SseEmit):
                    return emit.pen(update, dialect)
                return None

            prepared.write_many = write_many
            prepared.pen_of = pen_of
            await self.tasks.execute(call.agent, prepared, write)
            if not opened and prepared.reply is None:
                await emit(snapshot)

        return Opened(produce, prepared.release_unstarted)

    async def get(self, call: Call, params: dict[str, Any]) -> dict[str, Any]:
        """``GetTask``."""
        task = await self.tasks.find(call.agent, a2a.task_id_param(params), call.principal)
        history = a2a.opt_int(params, "historyLength")
        return a2a.render_task(task, call.dialect, history_length=history)

    async def cancel(self, call: Call, params: dict[str, Any]) -> dict[str, Any]:
        """``CancelTask``."""
        canceled = await self.tasks.cancel(call.agent, a2a.task_id_param(params), call.principal)
        return a2a.render_task(canceled, call.dialect)

    async def subscribe(self, call: Call, params: dict[str, Any]) -> Opened:
        """``SubscribeToTask``: the task snapshot, then the running task's updates."""
        task_id = a2a.task_id_param(params)
        self.store.ensure_running(self.app.background)
        task, feed = await self.tasks.follow(call.agent, task_id, call.principal)
        if task.state.is_terminal:
            feed.close()
            raise A2AError(
                a2a.UNSUPPORTED_OPERATION,
                f"Task {task_id} is {task.state.value}; there is nothing left to stream.",
            )
        dialect = call.dialect

        async def produce(emit: Emit) -> None:
            try:
                await emit(a2a.stream_task(task, dialect))
                async with trio.open_nursery() as watch:
                    if self.store.shared:
                        watch.start_soon(
                            self.tasks.watch_runner, call.agent, task_id, call.principal
                        )
                    async for update in feed:
                        if update.kind != "message":
                            await emit(a2a.render_update(update, dialect))
                    watch.cancel_scope.cancel()
            finally:
                feed.close()

        async def never_started() -> None:
            feed.close()

        return Opened(produce, never_started)

    async def list_tasks(self, call: Call, params: dict[str, Any]) -> dict[str, Any]:
        """``ListTasks``: the caller's tasks of this agent, newest first, filtered and paged."""
        query = a2a_params.parse_list_params(params)
        tasks = [
            t
            for t in reversed(await self.store.owned_by(call.principal))
            if t.agent == call.agent.name and query.matches(t)
        ]
        return a2a_params.list_page(tasks, query)

    def extended_card(self, call: Call) -> dict[str, Any]:
        """``GetExtendedAgentCard``: the card for an authenticated caller.

        Raises:
            A2AError: :data:`~a2a.EXTENDED_CARD_NOT_CONFIGURED` without
                authentication on the server (the card says
                ``extendedAgentCard: false`` then).
        """
        if self.app.authenticator is None or self.card_extension is None:
            raise A2AError(
                a2a.EXTENDED_CARD_NOT_CONFIGURED,
                "This agent has no authenticated extended card"
                + (
                    " (the server has no authentication)."
                    if self.app.authenticator is None
                    else "."
                ),
            )
        return self.agent_card(call.agent, call.request, extended=True)

    async def push_config(self, call: Call, method: str, params: dict[str, Any]) -> Any:
        """The push-notification config methods (set, get, list, delete) of either dialect."""
        op = a2a_params.PUSH_METHODS[method]
        task_id = a2a_params.task_id_of(params, op, call.dialect)
        task = await self.tasks.find(call.agent, task_id, call.principal)
        result, changed = a2a_push.config_call(
            task,
            op,
            params,
            call.dialect,
            ids=self.ids,
            limits=self.tasks.push_limits,
            check_target=self.push.check_target,
        )
        if changed:
            await self.store.save_push_configs(task)
        return result

    # --- the REST form (spec 004) ----------------------------------------------------------

    async def rest_create(self, request: Request) -> StreamingResponse:
        """``POST .../tasks``: create a task; the answer is an SSE stream."""
        agent = self.app.resolve_agent(request.path_params)
        body = await request.json()
        if not isinstance(body, dict):
            raise web.HTTPError(
                400, "The body must be a JSON object with a 'message'.", code="invalid_request"
            )
        try:
            prepared = await prepare(self.tasks, Call(agent, request, Dialect.V03), body, rest=True)
        except PaymentRefused as refused:
            task = refused.task
            error = refused.error
            data = a2a.payment_failed_event(
                task.id, task.context_id, error.accepts(), error.details()
            )

            async def refuse(send: web.SendChunk) -> None:
                await send(sse(data, "task.failed"))

            return StreamingResponse(producer=refuse, headers=list(SSE_HEADERS))
        except A2AError as exc:
            raise web.HTTPError(exc.http_status, exc.message, code=_rest_code(exc)) from None
        task = prepared.task

        async def produce(send: web.SendChunk) -> None:
            started = {"id": task.id, "contextId": task.context_id, "status": "running"}
            await send(sse(started, "task.started"))

            async def write(update: Update) -> None:
                for name, data in a2a.rest_events(update):
                    await send(sse(data, name))

            await self.tasks.execute(agent, prepared, write)

        return StreamingResponse(
            producer=produce, headers=list(SSE_HEADERS), on_close=prepared.release_unstarted
        )

    async def rest_get(self, request: Request) -> Response:
        """``GET .../tasks/{task_id}``."""
        return await self._rest_task(request, self.tasks.find)

    async def rest_cancel(self, request: Request) -> Response:
        """``DELETE .../tasks/{task_id}``: cancel the task."""
        return await self._rest_task(request, self.tasks.cancel)

    async def _rest_task(
        self,
        request: Request,
        operation: Callable[[Responder, str, Principal], Awaitable[A2ATask]],
    ) -> Response:
        """The REST answer of ``operation`` on the request's task: the task, or the error."""
        agent = self.app.resolve_agent(request.path_params)
        try:
            task = await operation(agent, request.path_params["task_id"], request.principal)
        except A2AError as exc:
            raise web.HTTPError(exc.http_status, exc.message, code=_rest_code(exc)) from None
        return json_response(a2a.rest_task(task))


def _message_result(prepared: Prepared, dialect: Dialect) -> dict[str, Any]:
    """A send's result when the agent answered with a message: no task id, the context's id."""
    assert prepared.reply is not None
    rendered = a2a.render_message(prepared.reply, dialect, context_id=prepared.task.context_id)
    return {"message": rendered} if dialect is Dialect.V1 else rendered


def _rest_code(error: A2AError) -> str:
    return {
        a2a.TASK_NOT_FOUND: "task_not_found",
        a2a.TASK_NOT_CANCELABLE: "task_not_cancelable",
        a2a.UNSUPPORTED_OPERATION: "unsupported_operation",
        a2a.INVALID_PARAMS: "invalid_request",
        a2a.PAYMENT_REQUIRED: "payment_required",
        QUOTA_EXCEEDED: "quota_exceeded",
    }.get(error.code, "error")


def transport(
    *,
    payment_policy: PaymentPolicy | None = None,
    public_url: str | None = None,
    ids: IdSource = random_ids,
    push: PushSender | None = None,
    sign_cards: bool = False,
    extended_card: Mapping[str, Any] | None = None,
) -> Transport:
    """A configured A2A transport to pass to :meth:`App.mount` (see :class:`A2ATransport`)."""

    def mount_configured(app: Host) -> None:
        A2ATransport(
            app,
            payment_policy=payment_policy,
            public_url=public_url,
            ids=ids,
            push=push,
            sign_cards=sign_cards,
            extended_card=extended_card,
        ).mount()

    return mount_configured


def mount(app: Host) -> None:
    """Mount the A2A transport on ``app`` with defaults (a :data:`Transport`)."""
    A2ATransport(app).mount()
