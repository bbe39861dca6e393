"""What the UAMP clients share: sessions, response streams and their events.

:class:`ClientSession` and :class:`ResponseStream` are the same whichever
transport carries them; :class:`_Link` is what a transport client
(:mod:`.websocket`, :mod:`.sse`) provides them. A response's stream, its
result and the client's errors live in :mod:`uamp_trio.client.responses`
(their names import from here too). The theory of operation is
:mod:`uamp_trio.client.uamp`'s.
"""

from __future__ import annotations

import inspect
import logging
import os
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any, Final, TypeVar

import attrs
import orjson
import trio

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.codec import encode
from uamp_proto.connection import NEED_DATA, ClientConnection
from uamp_proto.errors import (
    OUTPUT_TOO_LARGE,
    LocalProtocolError,
    RemoteProtocolError,
)
from uamp_proto.interrupts import CAPABILITY_KEY, Answer
from uamp_proto.payment import PaymentNegotiation
from uamp_proto.resume import RESUME_FROM
from uamp_proto.signing import JWKS

from .responses import _TERMINAL, _End
from .responses import ClientError as ClientError
from .responses import ResponseResult as ResponseResult
from .responses import ResponseStream as ResponseStream
from .responses import SignatureVerificationError as SignatureVerificationError

log = logging.getLogger("uamp_trio.client")

#: Answers a ``tool.call``: gets the invocation, returns the result text
#: (JSON, as the spec asks) or raises; may be a plain or an async function.
ToolHandler = Callable[[ty.ToolInvocation], "str | Awaitable[str]"]

#: Answers a ``payment.required``: gets the event, returns the payment token
#: to submit, or ``None`` to submit nothing; may be a plain or an async function.
PaymentHandler = Callable[[ev.PaymentRequired], "str | Awaitable[str | None] | None"]

#: Answers an ``interrupt.request`` (docs/human-in-the-loop.md): gets the
#: event, returns the :class:`~uamp_proto.interrupts.Answer` to send, or
#: ``None`` to leave it to :meth:`ClientSession.answer`; may be async.
InterruptHandler = Callable[[ev.InterruptRequest], "Answer | Awaitable[Answer | None] | None"]

#: Events buffered per session before the reader waits for the consumer.
DEFAULT_SESSION_BUFFER: Final = 1024
_INTERRUPT_EVENTS: Final = frozenset({"interrupt.request", "interrupt.resolved"})
_PAYMENT_EVENTS: Final = frozenset(
    {"payment.required", "payment.accepted", "payment.balance", "payment.error"}
)
#: What a chat room sends (docs/chat.md): they go to :meth:`ClientSession.room_events`.
_ROOM_EVENTS: Final = frozenset(
    {
        "presence.online",
        "presence.offline",
        "presence.typing",
        "message.created",
        "message.read",
        "voice.invite",
        "voice.accept",
        "voice.decline",
        "voice.end",
    }
)
#: Unresolved interrupts a session keeps in :attr:`ClientSession.interrupts`.
MAX_SHOWN_INTERRUPTS: Final = 256
#: The ``client_capabilities`` of a client that answers interrupts.
_ANSWERS_INTERRUPTS: Final = ty.Capabilities(
    id="uamp-client", provider="uamp", modalities=["text"], extensions={CAPABILITY_KEY: True}
)
#: Room events kept for a reader that is behind before the oldest is dropped.
ROOM_BUFFER: Final = 1024
_RESPONSE_EVENTS: Final = frozenset(
    {
        "response.created",
        "response.delta",
        "response.done",
        "response.error",
        "response.cancelled",
        "tool.call",
        "tool.call_done",
        "progress",
        "thinking",
        "audio.delta",
        "audio.done",
        "transcript.delta",
        "transcript.done",
        "usage.delta",
        "payment.required",
        "payment.accepted",
        "payment.balance",
        "payment.error",
        "rate_limit",
    }
)


class _Unavailable(ClientError):
    """No server for now: 502/503/504 (a load balancer whose
    nodes are away), a close or reset before the answer; worth trying again."""


#: HTTP answers (an upgrade's, an event stream's) that say "no server right now" rather than "no".
_UNAVAILABLE: Final = frozenset({502, 503, 504})


