"""One WebSocket connection driving a host of sessions: reader, writer and keeper.

Theory of operation
-------------------
:func:`serve_host` runs a connection as a few tasks in one nursery
(``shared/STYLE.md`` section 5) around a :class:`FrameHost` -- the UAMP
session host of a client connection, a relay's daemon link, or a daemon's own
side (docs/relay.md):

* the **reader** reads the socket, lets the framing engine
  (:mod:`uamp_trio.engines.ws_frames`) cut it into messages, and feeds each to
  the host, which never waits;
* the **writer** takes everything ready in the host's outbox (plus pongs and
  close frames the engine owes), frames it and writes it with one
  ``send_all``: coalescing is the main lever on throughput, since each trio
  ``send_all`` costs about as much as framing ten small messages;
* the **keeper** sends a WebSocket ping when nothing has arrived for
  ``keepalive_interval``, drops a peer that still sends nothing for as long
  again, and closes (``session.end`` reason ``timeout`` for every session,
  then close code 1001) a connection whose host is not busy and that sent
  nothing for ``idle_timeout``.
* the **drainer** (when the server can drain) waits for a graceful shutdown
  to begin, lets the responses running on the connection finish, and then
  closes it with code 1012 ("service restart"): the client reconnects --
  through a load balancer, to another server -- and resumes its sessions
  there (docs/resume.md). A response still running when the server's grace
  period ends is cut off with the connection, as a lost node's is. What the
  client sends after the drainer decided to close (a ``response.create``
  crossing the close frame) is not acted on: the session's record then does
  not name that turn, so the resuming client sends it again elsewhere
  (``last_request``, docs/resume.md) -- rather than have it run here, maybe
  after the other process resumed the session.

A UAMP session host keeps an event log (docs/resume.md): the writer makes
sure a batch is in the log before it writes it, and when the socket goes
away the host *detaches* instead of closing -- its running responses go on
into the log, the reader and writer stop, and :func:`serve_host` lingers
until those responses end, for a resumed connection to pick them up.

*Writing without a wait.* On a plain TCP socket every write first goes to
the kernel with one non-blocking ``write`` (:meth:`_Connection.write_now`);
only what the socket does not take at once goes through trio's
``send_all``, under the send timeout. A write the kernel takes whole costs no
scheduler round (trio's ``send_all`` yields after every send) and no
deadline.

*Held writes.* While the writer waits with nothing in hand, a session's
worker frames the events it sends during one scheduler step itself
(:meth:`_Connection.hold`) and writes them in one go when the step ends
(:meth:`_Connection.flush`, called by the outbox; see
:func:`~uamp_trio.hosting.outbox.write_at_yields`), and a response's first
delta at once, with what was held before it (``response.created``): a
one-delta response costs the reader's step and its worker's, with two
writes (the first delta; ``response.done`` when the step ends, after the
response's bookkeeping), and the writer is not woken. Held writes keep
the writer's rules: only with nothing queued and nothing left unsent
(order; nobody else runs during the step), only once the event is in the
log as far as anyone can read it (an event a store is still writing goes
through the writer, which waits for the flush; the memory log gets a
response's first events just after their write, in the same step), and
never once the writer has ended. What the kernel does not take is left to the writer
(:attr:`_Connection.unsent`, written before anything else), which applies
the send timeout to it, and so do errors: a peer that went away is found by
the writer's ``send_all``. A peer that reads slowly thus gets the writer's
path, with its bounded outbox, from its first full buffer on.

*The reader runs the response.* A ``response.create`` for a session with
no worker task (the usual case: a session's responses come one after
another) is not handed to a task: once the read's messages are fed, the
reader runs it itself (:meth:`SessionHost.run_inline
<uamp_trio.hosting.session_responses.ResponsePart.run_inline>`), under its
own cancel scope, which ``response.cancel`` cancels as it would a worker's.
A response that never blocks -- an agent answering from memory, a cached
reply, the benchmarks' agents -- then costs no task switch and no scheduler
round on the way to its first delta, and the reader is back at its socket
right after the response's last write. The first time the response yields
to the scheduler (it waits for a model, a tool, a full outbox, or just
checkpoints), the reader *hands its reading on*: a new task starts reading
(:meth:`_Connection._hand_on`) and the old one stays with the response, as
its worker, and ends with it. Each task's time at the socket is a *stint*
(:class:`_Reading`) with a cancel scope of its own, so a cancel meant for
a response never reaches the reading, and one that lands after the
response's last checkpoint (the scope is then spent) makes the task read on
in a new stint. The reading tasks run in the host's nursery, where workers
run: a response whose reader handed on lives on when the socket goes away,
into the event log, as any worker's does; :func:`_run` cancels the stint
reading now when the connection ends.

*The worker first.* A read that handed an existing, parked worker a response
(``Outbox.woken``: a second session's response in the same read) is
followed by a wait for that worker's step to end
(:meth:`~uamp_trio.hosting.outbox.Outbox.follow`) before the reader waits
for its socket again: the response's first delta is written before the
reader's registration with trio's I/O poller, not after it. The reader runs
as a task of its own (:meth:`_Connection.read`), so each of its steps resumes
a short chain of coroutines.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable
from typing import Final, Protocol

import trio

from uamp_stores.health import StoreUnavailable

from ..engines.streams import FRAMES_READ_SIZE, receive_when_ready, written_now
from ..engines.ws_frames import (
    CLOSE_GOING_AWAY,
    CLOSE_INTERNAL_ERROR,
    CLOSE_NORMAL,
    CLOSE_POLICY_VIOLATION,
    CLOSE_SERVICE_RESTART,
    FrameEngine,
    WebSocketClosed,
)
from .outbox import Outbox, OutboxClosed, Overloaded
from .session_state import SessionState
from .sessions import SessionHost, SessionLimits

__all__ = ["CLOSE_GRACE", "READ_SIZE", "SUBPROTOCOLS", "FrameHost", "serve_host"]

log = logging.getLogger("uamp_trio.uamp_ws")

#: Bytes asked of the socket per read (see ``FRAMES_READ_SIZE``).
READ_SIZE: Final = FRAMES_READ_SIZE
#: The WebSocket subprotocol names accepted when a client offers one.
SUBPROTOCOLS: Final = ("uamp", "uamp.v1")
#: How long closing waits for the writer to flush the close frame.
CLOSE_GRACE: Final = 2.0
#: How often a draining connection looks whether its responses have ended.
DRAIN_POLL: Final = 0.05


class _Reading:
    """One task's stint at reading the socket (see "The reader runs the response")."""

    __slots__ = ("handed", "scope", "session")

    def __init__(self) -> None:
        #: The task's own scope: a response it runs is cancelled through it.
        self.scope = trio.CancelScope()
        #: Whether the task handed the reading to the next stint's task.
        self.handed = False
        #: The session whose responses it ran last (settled after a cancel).
        self.session: SessionState | None = None


