"""The session host's event log: resumable sessions (docs/resume.md).

Theory of operation
-------------------
A host with an event log (:attr:`App.stores.event_log
<uamp_trio.app.App>`) logs every event a session sends, and keeps the
session's *record* (its agent, configuration, conversation, the response
running and the request that started it) beside the events. The log is
keyed by ``(principal, session id)``: another principal's session is
missing, never someone else's.

* A new session begins its log and *answers* for it (:meth:`EventLogPart._answer_for`):
  a ``response.cancel`` sent on a connection that resumed the session
  elsewhere reaches the response running here through the log. One naming a
  session whose log this process writes (the caller's, live on another
  connection) is refused ``duplicate_session`` (:meth:`EventLogPart._log_taken`).
* When the socket goes away the host *detaches* (:meth:`EventLogPart.detach`):
  its running responses go on into the log and the connection lingers until
  they end (:meth:`EventLogPart.linger`), or are cut off ``interrupted``.
* ``session.create`` with ``resume_after`` (:meth:`EventLogPart._resume`)
  loads the record, sends the missed events, follows a response still
  running in another connection or process through the log, carries on (or
  ends ``interrupted``) one whose process is gone, then takes the log over.
  Another connection of this process taking a session over ends it here
  with ``session.end`` ``resumed``.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import trio

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.codec import from_dict, unstructure
from uamp_proto.errors import LocalProtocolError
from uamp_proto.resume import (
    LAST_REQUEST,
    RESUMED,
    LogEntry,
    ResumeError,
    ResumeStream,
    interrupted_event,
    start_after,
)
from uamp_stores.event_log import HistoryJSON, SessionRecord
from uamp_stores.health import StoreUnavailable
from uamp_stores.orphans import orphaned

from ..engines.supervise import supervised
from .continuation import abandon, carry_on
from .outbox import Discard, Overloaded
from .session_state import HostState, SessionState, session_error

if TYPE_CHECKING:
    from uamp_stores.event_log import LogKey

__all__ = ["EventLogPart"]


def last_request(record: SessionRecord) -> dict[str, str]:
    """``session.created`` extensions naming the last turn a resumed session acted on."""
    return {LAST_REQUEST: record.request} if record.request else {}


class EventLogPart(HostState):
    """The session host's event-log side (module docstring)."""

    def _store_down(self) -> str | None:
        """Why new work is refused now: the event log's store does not answer (or ``None``)."""
        log = self.event_log
        if log is None or not log.health.unavailable:
            return None
        return "the session store is unavailable; try again shortly"

    def _log_taken(self, sid: str) -> bool:
        """Refuse a new session whose log this process writes already (``duplicate_session``).

        The log is keyed by principal and id, not by connection: the caller's
        session of that id on another connection (or lingering after it) writes
        it, and a new one would begin it afresh and take it over. Nothing is
        begun yet, so the refused session lets go of nothing.
        """
        log, session = self.event_log, self._sessions.get(sid)
        if log is None or session is None or not log.writing((session.principal.key, sid)):
            return False
        self.refusal = ("duplicate_session", f"session {sid!r} already exists")
        self._owe(session_error(sid, *self.refusal, "session_id"))  # ends it in the core
        self._drop(sid)
        return True

    def _begin_log(self, sid: str) -> None:
        """Start the log of a new session: every event it sends from now on is logged."""
        log, session = self.event_log, self._sessions.get(sid)
        if log is None or session is None:
            return
        ctx = self._contexts.get(sid)
        config = ctx.config if ctx is not None else None
        record = SessionRecord(
            agent=session.agent.name,
            config=unstructure(config) if config else None,
            node=log.node,
        )
        key = (session.principal.key, sid)
        owner = functools.partial(self._taken_over, sid)
        log.begin(key, record.copy(), owner)
        self._logged[sid] = (key, owner)
        self._records[sid] = record
        self._answer_for(sid, key)
        self._start_flusher()

    def _start_flusher(self) -> None:
        assert self.event_log is not None
        self.event_log.ensure_running(self._app.background if self._app is not None else None)

    def _put_record(self, sid: str, **changes: object) -> None:
        """Queue ``sid`` 's record with ``changes`` and its conversation so far."""
        entry, record = self._logged.get(sid), self._records.get(sid)
        if entry is None or record is None:
            return
        assert self.event_log is not None
        ctx = self._contexts.get(sid)
        if ctx is not None:
            converted = self._history_json.get(sid)
            if converted is None:
                converted = self._history_json[sid] = HistoryJSON()
            record.history = converted.of(ctx.history, ctx.history_weights())
        for name, value in changes.items():
            setattr(record, name, value)
        log = self.event_log
        log.put_record(entry[0], record if log.copies_records else record.copy())

    def _answer_for(self, sid: str, key: LogKey) -> None:
        """Answer what other connections and processes ask about ``sid`` (its writer is here)."""
        assert self.event_log is not None
        handler = functools.partial(self._on_message, sid)
        self._answering[sid] = (key, handler)
        self.event_log.register(key, handler)

    def _stop_answering(self, sid: str) -> None:
        entry = self._answering.pop(sid, None)
        if entry is not None and self.event_log is not None:
            self.event_log.unregister(*entry)

    async def _on_message(self, sid: str, message: dict[str, Any]) -> dict[str, Any]:
        """A message about ``sid`` from another connection or process (:meth:`EventLog.ask`).

        ``cancel`` cancels the response running here (a ``response.cancel``
        sent on a connection that resumed the session meanwhile); other
        messages go to :attr:`on_message` (the HTTP+SSE transport's POSTs).
        """
        if message.get("op") == "cancel":
            session = self._sessions.get(sid)
            if session is None or session.response is None:
                return {"cancelled": False}
            self._cancel(session, message.get("response_id"))
            return {"cancelled": session.response.cancel_requested}
        if self.on_message is not None:
            return await self.on_message(message)
        return {"error": "unsupported"}

    def _taken_over(self, sid: str) -> None:
        """Another connection of this process resumed ``sid``: it is not ours any more."""
        self._stop_answering(sid)
        self._logged.pop(sid, None)
        self._records.pop(sid, None)
        self._history_json.pop(sid, None)
        if sid in self._sessions:
            if not self.detached and sid in self._contexts:
                with contextlib.suppress(LocalProtocolError, Overloaded):
                    end = ev.SessionEnd(session_id=sid, reason="resumed")
                    self.outbox.put_owed(self.conn.send(end))
            self._drop(sid)

    def _release_log(self, sid: str) -> None:
        self._stop_answering(sid)
        entry = self._logged.pop(sid, None)
        self._records.pop(sid, None)
        self._history_json.pop(sid, None)
        if entry is not None and self.event_log is not None:
            self.event_log.release(entry[0], entry[1])

    def detach(self) -> bool:
        """The peer is gone: logged sessions with a running response go on, into the log.

        The other sessions end (their logs and records stay, to be resumed).
        Returns whether any session goes on (then :meth:`linger`).
        """
        if not self._logged:
            return False
        self.detached = True
        self.outbox = Discard()
        for sid, session in list(self._sessions.items()):
            if session.response is None or sid not in self._logged:
                self._drop(sid)
                continue
            ctx = self._contexts.get(sid)
            if ctx is not None and ctx.send_window is not None:
                # No ack comes back here any more: the response goes on into
                # the log, still numbered, read at the resuming client's pace.
                ctx.send_window.lift()
                session.wake()
        return bool(self._sessions)

    async def linger(self, limit: float) -> None:
        """After :meth:`detach`: wait (at most ``limit`` s) for the running responses to end.

        A response still running then ends in the log with ``response.error``
        ``interrupted`` and its partial output.
        """
        with trio.move_on_after(limit):
            while self.busy:
                await trio.sleep(0.05)
        for sid, session in list(self._sessions.items()):
            ctx = self._contexts.get(sid)
            tracker = ctx.response if ctx is not None else None
            if session.response is not None and tracker is not None and sid in self._logged:
                with contextlib.suppress(LocalProtocolError):
                    self._log(sid, self.conn.send(interrupted_event(tracker, session_id=sid)))
                self._put_record(sid, running=None)
        self.close_all(notify=False)
        if self.event_log is not None:
            # A store that does not answer keeps them queued: the flusher writes them later.
            with contextlib.suppress(StoreUnavailable):
                await self.event_log.flush()

    async def _resume(self, session: SessionState, after_id: str) -> None:
        """Resume ``session`` from its log: created, the missed events, then live.

        See docs/resume.md. A refusal is ``session.error`` with the
        :class:`~uamp_proto.resume.ResumeError` code; the session is not created.
        """
        log, sid = self.event_log, session.id
        key = (session.principal.key, sid)
        try:
            if log is None:
                raise ResumeError(
                    "this server keeps no event log; sessions cannot be resumed",
                    code="resume_unavailable",
                )
            record = await log.load(key, conversation=True)
            if record.agent != session.agent.name:
                # Another endpoint's session is answered as an unknown one.
                raise ResumeError(
                    f"no session {sid!r} to resume: it never existed or was forgotten",
                    code="unknown_session",
                )
            window = await log.window(key)
            start = start_after(window, await log.find(key, after_id), after_id)
        except (ResumeError, StoreUnavailable) as exc:
            self._refuse(session, exc.code, exc.message)
            return
        ctx = self._contexts.get(sid)
        if ctx is None or self._sessions.get(sid) is not session:
            return
        # Its conversation comes once this connection takes the session on: until
        # then the connection that keeps it holds and counts it (counted twice, it
        # would trim the principal's sessions -- this one's record too).
        self._restore(sid, record, conversation=False)
        self.outbox.put_owed(
            self.conn.accept(
                sid,
                agent=session.agent.name,
                created_at=self._clock(),
                # The last turn it acted on: a client resends a later one.
                extensions={RESUMED: True, **last_request(record)},
            )
        )
        self._start_flusher()
        owner = functools.partial(self._taken_over, sid)
        try:
            stream = ResumeStream(start)
            record = await self._follow(session, key, stream)
            if self._sessions.get(sid) is not session:
                return
            log.take_over(key)
            await log.adopt(key, owner)
            # Anything the previous writer appended before it let go.
            await self._replay(stream, await log.read(key, stream.cursor))
        except ResumeError as exc:
            # This connection's hold only: refused while following (the record
            # dropped meanwhile), the writer it followed keeps the log.
            log.release(key, owner)
            self._refuse(session, exc.code, exc.message)
            return
        record.node = log.node
        self._logged[sid] = (key, owner)
        self._answer_for(sid, key)
        self._records[sid] = record
        self._restore(sid, record)
        self._put_record(sid)

    def _refuse(self, session: SessionState, code: str, message: str) -> None:
        self.refusal = (code, message)
        if session.id in self._contexts:
            with contextlib.suppress(LocalProtocolError, Overloaded):
                self._owe(session_error(session.id, code, message))
        self._drop(session.id)

    def _restore(self, sid: str, record: SessionRecord, *, conversation: bool = True) -> None:
        """Put the record's configuration and (``conversation``) conversation into the core's
        session: a conversation is bounded and counted in its principal's budget."""
        ctx = self._contexts.get(sid)
        if ctx is None:
            return
        if record.config is not None:
            ctx.config = from_dict(ty.SessionConfig, record.config)
        if conversation:
            ctx.history = [from_dict(ty.Message, m) for m in record.history]
            self.conn.bound_history(sid)  # its bounds, and its principal's budget

    async def _replay(self, stream: ResumeStream, entries: Iterable[LogEntry]) -> None:
        step = stream.backfill(entries)
        for entry in step.send:
            await self.outbox.put(entry.data)

    async def _follow(
        self, session: SessionState, key: LogKey, stream: ResumeStream
    ) -> SessionRecord:
        """Send the log from the stream's cursor on until no response runs elsewhere.

        A response running in another connection or process streams on into
        this one through the log; one whose process is gone (no heartbeat)
        is ended in the log with ``response.error`` ``interrupted`` by the
        first process that notices (:meth:`EventLog.claim`). Returns the
        session's record once nobody else runs a response.
        """
        log = self.event_log
        assert log is not None
        while True:
            entries = await log.read(key, stream.cursor)
            if entries:
                await self._replay(stream, entries)
                continue
            record, lost = await orphaned(log, key)
            running = record.running
            if running is None:
                return record
            if lost:
                # Nobody runs it any more: its process stopped mid-stream.
                await self._interrupt_orphan(session, key, record, running)
                continue
            await self._replay(stream, await log.wait(key, stream.cursor, timeout=0.5))

    async def _interrupt_orphan(
        self, session: SessionState, key: LogKey, record: SessionRecord, running: str
    ) -> None:
        """Carry on the response of a lost process (or end it ``interrupted``), once.

        The first process to claim the loss adopts the log and carries the
        response on in the background (:func:`~uamp_trio.hosting.continuation.carry_on`);
        this connection follows the log meanwhile, like any other writer's.
        """
        log = self.event_log
        assert log is not None
        if not await log.claim(key, f"{running}@{record.node}"):
            await trio.sleep(0.1)  # another process is carrying it on
            return

        def carrying() -> None:
            """The continuation's hold on the log: released only while it is the holder."""

        await log.adopt(key, carrying)
        app = self._app
        nursery = app.background if app is not None and app.background is not None else None
        job = functools.partial(
            carry_on, log, key, record, session.agent, session.principal, app, carrying
        )
        failed = functools.partial(abandon, log, key, record, carrying)
        what = f"session {session.id}: carrying on response {running}"
        (nursery or self._nursery).start_soon(
            functools.partial(supervised, job, what=what, on_error=failed)
        )
