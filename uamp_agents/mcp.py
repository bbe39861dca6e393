"""MCP servers as tool sources: an agent uses the tools of a Model Context Protocol server.

Theory of operation
-------------------
An :class:`McpServer` says where a server is: a command run as a subprocess
speaking MCP on its stdin/stdout, or a Streamable HTTP URL (with headers).
An :class:`McpToolSource` is one live connection to it, made with the
maintained ``mcp`` SDK (it runs on anyio, so under Trio): :meth:`~McpToolSource.run`
connects, lists the server's tools once, and then stays connected in the
nursery of whoever owns it -- a server for its whole life (``uamp serve
--mcp``), or one run (:func:`connect_mcp`). ``notifications/tools/list_changed``
makes it list them again; a connection that breaks is made again, with a
growing pause between attempts. It never raises: a server that cannot be
reached leaves the source without tools and its reason in :attr:`~McpToolSource.error`.

:meth:`McpToolSource.tools` gives the server's tools as ordinary
:class:`~uamp_agents.tools.Tool` objects, so the runtime calls them as it
calls any tool: concurrently with the other calls of a step, each failure --
a tool error, a timeout, a server gone -- turned into an error result the
model sees, never an exception that ends the run.

:class:`McpToolset` holds several sources and names their tools: a tool keeps
its own name unless it is taken (by the agent's own tools, or an earlier
server's), then it is called ``{server}_{tool}``; :meth:`McpToolset.describe`
says which, for the log at start.

A stdio server gets the environment MCP hosts give their servers (the SDK's
default set: ``HOME``, ``PATH``, ``USER`` ...) plus what its
:class:`McpServer` names, never the whole environment of the process that
starts it (which may hold the server's own secrets).
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
import shlex
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import attrs
import trio

from .errors import ToolError
from .tools import Tool, format_result

__all__ = ["McpServer", "McpToolSource", "McpToolset", "connect_mcp"]

log = logging.getLogger("uamp_agents.mcp")

#: Most tools taken from one server (a server listing more is cut there).
MAX_TOOLS = 256
#: Seconds between reconnection attempts: doubled from the first to the last.
RETRY = (1.0, 30.0)

_LABEL_BAD = re.compile(r"[^A-Za-z0-9_-]+")


def _label(text: str) -> str:
    return _LABEL_BAD.sub("_", text).strip("_")[:32] or "mcp"


def _pairs(value: Any, where: str) -> dict[str, str]:
    """ACP's ``[{name, value}]`` lists (``env``, ``headers``) as a dict."""
    if value is None:
        return {}
    if not isinstance(value, list):
        raise ValueError(f"{where} must be an array of {{name, value}}")
    out: dict[str, str] = {}
    for item in value:
        if not (
            isinstance(item, dict)
            and isinstance(item.get("name"), str)
            and isinstance(item.get("value"), str)
        ):
            raise ValueError(f"{where} must be an array of {{name, value}} strings")
        out[item["name"]] = item["value"]
    return out