def _transient(exc: BaseException) -> bool:
    """Whether a failed dial (or stream) may succeed soon (no server now, not a refusal)."""
    return isinstance(exc, (OSError, trio.TooSlowError, _Unavailable))


@attrs.define
class _Sent:
    """What a session sent that a reconnect sends again unless the server acted on it.

    Its ``session.create`` (before ``session.created``), or a turn (its
    input and ``response.create``, before ``response.created``). ``on`` is
    the connection it went out on (:attr:`UampClient.reconnects` then), or
    ``None`` while it waits to go out: whoever writes it first -- the caller
    or a reconnect -- sets it, so it is written once per connection.
    """

    sid: str
    messages: list[bytes] = attrs.field(factory=list)
    #: A turn's ``response.create`` ``event_id`` (what ``last_request`` names).
    request: str | None = None
    on: int | None = None


class ClientSession:
    """One UAMP session of a client (see the module docstring).

    Attributes:
        id: The session id.
        agent: The agent the server confirmed.
        capabilities: The agent's latest ``capabilities``.
        created: The ``session.created`` event.
        errors: ``session.error`` events that arrived outside a response.
        payments: Payment events that arrived outside a response
            (``payment.balance`` after ``response.done``, the answer to a
            :meth:`pay` with nothing outstanding).
        delta_window: The delta window the server granted, or ``None``.
        on_tool_call: Answers ``tool.call`` events (see :data:`ToolHandler`).
        on_payment_required: Answers ``payment.required`` events (see
            :data:`PaymentHandler`).
        on_interrupt: Answers ``interrupt.request`` events (see
            :data:`InterruptHandler`).
        interrupts: The interrupts this session was shown and that are not
            resolved yet, by id (answer with :meth:`answer`).
    """

    def __init__(
        self,
        link: _Link,
        conn: ClientConnection,
        session_id: str,
        on_tool_call: ToolHandler | None,
        buffer: int,
        on_payment_required: PaymentHandler | None = None,
        jwks: JWKS | None = None,
    ) -> None:
        self._link = link
        self._jwks = jwks
        self._conn = conn
        self.id = session_id
        self.agent: str | None = None
        self.capabilities: ty.Capabilities | None = None
        self.created: ev.SessionCreated | None = None
        self.errors: deque[ev.SessionErrorEvent] = deque(maxlen=64)
        self.payments: deque[ev.Event] = deque(maxlen=64)
        self.on_tool_call = on_tool_call
        self.on_payment_required = on_payment_required
        self.on_interrupt: InterruptHandler | None = None
        self.interrupts: dict[str, ev.InterruptRequest] = {}
        self._send_ch, self._recv_ch = trio.open_memory_channel[ev.Event | _End](buffer)
        self._ready = trio.Event()
        self._failure: ClientError | None = None
        #: ``update()`` calls waiting for their answer, oldest first (each
        #: waiter: its event, and the refusal that ended it, if any).
        self._updated: deque[_UpdateWait] = deque()
        self._stream: ResponseStream | None = None
        #: The stream's response has ended (its terminal event was handed on):
        #: payment events after it belong to no response.
        self._stream_over = False
        self._ended: ClientError | None = None
        #: The ``event_id`` of the last event received (what a resume names).
        self.last_event_id: str | None = None
        #: How the session was opened (a resume sends the same again).
        self.opening: _Opening | None = None
        #: The ``event_id`` of the ``session.create`` that opened it (what a
        #: refusal without ``session_id`` names in ``details.event_id``).
        self._create_event_id: str | None = None
        #: Its ``session.create``, and its turn with no ``response.created`` yet
        #: (:class:`_Sent`; on the WebSocket).
        self._opened = _Sent(session_id)
        self._turn: _Sent | None = None
        self._room: deque[ev.Event] = deque(maxlen=ROOM_BUFFER)
        self._room_ready = trio.lowlevel.ParkingLot()
        #: Room events dropped because nobody read them in time.
        self.room_dropped = 0

    def __repr__(self) -> str:
        return f"<ClientSession {self.id} agent={self.agent!r}>"

    @property
    def delta_window(self) -> int | None:
        """The granted delta window, or ``None`` (plain UAMP)."""
        ctx = self._conn.sessions.get(self.id)
        if ctx is None or ctx.receive_window is None:
            return None
        return ctx.receive_window.window

    @property
    def token(self) -> str | None:
        """The session's current auth token."""
        ctx = self._conn.sessions.get(self.id)
        return ctx.token if ctx is not None else None

    @property
    def payment(self) -> PaymentNegotiation | None:
        """The session's payment negotiation (state, token, last balance and error)."""
        ctx = self._conn.sessions.get(self.id)
        return ctx.payment if ctx is not None else None

    # --- requests ---------------------------------------------------------------

    async def send(self, *events: ev.Event) -> bytes | None:
        """Send raw events in this session (``session_id`` is filled in).

        Returns:
            The bytes that carried the last event (its WebSocket message, or
            the body of the POST), ``None`` when nothing was sent.
        """
        if self._ended is not None:
            raise self._ended
        stamped = [
            e if e.session_id is not None else attrs.evolve(e, session_id=self.id) for e in events
        ]
        return await self._link._send_events(self, stamped)

    def respond(
        self,
        text: str | None = None,
        *,
        inputs: Sequence[ev.Event] = (),
        response: ty.ResponseConfig | None = None,
        response_format: ty.ResponseFormat | None = None,
    ) -> ResponseStream:
        """Send ``input.text`` (if ``text``) and ``inputs``, then ``response.create``.

        Returns:
            A :class:`ResponseStream`: ``async for event in session.respond("hi")``.
            Nothing is sent until iteration starts.
        """
        start: list[ev.Event] = list(inputs)
        if text is not None:
            start.insert(0, ev.InputText(text=text))
        start.append(ev.ResponseCreate(response=response, response_format=response_format))
        return ResponseStream(self, start)

    async def ask(self, text: str | None = None, **kwargs: Any) -> ResponseResult:
        """Send ``text``, wait for the whole response and return its result."""
        return await self.respond(text, **kwargs).collect()

    async def pay(self, token: str, *, scheme: str | None = "token") -> None:
        """Submit a payment token (``payment.submit``).

        Answers an outstanding ``payment.required`` -- the server replies
        ``payment.accepted`` and resumes the held response, or ``payment.error``
        -- or, with nothing outstanding, preloads the token for later responses.
        """
        await self.send(ev.PaymentSubmit(payment=ty.PaymentSubmission(scheme=scheme, token=token)))

    async def cancel(self, response_id: str | None = None) -> None:
        """Cancel the current (or the named) response; it ends ``response.cancelled``."""
        await self.send(ev.ResponseCancel(response_id=response_id))

    async def update(self, *, token: str | None = None, payment_token: str | None = None) -> None:
        """Refresh the session's token(s) (``session.update``); waits for ``session.updated``.

        Raises:
            ClientError: The server refused the token (``unauthorized``); the
                session goes on with its former one.
        """
        before = self.token
        waiter = _UpdateWait()
        self._updated.append(waiter)
        await self.send(ev.SessionUpdate(token=token, payment_token=payment_token))
        await waiter.done.wait()
        if waiter.refused is not None:
            ctx = self._conn.sessions.get(self.id)
            if ctx is not None and token is not None:
                ctx.token = before  # the session keeps its former credential
            raise waiter.refused
        if self._ended is not None:
            raise self._ended

    async def query_capabilities(self) -> ty.Capabilities:
        """Ask for the agent's capabilities (``capabilities.query``)."""
        self._caps_wait = trio.Event()
        await self.send(ev.CapabilitiesQuery())
        await self._caps_wait.wait()
        assert self.capabilities is not None
        return self.capabilities

    _caps_wait: trio.Event | None = None

    async def end(self, reason: str | None = None) -> None:
        """End the session (``session.end``)."""
        if self._ended is None:
            await self.send(ev.SessionEnd(reason=reason))
            self._close(ClientError("session_ended", f"session {self.id} was ended by the client"))
        await self._link._forget(self)

    # --- plumbing -----------------------------------------------------------------

    async def _claim(self, stream: ResponseStream) -> None:
        if self._ended is not None:
            raise self._ended
        if self._stream is not None:
            raise ClientError(
                "response_in_progress",
                "this session is already iterating a response; finish it first",
            )
        self._stream = stream
        self._stream_over = False

    def _release(self, stream: ResponseStream) -> None:
        if self._stream is stream:
            self._stream = None

    # --- chat rooms (docs/chat.md) -----------------------------------------------

    async def room_events(self) -> AsyncIterator[ev.Event]:
        """The events of the session's chats as they come, until the session ends.

        ``presence.*``, ``message.*``, ``voice.*``, an agent's answer
        streamed into the room (response events carrying ``chat_id``) and
        ``session.error`` events of a chat-scoped session. At most
        :data:`ROOM_BUFFER` wait for a reader; older ones are dropped
        (counted in :attr:`room_dropped`).
        """
        while True:
            while self._room:
                yield self._room.popleft()
            if self._ended is not None:
                return
            await self._room_ready.park()

    async def say(self, text: str, *, chat_id: str | None = None) -> None:
        """Post ``text`` into a chat (the session's own without ``chat_id``)."""
        context = {"chat_id": chat_id} if chat_id is not None else None
        await self.send(ev.InputText(text=text, context=context))

    async def typing(self, is_typing: bool = True, *, chat_id: str | None = None) -> None:
        """Tell a chat that this participant is (or stopped) typing."""
        await self.send(ev.InputTyping(is_typing=is_typing, chat_id=chat_id))

    async def mark_read(self, seq: int, *, chat_id: str | None = None) -> None:
        """Mark the chat's messages up to ``seq`` read."""
        await self.send(ev.MessageRead(seq=seq, chat_id=chat_id))

    def _to_room(self, event: ev.Event) -> None:
        if len(self._room) == self._room.maxlen:
            self.room_dropped += 1
        self._room.append(event)
        self._room_ready.unpark_all()

    async def _receive(self) -> ev.Event | _End:
        try:
            return await self._recv_ch.receive()
        except trio.EndOfChannel:
            return _End(self._ended or ClientError("closed", "the connection closed"))

    async def _deliver(self, event: ev.Event, nursery: trio.Nursery) -> None:
        """Route one event of this session (called by the link's reader)."""
        etype = event.type
        if etype == "session.created":
            assert isinstance(event, ev.SessionCreated)
            self.created = event
            self.agent = event.agent
            self._ready.set()
        elif etype == "capabilities":
            assert isinstance(event, ev.CapabilitiesEvent)
            self.capabilities = event.capabilities
            if self._caps_wait is not None:
                self._caps_wait.set()
        elif etype == "session.updated":
            if self._updated:
                self._updated.popleft().done.set()
        elif etype == "session.error" and self._updated and _refuses_token(event):
            # The server refused the token of the oldest update() (it keeps
            # the session, with the former credential): that call raises.
            assert isinstance(event, ev.SessionErrorEvent)
            waiter = self._updated.popleft()
            waiter.refused = ClientError(event.error.code, event.error.message, event)
            waiter.done.set()
        elif etype == "session.error" and not self._ready.is_set():
            assert isinstance(event, ev.SessionErrorEvent)
            self._failure = ClientError(event.error.code, event.error.message, event)
            self._ready.set()
        elif etype == "session.end":
            self._close(ClientError("session_ended", f"the server ended session {self.id}"))
        elif etype in _ROOM_EVENTS or (
            etype in _RESPONSE_EVENTS and event.unknown and "chat_id" in event.unknown
        ):
            self._to_room(event)
        elif etype == "session.error" and self.created is not None and self.created.chat:
            assert isinstance(event, ev.SessionErrorEvent)
            self.errors.append(event)
            self._to_room(event)
        elif etype in _PAYMENT_EVENTS and (self._stream is None or self._stream_over):
            if etype == "payment.required" and self.on_payment_required is not None:
                assert isinstance(event, ev.PaymentRequired)
                nursery.start_soon(self._pay, event)
            self.payments.append(event)
        elif etype in _INTERRUPT_EVENTS:
            if isinstance(event, ev.InterruptRequest):
                if len(self.interrupts) < MAX_SHOWN_INTERRUPTS:
                    self.interrupts[event.interrupt_id] = event
                if self.on_interrupt is not None:
                    nursery.start_soon(self._answer_with_handler, event)
            elif isinstance(event, ev.InterruptResolved):
                self.interrupts.pop(event.interrupt_id, None)
            if self._stream is not None:
                await self._send_ch.send(event)
        elif etype in _RESPONSE_EVENTS or (etype == "session.error" and self._stream):
            if etype == "tool.call" and self.on_tool_call is not None:
                assert isinstance(event, ev.ToolCall)
                nursery.start_soon(self._run_tool, event)
            elif etype == "payment.required" and self.on_payment_required is not None:
                assert isinstance(event, ev.PaymentRequired)
                nursery.start_soon(self._pay, event)
            await self._send_ch.send(event)
            if etype in _TERMINAL:  # a payment.balance after it is the session's
                self._stream_over = self._stream is not None
        elif etype == "session.error":
            assert isinstance(event, ev.SessionErrorEvent)
            self.errors.append(event)

    async def _run_tool(self, call: ev.ToolCall) -> None:
        handler = self.on_tool_call
        assert handler is not None
        invocation = ty.ToolInvocation(id=call.call_id, name=call.name, arguments=call.arguments)
        is_error = None
        try:
            result = handler(invocation)
            if inspect.isawaitable(result):
                result = await result
            text = result if isinstance(result, str) else orjson.dumps(result).decode()
        except Exception as exc:
            text, is_error = orjson.dumps({"error": f"{type(exc).__name__}: {exc}"}).decode(), True
        with suppress(ClientError):
            await self.send(ev.ToolResult(call_id=call.call_id, result=text, is_error=is_error))

    async def answer(
        self,
        interrupt_id: str,
        *,
        approved: bool | None = None,
        arguments: dict[str, Any] | None = None,
        value: Any = None,
        reason: str | None = None,
    ) -> None:
        """Answer an interrupt by id (docs/human-in-the-loop.md).

        Any session of the interrupt's principal may answer it, on any
        connection: the paused run goes on wherever it runs. An approval
        takes ``approved`` (and edited ``arguments``), a question ``value``.
        An unknown id (or another principal's) comes back as a
        ``session.error`` ``interrupt_not_found`` in :attr:`errors`.
        """
        await self.send(
            ev.InterruptAnswer(
                interrupt_id=interrupt_id,
                approved=approved,
                arguments=arguments,
                value=value,
                reason=reason,
            )
        )

    async def _answer_with_handler(self, request: ev.InterruptRequest) -> None:
        handler = self.on_interrupt
        assert handler is not None
        try:
            answer = handler(request)
            if inspect.isawaitable(answer):
                answer = await answer
        except Exception:
            log.exception("on_interrupt failed; the interrupt is left unanswered")
            return
        if answer is None:
            return
        with suppress(ClientError):
            await self.answer(
                request.interrupt_id,
                approved=answer.approved,
                arguments=answer.arguments,
                value=answer.value,
                reason=answer.reason,
            )

    async def _pay(self, required: ev.PaymentRequired) -> None:
        handler = self.on_payment_required
        assert handler is not None
        try:
            token = handler(required)
            if inspect.isawaitable(token):
                token = await token
        except Exception:
            log.exception("on_payment_required failed; not paying")
            return
        if token is None:
            return
        scheme = None
        schemes = required.requirements.schemes
        if schemes:
            scheme = schemes[0].scheme
        with suppress(ClientError):
            await self.pay(token, scheme=scheme or "token")

    def _close(self, error: ClientError) -> None:
        if self._ended is not None:
            return
        self._ended = error
        if self._failure is None and not self._ready.is_set():
            self._failure = error
        self._ready.set()
        for waiter in self._updated:
            waiter.done.set()
        if self._caps_wait is not None:
            self._caps_wait.set()
        self._send_ch.close()
        self._room_ready.unpark_all()

    async def _wait_created(self) -> None:
        await self._ready.wait()
        if self._failure is not None:
            raise self._failure


