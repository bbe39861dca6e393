"""UAMP over HTTP + SSE (UAMP section 13.2), for clients without WebSockets.

Endpoints (mounted by :func:`mount`):

``POST /events`` and ``POST /agents/{name}/events``
    The body is one UAMP event or a JSON array of events. Without an
    ``X-Session-ID`` header (or ``?session_id=``) the first event must be
    ``session.create``: it opens a new HTTP session and the answer carries the
    new id in the ``X-Session-ID`` header and the JSON body
    ``{"session_id": ..., "accepted": n}``. Later POSTs name the session.
    With a log shared between processes (Redis), a POST naming a session
    that another process holds is forwarded there and answered with that
    process's answer (docs/scale-out.md). When that process died, the
    process the POST reached adopts the session from its log (once, over
    all processes) and serves it from then on.
``GET /events/stream`` and ``GET /agents/{name}/events/stream``
    ``text/event-stream`` of the session's outgoing events, one UAMP event per
    SSE event (``id:`` the event's ``event_id``, ``data:`` the JSON). A new
    stream for the same session replaces the old one; ``Last-Event-ID``
    replays the events after that id, from the recent ones or the session's
    event log, and a session living in another process that shares the log
    (Redis) is streamed from the log (docs/resume.md): 410
    ``beyond_retention`` when the log no longer holds what came after it.
    A session whose process died is adopted here first, like on a POST: a
    response it was streaming goes on from its checkpoint (or ends
    ``interrupted``) into this stream.

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

One HTTP session's life -- its host, the one reader of its events (its
attached stream, or a keeper while none is), the replay ``Last-Event-ID``
reads, its expiry -- is an :class:`~uamp_trio.transports.sse_events.session.HttpSession`
(:mod:`uamp_trio.transports.sse_events.session`); this module holds the endpoints,
the ownership and bounds of sessions, and what comes from the event log or
from another process.

Shutting down (a graceful drain), a process adopts no session, ends the
streams it serves from another process's log (the client reconnects
elsewhere) and answers 503 ``draining`` to a POST for a session it does
not hold.

Ownership (docs/security.md): an HTTP session belongs to the principal of
the request that created it (``request.principal``), and sessions are found
by ``(principal, session id)``. Any other principal naming the id -- to POST
events or to read the stream -- gets the same 404 as for an id that never
existed. A ``session.create`` never attaches to a live session: with an id
that principal already uses it is refused (400 ``duplicate_session``, as the
core refuses a duplicate on one WebSocket) -- also while another request
opens or takes on that session, and when a WebSocket session of the
principal's writes its log: the id is claimed before the request's first
await, so nothing begins that session's log afresh. The same id proposed
by another principal opens that principal's own, separate session, exactly
as an unused id would. Session ids are therefore unique per principal, not server-wide
(as on the WebSocket, where they are per connection).

Errors: a body that is not JSON, not an event (or array of events), or an
event the core refuses gets 400 with the JSON error body
``{"error": {"message", "type", "code", "param"}, "accepted": n}`` (events
before the bad one were processed); an unknown or expired session gets 404.

Bounds (docs/security.md): a principal holds at most ``sse_max_sessions``
sessions (``ServerConfig``; sessions being opened count too); one more
``session.create`` gets 429 ``too_many_sessions``, for that principal only.
A session with no stream and no POST expires after
``sse_session_idle_timeout`` seconds (unless the transport was given
:class:`~uamp_trio.hosting.sessions.SessionLimits` of its own).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import parse_qs

import attrs
import orjson
import trio

from uamp_proto.principal import Principal
from uamp_proto.responder import Responder
from uamp_proto.resume import RESUME_FROM, ResumeError, ResumeStream, start_after
from uamp_stores.health import STORE_UNAVAILABLE, StoreUnavailable

from ...engines.http import (
    HTTPError,
    Request,
    Response,
    SendChunk,
    StreamingResponse,
    error_body,
    json_response,
)
from ...hosting.agents import SPEC_SESSION_CODES
from ...hosting.outbox import Overloaded
from ...hosting.router import RouteMeta
from ...hosting.sessions import SessionLimits
from ...stores.sessions import SessionTracker
from .session import HEARTBEAT, HttpSession, event_frame

if TYPE_CHECKING:
    from uamp_stores.event_log import LogKey

    from ...hosting.host import Host

__all__ = ["SSEEventsTransport", "mount"]

#: What middleware knows of these routes: UAMP ``session.error`` refusals.
ROUTES = RouteMeta(transport="sse_events", error_style="uamp")

log = logging.getLogger("uamp_trio.sse_events")

_SESSION_HEADER: Final = "x-session-id"
#: How long a request waits for another that opens or takes on the same
#: session before it looks for the session itself (s).
_NAMING_WAIT: Final = 5.0


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
        #: Live sessions by owner and session id.
        self.sessions: SessionTracker[HttpSession] = app.stores.http_sessions
        #: Sessions being opened, by owner key (not tracked until their id is known).
        self._opening: Counter[tuple[str, str]] = Counter()
        #: Sessions a request opens or takes on now, by ``(owner key, id)``, claimed
        #: before its first await: no other request begins (or takes on) their log meanwhile.
        self._naming: set[LogKey] = set()

    @property
    def limits(self) -> SessionLimits:
        """The limits as given, else one session each, expiring as the server's config says."""
        if self._given is not None:
            return self._given
        config = self.app.server_config
        return SessionLimits(
            max_sessions=1,
            idle_timeout=config.sse_session_idle_timeout,
            max_response_output_bytes=self.app.turns.max_output_bytes,
        )

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

    def _forget(self, hs: HttpSession) -> None:
        if hs.id is not None:
            self.sessions.discard(hs.principal, hs.id, hs)

    def _path_agent(self, request: Request) -> Responder | None:
        name = request.path_params.get("agent")
        if name is None:
            return None
        agent = self.app.agents.get(name)
        if agent is None:
            raise_error(
                ("agent_not_found", f"no agent named {name!r} is hosted here"), 0, status=404
            )
        return agent

    def _session_id(self, request: Request) -> str | None:
        sid = request.headers.get(_SESSION_HEADER)
        if sid:
            return sid
        values = parse_qs(request.query).get("session_id")
        return values[0] if values else None

    def _lookup(self, request: Request) -> HttpSession:
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
        messages, first = await _split_body(request)
        agent = self._path_agent(request)
        if self._session_id(request) is None:
            if first.get("type") != "session.create":
                raise HTTPError(
                    400,
                    "A POST without X-Session-ID must start with session.create.",
                    code="session_id_required",
                )
            principal = request.principal
            self._check_quota(principal)
            claimed = self._claim_name(principal, first.get("session_id"))
            self._opening[principal.key] += 1
            try:
                return await self._open(request, agent, messages)
            finally:
                self._opening[principal.key] -= 1
                if not self._opening[principal.key]:
                    del self._opening[principal.key]
                if claimed is not None:
                    self._naming.discard(claimed)
        named = self._session_id(request)
        if named is not None and self.sessions.get(request.principal, named) is None:
            forwarded = await self._forward(request, named, agent, messages)
            if forwarded is not None:
                return forwarded
            await self._adopt(request.principal, named, agent)
            if self.app.draining and self.sessions.get(request.principal, named) is None:
                raise HTTPError(
                    503,
                    "This server is shutting down; send it again (another server takes it).",
                    code="draining",
                    headers=[("retry-after", "1")],
                )
        hs = self._lookup(request)
        if hs.host is not None:
            hs.host.renew(request.principal)  # verified by this request: its expiry holds
        if agent is not None and hs.agent is not None and agent is not hs.agent:
            raise HTTPError(
                404, f"Session {hs.id!r} belongs to another agent.", code="unknown_session"
            )
        accepted, error = self._feed(hs, messages, request.body)
        if error is not None:
            raise_error(error, accepted)
        assert hs.id is not None
        return json_response({"session_id": hs.id, "accepted": accepted})

    def _claim_name(self, principal: Principal, sid: object) -> LogKey | None:
        """Claim the id a ``session.create`` proposes for this request (``None``: it proposes
        none, the core makes one up).

        Refused (400 ``duplicate_session``) when the caller's session of that
        id is live, is being opened or taken on by another request, or has its
        log written here (a WebSocket session): the new session would begin
        that log afresh, and, refused after, let it go.
        """
        if not isinstance(sid, str):
            return None
        key = (principal.key, sid)
        if (
            self.sessions.get(principal, sid) is not None
            or key in self._naming
            or self.app.stores.event_log.writing(key)
        ):
            raise_error(("duplicate_session", f"session {sid!r} already exists"), 0)
        self._naming.add(key)
        return key

    def _check_quota(self, principal: Principal) -> None:
        """Refuse a new session of a principal at ``sse_max_sessions`` (opening ones count)."""
        limit = self.app.server_config.sse_max_sessions
        if self.sessions.held_by(principal) + self._opening[principal.key] >= limit:
            raise_error(
                (
                    "too_many_sessions",
                    f"Too many HTTP+SSE sessions of yours (at most {limit}); end one with "
                    "session.end, or wait for an unused one to expire.",
                ),
                0,
                status=429,
            )

    async def _open(
        self, request: Request, agent: Responder | None, messages: list[bytes]
    ) -> Response:
        """Open the session a POST's leading ``session.create`` asks for, feed the rest."""
        hs = HttpSession(self, agent, request.principal)
        self._launch(hs)
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
            if error is not None and error[0] == STORE_UNAVAILABLE:
                status = 503
            raise_error(error, accepted, status=status)
        sid = hs.host.session_ids[0]
        if not self.sessions.add(hs.principal, sid, hs):  # never attach, never replace
            hs.scope.cancel()
            raise_error(("duplicate_session", f"session {sid!r} already exists"), 0)
        hs.id = sid
        hs.host.on_message = hs.answer
        more, error = self._feed(hs, messages[1:], request.body)
        accepted += more
        if error is not None:
            raise_error(error, accepted, headers=[("x-session-id", hs.id)])
        # The session's record is in the log before its id is handed out:
        # another process may be asked for its stream or get its POSTs next.
        try:
            await self.app.stores.event_log.flush()
        except StoreUnavailable as exc:
            hs.scope.cancel()
            raise_error((exc.code, exc.message), 0, status=503)
        return json_response(
            {"session_id": hs.id, "accepted": accepted}, headers=[("x-session-id", hs.id)]
        )

    async def _forward(
        self, request: Request, sid: str, agent: Responder | None, messages: list[bytes]
    ) -> Response | None:
        """POST ``messages`` to the process that holds session ``sid`` (``None``: none does).

        With a log shared between processes (Redis), the session's record
        names the process that writes it; the events go there
        (:meth:`EventLog.ask <uamp_stores.event_log.EventLog.ask>`) and
        its answer is this POST's. Another principal's session has no record
        under this caller's key: not found, like one that never existed.
        """
        store = self.app.stores.event_log
        key = (request.principal.key, sid)
        try:
            record = await store.load(key)
        except ResumeError:
            return None
        if record.node == store.node or not await store.alive(record.node):
            return None
        message = {
            "op": "events",
            "agent": agent.name if agent is not None else None,
            "events": [m.decode() for m in messages],
            "body": request.body.decode(),
        }
        answer = await store.ask(record.node, key, message)
        if answer is None or "accepted" not in answer:
            return None
        error = answer.get("error")
        if error is not None:
            status = 404 if error[0] == "unknown_session" else 400
            raise_error(tuple(error), answer["accepted"], status=status)
        return json_response({"session_id": sid, "accepted": answer["accepted"]})

    async def _adopt(
        self, principal: Principal, sid: str, agent: Responder | None
    ) -> HttpSession | None:
        """Take over session ``sid`` of ``principal`` whose process died (``None``: not here).

        Like a WebSocket resume (docs/resume.md) without a client asking:
        the first process to claim the loss resumes the session from its log
        after the last logged event -- a response the lost process was
        running goes on from its checkpoint or ends ``interrupted`` -- and
        names itself in the session's record, so the other processes forward
        to it. A process that loses the claim waits (a few seconds at most)
        until the record names the winner, and the caller forwards there.
        """
        if self.app.draining:
            # Shutting down: it would lose the session again in a moment. A
            # request that reaches another process adopts it there.
            return None
        key = (principal.key, sid)
        if key in self._naming:
            # Opened or taken on by another request now: its outcome is this one's.
            with trio.move_on_after(_NAMING_WAIT):
                while key in self._naming:
                    await trio.sleep(0.05)
            return self.sessions.get(principal, sid)
        self._naming.add(key)
        try:
            return await self._take_on(principal, sid, agent)
        finally:
            self._naming.discard(key)

    async def _take_on(
        self, principal: Principal, sid: str, agent: Responder | None
    ) -> HttpSession | None:
        """:meth:`_adopt`, with the session's id claimed by this request."""
        store = self.app.stores.event_log
        key = (principal.key, sid)
        try:
            record = await store.load(key)
        except ResumeError:
            return None
        lost = record.node
        if lost == store.node or await store.alive(lost):
            return None
        owner = self.app.agents.get(record.agent)
        if owner is None or (agent is not None and agent is not owner):
            return None  # another endpoint's session: not found, as on the WebSocket
        if not await store.claim(key, f"adopt@{lost}"):
            with trio.move_on_after(5):
                while record.node == lost:
                    await trio.sleep(0.1)
                    record = await store.load(key)
            return None
        window = await store.window(key)
        last = await store.read(key, window.last - 1, 1) if window.last else []
        if not last:
            return None
        hs = HttpSession(self, owner, principal)
        self._launch(hs)
        await hs.started.wait()
        create = {
            "type": "session.create",
            "uamp_version": "1.0",
            "session_id": sid,
            "session": record.config or {"modalities": ["text"]},
            "extensions": {RESUME_FROM: last[0].event_id},
        }
        _, error = self._feed(hs, [orjson.dumps(create)], b"")
        if error is not None or hs.host is None or not self.sessions.add(principal, sid, hs):
            hs.scope.cancel()
            return self.sessions.get(principal, sid)
        hs.id = sid
        hs.host.on_message = hs.answer
        if record.running is None:
            # Quick without a response to carry on: answer once it is resumed.
            await hs.host.admitted()
        log.info("HTTP+SSE session %s adopted from lost process %s", sid, lost)
        return hs

    def _launch(self, hs: HttpSession) -> None:
        background = self.app.background
        if background is not None:
            # Under the server's lifecycle: a graceful shutdown ends it.
            background.start_soon(hs.run, name="uamp-sse-session")
        else:
            trio.lowlevel.spawn_system_task(hs.run, name="uamp-sse-session")

    def _feed(self, hs: HttpSession, messages: list[bytes], body: bytes) -> tuple[int, Any]:
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
        """``GET /events/stream``: the session's outgoing events as SSE.

        ``Last-Event-ID`` (an ``event_id``) replays what came after it: from
        the session's recent events, else from its event log. A session that
        lives in another process sharing the log (Redis) is streamed from the
        log (docs/resume.md).
        """
        self._path_agent(request)
        last = (request.headers.get("last-event-id") or "").strip() or None
        sid = self._session_id(request)
        hs = self.sessions.get(request.principal, sid) if sid is not None else None
        since: int | None = None
        if hs is None and sid is not None:
            if last is None:
                since = await self._running_since((request.principal.key, sid))
            hs = await self._adopt(request.principal, sid, self._path_agent(request))
        if hs is None or hs.host is None:
            if sid is None or not await self._logged(request.principal, sid):
                self._lookup(request)  # raises the one not-found answer
            assert sid is not None
            key = (request.principal.key, sid)
            after = await self._start(key, last) if since is None else since
            log.debug("HTTP+SSE session %s: stream follows the log after %d", sid, after)
            principal, agent = request.principal, self._path_agent(request)

            async def follow(send: SendChunk) -> None:
                adopted = await self._follow(send, key, after, principal, agent)
                if adopted is not None:
                    # Its process was lost meanwhile: adopted here, go on from it.
                    hs, cursor = adopted
                    missed = await self._log_after(key, cursor)
                    await hs.stream(send, missed, greeted=True)

            return _event_stream(follow, sid)
        missed = hs.replay_after(last) if last is not None else None
        if last is not None and missed is None and hs.id is not None:
            missed = await self._from_log((request.principal.key, hs.id), last)
        elif since is not None and hs.id is not None:
            # Adopted just now: the response in progress from its start.
            missed = await self._log_after((request.principal.key, hs.id), since)

        async def produce(send: SendChunk) -> None:
            await hs.stream(send, missed, after=last)

        log.debug("HTTP+SSE session %s: stream here after %s", hs.id, last)

        assert hs.id is not None
        return _event_stream(produce, hs.id)

    # --- the event log: Last-Event-ID beyond this process's memory ----------------

    async def _logged(self, principal: Principal, sid: str) -> bool:
        """Whether the log holds a resumable session ``sid`` of ``principal``."""
        try:
            await self.app.stores.event_log.load((principal.key, sid))
        except ResumeError:
            return False
        return True

    async def _start(self, key: LogKey, last: str | None) -> int:
        """The log position a stream after ``last`` starts after (now, without one)."""
        log = self.app.stores.event_log
        window = await log.window(key)
        if last is None:
            return window.last
        try:
            return start_after(window, await log.find(key, last), last)
        except ResumeError as exc:
            raise HTTPError(
                410 if exc.code == "beyond_retention" else 400, exc.message, code=exc.code
            ) from None

    async def _running_since(self, key: LogKey) -> int | None:
        """The log position just before the response in progress began (``None``: none runs).

        When it runs but its ``response.created`` is not logged yet: the
        log's last position read (it begins after it).

        Where a stream opened without ``Last-Event-ID`` starts when the
        session lives in another process (or is adopted now): its client
        has seen nothing of that response -- a stream that broke before
        ``response.created`` arrived, or a turn POSTed before the stream --
        and the process holding the session keeps what no stream took in
        its own queue, which a stream here cannot read. Starting "now"
        lost the response's beginning, or all of it.
        """
        events = self.app.stores.event_log
        try:
            running = (await events.load(key)).running
        except ResumeError as exc:
            log.debug("HTTP+SSE session %s: no record (%s)", key[1], exc.code)
            return None
        if running is None:
            log.debug("HTTP+SSE session %s: no response runs", key[1])
            return None
        cursor = (await events.window(key)).first - 1
        while entries := await events.read(key, cursor):
            for entry in entries:
                raw = orjson.loads(entry.data)
                if raw.get("type") == "response.created" and raw.get("response_id") == running:
                    return entry.position - 1
            cursor = entries[-1].position
        # It runs but has not logged its response.created yet (its payment
        # lock, say): that comes after all that was read. Starting at the
        # log's end found a moment later skipped what came in between.
        log.debug("HTTP+SSE session %s: %s runs, not in the log yet", key[1], running)
        return cursor

    async def _from_log(self, key: LogKey, last: str) -> list[tuple[str, bytes]]:
        return await self._log_after(key, await self._start(key, last))

    async def _log_after(self, key: LogKey, after: int) -> list[tuple[str, bytes]]:
        """What ``key`` 's log holds after position ``after``."""
        log = self.app.stores.event_log
        out: list[tuple[str, bytes]] = []
        stream = ResumeStream(after)
        while True:
            sent = stream.backfill(await log.read(key, stream.cursor)).send
            if not sent:
                return out
            out.extend((e.event_id, e.data) for e in sent)

    async def _follow(
        self,
        send: SendChunk,
        key: LogKey,
        after: int,
        principal: Principal,
        agent: Responder | None,
    ) -> tuple[HttpSession, int] | None:
        """Stream ``key`` 's log after position ``after`` as another process writes it.

        Returns when that process is lost and this one adopted the session
        (:meth:`_adopt`): the session, and the log position streamed up to;
        ``None`` once this process shuts down (the stream ends there).
        """
        log = self.app.stores.event_log
        stream = ResumeStream(after)
        await send(b": uamp event stream\n\n")
        beat = min(HEARTBEAT, self.limits.idle_timeout / 2)
        quiet = trio.current_time()
        while True:
            if self.app.draining:
                # Shutting down: the stream ends, and the client reconnects
                # with Last-Event-ID, through the balancer, to another process.
                return None
            sent = stream.backfill(await log.wait(key, stream.cursor, timeout=1.0)).send
            if sent:
                await send(b"".join(event_frame(e.event_id, e.data) for e in sent))
                quiet = trio.current_time()
                continue
            hs = await self._adopt(principal, key[1], agent)
            if hs is not None and hs.host is not None:
                return hs, stream.cursor
            if trio.current_time() - quiet >= beat:
                # A write is how a gone client is noticed.
                await send(b":\n\n")
                quiet = trio.current_time()

    def mount(self, app: Host) -> None:
        """Register the endpoints on ``app``."""
        app.agent_route(
            "POST", "/events", self.post_events, label="UAMP HTTP+SSE (POST)", meta=ROUTES
        )
        app.agent_route(
            "GET", "/events/stream", self.stream_events, label="UAMP SSE stream", meta=ROUTES
        )


