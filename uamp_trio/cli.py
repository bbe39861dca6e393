"""The ``uamp`` command line (also ``python -m uamp`` and ``python -m uamp_trio``).

``uamp serve [--host H] [--port P] [--agent module:attr ...] [--certfile F --keyfile F]
[--tls-min 1.2] [--client-ca PATH] [--http3]``
hosts agents with every built-in transport and prints the URL of each
endpoint. SIGINT/SIGTERM start a graceful shutdown (a second signal stops at
once); the process exits 0. By default it hosts ``demo``: a UAP agent
(:func:`uamp_agents.bridge.demo_agent`, the offline demo model with the tools
``add`` and ``now``) served through the agent bridge.

It behaves like the Python servers operators know (uvicorn, hypercorn):
``--agent mymod:agent`` imports ``mymod`` from the current directory first;
``--reload`` runs the server in a child process and restarts it when a
Python file under ``--reload-dir`` (the current directory) changes; one
access line per request (``--no-access-log`` to silence it), timestamps on
every log line, ``--log-format json`` for log shippers; ``GET /metrics``
(``--no-metrics`` to leave it out) and OpenTelemetry traces with ``--otel``
or ``OTEL_EXPORTER_OTLP_ENDPOINT`` (the ``otel`` extra). Every operator
mistake -- a bad flag value, a port in use, an agent that does not import,
a certificate that does not load -- is one line on stderr and exit status 2
(1 when the server could not listen), never a traceback.

``--agent`` takes anything satisfying :class:`uamp_proto.responder.Responder`, or a
:class:`uamp_agents.Agent` (the UAP runtime), which is wrapped with
:func:`uamp_agents.bridge.serve_agent`; this module is the only place that
knows both layers.

``--signing-key PATH`` (a PEM RSA private key) signs every transport's
responses (spec 004 "Response Signing") and publishes the public key at
``/.well-known/jwks.json``; ``uamp verify`` checks a saved response against
such a JWKS (:mod:`uamp_trio.verify`).
Authentication (docs/security.md): ``--auth-jwks PATH_OR_URL --auth-issuer
ISS --auth-audience AUD`` accepts JWT bearer tokens, ``--auth-api-keys PATH``
static API keys (both may be given), ``--allow-anonymous`` lets callers
without a token in. With no authentication configured, ``uamp serve`` only
binds a loopback address; elsewhere it refuses to start and names the flags.

``uamp serve`` and ``uamp acp`` charge each response to a payment token of a
ledger with ``--ledger PATH --price AMOUNT``; ``uamp tokens`` issues and
inspects those tokens (:mod:`uamp_trio.trust.commands`).

``uamp acp [--agent module:attr] [--ledger PATH]`` runs one agent (the
demo agent by default) as an Agent Client Protocol agent on stdin/stdout, for
editors; it exits when stdin closes. ``uamp mcp [--agent module:attr | NAME]``
does the same as a Model Context Protocol server (docs/mcp.md).

Subcommands are rows of :data:`uamp_trio.command_line.COMMANDS`, the entry
point's table: each names a function that adds its parser to the ``argparse``
sub-parsers and sets ``func`` (taking the parsed arguments, returning the exit
code); the ``uamp`` script imports this module only for the ones it defines.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import getpass
import hashlib
import importlib
import json
import os
import shlex
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import trio
from cryptography.hazmat.primitives.asymmetric import rsa

from uamp import __version__
from uamp_proto.adapters import a2a_card
from uamp_proto.busy import BusyError, parse_policy
from uamp_proto.jose import jwk_thumbprint
from uamp_proto.principal import Principal
from uamp_proto.responder import Responder
from uamp_proto.resume import Retention
from uamp_proto.signing import ResponseSigner

from . import workers
from .app import App, create_app, default_transports
from .cli_checks import (
    check_extra,
    check_host,
    check_store,
    import_agent_file,
    import_failed,
    port_number,
)
from .command_line import build_parser, main
from .engines.server import Server, ServerConfig
from .envfile import load_env_file
from .hosting.host import Transport
from .hosting.proxy_headers import ProxyHeaders
from .hosting.root_path import check_root_path
from .observe.logs import LOG_FORMATS, LOG_LEVELS, configure
from .stores import Stores, open_chat_store, open_event_log, open_interrupt_relay, open_task_store
from .transports import a2a, envelope_grpc, envelopes
from .trust.auth import (
    ALLOWED_ALGORITHMS,
    AnyOf,
    APIKeyAuthenticator,
    Authenticator,
    JWTAuthenticator,
    is_loopback,
)
from .trust.commands import add_ledger_args, open_policy

__all__ = [
    "build_authenticator",
    "build_parser",
    "default_agent",
    "load_agent",
    "load_signer",
    "main",
]

_DEFAULTS = ServerConfig()

#: Set in the environment of the server a ``--reload`` parent runs.
RELOADED_CHILD = "UAMP_RELOADED_CHILD"


def _add_log_level(parser: Any) -> None:
    parser.add_argument(
        "--log-level",
        default="warning",
        type=str.lower,
        choices=LOG_LEVELS,
        help="logging level, to stderr (default %(default)s)",
    )


def _import(module_name: str) -> Any:
    """Import ``module_name``, the current directory first on the path (as uvicorn does)."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    return importlib.import_module(module_name)


