"""The ``acp`` and ``acp-stdio`` bench drivers: the Agent Client Protocol (spec 004).

``acp``: a worker opens ``ws(s)://.../agents/NAME/acp/stream``;
``acp-stdio``: a worker starts its own agent process (the command the URL
argument holds, e.g. ``uamp acp``) and speaks to it over its stdin and
stdout, newline-delimited JSON as editors do (one client per agent process,
so one process per worker; its stderr is discarded). Either way the worker
says ``initialize`` once. A conversation is one ACP session (``session/new``),
each turn a ``session/prompt`` on it (the server keeps the history): its
``session/update`` notifications with ``agent_message_chunk`` text are the
deltas, the answer ends the turn (a ``stopReason`` other than ``end_turn``
or ``max_tokens`` fails with that reason), a JSON-RPC error fails as
``rpc_CODE``. Opening the session is not timed: the figures are the turn's.
A request the agent makes of the client (``fs/read_text_file``,
``session/request_permission`` ...) is answered "method not found": the
bench is a client with no capabilities.
"""

from __future__ import annotations

import contextlib
import shlex
import subprocess
from collections.abc import AsyncIterator, Iterator
from functools import partial
from itertools import count
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

import attrs
import orjson
import trio

from uamp_proto.errors import UampError

from ..engines.ws_frames import WebSocketClosed
from .config import BenchConfig, endpoint_url
from .dialects import Step
from .drivers import Send, dial_json, record_step, refused_send, ssl_context_of
from .stats import Sample
from .workload import Script

__all__ = ["AcpDriver", "AcpStdioDriver", "JsonLines", "ws_endpoint"]

#: Stop reasons of a turn that went well.
_GOOD_STOPS = frozenset({"end_turn", "max_tokens"})


def ws_endpoint(config: BenchConfig, route: str) -> str:
    """The WebSocket URL of the agent's ``route`` (``ws(s)://`` URLs are kept)."""
    if config.url.startswith(("ws://", "wss://")):
        return config.url
    parts = urlsplit(endpoint_url(config.url, config.agent, route))
    scheme = "wss" if parts.scheme == "https" else "ws"
    return urlunsplit((scheme, parts.netloc, parts.path, parts.query, ""))


class _Failed(UampError):
    """A JSON-RPC call the server answered with an error (its kind)."""


class JsonChannel(Protocol):
    """Where JSON-RPC messages go and come from: a WebSocket, or a process's stdio."""

    received: int

    async def send(self, *messages: Any) -> None: ...

    async def next_event(self) -> dict[str, Any]: ...


#: The longest line read from an agent process (a bench's answers are short).
MAX_LINE = 16 * 1024 * 1024


class JsonLines:
    """Newline-delimited JSON over a process's stdin and stdout (ACP's stdio transport)."""

    def __init__(self, process: trio.Process) -> None:
        assert process.stdin is not None and process.stdout is not None
        self.process = process
        self._stdin = process.stdin
        self._stdout = process.stdout
        self._buffer = bytearray()
        self.received = 0

    async def send(self, *messages: Any) -> None:
        """Write each of ``messages`` as one line."""
        await self._stdin.send_all(b"".join(orjson.dumps(m) + b"\n" for m in messages))

    async def next_event(self) -> dict[str, Any]:
        """The next message the agent wrote (blank lines skipped).

        Raises:
            trio.BrokenResourceError: The agent closed its stdout, or wrote a line
                over :data:`MAX_LINE`.
        """
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line = bytes(self._buffer[:end])
                del self._buffer[: end + 1]
                if not line.strip():
                    continue
                message = orjson.loads(line)
                return message if isinstance(message, dict) else {}
            if len(self._buffer) > MAX_LINE:
                raise trio.BrokenResourceError("the agent wrote a line too long")
            data = await self._stdout.receive_some(65536)
            if not data:
                raise trio.BrokenResourceError("the agent closed its stdout")
            self.received += len(data)
            self._buffer += data


