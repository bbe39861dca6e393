"""``uamp acp`` and ``uamp mcp``: one agent for the process that started us, on stdin/stdout.

An editor (ACP) or an MCP host starts the command and speaks to it over its
pipes; the agent is ``--agent MODULE:ATTR``, the default agent, or the
default agent by its name. The caller is the local user
(:class:`~uamp_proto.principal.Principal` ``scheme="local"``); a ledger
(``--ledger``) charges each answer and ``--signing-key`` signs it. The
command ends when stdin closes.
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import sys
from collections.abc import Callable
from typing import Any

import trio

from uamp_proto.principal import Principal
from uamp_proto.responder import Responder

from ..observe.logs import configure
from ..trust.commands import add_ledger_args, open_policy
from .agents import default_agent, load_agent
from .flags import add_limit_flags, add_log_level
from .parts import load_signer

__all__ = ["add_acp_parser", "add_mcp_parser"]


def add_acp_parser(sub: Any) -> None:
    """Register ``uamp acp`` on the ``argparse`` sub-parsers ``sub``."""
    text = "run an agent as an ACP agent on stdin/stdout (for editors)"
    p = _add_stdio_parser(sub, "acp", text, "prompt's", _acp_command)
    add_limit_flags(p, prefix="acp_")


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
    add_log_level(p)
    p.set_defaults(func=func)
    return p


def _acp_command(args: argparse.Namespace) -> int:
    from ..stores.acp_sessions import AcpLimits
    from ..transports.acp import serve_stdio

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


def add_mcp_parser(sub: Any) -> None:
    """Register ``uamp mcp`` on the ``argparse`` sub-parsers ``sub``."""
    text = "run an agent as an MCP server on stdin/stdout (for MCP hosts)"
    _add_stdio_parser(sub, "mcp", text, "call's", _mcp_command)


def _mcp_command(args: argparse.Namespace) -> int:
    from ..transports.mcp import serve_stdio

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
