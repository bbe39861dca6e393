"""Spec 003's HTTP and WebSocket bindings, around the envelope service.

Routes, for every hosted agent under ``/agents/{agent}`` and at the root
(the only or default agent):

* ``POST /v1/messages``: one envelope (``application/uamp+json;v=1``). The
  declared ``Content-Length`` is checked against the service's ``max_size``
  before the body is decoded (4.13). An accepted envelope is answered
  ``202 Accepted`` with ``Location: [/agents/NAME]/v1/stream/{id}`` and a
  small JSON body ``{"id", "stream_id", "state"}``.
* ``GET /v1/stream/{id}``: the exchange's delta frames as server-sent
  events, ``id:`` = ``delta_seq`` (``Last-Event-ID`` resumes after it),
  ``data:`` = the frame's JSON (Appendix A.2); the response ends after the
  final frame. Over HTTP/3 each frame's ``stream_id`` is the QUIC stream id
  of this GET, in decimal (section 7: "QUIC stream-ID == stream_id"). The
  producer honours the ask's ``delta_window``, so a consumer must
  acknowledge:
* ``POST /v1/stream/{id}``: body = a ``progress`` delta frame with the
  highest contiguous ``delta_seq`` received; ``204``. A ``progress``
  *envelope* posted to ``/v1/messages`` (``reply_to`` = the exchange,
  ``delta_seq`` in ``ext`` or a JSON body) acknowledges too (spec 003
  section 5 "ACK via progress", with only the two section 7 endpoints).
* ``GET [/agents/NAME]/.well-known/agent-manifest.json``: the agent's
  manifest (section 8, Appendix A.3) as a JWS signed with the envelope key
  (``application/manifest+jws``); at the root, the default (first hosted)
  agent's. ``GET /.well-known/agent-hub.json``: every agent's name, manifest
  URL and signed manifest, and the trust anchors (the envelope key's JWKS,
  also in ``/.well-known/jwks.json``). Both are public.
* ``GET /uamp/1/ws`` (WebSocket, binary messages): each frame is a 4-byte
  big-endian length and that many bytes of JSON; an object with ``intent``
  is an envelope, any other a delta frame (an ack). The server sends the
  delta frames of every exchange opened on the socket, interleaved (told
  apart by ``stream_id``), and error envelopes; after a 4.01, 4.03 or 4.13
  error it closes the socket with 4401, 4403 or 4413 (a WebSocket message
  over the server's message limit too: the 4.13 frame, then 4413). Exchanges still
  running when the socket closes are cancelled.

With authentication configured, the stream endpoints present the capability
token as ``Authorization: Bearer``; an exchange of another caller answers
as one that does not exist (4.04). Every refusal is a signed ``error``
envelope (``body.content`` = ``{"code", "message", "retry"}``) with the
code's status (401/403/404/409/413/503, ``Retry-After`` on 503). See
docs/envelope.md.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable

import attrs
import orjson
import trio

from uamp_proto import manifest as discovery
from uamp_proto.adapters import envelope as wire
from uamp_proto.adapters.envelope import BAD_REQUEST, NOT_FOUND, EnvelopeRefused, prefix_frame
from uamp_proto.envelope import (
    PAYLOAD_TOO_LARGE,
    Envelope,
    EnvelopeError,
    encode_delta,
    encode_envelope,
    parse_json,
)
from uamp_proto.principal import ANONYMOUS, Principal
from uamp_proto.responder import Responder
from uamp_proto.sse import encode_json

from ..engines.http import HTTPError, Request, Response, SendChunk, StreamingResponse
from ..engines.websocket import ConnectionClosed, WebSocket, WebSocketRequest
from ..envelope import service as envelope_service
from ..envelope.service import EnvelopeService, Exchange, RemoteExchange
from ..hosting.agents import unwrapped
from ..hosting.host import Host
from ..hosting.router import AGENT_PREFIX, RouteMeta
from ..trust.auth import bearer_token

__all__ = ["CONTENT_TYPE", "ROUTES", "EnvelopeBindings", "error_response", "mount"]

log = logging.getLogger("uamp_trio.envelope")

#: Spec 003's media type (section 11), with the version parameter.
CONTENT_TYPE = "application/uamp+json;v=1"
#: What middleware knows of these routes (TLS 1.3 only over TLS: spec 003 section 6.1).
ROUTES = RouteMeta(transport="envelope", error_style="envelope", envelope=True, tls13=True)
#: The discovery documents: public (section 8: anyone may discover an agent).
DISCOVERY = RouteMeta(
    transport="envelope", error_style="envelope", public=True, envelope=True, tls13=True
)

_ACCEPTED_TYPES = ("application/uamp+json", "application/json")
_SSE_HEADERS = [
    ("content-type", "text/event-stream; charset=utf-8"),
    ("cache-control", "no-cache"),
    ("x-accel-buffering", "no"),
]


def error_response(
    service: EnvelopeService,
    refused: EnvelopeRefused,
    *,
    agent: str | None = None,
    reply_to: str | None = None,
) -> Response:
    """The HTTP answer to ``refused``: its status and the signed error envelope."""
    envelope = service.error_envelope(refused, agent=agent, reply_to=reply_to)
    headers = [("content-type", CONTENT_TYPE)]
    if refused.retry_after is not None:
        headers.append(("retry-after", str(refused.retry_after)))
    return Response(
        status=envelope_service.http_status(refused.code),
        headers=headers,
        body=encode_envelope(envelope),
    )


def _prefix(request: Request) -> str:
    agent = request.path_params.get("agent")
    root = request.root_path  # uamp serve --root-path
    return root if agent is None else root + AGENT_PREFIX.replace("{agent}", agent)


class EnvelopeBindings:
    """The HTTP and WebSocket endpoints of the envelope service of ``app``."""

    def __init__(self, app: Host, service: EnvelopeService) -> None:
        self.app = app
        self.service = service

    def mount(self) -> None:
        """Register the routes."""
        app = self.app
        # The declared Content-Length of a POST over the envelope limit is
        # refused (4.13) from the head, before any of the body is read.
        posts = attrs.evolve(ROUTES, max_body=self.service.limits.max_size)
        app.agent_route("POST", "/v1/messages", self.messages, label="Envelopes", meta=posts)
        app.agent_route("GET", "/v1/stream/{id}", self.stream, meta=ROUTES)
        app.agent_route("POST", "/v1/stream/{id}", self.ack, meta=posts)
        app.agent_websocket("/uamp/1/ws", self.websocket, label="Envelopes (WS)", meta=ROUTES)
        app.agent_route(
            "GET", discovery.MANIFEST_PATH, self.manifest, label="Manifest", meta=DISCOVERY
        )
        app.router.add("GET", discovery.HUB_PATH, self.hub, label="Agent hub", meta=DISCOVERY)

    # --- discovery (section 8) --------------------------------------------------------

    def signed_manifest(self, agent: Responder) -> str:
        """``agent``'s manifest, signed with the envelope key."""
        service = self.service
        description = getattr(unwrapped(agent), "description", None)
        manifest = discovery.build_manifest(
            description=description if isinstance(description, str) else f"uamp agent {agent.name}",
            intents=envelope_service.SERVED_INTENTS,
            body_types=wire.BODY_TYPES,
            auth=(
                *(("oauth2",) if service.trust.required else ()),
                *(("mtls",) if service.mutual_tls else ()),
            ),
            max_body_kb=max(1, service.limits.max_size // 1024),
        )
        return discovery.sign_manifest(manifest, service.key.key, service.key.kid)

    def _default_agent(self, request: Request) -> Responder:
        name = request.path_params.get("agent")
        if name is not None:
            return self.app.resolve_agent(request.path_params)
        if not self.app.agents:
            raise HTTPError(404, "This server hosts no agent.", code="agent_not_found")
        return next(iter(self.app.agents.values()))  # the first hosted is the default

    async def manifest(self, request: Request) -> Response:
        """``GET [/agents/{name}]/.well-known/agent-manifest.json``: the signed manifest."""
        jws = self.signed_manifest(self._default_agent(request))
        return Response(
            headers=[("content-type", discovery.MANIFEST_MEDIA_TYPE)], body=jws.encode()
        )

    async def hub(self, request: Request) -> Response:
        """``GET /.well-known/agent-hub.json``: every agent's manifest and the trust anchors.

        Every hosted agent is listed, those of daemons connected through the
        relay too (``kind: "connected"``, ``state`` online or offline); each
        entry names the trust anchors its ``manifest_jws`` verifies with.
        """
        from ..relay.platform import RemoteAgent  # a relay's daemons' agents are hosted ones

        agents = self.app.agents
        anchors = self.service.key.jwks().to_dict()
        entries = [
            {
                "name": name,
                "manifest": request.root_path
                + AGENT_PREFIX.replace("{agent}", name)
                + discovery.MANIFEST_PATH,
                "manifest_jws": self.signed_manifest(agent),
                "kind": "connected" if isinstance(unwrapped(agent), RemoteAgent) else "local",
                "state": "offline" if name in agents.offline else "online",
                "trust_anchors": anchors,
            }
            for name, agent in agents.items()
        ]
        document = {"hub": discovery.PROTOCOL, "agents": entries, "trust_anchors": anchors}
        return Response(headers=[("content-type", "application/json")], body=orjson.dumps(document))

    # --- HTTP ---------------------------------------------------------------------

    async def messages(self, request: Request) -> Response:
        """``POST /v1/messages``: take one envelope."""
        service = self.service
        name = request.path_params.get("agent")
        reply_to: str | None = None
        try:
            declared = request.headers.get("content-length")
            if declared is not None and declared.strip().isdigit():
                service.check_size(int(declared))
            media = (request.headers.get("content-type") or "").split(";", 1)[0].strip().lower()
            if media not in _ACCEPTED_TYPES:
                raise EnvelopeRefused(
                    BAD_REQUEST, f"send the envelope as {CONTENT_TYPE}, not {media or 'nothing'!r}"
                )
            envelope = service.decode(request.body)
            reply_to = envelope.id
            agent = service.resolve(name, envelope)
            name = agent.name
            submitted = await service.submit(agent, envelope)
        except EnvelopeRefused as refused:
            return error_response(service, refused, agent=name, reply_to=reply_to)
        exchange = submitted.exchange or submitted.remote
        headers = [("content-type", "application/json")]
        if exchange is None:  # one-way, kept for the caller's next exchange: no stream
            answer = {"id": envelope.id, "state": submitted.state.value}
        else:
            answer = {
                "id": exchange.id,
                "stream_id": exchange.stream_id,
                "state": exchange.state.value,
            }
            headers.append(("location", _prefix(request) + f"/v1/stream/{exchange.id}"))
        return Response(status=202, headers=headers, body=orjson.dumps(answer))

    async def _caller(
        self, request: Request
    ) -> tuple[Principal, Exchange | RemoteExchange, list[str]]:
        """Who asks, and the exchange: here, or run by another process (a shared store)."""
        service = self.service
        name = request.path_params.get("agent")
        names = [service.resolve(name).name] if name is not None else list(self.app.agents)
        token = bearer_token(request.headers.get("authorization"))
        audiences = [aud for each in names for aud in service.audiences(each)]
        principal = await service.trust.bearer(token, audiences)
        try:
            exchange = service.find(request.path_params["id"], principal)
        except EnvelopeRefused:
            remote = await service.remote(request.path_params["id"], principal)
            if remote is None:
                raise
            return principal, remote, names
        if exchange.agent not in names:
            raise EnvelopeRefused(NOT_FOUND, f"no exchange {exchange.id!r}")
        return principal, exchange, names

    async def stream(self, request: Request) -> Response | StreamingResponse:
        """``GET /v1/stream/{id}``: the exchange's delta frames as SSE."""
        try:
            _, exchange, names = await self._caller(request)
        except EnvelopeRefused as refused:
            return error_response(self.service, refused, agent=request.path_params.get("agent"))
        after = -1
        last = request.headers.get("last-event-id")
        if last is not None and last.strip().isdigit():
            after = int(last)
        # HTTP/3: the frames are named by the QUIC stream that carries them
        # (spec 003 section 7), which an ack may then name too.
        quic = None if request.stream_id is None else str(request.stream_id)
        if isinstance(exchange, RemoteExchange):
            return StreamingResponse(
                producer=_relayed(exchange, after, names, quic), headers=list(_SSE_HEADERS)
            )
        if quic is not None:
            exchange.alias(quic)

        async def produce(send: SendChunk) -> None:
            async for batch in exchange.batches(after):
                await send(
                    b"".join(
                        [
                            encode_json(encode_delta(d, stream_id=quic), id=d.delta_seq)
                            for d in batch
                        ]
                    )
                )

        return StreamingResponse(producer=produce, headers=list(_SSE_HEADERS))

    async def ack(self, request: Request) -> Response:
        """``POST /v1/stream/{id}``: a ``progress`` ack frame; ``204``."""
        try:
            principal, exchange, names = await self._caller(request)
            self.service.check_size(len(request.body))
            if isinstance(exchange, RemoteExchange):
                await exchange.acknowledge(request.body, names)
            else:
                self.service.acknowledge(exchange, request.body, principal)
        except EnvelopeRefused as refused:
            return error_response(self.service, refused, agent=request.path_params.get("agent"))
        return Response(status=204)

    # --- WebSocket --------------------------------------------------------------------

    async def websocket(self, pending: WebSocketRequest) -> None:
        """``/uamp/1/ws``: length-prefixed envelopes and deltas both ways."""
        name = pending.request.path_params.get("agent")
        try:
            self.service.resolve(name)
        except EnvelopeRefused as refused:
            reply = error_response(self.service, refused, agent=name)
            await pending.reject(reply.status, reply.body, reply.headers)
            return
        ws = await pending.accept()
        ws.too_big_reply = functools.partial(self._too_big, name)
        async with trio.open_nursery() as nursery:
            await _WsPeer(self.service, ws, name, nursery).run()
            nursery.cancel_scope.cancel()

    def _too_big(self, agent: str | None, size: int) -> tuple[bytes, int, str]:
        """A message over the socket's limit: the 4.13 error frame, then close 4413."""
        refused = EnvelopeRefused(
            PAYLOAD_TOO_LARGE, f"a message of {size}+ bytes is over this socket's limit"
        )
        error = self.service.error_envelope(refused, agent=agent)
        code = envelope_service.close_code(refused.code)
        assert code is not None
        return prefix_frame(encode_envelope(error)), code, refused.code


def _relayed(
    exchange: RemoteExchange, after: int, names: list[str], alias: str | None
) -> Callable[[SendChunk], Awaitable[None]]:
    """The SSE producer of an exchange another process runs (its frames, relayed)."""

    async def produce(send: SendChunk) -> None:
        try:
            async for batch in exchange.frames(after, names, alias):
                await send(b"".join([encode_json(frame, id=seq) for seq, frame in batch]))
        except EnvelopeRefused as refused:  # the owner forgot it or went away: the stream ends
            log.info("relayed stream ended: %s", refused)

    return produce


class _WsPeer:
    """One WebSocket connection: reads frames, writes every exchange's deltas."""

    def __init__(
        self, service: EnvelopeService, ws: WebSocket, agent: str | None, nursery: trio.Nursery
    ) -> None:
        self.service = service
        self.ws = ws
        self.agent = agent
        self.nursery = nursery
        self.exchanges: dict[str, Exchange] = {}  # by stream_id
        #: The id of the envelope being handled (the error's ``reply_to``).
        self.reply_to: str | None = None

    async def send(self, data: bytes) -> None:
        await self.ws.send(prefix_frame(data))

    async def run(self) -> None:
        """Read frames until the peer leaves or a refusal closes the socket."""
        service = self.service
        while True:
            try:
                message = await self.ws.receive()
            except ConnectionClosed:
                return
            self.reply_to = None
            try:
                if isinstance(message, str):
                    raise EnvelopeRefused(BAD_REQUEST, "send binary, length-prefixed frames")
                for frame in wire.split_frames(message, service.limits.max_size):
                    await self._frame(frame)
            except EnvelopeRefused as refused:
                error = service.error_envelope(refused, agent=self.agent, reply_to=self.reply_to)
                code = envelope_service.close_code(refused.code)
                with contextlib.suppress(ConnectionClosed):
                    await self.send(encode_envelope(error))
                    if code is not None:
                        await self.ws.close(code, refused.code)
                if code is not None:
                    return

    async def _frame(self, frame: bytes) -> None:
        service = self.service
        try:
            probe = parse_json(frame)
        except EnvelopeError as exc:
            if exc.error_code is None:
                raise EnvelopeRefused(BAD_REQUEST, "a frame is not JSON") from None
            raise EnvelopeRefused(exc.error_code, exc.reason) from None
        if isinstance(probe, dict) and "intent" in probe:
            envelope = service.decode(frame)
            self.reply_to = envelope.id
            await self._envelope(envelope)
            return
        stream_id = probe.get("stream_id") if isinstance(probe, dict) else None
        exchange = self.exchanges.get(stream_id) if isinstance(stream_id, str) else None
        if exchange is None:
            raise EnvelopeRefused(NOT_FOUND, f"no stream {stream_id!r} on this socket")
        service.acknowledge(exchange, frame, ANONYMOUS)

    async def _envelope(self, envelope: Envelope) -> None:
        service = self.service
        agent = service.resolve(self.agent, envelope)
        submitted = await service.submit(agent, envelope, nursery=self.nursery)
        exchange = submitted.exchange
        if submitted.opened and exchange is not None:
            self.exchanges[exchange.stream_id] = exchange
            self.nursery.start_soon(self._forward, exchange)

    async def _forward(self, exchange: Exchange) -> None:
        try:
            async for batch in exchange.batches():
                await self.ws.send(b"".join([prefix_frame(encode_delta(d)) for d in batch]))
        except ConnectionClosed:
            pass  # the reader sees it too and ends the connection
        finally:
            self.exchanges.pop(exchange.stream_id, None)
            runner = exchange.runner
            if runner is not None and not exchange.finished:
                runner.cancel()


def mount(app: Host) -> None:
    """Mount the spec 003 HTTP and WebSocket bindings (a :data:`Transport`).

    The envelope service is the host's (the root creates it:
    ``app.envelopes``); a host without one mounts nothing.
    """
    service = app.envelopes
    if service is not None:
        EnvelopeBindings(app, service).mount()
