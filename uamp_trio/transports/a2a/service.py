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

Each task runs one UAMP turn per message, its agent inline in a task of the
server's background nursery (``App.background``;
:class:`uamp_trio.hosting.turns.ResponseRunner`: no channel between the agent
and the task's updates, which reach the request without a checkpoint while
it keeps up, so its writer sends them in batches): a blocking
send waits for it, a streaming send streams it, and a
``returnImmediately`` (1.0) / ``blocking: false`` (0.3) send answers at once
with the submitted task. ``CancelTask`` (or ``DELETE``) from any request
cancels the running turn; ``SubscribeToTask`` attaches to a running task's
updates; a streaming client that disconnects leaves its task running. (An
app used without :class:`~uamp_trio.engines.server.Server` has no background nursery
and runs each turn inside its request.)

Signing (spec 004 "Response Signing"): with the app's ``response_signer``,
a turn that completes its task is signed (RS256) over the turn's text (the
completed status message's text parts joined; empty when there is none) and
the HTTP body of the send as received. The JWT is the task's
``metadata.signature`` (``message/send``, ``tasks/get``, the stream's opening
snapshot of a later send replaces it), the final status update's
``metadata.signature`` on a stream, and ``signature`` in the REST form's
``task.completed`` event.

Payment (spec 004): a new task consults the app's
:class:`~uamp_proto.payment.PaymentPolicy` (:meth:`App.payment_required`,
or the ``payment_policy`` given to :func:`transport`) with the ``X-PAYMENT``
header. JSON-RPC answers error ``-32402`` with ``data``
``{"status_code": 402, "accepts": [...]}``; the REST form streams
``task.failed`` with ``code: "payment_required"``.