@attrs.define
class _Peer:
    """One worker: its channel, its script, its JSON-RPC ids and its conversation's session."""

    socket: JsonChannel
    script: Script
    ids: Iterator[int] = attrs.field(factory=lambda: count(1))
    session: str | None = None

    async def call(
        self, method: str, params: dict[str, Any], sample: Sample | None = None
    ) -> dict[str, Any]:
        """Call ``method``; its result (notifications meanwhile are ``sample``'s deltas)."""
        ident = next(self.ids)
        await self.socket.send({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
        while True:
            message = await self.socket.next_event()
            if message.get("id") == ident and "method" not in message:
                if "error" in message:
                    error = message["error"]
                    code = error.get("code") if isinstance(error, dict) else None
                    raise _Failed(f"rpc_{code}")
                result = message.get("result")
                if not isinstance(result, dict):
                    raise _Failed("bad_response")
                return result
            if "method" in message and "id" in message:  # the agent asks the client: no
                error = {"code": -32601, "message": "the bench client has no such method"}
                await self.socket.send({"jsonrpc": "2.0", "id": message["id"], "error": error})
            elif sample is not None and message.get("method") == "session/update":
                record_step(sample, _update_step(message))


def _update_step(message: dict[str, Any]) -> Step:
    """A ``session/update``'s text (``agent_message_chunk``) or tool call (``tool_call``:
    its title, which names the tool)."""
    params = message.get("params")
    update = params.get("update") if isinstance(params, dict) else None
    kind = update.get("sessionUpdate") if isinstance(update, dict) else None
    if kind == "tool_call":
        title = update.get("title") if isinstance(update, dict) else None
        return Step(tool=title if isinstance(title, str) and title else None)
    if kind != "agent_message_chunk" or not isinstance(update, dict):
        return Step()
    content = update.get("content")
    text = content.get("text") if isinstance(content, dict) else None
    return Step(text=text if isinstance(text, str) else "")


class AcpDriver:
    """ACP over WebSocket: a connection per worker, an ACP session per conversation."""

    def __init__(self, config: BenchConfig) -> None:
        self.endpoint = ws_endpoint(config, "acp/stream")
        self.protocols = {"websocket"}
        self._headers = config.headers
        self._ssl = ssl_context_of(config)
        self._workload = config.workload()

    @contextlib.asynccontextmanager
    async def worker(self) -> AsyncIterator[Send]:
        socket = await dial_json(self.endpoint, self._headers, self._ssl)
        if isinstance(socket, str):
            yield refused_send(socket)
            return
        try:
            async with self._initialized(socket) as send:
                yield send
        finally:
            await trio.aclose_forcefully(socket.stream)

    @contextlib.asynccontextmanager
    async def _initialized(self, channel: JsonChannel) -> AsyncIterator[Send]:
        """``initialize`` on ``channel``; the worker's ``send`` (a refused one if that failed)."""
        peer = _Peer(channel, self._workload.script())
        try:
            await peer.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        except (_Failed, WebSocketClosed, OSError, trio.BrokenResourceError,
                orjson.JSONDecodeError):  # fmt: skip
            yield refused_send("initialize")
            return
        yield partial(self._send, peer)

    async def _send(self, peer: _Peer, sample: Sample) -> None:
        before = peer.socket.received
        try:
            await self._turn(peer, sample)
        except _Failed as exc:
            sample.error = str(exc)
        except WebSocketClosed:
            sample.error = "closed"
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
            sample.error = "network"  # (an agent process that exited too)
        except orjson.JSONDecodeError:
            sample.error = "bad_response"
        sample.bytes = peer.socket.received - before
        if not sample.end:
            sample.end = trio.current_time()
        if sample.error is not None:
            peer.session = None  # a failed turn ends its conversation

    async def _turn(self, peer: _Peer, sample: Sample) -> None:
        turn = peer.script.next(sample)
        if turn.index == 0 or peer.session is None:
            opened = await peer.call("session/new", {"cwd": "/", "mcpServers": []})
            session = opened.get("sessionId")
            if not isinstance(session, str):
                raise _Failed("bad_response")
            peer.session = session
            sample.start = trio.current_time()
        prompt = {"sessionId": peer.session, "prompt": [{"type": "text", "text": turn.prompt}]}
        result = await peer.call("session/prompt", prompt, sample)
        sample.end = trio.current_time()
        reason = result.get("stopReason")
        if reason not in _GOOD_STOPS:
            sample.error = reason if isinstance(reason, str) else "bad_response"


#: Seconds an agent process has to exit once its stdin is closed, before it is killed.
_EXIT_GRACE = 5.0


class AcpStdioDriver(AcpDriver):
    """ACP over stdio: an agent process per worker (the command in ``config.url``)."""

    def __init__(self, config: BenchConfig) -> None:
        self.command = shlex.split(config.url)
        if not self.command:
            raise ValueError("--transport acp-stdio needs the agent's command as its URL")
        self.endpoint = config.url
        self.protocols = {"stdio"}
        self._workload = config.workload()

    @contextlib.asynccontextmanager
    async def worker(self) -> AsyncIterator[Send]:
        try:
            process = await trio.lowlevel.open_process(
                self.command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
        except OSError:
            yield refused_send("spawn")
            return
        try:
            async with self._initialized(JsonLines(process)) as send:
                yield send
        finally:
            with trio.CancelScope(shield=True):
                await _stop(process)


async def _stop(process: trio.Process) -> None:
    """Close the agent's stdin (it exits at EOF); kill it if it has not within the grace."""
    assert process.stdin is not None
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        await process.stdin.aclose()
    with trio.move_on_after(_EXIT_GRACE):
        await process.wait()
        return
    process.kill()
    await process.wait()
