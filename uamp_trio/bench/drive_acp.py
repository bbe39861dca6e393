"""The ``acp`` bench driver: the Agent Client Protocol over WebSocket (spec 004).

A worker opens ``ws(s)://.../agents/NAME/acp/stream`` and says
``initialize`` once. A conversation is one ACP session (``session/new``),
each turn a ``session/prompt`` on it (the server keeps the history): its
``session/update`` notifications with ``agent_message_chunk`` text are the
deltas, the answer ends the turn (a ``stopReason`` other than ``end_turn``
or ``max_tokens`` fails with that reason), a JSON-RPC error fails as
``rpc_CODE``. Opening the session is not timed: the figures are the turn's.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from functools import partial
from itertools import count
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import attrs
import orjson
import trio

from uamp_proto.errors import UampError

from ..engines.ws_frames import WebSocketClosed
from .config import BenchConfig, endpoint_url
from .dialects import Step
from .drivers import JsonWebSocket, Send, dial_json, record_step, refused_send, ssl_context_of
from .stats import Sample
from .workload import Script

__all__ = ["AcpDriver", "ws_endpoint"]

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


@attrs.define
class _Peer:
    """One worker: its socket, its script, its JSON-RPC ids and its conversation's session."""

    socket: JsonWebSocket
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
            if sample is not None and message.get("method") == "session/update":
                record_step(sample, Step(text=_chunk_text(message)))


def _chunk_text(message: dict[str, Any]) -> str:
    params = message.get("params")
    update = params.get("update") if isinstance(params, dict) else None
    if not isinstance(update, dict) or update.get("sessionUpdate") != "agent_message_chunk":
        return ""
    content = update.get("content")
    text = content.get("text") if isinstance(content, dict) else None
    return text if isinstance(text, str) else ""


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
        peer = _Peer(socket, self._workload.script())
        try:
            try:
                await peer.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
            except (_Failed, WebSocketClosed, OSError, trio.BrokenResourceError):
                yield refused_send("initialize")
                return
            yield partial(self._send, peer)
        finally:
            await trio.aclose_forcefully(socket.stream)

    async def _send(self, peer: _Peer, sample: Sample) -> None:
        before = peer.socket.received
        try:
            await self._turn(peer, sample)
        except _Failed as exc:
            sample.error = str(exc)
        except WebSocketClosed:
            sample.error = "closed"
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
            sample.error = "network"
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
