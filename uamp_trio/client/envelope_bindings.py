"""Spec 003 clients for the HTTP/3 and gRPC bindings, beside those of :mod:`.envelope`.

::

    signer = EnvelopeSigner.ephemeral()
    async with envelope_h3("https://127.0.0.1:8765", signer, verify="ca.pem") as client:
        reply = await client.ask("Hello", window=8)
    async with envelope_grpc("https://127.0.0.1:8765", signer, verify="ca.pem") as client:
        reply = await client.ask("Hello", window=8)

Both are the same conversation as the HTTP and WebSocket clients (``ask``,
``reply``, ``exchange``; signing, delta windows and acknowledgements from
:mod:`uamp_trio.client.envelope`):

* :func:`envelope_h3` is :class:`~uamp_trio.client.envelope.EnvelopeHTTPClient`
  with an httpx client whose transport is HTTP/3
  (:mod:`uamp_trio.client.h3`): ``POST /v1/messages``, the SSE stream and
  the acks each go on a QUIC stream of one connection.
* :class:`EnvelopeGrpcClient` (:func:`envelope_grpc`) holds one
  ``uamp.v1.Agent/Session`` call (:mod:`uamp_trio.grpc.client`): envelopes
  and ``progress`` acks go out on it, and a reader task routes the delta
  frames coming back to each exchange by ``stream_id``. A refusal arrives as
  an ``error`` frame carrying the code (the call then ends for 4.01, 4.03
  and 4.13) and is raised as :class:`~uamp_trio.client.envelope.EnvelopeClientError`.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import orjson
import trio
import trio_websocket

from uamp_proto.envelope import Delta, DeltaType

from ..engines.tasks import background
from ..grpc.client import Call, open_channel
from ..grpc.protos.uamp.v1 import agent_pb2
from .envelope import EnvelopeClientError, EnvelopeHTTPClient, EnvelopeSigner, EnvelopeWSClient
from .h3 import open_h3

__all__ = ["EnvelopeGrpcClient", "envelope_grpc", "envelope_h3", "envelope_wss", "from_message"]

#: The gRPC method every exchange of :class:`EnvelopeGrpcClient` goes over.
SESSION = "/uamp.v1.Agent/Session"


def from_message(message: Any) -> Delta:
    """A ``uamp.v1.Delta`` message as the core's delta frame."""
    payload = orjson.loads(message.payload) if message.payload else None
    return Delta(
        delta_seq=message.delta_seq,
        stream_id=message.stream_id,
        ts=message.ts,
        type=DeltaType(message.type),
        payload=payload,
    )


def _refusal(delta: Delta) -> EnvelopeClientError | None:
    """The refusal an ``error`` frame of the binding reports, if it is one (not an agent's)."""
    payload = delta.payload or {}
    if delta.type is not DeltaType.ERROR or "envelope" not in payload:
        return None
    return EnvelopeClientError(str(payload.get("code", "4.00")), str(payload.get("message", "")))


@asynccontextmanager
async def envelope_h3(
    base_url: str,
    signer: EnvelopeSigner,
    *,
    to: str = "urn:uamp:agent:default",
    verify: bool | str = True,
) -> AsyncIterator[EnvelopeHTTPClient]:
    """The HTTP binding over HTTP/3 to ``base_url`` (``https://host:port[/agents/NAME]``)."""
    async with open_h3(base_url, verify=verify) as h3:
        http = httpx.AsyncClient(transport=h3.transport(), timeout=httpx.Timeout(30.0))
        async with http, EnvelopeHTTPClient(base_url, signer, to=to, http=http) as client:
            yield client


@asynccontextmanager
async def envelope_wss(
    url: str,
    signer: EnvelopeSigner,
    *,
    to: str = "urn:uamp:agent:default",
    ssl_context: ssl.SSLContext | None = None,
) -> AsyncIterator[EnvelopeWSClient]:
    """The length-prefixed WebSocket over TLS (``wss://.../uamp/1/ws``) with ``ssl_context``."""
    async with background() as nursery:
        ws = await trio_websocket.connect_websocket_url(nursery, url, ssl_context=ssl_context)
        client = EnvelopeWSClient(ws, signer, to=to)
        nursery.start_soon(client._reader)
        try:
            yield client
        finally:
            await ws.aclose()


class EnvelopeGrpcClient(EnvelopeWSClient):
    """Spec 003 over gRPC (``uamp.v1.Agent/Session``); make one with :func:`envelope_grpc`.

    The session is a duplex stream of frames routed by ``stream_id``, as the
    length-prefixed WebSocket is: the WebSocket client's exchanges, windows
    and acks are used as they are, with each frame carried in an
    ``Envelope`` message instead of a length prefix.
    """

    def __init__(self, call: Call, signer: EnvelopeSigner, *, to: str) -> None:
        super().__init__(None, signer, to=to)  # type: ignore[arg-type]  # no WebSocket
        self.call = call

    async def send_frame(self, data: bytes) -> None:
        """Send one envelope or ack frame on the call."""
        async with self._lock:
            await self.call.send(agent_pb2.Envelope(json=data))

    async def _reader(self) -> None:
        async for message in self.call:
            delta = from_message(message)
            refused = _refusal(delta)
            if refused is not None:
                self._errors.append(refused)
            target = self._streams.get(delta.stream_id)
            if target is not None:
                await target.send(refused or delta)
        await self.call.ended.wait()
        code, text = self.call.status or (None, "")
        failure = EnvelopeClientError(
            self.call.trailers.get("uamp-error-code", "closed"),
            f"the call ended: {code.name if code is not None else '?'} {text}".strip(),
        )
        for channel in list(self._streams.values()):
            channel.send_nowait(failure)


@asynccontextmanager
async def envelope_grpc(
    url: str,
    signer: EnvelopeSigner,
    *,
    to: str = "urn:uamp:agent:default",
    agent: str | None = None,
    verify: bool | str | ssl.SSLContext = True,
) -> AsyncIterator[EnvelopeGrpcClient]:
    """Open a ``Session`` call to ``url`` (``http://`` or ``https://host:port``); yield a client.

    ``agent`` goes in the ``uamp-agent`` metadata (default: the agent ``to`` names).
    """
    metadata = [("uamp-agent", agent)] if agent else []
    async with (
        open_channel(url, verify=verify) as channel,
        channel.call(SESSION, agent_pb2.Delta, metadata=metadata) as call,
        background() as nursery,
    ):
        client = EnvelopeGrpcClient(call, signer, to=to)
        nursery.start_soon(client._reader)
        try:
            yield client
        finally:
            with trio.move_on_after(1, shield=True):
                await call.done_sending()
