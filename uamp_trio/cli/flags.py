"""``uamp serve``'s flags, as ``uamp serve --help`` shows them.

Most limits are one row of :data:`LIMIT_FLAGS` each: a flag that sets the
:class:`~uamp_trio.engines.server_config.ServerConfig` field of the same meaning,
its type, its help line and (from ``ServerConfig()``) its default, so a new
limit is one row and ``uamp serve`` hands every row's value to the config as
it is (``uamp acp`` takes the ``acp_*`` rows). The other flags are added
group by group by :func:`add_serve_flags`; what they build is
:mod:`uamp_trio.cli.parts`, what runs with them :mod:`uamp_trio.cli.serve`.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from uamp_proto.busy import BusyError, parse_policy
from uamp_proto.resume import Retention

from ..cli_checks import port_number
from ..engines.server import ServerConfig
from ..observe.logs import LOG_FORMATS, LOG_LEVELS
from ..trust.auth import ALLOWED_ALGORITHMS
from ..trust.commands import add_ledger_args

__all__ = ["LIMIT_FLAGS", "add_limit_flags", "add_log_level", "add_serve_flags"]

#: Where the flags' defaults come from: one source with the server's own.
_DEFAULTS = ServerConfig()


def add_log_level(parser: Any) -> None:
    """``--log-level``, on ``parser``."""
    parser.add_argument(
        "--log-level",
        default="warning",
        type=str.lower,
        choices=LOG_LEVELS,
        help="logging level, to stderr (default %(default)s)",
    )


def _busy_policy(value: str) -> str:
    """``--on-busy``'s value, checked (docs/busy.md)."""
    try:
        return parse_policy(value).value
    except BusyError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


