"""The trio HTTP server: HTTP/1.1 (h11), HTTP/2 (h2) and WebSocket hand-over.

Theory of operation
-------------------
:meth:`Server.serve` opens the listeners, reports the bound port through
``task_status.started()`` and runs one task per accepted connection in a
nursery. Each connection picks its protocol once:

* over TLS, from ALPN (``h2`` or ``http/1.1``);
* in cleartext, from its first bytes: the HTTP/2 connection preface
  (``PRI * HTTP/2.0``, RFC 9113 section 3.4, "prior knowledge") selects h2,
  anything else h11.

Both protocol handlers (:mod:`uamp_trio.engines.http1`, :mod:`uamp_trio.engines.http2`)
turn requests into the same :class:`~uamp_trio.engines.http.Request` and hand it to
:meth:`Server.dispatch`, which asks the served :class:`Dispatcher` (the
composition root :class:`uamp_trio.App`, or a bare route table) for the
endpoint; so endpoints are written once and the engines know no router and
no transport. HTTP/2 runs one task per stream. WebSocket upgrades (HTTP/1.1)
ask the dispatcher for a handler the same way.

Shutdown: :meth:`Server.shutdown` (or cancelling ``serve``'s scope for an
immediate stop) closes the listeners, asks every connection to drain (idle
HTTP/1.1 connections close at once, busy ones after their response; HTTP/2
refuses new streams and sends GOAWAY once its streams are done), waits up to
``shutdown_grace`` seconds, then cancels what is left.
"""

from __future__ import annotations

import errno
import functools
import logging
import math
import os
import socket
import ssl
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import attrs
import h11
import orjson
import trio

from uamp_proto import jsonbounds
from uamp_proto.errors import UampError

from .cors import CorsPolicy
from .dormant import DormantConnections
from .dormant import available as dormant_available
from .http import (
    KNOWN_METHODS,
    YIELD_BEFORE,
    BodyBudget,
    Endpoint,
    Headers,
    HTTPError,
    Request,
    Response,
    StreamingResponse,
    error_body,
    error_response,
    reason_phrase,
)
from .http1 import linger, serve_http1, split_target
from .http2 import busy_goaway, serve_http2
from .server_config import TLS_VERSIONS, ServerConfig
from .streams import receive_or_eof, received
from .supervise import Background, Spawner
from .unix import bind_unix, is_unix, release_unix, unix_url
from .websocket import WebSocketHandler

if TYPE_CHECKING:
    from .http3 import Http3Listener

__all__ = ["Dispatcher", "Server", "ServerConfig", "serve"]

log = logging.getLogger("uamp_trio.server")

#: The HTTP/2 client connection preface (RFC 9113, section 3.4).
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

# Accept errors that mean "out of resources, try again" (as trio's serve_listeners).
_ACCEPT_RETRY_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS}
_ACCEPT_RETRY_SLEEP = 0.1
#: Accept errors about one connection that is already gone (accept(2): Linux
#: reports a pending network error of the new connection here): skip it.
_ACCEPT_SKIP_ERRNOS = {
    errno.ECONNABORTED,
    errno.EPROTO,
    errno.EPERM,
    errno.ETIMEDOUT,
    errno.ENETDOWN,
    errno.ENETUNREACH,
    errno.EHOSTDOWN,
    errno.EHOSTUNREACH,
    errno.ENOPROTOOPT,
    errno.EOPNOTSUPP,
}
#: Most connections accepted per wake-up of an accept loop.
_ACCEPT_BATCH = 64
#: How long a graceful shutdown waits for the stores to write what they queue (s).
FLUSH_GRACE = 5.0
#: Connections over ``max_connections`` answered at once (each waits up to
#: ``header_timeout`` for its request); more are closed without an answer.
_MAX_REFUSING = 1024


_BUSY_MESSAGE = "The server is at its connection limit; retry later."


def _busy_response() -> bytes:
    """The whole answer to an HTTP/1.1 connection over ``max_connections``."""
    body = orjson.dumps(
        error_body(
            _BUSY_MESSAGE,
            code="server_busy",
            type="server_error",
        )
    )
    head = (
        b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
        b"retry-after: 1\r\nconnection: close\r\nserver: uamp\r\n"
    )
    return head + b"content-length: %d\r\n\r\n" % len(body) + body


