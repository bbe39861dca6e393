"""Request observation: the one middleware that times every call and reports it.

Theory of operation
-------------------
The composition root puts :class:`Observe` first in its middleware chain
when anything wants to see requests (the access log, the metrics, the
tracer). For each call it takes the start time, passes the call on and,
when the call is over, builds one :class:`Exchange` -- client, method, path
(never the query string: it may carry a token), status, duration, agent and
transport -- and hands it to every listener's ``finished``. "Over" depends
on the reply:

* a plain response or an error: when the endpoint returns or raises (an
  :class:`~uamp_trio.engines.http.HTTPError` keeps its status, anything else
  is a 500);
* a streaming response: when its producer has written the last chunk (the
  producer is wrapped; its status is the one it announced);
* a WebSocket: when its handler returns; the status is what the upgrade got
  (101, or the refusal's status).

Streams (streaming responses and WebSockets) are also announced to
``stream_opened`` and ``stream_closed``, so a gauge can count those in flight.

Requests that match no route never reach the chain; the root reports them
with :meth:`Observe.unmatched`. With nothing to observe the root leaves this
middleware out altogether, so an unobserved server pays nothing.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from typing import Protocol

import attrs
import trio

from uamp_proto._fastinit import maker

from ..engines.http import HTTPError, Request, Response, SendChunk, StreamingResponse
from ..hosting.agents import RESOLVED_AGENT
from ..hosting.middleware import Call, Next, Refusal, Reply
from ..hosting.router import ErrorStyle, RouteMeta

__all__ = ["CLIENT_GONE", "CURRENT", "Exchange", "Listener", "Observe"]

#: The status logged for a call cancelled before it answered (the client left
#: or the server shut down): nginx's 499, since no status was ever sent.
CLIENT_GONE = 499


@attrs.define(slots=True)
class Exchange:
    """One request as observers see it once it is over (or, for a stream, as it opens).

    Attributes:
        started: Wall-clock start (seconds since the epoch).
        client: ``host:port`` of the peer, or ``-``.
        method: The HTTP method (``GET`` for a WebSocket upgrade).
        path: The path, without the query string.
        http_version: ``1.1``, ``2``...
        transport: The transport of the matched route (``-`` when none matched).
        agent: The agent named in the path or resolved at a root path, or ``-``.
        websocket: Whether the request was a WebSocket upgrade.
        status: The HTTP status (101 for an accepted WebSocket).
        duration: Seconds from the start until the call was over.
        error: The error code of an :class:`HTTPError`, else ``""``.
    """

    started: float
    client: str
    method: str
    path: str
    http_version: str
    transport: str
    agent: str
    websocket: bool = False
    status: int = 0
    duration: float = 0.0
    error: str = ""


#: ``Exchange(started, client, method, path, http_version, transport, agent)``
#: without the keyword protocol of a class call (the rest defaulted).
_new_exchange = maker(
    Exchange, ("started", "client", "method", "path", "http_version", "transport", "agent")
)

#: The request being handled, for what runs on its behalf (agent runs, tasks
#: started from it inherit it): ``None`` outside an observed request.
CURRENT: ContextVar[Exchange | None] = ContextVar("uamp_request", default=None)


class Listener(Protocol):
    """What :class:`Observe` reports to."""

    def finished(self, exchange: Exchange) -> None:
        """A call is over."""

    def stream_opened(self, exchange: Exchange) -> None:
        """A streaming response or a WebSocket starts."""

    def stream_closed(self, exchange: Exchange) -> None:
        """That stream ended (:meth:`finished` follows)."""


#: ``host:port`` of the clients seen lately, by address: a connection's
#: requests share one text (emptied when it reaches :data:`_CLIENTS_KEPT`).
_CLIENTS: dict[tuple[str, int] | None, str] = {}
_CLIENTS_KEPT = 1024


def _client_text(client: tuple[str, int] | None) -> str:
    """``host:port`` of ``client``, or ``-`` when unknown."""
    if not client:
        return "-"
    text = _CLIENTS.get(client)
    if text is None:
        if len(_CLIENTS) >= _CLIENTS_KEPT:
            _CLIENTS.clear()
        text = _CLIENTS[client] = f"{client[0]}:{client[1]}"
    return text


def _exchange(request: Request, route: RouteMeta | None, websocket: bool) -> Exchange:
    return Exchange(
        started=time.time(),
        client=_client_text(request.client),
        method=request.method,
        path=request.path,
        http_version=request.http_version,
        transport=(route.transport or "-") if route is not None else "-",
        agent=request.path_params.get("agent") or "-",
        websocket=websocket,
    )


def _name_agent(exchange: Exchange) -> None:
    """Name the agent a root path resolved to (``agent=-`` until then)."""
    if exchange.agent == "-":
        exchange.agent = RESOLVED_AGENT.get() or "-"


class Observe:
    """Middleware reporting every call to ``listeners``; see the module docstring."""

    def __init__(self, listeners: Sequence[Listener]) -> None:
        self.listeners = list(listeners)
        #: How :meth:`around` answers a refusal the endpoint raised (the app's
        #: error rendering in the route's style), or ``None`` to raise it.
        self.render_refusal: Callable[[ErrorStyle, HTTPError], Response] | None = None

    def _finish(self, exchange: Exchange, began: float, status: int, error: str = "") -> None:
        if exchange.agent == "-":  # (_name_agent, inline)
            exchange.agent = RESOLVED_AGENT.get() or "-"
        exchange.status = status
        exchange.error = error
        exchange.duration = time.perf_counter() - began
        for listener in self.listeners:
            listener.finished(exchange)

    async def __call__(self, call: Call, call_next: Next) -> Reply:
        if call.websocket is not None:
            began = time.perf_counter()
            exchange = _exchange(call.request, call.route, True)
            CURRENT.set(exchange)
            return await self._websocket(call, call_next, exchange, began)
        began = time.perf_counter()
        return await self.around(lambda _: call_next(call), call.route, began, call.request)

    async def around(
        self,
        endpoint: Callable[[Request], Awaitable[Reply]],
        route: RouteMeta,
        began: float,
        request: Request,
    ) -> Reply:
        """``await endpoint(request)``, observed: an HTTP call of ``route`` that began at ``began``.

        What the middleware does for an HTTP call; the app calls it directly
        when it is the only middleware (no chain, no :class:`Call`), with the
        ``time.perf_counter()`` it read before routing the request. A
        :class:`~uamp_trio.hosting.middleware.Refusal` the endpoint raises is
        reported, then answered by :attr:`render_refusal` when one is set
        (the chain's answer to it), else raised.
        """
        client = _CLIENTS.get(request.client)  # (_client_text, inline when known)
        exchange = _new_exchange(
            time.time(),
            client if client is not None else _client_text(request.client),
            request.method,
            request.path,
            request.http_version,
            route.transport or "-",
            request.path_params.get("agent") or "-",
        )
        # Each request runs in a context of its own (engines/contexts.py):
        # nothing an earlier request resolved is seen here.
        CURRENT.set(exchange)
        try:
            reply = await endpoint(request)
        except HTTPError as exc:
            self._finish(exchange, began, exc.status, exc.code or "")
            if self.render_refusal is not None and isinstance(exc, Refusal):
                return self.render_refusal(route.error_style, exc)
            raise
        except trio.Cancelled:
            self._finish(exchange, began, CLIENT_GONE, "cancelled")
            raise
        except BaseException:
            self._finish(exchange, began, 500, "internal_error")
            raise
        if type(reply) is Response:  # (the usual reply: _finish, inline)
            if exchange.agent == "-":
                exchange.agent = RESOLVED_AGENT.get() or "-"
            exchange.status = reply.status
            exchange.duration = time.perf_counter() - began
            for listener in self.listeners:
                listener.finished(exchange)
        elif isinstance(reply, StreamingResponse):
            _name_agent(exchange)  # before the stream is reported open
            self._stream(reply, exchange, began)
        elif reply is not None:
            self._finish(exchange, began, reply.status)
        return reply

    def _stream(self, reply: StreamingResponse, exchange: Exchange, began: float) -> None:
        produce = reply.producer
        status = reply.status
        listeners = self.listeners

        async def producer(send: SendChunk) -> None:
            for listener in listeners:
                listener.stream_opened(exchange)
            try:
                await produce(send)
            finally:
                for listener in listeners:
                    listener.stream_closed(exchange)
                self._finish(exchange, began, status)

        reply.producer = producer

    async def _websocket(
        self, call: Call, call_next: Next, exchange: Exchange, began: float
    ) -> Reply:
        pending = call.websocket
        assert pending is not None
        for listener in self.listeners:
            listener.stream_opened(exchange)
        try:
            return await call_next(call)
        finally:
            for listener in self.listeners:
                listener.stream_closed(exchange)
            self._finish(exchange, began, pending.status or 500)

    def unmatched(self, request: Request, exc: HTTPError, began: float) -> None:
        """Report a request no route matched (it never reached the chain)."""
        exchange = _exchange(request, None, False)
        self._finish(exchange, began, exc.status, exc.code or "")
