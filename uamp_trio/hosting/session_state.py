"""What the session host keeps per session and per response, and what its parts share.

The UAMP session host (:class:`~uamp_trio.hosting.sessions.SessionHost`) is
one class built from parts, each a module with one concern: the responses
and their worker (:mod:`~uamp_trio.hosting.session_responses`), payment
(:mod:`~uamp_trio.hosting.session_payment`), the event log and resume
(:mod:`~uamp_trio.hosting.session_log`), authentication
(:mod:`~uamp_trio.hosting.session_auth`), voice calls
(:mod:`~uamp_trio.hosting.session_calls`) and the rest -- dispatch,
sessions, capabilities, chats -- in :mod:`~uamp_trio.hosting.sessions`. The
parts read and write the same state; :class:`HostState` declares it for the
type checker, and this module holds the records they share: a
:class:`SessionState` per session, a :class:`ResponseState` per running
response.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import trio

from uamp_proto import audio
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.calls import AnsweredCall
from uamp_proto.errors import UampError
from uamp_proto.payment import Charge
from uamp_proto.principal import ANONYMOUS, Principal
from uamp_proto.responder import Responder, TurnRequest
from uamp_proto.topup import PaymentStops
from uamp_stores.busy import Slot

from .agents import SPEC_SESSION_CODES
from .outbox import Outbox, Quota

if TYPE_CHECKING:
    from uamp_proto.connection import ServerConnection
    from uamp_proto.session_context import SessionContext
    from uamp_stores.event_log import EventLog, Handler, HistoryJSON, LogKey, SessionRecord

    from .host import Host
    from .sessions import SessionLimits

__all__ = [
    "HostState",
    "IdleWorker",
    "ResponseState",
    "SessionGone",
    "SessionState",
    "session_error",
]


class SessionGone(UampError):
    """The session ended while its worker was sending."""


class ResponseState:
    """The response a session is running."""

    def __init__(self, response_id: str, request_bytes: bytes | str | None = None) -> None:
        self.id = response_id
        #: The raw ``response.create`` message (what a response signature covers).
        self.request_bytes = request_bytes
        #: Payment stops caused by the agent raising PaymentRequiredError.
        self.stops = PaymentStops()
        #: The money the app's ledger holds for this response (settled at its end).
        self.charge: Charge | None = None
        #: The settled charge's ``payment.balance``, sent after the terminal event.
        self.balance: ev.PaymentBalance | None = None
        #: Set by ``response.cancel``: the session's worker then sends
        #: ``response.cancelled`` (a session's end cancels silently).
        self.cancel_requested = False
        #: Its place in the session under the busy policy (docs/busy.md).
        self.slot: Slot | None = None
        #: Instead of :attr:`slot`, while nobody arrived behind it: what the
        #: gate calls to enter its slot then (:meth:`ConversationGate.defer`).
        self.deferred: functools.partial[None] | None = None
        #: Whether its first output was written (:meth:`SessionHost._send`).
        self.written = False


class IdleWorker:
    """Where a session's worker waits for its next response: one task, woken directly.

    A :class:`trio.lowlevel.ParkingLot` for a single waiter, without the lot:
    the worker parks itself (:func:`trio.lowlevel.wait_task_rescheduled`) and
    :meth:`wake` reschedules it (:func:`trio.lowlevel.reschedule`), with none
    of the lot's bookkeeping on the reader's way from ``response.create`` to
    the worker (about 2 us a response). A cancel of the worker's scope aborts
    the wait, as it does a parked one.
    """

    __slots__ = ("task",)

    def __init__(self) -> None:
        #: The worker while it waits here (``None``: it does not).
        self.task: trio.lowlevel.Task | None = None

    async def park(self, task: trio.lowlevel.Task) -> None:
        """Wait, as ``task`` (the caller), until :meth:`wake` or a cancel."""
        self.task = task
        await trio.lowlevel.wait_task_rescheduled(self._abort)

    def _abort(self, _: object) -> trio.lowlevel.Abort:
        self.task = None
        return trio.lowlevel.Abort.SUCCEEDED

    def wake(self) -> bool:
        """Reschedule the waiting worker, if it waits; ``True`` if it did."""
        task = self.task
        if task is None:
            return False
        self.task = None
        trio.lowlevel.reschedule(task)
        return True


class SessionState:
    """The transport's side of one UAMP session."""

    def __init__(
        self,
        session_id: str,
        agent: Responder,
        principal: Principal = ANONYMOUS,
        token: str | None = None,
    ) -> None:
        self.id = session_id
        self.agent = agent
        #: Who the session acts for, and the credential that said so.
        self.principal = principal
        self.token = token
        #: Set while a token of this session is being verified (its
        #: ``session.create`` or a ``session.update``); the worker waits for it.
        self.verifying: trio.Event | None = None
        #: Parked on by the worker inside a response; woken by acks, tool results, cancels.
        self.wakeup = trio.lowlevel.ParkingLot()
        self.response: ResponseState | None = None
        #: The response waiting for the worker to pick it up.
        self.queued: tuple[ResponseState, ev.ResponseCreate] | None = None
        #: Where the idle worker waits for :attr:`queued`.
        self.idle = IdleWorker()
        #: Whether the session's worker task runs (started by its first response).
        self.worker = False
        #: The worker's cancel scope: a cancel ends the response it runs (or
        #: is about to run), and a scope once cancelled is replaced.
        self.scope: trio.CancelScope | None = None
        #: Whether :attr:`scope` was cancelled (:meth:`stop`): its
        #: ``cancel_called``, which trio answers only after reading its clock.
        self.stopped = False
        #: A payment verdict is being worked out (off the event loop); a
        #: submit meanwhile asks for one more round instead of another task.
        self.settling = False
        self.settle_again = False
        #: This session's share of the connection's outbox.
        self.quota = Quota()
        #: The voice call its agent took (trio time), if any.
        self.call = AnsweredCall()
        #: The places its running and held responses hold (docs/busy.md).
        self.slots: list[Slot] = []
        #: The agent's capabilities as last sent on this session (UAMP 6.4).
        self.announced: ty.Capabilities | None = None
        #: Server-side turn detection (``turn_detection: server_vad``, UAMP 8.1).
        self.detector: audio.TurnDetector | None = None
        #: The running response's opening record, not put yet (:meth:`SessionHost._respond`).
        self.opening: Callable[[], None] | None = None
        #: Its events sent meanwhile (data, event id), logged after the record.
        self.unlogged: list[tuple[bytes, str]] = []

    def put_opening(self) -> None:
        """Put the running response's deferred opening record (and log its events) if owed."""
        opening = self.opening
        if opening is not None:
            self.opening = None
            opening()

    def wake(self) -> None:
        if self.wakeup:
            self.wakeup.unpark_all()

    def stop(self) -> None:
        """Cancel :attr:`scope`: the response the worker runs (or is about to run) ends."""
        if self.scope is not None:
            self.scope.cancel()
            self.stopped = True


