"""UAMP over HTTP+SSE on ASGI (UAMP section 13.2), as ``uamp serve`` serves it.

Endpoints: ``POST .../events`` and ``GET .../events/stream`` for an agent
(``/agents/{name}/events``) and at the root (``/events``, the agent named by
``session.create``), with the bodies, headers and codes of
:mod:`uamp_trio.transports.sse_events`: a POST without ``X-Session-ID`` (or
``?session_id=``) starts with ``session.create`` and is answered
``{"session_id", "accepted"}`` with the id in ``X-Session-ID``; later POSTs
name the session; a refused event is a 400 (404 for an unknown session or
agent) whose JSON body says how many events before it were ``accepted``.

Theory of operation
-------------------
An HTTP session is a :class:`~uamp_asgi.transports.uamp_ws.Connection` with
exactly one UAMP session and no socket: every frame it owes goes into the
session's :class:`~uamp_asgi.transports.uamp_ws.Record` (the log a WebSocket
resume reads), and the event stream follows that record. So a stream opened
late still gets ``session.created``, a new stream with ``Last-Event-ID`` gets
what came after that event (410 ``beyond_retention`` once the record no
longer holds it), and a stream without it gets what no stream took yet. One
stream reads a session at a time: a new one ends the old.

A turn a POST starts (``response.create``, a tool result) runs in that POST's
request task once its answer is sent (:attr:`~uamp_asgi.http.JsonReply.after`),
so it outlives the POST and any stream, as under ``uamp serve``. A session
belongs to the principal that opened it: another principal's id is answered
404 like a missing one. Bounds: ``Config.sse_max_sessions`` sessions a
principal (one more ``session.create`` is 429 ``too_many_sessions``), and a
session with no stream, no turn and no POST for
``Config.sse_session_idle_timeout`` seconds is forgotten.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Final
from urllib.parse import parse_qs

import anyio
import orjson

from uamp_proto.connection import NEED_DATA
from uamp_proto.errors import ProtocolError, RemoteProtocolError
from uamp_proto.principal import Principal
from uamp_proto.responder import Responder
from uamp_proto.resume import LogEntry, ResumeError, start_after
from uamp_proto.sse import encode_json
from uamp_stores.background import start_detached
from uamp_stores.event_log import EventLog, LogKey, SessionRecord
from uamp_stores.health import StoreUnavailable

from ..app import Host
from ..http import HTTPError, JsonReply, Reply, Request, StreamReply, Write
from .uamp_ws import Connection

__all__ = ["HEARTBEAT", "mount"]

#: A comment is written when a stream has been quiet this long (seconds), so
#: proxies keep it open and a client that left is noticed.
HEARTBEAT: Final = 15.0
#: Sessions kept over all principals.
MAX_SESSIONS: Final = 4096
#: How long a request waits for another that opens or takes on the same
#: session before it answers 409 ``session_elsewhere`` (s).
_NAMING_WAIT: Final = 5.0
#: How long a stream waits for new entries before it looks again (a newer
#: stream of its session replaced it; a heartbeat is due).
_LOOK: Final = 1.0
_SESSION_HEADER: Final = "x-session-id"
#: UAMP 6.3 has no "agent not found": the spec's ``agent_offline``, the
#: precise code in ``details.reason`` (as ``uamp serve``).
_SPEC_CODES: Final = {"agent_not_found": "agent_offline"}


class _Refused(Exception):
    """A ``session.create`` the session turned down."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class _Elsewhere(Exception):
    """The session is served by another live process (its record names it)."""

    def __init__(self, record: SessionRecord) -> None:
        super().__init__(record.node)
        self.record = record


