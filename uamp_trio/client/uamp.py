"""UAMP clients: native WebSocket (multiplexed) and HTTP+SSE, with one surface.

::

    async with connect("ws://127.0.0.1:8765/ws") as client:
        session = await client.create_session(agent="demo", on_tool_call=run_tool)
        async for event in session.respond("Hello"):
            ...                                   # response.created, deltas, ...
        result = await session.ask("What's the weather?")   # ResponseResult
        print(result.text, result.usage)

    async with connect_sse("http://127.0.0.1:8765") as client:   # same API
        ...

Theory of operation
-------------------
Both clients keep a :class:`~uamp_proto.connection.ClientConnection` (the
sans-IO core) and do the I/O around it. The client proposes each session's
id in ``session.create``, so every event -- ``session.created``, errors --
is routed by id, even before the server answered.

* :class:`UampClient` (WebSocket): one connection for every session
  (UAMP section 10). A reader task frames the socket (the same engines as the
  server, :mod:`uamp_trio.engines.ws_frames`), feeds the core, writes the replies the
  core owes (pongs, delta-window acks) and routes each event to its
  session. Writes share one lock.
* :class:`SSEClient` (UAMP section 13.2): one HTTP session, hence one core,
  per UAMP session; events are POSTed to ``/events`` and read from
  ``/events/stream`` by one task per session (httpx).

A :class:`ClientSession` delivers the events of its current response to
:meth:`ClientSession.respond` through a bounded channel; a consumer that does
not read stalls the connection's reader once that buffer is full (TCP-like
backpressure). ``tool.call`` events are also answered by the session's
``on_tool_call`` callback (sync or async), in a task of its own, with a
``tool.result``; the server then resumes the response (section 3.2).

Payment (UAMP 3.3, 7.2; spec 004): ``payment.required``, ``payment.accepted``,
``payment.error`` and ``payment.balance`` of a response reach its iterator
like any other event (those that arrive with no response being iterated, or
after its terminal event, are kept in :attr:`ClientSession.payments`). A session given an
``on_payment_required`` callback (sync or async) also answers each
``payment.required`` by itself: the callback gets the event and returns a
token, sent as ``payment.submit`` -- or ``None`` to leave it to the caller
(:meth:`ClientSession.pay`, or :meth:`ClientSession.cancel`). The server
holds or pauses the response meanwhile and resumes it once the payment is
accepted. The callback is asked once per ``payment.required``: when the
server refuses its token (``payment.error``, ``can_retry``) the response stays
held and the caller, who sees that event, pays again or cancels.

Signatures (spec 000 6.7, spec 004 "Response Signing"): :func:`connect` and
:func:`connect_sse` given ``verify=`` (a JWKS, its JSON object, a path or a
URL such as ``http://host:port/.well-known/jwks.json``) check every
``response.done``'s ``signature`` against the response's text deltas and the
bytes that carried its ``response.create`` (on the WebSocket that event's
message; over HTTP+SSE the body of the POST). A missing or bad signature
raises :class:`SignatureVerificationError` where the iteration would have
yielded ``response.done`` (the stream's :attr:`~ResponseStream.result` is
set all the same). Without ``verify=`` the signature is only kept, in
:attr:`ResponseResult.signature`, with the request bytes, for
:meth:`ResponseResult.saved` (what ``uamp verify`` reads).
"""

from __future__ import annotations

import base64
import hashlib
import inspect
import logging
import os
import ssl
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any, Final, TypeVar
from urllib.parse import urlsplit

import attrs
import h11
import httpx
import orjson
import trio

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.codec import encode
from uamp_proto.connection import NEED_DATA, ClientConnection, ConnectionConfig
from uamp_proto.errors import LocalProtocolError, RemoteProtocolError, UampError
from uamp_proto.interrupts import CAPABILITY_KEY, Answer
from uamp_proto.payment import PaymentNegotiation
from uamp_proto.resume import LAST_REQUEST, RESUME_FROM, RESUMED
from uamp_proto.saved_response import SavedResponse
from uamp_proto.signing import JWKS, Reason, SignatureError, verify_response_signature
from uamp_proto.sse import SSEParser

from ..engines.streams import receive_or_eof
from ..engines.ws_frames import EngineName, FrameEngine, WebSocketClosed, make_engine
from .verify import JWKSSource, load_jwks

__all__ = [
    "ClientError",
    "ClientSession",
    "PaymentHandler",
    "Redial",
    "ResponseResult",
    "ResponseStream",
    "SSEClient",
    "SignatureVerificationError",
    "ToolHandler",
    "UampClient",
    "connect",
    "connect_sse",
    "open_websocket",
]

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
_READ_SIZE: Final = 65536
_WS_GUID: Final = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_TERMINAL: Final = frozenset({"response.done", "response.cancelled", "response.error"})
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