def _transports(args: argparse.Namespace) -> list[Transport] | None:
    """The transports ``uamp serve`` mounts: the defaults, A2A configured by its flags,
    without spec 003's bindings when :func:`envelopes_refused` says so."""
    configured = args.a2a_push_allow or args.a2a_sign_cards or args.a2a_extended_card
    if not configured and envelopes_refused(args) is None:
        return None
    chosen = list(default_transports())
    if configured:
        push = a2a.PushSender(allow=args.a2a_push_allow) if args.a2a_push_allow else None
        extended = _extended_card(args.a2a_extended_card) if args.a2a_extended_card else None
        a2a_configured = a2a.transport(
            push=push, sign_cards=args.a2a_sign_cards, extended_card=extended
        )
        chosen = [a2a_configured if t is a2a.mount else t for t in chosen]
    if envelopes_refused(args) is not None:
        chosen = [t for t in chosen if t not in (envelopes.mount, envelope_grpc.mount)]
    return chosen


def _extended_card(path: str) -> dict[str, Any]:
    """``--a2a-extended-card``: the operator's card members, checked now."""
    try:
        more = json.loads(Path(path).read_text(encoding="utf-8"))
        if not isinstance(more, dict):
            raise ValueError("it is not a JSON object")
        a2a_card.extend_card({"skills": []}, more)
    except (OSError, ValueError) as exc:
        raise ValueError(f"--a2a-extended-card {path}: {exc}") from None
    return more


def envelopes_refused(args: argparse.Namespace) -> str | None:
    """Why spec 003's bindings are not served, or ``None`` when they are.

    Spec 003 section 6.1: envelopes travel over TLS 1.3 only. In cleartext
    they are served on a loopback address (the quick start, or behind a
    local TLS proxy), or where ``--insecure-envelopes`` says the operator
    knows better (a private network, a TLS proxy on another host).
    """
    local = getattr(args, "uds", None) is not None or is_loopback(args.host)
    if args.certfile is not None or local or args.insecure_envelopes:
        return None
    return (
        f"spec 003 envelopes are not served: {args.host} is not a loopback address and there "
        "is no --certfile (spec 003 section 6.1: TLS 1.3 only); give --certfile/--keyfile, "
        "or --insecure-envelopes to serve them in cleartext anyway"
    )


def load_agent(spec: str) -> Responder:
    """Load ``module:attr`` as an agent.

    ``attr`` (dotted for nested names) may be an object satisfying
    :class:`~uamp_proto.responder.Responder`, a UAP agent
    (:class:`uamp_agents.Agent`), or a class / zero-argument factory
    returning either. A UAP agent is served through
    :func:`uamp_agents.bridge.serve_agent` under its ``name``, or the
    attribute's name when it has none.

    Raises:
        ValueError: The spec is malformed or does not yield an agent.
    """
    module_name, sep, attr = spec.rpartition(":")
    if not sep or not module_name or not attr:
        raise ValueError(
            f"--agent {spec!r}: expected 'module:attribute' or 'path/to/file.py:attribute'"
        )
    obj: Any
    if module_name.endswith(".py") or "/" in module_name or os.sep in module_name:
        obj = import_agent_file(module_name, spec)
    else:
        try:
            obj = _import(module_name)
        except ImportError as exc:
            missing = exc.name or ""
            if module_name != missing and not module_name.startswith(missing + "."):
                # The module was found; something it imports was not.
                raise ValueError(import_failed(spec, repr(module_name), exc)) from None
            raise ValueError(
                f"--agent {spec!r}: cannot import {module_name!r}: {exc} (neither in the "
                "current directory nor installed)"
            ) from None
        except Exception as exc:  # the module itself failed: a syntax error, a raise at import
            raise ValueError(import_failed(spec, repr(module_name), exc)) from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(f"--agent {spec!r}: {module_name!r} has no {attr!r}") from None
    label = attr.rsplit(".", 1)[-1]
    if _is_uap_agent(obj):
        return _bridge(obj, label)
    if isinstance(obj, type) or (not isinstance(obj, Responder) and callable(obj)):
        try:
            obj = obj()
        except Exception as exc:
            raise ValueError(f"--agent {spec!r}: calling {attr}() failed: {exc}") from exc
    if _is_uap_agent(obj):
        return _bridge(obj, label)
    if not isinstance(obj, Responder):
        raise ValueError(
            f"--agent {spec!r}: {type(obj).__name__} is not an agent "
            "(needs name, capabilities() and async respond(request, emit))"
        )
    return obj


