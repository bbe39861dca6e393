"""The ``mcp`` bench driver: an agent as an MCP tool over Streamable HTTP.

A worker has its own HTTP client and MCP session (``initialize``,
``notifications/initialized``, ``tools/list`` for the agent's one tool; not
timed). Each request is a ``tools/call`` of that tool with the turn's
``prompt`` and, as ``session``, the conversation's id (the server's own
conversation state for the tool), a ``progressToken`` and
``Accept: text/event-stream``: the ``notifications/progress`` messages of the
SSE answer are the deltas, the JSON-RPC answer ends (``isError: true`` fails
as ``tool_error``, a JSON-RPC error as ``rpc_CODE``). A server that answers
with plain JSON instead has its result's text counted as one delta.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from functools import partial
from itertools import count
from typing import Any

import httpx
import orjson
import trio

from uamp_proto.errors import UampError
from uamp_proto.sse import SSEParser

from .config import BenchConfig, endpoint_url
from .dialects import Step
from .drivers import Send, http_error_kind, record_step, refused_send
from .stats import Sample
from .workload import Script

__all__ = ["McpDriver"]

#: The MCP revision the driver speaks.
PROTOCOL = "2025-06-18"


class _Failed(UampError):
    """The server refused or broke a call (its kind)."""


def _answer(message: Any, ident: int) -> dict[str, Any] | None:
    """The result of call ``ident`` if ``message`` is its answer, else ``None``."""
    if not isinstance(message, dict) or message.get("id") != ident or "method" in message:
        return None
    if "error" in message:
        error = message["error"]
        raise _Failed(f"rpc_{error.get('code') if isinstance(error, dict) else None}")
    result = message.get("result")
    if not isinstance(result, dict):
        raise _Failed("bad_response")
    return result


def _progress_text(message: Any) -> str:
    if not isinstance(message, dict) or message.get("method") != "notifications/progress":
        return ""
    params = message.get("params")
    text = params.get("message") if isinstance(params, dict) else None
    return text if isinstance(text, str) else ""


def _result_text(result: dict[str, Any]) -> str:
    content = result.get("content")
    blocks = content if isinstance(content, list) else []
    return "".join(
        b["text"] for b in blocks if isinstance(b, dict) and isinstance(b.get("text"), str)
    )


class _Peer:
    """One worker's MCP session."""

    def __init__(self, http: httpx.AsyncClient, endpoint: str, script: Script) -> None:
        self.http = http
        self.endpoint = endpoint
        self.script = script
        self.ids = count(1)
        self.headers = {
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
        }
        self.tool = ""

    async def call(
        self, method: str, params: dict[str, Any], sample: Sample | None = None
    ) -> dict[str, Any]:
        """Call ``method``; its result (progress meanwhile is ``sample``'s deltas)."""
        ident = next(self.ids)
        body = orjson.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
        async with self.http.stream(
            "POST", self.endpoint, content=body, headers=self.headers
        ) as response:
            if response.status_code >= 400:
                await response.aread()
                raise _Failed(f"http_{response.status_code}")
            session = response.headers.get("mcp-session-id")
            if session:
                self.headers["mcp-session-id"] = session
            if sample is not None:
                sample.bytes = response.num_bytes_downloaded
            if not response.headers.get("content-type", "").startswith("text/event-stream"):
                result = _answer(orjson.loads(await response.aread()), ident)
                if result is None:
                    raise _Failed("bad_response")
                if sample is not None:
                    record_step(sample, Step(text=_result_text(result)))
                return result
            parser = SSEParser()
            async for chunk in response.aiter_bytes():
                for event in parser.feed(chunk):
                    message = orjson.loads(event.data)
                    result = _answer(message, ident)
                    if result is not None:
                        if sample is not None:
                            sample.bytes = response.num_bytes_downloaded
                        return result
                    if sample is not None:
                        record_step(sample, Step(text=_progress_text(message)))
        raise _Failed("incomplete")

    async def notify(self, method: str) -> None:
        body = orjson.dumps({"jsonrpc": "2.0", "method": method})
        response = await self.http.post(self.endpoint, content=body, headers=self.headers)
        if response.status_code >= 400:
            raise _Failed(f"http_{response.status_code}")


class McpDriver:
    """MCP Streamable HTTP: an MCP session per worker, a ``tools/call`` per request."""

    def __init__(self, config: BenchConfig) -> None:
        self.endpoint = endpoint_url(config.url, config.agent, "mcp")
        self.protocols = {"HTTP/1.1"}
        self._headers = config.headers
        self._verify = not config.insecure
        self._timeout = config.timeout
        self._workload = config.workload()

    @contextlib.asynccontextmanager
    async def worker(self) -> AsyncIterator[Send]:
        async with httpx.AsyncClient(
            headers=dict(self._headers), verify=self._verify, timeout=self._timeout
        ) as http:
            peer = _Peer(http, self.endpoint, self._workload.script())
            try:
                info = {"name": "uamp-bench", "version": "1"}
                hello = {"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": info}
                await peer.call("initialize", hello)
                peer.headers["mcp-protocol-version"] = PROTOCOL
                await peer.notify("notifications/initialized")
                tools = (await peer.call("tools/list", {})).get("tools")
                peer.tool = tools[0]["name"] if isinstance(tools, list) and tools else ""
            except _Failed as exc:
                yield refused_send(str(exc))
                return
            except httpx.HTTPError as exc:
                yield refused_send(http_error_kind(exc))
                return
            yield partial(self._send, peer)

    async def _send(self, peer: _Peer, sample: Sample) -> None:
        turn = peer.script.next(sample)
        params = {
            "name": peer.tool,
            "arguments": {"prompt": turn.prompt, "session": turn.thread},
            "_meta": {"progressToken": next(peer.ids)},
        }
        try:
            result = await peer.call("tools/call", params, sample)
            sample.end = trio.current_time()
            if result.get("isError") is True:
                sample.error = "tool_error"
        except _Failed as exc:
            sample.error = str(exc)
        except httpx.HTTPError as exc:
            sample.error = http_error_kind(exc)
        except orjson.JSONDecodeError:
            sample.error = "bad_response"
        if not sample.end:
            sample.end = trio.current_time()
        if sample.error is None:  # the server keeps the history: none is resent
            peer.script.answered(turn, "")
