"""Delta windows: flow control for streamed deltas (spec 003, section 5).

Theory of operation
-------------------
Spec 003 section 5 says a producer "MUST NOT send more than ``delta_window``
un-ACKed frames" and a consumer "SHOULD ACK via ``progress`` every N frames
where N <= ``delta_window``". UAMP 1.0 (spec 000) has no such mechanism, so
uamp makes it an opt-in session extension (see ``docs/flow.md``):

* The client asks with ``{"flow": {"delta_window": N}}`` in
  ``session.create.session.extensions``; the server grants at most its own
  maximum and echoes the granted window in
  ``session.created.session.config.extensions.flow.delta_window``. A session
  without it is plain UAMP 1.0: no ``delta_seq``, no acks.
* Every flow-controlled frame (:data:`FLOW_CONTROLLED_TYPES`) carries a
  ``delta_seq``, counted from 0 per response (a response is spec 003's
  "stream").
* The client acknowledges with a ``progress`` event, ``stage="ack"``,
  ``target="response"``, ``target_id`` the response id and ``delta_seq`` the
  highest seq received. Acks are cumulative, so a lost or coalesced ack is
  made good by the next one.

Like h2's flow-control windows, the two sides are separate objects that do
no I/O: :class:`SendWindow` (the server) refuses to stamp a frame past the
window instead of queueing it, and :class:`ReceiveWindow` (the client)
checks each frame's ``delta_seq`` and says when an ack is due. One response
streams at a time per session; starting a new response forgives the frames
of the previous one that were never acknowledged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import FlowControlError, LocalProtocolError, RemoteProtocolError
from .events import Progress

__all__ = [
    "DEFAULT_DELTA_WINDOW",
    "ERR_MISSING_DELTA_SEQ",
    "FLOW_CONTROLLED_TYPES",
    "MAX_DELTA_WINDOW",
    "ReceiveWindow",
    "SendWindow",
    "ack_event",
    "ack_of",
    "confirmed_window",
    "flow_extension",
    "grant_window",
    "is_ack",
    "requested_window",
]

#: The window a client asks for when it does not choose one.
DEFAULT_DELTA_WINDOW = 64
#: The largest window accepted on the wire (h2's largest window, 2**31 - 1).
MAX_DELTA_WINDOW = 2**31 - 1
#: Spec 003 section 9: "Missing delta_seq" (retryable). uamp uses it for every
#: delta_seq fault: a gap, a duplicate, an overrun and an ack for a frame that
#: was never sent.
ERR_MISSING_DELTA_SEQ = "4.09"

#: The wire types that carry ``delta_seq`` and count against the window.
FLOW_CONTROLLED_TYPES: frozenset[str] = frozenset(
    {"response.delta", "audio.delta", "transcript.delta", "thinking"}
)

_EXTENSION = "flow"
_KEY = "delta_window"
_ACK_STAGE = "ack"
_ACK_TARGET = "response"


# --- negotiation --------------------------------------------------------------


def _window_value(extensions: Mapping[str, Any] | None, where: str) -> int | None:
    if extensions is None:
        return None
    if not isinstance(extensions, Mapping):
        raise RemoteProtocolError(f"{where} must be an object", code="invalid_event")
    flow = extensions.get(_EXTENSION)
    if flow is None:  # absent or null: plain UAMP 1.0
        return None
    if not isinstance(flow, Mapping):
        raise RemoteProtocolError(f"{where}.flow must be an object", code="invalid_event")
    if _KEY not in flow:
        return DEFAULT_DELTA_WINDOW
    value = flow[_KEY]
    # bool is an int subclass; a JSON true is not a window.
    if type(value) is not int or not 1 <= value <= MAX_DELTA_WINDOW:
        raise RemoteProtocolError(
            f"{where}.flow.delta_window must be an integer from 1 to {MAX_DELTA_WINDOW}, "
            f"got {value!r}",
            code="invalid_event",
        )
    return value


def requested_window(extensions: Mapping[str, Any] | None) -> int | None:
    """Read the window a client asks for in ``session.create``.

    Args:
        extensions: ``session.create.session.extensions`` (may be ``None``).

    Returns:
        The requested window, :data:`DEFAULT_DELTA_WINDOW` when ``flow`` is
        an object without ``delta_window``, or ``None`` when the client did
        not opt in (no ``flow`` key, or ``null``).

    Raises:
        RemoteProtocolError: ``code="invalid_event"`` when ``flow`` is not an
            object or ``delta_window`` is not an integer from 1 to
            :data:`MAX_DELTA_WINDOW` (a bool, float or string is refused).
    """
    return _window_value(extensions, "session.extensions")


def grant_window(requested: int | None, maximum: int = DEFAULT_DELTA_WINDOW) -> int | None:
    """The window a server grants: the request, lowered to its own maximum.

    Args:
        requested: What :func:`requested_window` returned.
        maximum: The largest window this server accepts.

    Returns:
        ``min(requested, maximum)``, or ``None`` if the client did not opt in.

    Raises:
        ValueError: If ``maximum`` is smaller than 1.
    """
    if maximum < 1:
        raise ValueError(f"maximum delta window must be at least 1, got {maximum}")
    return None if requested is None else min(requested, maximum)


def confirmed_window(extensions: Mapping[str, Any] | None, requested: int | None) -> int | None:
    """Read the window a server granted in ``session.created``.

    Args:
        extensions: ``session.created.session.config.extensions``.
        requested: The window this client asked for, or ``None``.

    Returns:
        The granted window, or ``None`` when the server did not echo one (it
        speaks plain UAMP 1.0 and sends no ``delta_seq``).

    Raises:
        RemoteProtocolError: ``code="invalid_event"`` for a malformed value,
            a window larger than requested, or one the client never asked for.
    """
    granted = _window_value(extensions, "session.config.extensions")
    if granted is None:
        return None
    if requested is None or granted > requested:
        raise RemoteProtocolError(
            f"server granted delta_window {granted} but the client asked for {requested}",
            code="invalid_event",
        )
    return granted


def flow_extension(window: int = DEFAULT_DELTA_WINDOW) -> dict[str, Any]:
    """The extensions entry that asks for (client) or grants (server) a window.

    Args:
        window: The delta window.

    Returns:
        ``{"flow": {"delta_window": window}}``, to merge into ``extensions``.

    Raises:
        LocalProtocolError: If ``window`` is not an integer from 1 to
            :data:`MAX_DELTA_WINDOW`.
    """
    if type(window) is not int or not 1 <= window <= MAX_DELTA_WINDOW:
        raise LocalProtocolError(
            f"delta_window must be an integer from 1 to {MAX_DELTA_WINDOW}, got {window!r}",
            code="invalid_event",
        )
    return {_EXTENSION: {_KEY: window}}


# --- acknowledgements -----------------------------------------------------------


def ack_event(response_id: str, seq: int, session_id: str | None = None) -> Progress:
    """Build the ``progress`` event that acknowledges deltas up to ``seq``.

    Args:
        response_id: The response whose deltas are acknowledged.
        seq: The highest ``delta_seq`` received (cumulative).
        session_id: The session, on a multiplexed connection.

    Returns:
        A :class:`~uamp_proto.events.Progress` with ``stage="ack"``.
    """
    return Progress(
        target=_ACK_TARGET,
        target_id=response_id,
        stage=_ACK_STAGE,
        delta_seq=seq,
        session_id=session_id,
    )


def is_ack(event: object) -> bool:
    """Whether ``event`` is a delta acknowledgement (``progress``, stage ``ack``).

    Args:
        event: Any decoded event.

    Returns:
        True for a ``progress`` event with ``target="response"`` and
        ``stage="ack"``, well-formed or not (see :func:`ack_of`).
    """
    return isinstance(event, Progress) and event.stage == _ACK_STAGE and event.target == _ACK_TARGET


def ack_of(event: Progress) -> tuple[str, int]:
    """The response id and ``delta_seq`` an ack carries.

    Args:
        event: An event for which :func:`is_ack` is true.

    Returns:
        ``(response_id, seq)``.

    Raises:
        RemoteProtocolError: ``code="invalid_event"`` when ``target_id`` is
            missing or ``delta_seq`` is missing or negative.
    """
    seq = event.delta_seq
    if not event.target_id or type(seq) is not int or seq < 0:
        raise RemoteProtocolError(
            "a delta ack needs target_id and a delta_seq >= 0",
            code="invalid_event",
            session_id=event.session_id,
            event_id=event.event_id,
        )
    return event.target_id, seq


# --- windows --------------------------------------------------------------------


def _check_window(window: int) -> None:
    if type(window) is not int or not 1 <= window <= MAX_DELTA_WINDOW:
        raise ValueError(f"delta window must be an integer from 1 to {MAX_DELTA_WINDOW}")


class SendWindow:
    """The sender's (server's) side of a session's delta window.

    Attributes:
        window: The granted delta window.
        response_id: The response now streaming, or ``None`` before the first.
        next_seq: The ``delta_seq`` the next frame of it will carry.
        acked: The highest ``delta_seq`` of it acknowledged, or -1.
    """

    def __init__(self, window: int, *, session_id: str | None = None) -> None:
        """Create the window.

        Args:
            window: The granted delta window (>= 1).
            session_id: Put into the errors raised, for the binding.

        Raises:
            ValueError: If ``window`` is not an integer from 1 to
                :data:`MAX_DELTA_WINDOW`.
        """
        _check_window(window)
        self.window = window
        self.session_id = session_id
        self.response_id: str | None = None
        self.next_seq = 0
        self.acked = -1

    @property
    def in_flight(self) -> int:
        """Frames of the current response sent and not yet acknowledged."""
        return self.next_seq - 1 - self.acked

    @property
    def available(self) -> int:
        """Frames that may still be sent before an ack must arrive."""
        return self.window - self.in_flight

    def start_stream(self, response_id: str) -> None:
        """Begin numbering the deltas of a new response from 0.

        Frames of the previous response that were never acknowledged no
        longer count, and late acks for it are ignored.

        Args:
            response_id: The new response.

        Raises:
            LocalProtocolError: If ``response_id`` is the one already streaming
                (restarting its numbering would repeat ``delta_seq`` values).
        """
        if response_id == self.response_id:
            raise LocalProtocolError(
                f"response {response_id!r} is already streaming", session_id=self.session_id
            )
        self.response_id = response_id
        self.next_seq = 0
        self.acked = -1

    def lift(self) -> None:
        """Stop limiting: frames are still numbered, never refused.

        For a response that outlives its connection: it streams into the
        session's event log, which the resuming connection reads at its own
        pace, and the acks of that connection do not come back here.
        """
        self.window = MAX_DELTA_WINDOW

    def stamp(self, response_id: str) -> int:
        """Allocate the ``delta_seq`` of the next frame of ``response_id``.

        Args:
            response_id: The response the frame belongs to.

        Returns:
            The ``delta_seq`` to put on the frame.

        Raises:
            FlowControlError: ``code="flow_control"`` when the window is full
                (``available == 0``); nothing is allocated, and the caller
                waits for an ack rather than queue the frame here.
            LocalProtocolError: If ``response_id`` is not the response
                started with :meth:`start_stream`.
        """
        if response_id != self.response_id:
            raise LocalProtocolError(
                f"delta for response {response_id!r} but {self.response_id!r} is streaming; "
                "call start_stream first",
                session_id=self.session_id,
            )
        if self.available <= 0:
            raise FlowControlError(
                f"delta window of {self.window} is full for response {response_id!r} "
                f"(acknowledged up to {self.acked}, next delta_seq {self.next_seq})",
                code="flow_control",
                session_id=self.session_id,
            )
        seq = self.next_seq
        self.next_seq = seq + 1
        return seq

    def acknowledge(self, response_id: str, seq: int) -> int:
        """Apply an ack received from the peer.

        Args:
            response_id: The ack's ``target_id``.
            seq: The ack's ``delta_seq`` (cumulative).

        Returns:
            How many frames this ack freed: 0 for an ack of another (older,
            finished) response or one no higher than a previous ack.

        Raises:
            RemoteProtocolError: ``code="4.09"`` for an ack of a ``delta_seq``
                never sent; ``reply`` is ``None`` (the connection builds it).
        """
        if response_id != self.response_id or seq <= self.acked:
            return 0
        if seq >= self.next_seq:
            raise RemoteProtocolError(
                f"ack for delta_seq {seq} of response {response_id!r}, "
                f"but only 0..{self.next_seq - 1} were sent",
                code=ERR_MISSING_DELTA_SEQ,
                session_id=self.session_id,
            )
        freed = seq - self.acked
        self.acked = seq
        return freed


class ReceiveWindow:
    """The receiver's (client's) side of a session's delta window.

    Attributes:
        window: The granted delta window.
        ack_every: How many frames arrive between two acks.
        response_id: The response now streaming, or ``None`` before the first.
        expected: The ``delta_seq`` the next frame of it must carry.
        acked: The highest ``delta_seq`` of it acknowledged, or -1.
    """

    def __init__(
        self, window: int, ack_every: int | None = None, *, session_id: str | None = None
    ) -> None:
        """Create the window.

        Args:
            window: The granted delta window (>= 1).
            ack_every: Ack after this many frames; default
                ``max(1, window // 2)``. Spec 003 wants it <= ``window``.
            session_id: Put into the errors raised, for the binding.

        Raises:
            ValueError: If ``window`` is out of range or ``ack_every`` is not
                from 1 to ``window``.
        """
        _check_window(window)
        if ack_every is None:
            ack_every = max(1, window // 2)
        if type(ack_every) is not int or not 1 <= ack_every <= window:
            raise ValueError(f"ack_every must be an integer from 1 to {window}, got {ack_every!r}")
        self.window = window
        self.ack_every = ack_every
        self.session_id = session_id
        self.response_id: str | None = None
        self.expected = 0
        self.acked = -1

    def _error(self, message: str) -> RemoteProtocolError:
        return RemoteProtocolError(message, code=ERR_MISSING_DELTA_SEQ, session_id=self.session_id)

    def receive(self, response_id: str, seq: int | None) -> int | None:
        """Check the ``delta_seq`` of a flow-controlled frame just received.

        Args:
            response_id: The frame's response. A response id other than the
                current one starts a new stream, whose first frame must be 0.
            seq: The frame's ``delta_seq`` (``None`` if it had none).

        Returns:
            The ``delta_seq`` to acknowledge now (``ack_every`` frames have
            arrived since the last recorded ack), or ``None``.

        Raises:
            RemoteProtocolError: ``code="4.09"``: "missing delta_seq" for a
                frame without one or after a gap, "duplicate delta_seq" for a
                repeat, "delta window exceeded" for more than ``window``
                frames un-acked. The frame is not counted.
        """
        if seq is None:
            raise self._error(f"missing delta_seq on a delta of response {response_id!r}")
        if response_id != self.response_id:
            if seq != 0:
                raise self._error(
                    f"missing delta_seq 0..{seq - 1} of response {response_id!r}"
                    if seq > 0
                    else f"invalid delta_seq {seq} of response {response_id!r}"
                )
            self.response_id = response_id
            self.expected = 0
            self.acked = -1
        elif seq != self.expected:
            if seq < self.expected:
                raise self._error(f"duplicate delta_seq {seq} of response {response_id!r}")
            missing = (
                f"{self.expected}" if seq == self.expected + 1 else f"{self.expected}..{seq - 1}"
            )
            raise self._error(f"missing delta_seq {missing} of response {response_id!r}")
        if seq - self.acked > self.window:
            raise self._error(
                f"delta window exceeded: delta_seq {seq} of response {response_id!r} "
                f"with only up to {self.acked} acknowledged and a window of {self.window}"
            )
        self.expected = seq + 1
        if seq - self.acked >= self.ack_every:
            return seq
        return None

    def pending_ack(self, response_id: str) -> int | None:
        """The ack still owed for ``response_id`` (e.g. to flush at its end).

        Args:
            response_id: The response.

        Returns:
            The highest ``delta_seq`` received and not yet acknowledged, or
            ``None`` if every frame received has been acknowledged.
        """
        if response_id != self.response_id or self.expected - 1 <= self.acked:
            return None
        return self.expected - 1

    def acknowledged(self, response_id: str, seq: int) -> None:
        """Record that an ack up to ``seq`` was sent.

        Call it no later than the ack can reach the peer. An ack for another
        response, or no higher than a previous one, changes nothing.

        Args:
            response_id: The acknowledged response.
            seq: The ``delta_seq`` acknowledged.

        Raises:
            LocalProtocolError: If ``seq`` was never received.
        """
        if response_id != self.response_id or seq <= self.acked:
            return
        if seq >= self.expected:
            raise LocalProtocolError(
                f"cannot acknowledge delta_seq {seq} of response {response_id!r}: "
                f"only 0..{self.expected - 1} were received",
                session_id=self.session_id,
            )
        self.acked = seq
