"""``uamp chat URL``: an interactive terminal chat over the UAMP WebSocket.

::

    uamp chat http://127.0.0.1:8765/agents/demo      # -> ws://.../agents/demo/uamp
    uamp chat ws://127.0.0.1:8765/agents/demo/uamp
    uamp chat http://127.0.0.1:8765 --agent demo      # -> ws://.../ws
    uamp chat 127.0.0.1:8765 --once "Hello"           # one turn, for scripts
    uamp chat 127.0.0.1:8765 --chat lobby --name alice  # a chat room (docs/chat.md)
    uamp chat --binding grpc https://127.0.0.1:8765 --agent demo --cafile ca.pem

Tokens are printed as they arrive; tool calls, thinking and usage are shown
beside them -- with colours (rich) when stdout is a terminal, as plain
prefixed lines otherwise. For scripts, ``--quiet`` prints the answer's text
alone and ``--json`` each event the server sends as one JSON line.

On a terminal the prompt has line editing and a history kept across runs
(prompt_toolkit; ``--history FILE``, by default
``~/.local/state/uamp/chat_history``), and stays open while an answer
streams above it, a whole line at a time (a line written in pieces would be
erased by the prompt's redraw). Lines typed while the agent answers wait their turn.
When the agent asks a person (docs/human-in-the-loop.md) the chat shows the
request -- ``[approve?] Allow the agent to run add? add({"a":2,"b":3})`` --
and the next line typed answers it: ``y`` approves, ``n`` (optionally
followed by a reason) denies; a question takes the line as its answer.
Commands: ``/help``, ``/new`` (end the session, start another), ``/cancel``
(stop the answer being written: ``response.cancel``), ``/quit``. Ctrl-C stops
the answer being written, or leaves when there is none; Ctrl-D (end of input)
leaves once the queued lines are answered. Neither prints a traceback.

``--verify PATH_OR_URL`` checks every response's signature against that
JWKS (a bad or missing one ends the chat with status 1); ``--save FILE``
writes each response, in the form ``uamp verify`` reads, to ``FILE``
(the last response wins).

The chat survives a lost connection and a server restart: the client dials
again with backoff and resumes the session where it broke
(``auto_resume``, docs/resume.md); a server that no longer knows the session
(an in-memory store that restarted) gets a new one, and the chat says so.

``--binding envelope-ws`` speaks spec 003 instead: signed envelopes over the
length-prefixed WebSocket (``ws://host:port[/agents/NAME]/uamp/1/ws``; a
``host:port`` or ``http://`` URL is turned into that); ``envelope-http``
(POST + SSE), ``h3`` (the same over HTTP/3; the server needs ``--http3``) and
``grpc`` (``uamp.v1.Agent/Session``) take the server's URL
(``https://host:port``, ``--agent`` picks the agent), and ``--cafile``
verifies a certificate from a private CA. Each line is an
``ask`` whose ``context`` names the previous one, so the agent sees the
conversation; ``--token`` is the capability token and ``--envelope-key``
the key it binds (default: a new key, for a server without authentication).
The answer's delta frames are acknowledged as they arrive.

Exit status: 0, or 1 when the connection or the session fails (the reason
goes to stderr).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import re
import shutil
import signal
import ssl
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlsplit, urlunsplit

import attrs
import httpx
import orjson
import trio

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.codec import encode
from uamp_proto.relay import daemon_url
from uamp_proto.signing import JWKSError

from ._command import run_command
from .room import run_room
from .uamp import ClientError, ClientSession, connect

__all__ = ["add_parser", "chat_url", "main", "run_chat"]

#: Why a resumed session may be gone after a reconnect: the chat opens a new one.
_SESSION_LOST = frozenset(
    {"unknown_session", "session_expired", "beyond_retention", "unknown_event", "session_ended"}
)


#: An agent's root URL (``.../agents/NAME``, or its OpenAI base ``.../agents/NAME/v1``).
_AGENT_ROOT = re.compile(r"^(.*/agents/[^/]+?)(?:/v1)?/?$")


def chat_url(url: str) -> str:
    """The WebSocket URL for what the user typed.

    ``host:port`` and ``http(s)://host:port`` (no path) become the
    multi-agent endpoint ``ws(s)://host:port/ws``; an agent's root URL, the
    one every other client is given (``http://host:port/agents/NAME``, with
    ``/v1`` or not), becomes that agent's UAMP WebSocket
    (``ws://host:port/agents/NAME/uamp``); any other ``ws://`` URL is kept
    (the rule a daemon's URL follows too, :func:`uamp_proto.relay.daemon_url`).

    Raises:
        ValueError: Not an http(s) or ws(s) URL, or no host.
    """
    ws = daemon_url(url if "://" in url else "ws://" + url)
    parts = urlsplit(ws)
    root = _AGENT_ROOT.match(parts.path)
    if root is None:
        return ws
    path = str(root.group(1)) + "/uamp"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


#: What ``--json`` and ``--quiet`` leave of the output (``human``: everything).
MODES = ("human", "json", "quiet")
#: Notes ``--quiet`` still writes, to stderr: the ones that say why an answer failed.
_QUIET_ALOUD = frozenset({"error", "payment"})


class _Printer:
    """Writes a response as it streams, rich or plain.

    ``mode`` ``json`` writes each event the server sends as one JSON line and
    nothing else; ``quiet`` writes the answer's text alone (failures go to
    stderr). Above an interactive prompt (:meth:`whole_lines`) text is written
    a whole line at a time: a line written in pieces would be erased by the
    prompt's next redraw.
    """

    def __init__(self, out: TextIO, rich: bool, mode: str = "human") -> None:
        self.out = out
        self.mode = mode
        self.console: Any = None
        if rich and mode == "human":
            from rich.console import Console

            self.console = Console(file=out, highlight=False)
        self.mid_line = False
        #: Columns of a line held back until it is whole (``None``: write at once).
        self.width: int | None = None
        self.pending = ""

    def event(self, event: Any) -> None:
        """``--json``: the event as one line of its wire form."""
        if self.mode == "json":
            self._write(encode(event).decode() + "\n")

    def _write(self, text: str) -> None:
        if self.console is not None:
            self.console.print(text, end="", soft_wrap=True)
        else:
            self.out.write(text)
            self.out.flush()

    def text(self, text: str) -> None:
        if self.mode == "json":
            return
        if self.width is None:
            self._write(text)
            self.mid_line = not text.endswith("\n")
            return
        self.pending += text
        for line in self._whole_lines(self.width):
            self._write(line + "\n")
        self.mid_line = bool(self.pending)

    def note(self, label: str, text: str, style: str) -> None:
        if self.mode != "human":
            if self.mode == "quiet" and label in _QUIET_ALOUD:
                print(f"uamp chat: {label}: {text}", file=sys.stderr, flush=True)
            return
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

    def _whole_lines(self, width: int) -> Iterator[str]:
        """Take the lines :attr:`pending` completes: up to each newline, or a screen line.

        A line longer than ``width`` is cut after its last space within it (or
        at ``width`` when it has none), as the terminal would have wrapped it.
        """
        while True:
            pending = self.pending
            newline = pending.find("\n")
            if 0 <= newline <= width:
                self.pending = pending[newline + 1 :]
                yield pending[:newline]
            elif len(pending) > width:
                cut = pending.rfind(" ", 0, width + 1)
                cut = width if cut <= 0 else cut + 1
                self.pending = pending[cut:]
                yield pending[:cut].rstrip(" ")
            else:
                return

    @contextlib.contextmanager
    def whole_lines(self, width: int) -> Iterator[None]:
        """Hold text back until a line is whole, or ``width`` columns long, for the duration."""
        self.width = max(width, 20)
        try:
            yield
        finally:
            self.end()
            self.width = None

    @contextlib.contextmanager
    def writing_to(self, out: TextIO) -> Iterator[None]:
        """Write to ``out`` for the duration (the prompt's stdout proxy), then back."""
        before = self.out
        self.out = out
        if self.console is not None:
            self.console.file = out
        try:
            yield
        finally:
            self.out = before
            if self.console is not None:
                self.console.file = before


async def _turn(
    session: ClientSession,
    text: str,
    printer: _Printer,
    *,
    can_pay: bool = False,
    save: str | None = None,
    on_interrupt: Callable[[ev.InterruptRequest], None] | None = None,
) -> bool:
    """One exchange; returns False when the response failed.

    ``on_interrupt`` is told of each ``interrupt.request`` after it is shown
    (the interactive chat then takes the next line typed as the answer).
    """
    stream = session.respond(text)
    thinking: list[str] = []
    unpaid = False
    with trio.CancelScope():
        async for event in stream:
            printer.event(event)
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
            elif isinstance(event, ev.InterruptRequest):
                printer.end()
                printer.note(
                    "approve?" if event.kind == "approval" else "question", _ask(event), "yellow"
                )
                if on_interrupt is not None:
                    on_interrupt(event)
            elif isinstance(event, ev.InterruptResolved):
                printer.note("answered", event.outcome, "yellow")
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


def _ask(event: ev.InterruptRequest) -> str:
    """What the chat shows for an interrupt (docs/human-in-the-loop.md)."""
    if event.kind == "approval":
        arguments = orjson.dumps(event.arguments or {}).decode()
        return f"{event.prompt} {event.tool_name}({arguments}) -- type y to approve, n to deny"
    return f"{event.prompt} -- type the answer"


def _answer_of(event: ev.InterruptRequest, line: str) -> dict[str, Any]:
    """The ``interrupt.answer`` fields a typed line gives."""
    if event.kind == "approval":
        word, _, reason = line.partition(" ")
        approved = word.lower() in ("y", "yes", "a", "approve", "ok")
        return {"approved": approved, "reason": reason.strip() or None}
    try:
        value: Any = orjson.loads(line)
    except orjson.JSONDecodeError:
        value = line
    return {"value": value}


async def run_chat(
    url: str,
    *,
    agent: str | None = None,
    token: str | None = None,
    payment_token: str | None = None,
    once: str | None = None,
    out: TextIO | None = None,
    rich: bool | None = None,
    mode: str = "human",
    verify: str | None = None,
    save: str | None = None,
    history: str | None = None,
    reader: _LineReader | None = None,
    room: str | None = None,
    name: str | None = None,
    respond: str | None = None,
) -> int:
    """Run the chat; returns the exit status. See the module docstring.

    With ``room`` the terminal joins that chat room instead
    (:mod:`uamp_trio.client.room`).
    """
    out = out or sys.stdout
    use_rich = out.isatty() if rich is None else rich
    printer = _Printer(out, use_rich, mode)
    try:
        # A server that is not there is said at once; one lost later is ridden out.
        async with connect(
            chat_url(url), verify=verify, auto_resume=True, first_dial_for=0
        ) as client:
            if room is not None:
                return await run_room(
                    client,
                    room=room,
                    name=name,
                    agent=agent,
                    token=token,
                    payment_token=payment_token,
                    respond=respond,
                    printer=printer,
                    reader=reader or _LineReader(history),
                )
            session = await _open(client, agent, token, payment_token, interrupts=once is None)
            if once is not None:
                paid = payment_token is not None
                return 0 if await _turn(session, once, printer, can_pay=paid, save=save) else 1
            printer.note(
                "connected",
                f"to {session.agent} (session {session.id}); /help for commands",
                "blue",
            )
            lines = reader or _LineReader(history)
            chat = _Chat(client, session, printer, lines, agent, token, payment_token)
            return await chat.run(save)
    except (ClientError, JWKSError, OSError, trio.TooSlowError) as exc:
        print(f"uamp chat: {exc}", file=sys.stderr)
        return 1


#: What ``/help`` prints.
HELP = """\
/help     this list
/new      end this session and start a new one with the same agent
/cancel   stop the answer being written (also Ctrl-C)
/quit     leave (also Ctrl-D; Ctrl-C when no answer is being written)
Anything else is sent to the agent; lines typed during an answer wait their turn."""

#: A queued command (messages are queued as their text).
_NEW, _QUIT, _HELP = object(), object(), object()
#: What the line reader hands over for Ctrl-C at the prompt and for end of input.
_INTERRUPT, _EOF = object(), object()

DEFAULT_HISTORY = Path("~/.local/state/uamp/chat_history")


async def _open(
    client: Any,
    agent: str | None,
    token: str | None,
    payment_token: str | None,
    *,
    interrupts: bool = True,
) -> ClientSession:
    """A new session with ``agent``, paying with ``payment_token`` when asked.

    An interactive chat declares that it answers interrupts (the person types
    the answer); ``--once`` does not, so the server's policy applies.
    """
    pays = (lambda _event: payment_token) if payment_token is not None else None
    return await client.create_session(  # type: ignore[no-any-return]
        agent,
        token=token,
        payment_token=payment_token,
        on_payment_required=pays,
        interrupts=interrupts,
    )


def _has_prompt_toolkit() -> bool:
    """Whether the ``tui`` extra is installed (else lines are read plainly, without editing)."""
    try:
        import prompt_toolkit  # noqa: F401
    except ImportError:
        return False
    return True


class _LineReader:
    """Reads one line per call, in a worker thread: prompt_toolkit on a terminal, else stdin."""

    def __init__(self, history: str | None = None) -> None:
        self.prompt: Any = None
        #: Called (in the reader's thread) when the text at the prompt changes.
        self.on_change: Callable[[], None] | None = None
        if sys.stdin.isatty() and sys.stdout.isatty() and _has_prompt_toolkit():
            from prompt_toolkit import PromptSession
            from prompt_toolkit.history import FileHistory

            path = Path(history) if history else DEFAULT_HISTORY.expanduser()
            path.parent.mkdir(parents=True, exist_ok=True)
            self.prompt = PromptSession(history=FileHistory(str(path)))
            self.prompt.default_buffer.on_text_changed += self._changed

    def _changed(self, _buffer: object) -> None:
        if self.on_change is not None:
            self.on_change()

    def read(self) -> object:
        """The next line, :data:`_INTERRUPT` for Ctrl-C, :data:`_EOF` at the end."""
        try:
            if self.prompt is not None:
                return str(self.prompt.prompt("> ", handle_sigint=False))
            line = sys.stdin.readline()
        except KeyboardInterrupt:
            return _INTERRUPT
        except EOFError:
            return _EOF
        return line.rstrip("\n") if line else _EOF

    @contextlib.contextmanager
    def output(self, printer: _Printer) -> Iterator[None]:
        """A context in which ``printer`` writes above the prompt and leaves it intact.

        prompt_toolkit's ``patch_stdout`` swaps ``sys.stdout`` for a proxy; the
        printer holds the stream it was made with, so it is pointed at the proxy too
        (otherwise answers are drawn over the prompt line).
        """
        if self.prompt is None:
            yield
            return
        from prompt_toolkit.patch_stdout import patch_stdout

        width = shutil.get_terminal_size().columns
        with patch_stdout(raw=True), printer.writing_to(sys.stdout), printer.whole_lines(width):
            yield


@attrs.define(eq=False)
class _Chat:
    """The interactive loop: lines in, one answer at a time out; see the module docstring."""

    client: Any
    session: ClientSession
    printer: _Printer
    reader: _LineReader
    agent: str | None
    token: str | None
    payment_token: str | None
    #: Whether an answer is being written (what Ctrl-C and /cancel stop).
    answering: bool = attrs.field(default=False, init=False)
    #: The interrupt the next line typed answers (docs/human-in-the-loop.md).
    pending: ev.InterruptRequest | None = attrs.field(default=None, init=False)
    #: Messages and commands, taken in order by :meth:`_answer`.
    queue: tuple[trio.MemorySendChannel[object], trio.MemoryReceiveChannel[object]] = attrs.field(
        init=False, factory=lambda: trio.open_memory_channel[object](math.inf)
    )

    async def run(self, save: str | None) -> int:
        """Until ``/quit``, Ctrl-D (after the queue) or Ctrl-C with no answer running."""
        with self.reader.output(self.printer), trio.open_signal_receiver(signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._answer, save, nursery.cancel_scope)
                nursery.start_soon(self._signals, signals, nursery.cancel_scope)
                while True:
                    line = await trio.to_thread.run_sync(self.reader.read, abandon_on_cancel=True)
                    if line is _EOF:
                        self.queue[0].send_nowait(_QUIT)
                        break
                    if line is _INTERRUPT:
                        if not await self._interrupt():
                            nursery.cancel_scope.cancel()
                        continue
                    assert isinstance(line, str)
                    await self._line(line.strip())
        return 0

    async def _line(self, line: str) -> None:
        if not line:
            return
        asked = self.pending
        if asked is not None and not line.startswith("/"):
            self.pending = None
            await self.session.answer(asked.interrupt_id, **_answer_of(asked, line))
            return
        if line == "/cancel":
            if not await self._interrupt():
                self.printer.note("cancel", "no answer is being written", "yellow")
            return
        command = {"/new": _NEW, "/quit": _QUIT, "/exit": _QUIT, "/help": _HELP}.get(line)
        if command is None and line.startswith("/"):
            self.printer.note("help", f"unknown command {line}; /help lists them", "yellow")
            return
        self.queue[0].send_nowait(command or line)

    async def _interrupt(self) -> bool:
        """Cancel the answer being written; ``False`` when there is none."""
        if not self.answering:
            return False
        await self.session.cancel()
        return True

    async def _signals(self, signals: Any, leave: trio.CancelScope) -> None:
        async for _ in signals:
            if not await self._interrupt():
                leave.cancel()

    async def _say(self, text: str, save: str | None) -> None:
        """One exchange; a session the server lost is replaced and the text sent again."""
        paid = self.payment_token is not None
        try:
            await _turn(
                self.session, text, self.printer, can_pay=paid, save=save, on_interrupt=self._asked
            )
        except ClientError as exc:
            if self.client.closed or exc.code not in _SESSION_LOST:
                raise
            self.printer.end()
            self.printer.note("reconnected", f"{exc.message}; starting a new session", "yellow")
            self.session = await _open(self.client, self.agent, self.token, self.payment_token)
            await _turn(self.session, text, self.printer, can_pay=paid, save=save)

    def _asked(self, event: ev.InterruptRequest) -> None:
        self.pending = event

    async def _answer(self, save: str | None, leave: trio.CancelScope) -> None:
        """Take the queue in order: send each message and print its answer, run commands."""
        async for item in self.queue[1]:
            if item is _QUIT:
                break
            if item is _HELP:
                self.printer.note("help", "\n" + HELP, "blue")
            elif item is _NEW:
                await self.session.end()
                self.session = await _open(self.client, self.agent, self.token, self.payment_token)
                self.printer.note(
                    "new", f"session {self.session.id} with {self.session.agent}", "blue"
                )
            else:
                assert isinstance(item, str)
                self.answering = True
                try:
                    await self._say(item, save)
                finally:
                    self.answering = False
        leave.cancel()


def envelope_ws_url(url: str, agent: str | None) -> str:
    """The spec 003 WebSocket URL for what the user typed (``host:port``, ``http://``, ``ws://``)."""
    if "://" not in url:
        url = "ws://" + url
    scheme, _, rest = url.partition("://")
    scheme = {"http": "ws", "https": "wss"}.get(scheme, scheme)
    host, _, path = rest.partition("/")
    if path.rstrip("/").endswith("uamp/1/ws"):
        return f"{scheme}://{host}/{path}"
    prefix = f"/agents/{agent}" if agent else ""
    return f"{scheme}://{host}{prefix}/uamp/1/ws"


async def run_envelope_chat(
    args: argparse.Namespace, *, out: TextIO | None = None, reader: _LineReader | None = None
) -> int:
    """The chat over a spec 003 binding (``--binding envelope-ws|envelope-http|h3|grpc``).

    ``args`` are ``uamp chat``'s: ``url``, ``agent``, ``token`` (the capability
    token), ``envelope_key``, ``once``, ``plain``, ``history``, ``binding``, ``cafile``.
    """
    agent, token, once = args.agent, args.token, args.once
    key_path, history = args.envelope_key, args.history
    rich = False if args.plain else None
    import trio_websocket

    from uamp_proto.envelope import ContextRef, Delta, DeltaType

    from ..envelope.keys import read_private_key
    from .envelope import EnvelopeClientError, EnvelopeSigner

    out = out or sys.stdout
    printer = _Printer(out, out.isatty() if rich is None else rich)
    try:
        key = read_private_key(key_path, "--envelope-key") if key_path else None
    except ValueError as exc:
        print(f"uamp chat: {exc}", file=sys.stderr)
        return 1
    signer = EnvelopeSigner(key) if key else EnvelopeSigner.ephemeral()
    signer.cap_token = token

    def show(delta: Delta) -> None:
        payload = delta.payload or {}
        if delta.type is DeltaType.CHUNK and "text" in payload:
            printer.text(str(payload["text"]))
        elif delta.type is DeltaType.ERROR:
            printer.note("error", str(payload.get("message", payload)), "red")
        elif delta.type is DeltaType.CANCEL:
            printer.note("cancelled", "", "yellow")

    to = f"urn:uamp:agent:{agent}" if agent else "urn:uamp:agent:default"

    async def converse(client: Any) -> int:
        context: list[ContextRef] = []
        lines = [once] if once is not None else None
        line_reader = reader or (_LineReader(history) if lines is None else None)
        while True:
            if lines is not None:
                if not lines:
                    return 0
                line: object = lines.pop(0)
            else:
                assert line_reader is not None
                line = await trio.to_thread.run_sync(line_reader.read, abandon_on_cancel=True)
            if line in (_EOF, _INTERRUPT) or line in ("/quit", "/exit"):
                return 0
            assert isinstance(line, str)
            if not line.strip():
                continue
            try:
                reply = await client.ask(line.strip(), context=context, on_delta=show)
            except EnvelopeClientError as exc:
                print(f"uamp chat: {exc.code}: {exc.message}", file=sys.stderr)
                return 1
            printer.end()
            context = [reply.context()]
            final = reply.final
            if once is not None and (final is None or final.type is not DeltaType.DONE):
                return 1

    try:
        async with _envelope_client(args, signer, to) as client:
            return await converse(client)
    except (trio_websocket.HandshakeError, OSError, trio.TooSlowError, httpx.HTTPError) as exc:
        print(f"uamp chat: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except EnvelopeClientError as exc:
        print(f"uamp chat: {exc.code}: {exc.message}", file=sys.stderr)
        return 1


@contextlib.asynccontextmanager
async def _envelope_client(args: argparse.Namespace, signer: Any, to: str) -> AsyncIterator[Any]:
    """The client of ``args.binding`` for the server at ``args.url``."""
    from .envelope import EnvelopeHTTPClient, envelope_ws
    from .envelope_bindings import envelope_grpc, envelope_h3, envelope_wss

    binding, url, agent, cafile = args.binding, args.url, args.agent, args.cafile
    if binding == "envelope-ws":
        ws = envelope_ws_url(url, agent)
        if ws.startswith("wss://") and cafile:
            context = ssl.create_default_context(cafile=cafile)
            async with envelope_wss(ws, signer, to=to, ssl_context=context) as client:
                yield client
        else:
            async with envelope_ws(ws, signer, to=to) as client:
                yield client
        return
    if "://" not in url:
        url = "http://" + url
    base = url.rstrip("/")
    if agent and "/agents/" not in base:
        base += f"/agents/{agent}"
    if binding == "grpc":
        server = base.split("/agents/")[0]
        verify: Any = cafile or True
        async with envelope_grpc(server, signer, to=to, agent=agent, verify=verify) as client:
            yield client
    elif binding == "h3":
        async with envelope_h3(base, signer, to=to, verify=cafile or True) as client:
            yield client
    else:
        trusted: ssl.SSLContext | bool = (
            ssl.create_default_context(cafile=cafile) if cafile else True
        )
        async with (
            httpx.AsyncClient(verify=trusted, timeout=60) as http,
            EnvelopeHTTPClient(base, signer, to=to, http=http) as client,
        ):
            yield client


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
    output = p.add_mutually_exclusive_group()
    output.add_argument(
        "--json",
        action="store_true",
        help="for scripts: write each event the server sends as one JSON line, nothing else",
    )
    output.add_argument(
        "--quiet",
        "-q",
        action="store_true",
        help="for scripts: write the answer's text alone (failures go to stderr)",
    )
    p.add_argument(
        "--verify", metavar="PATH_OR_URL", help="check every response's signature against a JWKS"
    )
    p.add_argument("--save", metavar="FILE", help="save each response for `uamp verify`")
    p.add_argument("--chat", metavar="ROOM", help="join chat room ROOM (docs/chat.md)")
    p.add_argument("--name", help="your name in the chat room")
    p.add_argument(
        "--respond",
        choices=["every", "mention", "rules", "none"],
        help="when agents answer in a room this creates (default: when @mentioned)",
    )
    p.add_argument(
        "--history",
        metavar="FILE",
        help=f"where the prompt keeps its history (default {DEFAULT_HISTORY})",
    )
    p.add_argument(
        "--binding",
        choices=BINDINGS,
        default="uamp",
        help="uamp: the UAMP WebSocket (default); the others speak spec 003's signed "
        "envelopes over the length-prefixed WebSocket, HTTP + SSE, HTTP/3 or gRPC",
    )
    p.add_argument(
        "--envelope-key",
        metavar="PATH",
        help="spec 003 bindings: PEM key the envelopes are signed with (the one --token binds)",
    )
    p.add_argument(
        "--cafile",
        metavar="PATH",
        help="spec 003 bindings: CA file the server's TLS certificate is verified with",
    )


#: The ``--binding`` choices.
BINDINGS = ("uamp", "envelope-ws", "envelope-http", "h3", "grpc")


def _command(args: argparse.Namespace) -> int:
    if args.binding != "uamp":
        return trio.run(run_envelope_chat, args)
    return trio.run(
        lambda: run_chat(
            args.url,
            agent=args.agent,
            token=args.token,
            payment_token=args.payment_token,
            once=args.once,
            rich=False if args.plain else None,
            mode="json" if args.json else "quiet" if args.quiet else "human",
            verify=args.verify,
            save=args.save,
            history=args.history,
            room=args.chat,
            name=args.name,
            respond=args.respond,
        )
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m uamp_trio.client.chat URL ...`` (the same as ``uamp chat``)."""
    return run_command("uamp chat", __doc__ or "", _arguments, _command, argv)


if __name__ == "__main__":
    sys.exit(main())
