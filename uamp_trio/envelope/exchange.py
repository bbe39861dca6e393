"""One spec 003 exchange and its stream of delta frames (sections 5 and 10).

An :class:`Exchange` is what an ``ask``, ``propose`` or ``subscribe`` opened:
its section 10 state machine, its place among its caller's conversations,
its queue of :class:`Turn` s (each a run of the agent, its charge held), and
the frames the agent's answers become. :meth:`Exchange.push` stamps a frame
with the next ``delta_seq`` of the producer's window and waits while
``delta_window`` frames are un-acknowledged (``trio.TooSlowError`` after
``idle`` seconds without an ack); frames stay until acknowledged
(:meth:`Exchange.acknowledge`, cumulative), so a reader that comes late or
comes back (:meth:`Exchange.batches`, :meth:`Exchange.deltas`) reads them
from any ``delta_seq``. A binding whose transport stream names the frames
(HTTP/3) registers that name with :meth:`Exchange.alias`, and an ack may
name either. The service (:mod:`uamp_trio.envelope.service`) opens, finds
and forgets exchanges; :mod:`uamp_trio.envelope.turns` runs them.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

import attrs
import trio

from uamp_proto import types as ty
from uamp_proto.adapters.envelope import EnvelopeRefused
from uamp_proto.envelope import (
    MISSING_DELTA_SEQ,
    Delta,
    DeltaType,
    Envelope,
    ExchangeState,
    Intent,
    Trigger,
    envelope_sha256,
)
from uamp_proto.envelope import Exchange as ExchangeMachine
from uamp_proto.errors import RemoteProtocolError
from uamp_proto.flow import SendWindow
from uamp_proto.payment import Charge
from uamp_stores.busy import Slot
from uamp_stores.event_log import Handler, LogKey

from ..hosting.turns import ResponseRunner

__all__ = ["FINAL_TYPES", "Exchange", "Turn", "utc_ts"]

#: Transport stream ids an exchange answers to besides its own (HTTP/3 readers).
_MAX_ALIASES: Final = 16
#: The frame types that end a stream.
FINAL_TYPES: Final = frozenset({DeltaType.DONE, DeltaType.CANCEL, DeltaType.ERROR})


def utc_ts(now: float) -> str:
    """RFC 3339 UTC timestamp with milliseconds (``2025-07-10T13:37:05.123Z``)."""
    whole = time.gmtime(now)
    return time.strftime("%Y-%m-%dT%H:%M:%S", whole) + f".{int(now % 1 * 1000):03d}Z"


class Exchange:
    """One ``ask``/``propose``/``subscribe`` and its stream of delta frames (module docstring).

    Attributes:
        id: The opening envelope's ``id`` (the ``{id}`` of ``/v1/stream/{id}``).
        stream_id: The frames' ``stream_id``.
        agent: The agent's name.
        owner: Who opened it (``Principal.key``).
        machine: The section 10 state machine.
        window: The producer's side of the delta window.
        envelope_hash: ``sha256:<hex>`` of the opening envelope's canonical form.
    """

    def __init__(
        self,
        envelope: Envelope,
        agent: str,
        owner: tuple[str, str],
        window: int,
        clock: Callable[[], float],
    ) -> None:
        self.id = envelope.id
        self.stream_id = envelope.stream_id or envelope.id
        self.agent = agent
        self.owner = owner
        #: The opening intent: ``ask``, ``propose`` or ``subscribe``.
        self.kind = envelope.intent
        self.machine = ExchangeMachine()
        self.machine.advance(Trigger(envelope.intent.value))
        self.window = SendWindow(window)
        self.window.start_stream(self.stream_id)
        self.envelope_hash = "sha256:" + envelope_sha256(envelope)
        #: The conversation this exchange answered, with the answer (for history).
        self.messages: list[ty.Message] = []
        #: The peer's ``progress`` envelopes about this exchange, as they
        #: arrive (the running agent sees this list as ``metadata["updates"]``).
        self.updates: list[dict[str, Any]] = []
        #: What the peer's ``error`` envelope reported (``{"code", "message"}``),
        #: the payload of the final ``error`` frame.
        self.peer_error: dict[str, Any] | None = None
        #: The structured output the opening envelope asked for (``ext.response_format``).
        self.response_format: ty.ResponseFormat | None = None
        #: The payment token of the opening envelope (a subscription's events).
        self.payment_token: str | None = None
        #: Where the next turns wait (a subscription's events); closed when it ends.
        self.turns: trio.MemorySendChannel[Turn] | None = None
        self._clock = clock
        self._frames: list[Delta] = []  # sent, not yet acknowledged
        self._changed = trio.Event()
        self._final = False
        self.runner: ResponseRunner | None = None
        self.done_sent = False
        #: Other names of the stream: the QUIC stream ids that carried its
        #: frames over HTTP/3 (an ack may name any of them).
        self.aliases: list[str] = []
        #: One-way messages (with ``reply_to``) that joined its conversation, and their bytes.
        self.joined = (0, 0)
        #: Its key and handler in a shared store (other processes reach it).
        self.routed: tuple[LogKey, Handler] | None = None
        #: The first exchange of its ``context`` chain: the conversation's id.
        self.conversation = self.id
        #: Its conversation's key in the host's busy gate.
        self.lane: tuple[Any, ...] = ("envelope", owner, agent, self.id)
        #: The exchange its ``context`` continues: its messages come first (read
        #: when the first turn starts, so a turn it waited for is in them).
        self.continues: Exchange | None = None
        #: Set (and renewed) when a turn arrives or its place comes, or it stops.
        self.woken = trio.Event()

    @property
    def subscription(self) -> bool:
        """Whether a ``subscribe`` opened it (a long-lived stream of answers)."""
        return self.kind is Intent.SUBSCRIBE

    def alias(self, stream_id: str) -> None:
        """Accept ``stream_id`` as a name of this stream too (the newest 16 are kept)."""
        if stream_id != self.stream_id and stream_id not in self.aliases:
            self.aliases.append(stream_id)
            del self.aliases[:-_MAX_ALIASES]

    def names(self, stream_id: str) -> bool:
        """Whether ``stream_id`` names this stream (its own id or an alias)."""
        return stream_id == self.stream_id or stream_id in self.aliases

    def stop(self) -> None:
        """No more turns: close the queue and cancel the running one, if any."""
        if self.turns is not None:
            self.turns.close()
        if self.runner is not None:
            self.runner.cancel()
        self.wake()

    def wake(self) -> None:
        """Tell the turn loop something changed (a turn, a turn's place, the state)."""
        self.woken.set()
        self.woken = trio.Event()

    @property
    def state(self) -> ExchangeState:
        """The section 10 state."""
        return self.machine.state

    @property
    def finished(self) -> bool:
        """Whether the final frame has been produced (or the run ended without one)."""
        return self._final

    def _pulse(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def push(self, kind: DeltaType, payload: dict[str, Any], idle: float) -> None:
        """Produce one frame, waiting while the window is full.

        Raises:
            trio.TooSlowError: No ack opened the window within ``idle`` seconds.
        """
        with trio.fail_after(idle):
            while self.window.available <= 0:
                await self._changed.wait()
        seq = self.window.stamp(self.stream_id)
        self._frames.append(
            Delta(
                delta_seq=seq,
                stream_id=self.stream_id,
                ts=utc_ts(self._clock()),
                type=kind,
                payload=payload,
            )
        )
        if kind in FINAL_TYPES:
            self._final = True
            self.done_sent = kind is DeltaType.DONE
        self._pulse()

    def end(self) -> None:
        """The run is over: readers stop after the frames already produced."""
        if not self._final:
            self._final = True
            self._pulse()

    def acknowledge(self, seq: int) -> int:
        """Apply a cumulative ack; returns the frames freed.

        Raises:
            EnvelopeRefused: 4.09 for a ``delta_seq`` never sent.
        """
        try:
            freed = self.window.acknowledge(self.stream_id, seq)
        except RemoteProtocolError as exc:
            raise EnvelopeRefused(MISSING_DELTA_SEQ, exc.message) from None
        if freed:
            self._frames = [f for f in self._frames if f.delta_seq > seq]
            self._pulse()
        return freed

    async def batches(self, after: int = -1) -> AsyncIterator[list[Delta]]:
        """The frames with ``delta_seq > after`` until the final one, in batches.

        Each batch is every frame produced since the last one: a binding
        writes it at once (one WebSocket message of several length-prefixed
        frames, one chunk of several SSE events).
        """
        while True:
            batch = [frame for frame in self._frames if frame.delta_seq > after]
            if batch:
                after = batch[-1].delta_seq
                yield batch
            elif self._final:
                return
            else:
                await self._changed.wait()

    async def deltas(self, after: int = -1) -> AsyncIterator[Delta]:
        """The frames with ``delta_seq > after``, one by one, until the final one."""
        async for batch in self.batches(after):
            for frame in batch:
                yield frame


@attrs.frozen
class Turn:
    """One run of the agent waiting in an exchange's queue (its charge is held)."""

    envelope_id: str
    message: ty.Message
    token: str | None
    response_id: str
    charge: Charge | None
    #: Its place in the conversation (the busy policy).
    slot: Slot | None = None