def session_error(
    session_id: str | None, code: str, message: str, field: str | None = None
) -> ev.SessionErrorEvent:
    """``session.error``; ``field`` names the offending field in ``details.field`` (6.3).

    A code UAMP 6.3 does not list is sent as the spec's code, the precise one
    in ``details.reason`` (:data:`~uamp_trio.hosting.agents.SPEC_SESSION_CODES`).
    """
    details: dict[str, Any] = {"field": field} if field else {}
    spec = SPEC_SESSION_CODES.get(code, code)
    if spec != code:
        details["reason"] = code
    return ev.SessionErrorEvent(
        session_id=session_id,
        error=ty.ErrorInfo(code=spec, message=message, details=details or None),
    )


class HostState:
    """The state the session host's parts share, declared for the type checker.

    The host (:class:`~uamp_trio.hosting.sessions.SessionHost`) sets every
    attribute in its ``__init__`` and defines every method; a part that
    subclasses this one uses them as its own.
    """

    if TYPE_CHECKING:
        limits: SessionLimits
        conn: ServerConnection
        outbox: Outbox
        event_log: EventLog | None
        detached: bool
        inline_reader: bool
        inline: SessionState | None
        refusal: tuple[str, str] | None
        on_message: Handler | None
        principal: Principal
        _message: bytes | str
        _transport: str
        _app: Host | None
        _nursery: trio.Nursery
        _clock: Callable[[], float]
        _contexts: Mapping[str, SessionContext]
        _sessions: dict[str, SessionState]
        _logged: dict[str, tuple[LogKey, Callable[[], None]]]
        _records: dict[str, SessionRecord]
        _history_json: dict[str, HistoryJSON]
        _answering: dict[str, tuple[LogKey, Handler]]

        @property
        def busy(self) -> bool: ...

        def close_all(self, reason: str | None = None, *, notify: bool = True) -> None: ...

        def _owe(self, event: ev.Event) -> None: ...

        def _log(self, sid: str, data: bytes) -> None: ...

        def _drop(self, sid: str) -> None: ...

        def owe_quietly(self, event: ev.Event) -> None: ...

        def _session_of(self, event: ev.Event) -> SessionState | None: ...

        def _accept(self, sid: str, agent: Responder) -> None: ...

        async def _resume(self, session: SessionState, after_id: str) -> None: ...

        async def _verified(self, session: SessionState) -> None: ...

        async def _announce(self, session: SessionState, caps: ty.Capabilities) -> None: ...

        def _cancel(self, session: SessionState, response_id: str | None) -> None: ...

        async def _send(
            self, session: SessionState, response: ResponseState, event: ev.Event
        ) -> None: ...

        def _request(
            self,
            session: SessionState,
            response_id: str,
            create: ev.ResponseCreate,
            port: bool = False,
        ) -> TurnRequest | None: ...
