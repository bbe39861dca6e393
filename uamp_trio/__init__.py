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

from .app import App, Router, create_app
from .demo import DemoAgent
from .engines.http import HTTPError, Request, Response, StreamingResponse, json_response
from .engines.server import Server, ServerConfig, serve
from .engines.websocket import WebSocket, WebSocketRequest
from .hosting.turns import ResponseOutcome, ResponseRun, open_response

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
