"""A response whose process was lost goes on here, or ends ``interrupted`` (docs/resume.md).

Theory of operation
-------------------
A session's record names the response in flight and the process running it
(:class:`~uamp_stores.event_log.SessionRecord`). When a client resumes
the session elsewhere and that process has no heartbeat any more, the first
process to :meth:`~uamp_stores.event_log.EventLog.claim` the loss
adopts the session's log and calls :func:`carry_on`, which reads what the
lost process logged and decides with the sans-IO core
(:func:`uamp_proto.resume.resume_point`):

* the response reached a UAP checkpoint (a ``progress`` event of stage
  ``checkpoint``, spec 002 section 6.4): it goes on from there. A
  ``progress`` event of stage ``restored`` tells the client that what came
  after the checkpoint is superseded; the agent is called again on the
  conversation as it stood at the checkpoint -- the session's history, the
  response's input and its output up to the checkpoint, completed tool
  results included, so they are not run again -- and its events are written
  to the log under the same response id, ending with ``response.done``
  whose output is the whole response's. The resumed connection streams them
  from the log like any other writer's.
* otherwise the response ends with ``response.error`` ``interrupted``
  carrying the output that was delivered -- unless the log holds its end
  already (its writer was lost after it): then only the record catches up.

A ``response.cancel`` sent on a connection following the carried-on
response reaches it through the log's messages
(:meth:`~uamp_stores.event_log.EventLog.ask`): it ends with
``response.cancelled``.

Payment: the lost process's ledger lock for the response is adopted
(:meth:`Host.adopt_charge <uamp_trio.hosting.host.Host.adopt_charge>`) and
settled once, with the usage of the whole response -- or of what was
delivered when it is interrupted. Nothing is locked again, so a node loss
never charges twice. A heartbeat ledger may see the lost process alive for
longer than the log did: the adoption waits for that (bounded) in a task of
its own while the response goes on, and the settlement waits for the
adoption.

The continuation marks its own process in the session's record, so if this
process dies too, the next resume carries the response on again from its
latest checkpoint (or the ``restored`` point).

Delta windows (docs/flow.md): on a session that opted in, the carried-on
deltas go on numbering ``delta_seq`` after the last one the lost process
logged, so the resumed client's receive window accepts them. They are not
held back by the window: they go into the log, which the resuming
connection reads at its client's pace, and that client's acks reach the
connection it resumed on, not this writer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import attrs
import orjson
import trio

from uamp_proto import events as ev
from uamp_proto import flow
from uamp_proto import types as ty
from uamp_proto.codec import from_dict, unstructure
from uamp_proto.payment import Charge
from uamp_proto.principal import Principal
from uamp_proto.responder import Responder, TurnRequest
from uamp_proto.response import ResponseTracker
from uamp_proto.resume import RESTORED, interrupted_event, replayed, resume_point
from uamp_stores.orphans import abandon
from uamp_stores.orphans import append_event as _append

from .turns import DEFAULT_TURN_OPTIONS, TurnOptions, cancel_handler

if TYPE_CHECKING:
    from uamp_stores.event_log import EventLog, LogKey, SessionRecord

    from .host import Host

__all__ = ["abandon", "carry_on"]

log = logging.getLogger("uamp_trio.sessions")


def _turns(host: Host | None) -> TurnOptions:
    """The turn options a carried-on response runs on: the host's (else the defaults)."""
    return DEFAULT_TURN_OPTIONS if host is None else host.turns


def _messages(raw: Sequence[dict[str, object]]) -> list[ty.Message]:
    return [from_dict(ty.Message, m) for m in raw]


def _next_seq(config: ty.SessionConfig, running: str, held: list[bytes]) -> int | None:
    """The ``delta_seq`` after the last one logged for ``running`` (``None``: no window)."""
    if flow.requested_window(config.extensions) is None:
        return None
    last = -1
    for data in held:
        raw = orjson.loads(data)
        seq = raw.get("delta_seq")
        if raw.get("response_id") == running and type(seq) is int:
            last = max(last, seq)
    return last + 1


def _config(record: SessionRecord) -> ty.SessionConfig:
    if record.config is None:
        return ty.SessionConfig(modalities=["text"])
    config: ty.SessionConfig = from_dict(ty.SessionConfig, record.config)
    return config