#: ``uamp serve`` flags that set a ServerConfig limit of the same meaning:
#: (flag, ServerConfig field, type, help).
LIMIT_FLAGS: tuple[tuple[str, str, Callable[[str], Any], str], ...] = (
    (
        "--limit-concurrency",
        "max_connections",
        int,
        "most connections at once; more are answered 503 (HTTP/2: GOAWAY) and closed",
    ),
    (
        "--max-buffered-body",
        "max_buffered_body",
        int,
        "request body bytes buffered across all connections; a body over it gets 503",
    ),
    (
        "--response-timeout",
        "response_timeout",
        float,
        "seconds a streamed response may last in total ('inf': no limit)",
    ),
    (
        "--response-idle-timeout",
        "response_idle_timeout",
        float,
        "seconds a streamed response may go without writing",
    ),
    (
        "--response-head-timeout",
        "response_head_timeout",
        float,
        "seconds a handler may take to return its response; then 504",
    ),
    (
        "--max-queued-events",
        "max_queued_events",
        int,
        "UAMP events queued for one connection's writer before the agents wait",
    ),
    (
        "--max-session-queued-events",
        "max_session_queued_events",
        int,
        "of those, the most one session may queue",
    ),
    (
        "--max-json-values",
        "max_json_values",
        int,
        "array elements and object members a JSON body or message may hold; more is "
        "refused unparsed",
    ),
    (
        "--h2-max-concurrent-streams",
        "h2_max_concurrent_streams",
        int,
        "HTTP/2 streams open at once per connection (more are refused)",
    ),
    (
        "--h2-max-resets",
        "h2_max_resets",
        int,
        "HTTP/2 stream resets per connection per --h2-flood-window before GOAWAY",
    ),
    (
        "--h2-max-control-frames",
        "h2_max_control_frames",
        int,
        "HTTP/2 SETTINGS and PING frames per connection per --h2-flood-window before GOAWAY",
    ),
    ("--h2-flood-window", "h2_flood_window", float, "seconds of the two HTTP/2 limits above"),
    (
        "--header-timeout",
        "header_timeout",
        float,
        "seconds from a request's first byte to its whole head (408 after; slowloris)",
    ),
    ("--body-timeout", "body_timeout", float, "seconds to receive a whole request body"),
    (
        "--max-header-size",
        "max_header_size",
        int,
        "bytes of a request head (HTTP/1.1) or header list (HTTP/2); 431 above",
    ),
    ("--idle-timeout", "idle_timeout", float, "seconds a keep-alive connection may sit idle"),
    (
        "--acp-max-sessions",
        "acp_max_sessions",
        int,
        "ACP sessions one principal may hold; more get JSON-RPC -32029",
    ),
    (
        "--acp-max-session-bytes",
        "acp_max_session_bytes",
        int,
        "bytes of cwd plus mcpServers an ACP session keeps; more get -32602",
    ),
    (
        "--acp-session-idle-timeout",
        "acp_session_idle_timeout",
        float,
        "seconds an unused ACP session is kept",
    ),
    (
        "--a2a-max-push-configs",
        "a2a_max_push_configs",
        int,
        "push-notification configs per A2A task; more get -32029 / 429 / RESOURCE_EXHAUSTED",
    ),
    (
        "--a2a-max-push-config-bytes",
        "a2a_max_push_config_bytes",
        int,
        "bytes of one push-notification config (as JSON); more get -32602 / 400",
    ),
    (
        "--sse-max-sessions",
        "sse_max_sessions",
        int,
        "UAMP HTTP+SSE sessions one principal may hold; more get 429",
    ),
    (
        "--sse-session-idle-timeout",
        "sse_session_idle_timeout",
        float,
        "seconds an HTTP+SSE session with no stream and no POST is kept",
    ),
    (
        "--chat-max-message-bytes",
        "chat_max_message_bytes",
        int,
        "bytes of one chat message's text; longer is refused (invalid_request)",
    ),
    (
        "--chat-room-messages",
        "chat_room_messages",
        int,
        "messages a chat room keeps (the oldest go first)",
    ),
    (
        "--chat-principal-messages",
        "chat_principal_messages",
        int,
        "chat messages one principal may post per minute, in all rooms (rate_limited past it)",
    ),
    (
        "--chat-room-idle-timeout",
        "chat_room_idle_timeout",
        float,
        "seconds a chat room with nobody in it and no message is kept",
    ),
    (
        "--on-busy",
        "on_busy",
        _busy_policy,
        "a message for a conversation whose run is active: reject|enqueue|interrupt|rollback",
    ),
    (
        "--busy-max-queued",
        "busy_max_queued",
        int,
        "messages one conversation may hold waiting (--on-busy enqueue ...); more are refused",
    ),
    (
        "--busy-max-queued-per-principal",
        "busy_max_queued_per_principal",
        int,
        "messages one principal may hold waiting over all its conversations",
    ),
    (
        "--max-response-output-bytes",
        "max_response_output_bytes",
        int,
        "bytes of output one response may keep (every transport); past it the "
        "response ends output_too_large",
    ),
    (
        "--max-history-bytes-per-principal",
        "max_history_bytes_per_principal",
        int,
        "bytes of conversation all of one principal's live UAMP sessions keep; past it "
        "the least recently used start afresh",
    ),
)


def add_limit_flags(group: Any, prefix: str = "") -> None:
    """The :data:`LIMIT_FLAGS` of the fields starting with ``prefix``, on ``group``."""
    for flag, field, kind, text in LIMIT_FLAGS:
        if field.startswith(prefix):
            group.add_argument(
                flag,
                dest=field,
                type=kind,
                default=getattr(_DEFAULTS, field),
                help=f"{text} (default %(default)s)",
            )


#: The default retention of session event logs (``--retention-*``).
_RETENTION = Retention()


