"""``uamp serve``: check the flags, build the app, serve until a signal.

Theory of operation. :func:`add_parser` registers the subcommand (its flags
are :mod:`uamp_trio.cli.flags`). The command runs in stages, and each
operator mistake ends it with one line on stderr and status 2: first the
checks that need nothing opened (:mod:`uamp_trio.cli_checks`), then the
process model -- ``--reload`` runs the same command in a child that
:mod:`watchfiles` restarts, ``--workers N`` hands the socket to
:mod:`uamp_trio.workers`, which runs this command again in each worker --
then the parts (:mod:`uamp_trio.cli.parts`, :mod:`uamp_trio.cli.agents`),
the :class:`~uamp_trio.app.App` and the :class:`~uamp_trio.engines.server.Server`.
Once start-up is done, :func:`settle_garbage_collector` freezes what it made;
:func:`_serve` prints the URLs (:func:`print_urls`) once the server listens
and turns the first SIGINT/SIGTERM into a graceful shutdown, the second into
an immediate stop. A port that cannot be bound is status 1.
"""

from __future__ import annotations

import argparse
import gc
import os
import shlex
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from uamp import __version__
from uamp_proto.resume import Retention

from .. import workers
from ..app import App, create_app
from ..cli_checks import check_extra, check_host, check_store
from ..engines.server import Server, ServerConfig
from ..envfile import load_env_file
from ..hosting.proxy_headers import ProxyHeaders
from ..hosting.root_path import check_root_path
from ..observe.logs import configure
from ..stores import Stores, open_chat_store, open_event_log, open_interrupt_relay, open_task_store
from ..trust.auth import is_loopback
from ..trust.commands import open_policy
from .agents import approve_tools, default_agent, load_agent, mcp_tools, open_tracing
from .flags import LIMIT_FLAGS, add_serve_flags
from .parts import build_authenticator, envelope_options, envelopes_refused, load_signer, transports

__all__ = [
    "FULL_COLLECTION_EVERY",
    "OPEN_BIND_REFUSED",
    "RELAY_AUTH",
    "RELAY_OPEN",
    "RELOADED_CHILD",
    "add_parser",
    "print_urls",
    "settle_garbage_collector",
    "watch_signals",
]

#: Set in the environment of the server a ``--reload`` parent runs.
RELOADED_CHILD = "UAMP_RELOADED_CHILD"


def add_parser(sub: Any) -> None:
    """Register ``uamp serve`` on the ``argparse`` sub-parsers ``sub``."""
    p = sub.add_parser("serve", help="host agents over HTTP/1.1, HTTP/2 and WebSocket")
    add_serve_flags(p)
    p.set_defaults(func=_serve_command)


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
        tracing = open_tracing(args)
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
            transports=transports(args),
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
            **{field: getattr(args, field) for _, field, _, _ in LIMIT_FLAGS},
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


async def watch_signals(
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
                watch_signals, signals, nursery, server.shutdown, "uamp", "shutting down"
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