@attrs.frozen
class _Opening:
    """A ``session.create`` about to be sent: what :meth:`_Link.create_session` was asked."""

    session_id: str
    config: ty.SessionConfig
    agent: str | None
    token: str | None
    payment_token: str | None
    chat: str | None
    on_tool_call: ToolHandler | None
    on_payment_required: PaymentHandler | None
    on_interrupt: InterruptHandler | None = None
    interrupts: bool = False

    def encode(self, conn: ClientConnection, *, agent: str | None) -> bytes:
        """The ``session.create`` message, naming ``agent`` (or no agent) in it."""
        return conn.create_session(
            self.config,
            session_id=self.session_id,
            agent=agent,
            token=self.token,
            payment_token=self.payment_token,
            chat=self.chat,
            client_capabilities=_ANSWERS_INTERRUPTS if self.interrupts else None,
        )

    def again(self, conn: ClientConnection) -> bytes:
        """The same ``session.create`` once more, on a new connection (``auto_resume``).

        For a session whose ``session.created`` never came (its node went
        first): written past the core, which waits for it already.
        """
        create = ev.SessionCreate(
            session_id=self.session_id,
            uamp_version=conn.config.uamp_version,
            session=conn.windowed(self.config),
            agent=self.agent,
            token=self.token,
            payment_token=self.payment_token,
            chat=self.chat,
            client_capabilities=_ANSWERS_INTERRUPTS if self.interrupts else None,
        )
        return encode(create)

    def resume(self, conn: ClientConnection, last_event_id: str) -> bytes:
        """The ``session.create`` that resumes this session after ``last_event_id``.

        Written past the core, which knows the session already (docs/resume.md).
        It carries the session's credentials as they are now, not as they
        were when it opened: the latest auth token (``session.update``) and
        payment token (``payment.submit``, an ``on_payment_required`` answer,
        ``session.update``), since the server keeps no payment token with a
        session and a resumed session must not be asked to pay again.
        """
        ctx = conn.sessions.get(self.session_id)
        token, payment_token = self.token, self.payment_token
        if ctx is not None:
            token = ctx.token or token
            payment_token = ctx.payment.token or payment_token
        create = ev.SessionCreate(
            session_id=self.session_id,
            uamp_version=conn.config.uamp_version,
            session=conn.windowed(self.config),  # the same delta window as before
            agent=self.agent,
            token=token,
            payment_token=payment_token,
            chat=self.chat,
            unknown={"extensions": {RESUME_FROM: last_event_id}},
        )
        return encode(create)


