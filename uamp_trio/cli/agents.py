"""Where the command line meets the agent runtime: ``--agent``, the default agent, and
what ``uamp serve``'s flags give UAP agents.

This is the one module of :mod:`uamp_trio` that imports :mod:`uamp_agents`
(always inside a function, so ``pip install 'uamp[server]'`` without the
``agents`` extra still serves a hand-written agent). :func:`load_agent` turns
``module:attr`` (or ``path/to/file.py:attr``) into a
:class:`~uamp_proto.responder.Responder`, wrapping a UAP
:class:`uamp_agents.Agent` with :func:`uamp_agents.bridge.serve_agent`;
:func:`default_agent` is what is hosted without ``--agent``. Once loaded, a
UAP agent is found again inside its wrappers (:func:`uap_endpoint`) to be
given ``--approve`` (:func:`approve_tools`), ``--mcp`` servers
(:func:`mcp_tools`) and, with ``--otel``, the tracer of its model and tool
calls (:func:`open_tracing`).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import trio

from uamp_proto.responder import Responder

from ..cli_checks import import_agent_file, import_failed

__all__ = [
    "approve_tools",
    "default_agent",
    "load_agent",
    "mcp_tools",
    "open_tracing",
    "uap_endpoint",
]


def _import(module_name: str) -> Any:
    """Import ``module_name``, the current directory first on the path (as uvicorn does)."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    return importlib.import_module(module_name)


def load_agent(spec: str) -> Responder:
    """Load ``module:attr`` as an agent.

    ``attr`` (dotted for nested names) may be an object satisfying
    :class:`~uamp_proto.responder.Responder`, a UAP agent
    (:class:`uamp_agents.Agent`), or a class / zero-argument factory
    returning either. A UAP agent is served through
    :func:`uamp_agents.bridge.serve_agent` under its ``name``, or the
    attribute's name when it has none.

    Raises:
        ValueError: The spec is malformed or does not yield an agent.
    """
    module_name, sep, attr = spec.rpartition(":")
    if not sep or not module_name or not attr:
        raise ValueError(
            f"--agent {spec!r}: expected 'module:attribute' or 'path/to/file.py:attribute'"
        )
    obj: Any
    if module_name.endswith(".py") or "/" in module_name or os.sep in module_name:
        obj = import_agent_file(module_name, spec)
    else:
        try:
            obj = _import(module_name)
        except ImportError as exc:
            missing = exc.name or ""
            if module_name != missing and not module_name.startswith(missing + "."):
                # The module was found; something it imports was not.
                raise ValueError(import_failed(spec, repr(module_name), exc)) from None
            raise ValueError(
                f"--agent {spec!r}: cannot import {module_name!r}: {exc} (neither in the "
                "current directory nor installed)"
            ) from None
        except Exception as exc:  # the module itself failed: a syntax error, a raise at import
            raise ValueError(import_failed(spec, repr(module_name), exc)) from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(f"--agent {spec!r}: {module_name!r} has no {attr!r}") from None
    label = attr.rsplit(".", 1)[-1]
    if _is_uap_agent(obj):
        return _bridge(obj, label)
    if isinstance(obj, type) or (not isinstance(obj, Responder) and callable(obj)):
        try:
            obj = obj()
        except Exception as exc:
            raise ValueError(f"--agent {spec!r}: calling {attr}() failed: {exc}") from exc
    if _is_uap_agent(obj):
        return _bridge(obj, label)
    if not isinstance(obj, Responder):
        raise ValueError(
            f"--agent {spec!r}: {type(obj).__name__} is not an agent "
            "(needs name, capabilities() and async respond(request, emit))"
        )
    return obj


def _is_uap_agent(obj: Any) -> bool:
    from uamp_agents.agent import Agent as UAPAgent

    return isinstance(obj, UAPAgent)


def _bridge(obj: Any, label: str) -> Responder:
    from uamp_agents.bridge import serve_agent

    return serve_agent(obj, name=obj.name or label)


def default_agent() -> Responder:
    """What ``uamp serve`` and ``uamp acp`` host without ``--agent``: the UAP demo agent.

    It is :func:`uamp_agents.bridge.demo_agent` served through the bridge,
    wrapped in :class:`uamp_trio.demo.CallTaker` so that it takes voice calls
    (docs/voice.md) and echoes their audio.
    (:class:`uamp_trio.demo.DemoAgent`, the hand-written agent that needs no
    runtime, is still there for tests and for ``--agent uamp_trio.demo:DemoAgent``.)
    """
    from uamp_agents.bridge import demo_agent, serve_agent
    from uamp_trio.demo import CallTaker

    return CallTaker(serve_agent(demo_agent("demo")))


def uap_endpoint(agent: Any) -> Any:
    """The UAP agent (an ``AgentEndpoint``) inside ``agent``'s wrappers (metrics,
    ``CallTaker``), or ``None`` when it is another kind of agent."""
    from uamp_agents.bridge import AgentEndpoint

    from ..hosting.agents import unwrapped

    while agent is not None and not isinstance(agent, AgentEndpoint):
        agent = getattr(unwrapped(agent), "inner", None)
    return agent


def approve_tools(agents: Sequence[Responder], tools: Sequence[str]) -> None:
    """``--approve``: a person approves calls of these tools first, in every UAP agent."""
    for agent in agents:
        found = uap_endpoint(agent)
        if found is None:
            print(
                f"uamp serve: --approve has no effect on {agent.name!r} (not a UAP agent)",
                file=sys.stderr,
            )
        else:
            found.approve = frozenset(found.approve | set(tools))


def mcp_tools(agents: Sequence[Responder], specs: Sequence[str]) -> Callable[[], Any]:
    """``--mcp``: the service that keeps the MCP servers connected for the UAP agents.

    Their tools keep their own names unless an agent's tool (or an earlier
    server's) has it; what each server gave, under which name, is printed
    once the servers were tried.

    Raises:
        ValueError: A ``--mcp`` value is neither a command nor a URL.
    """
    from uamp_agents.mcp import McpServer, McpToolset

    servers = [McpServer.parse(spec) for spec in specs]
    found = {a.name: uap_endpoint(a) for a in agents}
    endpoints = [e for e in found.values() if e is not None]
    own = sorted({t.name for e in endpoints for t in e.agent.resolved_tools})
    toolset = McpToolset(servers, reserved=own)
    for uap in endpoints:
        uap.tool_sources.append(toolset)
    others = [name for name, e in found.items() if e is None]

    async def keep_connected() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(toolset.run)
            for line in toolset.describe():
                print(f"uamp serve: {line}", flush=True)
            if others:
                print(
                    f"uamp serve: --mcp tools go to UAP agents only, not to {', '.join(others)}",
                    flush=True,
                )

    return keep_connected


def open_tracing(args: argparse.Namespace) -> Any:
    """The tracer ``--otel`` or ``OTEL_EXPORTER_OTLP_ENDPOINT`` asks for, or ``None``.

    Raises:
        ValueError: Asked for, but the ``otel`` extra is not installed.
    """
    if not args.otel and not os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return None
    try:
        from ..observe.tracing import Tracing
    except ImportError as exc:
        raise ValueError(f"--otel needs the otel extra (pip install 'uamp[otel]'): {exc}") from None
    from uamp_agents.tracing import set_tracer

    tracing = Tracing.exporting()
    set_tracer(tracing.runtime)  # the model and tool call spans of UAP agents
    return tracing
