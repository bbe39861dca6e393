"""uamp_trio: the trio binding of UAMP (HTTP/1.1, HTTP/2, WebSocket servers, CLI).

Serve agents::

    app = create_app([DemoAgent()])          # mounts the built-in transports
    server = Server(app, port=8765)
    port = await nursery.start(server.serve)
    ...
    server.shutdown()                         # graceful; or cancel the nursery

The wings (app, transports, hosting, engines, trust, stores, client) and the
path of one request: docs/architecture.md.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import App, Router, create_app
    from .demo import DemoAgent
    from .engines.http import HTTPError, Request, Response, StreamingResponse, json_response
    from .engines.server import Server, ServerConfig, serve
    from .engines.websocket import WebSocket, WebSocketRequest
    from .hosting.turns import ResponseOutcome, ResponseRun, open_response

#: Where each public name lives: imported on first use, so that ``uamp
#: --version`` or a client does not load the whole server.
_LAZY = {
    "App": ".app",
    "Router": ".app",
    "create_app": ".app",
    "DemoAgent": ".demo",
    "HTTPError": ".engines.http",
    "Request": ".engines.http",
    "Response": ".engines.http",
    "StreamingResponse": ".engines.http",
    "json_response": ".engines.http",
    "Server": ".engines.server",
    "ServerConfig": ".engines.server",
    "serve": ".engines.server",
    "WebSocket": ".engines.websocket",
    "WebSocketRequest": ".engines.websocket",
    "ResponseOutcome": ".hosting.turns",
    "ResponseRun": ".hosting.turns",
    "open_response": ".hosting.turns",
}


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use (PEP 562)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'uamp_trio' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "App",
    "DemoAgent",
    "HTTPError",
    "Request",
    "Response",
    "ResponseOutcome",
    "ResponseRun",
    "Router",
    "Server",
    "ServerConfig",
    "StreamingResponse",
    "WebSocket",
    "WebSocketRequest",
    "create_app",
    "json_response",
    "open_response",
    "serve",
]
