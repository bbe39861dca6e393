"""UAMP over HTTP + SSE (UAMP section 13.2), for clients without WebSockets.

Endpoints (mounted by :func:`mount`):

``POST /events`` and ``POST /agents/{name}/events``
    The body is one UAMP event or a JSON array of events. Without an
    ``X-Session-ID`` header (or ``?session_id=``) the first event must be
    ``session.create``: it opens a new HTTP session and the answer carries the
    new id in the ``X-Session-ID`` header and the JSON body
    ``{"session_id": ..., "accepted": n}``. Later POSTs name the session.
``GET /events/stream`` and ``GET /agents/{name}/events/stream``
    ``text/event-stream`` of the session's outgoing events, one UAMP event per
    SSE event (``id:`` numbered per session, ``data:`` the JSON). A new
    stream for the same session replaces the old one; ``Last-Event-ID``
    replays the recent events after that id.

Each HTTP session is one :class:`~uamp_trio.hosting.sessions.SessionHost` (one
:class:`~uamp_proto.connection.ServerConnection` with exactly one UAMP
session), so the semantics are the WebSocket's: ``response.create`` runs the
agent in its own task, ``response.cancel``, client tools, token refresh, delta
windows, payment (``payment.required`` and the other payment events go out on
the stream, ``payment.submit`` comes in by POST) and signed ``response.done``
(its ``signature`` covers the whole body of the POST that carried
``response.create``, an array of events included).
A session's tasks outlive the POST that started them: they run in
:attr:`App.background <uamp_trio.app.App.background>` -- the server's
nursery, so a graceful shutdown ends them once its grace period is over --
or, with no server running the app, in a trio system task. A session with no
stream attached and no POST for ``idle_timeout`` seconds expires, as does one
whose UAMP session ended.

Ownership (docs/security.md): an HTTP session belongs to the principal of
the request that created it (``request.principal``), and sessions are found
by ``(principal, session id)``. Any other principal naming the id -- to POST
events or to read the stream -- gets the same 404 as for an id that never
existed. A ``session.create`` never attaches to a live session: with an id
that principal already uses it is refused (400 ``duplicate_session``, as the
core refuses a duplicate on one WebSocket); the same id proposed by another
principal opens that principal's own, separate session, exactly as an unused
id would. Session ids are therefore unique per principal, not server-wide
(as on the WebSocket, where they are per connection).

Errors: a body that is not JSON, not an event (or array of events), or an
event the core refuses gets 400 with the JSON error body
``{"error": {"message", "type", "code", "param"}, "accepted": n}`` (events
before the bad one were processed); an unknown or expired session gets 404.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import parse_qs

import attrs
import orjson
import trio

from uamp_proto.principal import Principal
from uamp_proto.responder import Responder
from uamp_proto.sse import encode_json

from ..engines.http import (
    HTTPError,
    Request,
    Response,
    SendChunk,
    StreamingResponse,
    error_body,
    json_response,
)
from ..hosting.router import RouteMeta
from ..hosting.sessions import OutboxClosed, Overloaded, SessionHost, SessionLimits
from ..stores.sessions import SessionTracker

if TYPE_CHECKING:
    from ..hosting.host import Host

__all__ = ["SSEEventsTransport", "mount"]

#: What middleware knows of these routes: UAMP ``session.error`` refusals.
ROUTES = RouteMeta(transport="sse_events", error_style="uamp")

log = logging.getLogger("uamp_trio.sse_events")

#: Events kept per session for ``Last-Event-ID`` replay.
REPLAY_SIZE: Final = 256
#: A comment line is written when a stream has been quiet this long, so
#: proxies keep it open (seconds).
HEARTBEAT: Final = 15.0
_SESSION_HEADER: Final = "x-session-id"


class _HttpSession:
    """One HTTP+SSE session: a host, its system task and its stream."""

    def __init__(
        self, transport: SSEEventsTransport, agent: Responder | None, principal: Principal
    ) -> None:
        self.transport = transport
        self.agent = agent
        self.principal = principal
        self.host: SessionHost | None = None
        self.id: str | None = None
        self.started = trio.Event()
        self.finished = trio.Event()
        self.scope = trio.CancelScope()
        self.stream_scope: trio.CancelScope | None = None
        self.last_seen = trio.current_time()
        self.next_id = 1
        self.replay: deque[tuple[int, bytes]] = deque(maxlen=REPLAY_SIZE)

    async def run(self) -> None:
        limits = self.transport.session_limits()
        try:
            with self.scope:
                async with trio.open_nursery() as nursery:
                    self.host = SessionHost(
                        nursery,
                        self.transport.agents,
                        self.agent,
                        limits=limits,
                        transport="uamp-sse",
                        app=self.transport.app,
                        principal=self.principal,
                    )
                    self.host.on_empty = self.end
                    self.started.set()
                    await self._expire()
                    nursery.cancel_scope.cancel()
        except Exception:  # a system task must never raise
            log.exception("HTTP+SSE session %s failed", self.id)
        finally:
            self.started.set()
            self.finished.set()
            if self.host is not None:
                self.host.outbox.close()
            self.transport._forget(self)

    async def _expire(self) -> None:
        idle = self.transport.limits.idle_timeout
        host = self.host
        assert host is not None
        while True:
            if self.stream_scope is None:
                deadline = self.last_seen + idle
                if trio.current_time() >= deadline:
                    log.info("HTTP+SSE session %s expired", self.id)
                    host.close_all("timeout", notify=False)
                    return
                await trio.sleep_until(deadline)
            else:
                await trio.sleep(idle)  # attached streams keep the session alive

    def end(self) -> None:
        """The UAMP session ended: stop; an attached stream drains what is queued."""
        if self.host is not None:
            self.host.outbox.close()
        self.transport._forget(self)
        self.scope.cancel()

    async def stream(self, send: SendChunk, last_event_id: int | None) -> None:
        host = self.host
        assert host is not None
        if self.stream_scope is not None:
            self.stream_scope.cancel()  # one reader per session: the newest wins
        scope = trio.CancelScope()
        self.stream_scope = scope
        try:
            with scope:
                if last_event_id is not None:
                    chunk = b"".join(
                        _frame(n, data) for n, data in self.replay if n > last_event_id
                    )
                    if chunk:
                        await send(chunk)
                else:
                    await send(b": uamp event stream\n\n")
                # A write is the only way to notice a client that went away:
                # beat often enough that a dead stream does not outlive the
                # session's idle timeout.
                beat = min(HEARTBEAT, self.transport.limits.idle_timeout / 2)
                while True:
                    batch: list[bytes] | None = None
                    with trio.move_on_after(beat):
                        try:
                            batch = await host.outbox.take()
                        except OutboxClosed:
                            return
                    if batch is None:
                        await send(b":\n\n")
                        continue
                    frames = []
                    for data in batch:
                        n = self.next_id
                        self.next_id = n + 1
                        self.replay.append((n, data))
                        frames.append(_frame(n, data))
                    await send(b"".join(frames))
        finally:
            if self.stream_scope is scope:
                self.stream_scope = None
            self.last_seen = trio.current_time()


def _frame(n: int, data: bytes) -> bytes:
    return encode_json(data, id=n)


class SSEEventsTransport:
    """The HTTP+SSE endpoints of one app (see the module docstring).

    Live sessions are tracked in the app's
    :attr:`Stores.http_sessions <uamp_trio.stores.Stores.http_sessions>`.

    Args:
        app: The app whose agents are served.
        limits: Session limits (``idle_timeout`` is the expiry of a session
            with no stream and no POST).
    """

    def __init__(self, app: Host, limits: SessionLimits | None = None) -> None:
        self.app = app
        self._given = limits
        self.limits = limits or SessionLimits(max_sessions=1)
        #: Live sessions by owner and session id.
        self.sessions: SessionTracker[_HttpSession] = app.stores.http_sessions

    def session_limits(self) -> SessionLimits:
        """The limits of a new session: as given, else with the server's queue limits."""
        if self._given is not None:
            return self._given
        outbox, per_session = self.app.queue_limits
        return attrs.evolve(
            self.limits, outbox_size=outbox, session_outbox_size=min(outbox, per_session)
        )

    @property
    def agents(self) -> Mapping[str, Responder]:
        """The hosted agents, by name."""
        return self.app.agents

    @property
    def session_count(self) -> int:
        """Live HTTP sessions."""
        return len(self.sessions)

    def _forget(self, hs: _HttpSession) -> None:
        if hs.id is not None:
            self.sessions.discard(hs.principal, hs.id, hs)

    def _path_agent(self, request: Request) -> Responder | None:
        name = request.path_params.get("agent")
        if name is None:
            return None
        agent = self.app.agents.get(name)
        if agent is None:
            raise HTTPError(404, f"No agent named {name!r} is hosted here.", code="agent_not_found")
        return agent

    def _session_id(self, request: Request) -> str | None:
        sid = request.headers.get(_SESSION_HEADER)
        if sid:
            return sid
        values = parse_qs(request.query).get("session_id")
        return values[0] if values else None

    def _lookup(self, request: Request) -> _HttpSession:
        sid = self._session_id(request)
        if sid is None:
            raise HTTPError(
                400, "Name the session in the X-Session-ID header.", code="session_id_required"
            )
        # Only the caller's own sessions can be found: another principal's id
        # is answered as one that never existed.
        hs = self.sessions.get(request.principal, sid)
        if hs is None or hs.host is None:
            raise HTTPError(
                404,
                f"No session {sid!r}: it never existed, ended or expired.",
                code="unknown_session",
            )
        return hs

    async def post_events(self, request: Request) -> Response:
        """``POST /events``: feed one event or an array of events."""
        messages, first_type = _split_body(request)
        agent = self._path_agent(request)
        if self._session_id(request) is None:
            if first_type != "session.create":
                raise HTTPError(
                    400,
                    "A POST without X-Session-ID must start with session.create.",
                    code="session_id_required",
                )
            hs = _HttpSession(self, agent, request.principal)
            background = self.app.background
            if background is not None:
                # Under the server's lifecycle: a graceful shutdown ends it.
                background.start_soon(hs.run, name="uamp-sse-session")
            else:
                trio.lowlevel.spawn_system_task(hs.run, name="uamp-sse-session")
            await hs.started.wait()
            if hs.host is None:  # pragma: no cover - the system task failed at once
                raise HTTPError(503, "Could not start the session.", code="unavailable")
            accepted, error = self._feed(hs, messages[:1], request.body)
            await hs.host.admitted()  # a session.create token is verified first
            if error is None and not hs.host.session_ids:
                error, accepted = hs.host.refusal, 0
            if error is not None or not hs.host.session_ids:
                hs.scope.cancel()
                status = 404 if _not_found(error) else 400
                if error is not None and error[0] == "unauthorized":
                    status = 401
                raise_error(error, accepted, status=status)
            sid = hs.host.session_ids[0]
            if not self.sessions.add(hs.principal, sid, hs):  # never attach, never replace
                hs.scope.cancel()
                raise_error(("duplicate_session", f"session {sid!r} already exists"), 0)
            hs.id = sid
            more, error = self._feed(hs, messages[1:], request.body)
            accepted += more
            if error is not None:
                raise_error(error, accepted, headers=[("x-session-id", hs.id)])
            return json_response(
                {"session_id": hs.id, "accepted": accepted}, headers=[("x-session-id", hs.id)]
            )
        hs = self._lookup(request)
        if agent is not None and hs.agent is not None and agent is not hs.agent:
            raise HTTPError(
                404, f"Session {hs.id!r} belongs to another agent.", code="unknown_session"
            )
        accepted, error = self._feed(hs, messages, request.body)
        if error is not None:
            raise_error(error, accepted)
        assert hs.id is not None
        return json_response({"session_id": hs.id, "accepted": accepted})

    def _feed(self, hs: _HttpSession, messages: list[bytes], body: bytes) -> tuple[int, Any]:
        host = hs.host
        assert host is not None
        hs.last_seen = trio.current_time()
        for n, message in enumerate(messages):
            try:
                errors = host.feed(message, carrier=body)
            except Overloaded as exc:
                hs.scope.cancel()
                return n, ("overloaded", str(exc))
            if errors:
                return n, (errors[0].code, errors[0].message)
        return len(messages), None

    async def stream_events(self, request: Request) -> StreamingResponse:
        """``GET /events/stream``: the session's outgoing events as SSE."""
        self._path_agent(request)
        hs = self._lookup(request)
        last: int | None = None
        raw = request.headers.get("last-event-id")
        if raw is not None and raw.strip().isdigit():
            last = int(raw.strip())

        async def produce(send: SendChunk) -> None:
            await hs.stream(send, last)

        assert hs.id is not None
        return StreamingResponse(
            producer=produce,
            headers=[
                ("content-type", "text/event-stream"),
                ("cache-control", "no-cache"),
                ("x-accel-buffering", "no"),
                ("x-session-id", hs.id),
            ],
        )

    def mount(self, app: Host) -> None:
        """Register the endpoints on ``app``."""
        app.agent_route(
            "POST", "/events", self.post_events, label="UAMP HTTP+SSE (POST)", meta=ROUTES
        )
        app.agent_route(
            "GET", "/events/stream", self.stream_events, label="UAMP SSE stream", meta=ROUTES
        )


