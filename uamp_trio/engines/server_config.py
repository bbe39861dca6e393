"""The settings of one server (:class:`ServerConfig`), checked when made.

Every limit is in bytes and every timeout in seconds; ``uamp serve``'s flags
(:mod:`uamp_trio.cli.flags`) and ``uamp_trio.serve(...)`` 's keywords are
its fields. :class:`~uamp_trio.engines.server.Server` reads them; the app
reads those its transports need once, when the server starts.
"""

from __future__ import annotations

import ssl
from typing import Final

import attrs

from uamp_proto import jsonbounds
from uamp_proto.busy import BusyError, parse_policy
from uamp_proto.history import MAX_OWNER_HISTORY_BYTES
from uamp_proto.response import MAX_OUTPUT_BYTES

from .cors import CorsPolicy

__all__ = ["TLS_VERSIONS", "ServerConfig"]


@attrs.frozen(kw_only=True)
class ServerConfig:
    """Server options (all limits in bytes, all timeouts in seconds).

    Attributes:
        host: Address to bind.
        port: Port to bind; 0 picks a free one.
        uds: A Unix domain socket path to serve on instead of ``host``/``port``
            (:mod:`~uamp_trio.engines.unix`).
        certfile: PEM certificate chain; with ``keyfile`` enables TLS + ALPN.
        keyfile: PEM private key.
        max_body_size: Largest request body accepted; larger gets 413.
        max_header_size: Largest request head (HTTP/1.1) / header list (HTTP/2).
        idle_timeout: How long a keep-alive connection may sit idle.
        header_timeout: Time from a request's first byte (or TLS start) to
            its complete head.
        body_timeout: Time to receive a whole request body.
        shutdown_grace: How long graceful shutdown waits for in-flight work.
        h2_max_concurrent_streams: SETTINGS_MAX_CONCURRENT_STREAMS we announce
            and enforce (a stream over it is refused with REFUSED_STREAM).
        h2_max_resets: Stream resets (the peer's RST_STREAM frames plus streams
            refused) an HTTP/2 connection may cause per ``h2_flood_window``;
            past it GOAWAY ENHANCE_YOUR_CALM (rapid reset, CVE-2023-44487).
        h2_max_control_frames: SETTINGS and PING frames per ``h2_flood_window``.
        h2_flood_window: The window of the two limits above, in seconds.
        websocket_max_message_size: Largest WebSocket message assembled.
        websocket_send_timeout: Longest a WebSocket write may wait for a peer
            that does not read (a full send buffer); the connection is then
            dropped, so a stalled peer holds no more than its buffers.
        max_connections: Most connections served at once (``uamp serve
            --limit-concurrency``); ``None``: no limit. A connection over it
            is still accepted and answered ``503`` (HTTP/1.1) or ``GOAWAY``
            (HTTP/2), then closed, as uvicorn's ``--limit-concurrency`` does:
            a client learns at once that the server is busy instead of
            hanging in the kernel's accept queue, and health checks get an
            answer.
        max_buffered_body: Request body bytes buffered across all connections
            while they are being received; a request whose body would go
            over it is answered ``503`` in its route's error style (and the
            connection closed), so slow uploads cannot fill memory.
        response_timeout: Longest a streamed response may last in total;
            then it is ended (HTTP/1.1: the connection is closed without the
            last chunk; HTTP/2: the stream is reset). ``math.inf``: no limit.
        response_idle_timeout: Longest a streamed response may go without
            writing anything (a producer that hangs, or a peer that does not
            read); ended the same way.
        response_head_timeout: Longest a handler may take to return its
            response once the request is read; then it is cancelled and the
            request answered ``504`` in its route's error style, and the
            connection goes on (HTTP/1.1 keep-alive, the other HTTP/2
            streams). A streamed response counts as returned: its producer
            is under the two timeouts above.
        max_queued_events: Encoded UAMP events queued for one connection's
            writer (one WebSocket, one HTTP+SSE session) before the
            producers wait (a peer that does not read stops the agent).
        max_session_queued_events: Of those, the most one session may hold,
            so one busy session cannot take a multiplexed connection's whole
            queue.
        max_json_values: Most values (array elements and object members) a
            JSON body or message may hold; one with more is refused before
            it is parsed, in its protocol's error format
            (:mod:`uamp_proto.jsonbounds`), so that no document can hold the
            event loop for long.
        http3: Also serve HTTP/3 over QUIC on UDP, on the same port number
            as TCP (needs ``certfile``), and advertise it on TCP responses
            with ``Alt-Svc: h3=":PORT"``.
        tls_min: The oldest TLS version accepted with a certificate:
            ``"1.3"`` (spec 003 section 6.1: TLS 1.3 only) or ``"1.2"``
            (older clients may connect; the routes of spec 003's bindings
            still refuse a connection that is not TLS 1.3).
        client_ca: PEM file of the CAs whose client certificates are
            accepted: every TLS client must present one (mutual TLS), over
            HTTP/3 too (:mod:`~uamp_trio.engines.quic_mtls`).
        allowed_origins: Origins whose browser pages may call every HTTP
            route (CORS, :mod:`~uamp_trio.engines.cors`): ``scheme://host[:port]``
            or ``*``. Empty (the default): CORS is off.
        allowed_methods: Methods a preflight may ask for (empty: the usual ones).
        allowed_headers: Request headers a preflight may ask for (empty: any).
        allow_credentials: Let those pages send cookies and HTTP auth.
        acp_max_sessions: ACP sessions one principal may hold (every
            carrier: stdio, WebSocket, HTTP); one more ``session/new`` gets
            JSON-RPC ``-32029`` until one expires.
        acp_max_session_bytes: Largest ``cwd`` plus ``mcpServers`` (as JSON)
            an ACP session may keep; a larger ``session/new`` or
            ``session/load`` gets ``-32602`` naming the field.
        acp_session_idle_timeout: An ACP session with no request for this
            long (and no prompt running) is forgotten.
        a2a_max_push_configs: Push-notification configs one A2A task may
            hold; one more gets ``-32029`` / HTTP 429 / ``RESOURCE_EXHAUSTED``.
        a2a_max_push_config_bytes: Largest push-notification config (as
            JSON); a larger one gets ``-32602`` / 400 / ``INVALID_ARGUMENT``.
        sse_max_sessions: UAMP HTTP+SSE sessions one principal may hold; one
            more ``session.create`` gets 429 ``too_many_sessions``.
        sse_session_idle_timeout: An HTTP+SSE session with no stream attached
            and no POST for this long expires.
        chat_max_message_bytes: The longest text (UTF-8 bytes) of a message
            posted in a chat room; longer is ``session.error`` ``invalid_request``.
        chat_room_messages: Messages a chat room keeps (the oldest go first).
        chat_principal_messages: Chat messages one principal may post per
            minute in all rooms; past it ``session.error`` ``rate_limited``.
        chat_room_idle_timeout: A chat room with nobody in it and no message
            for this long is deleted, its messages with it.
        on_busy: What a message for a conversation whose run is active does
            (docs/busy.md): ``reject``, ``enqueue``, ``interrupt`` or ``rollback``.
        busy_max_queued: Messages one conversation may hold waiting; more
            are refused with the protocol's busy error (``queue_full``).
        busy_max_queued_per_principal: Messages one principal may hold
            waiting over all its conversations.
        max_response_output_bytes: Most output one response keeps, on every
            transport (its text, arguments, thinking, audio...): past it the
            agent is stopped and the response ends with the protocol's error
            (UAMP ``response.error`` ``output_too_large``; docs/security.md).
        max_history_bytes_per_principal: Bytes all of one principal's live
            UAMP sessions (WebSocket and HTTP+SSE, every connection of the
            app) keep of their conversations, about their JSON size; past
            it, its least recently used sessions start afresh
            (:class:`uamp_proto.history.SessionHistories`). Read once, when
            the server starts: the app's one budget is built with it, so no
            connection's settings change another's. A session alone keeps at
            most the core's bound or this, the lesser.
    """

    host: str = "127.0.0.1"
    port: int = 8765
    uds: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    max_body_size: int = 4 * 1024 * 1024
    max_header_size: int = 64 * 1024
    idle_timeout: float = 60.0
    header_timeout: float = 10.0
    body_timeout: float = 60.0
    shutdown_grace: float = 10.0
    h2_max_concurrent_streams: int = 100
    h2_max_resets: int = 100
    h2_max_control_frames: int = 100
    h2_flood_window: float = 10.0
    websocket_max_message_size: int = 4 * 1024 * 1024
    websocket_send_timeout: float = 30.0
    max_connections: int | None = None
    max_buffered_body: int = 16 * 1024 * 1024
    response_timeout: float = 3600.0
    response_idle_timeout: float = 300.0
    response_head_timeout: float = 300.0
    max_queued_events: int = 64
    max_session_queued_events: int = 32
    max_json_values: int = jsonbounds.DEFAULT_MAX_VALUES
    http3: bool = False
    tls_min: str = "1.3"
    client_ca: str | None = None
    allowed_origins: tuple[str, ...] = ()
    allowed_methods: tuple[str, ...] = ()
    allowed_headers: tuple[str, ...] = ()
    allow_credentials: bool = False
    acp_max_sessions: int = 100
    acp_max_session_bytes: int = 64 * 1024
    acp_session_idle_timeout: float = 3600.0
    a2a_max_push_configs: int = 10
    a2a_max_push_config_bytes: int = 16 * 1024
    sse_max_sessions: int = 64
    sse_session_idle_timeout: float = 300.0
    chat_max_message_bytes: int = 16 * 1024
    chat_room_messages: int = 1000
    chat_principal_messages: int = 120
    chat_room_idle_timeout: float = 3600.0
    on_busy: str = "enqueue"
    busy_max_queued: int = 8
    busy_max_queued_per_principal: int = 32
    max_response_output_bytes: int = MAX_OUTPUT_BYTES
    max_history_bytes_per_principal: int = MAX_OWNER_HISTORY_BYTES

    def __attrs_post_init__(self) -> None:
        CorsPolicy.of(self.allowed_origins)  # raises on a malformed origin
        if self.tls_min not in TLS_VERSIONS:
            raise ValueError(f"tls_min must be one of {', '.join(TLS_VERSIONS)}")
        if self.client_ca is not None and self.certfile is None:
            raise ValueError("client_ca (mutual TLS) needs a certificate (certfile and keyfile)")
        if (self.certfile is None) != (self.keyfile is None):
            raise ValueError("certfile and keyfile must be given together")
        if self.http3 and self.certfile is None:
            raise ValueError("HTTP/3 needs a certificate (certfile and keyfile): QUIC is TLS 1.3")
        for name in _POSITIVE:
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be positive")
        if self.shutdown_grace < 0:
            raise ValueError("shutdown_grace must not be negative")
        try:
            parse_policy(self.on_busy)
        except BusyError as exc:
            raise ValueError(f"on_busy: {exc}") from None