def add_serve_flags(p: Any) -> None:
    """Every flag of ``uamp serve``, on its parser ``p``."""
    p.add_argument("--host", default=_DEFAULTS.host, help="address to bind (default %(default)s)")
    p.add_argument(
        "--port", type=port_number, default=_DEFAULTS.port, help="port (0 = any free one)"
    )
    p.add_argument(
        "--uds",
        metavar="PATH",
        help="serve on this Unix domain socket instead of --host/--port (as uvicorn's --uds)",
    )
    p.add_argument(
        "--agent",
        action="append",
        default=[],
        metavar="MODULE:ATTR",
        help="an agent (uamp or UAP) or a factory to host (repeatable; default: the demo agent)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="run N server processes on one listening socket, restarted if they die "
        "(share sessions between them with --store redis://...; docs/scale-out.md)",
    )
    p.add_argument("--certfile", help="PEM certificate chain: serve HTTPS with ALPN h2/http1.1")
    p.add_argument("--keyfile", help="PEM private key for --certfile")
    tls = p.add_argument_group("TLS and HTTP/3 (see docs/tls.md)")
    tls.add_argument(
        "--tls-min",
        choices=["1.3", "1.2"],
        default=_DEFAULTS.tls_min,
        help="oldest TLS version accepted with --certfile (default 1.3, as spec 003 requires; "
        "1.2 lets older clients use the other transports, the spec 003 bindings still "
        "refuse them)",
    )
    tls.add_argument(
        "--client-ca",
        metavar="PATH",
        help="PEM file of CAs: every TLS client must present a certificate one of them "
        "signed (mutual TLS), over HTTP/3 too",
    )
    tls.add_argument(
        "--http3",
        action="store_true",
        help="also serve HTTP/3 (QUIC, UDP) on the same port number, advertised with Alt-Svc "
        "(needs --certfile)",
    )
    cors = p.add_argument_group("browsers on other origins, CORS (see docs/operations.md)")
    cors.add_argument(
        "--allowed-origins",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="let pages from ORIGIN (scheme://host[:port], or '*' for any) call every HTTP "
        "route; repeatable. Off by default",
    )
    cors.add_argument(
        "--allowed-methods",
        action="append",
        default=[],
        metavar="METHOD",
        help="methods a preflight may ask for (repeatable; default: the usual ones)",
    )
    cors.add_argument(
        "--allowed-headers",
        action="append",
        default=[],
        metavar="HEADER",
        help="request headers a preflight may ask for (repeatable; default: any)",
    )
    cors.add_argument(
        "--allow-credentials",
        action="store_true",
        help="let those pages send cookies and HTTP authentication",
    )
    p.add_argument(
        "--max-body-size", type=int, default=_DEFAULTS.max_body_size, help="bytes (413 above)"
    )
    limits = p.add_argument_group("limits (see docs/security.md, Hardening)")
    limits.add_argument(
        "--ws-send-timeout",
        type=float,
        default=_DEFAULTS.websocket_send_timeout,
        help="seconds a WebSocket write may wait for a peer that does not read before it is "
        "dropped (default %(default)s)",
    )
    add_limit_flags(limits)
    p.add_argument(
        "--grace",
        "--graceful-timeout",
        dest="grace",
        type=float,
        default=_DEFAULTS.shutdown_grace,
        help="seconds in-flight requests get on shutdown; UAMP WebSockets then close with "
        "1012 once their responses end (default %(default)s)",
    )
    p.add_argument(
        "--a2a-max-tasks",
        type=int,
        default=1000,
        help="A2A tasks the server keeps (default %(default)s)",
    )
    p.add_argument(
        "--a2a-max-tasks-per-principal",
        type=int,
        default=None,
        help="A2A tasks one principal may hold; over it, 429 / JSON-RPC -32029 for that "
        "principal only (default: a tenth of --a2a-max-tasks)",
    )
    p.add_argument(
        "--a2a-push-allow",
        action="append",
        default=[],
        metavar="CIDR",
        help="a non-public network A2A push notifications may be delivered to, e.g. "
        "127.0.0.1/32 for a local receiver (repeatable; default: public addresses only)",
    )
    p.add_argument(
        "--a2a-sign-cards",
        action="store_true",
        help="sign A2A agent cards (signatures: JWS over the RFC 8785 card) with the envelope "
        "key (--envelope-key or the stored one), published in /.well-known/jwks.json",
    )
    p.add_argument(
        "--a2a-extended-card",
        metavar="JSON",
        help="a JSON file of card members (skills, description, ...) authenticated callers "
        "get from GetExtendedAgentCard; needs authentication (docs/a2a.md)",
    )
    p.add_argument(
        "--relay",
        action="store_true",
        help="also be a relay: daemons (uamp connect) dial /ws or /agents/connect and register "
        "agents served on every transport (docs/relay.md); hosts no demo agent by default",
    )
    p.add_argument(
        "--mcp",
        action="append",
        default=[],
        metavar="COMMAND_OR_URL",
        help="give the served agents the tools of this MCP server: a command line (stdio) or "
        "an http(s) Streamable HTTP URL (repeatable; docs/mcp.md)",
    )
    hitl = p.add_argument_group("a human in the loop (see docs/human-in-the-loop.md)")
    hitl.add_argument(
        "--approve",
        action="append",
        default=[],
        metavar="TOOL",
        help="ask a person before the served agents run this tool (repeatable)",
    )
    hitl.add_argument(
        "--interrupt-expiry",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="how long a paused run waits for an answer (0: for ever; default 600)",
    )
    hitl.add_argument(
        "--interrupt-policy",
        choices=("deny", "wait"),
        default="deny",
        help="for clients that do not declare interrupts: refuse the call at once (deny, "
        "the default) or pause anyway for an answer from another client (wait)",
    )
    add_ledger_args(p)
    store = p.add_argument_group("sessions that survive (see docs/resume.md, docs/scale-out.md)")
    store.add_argument(
        "--store",
        default="memory",
        metavar="WHERE",
        help="where session event logs and chat rooms live: memory (default), a SQLite file "
        "path (survives restarts), or redis://HOST:PORT/DB (event logs, A2A tasks and chat "
        "rooms shared by several uamp serve processes)",
    )
    store.add_argument(
        "--retention-events",
        type=int,
        default=_RETENTION.max_events,
        metavar="N",
        help="most events kept per session for resuming (default %(default)s)",
    )
    store.add_argument(
        "--retention-age",
        type=float,
        default=_RETENTION.max_age,
        metavar="SECONDS",
        help="how long an inactive session can be resumed (default %(default)s)",
    )
    p.add_argument(
        "--signing-key",
        metavar="PATH",
        help="PEM RSA private key (2048 bits or more): sign every response (RS256) and "
        "publish /.well-known/jwks.json",
    )
    env = p.add_argument_group("spec 003 envelopes (see docs/envelope.md)")
    env.add_argument(
        "--envelope-key",
        metavar="PATH",
        help="PEM EC P-256 or Ed25519 private key: signs error envelopes and manifests "
        "(default: envelope-key.pem in the user's data folder, ~/.local/share/uamp, "
        "made at the first start)",
    )
    env.add_argument(
        "--trust-jwks",
        metavar="PATH",
        help="JWKS of peers whose signed envelopes are accepted without a capability token",
    )
    env.add_argument(
        "--max-concurrent",
        type=int,
        default=16,
        metavar="N",
        help="envelope exchanges one agent runs at once; more get 5.04 (default %(default)s)",
    )
    env.add_argument(
        "--max-envelope-size",
        type=int,
        default=4 * 1024 * 1024,
        metavar="BYTES",
        help="largest envelope accepted; a larger declared Content-Length gets 4.13 (413) "
        "before the body is read (default %(default)s)",
    )
    env.add_argument(
        "--envelope-replay-memory",
        type=int,
        default=100_000,
        metavar="N",
        help="envelope ids remembered against replay, from every sender (default %(default)s)",
    )
    env.add_argument(
        "--envelope-replay-per-principal",
        type=int,
        default=10_000,
        metavar="N",
        help="of those, the most one principal may hold (its envelopes per 300 s); past it "
        "that principal alone gets 5.04 (default %(default)s)",
    )
    env.add_argument(
        "--envelope-exchanges-per-principal",
        type=int,
        default=64,
        metavar="N",
        help="finished envelope exchanges kept per principal for late readers and history; "
        "past it that principal's own oldest goes (default %(default)s)",
    )
    env.add_argument(
        "--envelope-notes",
        type=int,
        default=32,
        metavar="N",
        help="one-way envelopes (inform/notify) one principal may have waiting for its next "
        "exchange, and that join one exchange (default %(default)s)",
    )
    env.add_argument(
        "--envelope-note-bytes",
        type=int,
        default=1024 * 1024,
        metavar="BYTES",
        help="their body bytes, in all (default %(default)s)",
    )
    auth = p.add_argument_group("authentication (see docs/security.md)")
    auth.add_argument(
        "--auth-jwks",
        metavar="PATH_OR_URL",
        help="accept JWT bearer tokens verified against this JWKS (file or https URL); "
        "needs --auth-issuer and --auth-audience",
    )
    auth.add_argument("--auth-issuer", metavar="ISS", help="the required JWT 'iss'")
    auth.add_argument("--auth-audience", metavar="AUD", help="the required JWT 'aud'")
    auth.add_argument(
        "--auth-algorithms",
        default=",".join(ALLOWED_ALGORITHMS),
        metavar="ALGS",
        help="comma-separated JWT algorithms accepted (default %(default)s)",
    )
    auth.add_argument(
        "--auth-leeway",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="clock skew allowed on exp/nbf/iat (default %(default)s)",
    )
    auth.add_argument(
        "--auth-api-keys",
        metavar="PATH",
        help="accept static API keys from this file (one 'principal:key' a line)",
    )
    env.add_argument(
        "--insecure-envelopes",
        action="store_true",
        help="serve spec 003's bindings in cleartext on a non-loopback address (by default "
        "they need --certfile there: spec 003 section 6.1)",
    )
    auth.add_argument(
        "--api-key",
        action="append",
        default=[],
        metavar="[PRINCIPAL:]KEY",
        help="accept this API key as a bearer token (repeatable; the principal defaults to "
        "key-<hash prefix>); a key on the command line shows in the process list: prefer "
        "--auth-api-keys or --env-file on a shared machine",
    )
    auth.add_argument(
        "--allow-anonymous",
        action="store_true",
        help="let callers without a token in as 'anonymous' (needed to serve a "
        "non-loopback address without --auth-*)",
    )
    ops = p.add_argument_group("operations")
    add_log_level(ops)
    ops.add_argument(
        "--log-format",
        default="text",
        choices=LOG_FORMATS,
        help="log lines as text or one JSON object each, for log shippers (default %(default)s)",
    )
    for flag, what in (
        (
            "--access-log",
            "one line per request: time, client, method, path, status, duration, agent, transport",
        ),
        ("--metrics", "serve GET /metrics in the Prometheus text format"),
    ):
        ops.add_argument(
            flag, action=argparse.BooleanOptionalAction, default=True, help=f"{what} (default: on)"
        )
    ops.add_argument(
        "--root-path",
        default="",
        metavar="PREFIX",
        help="served below this path prefix by a reverse proxy (as uvicorn's --root-path): "
        "the playground, Location headers, agent cards and the OpenAPI document use it, "
        "and a request that still carries it has it stripped",
    )
    ops.add_argument(
        "--proxy-headers",
        action="store_true",
        help="behind a reverse proxy: take the client from X-Forwarded-For and the scheme "
        "from X-Forwarded-Proto, when the peer is in --forwarded-allow-ips",
    )
    ops.add_argument(
        "--forwarded-allow-ips",
        default=os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1"),
        metavar="IPS",
        help="comma-separated proxy addresses or networks whose X-Forwarded-* headers are "
        "believed, '*' for any (default %(default)s; $FORWARDED_ALLOW_IPS)",
    )
    ops.add_argument(
        "--env-file",
        metavar="PATH",
        help="read NAME=value lines (a .env file: provider keys, OPENAI_BASE_URL ...) into the "
        "environment before the agents load; variables already set win",
    )
    ops.add_argument(
        "--otel",
        action="store_true",
        help="export OpenTelemetry traces over OTLP/HTTP (also on when "
        "OTEL_EXPORTER_OTLP_ENDPOINT is set; needs the 'otel' extra)",
    )
    ops.add_argument(
        "--reload",
        action="store_true",
        help="restart the server when a Python file changes (development; use a fixed --port)",
    )
    ops.add_argument(
        "--reload-dir",
        action="append",
        default=[],
        metavar="DIR",
        help="directory --reload watches (repeatable; default: the current directory)",
    )