def _is_uap_agent(obj: Any) -> bool:
    from uamp_agents.agent import Agent as UAPAgent

    return isinstance(obj, UAPAgent)


def _bridge(obj: Any, label: str) -> Responder:
    from uamp_agents.bridge import serve_agent

    return serve_agent(obj, name=obj.name or label)


def default_agent() -> Responder:
    """What ``uamp serve`` and ``uamp acp`` host without ``--agent``: the UAP demo agent.

    It is :func:`uamp_agents.bridge.demo_agent` served through the bridge,
    wrapped in :class:`uamp_trio.demo.CallTaker` so that it takes voice calls
    (docs/voice.md) and echoes their audio.
    (:class:`uamp_trio.demo.DemoAgent`, the hand-written agent that needs no
    runtime, is still there for tests and for ``--agent uamp_trio.demo:DemoAgent``.)
    """
    from uamp_agents.bridge import demo_agent, serve_agent
    from uamp_trio.demo import CallTaker

    return CallTaker(serve_agent(demo_agent("demo")))


# --- serve --------------------------------------------------------------------


#: ``uamp serve`` flags that set a ServerConfig limit of the same meaning:
#: (flag, ServerConfig field, type, help).
def _busy_policy(value: str) -> str:
    """``--on-busy``'s value, checked (docs/busy.md)."""
    try:
        return parse_policy(value).value
    except BusyError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


_LIMIT_FLAGS: tuple[tuple[str, str, Callable[[str], Any], str], ...] = (
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
)


def _add_limit_flags(group: Any, prefix: str = "") -> None:
    """The :data:`_LIMIT_FLAGS` of the fields starting with ``prefix``, on ``group``."""
    for flag, field, kind, text in _LIMIT_FLAGS:
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


def _add_serve(sub: Any) -> None:
    p = sub.add_parser("serve", help="host agents over HTTP/1.1, HTTP/2 and WebSocket")
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
    _add_limit_flags(limits)
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
    _add_log_level(ops)
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
    p.set_defaults(func=_serve_command)


def envelope_options(args: argparse.Namespace) -> dict[str, Any]:
    """The envelope service's options (``--envelope-key``, ``--trust-jwks``, ``--max-concurrent``).

    Raises:
        ValueError: A key or JWKS that cannot be read or used (one line for the operator).
    """
    from .envelope.keys import EnvelopeKey, read_jwks, stored_key
    from .envelope.service import EnvelopeLimits

    if args.envelope_key is not None:
        key = EnvelopeKey.from_file(args.envelope_key)
    else:
        try:
            key, _ = stored_key()  # the data folder's, made at the first start
        except OSError:
            key = EnvelopeKey.ephemeral_key()  # warned about once the server starts
    trusted = read_jwks(args.trust_jwks, "--trust-jwks") if args.trust_jwks else None
    if args.max_concurrent < 1:
        raise ValueError("--max-concurrent must be at least 1")
    try:
        limits = EnvelopeLimits(
            max_concurrent=args.max_concurrent,
            max_size=args.max_envelope_size,
            replay_memory=args.envelope_replay_memory,
            replay_per_principal=args.envelope_replay_per_principal,
            exchanges_per_principal=args.envelope_exchanges_per_principal,
            notes_per_principal=args.envelope_notes,
            note_bytes_per_principal=args.envelope_note_bytes,
        )
    except ValueError as exc:
        raise ValueError(f"envelope limits: {exc}") from None
    return {"envelope_key": key, "trust_jwks": trusted, "envelope_limits": limits}


def load_signer(path: str) -> ResponseSigner:
    """A :class:`~uamp_proto.signing.ResponseSigner` for the PEM RSA key at ``path``.

    Its ``kid`` is the key's RFC 7638 thumbprint, so the same key always
    publishes the same JWKS.

    Raises:
        ValueError: One line saying what is wrong with the file.
    """
    from .envelope.keys import read_private_key

    key = read_private_key(path, "--signing-key")
    if not isinstance(key, rsa.RSAPrivateKey):
        raise ValueError(
            f"--signing-key {path}: response signatures are RS256, so the key must be RSA, "
            f"not {type(key).__name__.removeprefix('_')}"
        )
    return ResponseSigner(key=key, kid=jwk_thumbprint(key), clock=lambda: int(time.time()))


