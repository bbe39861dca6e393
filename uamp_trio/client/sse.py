"""The UAMP HTTP+SSE client (:func:`connect_sse`, :class:`SSEClient`, UAMP section 13.2).

One HTTP session, hence one sans-IO core, per UAMP session: events are
POSTed, and one task per session reads the event stream. The theory of
operation is :mod:`uamp_trio.client.uamp`'s.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import httpx
import trio

from uamp_proto import events as ev
from uamp_proto.connection import ClientConnection, ConnectionConfig
from uamp_proto.signing import JWKS
from uamp_proto.sse import SSEParser

from .session import (
    _UNAVAILABLE,
    DEFAULT_SESSION_BUFFER,
    ClientError,
    ClientSession,
    _encode,
    _Link,
    _Opening,
    _received,
    _running,
    _transient,
    _Unavailable,
)
from .verify import JWKSSource, load_jwks

log = logging.getLogger("uamp_trio.client")

#: The backoff between reopenings of a broken event stream (doubling).
_FIRST_DELAY, _MAX_DELAY = 0.1, 5.0


class SSEClient(_Link):
    """A UAMP client over HTTP+SSE (section 13.2); make one with :func:`connect_sse`.

    Each session is its own HTTP session: ``session.create`` is POSTed to
    ``{base}/agents/{agent}/events`` (or, without an agent or with
    ``agent_in_path=False``, to ``{base}/events`` naming the agent in the
    event), later events to the same path, and one task per session reads
    ``.../events/stream``.
    """

    def __init__(
        self,
        http: httpx.AsyncClient,
        base_url: str,
        nursery: trio.Nursery,
        *,
        delta_window: int | None,
        buffer: int,
        jwks: JWKS | None = None,
        agent_in_path: bool = True,
        resume_for: float | None = None,
    ) -> None:
        self._agent_in_path = agent_in_path
        #: With ``auto_resume``: how long a broken stream is dialled again.
        self._resume_for = resume_for
        #: How many times a session's event stream was opened again.
        self.reconnects = 0
        self._jwks = jwks
        self._http = http
        self._base = base_url.rstrip("/")
        self._nursery = nursery
        self._delta_window = delta_window
        self._buffer = buffer
        self.sessions: dict[str, ClientSession] = {}
        self._paths: dict[str, str] = {}
        self._scopes: dict[str, trio.CancelScope] = {}
        #: Bytes read from the sessions' event streams so far (SSE framing included).
        self.bytes_received = 0

    async def _open(self, opening: _Opening) -> ClientSession:
        conn = ClientConnection(ConnectionConfig(delta_window=self._delta_window))
        session = self._session(conn, opening)
        agent, by_path = opening.agent, self._agent_in_path
        prefix = f"{self._base}/agents/{agent}" if agent and by_path else self._base
        self._paths[opening.session_id] = prefix
        data = opening.encode(conn, agent=None if by_path else agent)
        resp = await self._http.post(
            f"{prefix}/events", content=data, headers={"content-type": "application/json"}
        )
        if resp.status_code != 200:
            raise _http_error(resp)
        sid = resp.headers.get("x-session-id", opening.session_id)
        self.sessions[sid] = session
        scope = trio.CancelScope()
        self._scopes[sid] = scope
        await self._nursery.start(self._stream_task, session, prefix, scope)
        await session._wait_created()
        return session

    async def _send_events(self, session: ClientSession, events: list[ev.Event]) -> bytes | None:
        encoded, refused = _encode(session._conn, events)
        body = None
        if encoded:
            body = b"[" + b",".join(encoded) + b"]"
            await self._post(session, body)
        if refused is not None:
            raise refused
        return body

    async def _post(self, session: ClientSession, body: bytes) -> None:
        """POST events of ``session``; with ``auto_resume`` again while no server is there.

        Only a POST the server cannot have acted on is sent again: a refused
        connection, or a 502/503/504 answer (a load balancer with no node, a
        draining node); one cut after it was sent is an error.
        """
        prefix = self._paths[session.id]
        delay = _FIRST_DELAY
        give_up = trio.current_time() + (self._resume_for or 0.0)
        while True:
            try:
                resp = await self._http.post(
                    f"{prefix}/events",
                    content=body,
                    headers={"content-type": "application/json", "x-session-id": session.id},
                )
            except httpx.ConnectError as exc:
                error: ClientError = _Unavailable("closed", f"POST failed: {exc}")
            except httpx.HTTPError as exc:
                raise ClientError("closed", f"POST failed: {exc}") from None
            else:
                if resp.status_code == 200:
                    return
                error = _http_error(resp)
                if resp.status_code not in _UNAVAILABLE:
                    raise error
            if self._resume_for is None or trio.current_time() + delay > give_up:
                raise error
            log.info("posting to %s again: %s", session.id, error)
            await trio.sleep(delay)
            delay = min(delay * 2, _MAX_DELAY)

    async def _forget(self, session: ClientSession) -> None:
        self.sessions.pop(session.id, None)
        scope = self._scopes.pop(session.id, None)
        if scope is not None:
            scope.cancel()

    async def _stream_task(
        self,
        session: ClientSession,
        prefix: str,
        scope: trio.CancelScope,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        why: BaseException | None = None
        opened = False

        def started() -> None:
            nonlocal opened
            opened = True
            task_status.started()

        with scope:
            try:
                await self._read_stream(session, prefix, started)
            except (httpx.HTTPError, ClientError) as exc:
                if not opened:
                    raise  # the session's first stream: _open reports it
                why = exc
            # The stream broke (a node restarting, a dropped connection): with
            # auto_resume, open it again where it broke (Last-Event-ID).
            delay, give_up = _FIRST_DELAY, trio.current_time() + (self._resume_for or 0.0)
            while self._resume_for is not None and session._ended is None:
                if isinstance(why, ClientError) and not _transient(why):
                    break  # the session is gone there (404, 410): no use
                if trio.current_time() + delay > give_up:
                    break
                log.info("reading the events of %s again: %s", session.id, why)
                await trio.sleep(delay)
                delay = min(delay * 2, _MAX_DELAY)
                try:
                    if await self._read_stream(session, prefix, None):
                        # It carried events: a new break gets the whole window.
                        delay, give_up = _FIRST_DELAY, trio.current_time() + self._resume_for
                    why = None
                except (httpx.HTTPError, ClientError) as exc:
                    why = exc
        if why is not None:
            log.debug("SSE stream of %s ended: %s", session.id, why)
        if isinstance(why, ClientError) and not _transient(why):
            session._close(why)  # unknown_session, beyond_retention ...: the server's word
        else:
            session._close(ClientError("closed", f"the event stream of session {session.id} ended"))

    async def _read_stream(
        self,
        session: ClientSession,
        prefix: str,
        started: Callable[[], None] | None,
    ) -> int:
        """Read the session's event stream until it ends; how many events it carried.

        Raises why it could not be opened or broke.

        ``started`` is called once the stream is open (the first one);
        without it, this is a reopening: ``Last-Event-ID`` asks for what
        came after the last event read.
        """
        conn, parser = session._conn, SSEParser()
        headers = {"x-session-id": session.id, "accept": "text/event-stream"}
        if started is None and session.last_event_id is not None:
            headers["last-event-id"] = session.last_event_id
        async with self._http.stream(
            "GET",
            f"{prefix}/events/stream",
            headers=headers,
            timeout=httpx.Timeout(10.0, read=None),
        ) as resp:
            if resp.status_code != 200:
                await resp.aread()
                error = _http_error(resp)
                if started is None and resp.status_code in _UNAVAILABLE:
                    raise _Unavailable(error.code, error.message)
                raise error
            if started is not None:
                started()
            else:
                self.reconnects += 1
            carried = 0
            try:
                async for chunk in resp.aiter_raw():
                    self.bytes_received += len(chunk)
                    for sse in parser.feed(chunk):
                        carried += 1
                        conn.receive(sse.data)
                        if sse.id:
                            session.last_event_id = sse.id
                        for event in _received(conn):
                            await session._deliver(event, self._nursery)
                    owed = conn.data_to_send()
                    if owed:  # delta-window acks
                        await self._post(session, b"[" + b",".join(owed) + b"]")
            except httpx.HTTPError as exc:
                raise _Unavailable("closed", f"the event stream broke: {exc}") from None
        return carried

    async def aclose(self) -> None:
        """Stop every session's stream."""
        for scope in self._scopes.values():
            scope.cancel()


