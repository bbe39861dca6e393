"""The transports of :mod:`uamp_asgi`, each a module with ``mount(host)``."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..app import Host

__all__ = ["mount"]

#: ``Config.transports`` name -> module of this package.
MODULES = {
    "completions": "completions",
    "responses": "responses",
    "agui": "agui",
    "uamp": "uamp_ws",
    "sse_events": "sse_events",
    "realtime": "realtime",
    "mcp": "mcp",
    "a2a": "a2a",
    "acp": "acp",
    "anthropic": "anthropic",
    "ai_sdk": "ai_sdk",
}


def mount(name: str, host: Host) -> None:
    """Mount the transport ``name`` on ``host``.

    Raises:
        ValueError: No transport of that name.
    """
    module = MODULES.get(name)
    if module is None:
        raise ValueError(f"unknown transport {name!r}; choose from {sorted(MODULES)}")
    importlib.import_module(f"{__name__}.{module}").mount(host)
