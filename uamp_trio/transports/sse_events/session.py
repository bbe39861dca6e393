"""One HTTP+SSE session: its session host, the reader of its events, its stream, its expiry.

Theory of operation
-------------------
:mod:`uamp_trio.transports.sse_events.transport` serves UAMP over HTTP + SSE
(UAMP section 13.2); each session it opens is an :class:`HttpSession`: one
:class:`~uamp_trio.hosting.sessions.SessionHost` (one
:class:`~uamp_proto.connection.ServerConnection` with exactly one UAMP
session) run by a task that outlives the POST which started it
(:meth:`HttpSession.run`, in the server's background nursery, else a trio
system task), fed by POSTs, read by ``GET .../events/stream``.

One reader at a time: a session's outbox is read by its attached stream
(:meth:`HttpSession.stream`), or, while none is, by a keeper task that
holds the latest events for the next stream (``unsent``,
:meth:`HttpSession._keep`): an agent never waits for a reader that may be
reading the session from another process's log, or be between two streams.
A stream that opens -- or replaces another -- first waits for the previous
reader to stop; what that one took is in the session's recent events
(``replay``, what ``Last-Event-ID`` reads) and, when it was not written,
back in ``unsent``. Every event is in the log before a client sees it
(:func:`_logged_first`). A stream writes a comment every :data:`HEARTBEAT`
seconds at most (a write is the only way to notice a client that went
away) and ends once a graceful shutdown begins and no response runs (the
client resumes elsewhere with ``Last-Event-ID``).

A session with no stream attached and no POST for its ``idle_timeout``
expires (:meth:`HttpSession._expire`), as does one whose UAMP session
ended (:meth:`HttpSession.end`); either way the transport forgets it.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections import deque
from typing import TYPE_CHECKING, Any, Final

import trio

from uamp_proto.principal import Principal
from uamp_proto.responder import Responder
from uamp_proto.resume import event_id_of
from uamp_proto.sse import encode_json
from uamp_stores.health import StoreUnavailable

from ...engines.http import SendChunk
from ...hosting.outbox import OutboxClosed
from ...hosting.sessions import SessionHost

if TYPE_CHECKING:
    from .transport import SSEEventsTransport

__all__ = ["HEARTBEAT", "REPLAY_SIZE", "HttpSession", "event_frame"]

log = logging.getLogger("uamp_trio.sse_events")

#: Events kept per session for ``Last-Event-ID`` replay.
REPLAY_SIZE: Final = 256
#: A comment line is written when a stream has been quiet this long, so
#: proxies keep it open (seconds).
HEARTBEAT: Final = 15.0


class HttpSession:
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
        #: The latest events sent, ``(event_id, message)``, for ``Last-Event-ID``.
        self.replay: deque[tuple[str, bytes]] = deque(maxlen=REPLAY_SIZE)
        #: The latest events no stream took (:meth:`_keep`), for the next stream.
        self.unsent: deque[tuple[str, bytes]] = deque(maxlen=REPLAY_SIZE)
        #: Set while no stream is attached: :meth:`_keep` takes the events then.
        self.unattended = trio.Event()
        self.unattended.set()
        self._keeping: trio.CancelScope | None = None
        #: Set once :meth:`_keep` stopped taking (its last batch is in :attr:`unsent`).
        self._kept = trio.Event()
        self._kept.set()
        #: Set once the latest stream stopped writing (what it took and did not
        #: write is back in :attr:`unsent`).
        self._written = trio.Event()
        self._written.set()

    async def answer(self, message: dict[str, Any]) -> dict[str, Any]:
        """Events POSTed to another process for this session (``EventLog.ask``)."""
        if message.get("op") != "events" or self.host is None:
            return {"error": "unsupported"}
        name = message.get("agent")
        if name is not None and self.agent is not None and name != self.agent.name:
            return {"accepted": 0, "error": ["unknown_session", "another agent's session"]}
        events = [str(e).encode() for e in message.get("events", ())]
        accepted, error = self.transport._feed(self, events, str(message["body"]).encode())
        return {"accepted": accepted, "error": list(error) if error is not None else None}

    def replay_after(self, event_id: str) -> list[tuple[str, bytes]] | None:
        """The recent events after ``event_id``, or ``None`` when it is not among them."""
        for n, (sent, _) in enumerate(self.replay):
            if sent == event_id:
                return list(itertools.islice(self.replay, n + 1, None))
        return None

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
                    nursery.start_soon(self._keep)
                    self.started.set()
                    try:
                        await self._expire()
                    finally:
                        # Nothing reads the outbox any more: a response waiting for
                        # room in it (shielded, for its terminal event) gives up now,
                        # so a session whose client never read cannot hold the
                        # nursery -- and the server's shutdown -- for ever.
                        self.host.outbox.close()
                        nursery.cancel_scope.cancel()
        except Exception:  # a system task must never raise
            log.exception("HTTP+SSE session %s failed", self.id)
        finally:
            self.started.set()
            self.finished.set()
            if self.host is not None:
                self.host.outbox.close()
            self.transport._forget(self)

    async def _keep(self) -> None:
        """While no stream is attached, take the session's events into :attr:`unsent`.

        A client may read this session from another process (which follows
        the log) or be between two streams: its agent must not wait for a
        reader here. The outbox held everything a stream had not taken and
        stopped the response once full (a response followed elsewhere
        stalled there for ever); now the latest :data:`REPLAY_SIZE` events
        wait for the next stream here, and the log keeps all of them.
        """
        host = self.host
        assert host is not None
        while True:
            if self.stream_scope is not None:
                await self.unattended.wait()
                continue  # maybe attached again meanwhile
            with trio.CancelScope() as scope:
                self._keeping = scope
                self._kept = trio.Event()
                try:
                    while True:
                        # take() hands over what is queued without a checkpoint
                        # after waking: a cancel never loses a batch.
                        for data in await host.outbox.take():
                            kept = (event_id_of(data), data)
                            self.replay.append(kept)
                            self.unsent.append(kept)
                except OutboxClosed:
                    return
                finally:
                    self._kept.set()
            self._keeping = None

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

    async def stream(
        self,
        send: SendChunk,
        missed: list[tuple[str, bytes]] | None,
        *,
        greeted: bool = False,
        after: str | None = None,
    ) -> None:
        """Write the session's events: ``missed`` first (a ``Last-Event-ID`` replay), then live.

        ``greeted``: the stream's opening comment was written already.
        ``after``: the client's ``Last-Event-ID``; what is queued up to it
        is not written again (the client read it from the log elsewhere,
        while no stream here took it).
        """
        host = self.host
        assert host is not None
        if self.stream_scope is not None:
            self.stream_scope.cancel()  # one reader per session: the newest wins
        scope = trio.CancelScope()
        self.stream_scope = scope
        self.unattended = trio.Event()
        if self._keeping is not None:
            self._keeping.cancel()
            self._keeping = None
        # Whoever took from the outbox before -- the keeper, or the stream this
        # one replaces, maybe amid a batch -- stops first, its batch recorded
        # in the replay (and what it did not write, in unsent): the outbox
        # has one reader at a time, so nothing is lost or sent out of order.
        previous, written = self._written, trio.Event()
        self._written = written
        await self._kept.wait()
        await previous.wait()
        if self.stream_scope is not scope:
            written.set()
            return  # a newer stream came meanwhile: what is kept is for it
        # The caller read ``missed`` before this stream began; what came since
        # is in the replay (and unsent), no longer in the outbox.
        recent = self.replay_after(after) if after is not None else None
        if recent is not None:
            missed = recent  # everything after the client's last event
        else:
            # What came while no stream was here (after what the log gave;
            # unsent ends the replay, so all of it is newer than ``after``).
            known = {i for i, _ in missed or ()}
            missed = [*(missed or ()), *(e for e in self.unsent if e[0] not in known)]
        self.unsent.clear()
        # Replayed from the log, maybe still queued too: each is written once.
        skip = {i for i, _ in missed or ()}
        unwritten: list[tuple[str, bytes]] = []
        try:
            with scope:
                async with trio.open_nursery() as watch:
                    watch.start_soon(self._end_on_drain, scope)
                    await self._write_events(send, missed, skip, greeted, after, unwritten)
                    watch.cancel_scope.cancel()
        finally:
            # Taken but not written (the stream was cut or replaced): the next
            # stream without Last-Event-ID gets it first, as the keeper's.
            self.unsent.extendleft(reversed(unwritten))
            written.set()
            if self.stream_scope is scope:
                self.stream_scope = None
                self.unattended.set()
            self.last_seen = trio.current_time()

    async def _end_on_drain(self, scope: trio.CancelScope) -> None:
        """End the stream once a graceful shutdown begins and no response is running.

        An event stream never ends by itself: left open, it would hold the
        shutdown for its whole grace period. The client resumes elsewhere
        with ``Last-Event-ID`` (docs/resume.md).
        """
        app = self.transport.app
        await app.drain_started.wait()
        host = self.host
        while host is not None and host.busy:
            await trio.sleep(0.1)  # a response in flight goes out whole, within the grace
        scope.cancel()

    async def _write_events(
        self,
        send: SendChunk,
        missed: list[tuple[str, bytes]] | None,
        skip: set[str],
        greeted: bool,
        after: str | None,
        unwritten: list[tuple[str, bytes]],
    ) -> None:
        """The stream's body: the replay or a greeting, then events and heartbeats.

        ``unwritten`` holds, at any time, what this stream took and has not
        written yet (recorded with no checkpoint after the take).
        """
        host = self.host
        assert host is not None
        if missed:
            unwritten[:] = missed
            # What no stream took while none was here may not be written yet.
            await _logged_first(host)
            await send(b"".join(event_frame(i, data) for i, data in missed))
            unwritten.clear()
        elif not greeted:
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
            # What ready producers add within a few scheduler rounds
            # goes in the same write (and the same wait for the log).
            batch = await host.outbox.take_more(batch)
            if after is not None:
                # The first take holds all that was queued before this stream.
                ids = [event_id_of(data) for data in batch]
                if after in ids:
                    batch = batch[ids.index(after) + 1 :]
                after = None
            frames = []
            for data in batch:
                event_id = event_id_of(data)
                if skip and event_id in skip:
                    skip.discard(event_id)
                    continue
                self.replay.append((event_id, data))
                unwritten.append((event_id, data))
                frames.append(event_frame(event_id, data))
            if frames:
                await _logged_first(host)
                await send(b"".join(frames))
                unwritten.clear()


async def _logged_first(host: SessionHost) -> None:
    """Write what the session's log still queues, before the client sees it.

    A ``Last-Event-ID`` on another process must find every event a client
    saw (docs/resume.md): an event sent before its node wrote it, then lost
    with the node, left the client asking for an id no log holds. A store
    that does not answer gets it once it does.
    """
    log = host.event_log
    if log is not None and log.pending and not log.health.down:
        with contextlib.suppress(StoreUnavailable):
            await log.flush()


def event_frame(event_id: str, data: bytes) -> bytes:
    """One UAMP event as an SSE event: ``id:`` its ``event_id`` (if any), ``data:`` its JSON."""
    return encode_json(data, id=event_id or None)