class _Answer(HTTPError):
    """A refusal with the HTTP+SSE body (``accepted`` beside the error)."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        accepted: int,
        headers: list[tuple[str, str]] | None = None,
    ) -> None:
        super().__init__(status, message, code=code, headers=headers)
        spec = _SPEC_CODES.get(code, code)
        error: dict[str, Any] = {
            "message": message,
            "type": "invalid_request_error",
            "param": None,
            "code": spec,
        }
        if spec != code:
            error["details"] = {"reason": code}
        self.body = {"error": error, "accepted": accepted}


class _HttpSession(Connection):
    """One HTTP session: a connection without a socket, its frames in its log."""

    transport = "uamp-sse"

    def __init__(self, host: Host, fixed: Responder | None, principal: Principal) -> None:
        super().__init__(host, None, fixed, principal)
        self.sid: str | None = None
        self.pending: list[tuple[Callable[..., Coroutine[Any, Any, Any]], tuple[object, ...]]] = []
        #: Position in the log up to which a stream took the frames.
        self.delivered = 0
        self.readers = 0
        self.reader: object | None = None
        self.last_seen = anyio.current_time()

    def spawn(self, func: Callable[..., Coroutine[Any, Any, Any]], *args: object) -> None:
        self.pending.append((func, args))

    async def write(self, frames: list[bytes]) -> None:
        self.log_frames(frames, self.sid)

    async def replay(self, entries: Sequence[LogEntry]) -> None:
        """Nothing: the stream reads the log itself."""

    async def deliver(self, frames: list[bytes], sid: str | None) -> None:
        if self.sid is None and sid is not None and sid in self.keys:
            self.sid = sid
        await self.write(frames)

    async def refuse(
        self, sid: str | None, code: str, message: str, field: str | None = None
    ) -> None:
        raise _Refused(code, message)

    @property
    def key(self) -> LogKey:
        assert self.sid is not None
        return (self.principal.key, self.sid)

    @property
    def ended(self) -> bool:
        return self.sid is not None and self.sid not in self.conn.sessions

    @property
    def idle(self) -> bool:
        return not self.readers and not self.turns and not self.pending

    async def feed(self, messages: list[bytes]) -> tuple[int, ProtocolError | _Refused | None]:
        """Process ``messages`` in order; how many were taken, and why the next was not."""
        self.last_seen = anyio.current_time()
        for n, message in enumerate(messages):
            if self.sid is not None:
                # The session is the POST's: its events need not name it.
                parsed = orjson.loads(message)
                if isinstance(parsed, dict) and parsed.get("session_id") is None:
                    message = orjson.dumps({**parsed, "session_id": self.sid})
            self.conn.receive(message)
            try:
                event = self.conn.next_event()
                while event is not NEED_DATA:  # with what handling it queued (a call's turn)
                    await self.write(self.conn.data_to_send())
                    await self.handle(event)
                    event = self.conn.next_event()
            except RemoteProtocolError as err:
                self.conn.data_to_send()  # the POST's answer says it instead
                return n, err
            except _Refused as refused:
                return n, refused
        return len(messages), None

    async def adopt(self, sid: str, agent: Responder, record: SessionRecord) -> None:
        """Serve ``sid`` here from its log (its process is gone, or this one restarted).

        The core gets the session as the client once created it; a response
        still running elsewhere is followed (or ended ``interrupted``) before
        this returns, so the next POST finds the session taken on.
        """
        create = {"type": "session.create", "session_id": sid, "agent": agent.name}
        self.conn.receive(orjson.dumps(create))
        self.conn.next_event()
        self.conn.data_to_send()
        self.agents[sid] = agent
        self.sid = sid
        start = (await self.log.window(self.key)).last
        await self.resumed(sid, agent, record, start)
        self.delivered = start
        await self.run_pending()

    async def on_message(self, sid: str, message: dict[str, Any]) -> dict[str, Any]:
        """Events POSTed to another process for this session (``EventLog.ask``)."""
        if message.get("op") != "events":
            return await super().on_message(sid, message)
        name, agent = message.get("agent"), self.agents.get(sid)
        if name is not None and agent is not None and name != agent.name:
            return {"accepted": 0, "error": ["unknown_session", _unknown(sid)]}
        events = [str(e).encode() for e in message.get("events", ())]
        accepted, error = await self.feed(events)
        if self.pending:  # the turns it started run on here, as after a POST
            start_detached(self.host.background, self.run_pending, "uamp-sse-turn", "a turn")
        failed = None if error is None else [error.code, str(error.message)]
        return {"accepted": accepted, "error": failed}

    async def run_pending(self) -> None:
        """Run the turns the last POST started (after its answer went out)."""
        pending, self.pending = self.pending, []
        if pending:
            async with anyio.create_task_group() as group:
                for func, args in pending:
                    group.start_soon(func, *args)
        self.last_seen = anyio.current_time()

    async def stream(self, write: Write, position: int | None) -> None:
        """Write the log after ``position`` (``None``: what no stream took), then live."""
        key = self.key
        log = self.log
        me = object()
        self.reader = me  # the stream reading now stops at its next look
        self.readers += 1
        at = self.delivered if position is None else position
        quiet = anyio.current_time()
        try:
            await write(b": uamp event stream\n\n")
            while self.reader is me:
                entries = await log.read(key, at)
                if not entries:
                    if self.ended:
                        return
                    entries = await log.wait(key, at, timeout=_LOOK)
                if entries:
                    at = entries[-1].position
                    self.delivered = max(self.delivered, at)
                    await write(
                        b"".join(encode_json(e.data, id=e.event_id or None) for e in entries)
                    )
                    quiet = anyio.current_time()
                elif anyio.current_time() - quiet >= HEARTBEAT:
                    await write(b":\n\n")
                    quiet = anyio.current_time()
        finally:
            self.readers -= 1
            if self.reader is me:
                self.reader = None
            self.last_seen = anyio.current_time()


def _messages(request: Request) -> tuple[list[bytes], dict[str, Any]]:
    """The body as one encoded message per event, and the first event as parsed."""
    parsed = request.json()
    if isinstance(parsed, dict):
        return [request.body], parsed
    if isinstance(parsed, list) and parsed and all(isinstance(e, dict) for e in parsed):
        return [orjson.dumps(e) for e in parsed], parsed[0]
    raise _Answer(
        400,
        "invalid_event",
        "The body must be one UAMP event (a JSON object) or a non-empty JSON array of events.",
        0,
    )


def _too_many(limit: int) -> str:
    return (
        f"Too many HTTP+SSE sessions of yours (at most {limit}); end one with "
        "session.end, or wait for an unused one to expire."
    )


_ELSEWHERE: Final = (
    "Another process serves this session now; send its requests there (a load "
    "balancer keeping a session's requests on one process does)."
)


def _unknown(sid: str) -> str:
    return f"No session {sid!r}: it never existed, ended or expired."


def _duplicate(sid: str) -> _Answer:
    return _Answer(400, "duplicate_session", f"session {sid!r} already exists", 0)


def _status(code: str) -> int:
    return 404 if code in ("agent_not_found", "unknown_session") else 400


class _Sessions:
    """The live HTTP sessions of one app, by owner and session id."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.live: dict[LogKey, _HttpSession] = {}
        self.held: Counter[tuple[str, str]] = Counter()
        #: Sessions a request is opening or taking on now, claimed before its
        #: first await: no other request begins (or takes on) their log meanwhile.
        self.naming: set[LogKey] = set()

    def session_id(self, request: Request) -> str | None:
        sid = request.headers.get(_SESSION_HEADER)
        if sid:
            return sid
        values = parse_qs(request.query).get("session_id")
        return values[0] if values else None

    def path_agent(self, request: Request) -> Responder | None:
        if "agent" not in request.path_params:
            return None
        try:
            return self.host.resolve_agent(request.path_params)
        except HTTPError as missing:
            raise _Answer(404, "agent_not_found", missing.message, 0) from None

    async def find(self, request: Request, sid: str | None) -> _HttpSession:
        if sid is None:
            raise _Answer(
                400, "session_id_required", "Name the session in the X-Session-ID header.", 0
            )
        hs = self.live.get((request.principal.key, sid))
        agent = self.path_agent(request)
        if hs is None:
            hs = await self.adopt(request, sid, agent)
        if hs is None or hs.ended or (agent is not None and hs.agents.get(sid) is not agent):
            raise _Answer(404, "unknown_session", _unknown(sid), 0)
        return hs

    async def adopt(
        self, request: Request, sid: str, agent: Responder | None
    ) -> _HttpSession | None:
        """The caller's session ``sid`` from the event log, served here from now on.

        Only a session whose process is gone (no heartbeat on a shared store;
        any other process on a single-process one) is taken on, by one
        process (a claim); one that another live process serves raises
        :class:`_Elsewhere`. ``None``: the log has no such session of the
        caller's (another principal's is the same), or it ended or expired.
        """
        key = (request.principal.key, sid)
        if key in self.naming:
            # Opened or taken on by another request now: its outcome is this one's.
            with anyio.move_on_after(_NAMING_WAIT):
                while key in self.naming:
                    await anyio.sleep(0.05)
            if key in self.naming:
                raise _Answer(409, "session_elsewhere", _ELSEWHERE, 0)
            return self.live.get(key)
        self.naming.add(key)
        try:
            return await self.take_on_logged(request, sid, agent)
        finally:
            self.naming.discard(key)

    async def take_on_logged(
        self, request: Request, sid: str, agent: Responder | None
    ) -> _HttpSession | None:
        """:meth:`adopt`, with the session's name claimed by this request."""
        log = self.host.event_log
        principal = request.principal
        try:
            record = await log.load((principal.key, sid))
        except ResumeError:
            return None
        except StoreUnavailable as down:
            raise _Answer(503, down.code, down.message, 0) from None
        found = self.host.agents.get(record.agent)
        if found is None or (agent is not None and agent is not found):
            return None  # another endpoint's session: not found, as on the WebSocket
        key, lost = (principal.key, sid), record.node
        if lost == log.node:
            return None  # this process's, ended or forgotten here
        claim = f"adopt@{lost}"
        try:
            if await log.alive(lost):
                raise _Elsewhere(record)
            if not await log.claim(key, claim, ttl=30):
                raise _Answer(409, "session_elsewhere", _ELSEWHERE, 0)  # being taken on
        except StoreUnavailable as down:
            raise _Answer(503, down.code, down.message, 0) from None
        hs = _HttpSession(self.host, agent, principal)
        try:
            await self.take_on(hs, sid, found, record)
        except BaseException:
            # Every way out but the session served here gives back what the
            # take-on held -- the log, the conversation counted in the
            # principal's budget -- and the claim, so a later request may try
            # again (a single-process store's claim never expires).
            hs.release_all()
            with anyio.CancelScope(shield=True), contextlib.suppress(StoreUnavailable):
                await log.unclaim(key, claim)
            raise
        current = self.live.get(key)
        if current is not None:  # another request adopted it meanwhile
            hs.release_all()
            return current
        self.live[key] = hs
        self.held[principal.key] += 1
        return hs

    async def take_on(
        self, hs: _HttpSession, sid: str, agent: Responder, record: SessionRecord
    ) -> None:
        """Serve ``sid`` in ``hs`` from its log, or raise the :class:`_Answer` that refuses it."""
        self.sweep()
        limit = self.host.config.sse_max_sessions
        if self.held[hs.principal.key] >= limit:
            raise _Answer(429, "too_many_sessions", _too_many(limit), 0)
        try:
            await hs.adopt(sid, agent, record)
        except _Refused as refused:
            raise _Answer(_status(refused.code), refused.code, refused.message, 0) from None
        except StoreUnavailable as down:
            raise _Answer(503, down.code, down.message, 0) from None
        if sid not in hs.keys:  # the store failed while it was taken on
            raise _Answer(503, "store_unavailable", "The session store did not answer.", 0)

    def forget(self, hs: _HttpSession) -> None:
        hs.release_all()  # its log stays, to be resumed
        if hs.sid is not None and self.live.get((hs.principal.key, hs.sid)) is hs:
            del self.live[(hs.principal.key, hs.sid)]
            self.held[hs.principal.key] -= 1
            if not self.held[hs.principal.key]:
                del self.held[hs.principal.key]

    def sweep(self) -> None:
        """Forget ended sessions and idle ones past their timeout."""
        deadline = anyio.current_time() - self.host.config.sse_session_idle_timeout
        for hs in list(self.live.values()):
            if hs.ended or (hs.idle and hs.last_seen < deadline):
                self.forget(hs)

    async def post(self, request: Request) -> Reply:
        """``POST .../events``: one event or a JSON array of them."""
        messages, first = _messages(request)
        agent = self.path_agent(request)
        sid = self.session_id(request)
        if sid is None:
            if first.get("type") != "session.create":
                raise _Answer(
                    400,
                    "session_id_required",
                    "A POST without X-Session-ID must start with session.create.",
                    0,
                )
            return await self.open(request, agent, messages, first.get("session_id"))
        try:
            hs = await self.find(request, sid)
        except _Elsewhere as away:
            answered = await self.forward(request, sid, agent, messages, away.record)
            if answered is not None:
                return answered
            try:
                hs = await self.find(request, sid)  # its process did not answer: gone now?
            except _Elsewhere:
                raise _Answer(409, "session_elsewhere", _ELSEWHERE, 0) from None
        accepted, error = await hs.feed(messages)
        if hs.ended:
            self.forget(hs)
        if error is not None:
            raise _Answer(_status(error.code), error.code, str(error.message), accepted)
        return JsonReply({"session_id": sid, "accepted": accepted}, after=hs.run_pending)

    async def open(
        self, request: Request, agent: Responder | None, messages: list[bytes], named: object
    ) -> JsonReply:
        """Open a session with ``messages`` (a ``session.create`` first, proposing ``named``)."""
        principal = request.principal
        self.sweep()
        limit = self.host.config.sse_max_sessions
        if self.held[principal.key] >= limit or len(self.live) >= MAX_SESSIONS:
            raise _Answer(429, "too_many_sessions", _too_many(limit), 0)
        claimed: LogKey | None = None
        if isinstance(named, str):
            claimed = (principal.key, named)
            if (
                claimed in self.live
                or claimed in self.naming
                or self.host.event_log.writing(claimed)
            ):
                # Refused before it is opened: opening it would start its log
                # afresh under the session that writes it (live here, being
                # taken on by another request, or on a WebSocket).
                raise _duplicate(named)
            self.naming.add(claimed)  # before the first await: the name is this request's
        try:
            return await self.opened(principal, agent, messages)
        finally:
            if claimed is not None:
                self.naming.discard(claimed)

    async def opened(
        self, principal: Principal, agent: Responder | None, messages: list[bytes]
    ) -> JsonReply:
        """:meth:`open`, with the session's name (if it proposes one) claimed by this request."""
        hs = _HttpSession(self.host, agent, principal)
        try:
            accepted, error = await hs.feed(messages[:1])
            if error is not None or hs.sid is None:
                code = error.code if error is not None else "invalid_event"
                message = str(error.message) if error is not None else "The session was not opened."
                raise _Answer(_status(code), code, message, 0)
            key = (principal.key, hs.sid)
            if key in self.live:  # never attach to (or replace) a live session
                raise _duplicate(hs.sid)
        except BaseException:
            # A session not opened holds nothing: what it took is let go (a
            # log only if it still writes it, never the live session's).
            hs.release_all()
            raise
        self.live[key] = hs
        self.held[principal.key] += 1
        log = self.host.event_log
        if log.shared:  # findable by every process before its id is handed out
            with contextlib.suppress(StoreUnavailable):  # written once the store answers
                await log.flush()
        headers = [(_SESSION_HEADER, hs.sid)]
        more, error = await hs.feed(messages[1:])
        if error is not None:
            raise _Answer(
                _status(error.code), error.code, str(error.message), accepted + more, headers
            )
        return JsonReply(
            {"session_id": hs.sid, "accepted": accepted + more},
            headers=headers,
            after=hs.run_pending,
        )

    async def get(self, request: Request) -> Reply:
        """``GET .../events/stream``: the session's events as SSE."""
        sid = self.session_id(request)
        away: SessionRecord | None = None
        try:
            hs: _HttpSession | None = await self.find(request, sid)
        except _Elsewhere as elsewhere:
            hs, away = None, elsewhere.record
        assert sid is not None
        log, key = self.host.event_log, (request.principal.key, sid)
        last = (request.headers.get("last-event-id") or "").strip()
        position: int | None = None
        try:
            if last:
                position = start_after(await log.window(key), await log.find(key, last), last)
            elif hs is None:
                position = (await log.window(key)).last  # from now on
        except ResumeError as exc:
            status = 410 if exc.code == "beyond_retention" else 400
            raise _Answer(status, exc.code, exc.message, 0) from None
        except StoreUnavailable as down:
            raise _Answer(503, down.code, down.message, 0) from None

        async def produce(write: Write) -> None:
            if hs is not None:
                await hs.stream(write, position)
            else:
                assert away is not None and position is not None
                await _watch(write, log, key, position, away.node)

        return StreamReply(
            produce,
            headers=[
                ("content-type", "text/event-stream"),
                ("cache-control", "no-cache"),
                ("x-accel-buffering", "no"),
                (_SESSION_HEADER, sid),
            ],
        )

    async def forward(
        self,
        request: Request,
        sid: str,
        agent: Responder | None,
        messages: list[bytes],
        record: SessionRecord,
    ) -> Reply | None:
        """POST ``messages`` to the process serving ``sid`` (``None``: it did not answer).

        The question goes through the event log (``EventLog.ask``) in the
        format ``uamp serve`` uses, and that process's answer is this POST's.
        """
        log, key = self.host.event_log, (request.principal.key, sid)
        message = {
            "op": "events",
            "agent": agent.name if agent is not None else None,
            "events": [m.decode() for m in messages],
            "body": request.body.decode(),
        }
        try:
            answer = await log.ask(record.node, key, message)
        except StoreUnavailable as down:
            raise _Answer(503, down.code, down.message, 0) from None
        if answer is None or "accepted" not in answer:
            return None
        error = answer.get("error")
        if error:
            code, text = str(error[0]), str(error[1])
            raise _Answer(_status(code), code, text, int(answer["accepted"]))
        return JsonReply({"session_id": sid, "accepted": answer["accepted"]})