#: ``tls_min`` values and the versions they stand for.
TLS_VERSIONS: Final = {"1.2": ssl.TLSVersion.TLSv1_2, "1.3": ssl.TLSVersion.TLSv1_3}

#: The :class:`ServerConfig` limits and timeouts that must be above zero
#: (``max_connections`` may also be ``None``: no limit).
_POSITIVE = (
    "max_body_size",
    "max_header_size",
    "h2_max_concurrent_streams",
    "h2_max_resets",
    "h2_max_control_frames",
    "h2_flood_window",
    "max_buffered_body",
    "max_queued_events",
    "max_session_queued_events",
    "max_json_values",
    "max_connections",
    "idle_timeout",
    "header_timeout",
    "body_timeout",
    "websocket_send_timeout",
    "websocket_max_message_size",
    "response_timeout",
    "response_idle_timeout",
    "response_head_timeout",
    "acp_max_sessions",
    "acp_max_session_bytes",
    "acp_session_idle_timeout",
    "a2a_max_push_configs",
    "a2a_max_push_config_bytes",
    "sse_max_sessions",
    "sse_session_idle_timeout",
    "chat_max_message_bytes",
    "chat_room_messages",
    "chat_principal_messages",
    "chat_room_idle_timeout",
    "busy_max_queued",
    "busy_max_queued_per_principal",
    "max_response_output_bytes",
    "max_history_bytes_per_principal",
)
