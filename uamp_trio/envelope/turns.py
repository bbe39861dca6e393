"""An exchange's run: its turns one at a time, each the agent once, its events as delta frames.

Theory of operation
-------------------
An exchange queues :class:`~uamp_trio.envelope.exchange.Turn` s, each with its
charge held: one for an ``ask`` or a ``propose``, one per event of a
subscription (its body, then each ``notify`` naming it). :func:`run_turns`
takes the first queued turn whose place in the conversation has come (its
busy-policy slot is ready), runs it and closes its slot, so the
conversation's next turn goes on; meanwhile it waits on ``exchange.woken``.
A subscription without an event for ``idle_timeout`` ends DONE, as does one
whose queue is closed (``confirm``).

A turn runs the agent through :class:`~uamp_trio.hosting.turns.ResponseRunner`
on the conversation so far (the exchange it continues first, then the turn's
message). :class:`~uamp_proto.adapters.envelope.DeltaEncoder` makes delta
frames of its UAMP events, pushed into the exchange's window (waiting on
acks; ``trio.TooSlowError`` past ``idle_timeout``); structured output
(``ext.response_format``) streams as partial JSON (:func:`partial_json`). The
answer joins the conversation before the peer can see the final frame.
Between a subscription's turns an answer's ``done`` is a ``progress`` frame
``{"answered": id}``, and a turn stopped by the busy policy ends in a
``progress`` frame naming ``interrupt`` or ``rollback``; a rolled-back turn
leaves nothing in the conversation. A peer's ``error`` envelope turns the
stop's ``cancel`` frame into an ``error`` frame with the peer's report.
Turns still queued when the run ends are released (:func:`release`): their
charges settled unused.
"""

from __future__ import annotations

import math
from typing import Any

import jiter
import trio

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.adapters.envelope import DeltaEncoder
from uamp_proto.busy import POLICY_KEY
from uamp_proto.envelope import DeltaType, ExchangeState, Intent, Trigger
from uamp_proto.principal import Principal
from uamp_proto.responder import Responder, TurnRequest

from ..hosting.turns import DEFAULT_TURN_OPTIONS, TurnOptions
from .exchange import FINAL_TYPES, Exchange, Turn

__all__ = ["partial_json", "release", "run_turns"]


async def run_turns(
    exchange: Exchange,
    agent: Responder,
    principal: Principal,
    turns: trio.MemoryReceiveChannel[Turn],
    *,
    idle_timeout: float,
    options: TurnOptions = DEFAULT_TURN_OPTIONS,
) -> None:
    """Run the queued turns: one for ``ask``/``propose``, each event of a subscription.

    A turn runs when its place in the conversation comes (the busy
    policy): the next is the first whose slot is ready. Each runs on
    ``options``, the host's turn options (:attr:`Host.turns
    <uamp_trio.hosting.host.Host.turns>`: the output bound ...).
    """
    wait = idle_timeout if exchange.subscription else math.inf
    pending: list[Turn] = []
    closed = False
    try:
        while exchange.state is ExchangeState.IN_PROGRESS:
            woken = exchange.woken
            while not closed:
                try:
                    pending.append(turns.receive_nowait())
                except trio.WouldBlock:
                    break
                except (trio.EndOfChannel, trio.ClosedResourceError):
                    closed = True
            turn = next((t for t in pending if t.slot is None or t.slot.ready), None)
            if turn is None:
                if not pending and closed:  # the subscription was closed (confirm)
                    exchange.machine.advance(Trigger.DONE)
                    return
                with trio.move_on_after(math.inf if pending else wait) as idle:
                    await woken.wait()
                if idle.cancelled_caught:  # a subscription without events
                    exchange.machine.advance(Trigger.DONE)
                    return
                continue
            pending.remove(turn)
            try:
                status = await _turn(
                    exchange,
                    agent,
                    principal,
                    turn,
                    idle_timeout=idle_timeout,
                    options=options,
                )
            finally:
                if turn.slot is not None:
                    turn.slot.close()  # the conversation's next turn goes on
            if exchange.state is not ExchangeState.IN_PROGRESS:
                return  # stopped by the peer meanwhile
            stopped = turn.slot is not None and turn.slot.interrupted
            if exchange.subscription and (status == "completed" or stopped):
                continue
            outcome = {
                "completed": Trigger.ANSWER if exchange.kind is Intent.PROPOSE else Trigger.DONE,
                "failed": Trigger.ERROR,
            }
            exchange.machine.advance(outcome.get(status, Trigger.CANCEL))
            return
    finally:
        with trio.CancelScope(shield=True):
            for left in pending:
                if left.slot is not None:
                    left.slot.close()
                if left.charge is not None:
                    await left.charge.settle(None, used=False)