def _http_error(resp: httpx.Response) -> ClientError:
    try:
        err = resp.json().get("error", {})
        return ClientError(
            err.get("code") or f"http_{resp.status_code}",
            err.get("message") or resp.text,
            details=err.get("details"),
        )
    except (ValueError, AttributeError):
        return ClientError(f"http_{resp.status_code}", resp.text)


@asynccontextmanager
async def connect_sse(
    base_url: str,
    *,
    delta_window: int | None = None,
    headers: dict[str, str] | None = None,
    session_buffer: int = DEFAULT_SESSION_BUFFER,
    http: httpx.AsyncClient | None = None,
    verify: JWKSSource | None = None,
    agent_in_path: bool = True,
    auto_resume: bool = False,
    resume_for: float = 60.0,
) -> AsyncIterator[SSEClient]:
    """A UAMP client over HTTP+SSE against ``base_url`` (``http://host:port``).

    Args:
        base_url: The server's base URL.
        delta_window: Opt every session into delta windows of this size.
        headers: Headers for every request.
        session_buffer: Events buffered per session for its consumer.
        http: An httpx client to use (default: a new one).
        verify: Check every response's signature against this JWKS (see
            :func:`connect`).
        agent_in_path: Address a session's agent by its path
            (``/agents/{agent}/events``, the default) rather than by the
            ``agent`` field of ``session.create`` sent to ``/events``.
        auto_resume: When a session's event stream breaks (a node restarting
            or draining, a dropped connection), open it again with backoff
            and ``Last-Event-ID``, so the session goes on where it broke
            (docs/resume.md); a POST refused for want of a server (no
            connection, 502, 503, 504) is sent again too.
        resume_for: With ``auto_resume``, how long to keep trying before the
            session is closed.
    """
    jwks = await load_jwks(verify) if verify is not None else None
    own = http is None
    client_http = http or httpx.AsyncClient(headers=headers, timeout=30.0)

    def start(nursery: trio.Nursery) -> SSEClient:
        return SSEClient(
            client_http,
            base_url,
            nursery,
            delta_window=delta_window,
            buffer=session_buffer,
            jwks=jwks,
            agent_in_path=agent_in_path,
            resume_for=resume_for if auto_resume else None,
        )

    try:
        async with _running(start, SSEClient.aclose) as client:
            yield client
    finally:
        if own:
            with trio.CancelScope(shield=True):
                await client_http.aclose()