async def carry_on(
    event_log: EventLog,
    key: LogKey,
    record: SessionRecord,
    agent: Responder,
    principal: Principal,
    host: Host | None,
    owner: Callable[[], None] | None = None,
) -> None:
    """Go on with ``record.running`` from its last checkpoint, or end it ``interrupted``.

    The caller claimed the loss and adopted ``key`` 's log (with ``owner``,
    :meth:`EventLog.adopt`); this writes the rest of the response to it,
    updates the record and lets the log go -- unless a session of this
    process has taken it on meanwhile: once the record says nothing runs, a
    client following the log may start its next turn at once.
    """
    running, sid = record.running, key[1]
    assert running is not None
    history, inputs = _messages(record.history), _messages(record.input)
    tracker = None
    charge = _Adopting(host, agent.name, running) if host is not None else None
    ended = False
    async with trio.open_nursery() as nursery:
        if charge is not None:
            # The ledger may see the lost process alive a while longer than the
            # log did: the lock is adopted meanwhile, the response does not wait.
            nursery.start_soon(charge.adopt)
        try:
            held = [e.data for e in await event_log.read(key, 0, event_log.retention.max_events)]
            tracker = replayed(running, held)
            # The tracker it goes on with is bounded as the server's turns are.
            point = resume_point(running, held, _turns(host).max_output_bytes)
            if point is None:
                if not tracker.is_finished:  # a response the log saw end ends once
                    _append(event_log, key, interrupted_event(tracker), sid)
                ended = True  # settled below, once the client has heard
            else:
                tracker = point.tracker
                await _go_on(
                    event_log,
                    key,
                    record,
                    agent,
                    principal,
                    charge,
                    point.checkpoint,
                    tracker,
                    [*history, *inputs],
                    _next_seq(_config(record), running, held),
                    host,
                )
        except Exception:
            log.exception("session %s: cannot carry response %s on", sid, running)
            if tracker is not None and not tracker.is_finished and event_log.writing(key):
                _append(event_log, key, interrupted_event(tracker), sid)
        finally:
            done = tracker.messages() if tracker is not None else []
            record.history = unstructure([*history, *inputs, *done])
            record.running, record.input = None, []
            event_log.put_record(key, record.copy())
            with trio.CancelScope(shield=True):
                await event_log.flush()
            event_log.release(key, owner)
        if ended and charge is not None and tracker is not None:
            used = tracker.usage is not None or bool(tracker.output)
            await charge.settle(tracker.usage, used=used)


class _Adopting:
    """The lost process's lock of a carried-on response, adopted while the response goes on.

    A :class:`~uamp_proto.payment.Charge`: settling (or extending) waits
    for the adoption (:meth:`Host.adopt_charge
    <uamp_trio.hosting.host.Host.adopt_charge>`, bounded by the ledger's
    liveness window), then settles the adopted lock, once; nothing when
    there was none to adopt.
    """

    def __init__(self, host: Host, agent: str, response_id: str) -> None:
        self._host, self._agent, self._response_id = host, agent, response_id
        self._adopted = trio.Event()
        self._charge: Charge | None = None

    async def adopt(self) -> None:
        """Ask the host for the lock (see the class docstring)."""
        try:
            self._charge = await self._host.adopt_charge(self._agent, self._response_id)
        except Exception:
            log.exception("cannot adopt the lock of response %s", self._response_id)
        finally:
            self._adopted.set()

    async def settle(self, usage: ty.UsageStats | None, *, used: bool) -> ev.PaymentBalance | None:
        """Settle the adopted lock once it is known (shielded, as every settlement)."""
        with trio.CancelScope(shield=True):
            await self._adopted.wait()
        charge = self._charge
        return None if charge is None else await charge.settle(usage, used=used)

    async def extend(self, token: str | None, amount: str) -> None:
        """Lock more on the adopted lock (nothing when there was none)."""
        await self._adopted.wait()
        if self._charge is not None:
            await self._charge.extend(token, amount)


async def _go_on(
    event_log: EventLog,
    key: LogKey,
    record: SessionRecord,
    agent: Responder,
    principal: Principal,
    charge: Charge | None,
    checkpoint: str,
    tracker: ResponseTracker,
    before: list[ty.Message],
    seq: int | None,
    host: Host | None = None,
) -> None:
    """Run the agent again from the checkpoint ``tracker`` holds, into the log.

    ``seq``: the next ``delta_seq`` on a session with a delta window. A run
    that was paused on an interrupt asks again here (the host's interrupts,
    docs/human-in-the-loop.md): the client following the log answers it.
    """
    running, sid = record.running, key[1]
    assert running is not None
    record.node = event_log.node  # this process carries it now
    event_log.put_record(key, record.copy())
    restored = ev.Progress(target="response", target_id=running, stage=RESTORED, message=checkpoint)
    _append(event_log, key, restored, sid)
    config = _config(record)
    request = TurnRequest(
        agent=agent.name,
        session_id=sid,
        response_id=running,
        messages=[*before, *tracker.messages()],
        instructions=config.instructions,
        tools=list(config.tools or []),
        modalities=list(config.modalities or ["text"]),
        metadata={"transport": "resume"},
        principal=principal,
    )

    async def sink(event: ev.Event) -> None:
        nonlocal seq
        if seq is not None and event.type in flow.FLOW_CONTROLLED_TYPES:
            event = attrs.evolve(event, delta_seq=seq)  # type: ignore[call-arg]
            seq += 1
        _append(event_log, key, event, sid)

    port = host.interrupts.port(request) if host is not None else None
    if port is not None:
        request = attrs.evolve(request, interrupts=port)
    runner = _turns(host).runner(
        agent, request, sink, tracker=tracker, created=False, charge=charge
    )
    if port is not None:
        port.emit = runner.emit

    # A response.cancel sent on a connection following this response.
    on_message = cancel_handler(runner)
    event_log.register(key, on_message)
    try:
        outcome = await runner.run()
    finally:
        event_log.unregister(key, on_message)
        if port is not None:
            port.close()  # no cycle keeps the request (and its conversation) alive
    if outcome.final is None:
        # It asked the client to run tools: nobody is there to answer.
        _append(event_log, key, interrupted_event(tracker), sid)