async def _turn(
    exchange: Exchange,
    agent: Responder,
    principal: Principal,
    turn: Turn,
    *,
    idle_timeout: float,
    options: TurnOptions,
) -> str:
    """Run the agent once on ``turn``; its frames go to the exchange's stream."""
    structured = exchange.response_format is not None and exchange.response_format.type != "text"
    encoder = DeltaEncoder(structured=partial_json if structured else None)
    idle = idle_timeout
    between = exchange.subscription
    answered = False

    def answer() -> None:
        nonlocal answered
        if not answered:
            answered = True
            exchange.messages.append(ty.Message(role="assistant", content=encoder.text))

    async def sink(event: ev.Event) -> None:
        for kind, payload in encoder.feed(event):
            if exchange.finished:
                return
            if kind is DeltaType.CANCEL and exchange.peer_error is not None:
                # Stopped by the peer's error envelope (section 10: ERROR), not a cancel.
                kind, payload = DeltaType.ERROR, {**exchange.peer_error, **payload}
            if kind in FINAL_TYPES:
                # The answer joins the conversation before the peer can see
                # its end (and continue the conversation).
                answer()
                if between and kind is DeltaType.DONE:  # one answer, not the subscription's end
                    kind, payload = (
                        DeltaType.PROGRESS,
                        {"answered": turn.envelope_id, **payload},
                    )
                elif between and kind is DeltaType.CANCEL and slot is not None and slot.stopped:
                    # Stopped by a later event (the busy policy): the subscription goes on.
                    how = "rollback" if slot.dropped else "interrupt"
                    kind, payload = (
                        DeltaType.PROGRESS,
                        {"answered": turn.envelope_id, POLICY_KEY: how, **payload},
                    )
            await exchange.push(kind, payload, idle)

    slot = turn.slot
    if exchange.continues is not None:
        # The conversation it continues, as the turns before this one left it.
        exchange.messages[:0] = exchange.continues.messages
        exchange.continues = None
    mark = len(exchange.messages)
    exchange.messages.append(turn.message)
    request = TurnRequest(
        agent=exchange.agent,
        session_id=exchange.id,
        response_id=turn.response_id,
        messages=list(exchange.messages),
        principal=principal,
        payment_token=turn.token,
        response_format=exchange.response_format,
        metadata={
            "envelope_id": turn.envelope_id,
            "stream_id": exchange.stream_id,
            "intent": exchange.kind.value,
            "updates": exchange.updates,
        },
    )
    runner = options.runner(agent, request, sink, charge=turn.charge)
    exchange.runner = runner
    if slot is not None:
        slot.bind(runner.cancel)  # a later message of the conversation may stop it
    try:
        outcome = await runner.run()
    finally:
        exchange.runner = None
        answer()
        if slot is not None and slot.dropped:
            del exchange.messages[mark:]  # rolled back: the turn leaves nothing
    return outcome.status


def partial_json(text: str) -> Any:
    """The JSON value of ``text`` cut anywhere (jiter's partial mode), or ``None``."""
    try:
        value = jiter.from_json(text.encode(), partial_mode="trailing-strings")
    except ValueError:
        return None
    return value if isinstance(value, dict | list) else None


async def release(turns: trio.MemoryReceiveChannel[Turn]) -> None:
    """Free the charges of turns that will not run, and close the queue."""
    with turns:
        while True:
            try:
                turn = turns.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                return
            if turn.charge is not None:
                await turn.charge.settle(None, used=False)