def build_authenticator(args: argparse.Namespace) -> Authenticator | None:
    """The authenticator the ``--auth-*`` flags ask for, or ``None`` when none is configured.

    Raises:
        ValueError: An incomplete or unreadable configuration (one line, no secrets).
    """
    found: list[Authenticator] = []
    if args.auth_jwks:
        if not args.auth_issuer or not args.auth_audience:
            raise ValueError("--auth-jwks needs --auth-issuer and --auth-audience")
        algorithms = [a.strip() for a in args.auth_algorithms.split(",") if a.strip()]
        try:
            found.append(
                JWTAuthenticator(
                    args.auth_jwks,
                    issuer=args.auth_issuer,
                    audience=args.auth_audience,
                    algorithms=algorithms,
                    leeway=args.auth_leeway,
                )
            )
        except OSError as exc:
            raise ValueError(f"--auth-jwks: cannot read {args.auth_jwks}: {exc.strerror}") from None
    elif args.auth_issuer or args.auth_audience:
        raise ValueError("--auth-issuer and --auth-audience go with --auth-jwks")
    if args.auth_api_keys:
        try:
            keys = APIKeyAuthenticator.from_file(args.auth_api_keys)
        except OSError as exc:
            raise ValueError(
                f"--auth-api-keys: cannot read {args.auth_api_keys}: {exc.strerror}"
            ) from None
        if not len(keys):
            raise ValueError(f"--auth-api-keys: {args.auth_api_keys} holds no key")
        found.append(keys)
    if getattr(args, "api_key", None):
        found.append(APIKeyAuthenticator([_api_key_pair(entry) for entry in args.api_key]))
    if not found:
        return None
    return found[0] if len(found) == 1 else AnyOf(found)


def _api_key_pair(entry: str) -> tuple[str, str]:
    """``--api-key [PRINCIPAL:]KEY`` as ``(principal, key)`` (never echoes the key)."""
    principal, sep, key = entry.partition(":")
    if principal.strip() == "agent" and sep:  # agent:NAME:KEY, as in an --auth-api-keys file
        name, sep, key = key.partition(":")
        principal = f"agent:{name.strip()}" if name.strip() else ""
    if not sep:
        key = entry
        principal = "key-" + hashlib.sha256(key.encode()).hexdigest()[:8]
    if not principal.strip() or not key.strip():
        raise ValueError("--api-key: expected KEY or PRINCIPAL:KEY, both non-empty")
    return principal.strip(), key.strip()


#: What ``uamp serve`` says when asked to serve a non-loopback address openly.
OPEN_BIND_REFUSED = (
    "uamp serve: refusing to serve {host} without authentication; add "
    "--auth-jwks PATH_OR_URL --auth-issuer ISS --auth-audience AUD, or "
    "--auth-api-keys PATH or --api-key KEY, or --allow-anonymous to accept anyone knowingly"
)


#: What ``uamp serve --relay`` says at start about who may register agents.
RELAY_OPEN = (
    "relay: no authentication configured: daemons may register agents from this machine "
    "(loopback) only"
)
RELAY_AUTH = (
    "relay: daemons register agent NAME only with a credential bound to it (a JWT with an "
    "agent_id or agent_name claim of NAME, or an agent:NAME API key)"
)


