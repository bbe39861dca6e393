"""``uamp connect``: a daemon that dials a relay and serves its agents over that one socket.

The agents load as ``uamp serve`` loads them (:func:`~uamp_trio.cli.agents.load_agent`);
:class:`uamp_trio.relay.daemon.Daemon` does the rest (docs/relay.md). A relay
that refuses the daemon (a bad token, an agent name taken) is one line and
status 1; the first SIGINT/SIGTERM stops it, as ``uamp serve``'s does.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Any

import trio

from uamp_proto.response import MAX_OUTPUT_BYTES

from .agents import load_agent
from .serve import watch_signals

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    """Register ``uamp connect`` on the ``argparse`` sub-parsers ``sub``."""
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
    p.add_argument(
        "--max-response-output-bytes",
        type=int,
        default=MAX_OUTPUT_BYTES,
        metavar="N",
        help="bytes of output one response may keep; past it the response ends "
        "output_too_large (default %(default)s)",
    )
    p.add_argument("--log-level", default="info", help="logging level (default %(default)s)")
    p.set_defaults(func=_connect_command)


def _connect_command(args: argparse.Namespace) -> int:
    from ..observe.logs import configure
    from ..relay.daemon import Daemon, DaemonRefused

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
            args.url,
            agents,
            token=args.token or os.environ.get("UAMP_TOKEN"),
            tokens=tokens,
            max_response_output_bytes=args.max_response_output_bytes,
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
    from ..relay.daemon import DaemonRefused

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
                watch_signals, signals, nursery, daemon.stop, "uamp connect", "stopping"
            )
    if refused:
        raise refused[0]