BUSY_RESPONSE = _busy_response()


class Dispatcher(Protocol):
    """What a server serves: finds the endpoint or WebSocket handler of a request."""

    def endpoint_for(self, request: Request) -> Endpoint:
        """The endpoint for ``request`` (fills ``request.path_params``).

        Raises:
            HTTPError: No endpoint (404, 405...); rendered as the response.
        """
        ...

    def websocket_handler_for(self, request: Request) -> WebSocketHandler | None:
        """The handler for a WebSocket upgrade, or ``None`` (the server answers 404)."""
        ...


@runtime_checkable
class RendersErrors(Protocol):
    """A dispatcher whose routes answer errors in a style of their own."""

    def render_refusal(self, request: Request, exc: HTTPError) -> Response:
        """``exc`` as the route of ``request`` answers errors."""
        ...


@runtime_checkable
class StreamsBodies(Protocol):
    """A dispatcher with routes that read their request body while it arrives (gRPC)."""

    def streams_body(self, request: Request) -> bool:
        """Whether ``request`` (its head only) goes to a route that streams its body."""
        ...


@runtime_checkable
class LimitsBodies(Protocol):
    """A dispatcher with routes that take smaller bodies than the server does."""

    def body_limit(self, request: Request) -> int | None:
        """The body limit of ``request``'s route (its head only), or ``None``."""
        ...

    def smallest_body_limit(self) -> int | None:
        """The smallest limit of any route, or ``None`` when no route has one."""
        ...


@runtime_checkable
class HasBackground(Protocol):
    """A dispatcher with a nursery slot for work that outlives its request.

    A ``services`` list of async callables, when it has one, runs in that
    nursery while the server serves. The server also tells it
    ``queue_limits``: its ``max_queued_events`` and
    ``max_session_queued_events``, ``draining``: whether a graceful
    shutdown has begun, ``server_config``: the whole configuration (the
    per-principal limits its stores enforce), and ``connection_count``: how
    to count the server's open connections. Its ``stores``, when it has
    them, are flushed once a graceful shutdown closed every connection.
    """

    background: Spawner | None
    queue_limits: tuple[int, int]
    draining: bool
    server_config: ServerConfig
    connection_count: Callable[[], int] | None


class Cancellable(Protocol):
    """What the server cancels to end an idle connection (a cancel scope or a handle)."""

    def cancel(self) -> None:
        """End the wait (for a connection that sent nothing yet: close it)."""


class ConnectionTracker:
    """What the server knows of one live connection, for graceful shutdown.

    Protocol handlers set :attr:`idle_scope` while waiting for a new request
    (cancelled on shutdown) and :attr:`on_shutdown` for protocol-specific
    draining (HTTP/2 GOAWAY). A handler that also sets :attr:`idle_since`
    (trio time) leaves the idle timeout to the server, which cancels
    :attr:`idle_scope` once the connection has been idle for
    ``idle_timeout``: two attribute writes per request instead of moving a
    scope's deadline and back (about 5 us on trio).
    """

    def __init__(self) -> None:
        self.draining = False
        self.idle_scope: Cancellable | None = None
        self.idle_since: float | None = None
        self.on_shutdown: Callable[[], None] | None = None
        #: While an HTTP/1.1 response body streams: its cancel scope, when it
        #: started and when it last wrote (trio time), for the server's
        #: ``response_timeout`` and ``response_idle_timeout``.
        self.response_scope: trio.CancelScope | None = None
        self.response_since = 0.0
        self.response_active = 0.0
        #: While an HTTP/1.1 handler runs: when it was called (trio time) and
        #: the scope the server cancels past ``response_head_timeout``,
        #: setting :attr:`head_late`.
        self.handler_since: float | None = None
        self.handler_scope: trio.CancelScope | None = None
        self.head_late = False
        #: While an HTTP/1.1 fast-path body is read on after its head: when
        #: that began (trio time) and the scope the server cancels past
        #: ``body_timeout`` (two stores instead of moving a deadline and back).
        self.body_since: float | None = None
        self.body_scope: trio.CancelScope | None = None

    def begin_shutdown(self) -> None:
        """Ask the connection to finish its current work and close."""
        self.draining = True
        if self.idle_scope is not None:
            self.idle_scope.cancel()
        if self.on_shutdown is not None:
            self.on_shutdown()