@attrs.frozen(kw_only=True)
class McpServer:
    """Where an MCP server is.

    Attributes:
        name: A short label: tool prefixes and logs use it.
        command: The program and its arguments (stdio), or empty.
        url: The Streamable HTTP endpoint, or ``None``.
        headers: Sent with every HTTP request (an ``Authorization``...).
        env: Added to the SDK's default environment of a stdio server.
        cwd: The working directory of a stdio server.
    """

    name: str
    command: tuple[str, ...] = ()
    url: str | None = None
    headers: Mapping[str, str] = attrs.field(factory=dict)
    env: Mapping[str, str] = attrs.field(factory=dict)
    cwd: str | None = None

    def __attrs_post_init__(self) -> None:
        if bool(self.command) == bool(self.url):
            raise ValueError("an MCP server is a command or a URL, not both or neither")

    @classmethod
    def parse(cls, text: str, *, name: str | None = None) -> McpServer:
        """``http(s)://...`` is a Streamable HTTP server; anything else a command line."""
        text = text.strip()
        if text.startswith(("http://", "https://")):
            host = urlsplit(text).hostname or "mcp"
            return cls(name=name or _label(host.split(".")[0]), url=text)
        argv = tuple(shlex.split(text))
        if not argv:
            raise ValueError("an MCP server command is empty")
        program = argv[-1] if len(argv) > 1 else argv[0]
        stem = program.rsplit("/", 1)[-1].rsplit(".", 1)[0]
        return cls(name=name or _label(stem), command=argv)

    @classmethod
    def from_acp(cls, obj: object) -> McpServer:
        """An ACP ``McpServer`` (``session/new``): stdio ``{name, command, args, env}``
        or ``{type: "http", name, url, headers}``.

        Raises:
            ValueError: Neither shape, or a kind uamp does not connect (``sse``).
        """
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            raise ValueError("an MCP server needs a name")
        name = _label(obj["name"])
        kind = obj.get("type", "stdio")
        if kind == "http":
            url = obj.get("url")
            if not isinstance(url, str) or not url.startswith(("http://", "https://")):
                raise ValueError(f"MCP server {name}: url must be an http(s) URL")
            return cls(name=name, url=url, headers=_pairs(obj.get("headers"), "headers"))
        if kind != "stdio":
            raise ValueError(f"MCP server {name}: type {kind!r} is not connected (stdio, http)")
        command, args = obj.get("command"), obj.get("args", [])
        if not isinstance(command, str) or not command:
            raise ValueError(f"MCP server {name}: command must be a string")
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise ValueError(f"MCP server {name}: args must be strings")
        return cls(name=name, command=(command, *args), env=_pairs(obj.get("env"), "env"))

    def describe(self) -> str:
        """``stdio: COMMAND`` or ``http: URL`` (no headers, no environment: they may be secret)."""
        if self.url is not None:
            return f"http: {self.url}"
        return "stdio: " + shlex.join(self.command)


def _result_text(result: Any) -> str:
    """The text of a ``CallToolResult``: its text blocks, else its structured content."""
    parts: list[str] = []
    for block in getattr(result, "content", None) or []:
        text = getattr(block, "text", None)
        if isinstance(text, str):
            parts.append(text)
        else:
            parts.append(f"[{getattr(block, 'type', 'content')}]")
    if parts:
        return "\n".join(parts)
    structured = getattr(result, "structured_content", None)
    return format_result(structured) if structured is not None else ""


