"""The ``uamp`` entry point: finds the subcommand and imports only what it needs.

Theory of operation. ``uamp --version`` and ``uamp --help`` must answer in a
blink, and ``uamp chat`` must not pay for the server's import (gRPC, A2A,
every transport). So the command line is built in two steps:

* :data:`COMMANDS` names each subcommand, its one-line help, and where its
  registrar lives (``"module:function"``, a function that adds the
  subcommand's parser to ``argparse`` sub-parsers and sets ``func``).
* :func:`main` looks at the arguments for the subcommand's name, imports that
  one registrar, and gives the other subcommands a bare parser with their help
  line (which is all ``uamp --help`` shows of them). ``--version`` and
  ``--help`` import nothing beyond this module and ``argparse``.

:func:`build_parser` (tests, documentation) registers every subcommand.

A usage error is one line and exit status 2 (:class:`Parser`), and an
unknown flag suggests the closest one and the subcommand's own ``--help``.
A subcommand whose extra is not installed (``pip install uamp``, the core
alone, then ``uamp serve``) says which extra to install, in one line.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, NoReturn

from uamp import __version__

__all__ = ["COMMANDS", "Command", "Parser", "build_parser", "main"]


class Command(NamedTuple):
    """One ``uamp`` subcommand: its name, help line and registrar (``module:function``)."""

    name: str
    help: str
    registrar: str


COMMANDS: tuple[Command, ...] = (
    Command(
        "serve", "host agents over HTTP/1.1, HTTP/2 and WebSocket", "uamp_trio.cli.serve:add_parser"
    ),
    Command(
        "connect",
        "dial a relay and serve agents over that one socket (docs/relay.md)",
        "uamp_trio.cli.connect:add_parser",
    ),
    Command(
        "acp",
        "run an agent as an ACP agent on stdin/stdout (for editors)",
        "uamp_trio.cli.stdio:add_acp_parser",
    ),
    Command(
        "mcp",
        "run an agent as an MCP server on stdin/stdout (for MCP hosts)",
        "uamp_trio.cli.stdio:add_mcp_parser",
    ),
    Command(
        "chat", "chat with an agent over the UAMP WebSocket", "uamp_trio.client.chat:add_parser"
    ),
    Command(
        "verify",
        "check a saved response's signature against a JWKS",
        "uamp_trio.client.verify:add_parser",
    ),
    Command(
        "discover",
        "fetch and verify an agent's signed manifest(s)",
        "uamp_trio.client.discover:add_parser",
    ),
    Command(
        "bench",
        "benchmark an agent endpoint (latency and throughput)",
        "uamp_trio.bench.command:add_parser",
    ),
    Command(
        "tokens",
        "issue and inspect payment tokens of a ledger",
        "uamp_trio.trust.commands:add_tokens_parser",
    ),
    Command(
        "ledger",
        "manage a payment ledger's database (migrate)",
        "uamp_trio.trust.commands:add_ledger_parser",
    ),
)

#: The extra that installs each module a subcommand may need: a command failing
#: to import one of them runs on an install without that extra.
_EXTRAS = {
    **dict.fromkeys(
        (
            "trio",
            "trio_websocket",
            "h11",
            "h2",
            "wsproto",
            "websockets",
            "httpx",
            "rich",
            "jwt",
            "cryptography",
            "prometheus_client",
            "watchfiles",
            "re2",
        ),
        "server",
    ),
    "jsonschema": "agents",
    "google": "grpc",
    "aioquic": "http3",
    "prompt_toolkit": "tui",
    "redis": "redis",
    "opentelemetry": "otel",
}


class Parser(argparse.ArgumentParser):
    """``argparse`` whose usage errors are one line (exit status 2), like every operator mistake."""

    #: The sub-parsers by subcommand name (set on the top-level parser).
    commands: dict[str, Any] | None = None

    def error(self, message: str) -> NoReturn:
        """Print ``prog: error: message`` and exit 2."""
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def unknown(self, extras: Sequence[str]) -> NoReturn:
        """Refuse arguments nothing took, suggesting the closest flag of this parser."""
        flags = [s for action in self._actions for s in action.option_strings]
        hint = ""
        for extra in extras:
            if extra.startswith("-"):
                close = difflib.get_close_matches(extra.split("=", 1)[0], flags, n=1, cutoff=0.6)
                if close:
                    hint = f"; did you mean {close[0]}?"
                    break
        self.error(f"unrecognized arguments: {' '.join(extras)}{hint}")


def _registrar(command: Command) -> Callable[[Any], None]:
    module, _, name = command.registrar.partition(":")
    register: Callable[[Any], None] = getattr(importlib.import_module(module), name)
    return register


def build_parser(only: str | None = "") -> Parser:
    """The ``uamp`` argument parser.

    Args:
        only: The one subcommand to register in full; ``None`` for none (the
            others get a bare parser with their help line); ``""`` (the
            default) for every one.
    """
    parser = Parser(prog="uamp", description="Universal Agentic Message Protocol")
    parser.add_argument("--version", action="version", version=f"uamp {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    parser.commands = sub.choices
    for command in COMMANDS:
        if only == "" or only == command.name:
            _registrar(command)(sub)
        else:
            sub.add_parser(command.name, help=command.help)
    return parser


def _chosen(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names (its first word not a flag), if any."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def _missing_extra(exc: ModuleNotFoundError, command: str) -> int | None:
    """Exit 2 with one line when ``exc`` is a dependency of an extra not installed."""
    top = (exc.name or "").split(".")[0]
    extra = _EXTRAS.get(top)
    if extra is None:
        return None
    print(
        f"uamp {command}: needs the '{extra}' extra, which is not installed (no module "
        f"{top!r}): pip install 'uamp[{extra}]'",
        file=sys.stderr,
    )
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    chosen = _chosen(argv)
    known = {c.name for c in COMMANDS}
    try:
        parser = build_parser(chosen if chosen in known else None)
    except ModuleNotFoundError as exc:
        code = _missing_extra(exc, chosen or "")
        if code is None:
            raise
        return code
    args, extras = parser.parse_known_args(argv)
    if extras:
        sub = (parser.commands or {}).get(args.command)
        (sub if isinstance(sub, Parser) else parser).unknown(extras)
    args.argv = argv  # what --reload hands to the server it runs
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        return int(func(args))
    except KeyboardInterrupt:  # Ctrl-C before a command installed its own handling
        return 130
    except ModuleNotFoundError as exc:
        code = _missing_extra(exc, args.command)
        if code is None:
            raise
        return code