Ownership (docs/security.md): a task belongs to the principal whose request
created it (``request.principal``). Every operation that names a task --
``GetTask``, ``CancelTask``, ``SubscribeToTask``, a send with ``taskId``,
the REST ``GET``/``DELETE`` -- answers another principal's task exactly as a
task that does not exist; ``ListTasks`` lists the caller's tasks only, and a
send into another principal's ``contextId`` starts a fresh conversation, as
it does for an unknown one.
"""

from __future__ import annotations

import datetime
import email.utils
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import attrs
import orjson
import trio

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.adapters import a2a, a2a_card, a2a_human, a2a_params, a2a_push
from uamp_proto.adapters._human import AnswerError, ask_of
from uamp_proto.adapters.a2a import (
    QUOTA_EXCEEDED,
    A2AError,
    A2ATask,
    Dialect,
    TaskRun,
    Trigger,
    Update,
)
from uamp_proto.adapters.a2a_card import Interface
from uamp_proto.busy import INVALID_POLICY, POLICY_KEY, QUEUE_FULL, BusyError
from uamp_proto.errors import UampError
from uamp_proto.events import PaymentBalance
from uamp_proto.ids import IdSource, random_ids
from uamp_proto.payment import (
    BALANCE_EVENT,
    Charge,
    PaymentPolicy,
    PaymentRequiredError,
    balance_fields,
)
from uamp_proto.principal import Principal
from uamp_proto.responder import Responder, TurnRequest, with_interrupts
from uamp_proto.signing import JWKS_PATH
from uamp_stores.a2a_push import PushSender
from uamp_stores.a2a_tasks import TaskFeed
from uamp_stores.busy import Slot
from uamp_stores.health import StoreUnavailable

from ...engines import http as web
from ...engines.http import JSON_HEADERS, Request, Response, StreamingResponse, json_response
from ...grpc import AVAILABLE as GRPC_AVAILABLE
from ...hosting.host import Host, Transport
from ...hosting.interrupts import InterruptNotFound, InvalidAnswer
from ...hosting.router import RouteMeta
from ...hosting.turns import ResponseRunner
from . import rest as a2a_rest
from .call import SSE_HEADERS, Call, Emit, Opened, SseEmit, TextPen, check_json_body, sse

if GRPC_AVAILABLE:  # the grpc extra; without it the gRPC binding is not mounted
    from . import grpc as a2a_grpc

__all__ = ["A2ATransport", "mount", "transport"]

#: What middleware knows of these routes: the agent card is public; JSON-RPC
#: refusals are JSON-RPC errors; the REST binding answers OpenAI-shaped objects
#: (as its own errors).
CARD_ROUTES = RouteMeta(transport="a2a", error_style="openai", public=True)
RPC_ROUTES = RouteMeta(transport="a2a", error_style="jsonrpc")
REST_ROUTES = RouteMeta(transport="a2a", error_style="openai")

log = logging.getLogger("uamp_trio.a2a")

#: Updates buffered for the request that started a detached run.
_SUBSCRIBER_BUFFER = 64
#: How long a cancel request waits for the turn to wind down.
_CANCEL_WAIT = 10.0
#: How often a subscriber on a shared store checks that the task's runner lives.
_RUNNER_CHECK = 1.0
#: The failure of a task whose process died mid-turn (docs/scale-out.md).
_RUNNER_LOST = a2a.RUNNER_LOST
#: How long a client may cache a card (A2A 1.0 section 8.6).
_CARD_MAX_AGE = 300


def _now() -> str:
    """The current time in RFC 3339 (what A2A's ``timestamp`` fields hold)."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@attrs.define
class _Live:
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
class _Prepared:
    """A validated send: the task to run and the turn request to run it with."""

    task: A2ATask
    turn: TurnRequest | None
    history_length: int | None
    new: bool
    #: The HTTP body that carried the message: what a signature covers.
    request_bytes: bytes = b""
    charge: Charge | None = None
    #: Set when the turn is handed to :meth:`A2ATransport._execute`, which
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
    answering: _Live | None = None
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
        self._policy = payment_policy
        self.public_url = public_url.rstrip("/") if public_url else None
        #: The app's task store (:attr:`Stores.a2a_tasks <uamp_trio.stores.Stores.a2a_tasks>`).
        self.store = app.stores.a2a_tasks
        self.ids = ids
        self.push = push if push is not None else PushSender()
        self._live: dict[str, _Live] = {}
        self.store.on_cancel(self._cancel_requested)
        #: When the cards last changed (the server started): ``Last-Modified``.
        self._since = email.utils.formatdate(usegmt=True)

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
        prepared = await self._prepare(call, params, rest=False)
        await self._execute(
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
        prepared = await self._prepare(call, params, rest=False)
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
            await self._execute(call.agent, prepared, write)
            if not opened and prepared.reply is None:
                await emit(snapshot)

        return Opened(produce, prepared.release_unstarted)

    async def get(self, call: Call, params: dict[str, Any]) -> dict[str, Any]:
        """``GetTask``."""
        task = await self._task(call.agent, a2a.task_id_param(params), call.principal)
        history = a2a.opt_int(params, "historyLength")
        return a2a.render_task(task, call.dialect, history_length=history)

    async def cancel(self, call: Call, params: dict[str, Any]) -> dict[str, Any]:
        """``CancelTask``."""
        canceled = await self._cancel(call.agent, a2a.task_id_param(params), call.principal)
        return a2a.render_task(canceled, call.dialect)

    async def subscribe(self, call: Call, params: dict[str, Any]) -> Opened:
        """``SubscribeToTask``: the task snapshot, then the running task's updates."""
        task_id = a2a.task_id_param(params)
        self.store.ensure_running(self.app.background)
        task, feed = await self._follow(call.agent, task_id, call.principal)
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
                        watch.start_soon(self._watch_runner, call.agent, task_id, call.principal)
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
        task = await self._task(call.agent, task_id, call.principal)
        result, changed = a2a_push.config_call(
            task,
            op,
            params,
            call.dialect,
            ids=self.ids,
            limits=self._push_limits,
            check_target=self.push.check_target,
        )
        if changed:
            await self.store.save_push_configs(task)
        return result

    @property
    def _push_limits(self) -> a2a_push.PushLimits:
        config = self.app.server_config
        return a2a_push.PushLimits(
            max_configs=config.a2a_max_push_configs,
            max_config_bytes=config.a2a_max_push_config_bytes,
        )

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
            prepared = await self._prepare(Call(agent, request, Dialect.V03), body, rest=True)
        except _PaymentRefused as refused:
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

            await self._execute(agent, prepared, write)

        return StreamingResponse(
            producer=produce, headers=list(SSE_HEADERS), on_close=prepared.release_unstarted
        )

    async def rest_get(self, request: Request) -> Response:
        """``GET .../tasks/{task_id}``."""
        return await self._rest_task(request, self._task)

    async def rest_cancel(self, request: Request) -> Response:
        """``DELETE .../tasks/{task_id}``: cancel the task."""
        return await self._rest_task(request, self._cancel)

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

    # --- tasks ---------------------------------------------------------------------------

    async def _task(self, agent: Responder, task_id: str, principal: Principal) -> A2ATask:
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
        if task.state is a2a.TaskState.WORKING and task.id not in self._live and self.store.shared:
            await self._lost(task)
        return task

    async def _watch_runner(self, agent: Responder, task_id: str, principal: Principal) -> None:
        """End ``task_id`` if its process dies while a subscriber here waits on it."""
        while True:
            await trio.sleep(_RUNNER_CHECK)
            task = await self._task(agent, task_id, principal)
            if task.state.is_terminal or task.state.is_interrupted:
                return

    async def _follow(
        self, agent: Responder, task_id: str, principal: Principal
    ) -> tuple[A2ATask, TaskFeed]:
        """:meth:`_task`, and a feed of its updates from then on."""
        task, feed = await self.store.follow(task_id, owner=principal)
        if task.agent != agent.name:
            feed.close()
            raise a2a.task_not_found(task_id)
        return task, feed

    def _enter(self, call: Call, context_id: str, metadata: Any, message: a2a.A2AMessage) -> Slot:
        """The message's place in its context under the busy policy (docs/busy.md).

        Raises:
            A2AError: refused (``conversation_busy`` 409, ``queue_full`` 429)
                or a bad ``uamp.on_busy`` (invalid params).
        """
        gate = self.app.conversations
        principal = call.request.principal
        # The send's metadata, else the message's, may name the policy.
        named = isinstance(metadata, dict) and POLICY_KEY in metadata
        try:
            policy = gate.policy(metadata if named else message.metadata)
            key = ("a2a", principal.key, call.agent.name, context_id)
            return gate.enter(key, principal, policy)
        except BusyError as exc:
            if exc.code == INVALID_POLICY:
                raise A2AError(a2a.INVALID_PARAMS, str(exc), data={"code": exc.code}) from None
            status = 429 if exc.code == QUEUE_FULL else 409
            raise A2AError(
                a2a.UNSUPPORTED_OPERATION,
                f"{exc!s} (context {context_id})",
                data={"code": exc.code, "contextId": context_id},
                http_status=status,
            ) from None

    async def _prepare(self, call: Call, params: dict[str, Any], *, rest: bool) -> _Prepared:
        """Validate a send and create (or resume) its task, holding its place in the context.

        ``rest``: spec 004's task form, whose messages need no ``messageId``
        and whose payment refusal is a stored failed task.
        """
        holder: list[Slot] = []
        try:
            prepared = await self._prepare_held(call, params, rest=rest, holder=holder)
        except BaseException:
            for slot in holder:
                slot.close()
            raise
        prepared.slot = holder[0] if holder else None
        return prepared

    async def _prepare_held(
        self, call: Call, params: dict[str, Any], *, rest: bool, holder: list[Slot]
    ) -> _Prepared:
        """The body of :meth:`_prepare`; the place it takes goes into ``holder``."""
        agent, request, dialect = call.agent, call.request, call.dialect
        if params.get("message") is None:
            raise A2AError(a2a.INVALID_PARAMS, "'message' is required.")
        message = a2a.parse_message(
            params.get("message"), message_id=self.ids("msg") if rest else ""
        )
        if message.role != "user":
            raise A2AError(a2a.INVALID_PARAMS, "'message.role' must be user for a new message.")
        modes = a2a_card.input_modes(agent.capabilities())
        for media_type in message.media_types:
            if not a2a.accepts_media(modes, media_type):
                raise A2AError(
                    a2a.CONTENT_TYPE_NOT_SUPPORTED,
                    f"This agent does not accept {media_type} (it accepts {', '.join(modes)}).",
                    data={"mediaType": media_type},
                )
        config = a2a_params.send_configuration(params)
        history_length = a2a.opt_int(config, "historyLength")
        metadata = params.get("metadata")
        if metadata is not None and not isinstance(metadata, dict):
            raise A2AError(a2a.INVALID_PARAMS, "'metadata' must be an object.")
        push_config = a2a_params.inline_push_config(config, dialect, self.ids)
        if push_config is not None:
            a2a_push.check_config(push_config, self._push_limits, self.push.check_target)
        tools = a2a.parse_tools(metadata)
        token = request.headers.get("x-payment")
        principal = request.principal
        stored = a2a.stored_message(message)
        now = _now()
        if message.task_id is not None:
            task = await self._task(agent, message.task_id, principal)
            if message.context_id and message.context_id != task.context_id:
                raise A2AError(
                    a2a.INVALID_PARAMS,
                    f"Context {message.context_id} is not the context of task {task.id}.",
                )
            live = self._live.get(task.id)
            if live is not None and live.task is not None and live.task.pending_interrupts:
                return await self._answer(
                    live, live.task, message, stored, history_length, principal
                )
            if (
                live is None
                and task.state is a2a.TaskState.INPUT_REQUIRED
                and task.pending_interrupts
                and self.store.shared
            ):
                return await self._answer_elsewhere(call, task, message, history_length)
            if task.id in self._live:
                raise A2AError(
                    a2a.UNSUPPORTED_OPERATION, f"Task {task.id} is still working on a message."
                )
            a2a.transition(task.state, Trigger.RESUME)  # raises unless paused
            holder.append(self._enter(call, task.context_id, metadata, message))
            base = list(task.conversation)
            if push_config is not None:
                a2a_push.make_room(task, push_config, self._push_limits)  # before any money
            if task.pending_tool_calls:
                added = a2a.parse_tool_results(message, task.pending_tool_calls)
            else:
                added = [message.to_uamp()]
            # A resumed task runs the agent again: it is paid like a new one.
            # Nothing after the lock can fail, so nothing can leave it held.
            response_id = self.ids("resp")
            try:
                charge = await self.charge(agent, token, response_id, principal)
            except PaymentRequiredError as error:
                raise a2a.payment_error(error) from None
            task.history.append(stored)
            task.conversation.extend(added)
            task.pending_tool_calls = []
            if tools:
                task.tools = tools
            if push_config is not None:
                task.push_configs[push_config["id"]] = push_config
                await self.store.save_push_configs(task)
            new = False
        else:
            context_id = message.context_id or self.ids("ctx")
            # Only the caller's own conversation continues: another principal's
            # contextId is a fresh context, as an unknown one is.
            earlier = await self.store.latest_in_context(context_id, owner=principal)
            if earlier is not None and earlier.agent != agent.name:
                raise A2AError(
                    a2a.INVALID_PARAMS, f"Context {context_id} belongs to another agent."
                )
            holder.append(self._enter(call, context_id, metadata, message))
            base = list(earlier.conversation) if earlier is not None else []
            task = A2ATask(
                id=self.ids("task"),
                context_id=context_id,
                agent=agent.name,
                timestamp=now,
                history=[stored],
                conversation=[
                    *(earlier.conversation if earlier is not None else []),
                    message.to_uamp(),
                ],
                tools=tools or (earlier.tools if earlier is not None else []),
            )
            if push_config is not None:
                task.push_configs[push_config["id"]] = push_config
            await self.store.check_quota(principal)  # before any money is locked
            response_id = self.ids("resp")
            try:
                charge = await self.charge(agent, token, response_id, principal)
            except PaymentRequiredError as error:
                if not rest:
                    raise a2a.payment_error(error) from None
                task.error = ty.ErrorInfo(code="payment_required", message="Payment required")
                task.move(Trigger.FAIL, now)
                task.status_message = a2a.StoredMessage(
                    message_id=self.ids("msg"),
                    role="agent",
                    items=[
                        ty.TextContent(text="Payment required: retry with an X-PAYMENT header.")
                    ],
                    metadata={"code": "payment_required"},
                )
                await self.store.add(task, owner=principal)
                raise _PaymentRefused(task, error) from None
            try:
                await self.store.add(task, owner=principal)
            except BaseException:
                if charge is not None:  # the store refused the task: free its lock
                    await charge.settle(None, used=False)
                raise
            new = True
        turn = TurnRequest(
            agent=agent.name,
            principal=principal,
            session_id=task.context_id,
            response_id=response_id,
            messages=list(task.conversation),
            tools=list(task.tools),
            payment_token=token,
            metadata={
                "a2a_task_id": task.id,
                "a2a_context_id": task.context_id,
                "a2a": a2a_params.turn_context(task, message, metadata, call.extensions),
            },
        )
        return _Prepared(
            task=task,
            turn=turn,
            history_length=history_length,
            new=new,
            request_bytes=request.body,
            charge=charge,
            uamp_events=a2a.UAMP_EVENTS_EXTENSION in call.extensions,
            base=base,
        )

    async def _answer(
        self,
        live: _Live,
        task: A2ATask,
        message: a2a.A2AMessage,
        stored: a2a.StoredMessage,
        history_length: int | None,
        principal: Principal,
    ) -> _Prepared:
        """A message on a task whose turn waits for a person: its answers.

        The answers go to ``app.interrupts`` (the paused turn goes on); the
        send then follows that turn instead of running one. Its follower is
        attached before the answer is given, so it misses no update.
        """
        try:
            answers = a2a_human.parse_answers(message.data, message.text, task.pending_interrupts)
        except AnswerError as exc:
            raise A2AError(a2a.INVALID_PARAMS, exc.args[0]) from None
        send, receive = trio.open_memory_channel[Update](_SUBSCRIBER_BUFFER)
        if live.primary is not None:
            live.primary.close()
        live.primary = send
        live.pen = None  # the earlier request's
        paused_at = live.paused
        live.answers.append(stored)
        try:
            for iid, answer in answers:
                await self.app.interrupts.answer(principal, iid, answer)
        except (InterruptNotFound, InvalidAnswer) as exc:
            raise A2AError(a2a.INVALID_PARAMS, str(exc)) from None
        return _Prepared(
            task=task,
            turn=None,
            history_length=history_length,
            new=False,
            answering=live,
            follow=receive,
            paused_at=paused_at,
            started=True,
        )

    async def _answer_elsewhere(
        self,
        call: Call,
        task: A2ATask,
        message: a2a.A2AMessage,
        history_length: int | None,
    ) -> _Prepared:
        """A message answering a turn paused on another process (a shared store).

        The answers go through ``app.interrupts`` (its relay hands them to the
        process whose run waits); the send then follows the task's updates
        from the store, attached before the answer is given.

        Raises:
            A2AError: invalid params: no answer to the pending interrupts in
                the message, or none of them waits any more (the process that
                ran the turn is gone).
        """
        principal = call.principal
        try:
            answers = a2a_human.parse_answers(message.data, message.text, task.pending_interrupts)
        except AnswerError as exc:
            raise A2AError(a2a.INVALID_PARAMS, exc.args[0]) from None
        self.store.ensure_running(self.app.background)
        if await self._lost(task):
            raise A2AError(
                a2a.UNSUPPORTED_OPERATION,
                f"The server running task {task.id} stopped while it waited; it ended failed.",
            )
        task, feed = await self._follow(call.agent, task.id, principal)
        try:
            for iid, answer in answers:
                await self.app.interrupts.answer(principal, iid, answer)
        except (InterruptNotFound, InvalidAnswer) as exc:
            feed.close()
            raise A2AError(a2a.INVALID_PARAMS, str(exc)) from None
        except BaseException:
            feed.close()
            raise
        return _Prepared(
            task=task,
            turn=None,
            history_length=history_length,
            new=False,
            started=True,
            elsewhere=feed,
            principal=principal,
        )

    async def _follow_elsewhere(
        self,
        agent: Responder,
        prepared: _Prepared,
        write: Callable[[Update], Awaitable[None]] | None,
        *,
        wait: bool,
    ) -> None:
        """A send that answered a turn paused on another process: its updates, from the store.

        Until the turn pauses again or ends (a final update); a process that
        dies meanwhile ends the task ``failed`` (:meth:`_watch_runner`).
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
        prepared.task = await self._task(agent, task_id, principal)

    async def _lost(self, task: A2ATask) -> bool:
        """Whether ``task`` 's process is gone (then it ends failed here, announced to all)."""
        if not await self.store.take_over(task.id):
            return False
        log.warning("A2A task %s lost the process running it; it ends interrupted", task.id)
        await self._announce(task, TaskRun(task, self.ids).fail(_RUNNER_LOST, _now()))
        return True

    async def _watch_paused(self, agent: Responder, task_id: str, principal: Principal) -> None:
        """End ``task_id`` if its process dies, paused or working, while a send here follows it."""
        while True:
            await trio.sleep(_RUNNER_CHECK)
            task = await self._task(agent, task_id, principal)  # a working orphan ends here
            if task.state.is_terminal or (task.state.is_interrupted and await self._lost(task)):
                return

    async def _execute(
        self,
        agent: Responder,
        prepared: _Prepared,
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
        live = _Live()
        self._live[prepared.task.id] = live
        receive: trio.MemoryReceiveChannel[Update] | None = None
        if write is not None:
            live.primary, receive = trio.open_memory_channel[Update](_SUBSCRIBER_BUFFER)
        paused_at = live.paused
        nursery.start_soon(self._run, agent, prepared, None, live)
        if receive is not None and write is not None:
            await _forward(receive, write, prepared.write_many, live, prepared.pen_of)
        elif wait:
            await _first_of(live.done, paused_at)

    async def _follow_answered(
        self,
        prepared: _Prepared,
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
        prepared: _Prepared,
        write: Callable[[Update], Awaitable[None]] | None,
        live: _Live | None = None,
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
            live = _Live()
        self._live[task.id] = live
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
                        task.move(Trigger.CANCEL, _now())
                        canceled = TaskRun(task, self.ids).status()
                        await self._announce(task, [attrs.evolve(canceled, final=True)])
                self._live.pop(task.id, None)
                if live.primary is not None:
                    live.primary.close()
                live.done.set()

    async def _turn(
        self,
        agent: Responder,
        prepared: _Prepared,
        write: Callable[[Update], Awaitable[None]] | None,
        live: _Live | None = None,
    ) -> None:
        """Run one turn of a task, telling ``write`` and subscribers every update."""
        task = prepared.task
        turn_request = prepared.turn
        assert turn_request is not None
        if live is None:
            live = _Live()
        self._live[task.id] = live
        live.task = task
        run = TaskRun(task, self.ids, uamp_events=prepared.uamp_events)
        current = live
        port = self.app.interrupts.port(turn_request, supported=self.app.background is not None)
        turn_request = with_interrupts(turn_request, port)

        def updates_of(event: ev.Event) -> list[Update]:
            if isinstance(event, ev.InterruptRequest):
                ask = ask_of(event)
                waiting = [*(a for a in task.pending_interrupts if a.id != ask.id), ask]
                return run.ask_human(ask, a2a_human.interrupt_message(waiting), _now())
            if isinstance(event, ev.InterruptResolved):
                task.history.extend(live.answers)
                live.answers.clear()
                return run.human_answered(event.interrupt_id, _now())
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
            task.move(Trigger.START if prepared.new else Trigger.RESUME, _now())
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
            turn = ResponseRunner(agent, turn_request, sink, stamp=False, charge=prepared.charge)
            port.emit = turn.emit
            live.cancel = turn.cancel
            if prepared.slot is not None:
                prepared.slot.bind(turn.cancel)  # a later message may interrupt it
            if live.cancel_requested:
                turn.cancel()
            outcome = await turn.run()
            if outcome.status == "cancelled":
                prepared.partial = outcome.tracker.messages()
            updates = run.end(outcome, _now())
            if outcome.status == "completed":
                updates = self._sign(updates, task, outcome.tracker.text, prepared)
            if outcome.balance is not None and updates:
                updates = _with_balance(updates, task, outcome.balance)
            await deliver(updates)
            if prepared.reply is not None and not task.state.is_terminal:
                task.move(Trigger.COMPLETE, _now())
        finally:
            if prepared.charge is not None:
                await prepared.charge.settle(None, used=False)  # never ran; else a no-op
            if prepared.reply is None and not (task.state.is_terminal or task.state.is_interrupted):
                # The request went away (client disconnect, shutdown): the
                # turn was cancelled with it, and so is the task.
                with trio.CancelScope(shield=True), trio.move_on_after(_CANCEL_WAIT):
                    await self._announce(task, run.cancel(_now()))
            self._live.pop(task.id, None)
            port.close()  # no cycle keeps the request (and its conversation) alive
            if live.primary is not None:
                live.primary.close()
            live.done.set()
            live.pause()  # nothing waits for a pause that cannot come

    def _sign(
        self, updates: list[Update], task: A2ATask, text: str, prepared: _Prepared
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
        live = self._live.get(task_id)
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
        return await self._task(agent, task_id, principal)

    async def _cancel(self, agent: Responder, task_id: str, principal: Principal) -> A2ATask:
        task = await self._task(agent, task_id, principal)
        live = self._live.get(task_id)
        running = not (task.state.is_terminal or task.state.is_interrupted)
        if live is None and running and self.store.shared:
            task = await self._cancel_elsewhere(agent, task_id, principal)
            if task.state.is_terminal:
                return task
        if live is None:
            task.move(Trigger.CANCEL, _now())  # paused tasks cancel here; finished ones raise
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
    live: _Live | None = None,
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


def _message_result(prepared: _Prepared, dialect: Dialect) -> dict[str, Any]:
    """A send's result when the agent answered with a message: no task id, the context's id."""
    assert prepared.reply is not None
    rendered = a2a.render_message(prepared.reply, dialect, context_id=prepared.task.context_id)
    return {"message": rendered} if dialect is Dialect.V1 else rendered


def _with_balance(updates: list[Update], task: A2ATask, balance: PaymentBalance) -> list[Update]:
    """The turn's updates, its ``payment.balance`` on the task's and the last update's metadata.

    A2A has no payment event; ``metadata`` is where it lets a server add its own.
    """
    fields = balance_fields(balance)
    task.metadata = {**(task.metadata or {}), BALANCE_EVENT: fields}
    final = updates[-1]
    noted = attrs.evolve(final, metadata={**(final.metadata or {}), BALANCE_EVENT: fields})
    return [*updates[:-1], noted]


class _PaymentRefused(UampError):
    """A REST task refused for want of payment (already stored as failed)."""

    def __init__(self, task: A2ATask, error: PaymentRequiredError) -> None:
        super().__init__("payment required")
        self.task = task
        self.error = error


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