async def _watch(write: Write, log: EventLog, key: LogKey, position: int, node: str) -> None:
    """Stream ``key`` 's log after ``position`` while process ``node`` serves the session.

    Read only: the session stays that process's. The stream ends once the
    session ends, or once that process is gone (the next request here takes
    the session on).
    """
    at, quiet = position, anyio.current_time()
    await write(b": uamp event stream\n\n")
    while True:
        entries = await log.wait(key, at, timeout=_LOOK)
        if entries:
            at = entries[-1].position
            await write(b"".join(encode_json(e.data, id=e.event_id or None) for e in entries))
            quiet = anyio.current_time()
            continue
        try:
            record = await log.load(key)
        except ResumeError:
            return  # ended or expired
        if record.node != node or not await log.alive(node):
            return
        if anyio.current_time() - quiet >= HEARTBEAT:
            await write(b":\n\n")
            quiet = anyio.current_time()


def mount(host: Host) -> None:
    """Serve UAMP over HTTP+SSE at ``.../events`` and ``.../events/stream``."""
    sessions = _Sessions(host)

    async def post(request: Request) -> Reply:
        try:
            return await sessions.post(request)
        except _Answer as refused:
            return JsonReply(refused.body, refused.status, refused.headers)

    async def get(request: Request) -> Reply:
        try:
            return await sessions.get(request)
        except _Answer as refused:
            return JsonReply(refused.body, refused.status, refused.headers)

    host.route("POST", "/events", post)
    host.route("GET", "/events/stream", get)