def _not_found(error: Any) -> bool:
    return error is not None and error[0] == "agent_not_found"


def raise_error(
    error: Any, accepted: int, *, status: int = 400, headers: list[tuple[str, str]] | None = None
) -> None:
    """Raise the HTTP error for a refused event (always raises)."""
    code, message = error if error is not None else ("invalid_event", "the event was refused")
    body = error_body(message, code=code)
    body["accepted"] = accepted
    raise _BodyError(status, body, headers or [])


class _BodyError(HTTPError):
    """An HTTPError with a ready JSON body."""

    def __init__(self, status: int, body: dict[str, Any], headers: list[tuple[str, str]]) -> None:
        super().__init__(
            status, body["error"]["message"], code=body["error"]["code"], headers=headers
        )
        self.body = body

    def to_response(self) -> Response:
        return json_response(self.body, self.status, self.headers)


def _split_body(request: Request) -> tuple[list[bytes], object]:
    """The body as one encoded message per event, and the first event's type."""
    parsed = request.json()
    if isinstance(parsed, dict):
        return [request.body], parsed.get("type")
    if isinstance(parsed, list) and parsed and all(isinstance(e, dict) for e in parsed):
        return [orjson.dumps(e) for e in parsed], parsed[0].get("type")
    raise HTTPError(
        400,
        "The body must be one UAMP event (a JSON object) or a non-empty JSON array of events.",
        code="invalid_event",
    )


def mount(app: Host, limits: SessionLimits | None = None) -> None:
    """Serve UAMP over HTTP+SSE on ``app`` (see the module docstring)."""
    SSEEventsTransport(app, limits).mount(app)