class _Link:
    """What a session needs from its client, and the session opening both clients share."""

    _buffer: int
    _jwks: JWKS | None

    async def create_session(
        self,
        agent: str | None = None,
        *,
        token: str | None = None,
        payment_token: str | None = None,
        instructions: str | None = None,
        tools: Sequence[ty.ToolDefinition] | None = None,
        config: ty.SessionConfig | None = None,
        chat: str | None = None,
        on_tool_call: ToolHandler | None = None,
        on_payment_required: PaymentHandler | None = None,
        session_id: str | None = None,
        on_interrupt: InterruptHandler | None = None,
        interrupts: bool | None = None,
    ) -> ClientSession:
        """Open a session; returns once ``session.created`` (and capabilities) arrived.

        ``on_tool_call`` and ``on_payment_required`` answer the server's
        ``tool.call`` and ``payment.required`` events (module docstring).
        ``on_interrupt`` answers ``interrupt.request`` events; ``interrupts``
        declares that this client shows and answers interrupts (default: when
        ``on_interrupt`` is given), so the server pauses a run for its answer
        instead of applying its policy for clients that cannot
        (docs/human-in-the-loop.md).

        Raises:
            ClientError: The server refused it (``agent_not_found``,
                ``too_many_sessions`` ...).
        """
        opening = _Opening(
            session_id=session_id or _new_session_id(),
            config=_session_config(config, instructions, tools),
            agent=agent,
            token=token,
            payment_token=payment_token,
            chat=chat,
            on_tool_call=on_tool_call,
            on_payment_required=on_payment_required,
            on_interrupt=on_interrupt,
            interrupts=on_interrupt is not None if interrupts is None else interrupts,
        )
        return await self._open(opening)

    def _session(self, conn: ClientConnection, opening: _Opening) -> ClientSession:
        session = ClientSession(
            self,
            conn,
            opening.session_id,
            opening.on_tool_call,
            self._buffer,
            opening.on_payment_required,
            self._jwks,
        )
        session.opening = opening
        session.on_interrupt = opening.on_interrupt
        return session

    async def _open(self, opening: _Opening) -> ClientSession:
        """Send ``session.create`` the client's way; return once the session is created."""
        raise NotImplementedError

    async def _send_events(self, session: ClientSession, events: list[ev.Event]) -> bytes | None:
        """Send ``events``; returns the bytes that carried the last one."""
        raise NotImplementedError

    async def _forget(self, session: ClientSession) -> None:
        raise NotImplementedError


