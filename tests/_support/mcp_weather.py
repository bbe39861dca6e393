"""A small MCP server (the ``mcp`` SDK's ``MCPServer``, FastMCP's successor) for the tests.

``python -m tests._support.mcp_weather`` serves on stdio; with a port number,
on Streamable HTTP at ``http://127.0.0.1:PORT/mcp``. Tools:

* ``get_weather(city)`` -- ``sunny and 21C in CITY``;
* ``environment(name)`` -- the value of an environment variable, or ``unset``
  (what a stdio server was given);
* ``header(name)`` -- a request header of the call (HTTP only);
* ``broken()`` -- always fails;
* ``more_tools()`` -- adds ``get_forecast(city)`` and says the tool list changed.
"""

from __future__ import annotations

import os
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("weather")


@server.tool()
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny and 21C in {city}"


@server.tool()
def environment(name: str) -> str:
    """The value of an environment variable of this server, or 'unset'."""
    return os.environ.get(name, "unset")


@server.tool()
def header(name: str, ctx: Context) -> str:
    """A header of the HTTP request that carried this call, or 'none'."""
    return (ctx.headers or {}).get(name.lower(), "none")


@server.tool()
def broken() -> str:
    """Always fails."""
    raise ToolError("the weather station is down")


def get_forecast(city: str) -> str:
    """Tomorrow's weather in a city."""
    return f"rain tomorrow in {city}"


@server.tool()
async def more_tools(ctx: Context) -> str:
    """Adds get_forecast and tells the client its tool list changed."""
    server.add_tool(get_forecast)
    if ctx.protocol_version == "2026-07-28":
        await ctx.notify_tools_changed()  # to subscriptions/listen streams
    else:
        await ctx.session.send_tool_list_changed()
    return "added get_forecast"


if __name__ == "__main__":
    if len(sys.argv) > 1:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
    else:
        server.run("stdio")