class McpToolSource:
    """The tools of one MCP server, over one supervised connection (see the module docstring).

    Args:
        server: Where the server is.
        call_timeout: Seconds a tool call may take; then it is an error result.
        connect_timeout: Seconds to connect and list the tools.
    """

    def __init__(
        self,
        server: McpServer,
        *,
        call_timeout: float = 60.0,
        connect_timeout: float = 30.0,
        mode: str = "auto",
    ) -> None:
        self.server = server
        #: The SDK's connect mode: ``auto`` (the 2026-07-28 revision when the
        #: server speaks it, else the initialize handshake) or ``legacy``.
        self.mode = mode
        self.call_timeout = call_timeout
        self.connect_timeout = connect_timeout
        #: Why the source has no connection now (``None`` while connected).
        self.error: str | None = "not connected yet"
        self._client: Any = None
        self._listed: list[Any] = []
        self._changed = trio.Event()
        self._broken = trio.Event()
        #: Called after each listing (the toolset re-announces its names).
        self.on_listed: Callable[[McpToolSource], None] | None = None

    @property
    def connected(self) -> bool:
        """Whether a connection is up."""
        return self._client is not None

    def tool_names(self) -> list[str]:
        """The server's own names of its tools, as last listed."""
        return [t.name for t in self._listed]

    def tools(self, rename: Callable[[str], str | None] = lambda name: name) -> list[Tool]:
        """The server's tools as :class:`Tool` objects (``rename``: ``None`` leaves one out)."""
        out: list[Tool] = []
        for listed in self._listed:
            name = rename(listed.name)
            if name is None:
                continue
            schema = listed.input_schema if isinstance(listed.input_schema, dict) else {}
            out.append(
                Tool(
                    name=name,
                    description=listed.description or f"{listed.name} ({self.server.name})",
                    parameters=schema or {"type": "object"},
                    fn=self._caller(listed.name),
                    thread=False,
                    # The server checks its own arguments (and its schema may
                    # use JSON Schema the runtime's validator does not).
                    validate_arguments=False,
                )
            )
        return out

    def _caller(self, remote: str) -> Callable[..., Any]:
        async def call(**arguments: Any) -> str:
            return await self.call(remote, arguments)

        return call

    async def call(self, name: str, arguments: dict[str, Any]) -> str:
        """Call the server's tool ``name``; its text.

        Raises:
            ToolError: The server is not connected, did not answer in time,
                went away, or says the call failed.
        """
        from mcp.shared.exceptions import MCPError

        client = self._client
        label = self.server.name
        if client is None:
            raise ToolError(f"MCP server {label} is not connected: {self.error}")
        try:
            with trio.fail_after(self.call_timeout):
                result = await client.call_tool(name, arguments)
        except trio.TooSlowError:
            raise ToolError(
                f"MCP server {label}: {name} did not answer within {self.call_timeout:g} s"
            ) from None
        except MCPError as exc:
            if exc.code == -32000:  # the SDK's "connection closed"
                self._broken.set()
            raise ToolError(f"MCP server {label}: {exc}") from None
        except Exception as exc:  # a transport failure: reconnect, and tell the model
            self._broken.set()
            raise ToolError(f"MCP server {label} failed: {type(exc).__name__}: {exc}") from None
        text = _result_text(result)
        if getattr(result, "is_error", False):
            raise ToolError(text or f"{name} failed")
        return text

    # --- the connection --------------------------------------------------------------

    def _transport(self) -> Any:
        server = self.server
        if server.url is not None:
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            http = httpx2.AsyncClient(
                headers=dict(server.headers), timeout=httpx2.Timeout(30.0, read=300.0)
            )
            return http, streamable_http_client(server.url, http_client=http)
        from mcp.client.stdio import StdioServerParameters, get_default_environment

        env = {**get_default_environment(), **server.env}
        params = StdioServerParameters(
            command=server.command[0], args=list(server.command[1:]), env=env, cwd=server.cwd
        )
        return None, params

    async def _on_message(self, message: Any) -> None:
        import mcp_types

        if isinstance(message, mcp_types.ToolListChangedNotification):
            self._changed.set()

    async def _list(self, client: Any) -> None:
        listed: list[Any] = []
        cursor = None
        while len(listed) < MAX_TOOLS:
            page = await client.list_tools(cursor=cursor, cache_mode="bypass")
            listed.extend(page.tools)
            cursor = getattr(page, "next_cursor", None)
            if not cursor:
                break
        self._listed = listed[:MAX_TOOLS]
        if self.on_listed is not None:
            self.on_listed(self)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Stay connected until cancelled; ``started`` after the first attempt, however it went."""
        from mcp import Client

        pause = RETRY[0]
        started = False
        while True:
            http, target = self._transport()
            # The deadline covers connecting and the first listing, and is
            # lifted once they are done: the scope encloses the SDK's own
            # task groups, as Trio's nesting rules want.
            with trio.CancelScope(deadline=trio.current_time() + self.connect_timeout) as scope:
                try:
                    async with contextlib.AsyncExitStack() as stack:
                        if http is not None:
                            await stack.enter_async_context(http)
                        client = await stack.enter_async_context(
                            Client(target, message_handler=self._on_message, mode=self.mode)
                        )
                        # Subscribed to changes before the first listing: no
                        # change between the two goes unnoticed.
                        watchers = await stack.enter_async_context(trio.open_nursery())
                        await watchers.start(self._listen, client)
                        await self._list(client)
                        scope.deadline = math.inf
                        self._client, self.error, pause = client, None, RETRY[0]
                        log.info("MCP server %s connected: %s", self.server.name, self.tool_names())
                        if not started:
                            started = True
                            task_status.started()
                        await self._serve(client)
                        watchers.cancel_scope.cancel()
                except Exception as exc:
                    self.error = _describe(exc)
                    log.warning(
                        "MCP server %s (%s): %s",
                        self.server.name,
                        self.server.describe(),
                        self.error,
                    )
                finally:
                    self._client = None
                    self._broken = trio.Event()
            if scope.cancelled_caught:
                self.error = f"no answer within {self.connect_timeout:g} s"
                log.warning("MCP server %s: %s", self.server.name, self.error)
            if not started:
                started = True
                task_status.started()
            await trio.sleep(pause)
            pause = min(pause * 2, RETRY[1])

    async def _serve(self, client: Any) -> None:
        """List the tools again when the server says they changed, until the connection breaks.

        Handshake-era servers say so with ``notifications/tools/list_changed``
        (:meth:`_on_message`); a 2026-07-28 connection subscribes to it
        (``subscriptions/listen``, :meth:`_listen`).
        """
        while True:
            await _first(self._changed, self._broken)
            if self._broken.is_set():
                return
            self._changed = trio.Event()
            with trio.fail_after(self.connect_timeout):
                await self._list(client)

    async def _listen(
        self, client: Any, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """On a 2026-07-28 connection: ``started`` once subscribed to tool list changes."""
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS

        started = False
        try:
            if client.protocol_version in MODERN_PROTOCOL_VERSIONS:
                async with client.listen(tools_list_changed=True) as changes:
                    task_status.started()
                    started = True
                    async for _ in changes:
                        self._changed.set()
        except Exception as exc:  # no subscription: the tools are listed once
            log.info("MCP server %s: no tool change subscription: %s", self.server.name, exc)
        if not started:
            task_status.started()


def _describe(exc: BaseException) -> str:
    """``Class: message`` of the one failure inside ``exc`` (groups unwrapped)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def _first(*events: trio.Event) -> None:
    """Wait until one of ``events`` is set."""
    async with trio.open_nursery() as nursery:

        async def wait(event: trio.Event) -> None:
            await event.wait()
            nursery.cancel_scope.cancel()

        for event in events:
            nursery.start_soon(wait, event)