def _session_config(
    config: ty.SessionConfig | None,
    instructions: str | None,
    tools: Sequence[ty.ToolDefinition] | None,
) -> ty.SessionConfig:
    cfg = config or ty.SessionConfig(modalities=["text"])
    if instructions is not None:
        cfg = attrs.evolve(cfg, instructions=instructions)
    if tools is not None:
        cfg = attrs.evolve(cfg, tools=list(tools))
    return cfg


def _encode(
    conn: ClientConnection, events: list[ev.Event]
) -> tuple[list[bytes], ClientError | None]:
    """Encode events until the core refuses one; what was accepted must be sent."""
    out: list[bytes] = []
    for event in events:
        try:
            out.append(conn.send(event))
        except LocalProtocolError as exc:
            return out, ClientError(exc.code, exc.message)
    return out, None


def _received(conn: ClientConnection) -> Iterator[ev.Event]:
    """The events ``conn`` has parsed so far; one the core refuses is logged and
    skipped, and so is an event type this version does not know.

    A response past the client's output bound is over for the core (which
    owes the server its ``response.cancel``): its waiter gets a
    ``response.error`` ``output_too_large`` in the server's stead.
    """
    while True:
        try:
            event = conn.next_event()
        except RemoteProtocolError as exc:
            log.warning("the server sent an event we refuse: %s", exc)
            if exc.code == OUTPUT_TOO_LARGE and isinstance(exc.reply, ev.ResponseCancel):
                error = ty.ErrorInfo(code=exc.code, message=exc.message)
                yield ev.ResponseErrorEvent(
                    response_id=exc.reply.response_id, session_id=exc.session_id, error=error
                )
            continue
        if event is NEED_DATA:
            return
        if isinstance(event, ev.Event):
            yield event


