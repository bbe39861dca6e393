"""``uamp chat URL``: an interactive terminal chat over the UAMP WebSocket.

::

    uamp chat ws://127.0.0.1:8765/agents/demo/uamp
    uamp chat http://127.0.0.1:8765 --agent demo      # -> ws://.../ws
    uamp chat 127.0.0.1:8765 --once "Hello"           # one turn, for scripts

Tokens are printed as they arrive; tool calls, thinking and usage are shown
beside them -- with colours (rich) when stdout is a terminal, as plain
prefixed lines otherwise. ``/quit`` or end of input leaves; Ctrl-C during a
response cancels it (``response.cancel``), Ctrl-C at the prompt leaves.

``--verify PATH_OR_URL`` checks every response's signature against that
JWKS (a bad or missing one ends the chat with status 1); ``--save FILE``
writes each response, in the form ``uamp verify`` reads, to ``FILE``
(the last response wins).

The chat survives a lost connection and a server restart: the client dials
again with backoff and resumes the session where it broke
(``auto_resume``, docs/resume.md); a server that no longer knows the session
(an in-memory store that restarted) gets a new one, and the chat says so.

Exit status: 0, or 1 when the connection or the session fails (the reason
goes to stderr).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import trio

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.relay import daemon_url
from uamp_proto.signing import JWKSError

from ._command import run_command
from .uamp import ClientError, ClientSession, connect

__all__ = ["add_parser", "chat_url", "main", "run_chat"]

#: Why a resumed session may be gone after a reconnect: the chat opens a new one.
_SESSION_LOST = frozenset(
    {"unknown_session", "session_expired", "beyond_retention", "unknown_event", "session_ended"}
)


def chat_url(url: str) -> str:
    """The WebSocket URL for what the user typed.

    ``host:port`` and ``http(s)://host:port`` (no path) become the
    multi-agent endpoint ``ws(s)://host:port/ws``; a ``ws://`` URL is kept
    (the rule a daemon's URL follows too, :func:`uamp_proto.relay.daemon_url`).

    Raises:
        ValueError: Not an http(s) or ws(s) URL, or no host.
    """
    return daemon_url(url if "://" in url else "ws://" + url)


class _Printer:
    """Writes a response as it streams, rich or plain."""

    def __init__(self, out: TextIO, rich: bool) -> None:
        self.out = out
        self.console: Any = None
        if rich:
            from rich.console import Console

            self.console = Console(file=out, highlight=False)
        self.mid_line = False

    def text(self, text: str) -> None:
        if self.console is not None:
            self.console.print(text, end="", soft_wrap=True)
        else:
            self.out.write(text)
            self.out.flush()
        self.mid_line = not text.endswith("\n")

    def note(self, label: str, text: str, style: str) -> None:
        if self.mid_line:
            self.text("\n")
        if self.console is not None:
            self.console.print(
                f"[{style}]{label}[/] {text}",
                style="dim" if label else None,
                markup=True,
                soft_wrap=True,
            )
        else:
            self.out.write(f"[{label.strip('[]')}] {text}\n")
            self.out.flush()
        self.mid_line = False

    def end(self) -> None:
        if self.mid_line:
            self.text("\n")


async def _turn(
    session: ClientSession,
    text: str,
    printer: _Printer,
    *,
    can_pay: bool = False,
    save: str | None = None,
) -> bool:
    """One exchange; returns False when the response failed."""
    stream = session.respond(text)
    thinking: list[str] = []
    unpaid = False
    with trio.CancelScope():
        async for event in stream:
            if isinstance(event, ev.PaymentRequired):
                req = event.requirements
                price = f"{req.amount} {req.currency or ''}".strip()
                if can_pay:
                    printer.note("payment", f"{price} required; paying", "yellow")
                    continue
                printer.note("payment", f"{price} required: run again with --payment-token", "red")
                unpaid = True
                await session.cancel()
                continue
            if isinstance(event, ev.PaymentErrorEvent):
                printer.note("payment", f"{event.code}: {event.message}", "red")
                unpaid = True
                await session.cancel()
                continue
            if isinstance(event, ev.ResponseDelta):
                delta = event.delta
                if isinstance(delta, ty.DeltaText):
                    if thinking:
                        printer.note("thinking", "".join(thinking), "magenta")
                        thinking.clear()
                    printer.text(delta.text)
                elif isinstance(delta, ty.DeltaToolCall) and delta.tool_call.name:
                    printer.note("tool", f"{delta.tool_call.name} (running)", "cyan")
                elif isinstance(delta, ty.DeltaToolResult):
                    printer.note("tool", f"result: {delta.tool_result.result}", "cyan")
            elif isinstance(event, ev.Thinking):
                thinking.append(event.content)
            elif isinstance(event, ev.ToolCall):
                printer.note("tool", f"{event.name}({event.arguments})", "cyan")
            elif isinstance(event, ev.ResponseErrorEvent):
                printer.note("error", f"{event.error.code}: {event.error.message}", "red")
    if thinking:
        printer.note("thinking", "".join(thinking), "magenta")
    printer.end()
    result = stream.result
    if result is None or unpaid:
        return False
    if save is not None:
        Path(save).write_bytes(result.saved().to_json())
    if result.status == "cancelled":
        printer.note("cancelled", "", "yellow")
    usage = result.usage
    if usage is not None:
        printer.note(
            "usage",
            f"input {usage.input_tokens or 0}, output {usage.output_tokens or 0}, "
            f"total {usage.total_tokens or 0} tokens",
            "green",
        )
    return result.status != "failed"


async def run_chat(
    url: str,
    *,
    agent: str | None = None,
    token: str | None = None,
    payment_token: str | None = None,
    once: str | None = None,
    out: TextIO | None = None,
    rich: bool | None = None,
    verify: str | None = None,
    save: str | None = None,
) -> int:
    """Run the chat; returns the exit status. See the module docstring."""
    out = out or sys.stdout
    use_rich = out.isatty() if rich is None else rich
    printer = _Printer(out, use_rich)
    try:
        async with connect(chat_url(url), verify=verify, auto_resume=True) as client:

            async def open_session() -> ClientSession:
                return await client.create_session(
                    agent,
                    token=token,
                    payment_token=payment_token,
                    on_payment_required=(lambda _event: payment_token) if payment_token else None,
                )

            session = await open_session()
            if once is not None:
                paid = payment_token is not None
                return 0 if await _turn(session, once, printer, can_pay=paid, save=save) else 1
            printer.note(
                "connected", f"to {session.agent} (session {session.id}); /quit to leave", "blue"
            )
            while True:
                try:
                    line = await trio.to_thread.run_sync(_prompt, abandon_on_cancel=True)
                except EOFError:
                    return 0
                line = line.strip()
                if line in ("/quit", "/exit"):
                    return 0
                if not line:
                    continue
                paid = payment_token is not None
                try:
                    await _turn(session, line, printer, can_pay=paid, save=save)
                except ClientError as exc:
                    if client.closed or exc.code not in _SESSION_LOST:
                        raise
                    printer.end()
                    printer.note("reconnected", f"{exc.message}; starting a new session", "yellow")
                    session = await open_session()
                    await _turn(session, line, printer, can_pay=paid, save=save)
    except (ClientError, JWKSError, OSError, trio.TooSlowError) as exc:
        print(f"uamp chat: {exc}", file=sys.stderr)
        return 1


def _prompt() -> str:
    return input("> ")


def add_parser(sub: Any) -> None:
    """Add the ``chat`` subcommand to the ``uamp`` command line's sub-parsers."""
    p = sub.add_parser("chat", help="chat with an agent over the UAMP WebSocket")
    _arguments(p)
    p.set_defaults(func=_command)


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("url", help="ws://host:port/agents/NAME/uamp, ws://host:port/ws or host:port")
    p.add_argument("--agent", help="the agent to talk to (multi-agent endpoints)")
    p.add_argument("--token", help="per-session auth token")
    p.add_argument("--payment-token", help="pay with this token when the agent asks")
    p.add_argument("--once", metavar="TEXT", help="send TEXT, print the answer and exit")
    p.add_argument("--plain", action="store_true", help="no colours even on a terminal")
    p.add_argument(
        "--verify", metavar="PATH_OR_URL", help="check every response's signature against a JWKS"
    )
    p.add_argument("--save", metavar="FILE", help="save each response for `uamp verify`")


def _command(args: argparse.Namespace) -> int:
    return trio.run(
        lambda: run_chat(
            args.url,
            agent=args.agent,
            token=args.token,
            payment_token=args.payment_token,
            once=args.once,
            rich=False if args.plain else None,
            verify=args.verify,
            save=args.save,
        )
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m uamp_trio.client.chat URL ...`` (the same as ``uamp chat``)."""
    return run_command("uamp chat", __doc__ or "", _arguments, _command, argv)


if __name__ == "__main__":
    sys.exit(main())