def _serve_command(args: argparse.Namespace) -> int:
    try:  # mistakes found before anything starts (uamp_trio.cli_checks)
        if args.env_file:
            load_env_file(args.env_file)  # before the agents (and --reload's child) read it
        check_host(args.host)
        check_store(args.store)
        check_root_path(args.root_path)
        if args.uds is not None and args.http3:
            raise ValueError("--uds goes without --http3 (QUIC needs a UDP port)")
        if args.http3:
            check_extra("aioquic", "--http3", "http3")
    except ValueError as exc:
        print(f"uamp serve: {exc}", file=sys.stderr)
        return 2
    if args.reload and not os.environ.get(RELOADED_CHILD):
        return _reload(args)
    if args.workers < 1:
        print("uamp serve: --workers must be at least 1", file=sys.stderr)
        return 2
    if args.workers > 1 and not workers.is_worker():
        if args.reload or args.http3:
            # HTTP/3 binds a UDP socket per process, which workers cannot share.
            print("uamp serve: --workers goes with neither --reload nor --http3", file=sys.stderr)
            return 2
        if args.store == "memory":
            print(
                "uamp serve: note: with --store memory each worker keeps its own sessions; "
                "use --store redis://HOST:PORT/DB so a client can resume on any worker",
                flush=True,
            )
        return workers.supervise(args.argv, args.host, args.port, args.workers, uds=args.uds)
    configure(args.log_level, args.log_format)
    if (args.certfile is None) != (args.keyfile is None):
        print("uamp serve: --certfile and --keyfile go together", file=sys.stderr)
        return 2
    try:
        authenticator = build_authenticator(args)
    except ValueError as exc:
        print(f"uamp serve: {exc}", file=sys.stderr)
        return 2
    local = args.uds is not None or is_loopback(args.host)  # a Unix socket is this machine's
    if authenticator is None and not args.allow_anonymous and not local:
        print(OPEN_BIND_REFUSED.format(host=args.host), file=sys.stderr)
        return 2
    try:
        tracing = _tracing(args)
        agents = [load_agent(spec) for spec in args.agent]
        if not agents and not args.relay:
            agents = [default_agent()]
        if args.store != "memory":
            # A log that outlives the process: a response can go on from its
            # last step elsewhere after a loss (docs/resume.md, "Node loss").
            for agent in agents:
                if hasattr(agent, "checkpoints"):
                    agent.checkpoints = True
        retention = Retention(args.retention_events, args.retention_age)
        tasks = open_task_store(args.store, args.a2a_max_tasks, args.a2a_max_tasks_per_principal)
        app = create_app(
            agents,
            transports=_transports(args),
            payment_policy=open_policy(args),
            authenticator=authenticator,
            allow_anonymous=args.allow_anonymous,
            relay=args.relay,
            stores=Stores(
                a2a_tasks=tasks,
                event_log=open_event_log(args.store, retention),
                chats=open_chat_store(args.store),
            ),
            access_log=args.access_log,
            metrics=args.metrics,
            tracing=tracing,
            proxy_headers=ProxyHeaders([args.forwarded_allow_ips]) if args.proxy_headers else None,
            root_path=args.root_path,
            **envelope_options(args),
        )
        if args.signing_key is not None:
            app.response_signer = load_signer(args.signing_key)
        if args.mcp:
            app.services.append(mcp_tools(agents, args.mcp))
        if args.approve:
            approve_tools(agents, args.approve)
        app.interrupts.expiry = args.interrupt_expiry or None
        app.interrupts.policy = args.interrupt_policy
        app.interrupts.relay = open_interrupt_relay(args.store)
        config = ServerConfig(
            host=args.host,
            port=args.port,
            uds=args.uds,
            certfile=args.certfile,
            keyfile=args.keyfile,
            tls_min=args.tls_min,
            client_ca=args.client_ca,
            http3=args.http3,
            max_body_size=args.max_body_size,
            shutdown_grace=args.grace,
            websocket_send_timeout=args.ws_send_timeout,
            allowed_origins=tuple(args.allowed_origins),
            allowed_methods=tuple(args.allowed_methods),
            allowed_headers=tuple(args.allowed_headers),
            allow_credentials=args.allow_credentials,
            **{field: getattr(args, field) for _, field, _, _ in _LIMIT_FLAGS},
        )
    except ValueError as exc:
        print(f"uamp serve: {exc}", file=sys.stderr)
        return 2
    if args.relay:
        print(RELAY_OPEN if authenticator is None else RELAY_AUTH, flush=True)
    refused = envelopes_refused(args)
    if refused is not None:
        print(f"uamp serve: {refused}", flush=True)
    # Section 8: the manifest names mutual TLS when every client must present a certificate.
    if app.envelopes is not None:
        app.envelopes.mutual_tls = config.client_ca is not None
    try:
        inherited = workers.inherited_socket()
        server = Server(app, config, sockets=[inherited] if inherited is not None else [])
    except OSError as exc:  # ssl.SSLError is one too
        reason = getattr(exc, "reason", None) or exc.strerror or str(exc)
        print(
            f"uamp serve: cannot load --certfile {args.certfile} / --keyfile {args.keyfile}: "
            f"{reason}",
            file=sys.stderr,
        )
        return 2
    if app.metrics is not None:
        app.metrics.watch_server(server)
    settle_garbage_collector()
    try:
        trio.run(_serve, server, app)
    except BaseException as exc:
        leaf = _only_leaf(exc)
        if isinstance(leaf, OSError):
            reason = leaf.strerror or str(leaf)
            where = args.uds if args.uds is not None else f"{args.host}:{args.port}"
            print(f"uamp serve: cannot listen on {where}: {reason}", file=sys.stderr)
            return 1
        if isinstance(leaf, KeyboardInterrupt):
            return 0
        raise
    finally:
        if tracing is not None:
            tracing.shutdown()
    return 0