class McpToolset:
    """Several MCP servers' tools under one naming (see the module docstring).

    Args:
        servers: The servers, in order (an earlier one keeps a contested name).
        reserved: Names already taken (the agents' own tools).
        call_timeout: Seconds a tool call may take.
    """

    def __init__(
        self,
        servers: Sequence[McpServer],
        *,
        reserved: Sequence[str] = (),
        call_timeout: float = 60.0,
        connect_timeout: float = 30.0,
        mode: str = "auto",
    ) -> None:
        self.sources = [
            McpToolSource(s, call_timeout=call_timeout, connect_timeout=connect_timeout, mode=mode)
            for s in servers
        ]
        self.reserved = set(reserved)

    def _names(self) -> list[dict[str, str | None]]:
        """For each source, its tools' names: its own, prefixed on a clash, or ``None``."""
        taken = set(self.reserved)
        out: list[dict[str, str | None]] = []
        for source in self.sources:
            names: dict[str, str | None] = {}
            for own in source.tool_names():
                name: str | None = own
                if own in taken:
                    name = f"{source.server.name}_{own}"
                    if name in taken:
                        name = None
                if name is not None:
                    taken.add(name)
                names[own] = name
            out.append(names)
        return out

    def tools(self) -> list[Tool]:
        """Every connected server's tools, named."""
        out: list[Tool] = []
        for source, names in zip(self.sources, self._names(), strict=True):
            out.extend(source.tools(names.get))
        return out

    def describe(self) -> list[str]:
        """One line per server: where it is and its tools (and which were renamed)."""
        lines = []
        for source, names in zip(self.sources, self._names(), strict=True):
            where = f"MCP {source.server.name} ({source.server.describe()})"
            if not source.connected and not names:
                lines.append(f"{where}: {source.error}")
                continue
            shown = []
            for own, name in names.items():
                if name == own:
                    shown.append(own)
                elif name is None:
                    shown.append(f"{own} (left out: its name and the prefixed one are taken)")
                else:
                    shown.append(f"{own} as {name} (its name is taken)")
            lines.append(f"{where}: {', '.join(shown) or 'no tools'}")
        return lines

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep every server connected until cancelled; ``started`` once each was tried."""
        async with trio.open_nursery() as nursery:
            for source in self.sources:
                await nursery.start(source.run)
            task_status.started()


@contextlib.asynccontextmanager
async def connect_mcp(
    *servers: McpServer,
    reserved: Sequence[str] = (),
    call_timeout: float = 60.0,
    mode: str = "auto",
) -> AsyncIterator[McpToolset]:
    """Connect to ``servers`` for the block (their sessions live in its nursery).

    ::

        async with connect_mcp(McpServer.parse("python weather.py")) as mcp:
            turn = await agent.derive(tools=mcp.tools()).run("get weather in Paris")
    """
    toolset = McpToolset(servers, reserved=reserved, call_timeout=call_timeout, mode=mode)
    async with trio.open_nursery() as nursery:
        await nursery.start(toolset.run)
        try:
            yield toolset
        finally:
            nursery.cancel_scope.cancel()