def _new_session_id() -> str:
    return "sess_" + os.urandom(12).hex()


#: A client run by :func:`_running`.
_L = TypeVar("_L")


@asynccontextmanager
async def _running(
    start: Callable[[trio.Nursery], _L], close: Callable[[_L], Awaitable[None]]
) -> AsyncIterator[_L]:
    """Run a client's tasks in a nursery for the length of the caller's block.

    ``start`` builds the client in the nursery; ``close`` ends it when the
    block is left. The client's tasks catch their own errors, so when the
    nursery raises a group whose only member is what the caller's block
    raised, that exception is the caller's, not ours: it is re-raised as it
    was, unwrapped.
    """
    body: list[BaseException] = []
    try:
        async with trio.open_nursery() as nursery:
            client = start(nursery)
            try:
                yield client
            except BaseException as exc:
                body.append(exc)
                raise
            finally:
                await close(client)
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        if body and len(group.exceptions) == 1 and group.exceptions[0] is body[0]:
            raise body[0] from None
        raise


class _UpdateWait:
    """One ``update()`` call waiting for ``session.updated`` (or its refusal)."""

    __slots__ = ("done", "refused")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.refused: ClientError | None = None


def _refuses_token(event: ev.Event) -> bool:
    """Whether ``event`` is the server refusing a ``session.update`` token."""
    error = getattr(event, "error", None)
    details = getattr(error, "details", None)
    return (
        getattr(error, "code", None) == "unauthorized"
        and isinstance(details, dict)
        and details.get("field") == "token"
    )