def uap_endpoint(agent: Any) -> Any:
    """The UAP agent (an ``AgentEndpoint``) inside ``agent``'s wrappers (metrics,
    ``CallTaker``), or ``None`` when it is another kind of agent."""
    from uamp_agents.bridge import AgentEndpoint

    from .hosting.agents import unwrapped

    while agent is not None and not isinstance(agent, AgentEndpoint):
        agent = getattr(unwrapped(agent), "inner", None)
    return agent


def approve_tools(agents: Sequence[Responder], tools: Sequence[str]) -> None:
    """``--approve``: a person approves calls of these tools first, in every UAP agent."""
    for agent in agents:
        found = uap_endpoint(agent)
        if found is None:
            print(
                f"uamp serve: --approve has no effect on {agent.name!r} (not a UAP agent)",
                file=sys.stderr,
            )
        else:
            found.approve = frozenset(found.approve | set(tools))


def mcp_tools(agents: Sequence[Responder], specs: Sequence[str]) -> Callable[[], Any]:
    """``--mcp``: the service that keeps the MCP servers connected for the UAP agents.

    Their tools keep their own names unless an agent's tool (or an earlier
    server's) has it; what each server gave, under which name, is printed
    once the servers were tried.

    Raises:
        ValueError: A ``--mcp`` value is neither a command nor a URL.
    """
    from uamp_agents.mcp import McpServer, McpToolset

    servers = [McpServer.parse(spec) for spec in specs]
    found = {a.name: uap_endpoint(a) for a in agents}
    endpoints = [e for e in found.values() if e is not None]
    own = sorted({t.name for e in endpoints for t in e.agent.resolved_tools})
    toolset = McpToolset(servers, reserved=own)
    for uap in endpoints:
        uap.tool_sources.append(toolset)
    others = [name for name, e in found.items() if e is None]

    async def keep_connected() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(toolset.run)
            for line in toolset.describe():
                print(f"uamp serve: {line}", flush=True)
            if others:
                print(
                    f"uamp serve: --mcp tools go to UAP agents only, not to {', '.join(others)}",
                    flush=True,
                )

    return keep_connected


#: Young-generation collections between two looks at the oldest generation
#: (CPython's default is 10).
FULL_COLLECTION_EVERY = 100


def settle_garbage_collector() -> None:
    """Set up the garbage collector for a server, once start-up is done.

    A full collection walks every live object while every connection
    waits. What start-up made (modules, classes, the app) lives as long as
    the process: frozen, no collection walks it again (walked, it took
    45 ms every few seconds under a flood that allocates). Then a full
    collection is considered ten times less often than CPython's default:
    the objects of live connections are what it walks (35 per idle
    connection; 5,000 connections took 45 to 116 ms), and while a flood
    opens connections each growth by a quarter set one off. Cycles that
    die young are still collected by the young generations as before;
    cycles that outlived two collections wait longer to be freed.
    """
    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_COLLECTION_EVERY)