def _event_stream(produce: Callable[[SendChunk], Awaitable[None]], sid: str) -> StreamingResponse:
    return StreamingResponse(
        producer=produce,
        headers=[
            ("content-type", "text/event-stream"),
            ("cache-control", "no-cache"),
            ("x-accel-buffering", "no"),
            ("x-session-id", sid),
        ],
    )


def _not_found(error: Any) -> bool:
    return error is not None and error[0] == "agent_not_found"


def raise_error(
    error: Any, accepted: int, *, status: int = 400, headers: list[tuple[str, str]] | None = None
) -> None:
    """Raise the HTTP error for a refused event (always raises)."""
    code, message = error if error is not None else ("invalid_event", "the event was refused")
    body = error_body(message, code=SPEC_SESSION_CODES.get(code, code))
    if body["error"]["code"] != code:
        body["error"]["details"] = {"reason": code}
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


async def _split_body(request: Request) -> tuple[list[bytes], dict[str, Any]]:
    """The body as one encoded message per event, and the first event as parsed."""
    parsed = await request.json()
    if isinstance(parsed, dict):
        return [request.body], parsed
    if isinstance(parsed, list) and parsed and all(isinstance(e, dict) for e in parsed):
        return [orjson.dumps(e) for e in parsed], parsed[0]
    raise HTTPError(
        400,
        "The body must be one UAMP event (a JSON object) or a non-empty JSON array of events.",
        code="invalid_event",
    )


def mount(app: Host, limits: SessionLimits | None = None) -> None:
    """Serve UAMP over HTTP+SSE on ``app`` (see the module docstring)."""
    SSEEventsTransport(app, limits).mount(app)
