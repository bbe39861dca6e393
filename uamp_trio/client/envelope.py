"""Spec 003 clients: signed envelopes over HTTP + SSE and the length-prefixed WebSocket.

::

    signer = EnvelopeSigner.ephemeral()            # or EnvelopeSigner(key, cap_token=...)
    async with EnvelopeHTTPClient("http://127.0.0.1:8765", signer) as client:
        reply = await client.ask("Hello", window=8)
        print(reply.text, [d.delta_seq for d in reply.deltas])

    async with envelope_ws("ws://127.0.0.1:8765/uamp/1/ws", signer) as client:
        reply = await client.ask("Hello")

Theory of operation
-------------------
Both clients sign each envelope (:class:`EnvelopeSigner`: the key, the
``kid``, an optional ``cap_token``; without a token the public key travels
in the signature's header), read the delta frames of its exchange, check
their ``delta_seq`` with the core's :class:`~uamp_proto.flow.ReceiveWindow`
(a gap, duplicate or overrun raises 4.09) and acknowledge with a
``progress`` frame every ``ack_every`` frames and at the end, so the
server's window keeps moving. A refusal is raised as
:class:`EnvelopeClientError` with the section 9 code of the server's error
envelope (and ``retry_after`` for 5.04).

* :class:`EnvelopeHTTPClient`: ``POST /v1/messages`` (202 + ``Location``),
  ``GET`` the ``Location`` as SSE, acks ``POST``-ed to it (httpx). With a
  capability token it is also the bearer token of the stream requests.
* :class:`EnvelopeWSClient` (:func:`envelope_ws`): one WebSocket
  (trio-websocket), binary messages of 4-byte big-endian length-prefixed
  frames; a reader task routes deltas by ``stream_id`` to each exchange.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import attrs
import httpx
import orjson
import trio
import trio_websocket
from cryptography.hazmat.primitives.asymmetric import ed25519

from uamp_proto import envelope as wire
from uamp_proto.adapters.envelope import prefix_frame, read_error, split_frames
from uamp_proto.envelope import Body, ContextRef, Delta, DeltaType, Envelope, Intent
from uamp_proto.errors import RemoteProtocolError, UampError
from uamp_proto.flow import ReceiveWindow
from uamp_proto.jose import PrivateKey
from uamp_proto.signing import sign_envelope
from uamp_proto.sse import SSEParser

__all__ = [
    "CONTENT_TYPE",
    "EnvelopeClientError",
    "EnvelopeHTTPClient",
    "EnvelopeSigner",
    "EnvelopeWSClient",
    "Reply",
    "envelope_ws",
]

#: Spec 003's media type.
CONTENT_TYPE = "application/uamp+json;v=1"
#: Called with each delta frame as it arrives (``None``: nobody).
OnDelta = Callable[[Delta], object] | None
_FINAL = frozenset({DeltaType.DONE, DeltaType.CANCEL, DeltaType.ERROR})


@attrs.define(auto_exc=True)
class EnvelopeClientError(UampError):
    """The server refused an envelope or a frame, or its stream broke the rules.

    Attributes:
        code: The section 9 code (``"4.01"``...).
        message: The server's message.
        status: The HTTP status or WebSocket close code, when there was one.
        retry_after: Seconds to wait (5.04), else ``None``.
    """

    code: str
    message: str
    status: int | None = attrs.field(default=None, kw_only=True)
    retry_after: int | None = attrs.field(default=None, kw_only=True)


def _ts(now: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))


@attrs.define
class EnvelopeSigner:
    """Builds and signs this client's envelopes.

    Attributes:
        key: EC P-256 or Ed25519 private key.
        kid: Key id for the JWS header (a ``--trust-jwks`` peer's id).
        cap_token: Capability token put in every envelope (and sent as the
            stream requests' bearer token).
        sender: The ``from`` URI.
        embed_jwk: Put the public key in the signature header (what a
            server without authentication verifies with); default: when
            there is neither ``kid`` nor ``cap_token``.
    """

    key: PrivateKey
    kid: str | None = None
    cap_token: str | None = None
    sender: str = "urn:uamp:client"
    embed_jwk: bool | None = None

    @classmethod
    def ephemeral(cls) -> EnvelopeSigner:
        """A signer with a new Ed25519 key and no credential (integrity only)."""
        return cls(ed25519.Ed25519PrivateKey.generate())

    def make(
        self,
        intent: Intent | str,
        text: str = "",
        *,
        to: str,
        reply_to: str | None = None,
        window: int | None = None,
        context: Sequence[ContextRef] | None = None,
        body_type: str = "text/plain",
        now: float | None = None,
        stream_id: str | None = None,
        ext: dict[str, Any] | None = None,
    ) -> Envelope:
        """A signed envelope with a new ``id`` and the current ``ts``."""
        envelope = Envelope(
            id=f"urn:uuid:{uuid.uuid4()}",
            ts=_ts(time.time() if now is None else now),
            from_=self.sender,
            to=(to,),
            intent=intent,
            body=Body(type=body_type, content=text),
            reply_to=reply_to,
            delta_window=window,
            context=tuple(context) if context else None,
            cap_token=self.cap_token,
            stream_id=stream_id,
            ext=ext,
        )
        return self.sign(envelope)

    def sign(self, envelope: Envelope) -> Envelope:
        """``envelope`` signed with this key."""
        embed = self.embed_jwk
        if embed is None:
            embed = self.kid is None and self.cap_token is None
        return sign_envelope(envelope, self.key, self.kid, embed_jwk=embed)


@attrs.define
class Reply:
    """The delta frames of one exchange.

    Attributes:
        envelope: The envelope that opened it.
        deltas: Every frame, in ``delta_seq`` order.
        acks: The ``delta_seq`` values acknowledged, in order.
    """

    envelope: Envelope
    deltas: list[Delta] = attrs.field(factory=list)
    acks: list[int] = attrs.field(factory=list)

    @property
    def text(self) -> str:
        """The streamed text (the ``chunk`` frames' ``text`` joined)."""
        return "".join(
            str(d.payload.get("text", ""))
            for d in self.deltas
            if d.type is DeltaType.CHUNK and d.payload
        )

    @property
    def final(self) -> Delta | None:
        """The last frame (``done``, ``cancel`` or ``error``), if it arrived."""
        return self.deltas[-1] if self.deltas and self.deltas[-1].type in _FINAL else None

    def context(self) -> ContextRef:
        """The ``context`` item that continues this conversation."""
        return ContextRef(id=self.envelope.id, hash="sha256:" + wire.envelope_sha256(self.envelope))


def _error_from(data: bytes, status: int | None, retry_after: str | None) -> EnvelopeClientError:
    try:
        code, message, _ = read_error(wire.decode_envelope(data, require_sig=False))
    except wire.EnvelopeError:
        return EnvelopeClientError("4.00", data[:200].decode("utf-8", "replace"), status=status)
    retry = int(retry_after) if retry_after and retry_after.isdigit() else None
    return EnvelopeClientError(code, message, status=status, retry_after=retry)


def _ack(stream_id: str, seq: int) -> bytes:
    return wire.encode_delta(
        Delta(delta_seq=seq, stream_id=stream_id, ts=_ts(time.time()), type=DeltaType.PROGRESS)
    )


class _Acks:
    """The consumer's window of one stream: checks seqs, says when to ack."""

    def __init__(self, window: int, ack_every: int | None) -> None:
        self.window = ReceiveWindow(window, ack_every or max(1, window // 2))

    def receive(self, delta: Delta) -> int | None:
        try:
            due = self.window.receive(delta.stream_id, delta.delta_seq)
        except RemoteProtocolError as exc:
            raise EnvelopeClientError("4.09", exc.message) from None
        if delta.type in _FINAL:
            due = self.window.pending_ack(delta.stream_id)
        if due is not None:
            self.window.acknowledged(delta.stream_id, due)
        return due


class _Conversation:
    """What both clients share: building the envelopes of a conversation."""

    def __init__(self, signer: EnvelopeSigner, to: str) -> None:
        self.signer = signer
        self.to = to

    async def exchange(
        self, envelope: Envelope, *, ack_every: int | None = None, on_delta: OnDelta = None
    ) -> Reply:
        """Send an opening envelope and collect its frames (each also to ``on_delta``)."""
        raise NotImplementedError

    async def send_only(self, envelope: Envelope) -> None:
        """Send an envelope that opens no stream."""
        raise NotImplementedError

    async def ask(
        self,
        text: str,
        *,
        window: int | None = None,
        ack_every: int | None = None,
        context: Sequence[ContextRef] | None = None,
        intent: Intent | str = Intent.ASK,
        on_delta: OnDelta = None,
    ) -> Reply:
        """Send an ``ask`` and read its whole stream, acknowledging as it goes.

        Raises:
            EnvelopeClientError: The server refused it (or closed the socket).
        """
        envelope = self.signer.make(intent, text, to=self.to, window=window, context=context)
        return await self.exchange(envelope, ack_every=ack_every, on_delta=on_delta)

    async def reply(self, intent: Intent | str, to_envelope: Envelope) -> None:
        """Send ``confirm``/``cancel``/``deny``/``error`` for an exchange."""
        await self.send_only(self.signer.make(intent, to=self.to, reply_to=to_envelope.id))

    async def tell(
        self,
        intent: Intent | str,
        text: str,
        *,
        reply_to: Envelope | None = None,
        ext: dict[str, Any] | None = None,
    ) -> Envelope:
        """Send a one-way ``inform``/``notify``/``progress`` (about ``reply_to``'s exchange).

        A ``progress`` envelope acknowledges too: put the highest ``delta_seq``
        received in ``ext``.

        Returns:
            The envelope sent.
        """
        envelope = self.signer.make(
            intent, text, to=self.to, reply_to=None if reply_to is None else reply_to.id, ext=ext
        )
        await self.send_only(envelope)
        return envelope


class EnvelopeHTTPClient(_Conversation):
    """Spec 003 over HTTP: ``POST /v1/messages``, SSE streams, acks (see the module docstring).

    Args:
        base_url: The server (``http://host:port``) or an agent's prefix
            (``http://host:port/agents/NAME``).
        signer: Signs the envelopes.
        to: The ``to`` of the envelopes (``urn:uamp:agent:NAME``).
        http: An httpx client to use (default: a new one, closed with this).
    """

    def __init__(
        self,
        base_url: str,
        signer: EnvelopeSigner,
        *,
        to: str = "urn:uamp:agent:default",
        http: httpx.AsyncClient | None = None,
    ) -> None:
        super().__init__(signer, to)
        self.base_url = base_url.rstrip("/")
        self._own = http is None
        self.http = http or httpx.AsyncClient(timeout=httpx.Timeout(30.0))

    async def __aenter__(self) -> EnvelopeHTTPClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._own:
            await self.http.aclose()

    def _auth(self) -> dict[str, str]:
        token = self.signer.cap_token
        return {"authorization": f"Bearer {token}"} if token else {}

    def _origin(self) -> str:
        url = httpx.URL(self.base_url)
        return f"{url.scheme}://{url.netloc.decode()}"

    async def post(self, envelope: Envelope) -> httpx.Response:
        """POST one envelope; the ``202`` answer.

        Raises:
            EnvelopeClientError: The server refused it.
        """
        r = await self.http.post(
            self.base_url + "/v1/messages",
            content=wire.encode_envelope(envelope),
            headers={"content-type": CONTENT_TYPE},
        )
        if r.status_code != 202:
            raise _error_from(r.content, r.status_code, r.headers.get("retry-after"))
        return r

    async def send(self, envelope: Envelope) -> str:
        """POST one envelope; its exchange's stream URL (the ``Location``).

        Raises:
            EnvelopeClientError: The server refused it, or named no stream.
        """
        location: str | None = (await self.post(envelope)).headers.get("location")
        if location is None:
            raise EnvelopeClientError("4.00", "the server named no stream for this envelope")
        return self._origin() + location

    async def deltas(
        self, location: str, *, window: int, ack_every: int | None = None, reply: Reply
    ) -> AsyncIterator[Delta]:
        """The frames at ``location``, checked and acknowledged as they arrive."""
        acks = _Acks(window, ack_every)
        parser = SSEParser()
        async with self.http.stream("GET", location, headers=self._auth()) as r:
            if r.status_code != 200:
                raise _error_from(await r.aread(), r.status_code, r.headers.get("retry-after"))
            async for chunk in r.aiter_bytes():
                for event in parser.feed(chunk):
                    delta = wire.decode_delta(event.data)
                    due = acks.receive(delta)
                    yield delta
                    if due is not None:
                        await self.acknowledge(location, delta.stream_id, due)
                        reply.acks.append(due)

    async def acknowledge(self, location: str, stream_id: str, seq: int) -> None:
        """POST a ``progress`` ack for ``seq``."""
        r = await self.http.post(location, content=_ack(stream_id, seq), headers=self._auth())
        if r.status_code != 204:
            raise _error_from(r.content, r.status_code, r.headers.get("retry-after"))

    async def exchange(
        self, envelope: Envelope, *, ack_every: int | None = None, on_delta: OnDelta = None
    ) -> Reply:
        """Send an opening envelope and collect its frames, acknowledging as they come."""
        location = await self.send(envelope)
        reply = Reply(envelope)
        window = envelope.effective_delta_window
        async for delta in self.deltas(location, window=window, ack_every=ack_every, reply=reply):
            reply.deltas.append(delta)
            if on_delta is not None:
                on_delta(delta)
        return reply

    async def send_only(self, envelope: Envelope) -> None:
        """Send an envelope that opens no stream (``confirm``, ``cancel``, ``inform``...)."""
        await self.post(envelope)


class EnvelopeWSClient(_Conversation):
    """Spec 003 over the length-prefixed WebSocket; make one with :func:`envelope_ws`."""

    def __init__(
        self,
        ws: trio_websocket.WebSocketConnection,
        signer: EnvelopeSigner,
        *,
        to: str,
        max_size: int = wire.DEFAULT_MAX_SIZE,
    ) -> None:
        super().__init__(signer, to)
        self.ws = ws
        self.max_size = max_size
        self._streams: dict[str, trio.MemorySendChannel[Delta | EnvelopeClientError]] = {}
        self._errors: list[EnvelopeClientError] = []
        self._lock = trio.Lock()

    async def send_frame(self, data: bytes) -> None:
        """Send one length-prefixed frame as a binary message."""
        async with self._lock:
            await self.ws.send_message(prefix_frame(data))

    async def _reader(self) -> None:
        try:
            while True:
                message = await self.ws.get_message()
                if isinstance(message, str):
                    continue
                for frame in split_frames(message, self.max_size):
                    await self._route(frame)
        except trio_websocket.ConnectionClosed as closed:
            code = closed.reason.code if closed.reason is not None else 1006
            why = closed.reason.reason if closed.reason is not None else None
            failure = EnvelopeClientError(
                str(why or "closed"), f"the server closed the socket ({code})", status=code
            )
            for channel in list(self._streams.values()):
                channel.send_nowait(failure)

    async def _route(self, frame: bytes) -> None:
        probe: Any = orjson.loads(frame)
        if isinstance(probe, dict) and "intent" in probe:
            error = _error_from(frame, None, None)
            self._errors.append(error)
            reply_to = probe.get("reply_to")
            target = self._streams.get(reply_to) if isinstance(reply_to, str) else None
            if target is not None:
                await target.send(error)
            return
        delta = wire.decode_delta(frame)
        channel = self._streams.get(delta.stream_id)
        if channel is not None:
            await channel.send(delta)

    @property
    def errors(self) -> list[EnvelopeClientError]:
        """Error envelopes received so far (also those no exchange was waiting for)."""
        return list(self._errors)

    async def exchange(
        self, envelope: Envelope, *, ack_every: int | None = None, on_delta: OnDelta = None
    ) -> Reply:
        """Send an opening envelope and collect its frames (each also to ``on_delta``)."""
        stream_id = envelope.stream_id or envelope.id
        send, receive = trio.open_memory_channel[Delta | EnvelopeClientError](
            envelope.effective_delta_window + 2
        )
        self._streams[stream_id] = send
        self._streams[envelope.id] = send
        reply = Reply(envelope)
        acks = _Acks(envelope.effective_delta_window, ack_every)
        try:
            await self.send_frame(wire.encode_envelope(envelope))
            async for item in receive:
                if isinstance(item, EnvelopeClientError):
                    raise item
                due = acks.receive(item)
                reply.deltas.append(item)
                if on_delta is not None:
                    on_delta(item)
                if due is not None:
                    await self.send_frame(_ack(stream_id, due))
                    reply.acks.append(due)
                if item.type in _FINAL:
                    return reply
        finally:
            self._streams.pop(stream_id, None)
            self._streams.pop(envelope.id, None)
        return reply

    async def send_only(self, envelope: Envelope) -> None:
        """Send an envelope that opens no stream (``confirm``, ``cancel``...)."""
        await self.send_frame(wire.encode_envelope(envelope))


@asynccontextmanager
async def envelope_ws(
    url: str,
    signer: EnvelopeSigner,
    *,
    to: str = "urn:uamp:agent:default",
    max_size: int = wire.DEFAULT_MAX_SIZE,
) -> AsyncIterator[EnvelopeWSClient]:
    """Open ``ws://.../uamp/1/ws`` and yield a client (its reader runs meanwhile).

    A refused upgrade raises trio-websocket's ``HandshakeError`` as it is.
    """
    async with (
        trio_websocket.open_websocket_url(
            url, message_queue_size=64, max_message_size=max_size + 64
        ) as ws,
        trio.open_nursery() as nursery,
    ):
        client = EnvelopeWSClient(ws, signer, to=to, max_size=max_size)
        nursery.start_soon(client._reader)
        try:
            yield client
        finally:
            nursery.cancel_scope.cancel()