def _only_leaf(exc: BaseException) -> BaseException:
    """The one exception inside (nested) exception groups of one member, else ``exc``."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _tracing(args: argparse.Namespace) -> Any:
    """The tracer ``--otel`` or ``OTEL_EXPORTER_OTLP_ENDPOINT`` asks for, or ``None``.

    Raises:
        ValueError: Asked for, but the ``otel`` extra is not installed.
    """
    if not args.otel and not os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return None
    try:
        from .observe.tracing import Tracing
    except ImportError as exc:
        raise ValueError(f"--otel needs the otel extra (pip install 'uamp[otel]'): {exc}") from None
    from uamp_agents.tracing import set_tracer

    tracing = Tracing.exporting()
    set_tracer(tracing.runtime)  # the model and tool call spans of UAP agents
    return tracing


def _reload(args: argparse.Namespace) -> int:
    """Run ``uamp serve`` (the same arguments) in a child; restart it on Python file changes."""
    from watchfiles import PythonFilter, run_process

    dirs = args.reload_dir or [os.getcwd()]
    for folder in dirs:
        if not Path(folder).is_dir():
            print(f"uamp serve: --reload-dir {folder}: not a directory", file=sys.stderr)
            return 2
    os.environ[RELOADED_CHILD] = "1"
    # watchfiles stops on KeyboardInterrupt; a process started with SIGINT
    # ignored (inherited from whatever launched it) would never raise it.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    command = shlex.join([sys.executable, "-m", "uamp", *args.argv])
    print(f"uamp: watching {', '.join(dirs)} for changes (--reload)", flush=True)

    def changed(changes: set[tuple[Any, str]]) -> None:
        names = sorted({Path(path).name for _, path in changes})
        print(f"uamp: {', '.join(names)} changed, restarting", flush=True)

    run_process(
        *dirs, target=command, target_type="command", callback=changed, watch_filter=PythonFilter()
    )
    return 0


async def _watch_signals(
    signals: Any, nursery: trio.Nursery, first: Callable[[], None], said: str, doing: str
) -> None:
    """The first SIGINT/SIGTERM says what it does and calls ``first``; a second stops at once."""
    count = 0
    async for signum in signals:
        count += 1
        if count == 1:
            print(f"{said}: {signal.Signals(signum).name}, {doing}", flush=True)
            first()
        else:
            nursery.cancel_scope.cancel()


async def _serve(server: Server, app: App) -> None:
    # The signal receiver is open before the URLs are printed, so a signal
    # sent as soon as they appear is handled gracefully.
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:

            async def run(task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
                await server.serve(task_status=task_status)
                nursery.cancel_scope.cancel()  # served out: stop watching signals

            await nursery.start(run)
            nursery.start_soon(
                _watch_signals, signals, nursery, server.shutdown, "uamp", "shutting down"
            )
            number = workers.worker_number()
            if number:  # worker 0 (or the only process) prints the URLs
                print(f"uamp worker {number} serving on {server.url}", flush=True)
            else:
                print_urls(server, app)
                if app.envelopes is not None and app.envelopes.key.path:
                    print(f"envelopes and manifests signed with {app.envelopes.key.path}")
                if app.envelopes is not None and app.envelopes.key.ephemeral:
                    print(
                        "uamp serve: warning: no --envelope-key; envelopes and manifests are "
                        f"signed with an ephemeral Ed25519 key (kid {app.envelopes.key.kid}) "
                        "that changes at every start",
                        file=sys.stderr,
                    )


def print_urls(server: Server, app: App, *, file: Any = None) -> None:
    """Print every endpoint of the server and of every agent, WebSockets included.

    One ``label: url`` line each, never wrapped nor cut whatever the terminal
    width (rich's soft wrap: the terminal folds a long line, the URL stays
    whole for copying); styled on a terminal, plain otherwise.
    """
    from rich.console import Console
    from rich.text import Text

    out = file or sys.stdout
    base = server.url
    ws_base = ("wss" if server.scheme == "https" else "ws") + base[len(server.scheme) :]
    protocols = (
        "HTTP/1.1 + HTTP/2 (TLS, ALPN)"
        if server.scheme == "https"
        else "HTTP/1.1 + HTTP/2 (h2c prior knowledge)"
    )
    if server.http3_listeners:
        protocols += f" + HTTP/3 (QUIC, UDP port {server.port})"
    console = Console(file=out, soft_wrap=True, highlight=False)
    console.print(Text.assemble(("uamp serving on ", "bold"), (base, "bold"), f" ({protocols})"))
    sections = [("server", app.server_urls(base, ws_base))]
    sections.extend((f"agent {name}", rows) for name, rows in app.urls(base, ws_base).items())
    for title, rows in sections:
        if not rows:
            continue
        console.print(Text(title, style="bold cyan"))
        for label, url in rows:
            console.print(Text.assemble("  ", (f"{label}:", "dim"), " ", (url, "green")))
    if len(app.agents) == 1:
        console.print(
            f"single agent: also answers at {base}/chat/completions, "
            f"{base}/v1/chat/completions, {base}/capabilities"
        )
    console.print(f"uamp {__version__}; Ctrl-C to stop")
    out.flush()


# --- connect ------------------------------------------------------------------------


def _add_connect(sub: Any) -> None:
    p = sub.add_parser(
        "connect", help="dial a relay and serve agents over that one socket (docs/relay.md)"
    )
    p.add_argument("url", help="the relay: ws(s):// or http(s):// (a bare origin gets /ws)")
    p.add_argument(
        "--agent",
        action="append",
        default=[],
        required=True,
        metavar="MODULE:ATTR",
        help="an agent (uamp or UAP) or a factory to serve (repeatable)",
    )
    p.add_argument(
        "--token",
        metavar="TOKEN",
        help="the credential of the connection and of every agent without its own "
        "(default: $UAMP_TOKEN)",
    )
    p.add_argument(
        "--agent-token",
        action="append",
        default=[],
        metavar="NAME=TOKEN",
        help="the registration token of agent NAME (repeatable)",
    )
    p.add_argument("--log-level", default="info", help="logging level (default %(default)s)")
    p.set_defaults(func=_connect_command)


def _connect_command(args: argparse.Namespace) -> int:
    from .observe.logs import configure
    from .relay.daemon import Daemon, DaemonRefused

    configure(args.log_level, "text")  # the relay's words are escaped like any peer's
    tokens: dict[str, str] = {}
    for item in args.agent_token:
        name, sep, token = item.partition("=")
        if not sep or not name or not token:
            print(
                f"uamp connect: --agent-token {name or '?'}=...: expected NAME=TOKEN",
                file=sys.stderr,
            )
            return 2
        tokens[name] = token
    try:
        agents = [load_agent(spec) for spec in args.agent]
        daemon = Daemon(
            args.url, agents, token=args.token or os.environ.get("UAMP_TOKEN"), tokens=tokens
        )
    except ValueError as exc:
        print(f"uamp connect: {exc}", file=sys.stderr)
        return 2
    try:
        trio.run(_connect, daemon)
    except DaemonRefused as exc:
        print(f"uamp connect: {exc}", file=sys.stderr)
        return 1
    return 0


async def _connect(daemon: Any) -> None:
    from .relay.daemon import DaemonRefused

    refused: list[DaemonRefused] = []
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:

            async def run() -> None:
                try:
                    await daemon.run()
                except DaemonRefused as exc:
                    refused.append(exc)  # raised below, outside the nursery's group
                nursery.cancel_scope.cancel()

            nursery.start_soon(run)
            nursery.start_soon(
                _watch_signals, signals, nursery, daemon.stop, "uamp connect", "stopping"
            )
    if refused:
        raise refused[0]


# --- acp ----------------------------------------------------------------------------


def _add_acp(sub: Any) -> None:
    text = "run an agent as an ACP agent on stdin/stdout (for editors)"
    p = _add_stdio_parser(sub, "acp", text, "prompt's", _acp_command)
    _add_limit_flags(p, prefix="acp_")


def _add_stdio_parser(
    sub: Any, name: str, text: str, answers: str, func: Callable[[argparse.Namespace], int]
) -> Any:
    """The parser of ``uamp acp`` / ``uamp mcp``: an agent, a ledger, a signing key."""
    p = sub.add_parser(name, help=text)
    p.add_argument(
        "--agent",
        metavar="MODULE:ATTR | NAME",
        help="the agent to serve: MODULE:ATTR, or the default agent's name (default: the "
        "demo agent)",
    )
    add_ledger_args(p)
    p.add_argument(
        "--signing-key", metavar="PATH", help=f"PEM RSA private key: sign every {answers} answer"
    )
    _add_log_level(p)
    p.set_defaults(func=func)
    return p


def _acp_command(args: argparse.Namespace) -> int:
    from .stores.acp_sessions import AcpLimits
    from .transports.acp import serve_stdio

    try:
        limits = AcpLimits(
            max_sessions=args.acp_max_sessions,
            max_session_bytes=args.acp_max_session_bytes,
            idle_timeout=args.acp_session_idle_timeout,
        )
    except ValueError as exc:
        print(f"uamp acp: {exc}", file=sys.stderr)
        return 2
    return _stdio_command("acp", serve_stdio, args, limits=limits)


def _stdio_command(
    command: str, serve_stdio: Callable[..., Any], args: argparse.Namespace, **options: Any
) -> int:
    """Run ``uamp acp`` / ``uamp mcp``: one agent for the process that started us, on stdio.

    ``options`` go to ``serve_stdio`` as they are (``uamp acp``: its session limits).
    """
    configure(args.log_level, "text", stream=sys.stderr)
    try:
        agent = _stdio_agent(args.agent)
        signer = load_signer(args.signing_key) if args.signing_key else None
        policy = open_policy(args)
    except ValueError as exc:
        print(f"uamp {command}: {exc}", file=sys.stderr)
        return 2
    # The editor (or MCP host) started this process: it acts for the local user.
    principal = Principal(id=getpass.getuser(), scheme="local")
    with contextlib.suppress(KeyboardInterrupt):
        trio.run(
            lambda: serve_stdio(
                agent, payment_policy=policy, signer=signer, principal=principal, **options
            )
        )
    return 0


# --- mcp ----------------------------------------------------------------------------


def _add_mcp(sub: Any) -> None:
    text = "run an agent as an MCP server on stdin/stdout (for MCP hosts)"
    _add_stdio_parser(sub, "mcp", text, "call's", _mcp_command)


def _mcp_command(args: argparse.Namespace) -> int:
    from .transports.mcp import serve_stdio

    return _stdio_command("mcp", serve_stdio, args)


def _stdio_agent(spec: str | None) -> Responder:
    """``--agent``: ``MODULE:ATTR``, the default agent's name, or nothing (the default agent)."""
    if spec is not None and ":" in spec:
        return load_agent(spec)
    agent = default_agent()
    if spec is not None and spec != agent.name:
        raise ValueError(
            f"--agent {spec!r}: no agent of that name; give MODULE:ATTR, or {agent.name!r}"
        )
    return agent