class ClientError(UampError):
    """An error the server reported (``session.error`` / ``response.error``) or a closed link.

    Attributes:
        code: The UAMP error code (``agent_offline``, ``invalid_event`` ...).
        message: The server's message.
        event: The error event, when there is one.
        reason: The server's more precise code (``details.reason``, e.g.
            ``agent_not_found`` beside ``agent_offline``), or ``None``.
    """

    def __init__(
        self, code: str, message: str, event: ev.Event | None = None, *, details: Any = None
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.event = event
        if details is None:
            details = getattr(getattr(event, "error", None), "details", None)
        reason = details.get("reason") if isinstance(details, dict) else None
        self.reason: str | None = reason if isinstance(reason, str) else None


class _Unavailable(ClientError):
    """The upgrade met no server for now: 502/503/504 (a load balancer whose
    nodes are away) or a close before the answer; worth dialling again."""


#: Upgrade answers that say "no server right now" rather than "no".
_UNAVAILABLE: Final = frozenset({502, 503, 504})


class SignatureVerificationError(ClientError):
    """A response's signature is missing or does not verify (``verify=`` was given).

    Attributes:
        reason: Why (:class:`~uamp_proto.signing.Reason`: ``unsigned``,
            ``tampered``, ``bad_signature``, ``unknown_kid``...).
        result: The response as received.
    """

    def __init__(self, error: SignatureError, result: ResponseResult) -> None:
        super().__init__("bad_signature", f"response signature refused: {error}")
        self.reason = error.reason
        self.result = result


@attrs.frozen(kw_only=True)
class ResponseResult:
    """What one response produced.

    Attributes:
        response_id: The response id.
        status: ``completed``, ``cancelled`` or ``failed``.
        text: The text deltas joined.
        thinking: The thinking content joined.
        output: The final output items (``response.done``) or the partial
            output (``response.cancelled``).
        usage: The usage of ``response.done``, if any.
        tool_calls: The client tool calls the server asked for.
        error: The error of a failed response.
        signature: ``response.done``'s ``signature``, if it carried one.
        request: The bytes that carried ``response.create`` (what a
            signature covers).
        verified: Whether the signature was checked and verified.
    """

    response_id: str | None
    status: str
    text: str
    thinking: str = ""
    output: list[ty.ContentItem] = attrs.field(factory=list)
    usage: ty.UsageStats | None = None
    tool_calls: list[ty.ToolInvocation] = attrs.field(factory=list)
    error: ty.ErrorInfo | None = None
    signature: str | None = None
    request: bytes | None = None
    verified: bool = False

    def saved(self) -> SavedResponse:
        """What ``uamp verify`` checks: text, signature and request bytes."""
        return SavedResponse(
            text=self.text, signature=self.signature, request=self.request, transport="uamp"
        )


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


class _End:
    """Put on a session's channel when the session or the link ends."""

    def __init__(self, error: ClientError) -> None:
        self.error = error


class ResponseStream:
    """The events of one response, as an async iterator.

    Iterating sends the input and ``response.create`` first, then yields
    every event of the response up to and including its terminal event
    (``response.done``, ``response.cancelled`` or ``response.error``).
    :attr:`result` is set once it ended.

    Raises (while iterating):
        ClientError: The server refused the request (``session.error`` before
            ``response.created``, e.g. ``response_in_progress``), or the
            session or connection ended.
        SignatureVerificationError: With ``verify=``, instead of a
            ``response.done`` whose signature is missing or bad.
    """

    def __init__(self, session: ClientSession, start: list[ev.Event]) -> None:
        self._session = session
        self._start = start
        self._started = False
        self._finished = False
        self._created = False
        self._text: list[str] = []
        self._thinking: list[str] = []
        self._calls: list[ty.ToolInvocation] = []
        self._request: bytes | None = None
        #: The response id, once ``response.created`` arrived.
        self.response_id: str | None = None
        #: The outcome, once the terminal event arrived.
        self.result: ResponseResult | None = None

    def __aiter__(self) -> ResponseStream:
        return self

    async def __anext__(self) -> ev.Event:
        if self._finished:
            raise StopAsyncIteration
        session = self._session
        if not self._started:
            self._started = True
            await session._claim(self)
            self._request = await session.send(*self._start)
        item = await session._receive()
        if isinstance(item, _End):
            self._finish()
            raise item.error
        event = item
        etype = event.type
        if etype == "session.error" and not self._created:
            self._finish()
            assert isinstance(event, ev.SessionErrorEvent)
            raise ClientError(event.error.code, event.error.message, event)
        if etype == "response.created":
            self._created = True
            self.response_id = getattr(event, "response_id", None)
        elif etype == "response.delta":
            delta = event.delta  # type: ignore[attr-defined]
            if isinstance(delta, ty.DeltaText):
                self._text.append(delta.text)
        elif etype == "thinking":
            self._thinking.append(event.content)  # type: ignore[attr-defined]
        elif etype == "tool.call":
            assert isinstance(event, ev.ToolCall)
            self._calls.append(
                ty.ToolInvocation(id=event.call_id, name=event.name, arguments=event.arguments)
            )
        elif etype in _TERMINAL:
            self._conclude(event)
        return event

    def _conclude(self, event: ev.Event) -> None:
        output: list[ty.ContentItem] = []
        usage = None
        error = None
        signature = None
        if isinstance(event, ev.ResponseDone):
            status, output, usage = "completed", list(event.response.output), event.response.usage
            signature = event.signature
        elif isinstance(event, ev.ResponseCancelled):
            status, output = "cancelled", list(event.partial_output or [])
        else:
            assert isinstance(event, ev.ResponseErrorEvent)
            status, error = "failed", event.error
        self.result = ResponseResult(
            response_id=getattr(event, "response_id", None) or self.response_id,
            status=status,
            text="".join(self._text),
            thinking="".join(self._thinking),
            output=output,
            usage=usage,
            tool_calls=list(self._calls),
            error=error,
            signature=signature,
            request=self._request,
        )
        self._finish()
        jwks = self._session._jwks
        if jwks is not None and status == "completed":
            self.result = self._verify(self.result, jwks)

    @staticmethod
    def _verify(result: ResponseResult, jwks: JWKS) -> ResponseResult:
        """``result`` marked verified, or :class:`SignatureVerificationError`."""
        try:
            if result.signature is None:
                raise SignatureError(Reason.UNSIGNED, "response.done carries no signature")
            verify_response_signature(result.signature, result.text, result.request or b"", jwks)
        except SignatureError as exc:
            raise SignatureVerificationError(exc, result) from None
        return attrs.evolve(result, verified=True)

    def _finish(self) -> None:
        self._finished = True
        self._session._turn = None
        self._session._release(self)

    async def collect(self) -> ResponseResult:
        """Consume the rest of the response and return its result."""
        async for _ in self:
            pass
        assert self.result is not None
        return self.result


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
        self._updated: deque[trio.Event] = deque()
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
        """Refresh the session's token(s) (``session.update``); waits for ``session.updated``."""
        done = trio.Event()
        self._updated.append(done)
        await self.send(ev.SessionUpdate(token=token, payment_token=payment_token))
        await done.wait()
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
                self._updated.popleft().set()
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
            waiter.set()
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
    skipped, and so is an event type this version does not know."""
    while True:
        try:
            event = conn.next_event()
        except RemoteProtocolError as exc:
            log.warning("the server sent an event we refuse: %s", exc)
            continue
        if event is NEED_DATA:
            return
        if isinstance(event, ev.Event):
            yield event


def _new_session_id() -> str:
    return "sess_" + os.urandom(12).hex()


# --- WebSocket ------------------------------------------------------------------------


async def _open_stream(
    url: str, ssl_context: ssl.SSLContext | None
) -> tuple[trio.abc.Stream, str, str]:
    parts = urlsplit(url)
    if parts.scheme not in ("ws", "wss", "http", "https"):
        raise ValueError(f"not a WebSocket URL: {url!r}")
    secure = parts.scheme in ("wss", "https")
    host = parts.hostname or "127.0.0.1"
    port = parts.port or (443 if secure else 80)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    stream: trio.abc.Stream
    if secure:
        stream = await trio.open_ssl_over_tcp_stream(
            host, port, ssl_context=ssl_context or ssl.create_default_context()
        )
    else:
        stream = await trio.open_tcp_stream(host, port)
    authority = parts.netloc.rsplit("@", 1)[-1]
    return stream, authority, target


async def _handshake(
    stream: trio.abc.Stream,
    authority: str,
    target: str,
    headers: Sequence[tuple[str, str]],
    subprotocols: Sequence[str],
) -> bytes:
    """Do the RFC 6455 opening handshake with h11; returns bytes read past it."""
    key = base64.b64encode(os.urandom(16))
    expect = base64.b64encode(hashlib.sha1(key + _WS_GUID).digest())
    conn = h11.Connection(h11.CLIENT)
    head = [
        ("Host", authority),
        ("Upgrade", "websocket"),
        ("Connection", "Upgrade"),
        ("Sec-WebSocket-Key", key.decode()),
        ("Sec-WebSocket-Version", "13"),
        *headers,
    ]
    if subprotocols:
        head.append(("Sec-WebSocket-Protocol", ", ".join(subprotocols)))
    await stream.send_all(conn.send(h11.Request(method="GET", target=target, headers=head)))
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            data = bytes(await stream.receive_some(_READ_SIZE))
            conn.receive_data(data)
            if not data and conn.their_state is h11.SEND_RESPONSE:
                raise _Unavailable("handshake_failed", "the server closed during the handshake")
            continue
        if isinstance(event, h11.InformationalResponse) and event.status_code == 101:
            got = dict((k.lower(), v) for k, v in event.headers)
            if got.get(b"sec-websocket-accept") != expect:
                raise ClientError("handshake_failed", "bad Sec-WebSocket-Accept from the server")
            return bytes(conn.trailing_data[0])
        if isinstance(event, h11.Response):
            body = b""
            while True:
                nxt = conn.next_event()
                if isinstance(nxt, h11.Data):
                    body += bytes(nxt.data)
                elif nxt is h11.NEED_DATA:
                    more = bytes(await stream.receive_some(_READ_SIZE))
                    conn.receive_data(more)
                    if not more:
                        break
                else:
                    break
            code = "handshake_failed"
            message = f"the server answered {event.status_code}"
            try:
                err = orjson.loads(body).get("error", {})
                code = err.get("code") or code
                message = f"{message}: {err.get('message')}"
            except (orjson.JSONDecodeError, AttributeError):
                pass
            raise (_Unavailable if event.status_code in _UNAVAILABLE else ClientError)(
                code, message
            )
        if isinstance(event, h11.ConnectionClosed):
            raise _Unavailable("handshake_failed", "the server closed during the handshake")


async def open_websocket(
    url: str,
    *,
    headers: Sequence[tuple[str, str]] = (),
    ssl_context: ssl.SSLContext | None = None,
    timeout: float = 10.0,
    subprotocols: Sequence[str] = ("uamp",),
) -> tuple[trio.abc.Stream, bytes]:
    """Dial ``url`` and do the WebSocket handshake (offering ``subprotocols``).

    Returns the stream and the bytes read past the handshake.

    Raises:
        ClientError: The server refused the upgrade (its error code, e.g.
            ``unauthorized``), closed or reset the connection during it, or
            did not answer in HTTP.
        OSError: The server is unreachable.
        trio.TooSlowError: No handshake within ``timeout``.
    """
    with trio.fail_after(timeout):
        stream, authority, target = await _open_stream(url, ssl_context)
        try:
            initial = await _handshake(stream, authority, target, headers, subprotocols)
        except BaseException as exc:
            await trio.aclose_forcefully(stream)
            if isinstance(exc, trio.BrokenResourceError):
                # Reset mid-handshake: a stopping server's listener drops
                # its backlog so; as unavailable as a refused connection.
                raise _Unavailable("handshake_failed", f"the connection broke: {exc}") from None
            if isinstance(exc, h11.RemoteProtocolError):
                raise ClientError("handshake_failed", f"not an HTTP answer: {exc}") from None
            raise
    return stream, initial


@attrs.frozen
class Redial:
    """How :class:`UampClient` dials again after losing its connection (``auto_resume``).

    Attributes:
        url, headers, ssl_context, timeout: As given to :func:`connect`.
        engine, max_message_size: The framing engine of each new connection.
        give_up_after: Seconds of failed attempts before the sessions are
            closed with the last error.
        first_delay, max_delay: The backoff between attempts (doubling).
    """

    url: str
    headers: Sequence[tuple[str, str]] = ()
    ssl_context: ssl.SSLContext | None = None
    timeout: float = 10.0
    engine: EngineName | None = None
    max_message_size: int | None = None
    give_up_after: float = 60.0
    first_delay: float = 0.1
    max_delay: float = 5.0

    async def dial(
        self, retry: Callable[[BaseException], bool], give_up_after: float | None = None
    ) -> tuple[trio.abc.Stream, bytes]:
        """Dial and shake hands, again with backoff after a failure ``retry`` accepts.

        Raises the last failure once ``give_up_after`` seconds (default: the
        redial's) are spent, or one ``retry`` refuses.
        """
        window = self.give_up_after if give_up_after is None else give_up_after
        delay, give_up = self.first_delay, trio.current_time() + window
        while True:
            try:
                return await open_websocket(
                    self.url,
                    headers=self.headers,
                    ssl_context=self.ssl_context,
                    timeout=self.timeout,
                )
            except (OSError, ClientError, trio.TooSlowError) as exc:
                if not retry(exc) or trio.current_time() + delay > give_up:
                    raise
                log.info("dialling %s again: %s", self.url, exc)
                await trio.sleep(delay)
                delay = min(delay * 2, self.max_delay)


def _transient(exc: BaseException) -> bool:
    """Whether a failed dial may succeed soon (no server now, not a refusal)."""
    return isinstance(exc, (OSError, trio.TooSlowError, _Unavailable))


class UampClient(_Link):
    """A native UAMP WebSocket client; make one with :func:`connect`.

    With ``redial`` (``connect(..., auto_resume=True)``) a lost connection is
    dialled again with backoff and every open session resumed where it broke
    (docs/resume.md): a response being iterated goes on, and calls made
    meanwhile wait for the new connection. A session the server cannot
    resume is closed with its ``session.error`` code. A turn whose
    ``response.created`` never came is sent again when the resumed
    session's ``last_request`` names an earlier turn (the server never acted
    on it; :class:`_Sent`).

    Attributes:
        sessions: The open sessions, by id.
        reconnects: How many times the connection was dialled again.
        resent: How many turns were sent again after a reconnect, the server
            having not acted on them (``last_request``, docs/resume.md).
        bytes_received: Bytes read from the socket(s) so far, WebSocket
            framing included (``uamp bench`` counts a turn's bytes with it).
    """

    def __init__(
        self,
        stream: trio.abc.Stream,
        engine: FrameEngine,
        nursery: trio.Nursery,
        *,
        delta_window: int | None,
        buffer: int,
        jwks: JWKS | None = None,
        redial: Redial | None = None,
    ) -> None:
        self._jwks = jwks
        self._stream = stream
        self._engine = engine
        self._nursery = nursery
        self._conn = ClientConnection(ConnectionConfig(delta_window=delta_window))
        self._lock = trio.StrictFIFOLock()
        self._buffer = buffer
        self.sessions: dict[str, ClientSession] = {}
        self._closed: ClientError | None = None
        self._pongs: deque[trio.Event] = deque()
        self._errors: deque[ev.Event] = deque(maxlen=64)
        self._redial = redial
        self._closing = False
        #: Set while a connection is up; replaced by an unset one while redialling.
        self._online = trio.Event()
        self._online.set()
        #: Sessions whose resuming ``session.create`` is not answered yet.
        self._resuming: set[str] = set()
        self._settled = trio.lowlevel.ParkingLot()
        #: Turns a resumed session sends again (written by the reader).
        self._again: deque[_Sent] = deque()
        self.reconnects = 0
        self.resent = 0
        self.bytes_received = 0

    @property
    def closed(self) -> bool:
        """Whether the connection has closed."""
        return self._closed is not None

    async def _open(self, opening: _Opening) -> ClientSession:
        if self._closed is not None:
            raise self._closed
        sid = opening.session_id
        session = self._session(self._conn, opening)
        self.sessions[sid] = session
        try:
            create = opening.encode(self._conn, agent=opening.agent)
            session._create_event_id = self._conn.last_event_id
            await self._write([create], session._opened)
            await session._wait_created()
        except BaseException:
            self.sessions.pop(sid, None)
            raise
        return session

    async def ping(self) -> None:
        """Send a UAMP ``ping`` and wait for the ``pong``."""
        done = trio.Event()
        self._pongs.append(done)
        await self._write([self._conn.send(ev.Ping())])
        await done.wait()
        if self._closed is not None:
            raise self._closed

    async def send_raw(self, message: str | bytes) -> None:
        """Send one text message as is (bypassing the core: for tests and tools)."""
        await self._write([message.encode() if isinstance(message, str) else message])

    async def _send_events(self, session: ClientSession, events: list[ev.Event]) -> bytes | None:
        if self._closed is not None:
            raise self._closed
        while not self._online.is_set() or session.id in self._resuming:
            # Nothing goes out for a session until the server has resumed it.
            await self._online.wait()
            if session.id in self._resuming:
                await self._settled.park()
            if self._closed is not None:
                raise self._closed
            if session._ended is not None:
                raise session._ended
        encoded, refused = _encode(self._conn, events)
        turn = None
        if self._redial is not None and any(isinstance(e, ev.ResponseCreate) for e in events):
            # A turn: sent again after a reconnect unless the server acted on it.
            last = max(i for i, e in enumerate(events) if isinstance(e, ev.ResponseCreate))
            if last < len(encoded):
                request = orjson.loads(encoded[last]).get("event_id")
                turn = session._turn = _Sent(session.id, encoded, request)
        if encoded:
            await self._write(encoded, turn)
        if refused is not None:
            raise refused
        return encoded[-1] if encoded else None

    async def _forget(self, session: ClientSession) -> None:
        self.sessions.pop(session.id, None)

    async def _write(self, messages: list[bytes], sent: _Sent | None = None) -> None:
        """Write ``messages``; with ``auto_resume`` a broken connection waits for the next.

        ``sent``: they are a session's opening or turn, which the reconnect
        sends again if the server did not act on it (:class:`_Sent`): written
        once, never after a reconnect wrote them, and a lost connection ends
        the call (the reconnect takes over).
        """
        while True:
            await self._online.wait()  # redialling: wait for the new connection
            if sent is not None and sent.sid in self._resuming:
                await self._settled.park()  # the server resumes the session first
                continue
            async with self._lock:
                if self._closed is not None:
                    raise self._closed
                if not self._online.is_set() or (sent is not None and sent.sid in self._resuming):
                    continue
                if sent is not None and sent.on is not None:
                    return  # a reconnect sent it
                engine = self._engine
                if engine.closed is not None:
                    # The server's close came in (a drain's "go away"): the
                    # reader dials again when it sees it; send once it has.
                    if self._redial is not None and not self._closing:
                        if self._online.is_set():
                            self._online = trio.Event()
                        if sent is not None:
                            sent.on = self.reconnects  # the reconnect decides
                            return
                        continue
                    self._shutdown(ClientError("closed", f"the connection closed: {engine.closed}"))
                    raise self._closed  # type: ignore[misc]
                for m in messages:
                    engine.text(m)
                data = engine.take()
                if sent is not None:
                    sent.on = self.reconnects
                try:
                    await self._stream.send_all(data)
                    return
                except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                    if self._redial is not None and not self._closing:
                        # The reader notices too and dials again; send once it has
                        # (what ``sent`` holds: the reconnect decides).
                        if self._online.is_set():
                            self._online = trio.Event()
                        if sent is not None:
                            return
                        continue
                    self._shutdown(ClientError("closed", f"the connection broke: {exc}"))
                    raise self._closed from None  # type: ignore[misc]

    async def _flush_owed(self) -> None:
        owed = self._conn.data_to_send()
        async with self._lock:
            engine = self._engine
            if engine.closed is None:
                for m in owed:
                    engine.text(m)
            data = engine.take()
            if data:
                with suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    await self._stream.send_all(data)

    async def _reader(self, initial: bytes | None) -> None:
        while initial is not None:
            error = await self._read(initial)
            if self._redial is None or self._closing or self._closed is not None:
                self._shutdown(error)
                return
            initial = await self._dial_again(self._redial, error)

    async def _read(self, initial: bytes) -> ClientError:
        """Read one connection until it closes; returns why it did."""
        conn, engine = self._conn, self._engine
        data = initial
        try:
            while True:
                if data:
                    self.bytes_received += len(data)
                    for message in engine.feed(data):
                        if self._resuming and self._resumed(message):
                            continue
                        conn.receive(message)
                        await self._drain()
                    await self._flush_owed()
                    while self._again:
                        turn = self._again.popleft()
                        if self._online.is_set():
                            await self._write(turn.messages, turn)
                        else:  # this connection is closing already: the next one
                            turn.on = self.reconnects
                data = await receive_or_eof(self._stream, _READ_SIZE)
                if not data:
                    engine.feed(b"")
        except WebSocketClosed as closed:
            await self._flush_owed()  # the close reply
            return ClientError("closed", f"the connection closed ({closed.code})")

    async def _dial_again(self, redial: Redial, error: ClientError) -> bytes | None:
        """Dial until connected (backoff), then resume every session; ``None``: gave up."""
        if self._online.is_set():
            self._online = trio.Event()
        with suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await trio.aclose_forcefully(self._stream)
        try:
            stream, initial = await redial.dial(lambda exc: True)
        except (OSError, ClientError, trio.TooSlowError):
            self._shutdown(error)
            return None
        self.reconnects += 1
        async with self._lock:
            self._stream = stream
            self._engine = make_engine(
                client=True, max_message_size=redial.max_message_size, engine=redial.engine
            )
            resumes = []
            for sid, session in self.sessions.items():
                if session.opening is None:
                    continue
                if session.last_event_id is not None:
                    resumes.append(session.opening.resume(self._conn, session.last_event_id))
                    self._resuming.add(sid)
                elif not session._ready.is_set() and session._opened.on is not None:
                    # Lost before its session.created: ask for it again (not
                    # yet written at all: its writer writes it now).
                    resumes.append(session.opening.again(self._conn))
                    session._opened.on = self.reconnects
            for message in resumes:
                self._engine.text(message)
            with suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await stream.send_all(self._engine.take())
            self._online.set()
        return initial

    def _resumed(self, message: bytes | str) -> bool:
        """Take the answer to a resuming ``session.create`` (the core knows the session)."""
        if b"session." not in (message if isinstance(message, bytes) else message.encode()):
            return False
        try:
            raw = orjson.loads(message)
        except orjson.JSONDecodeError:
            return False
        sid = raw.get("session_id") if isinstance(raw, dict) else None
        if sid not in self._resuming:
            return False
        session = self.sessions.get(sid)
        extensions = raw.get("extensions") or {}
        if raw.get("type") == "session.created" and extensions.get(RESUMED):
            self._resuming.discard(sid)
            self._settled.unpark_all()
            turn = session._turn if session is not None else None
            if (
                turn is not None
                and turn.on is not None
                and turn.on < self.reconnects
                and turn.request != extensions.get(LAST_REQUEST)
            ):
                # Its turn went out on a lost connection and the server never
                # acted on it (no response began): send it again here.
                turn.on = None
                self._again.append(turn)
                self.resent += 1
            return True
        if raw.get("type") == "session.error":
            self._resuming.discard(sid)
            self._settled.unpark_all()
            error = raw.get("error") or {}
            if session is not None:
                self.sessions.pop(sid, None)
                session._close(
                    ClientError(
                        str(error.get("code", "resume_failed")),
                        f"session {sid} could not be resumed: {error.get('message', '')}",
                    )
                )
            return True
        return False

    async def _drain(self) -> None:
        for event in _received(self._conn):
            sid = event.session_id
            session = self.sessions.get(sid) if sid is not None else None
            if session is None and sid is None:
                session = self._addressee(event)
            if session is not None and event.event_id is not None:
                session.last_event_id = event.event_id
            if session is not None and event.type == "response.created":
                session._turn = None  # the server acted on it
            if event.type == "pong" and session is None and self._pongs:
                self._pongs.popleft().set()
            elif session is not None:
                if event.type == "pong" and self._pongs:
                    self._pongs.popleft().set()
                await session._deliver(event, self._nursery)
            else:
                self._errors.append(event)

    def _addressee(self, event: ev.Event) -> ClientSession | None:
        """The session an event without ``session_id`` is for (``None``: the connection).

        The only session; or the opening whose ``session.create`` a
        ``session.error`` refuses (named by ``details.event_id``, else the
        only session still opening), so that opening fails at once instead
        of waiting for a ``session.created`` that will never come.
        """
        if len(self.sessions) == 1:
            return next(iter(self.sessions.values()))
        if not isinstance(event, ev.SessionErrorEvent):
            return None
        details = event.error.details or {}
        if details.get("event_type") != "session.create":
            return None
        opening = [s for s in self.sessions.values() if not s._ready.is_set()]
        named = details.get("event_id")
        for session in opening:
            if named is not None and session._create_event_id == named:
                return session
        return opening[0] if len(opening) == 1 else None

    def _shutdown(self, error: ClientError) -> None:
        self._resuming.clear()
        self._settled.unpark_all()
        self._online.set()  # writers waiting for a redial see the close
        if self._closed is None:
            self._closed = error
        for session in list(self.sessions.values()):
            session._close(error)
        for waiter in self._pongs:
            waiter.set()

    async def aclose(self) -> None:
        """Close the WebSocket (code 1000) and the connection."""
        self._closing = True
        if self._closed is None:
            async with self._lock:
                self._engine.close(1000, "")
                data = self._engine.take()
                if data:
                    with suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                        await self._stream.send_all(data)
            self._shutdown(ClientError("closed", "the client closed the connection"))


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


@asynccontextmanager
async def connect(
    url: str,
    *,
    delta_window: int | None = None,
    headers: Sequence[tuple[str, str]] = (),
    engine: EngineName | None = None,
    max_message_size: int | None = 16 * 1024 * 1024,
    session_buffer: int = DEFAULT_SESSION_BUFFER,
    ssl_context: ssl.SSLContext | None = None,
    connect_timeout: float = 10.0,
    verify: JWKSSource | None = None,
    auto_resume: bool = False,
    resume_for: float = 60.0,
    first_dial_for: float | None = None,
) -> AsyncIterator[UampClient]:
    """Connect to a UAMP WebSocket endpoint (``ws://host:port/ws`` or ``.../agents/NAME/uamp``).

    Args:
        url: ``ws://`` or ``wss://`` URL.
        delta_window: Opt every session into delta windows of this size.
        headers: Extra headers of the upgrade request (``Authorization`` ...).
        engine: WebSocket framing engine.
        max_message_size: Largest message accepted from the server.
        session_buffer: Events buffered per session for its consumer.
        ssl_context: For ``wss://``.
        connect_timeout: Limit on connecting and the handshake.
        verify: Check every response's signature against this JWKS (a
            :class:`~uamp_proto.signing.JWKS`, its JSON object, a path or a
            URL; fetched once, now).
        auto_resume: When the connection drops, dial again with backoff and
            resume every open session (docs/resume.md). The first dial is
            also tried again while no server answers (refused, 502, 503,
            504, closed during the handshake), for up to ``resume_for``.
        resume_for: With ``auto_resume``, how long to keep trying before the
            sessions are closed.
        first_dial_for: With ``auto_resume``, how long the first dial is
            tried (default: ``resume_for``; 0: once, so that a server that is
            not there is an error at once, as a terminal wants).

    Raises:
        ClientError: The handshake failed (``agent_not_found`` for an unknown
            agent's endpoint ...).
        JWKSError: ``verify`` names no usable JWKS.
    """
    jwks = await load_jwks(verify) if verify is not None else None
    redial = None
    if auto_resume:
        redial = Redial(
            url,
            headers,
            ssl_context,
            connect_timeout,
            engine,
            max_message_size,
            give_up_after=resume_for,
        )
        # A node lost while we dial (a load balancer's 503, a refused or
        # dropped connection) is ridden out like one lost later.
        stream, initial = await redial.dial(_transient, first_dial_for)
    else:
        stream, initial = await open_websocket(
            url, headers=headers, ssl_context=ssl_context, timeout=connect_timeout
        )
    frames = make_engine(client=True, max_message_size=max_message_size, engine=engine)

    def start(nursery: trio.Nursery) -> UampClient:
        client = UampClient(
            stream,
            frames,
            nursery,
            delta_window=delta_window,
            buffer=session_buffer,
            jwks=jwks,
            redial=redial,
        )
        nursery.start_soon(client._reader, initial)
        return client

    async def close(client: UampClient) -> None:
        with trio.move_on_after(1.0) as scope:
            scope.shield = True
            await client.aclose()
        if client._stream is not stream:  # a redialled connection
            await trio.aclose_forcefully(client._stream)

    try:
        async with _running(start, close) as client:
            yield client
    finally:
        await trio.aclose_forcefully(stream)


# --- HTTP + SSE ---------------------------------------------------------------------------


class SSEClient(_Link):
    """A UAMP client over HTTP+SSE (section 13.2); make one with :func:`connect_sse`.

    Each session is its own HTTP session: ``session.create`` is POSTed to
    ``{base}/agents/{agent}/events`` (or, without an agent or with
    ``agent_in_path=False``, to ``{base}/events`` naming the agent in the
    event), later events to the same path, and one task per session reads
    ``.../events/stream``.
    """

    def __init__(
        self,
        http: httpx.AsyncClient,
        base_url: str,
        nursery: trio.Nursery,
        *,
        delta_window: int | None,
        buffer: int,
        jwks: JWKS | None = None,
        agent_in_path: bool = True,
    ) -> None:
        self._agent_in_path = agent_in_path
        self._jwks = jwks
        self._http = http
        self._base = base_url.rstrip("/")
        self._nursery = nursery
        self._delta_window = delta_window
        self._buffer = buffer
        self.sessions: dict[str, ClientSession] = {}
        self._paths: dict[str, str] = {}
        self._scopes: dict[str, trio.CancelScope] = {}
        #: Bytes read from the sessions' event streams so far (SSE framing included).
        self.bytes_received = 0

    async def _open(self, opening: _Opening) -> ClientSession:
        conn = ClientConnection(ConnectionConfig(delta_window=self._delta_window))
        session = self._session(conn, opening)
        agent, by_path = opening.agent, self._agent_in_path
        prefix = f"{self._base}/agents/{agent}" if agent and by_path else self._base
        self._paths[opening.session_id] = prefix
        data = opening.encode(conn, agent=None if by_path else agent)
        resp = await self._http.post(
            f"{prefix}/events", content=data, headers={"content-type": "application/json"}
        )
        if resp.status_code != 200:
            raise _http_error(resp)
        sid = resp.headers.get("x-session-id", opening.session_id)
        self.sessions[sid] = session
        scope = trio.CancelScope()
        self._scopes[sid] = scope
        await self._nursery.start(self._stream_task, session, prefix, scope)
        await session._wait_created()
        return session

    async def _send_events(self, session: ClientSession, events: list[ev.Event]) -> bytes | None:
        encoded, refused = _encode(session._conn, events)
        body = None
        if encoded:
            body = b"[" + b",".join(encoded) + b"]"
            await self._post(session, body)
        if refused is not None:
            raise refused
        return body

    async def _post(self, session: ClientSession, body: bytes) -> None:
        prefix = self._paths[session.id]
        try:
            resp = await self._http.post(
                f"{prefix}/events",
                content=body,
                headers={"content-type": "application/json", "x-session-id": session.id},
            )
        except httpx.HTTPError as exc:
            raise ClientError("closed", f"POST failed: {exc}") from None
        if resp.status_code != 200:
            raise _http_error(resp)

    async def _forget(self, session: ClientSession) -> None:
        self.sessions.pop(session.id, None)
        scope = self._scopes.pop(session.id, None)
        if scope is not None:
            scope.cancel()

    async def _stream_task(
        self,
        session: ClientSession,
        prefix: str,
        scope: trio.CancelScope,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        conn = session._conn
        parser = SSEParser()
        started = False
        with scope:
            try:
                async with self._http.stream(
                    "GET",
                    f"{prefix}/events/stream",
                    headers={"x-session-id": session.id, "accept": "text/event-stream"},
                    timeout=httpx.Timeout(10.0, read=None),
                ) as resp:
                    if resp.status_code != 200:
                        await resp.aread()
                        raise _http_error(resp)
                    task_status.started()
                    started = True
                    async for chunk in resp.aiter_raw():
                        self.bytes_received += len(chunk)
                        for sse in parser.feed(chunk):
                            conn.receive(sse.data)
                            for event in _received(conn):
                                await session._deliver(event, self._nursery)
                        owed = conn.data_to_send()
                        if owed:  # delta-window acks
                            await self._post(session, b"[" + b",".join(owed) + b"]")
            except (httpx.HTTPError, ClientError) as exc:
                if not started:
                    raise
                log.debug("SSE stream of %s ended: %s", session.id, exc)
        session._close(ClientError("closed", f"the event stream of session {session.id} ended"))

    async def aclose(self) -> None:
        """Stop every session's stream."""
        for scope in self._scopes.values():
            scope.cancel()


def _http_error(resp: httpx.Response) -> ClientError:
    try:
        err = resp.json().get("error", {})
        return ClientError(
            err.get("code") or f"http_{resp.status_code}",
            err.get("message") or resp.text,
            details=err.get("details"),
        )
    except (ValueError, AttributeError):
        return ClientError(f"http_{resp.status_code}", resp.text)


@asynccontextmanager
async def connect_sse(
    base_url: str,
    *,
    delta_window: int | None = None,
    headers: dict[str, str] | None = None,
    session_buffer: int = DEFAULT_SESSION_BUFFER,
    http: httpx.AsyncClient | None = None,
    verify: JWKSSource | None = None,
    agent_in_path: bool = True,
) -> AsyncIterator[SSEClient]:
    """A UAMP client over HTTP+SSE against ``base_url`` (``http://host:port``).

    Args:
        base_url: The server's base URL.
        delta_window: Opt every session into delta windows of this size.
        headers: Headers for every request.
        session_buffer: Events buffered per session for its consumer.
        http: An httpx client to use (default: a new one).
        verify: Check every response's signature against this JWKS (see
            :func:`connect`).
        agent_in_path: Address a session's agent by its path
            (``/agents/{agent}/events``, the default) rather than by the
            ``agent`` field of ``session.create`` sent to ``/events``.
    """
    jwks = await load_jwks(verify) if verify is not None else None
    own = http is None
    client_http = http or httpx.AsyncClient(headers=headers, timeout=30.0)

    def start(nursery: trio.Nursery) -> SSEClient:
        return SSEClient(
            client_http,
            base_url,
            nursery,
            delta_window=delta_window,
            buffer=session_buffer,
            jwks=jwks,
            agent_in_path=agent_in_path,
        )

    try:
        async with _running(start, SSEClient.aclose) as client:
            yield client
    finally:
        if own:
            with trio.CancelScope(shield=True):
                await client_http.aclose()