class Server:
    """An HTTP/1.1 + HTTP/2 (+ WebSocket) server for a :class:`Dispatcher`.

    Args:
        app: What to serve: an :class:`uamp_trio.App` (its ``background``
            is set to the server's connection nursery while serving) or a
            bare :class:`~uamp_trio.hosting.router.Router`.
        config: Options; keyword ``overrides`` replace single fields.
        sockets: Listening sockets to serve on instead of binding
            ``config.host``/``config.port`` (``uamp serve --workers``).

    Run it with ``port = await nursery.start(server.serve)``; stop it
    gracefully with :meth:`shutdown`, or at once by cancelling.
    """

    def __init__(
        self,
        app: Dispatcher,
        config: ServerConfig | None = None,
        *,
        sockets: Sequence[socket.socket] = (),
        **overrides: Any,
    ):
        self.app = app
        #: Listening sockets bound already (``uamp serve --workers``: the
        #: supervisor's); empty: :meth:`serve` binds ``host:port`` itself.
        self.sockets = list(sockets)
        self._host = app if isinstance(app, HasBackground) else None
        #: The app, when some of its routes read their body while it arrives.
        self.body_streamer = app if isinstance(app, StreamsBodies) else None
        self.config = attrs.evolve(config or ServerConfig(), **overrides)
        self._limits = app if isinstance(app, LimitsBodies) else None
        self.ssl_context = _ssl_context(self.config) if self.config.certfile else None
        #: Bound ``(host, port)`` of every listener, once serving (a Unix socket: ``(path, 0)``).
        self.addresses: list[tuple[str, int]] = []
        #: The path of the Unix socket served on, if it is one (``uds``, or an inherited one).
        self.unix_path: str | None = None
        self._shutdown = trio.Event()
        self._connections: set[ConnectionTracker] = set()
        self._all_closed = trio.Event()
        self._trio_token: trio.lowlevel.TrioToken | None = None
        #: Connections being answered 503 (over ``max_connections``).
        self._refusing = 0
        #: Plain TCP connections that have sent nothing yet (see .dormant).
        self._dormant: DormantConnections | None = None
        #: Request body bytes being received, across connections.
        self.body_budget = BodyBudget(self.config.max_buffered_body)
        #: The HTTP/3 listeners (one per bound address), with ``http3``.
        self.http3_listeners: list[Http3Listener] = []
        self._alt_svc: tuple[str, str] | None = None
        cfg = self.config
        #: Cross-origin calls from browser pages (``None``: CORS off).
        self.cors = CorsPolicy.of(
            cfg.allowed_origins, cfg.allowed_methods, cfg.allowed_headers, cfg.allow_credentials
        )

    @property
    def port(self) -> int:
        """The port of the first listener (valid once serving)."""
        if not self.addresses:
            raise RuntimeError("the server is not listening yet")
        return self.addresses[0][1]

    @property
    def connection_count(self) -> int:
        """How many connections are open now."""
        return len(self._connections)

    @property
    def scheme(self) -> str:
        """``https`` with TLS, else ``http``."""
        return "https" if self.ssl_context else "http"

    @property
    def url(self) -> str:
        """The base URL, e.g. ``http://127.0.0.1:8765`` (``http+unix://...`` on a Unix socket)."""
        if self.unix_path is not None:
            return unix_url(self.unix_path, self.scheme)
        host = self.addresses[0][0] if self.addresses else self.config.host
        if ":" in host:
            host = f"[{host}]"
        return f"{self.scheme}://{host}:{self.port}"

    def shutdown(self) -> None:
        """Begin graceful shutdown; ``serve`` returns when it is done.

        Safe to call from the server's trio thread; from another thread use
        :meth:`shutdown_threadsafe`.
        """
        self._shutdown.set()

    def shutdown_threadsafe(self) -> None:
        """Begin graceful shutdown from a thread outside the server's trio run."""
        if self._trio_token is None:
            raise RuntimeError("the server is not running")
        trio.from_thread.run_sync(self._shutdown.set, trio_token=self._trio_token)

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen and serve until :meth:`shutdown` completes or the task is cancelled.

        Reports the bound port through ``task_status.started()``.
        """
        cfg = self.config
        self._trio_token = trio.lowlevel.current_trio_token()
        # Every task of the server inherits it: the parsers read it there.
        jsonbounds.limit_values(cfg.max_json_values)
        bound: tuple[str, int] | None = None  # a Unix socket this server made: removed at the end
        if self.sockets:
            listeners = [
                trio.SocketListener(trio.socket.from_stdlib_socket(sock)) for sock in self.sockets
            ]
        elif cfg.uds is not None:
            sock = bind_unix(cfg.uds)
            bound = (cfg.uds, os.stat(cfg.uds).st_ino)
            listeners = [trio.SocketListener(trio.socket.from_stdlib_socket(sock))]
        else:
            listeners = await trio.open_tcp_listeners(cfg.port, host=cfg.host)
        self.addresses = []
        for lst in listeners:
            name = lst.socket.getsockname()
            if isinstance(name, str):  # a Unix socket: its path, no port
                self.unix_path = name
                self.addresses.append((name, 0))
            else:
                self.addresses.append((str(name[0]), int(name[1])))
        try:
            async with trio.open_nursery() as connections:
                if self._host is not None:
                    # Every task started there runs supervised: work a client's
                    # input started never ends the server (engines.supervise).
                    background = Background(connections)
                    self._host.background = background
                    self._host.draining = False
                    self._host.queue_limits = (
                        cfg.max_queued_events,
                        cfg.max_session_queued_events,
                    )
                    self._host.server_config = cfg
                    self._host.connection_count = lambda: self.connection_count
                    for service in getattr(self._host, "services", ()):
                        background.start_soon(service)
                if cfg.http3:
                    await self._start_http3(connections)
                if self.ssl_context is None and dormant_available():

                    def wake(
                        stream: trio.SocketStream, tracker: ConnectionTracker, data: bytes
                    ) -> None:
                        connections.start_soon(self._handle_connection, stream, tracker, data)

                    self._dormant = DormantConnections(wake, self._forget)
                    connections.start_soon(self._dormant.watch)
                async with trio.open_nursery() as acceptors:
                    for listener in listeners:
                        acceptors.start_soon(self._accept_loop, listener, connections)
                    if any(
                        math.isfinite(t)
                        for t in (
                            cfg.idle_timeout,
                            cfg.body_timeout,
                            cfg.response_timeout,
                            cfg.response_idle_timeout,
                            cfg.response_head_timeout,
                        )
                    ):
                        acceptors.start_soon(self._sweep_idle)
                    task_status.started(self.port)
                    await self._shutdown.wait()
                    if self._host is not None:
                        self._host.draining = True
                    acceptors.cancel_scope.cancel()
                for listener in listeners:
                    await listener.aclose()
                for quic in self.http3_listeners:
                    quic.shutdown()
                await self._drain()
                await self._flush_stores()
                connections.cancel_scope.cancel()
        finally:
            if self._host is not None:
                self._host.background = None
                self._host.draining = False
            for listener in listeners:
                with trio.CancelScope(shield=True):
                    await listener.aclose()
            if bound is not None:
                release_unix(*bound)

    async def _start_http3(self, nursery: trio.Nursery) -> None:
        """Serve HTTP/3 on UDP at every bound TCP address (same port numbers)."""
        from .http3 import Http3Listener, quic_configuration  # aioquic: only when asked for

        cfg = self.config
        assert cfg.certfile is not None and cfg.keyfile is not None
        configuration = quic_configuration(
            cfg.certfile, cfg.keyfile, idle_timeout=min(cfg.idle_timeout, 600.0)
        )
        for host, port in self.addresses:
            listener = Http3Listener(self, configuration, client_ca=cfg.client_ca)
            await nursery.start(functools.partial(listener.serve, host, port))
            self.http3_listeners.append(listener)
        self._alt_svc = ("alt-svc", f'h3=":{self.port}"; ma=86400')

    async def _sweep_idle(self) -> None:
        """Close connections idle (``ConnectionTracker.idle_since``) for ``idle_timeout``.

        Also ends HTTP/1.1 streamed responses over ``response_timeout`` in
        total or ``response_idle_timeout`` without a write, cancels
        HTTP/1.1 handlers running past ``response_head_timeout`` and
        HTTP/1.1 fast-path body reads past ``body_timeout`` (HTTP/2
        streams are swept by their connection). Checks a few times per timeout, at
        most once a second: a connection closes within a quarter of the
        timeout (or a second) after it expired.
        """
        cfg = self.config
        timeout = cfg.idle_timeout
        head, body = cfg.response_head_timeout, cfg.body_timeout
        shortest = min(timeout, body, cfg.response_timeout, cfg.response_idle_timeout, head)
        interval = min(1.0, shortest / 4)
        while True:
            await trio.sleep(interval)
            now = trio.current_time()
            expired = now - timeout
            # A copy: cancelling a connection that sent nothing yet closes it
            # at once (.dormant), which leaves the set.
            for conn in list(self._connections):
                since = conn.idle_since
                if since is not None and since <= expired and conn.idle_scope is not None:
                    conn.idle_scope.cancel()
                scope = conn.response_scope
                if scope is not None and (
                    now - conn.response_since > cfg.response_timeout
                    or now - conn.response_active > cfg.response_idle_timeout
                ):
                    scope.cancel()
                called = conn.handler_since
                if called is not None and now - called > head and conn.handler_scope is not None:
                    conn.head_late = True
                    conn.handler_since = None
                    conn.handler_scope.cancel()
                began = conn.body_since
                if began is not None and now - began > body and conn.body_scope is not None:
                    conn.body_since = None
                    conn.body_scope.cancel()

    async def _flush_stores(self) -> None:
        """Let the host's ``stores`` write what they still queue (at most :data:`FLUSH_GRACE` s)."""
        flush = getattr(getattr(self._host, "stores", None), "flush", None)
        if flush is not None:
            with trio.move_on_after(FLUSH_GRACE):
                await flush()

    async def _drain(self) -> None:
        for conn in list(self._connections):
            conn.begin_shutdown()
        with trio.move_on_after(self.config.shutdown_grace):
            while self._connections:
                self._all_closed = trio.Event()
                await self._all_closed.wait()
        if self._connections:
            log.info("grace period over; cancelling %d connection(s)", len(self._connections))

    async def _accept_loop(self, listener: trio.SocketListener, nursery: trio.Nursery) -> None:
        # The listening socket once more, as a plain non-blocking socket on a
        # duplicate of its descriptor: each wake-up drains the backlog with
        # plain accept() calls, up to _ACCEPT_BATCH (as asyncio does), and
        # waits only when it is empty. trio's accept would add a scheduler
        # round after every connection: one accept per round leaves a
        # connection queued behind a burst of N (a connection flood,
        # slowloris) waiting N rounds of every other task, health checks
        # included, and even the first costs a round of its own.
        raw = socket.socket(fileno=os.dup(listener.socket.fileno()))
        raw.setblocking(False)
        try:
            while True:
                for _ in range(_ACCEPT_BATCH):
                    try:
                        sock, _ = raw.accept()
                    except BlockingIOError:
                        break
                    except OSError as exc:
                        if exc.errno in _ACCEPT_SKIP_ERRNOS:
                            continue
                        if exc.errno not in _ACCEPT_RETRY_ERRNOS:
                            raise
                        log.error("accept failed (%s); retrying", exc)
                        await trio.sleep(_ACCEPT_RETRY_SLEEP)
                        break
                    self._admit(trio.SocketStream(trio.socket.from_stdlib_socket(sock)), nursery)
                else:
                    # A whole batch: the connections just admitted run first.
                    await trio.lowlevel.checkpoint()
                    continue
                await trio.lowlevel.wait_readable(raw)
        finally:
            trio.lowlevel.notify_closing(raw)
            raw.close()

    def _admit(self, stream: trio.SocketStream, nursery: trio.Nursery) -> None:
        """Serve an accepted connection, or refuse it (over ``max_connections``)."""
        limit = self.config.max_connections
        if limit is None or len(self._connections) < limit:
            # Counted from here, not from when its task first runs: a
            # burst of accepts cannot slip past the limit.
            tracker = ConnectionTracker()
            self._connections.add(tracker)
            dormant = self._dormant
            if dormant is None:
                nursery.start_soon(self._handle_connection, stream, tracker)
                return
            # Usually the request came with the connection: its task starts
            # with it. A connection that sent nothing yet waits without a task.
            data = received(stream)
            if data is None:
                dormant.add(stream, tracker)
            elif data:
                nursery.start_soon(self._handle_connection, stream, tracker, data)
            else:  # it hung up already
                stream.socket.close()
                self._forget(tracker)
        elif self._refusing < max(limit, _MAX_REFUSING):
            # Busy: answered and closed (see ServerConfig.max_connections).
            self._refusing += 1
            nursery.start_soon(self._refuse_busy, stream)
        else:
            # Even the refusals are at their limit: close without a word.
            stream.socket.close()

    async def _refuse_busy(self, stream: trio.SocketStream) -> None:
        """Answer a connection over ``max_connections``: 503 (HTTP/1.1) or GOAWAY (HTTP/2).

        Waits for the client's first bytes (a client that has not sent its
        request yet may not read an answer), at most ``header_timeout``. Over
        TLS the handshake comes first (HTTP/2 chosen by ALPN or by its
        preface), so an HTTPS client gets the same answer as a cleartext one;
        refusals in progress are bounded (see ``_admit``), which bounds the
        handshakes a flood can cost too.
        """
        conn: trio.abc.Stream = stream
        try:
            with trio.move_on_after(self.config.header_timeout):
                h2 = False
                if self.ssl_context is not None:
                    tls = trio.SSLStream(
                        stream, self.ssl_context, server_side=True, https_compatible=True
                    )
                    conn = tls
                    await tls.do_handshake()
                    h2 = tls.selected_alpn_protocol() == "h2"
                data = bytes(await conn.receive_some(65536))
                if h2 or (data and (data.startswith(H2_PREFACE) or H2_PREFACE.startswith(data))):
                    await conn.send_all(busy_goaway())
                elif data:
                    await conn.send_all(self.busy_answer(data))
                await linger(conn)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass  # ssl.SSLError is an OSError: a failed handshake gets no answer
        finally:
            self._refusing -= 1
            await trio.aclose_forcefully(conn)

    def busy_answer(self, data: bytes) -> bytes:
        """The HTTP/1.1 answer to a connection over ``max_connections`` that sent ``data``.

        A whole request head is answered 503 in its route's error style (an
        Anthropic client expects 529 ``overloaded_error``); anything else,
        and an app without styles, gets :data:`BUSY_RESPONSE`.
        """
        if not isinstance(self.app, RendersErrors) or b"\r\n\r\n" not in data:
            return BUSY_RESPONSE
        parser = h11.Connection(h11.SERVER)
        parser.receive_data(data)
        try:
            event = parser.next_event()
        except h11.RemoteProtocolError:
            return BUSY_RESPONSE
        if not isinstance(event, h11.Request):
            return BUSY_RESPONSE
        path, query = split_target(event.target.decode("latin-1"))
        request = Request(
            method=event.method.decode("latin-1"),
            path=path,
            query=query,
            headers=Headers(event.headers),
        )
        exc = HTTPError(503, _BUSY_MESSAGE, code="server_busy", headers=[("retry-after", "1")])
        try:
            reply = self.app.render_refusal(request, exc)
        except HTTPError:
            return BUSY_RESPONSE
        head = [f"HTTP/1.1 {reply.status} ".encode() + reason_phrase(reply.status)]
        head += [f"{k}: {v}".encode("latin-1") for k, v in reply.headers]
        head += [b"connection: close", b"server: uamp", b"content-length: %d" % len(reply.body)]
        return b"\r\n".join(head) + b"\r\n\r\n" + reply.body

    def _forget(self, tracker: ConnectionTracker) -> None:
        """A connection has closed: it no longer counts, and shutdown may be done."""
        self._connections.discard(tracker)
        if not self._connections:
            self._all_closed.set()

    async def _handle_connection(
        self,
        sock_stream: trio.SocketStream,
        tracker: ConnectionTracker,
        first: bytes | None = None,
    ) -> None:
        """Serve one connection; ``first``: its first bytes, when read already."""
        try:
            # Responses are written head+body in one send; no Nagle delay on
            # the small frames that follow (trio sets this too; be explicit).
            client: tuple[str, int] | None = None
            if not is_unix(sock_stream.socket):  # a Unix socket's peer has no address
                sock_stream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)
                try:
                    peer = sock_stream.socket.getpeername()
                    client = (str(peer[0]), int(peer[1]))
                except OSError:
                    client = None
            await self._run_protocol(sock_stream, tracker, client, first)
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError):
            pass
        except ssl.SSLError as exc:
            log.debug("TLS failure: %s", exc)
        except Exception:
            log.exception("connection handler failed")
        finally:
            # Closing the socket is what aclose_forcefully would do here (any
            # TLS layer is dropped without close_notify), without its cancel
            # scope and checkpoint: a flood's closes arrive thousands at once.
            sock_stream.socket.close()
            self._forget(tracker)

    async def _run_protocol(
        self,
        sock_stream: trio.SocketStream,
        tracker: ConnectionTracker,
        client: tuple[str, int] | None,
        first: bytes | None,
    ) -> None:
        cfg = self.config
        stream: trio.abc.Stream = sock_stream
        alpn: str | None = None
        if self.ssl_context is not None:
            ssl_stream = trio.SSLStream(
                sock_stream, self.ssl_context, server_side=True, https_compatible=True
            )
            with trio.fail_after(cfg.header_timeout):
                await ssl_stream.do_handshake()
            alpn = ssl_stream.selected_alpn_protocol()
            stream = ssl_stream
        if alpn == "h2":
            await serve_http2(self, stream, tracker, b"", client)
            return
        initial = await self._read_preface(stream, tracker, first)
        if initial is None:
            return
        serve = serve_http2 if initial.startswith(H2_PREFACE) else serve_http1
        # Handed over, not kept here: the first read (up to 64 KiB) is the
        # protocol's to drop once it is consumed.
        held = [initial]
        del initial
        await serve(self, stream, tracker, held.pop(), client)

    async def _read_preface(
        self, stream: trio.abc.Stream, tracker: ConnectionTracker, first: bytes | None
    ) -> bytes | None:
        """First bytes of a connection (``first`` when read already): enough to tell h2 from h11."""
        if tracker.draining:
            return None
        # Usually the request came with the connection: read at once, no
        # scheduler round. Otherwise wait, until the idle sweeper cancels the
        # wait (no deadline per connection: a flood's thousands of idle
        # connections each cost a deadline set and cleared).
        data = first if first is not None else received(stream)
        if data is None:
            with trio.CancelScope() as scope:
                tracker.idle_scope = scope
                tracker.idle_since = trio.current_time()
                data = await receive_or_eof(stream)
            tracker.idle_since = None
            tracker.idle_scope = None
            if scope.cancelled_caught:
                return None
        if not data:
            return None
        with trio.fail_after(self.config.header_timeout):
            while len(data) < len(H2_PREFACE) and H2_PREFACE.startswith(data):
                chunk = bytes(await stream.receive_some(65536))
                if not chunk:
                    break
                data += chunk
        return data

    def refusal(self, request: Request, exc: HTTPError) -> Response:
        """``exc`` answered in the error style of ``request``'s route (when the app has styles)."""
        if isinstance(self.app, RendersErrors):
            refused = self.app.render_refusal(request, exc)
        else:
            refused = exc.to_response()
        origin = request.headers.get("origin")
        if self.cors is not None and origin is not None:
            refused.headers.extend(self.cors.response_headers(origin))
        return refused

    @functools.cached_property
    def body_floor(self) -> int:
        """Declared lengths up to this need no per-route check (:meth:`body_limit`).

        Read once, on the first request: the routes are mounted by then.
        """
        floor = self._limits.smallest_body_limit() if self._limits is not None else None
        size = self.config.max_body_size
        return size if floor is None else min(floor, size)

    def body_limit(self, request: Request) -> int:
        """The largest body ``request`` may declare: its route's, at most the server's."""
        size = self.config.max_body_size
        own = self._limits.body_limit(request) if self._limits is not None else None
        return size if own is None else min(own, size)

    def too_large(self, request: Request, limit: int) -> Response:
        """The 413 of a body over ``limit``, in the error style of ``request``'s route."""
        exc = HTTPError(
            413,
            f"The request body exceeds the limit of {limit} bytes.",
            code="request_too_large",
        )
        return self.refusal(request, exc)

    def over_budget(self, request: Request) -> Response:
        """The 503 of a request whose body would go over ``max_buffered_body``."""
        exc = HTTPError(
            503,
            "The server is receiving too many request bodies at once; retry later.",
            code="server_busy",
            headers=[("retry-after", "1")],
        )
        return self.refusal(request, exc)

    async def dispatch(self, request: Request) -> Response | StreamingResponse:
        """Hand ``request`` to its endpoint; errors become JSON error responses."""
        if request.method not in KNOWN_METHODS:
            return error_response(
                501, f"The method {request.method!r} is not implemented.", code="not_implemented"
            )
        if self.cors is not None and request.headers.get("origin") is not None:
            return await self._cross_origin(request, self.cors)
        alt_svc = self._alt_svc
        if alt_svc is not None and request.http_version != "3":
            response = await self._dispatch(request)
            response.headers.append(alt_svc)
            return response
        # _dispatch's work in place: a coroutine less on every request.
        if len(request.body) > YIELD_BEFORE:
            await trio.lowlevel.checkpoint()
        try:
            return await self.app.endpoint_for(request)(request)
        except Exception as exc:
            return self._failed(request, exc)

    async def _cross_origin(
        self, request: Request, cors: CorsPolicy
    ) -> Response | StreamingResponse:
        """A request from a browser page (``Origin``) while CORS is on (engines/cors.py).

        A preflight is answered here, before any route; every other answer,
        errors included, gets the CORS headers.
        """
        if cors.is_preflight(request):
            return cors.preflight(request)
        response = await self._dispatch(request)
        if self._alt_svc is not None and request.http_version != "3":
            response.headers.append(self._alt_svc)
        response.headers.extend(cors.response_headers(request.headers.get("origin") or ""))
        return response

    async def _dispatch(self, request: Request) -> Response | StreamingResponse:
        if len(request.body) > YIELD_BEFORE:
            # A large body may take milliseconds to parse: let the requests
            # that are ready be served first.
            await trio.lowlevel.checkpoint()
        try:
            return await self.app.endpoint_for(request)(request)
        except Exception as exc:
            return self._failed(request, exc)

    def _failed(self, request: Request, exc: Exception) -> Response:
        """The answer to an endpoint's (or the routing's) ``exc``; called in its ``except``."""
        if isinstance(exc, HTTPError):
            return exc.to_response()
        status = getattr(exc, "http_status", None)
        if isinstance(exc, UampError) and isinstance(status, int):
            # An error that names its status (a store that does not answer: 503).
            return error_response(status, str(exc), code=getattr(exc, "code", None))
        log.exception("endpoint failed: %s %s", request.method, request.path)
        return error_response(
            500, "The server failed while handling the request.", code="internal_error"
        )

    def head_timed_out(self, request: Request) -> Response:
        """The ``504`` of a request whose handler ran past ``response_head_timeout``.

        The engines time handlers with their sweepers (no cancel scope per
        request: entering one costs about as much as routing the request),
        cancel the late one and send this in its place.
        """
        timeout = self.config.response_head_timeout
        log.warning(
            "%s %s: no response within %g s (--response-head-timeout); answered 504",
            request.method,
            request.path,
            timeout,
        )
        exc = HTTPError(
            504,
            f"The server did not produce a response within {timeout:g} seconds.",
            code="response_timeout",
        )
        return self.refusal(request, exc)


def _ssl_context(cfg: ServerConfig) -> ssl.SSLContext:
    """The server's TLS: its certificate, TLS 1.3 (or 1.2 with ``tls_min``), ALPN h2/http1.1.

    Built from a bare server context, not ``create_default_context``: that
    one loads the system's CAs, which under mutual TLS would accept a client
    certificate from any public CA; only ``client_ca`` is trusted here.
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    assert cfg.certfile is not None
    ctx.load_cert_chain(cfg.certfile, cfg.keyfile)
    # TLS 1.2 is HTTP/2's floor too (RFC 9113 section 9.2).
    ctx.minimum_version = TLS_VERSIONS[cfg.tls_min]
    if cfg.client_ca is not None:
        ctx.load_verify_locations(cafile=cfg.client_ca)
        ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    return ctx


async def serve(
    app: Dispatcher,
    config: ServerConfig | None = None,
    *,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
    **overrides: Any,
) -> None:
    """Run a :class:`Server` for ``app``; reports the bound port via ``task_status``."""
    await Server(app, config, **overrides).serve(task_status=task_status)