class _Connection:
    """The tasks of one UAMP WebSocket connection."""

    def __init__(
        self,
        stream: trio.abc.Stream,
        engine: FrameEngine,
        host: FrameHost,
        limits: SessionLimits,
        nursery: trio.Nursery,
    ) -> None:
        self.stream = stream
        self.engine = engine
        self.host = host
        self.limits = limits
        #: Where the reading tasks run: the host's nursery, where a reader
        #: that stays with a response lives on as its worker would.
        self.nursery = nursery
        #: The stint reading now (``None`` between a hand-over and the next).
        self.reading: _Reading | None = None
        #: Set when the reading ends: the peer left, or a reader failed (:attr:`failed`).
        self.ended = trio.Event()
        #: Set by :meth:`stop_reading`: a cancelled stint ends its task.
        self.stopping = False
        self.failed: Exception | None = None
        #: The session host whose responses the reader runs itself, if any.
        self.runner = host if isinstance(host, SessionHost) else None
        if self.runner is not None:
            self.runner.inline_reader = True
        #: ``trio.current_time`` read from the run's clock directly (on every read).
        self._now = trio.lowlevel.current_clock().current_time
        self.last_received = self._now()
        self.writer_done = trio.Event()
        self.scope: trio.CancelScope | None = None
        self.closing: tuple[int, str] | None = None
        log = host.event_log if isinstance(host, SessionHost) else None
        #: The event log whose queued writes go before what the peer is sent;
        #: ``None`` also for one that applies each write at once (the memory
        #: log): nothing is ever queued there, and its ``pending`` (a property)
        #: is not asked before each event.
        self.events = None if log is None or log.applies_at_once else log
        #: Whether the writer waits for work with nothing in hand (held writes may go).
        self.idle = False
        #: Bytes a flush left unwritten (the socket was full): the writer's, first.
        self.unsent = b""
        if type(stream) is trio.SocketStream:  # what written_now writes to
            host.outbox.direct = self

    def write_now(self, data: bytes) -> bytes:
        """Give ``data`` to the socket without waiting; returns what it did not take.

        Errors return everything: the writer's ``send_all`` meets the same
        error and handles it (a peer gone, a socket closed).
        """
        sent = written_now(self.stream, data)
        return data[sent:] if sent else data

    def hold(self, data: bytes) -> bool:
        """Frame one held event if the writer is idle; ``False``: queue it (module docstring)."""
        if not self.idle or self.unsent:
            return False
        engine, events = self.engine, self.events
        if engine.closed is not None or (events is not None and events.pending):
            return False
        engine.text(data)
        return True

    def flush(self) -> None:
        """Write the held events; the writer gets what the socket did not take."""
        rest = self.write_now(self.engine.take())
        if rest:
            self.unsent = rest
            self.host.outbox.poke()  # written under the send timeout

    def shut(self, code: int, reason: str) -> None:
        """Close once what is queued is written: the writer sends the close frame last."""
        if self.closing is None:
            self.closing = (code, reason)
        self.host.outbox.close()

    def start_reading(self, initial: bytes) -> None:
        """Start the first reading task."""
        stint = self.reading = _Reading()
        self.nursery.start_soon(self.read, initial, stint)

    def stop_reading(self) -> None:
        """Cancel the task reading now, if any (the connection is ending)."""
        self.stopping = True
        if self.reading is not None:
            self.reading.scope.cancel()

    async def read(self, data: bytes, stint: _Reading) -> None:
        """Read the socket as a task of its own, stint after stint; :attr:`ended` at its end.

        Each step of a task resumes its whole chain of coroutines: under the
        HTTP server's connection handler the reader's was about fifteen
        frames deep. A task of its own starts at this frame (26 Python calls
        and about 8,000 instructions fewer per one-delta response).

        A stint ends when the peer leaves (:attr:`ended`), when the task
        handed the reading on and the responses it stayed with are done (it
        ends), or when a response it ran was cancelled through its scope:
        the cancel is settled outside the scope and, unless the reading was
        handed on, the same task reads on in a new stint (but not once
        :meth:`stop_reading` cut the connection's reading). An error ends the
        reading (:attr:`failed`; :func:`_run` raises it, as a reader's
        error always did), or, once the reading was handed on, goes to the
        host's nursery, as a worker's does.
        """
        runner = self.runner
        while True:
            with stint.scope:
                try:
                    await self.reader(data, stint)
                except Exception as exc:
                    if stint.handed:
                        raise
                    self.failed = exc
                    self.ended.set()
                    return
            if self.stopping and not stint.handed:
                return  # cut off: the connection is ending
            if stint.scope.cancel_called and runner is not None and stint.session is not None:
                # A handed-over task settles its response's cancel also after
                # the connection ended (a detached host, a cancel from another
                # process): the log must say how the response ended.
                await runner.settle_inline(stint.session)
            if stint.handed:
                return
            if not stint.scope.cancel_called:
                self.ended.set()  # the stream ended
                return
            stint = self.reading = _Reading()
            data = b""

    def _hand_on(self, stint: _Reading) -> None:
        """A response the reader runs blocks: a new task reads on; this one stays with it."""
        if stint.handed:
            return
        stint.handed = True
        self.last_received = self._now()
        nxt = self.reading = _Reading()
        self.nursery.start_soon(self.read, b"", nxt)

    async def reader(self, initial: bytes, stint: _Reading) -> None:
        engine, host, stream, runner = self.engine, self.host, self.stream, self.runner
        outbox = host.outbox
        hand_on = functools.partial(self._hand_on, stint)
        data = initial
        try:
            while True:
                if data:
                    for message in engine.feed(data):
                        if self.closing is not None and self.closing[0] == CLOSE_SERVICE_RESTART:
                            # Told to go away: not acted on here; the client
                            # sends it again where it resumes (module docstring).
                            continue
                        host.feed(message)
                        if host.backlogged:  # stop reading until the host caught up
                            await host.drained()
                    if engine.owes:  # pongs and close replies
                        outbox.poke()
                    if runner is not None and runner.inline is not None:
                        # A response for a session without a worker: run here,
                        # no task switch on the way to its first delta.
                        session, runner.inline = runner.inline, None
                        stint.session = session
                        await runner.run_inline(session, stint.scope, hand_on)
                        if stint.handed:
                            return  # another task reads now
                    if outbox.woken:
                        # A worker got a response: it runs (and writes) before
                        # this task registers for its next read.
                        await outbox.follow()
                    # After the worker's step: the keeper's clock needs no
                    # microseconds, the first delta does.
                    self.last_received = self._now()
                data = await receive_when_ready(stream, READ_SIZE)
                if not data:
                    engine.feed(b"")  # raises WebSocketClosed
        except WebSocketClosed as closed:
            if stint.handed:
                raise  # not the reading's: a response's, as a worker's would
            log.debug("UAMP WebSocket closed: %s", closed)
            if runner is not None:
                runner.unclaim_inline()
            # Resumable sessions with a response running go on into their log.
            if not (isinstance(host, SessionHost) and host.detach()):
                host.close_all(notify=False)
            outbox.close()
        except Overloaded as exc:
            if stint.handed:
                raise
            log.info("dropping a UAMP WebSocket peer: %s", exc)
            if runner is not None:
                runner.unclaim_inline()
            self.shut(CLOSE_POLICY_VIOLATION, "too many unread replies")

    async def writer(self) -> None:
        engine, outbox, events = self.engine, self.host.outbox, self.events
        try:
            while True:
                try:
                    self.idle = True
                    batch = await outbox.take()
                except OutboxClosed:
                    self.idle = False
                    if self.closing is not None:
                        engine.close(*self.closing)
                    tail = self._unsent() + engine.take()
                    if tail:
                        await self._write(tail)
                    return
                self.idle = False
                batch = await outbox.take_more(batch)
                if events is not None and events.pending and not events.health.down:
                    # What the peer sees is in the log first: a resume (maybe on
                    # another process) never names an event the log lacks. A store
                    # that does not answer gets it once it does (the flusher retries).
                    with contextlib.suppress(StoreUnavailable):
                        await events.flush()
                if engine.closed is None:
                    text = engine.text
                    for message in batch:
                        text(message)
                data = self._unsent() + engine.take()
                if data:
                    await self._write(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self.host.outbox.close()
        finally:
            self.idle = False
            outbox.direct = None  # nothing is held past the writer's end
            self.writer_done.set()
            if self.scope is not None:
                # Nothing more will be written: give the peer a moment to answer
                # the close frame, then end the connection.
                self.scope.deadline = min(self.scope.deadline, trio.current_time() + CLOSE_GRACE)

    def _unsent(self) -> bytes:
        """Take what a flush left unsent (it goes before anything framed since)."""
        unsent, self.unsent = self.unsent, b""
        return unsent

    async def _write(self, data: bytes) -> None:
        """Write ``data``: at once what the socket takes, the rest through :meth:`_send`."""
        data = self.write_now(data)
        if data:
            await self._send(data)

    async def _send(self, data: bytes) -> None:
        """Write ``data``; a peer that leaves it unread for ``send_timeout`` is dropped."""
        with trio.move_on_after(self.limits.send_timeout) as scope:
            await self.stream.send_all(data)
        if scope.cancelled_caught:
            log.info(
                "UAMP WebSocket peer not reading for %.0fs; dropping it", self.limits.send_timeout
            )
            if self.scope is not None:
                self.scope.cancel()
            raise trio.ClosedResourceError("peer not reading")

    async def drainer(self, drain: trio.Event) -> None:
        """Once ``drain`` is set, close with 1012 as soon as no response runs."""
        await drain.wait()
        while self.host.busy:
            await trio.sleep(DRAIN_POLL)
        log.debug("server draining: closing a UAMP WebSocket with 1012")
        self.shut(CLOSE_SERVICE_RESTART, "server draining: reconnect and resume")

    async def keeper(self) -> None:
        limits, host = self.limits, self.host
        interval = limits.keepalive_interval
        pinged_at: float | None = None
        while True:
            now = trio.current_time()
            quiet = now - self.last_received
            if pinged_at is not None and self.last_received >= pinged_at:
                pinged_at = None  # the peer answered (or sent something)
            if pinged_at is not None and now - pinged_at >= interval:
                log.info("UAMP WebSocket peer silent for %.0fs; dropping it", quiet)
                self.shut(CLOSE_INTERNAL_ERROR, "keepalive timeout")
                return
            if pinged_at is None and quiet >= interval:
                self.engine.ping(b"uamp")
                host.outbox.poke()
                pinged_at = now
            idle_since = host.last_activity
            if not host.busy and now - idle_since >= limits.idle_timeout:
                host.close_all("timeout", notify=True)
                self.shut(CLOSE_GOING_AWAY, "idle timeout")
                return
            next_at = min(
                (pinged_at + interval) if pinged_at is not None else self.last_received + interval,
                idle_since + limits.idle_timeout if not host.busy else now + interval,
            )
            await trio.sleep_until(max(next_at, now + 0.001))


class FrameHost(Protocol):
    """What :func:`serve_host` drives: a :class:`SessionHost`, or anything shaped like one.

    The reader hands it every message (:meth:`feed`, never waiting), the
    writer drains its :attr:`outbox`, and the keeper reads :attr:`busy` and
    :attr:`last_activity` to close an idle connection.
    """

    outbox: Outbox
    last_activity: float

    @property
    def backlogged(self) -> bool:
        """Whether the reader must wait for :meth:`drained` before it reads on.

        TCP backpressure on a peer that sends faster than its events are taken.
        """
        ...

    async def drained(self) -> None:
        """Return once the host takes messages again."""
        ...

    @property
    def busy(self) -> bool:
        """Whether work is running (an idle connection is not closed meanwhile)."""
        ...

    def feed(self, message: bytes | str) -> object:
        """Take one incoming message; never waits."""
        ...

    def close_all(self, reason: str | None = None, *, notify: bool = True) -> None:
        """End everything the connection carries."""
        ...


async def serve_host(
    stream: trio.abc.Stream,
    make_host: Callable[[trio.Nursery], FrameHost],
    frames: FrameEngine,
    *,
    initial_data: bytes = b"",
    limits: SessionLimits | None = None,
    drain: trio.Event | None = None,
) -> None:
    """Run the reader, writer and keeper of one WebSocket around a host until it closes.

    ``make_host`` builds the host in the connection's nursery (where its
    work runs); ``frames`` is a framing engine of the right side (a daemon
    dials out, so its engine is a client's); ``drain`` is set when the server
    begins a graceful shutdown (the connection then closes with 1012 once its
    responses end).
    """
    limits = limits or SessionLimits()
    try:
        await _serve(stream, make_host, frames, initial_data, limits, drain)
    finally:
        # Also when cancelled (a daemon stopped, the server shutting down): the
        # peer learns at once that the connection is gone.
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await trio.aclose_forcefully(stream)


async def _serve(
    stream: trio.abc.Stream,
    make_host: Callable[[trio.Nursery], FrameHost],
    frames: FrameEngine,
    initial_data: bytes,
    limits: SessionLimits,
    drain: trio.Event | None,
) -> None:
    async with trio.open_nursery() as nursery:
        host = make_host(nursery)
        try:
            await _run(stream, host, frames, initial_data, limits, drain, nursery)
        except Exception:
            # A failure in the connection's own work (a bug: the handler logs
            # it): its sessions end all the same, so nothing the app keeps for
            # them (the principal's history budget, busy places, chats)
            # outlives the connection. A cancellation (the server stopping)
            # leaves them to the log, as a graceful end does (docs/resume.md).
            try:
                host.close_all(notify=False)
            except Exception:
                log.exception("ending the sessions of a failed UAMP WebSocket")
            raise
        nursery.cancel_scope.cancel()


async def _run(
    stream: trio.abc.Stream,
    host: FrameHost,
    frames: FrameEngine,
    initial_data: bytes,
    limits: SessionLimits,
    drain: trio.Event | None,
    nursery: trio.Nursery,
) -> None:
    """The connection's reader, writer and keeper around ``host``, then its sessions' end."""
    conn = _Connection(stream, frames, host, limits, nursery)
    detached = False
    async with trio.open_nursery() as io:
        conn.scope = io.cancel_scope
        io.start_soon(conn.writer)
        io.start_soon(conn.keeper)
        if drain is not None:
            io.start_soon(conn.drainer, drain)
        conn.start_reading(initial_data)
        try:
            await conn.ended.wait()
        finally:
            conn.stop_reading()  # when cut off (the keeper, the send timeout)
        if conn.failed is not None:
            raise conn.failed
        detached = isinstance(host, SessionHost) and host.detached
        if not detached:
            host.close_all(notify=False)
        conn.shut(CLOSE_NORMAL, "")
        with trio.move_on_after(CLOSE_GRACE):
            await conn.writer_done.wait()
        io.cancel_scope.cancel()
    if not detached:
        # Also when the reader was cut off (a peer dropped by the keeper
        # or the send timeout): its sessions end, and leave their chats.
        host.close_all(notify=False)
    if detached:
        assert isinstance(host, SessionHost)
        # The socket is gone; its running responses finish into the log,
        # where a resumed connection picks them up (docs/resume.md).
        await host.linger(limits.idle_timeout)
