"""``uamp chat URL --chat ROOM``: a terminal in a chat room (docs/chat.md).

::

    uamp chat 127.0.0.1:8765 --chat lobby --name alice     # terminal 1
    uamp chat 127.0.0.1:8765 --chat lobby --name bob       # terminal 2

Each line typed is posted to the room; the room's messages print as
``name: text`` (an agent's answer streams in as it is written), with who
came and went, who is typing, and read receipts beside them. Messages from
the others are marked read as they are shown. On a terminal, typing at the
prompt tells the others (``input.typing``, at most once every
:data:`TYPING_EVERY` seconds, and once more when the line is sent).

Commands: ``/who`` (who is here), ``/help``, ``/quit`` (also Ctrl-D or
Ctrl-C). ``--respond every|mention|rules|none`` sets when agents answer,
for a room this command creates (default: when ``@mentioned``).
"""

from __future__ import annotations

import contextlib
import signal
from typing import Any, Final

import trio

from uamp_proto import events as ev
from uamp_proto import types as ty

from .uamp import ClientError, ClientSession

__all__ = ["TYPING_EVERY", "run_room"]

#: Least seconds between two ``input.typing`` a typing user sends.
TYPING_EVERY: Final = 2.0

ROOM_HELP = """\
/who      who is in the room
/help     this list
/quit     leave (also Ctrl-D, Ctrl-C)
Anything else is posted to the room; @name asks an agent."""


class _Room:
    """Prints what the room says; posts what is typed."""

    def __init__(
        self, session: ClientSession, printer: Any, me: str, nursery: trio.Nursery
    ) -> None:
        self.session = session
        self.nursery = nursery
        self.printer = printer
        self.me = me
        self.here: dict[str, str] = {}
        #: Agent answers being streamed: response id -> the agent's name.
        self.streaming: dict[str, str] = {}
        #: Texts already streamed, by agent: their message.created is not printed again.
        self.streamed: dict[str, list[str]] = {}
        self._typed_at = float("-inf")

    async def show(self) -> None:
        """Print the room's events until the session ends."""
        async for event in self.session.room_events():
            await self._one(event)

    async def _one(self, event: ev.Event) -> None:
        p = self.printer
        if isinstance(event, ev.PresenceOnline):
            self.here[event.user_id or "?"] = event.username or event.user_id or "?"
            p.note("online", f"{event.username or event.user_id} joined", "blue")
        elif isinstance(event, ev.PresenceOffline):
            self.here.pop(event.user_id or "?", None)
            p.note("offline", f"{event.username or event.user_id} left", "blue")
        elif isinstance(event, ev.PresenceTyping):
            who = event.username or event.user_id
            p.note("typing", f"{who} {'is typing' if event.is_typing else 'stopped'}", "dim")
        elif isinstance(event, ev.MessageRead):
            p.note("read", f"{event.user_id} read up to #{event.seq}", "dim")
        elif isinstance(event, ev.MessageCreated):
            await self._message(event)
        elif isinstance(event, ev.ResponseCreated) and event.response_id:
            name = _sender_name(event)
            self.streaming[event.response_id] = name
            p.text(f"{name}: ")
        elif isinstance(event, ev.ResponseDelta) and isinstance(event.delta, ty.DeltaText):
            p.text(event.delta.text)
        elif isinstance(event, ev.ResponseDone) and event.response_id in self.streaming:
            name = self.streaming.pop(event.response_id)
            text = "".join(i.text for i in event.response.output if isinstance(i, ty.TextContent))
            self.streamed.setdefault(name, []).append(text)
            p.end()
        elif isinstance(event, ev.SessionErrorEvent):
            p.note("error", f"{event.error.code}: {event.error.message}", "red")

    async def _message(self, event: ev.MessageCreated) -> None:
        sender = event.sender
        name = (sender.name or sender.id) if sender is not None else "?"
        text = event.message.text if event.message is not None else ""
        done = self.streamed.get(name)
        if done and text in done:
            done.remove(text)  # printed while it streamed
        else:
            self.printer.note("", f"{name}: {text}", "bold")
        if sender is not None and sender.id != self.me and event.seq is not None:
            with contextlib.suppress(ClientError):
                await self.session.mark_read(event.seq)

    def changed(self) -> None:
        """The prompt's text changed (called in the trio thread)."""
        now = trio.current_time()
        if now - self._typed_at >= TYPING_EVERY:
            self._typed_at = now
            self.nursery.start_soon(self._send_typing, True)

    async def _send_typing(self, is_typing: bool) -> None:
        with contextlib.suppress(ClientError):
            await self.session.typing(is_typing)

    async def post(self, text: str) -> None:
        """Post a line (telling the room the typing is over)."""
        self._typed_at = float("-inf")
        await self.session.say(text)

    def who(self) -> str:
        """Who is here, as one line."""
        return ", ".join(sorted(self.here.values())) or "nobody else"


def _sender_name(event: ev.Event) -> str:
    sender = event.unknown.get("sender") if event.unknown else None
    if isinstance(sender, dict):
        return str(sender.get("name") or sender.get("id") or "agent")
    return "agent"


async def run_room(
    client: Any,
    *,
    room: str,
    name: str | None,
    agent: str | None,
    token: str | None,
    payment_token: str | None,
    respond: str | None,
    printer: Any,
    reader: Any,
) -> int:
    """Join ``room`` on ``client`` and run the terminal until the user leaves."""
    settings: dict[str, Any] = {}
    if name:
        settings["username"] = name
    if respond:
        settings["respond"] = respond
    config = ty.SessionConfig(modalities=["text"], extensions={"chat": settings})
    session = await client.create_session(
        agent, token=token, payment_token=payment_token, config=config, chat=room
    )
    me = name or session.id
    printer.note("joined", f"chat {room!r} as {me}; /help for commands", "blue")
    with reader.output(printer), trio.open_signal_receiver(signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            view = _Room(session, printer, me, nursery)
            nursery.start_soon(view.show)
            nursery.start_soon(_leave_on, signals, nursery.cancel_scope)
            token_ = trio.lowlevel.current_trio_token()

            def changed() -> None:
                with contextlib.suppress(trio.RunFinishedError):
                    token_.run_sync_soon(view.changed)

            reader.on_change = changed
            while True:
                line = await trio.to_thread.run_sync(reader.read, abandon_on_cancel=True)
                if not isinstance(line, str):  # end of input or Ctrl-C
                    break
                line = line.strip()
                if not line:
                    continue
                if line in ("/quit", "/exit"):
                    break
                if line == "/help":
                    printer.note("help", "\n" + ROOM_HELP, "blue")
                elif line == "/who":
                    printer.note("who", view.who(), "blue")
                elif line.startswith("/"):
                    printer.note("help", f"unknown command {line}; /help lists them", "yellow")
                else:
                    await view.post(line)
            with contextlib.suppress(ClientError):
                await session.end()
            nursery.cancel_scope.cancel()
    return 0


async def _leave_on(signals: Any, scope: trio.CancelScope) -> None:
    async for _ in signals:
        scope.cancel()
        return
