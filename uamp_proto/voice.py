"""The voice call lifecycle (UAMP sections 5.16 and 7.3) as a table.

Theory of operation
-------------------
A session has at most one call at a time. :data:`CALL_TRANSITIONS` says
which voice event moves it where, ``{state: {event type: next state}}``;
a missing key is the refusal (``invalid_event``)::

    IDLE --voice.invite--> RINGING --voice.accept--> ACTIVE --voice.end--> IDLE
                              |--voice.decline / voice.end--> IDLE

Audio (``input.audio`` in, ``audio.delta`` out) of a call flows only while
it is ``ACTIVE``: :meth:`Call.check_audio` refuses it while the call rings
and once it was declined (saying with what reason) or ended, with
``call_not_active``. A session that never placed a call sends audio as
plain input (a voice note, section 5.7), as before. ``voice.end`` carries the call's length in
``duration_ms`` from ``voice.accept`` to the end, time being passed in.

Who answers a call placed to an agent: the agent's own *call hook* when it
has one (:class:`CallHook`: ``take_call`` gets a :class:`CallOffer` and
returns a :class:`CallAnswer`, which may carry an SDP answer), else its
capabilities (:func:`default_answer`). An agent may also have
``call_ended``, told once how a call ended (:class:`CallEnded`). Every
transport of either server asks both through :func:`answer_call` and
:func:`call_ended`, so the rule is the same everywhere: a hook that fails,
returns something else or takes longer than :data:`CALL_ANSWER_TIMEOUT`
declines the call, and the caller never waits forever on a ringing call.
The server passes its loop's timeout scope (``trio.move_on_after``,
``anyio.move_on_after``) and its logger.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Final, Protocol, runtime_checkable

import attrs

from .errors import ProtocolError
from .principal import ANONYMOUS, Principal
from .types import Capabilities

if TYPE_CHECKING:
    from .responder import Responder

__all__ = [
    "CALL_ANSWER_TIMEOUT",
    "CALL_TRANSITIONS",
    "Call",
    "CallAnswer",
    "CallEnded",
    "CallHook",
    "CallOffer",
    "CallState",
    "answer_call",
    "call_ended",
    "default_answer",
    "has_call_hook",
    "takes_calls",
]

#: Seconds an agent's ``take_call`` may take before the call is declined.
CALL_ANSWER_TIMEOUT: Final = 10.0

#: A loop's timeout scope: ``with move_on_after(seconds):`` leaves the block
#: when the time is up (``trio.move_on_after``, ``anyio.move_on_after``).
MoveOnAfter = Callable[[float], AbstractContextManager[Any]]


class Log(Protocol):
    """Where the call helpers report (a ``logging.Logger``)."""

    def info(self, msg: str, *args: object) -> None:
        """An ended call."""
        ...

    def warning(self, msg: str, *args: object) -> None:
        """A hook that answered something other than a :class:`CallAnswer`."""
        ...

    def exception(self, msg: str, *args: object) -> None:
        """A hook that raised (called inside the ``except``)."""
        ...


class CallState(enum.Enum):
    """Where a session's call is."""

    IDLE = "idle"
    RINGING = "ringing"
    ACTIVE = "active"


_C = CallState

#: state -> {voice event: next state}.
CALL_TRANSITIONS: Final[dict[CallState, dict[str, CallState]]] = {
    _C.IDLE: {"voice.invite": _C.RINGING},
    _C.RINGING: {"voice.accept": _C.ACTIVE, "voice.decline": _C.IDLE, "voice.end": _C.IDLE},
    _C.ACTIVE: {"voice.end": _C.IDLE},
}


def takes_calls(capabilities: Capabilities) -> bool:
    """Whether an agent declaring ``capabilities`` takes voice calls.

    It does when it declares realtime audio (``audio.supports_realtime``):
    a call's audio is passed to it as it comes, whatever output modalities
    it lists for ordinary responses.
    """
    audio = capabilities.audio
    return audio is not None and bool(audio.supports_realtime)


@attrs.frozen(kw_only=True)
class CallOffer:
    """A call placed to an agent.

    Args:
        call_id: The call's id (the caller's, or one the server made).
        session_id: The caller's session.
        sdp: The caller's WebRTC SDP offer, if any.
        transport: Which transport the call came by (``uamp-websocket``,
            ``uamp-sse``, ``realtime``).
        principal: Who calls.
    """

    call_id: str
    session_id: str | None = None
    sdp: str | None = None
    transport: str = "uamp-websocket"
    principal: Principal = ANONYMOUS


@attrs.frozen(kw_only=True)
class CallAnswer:
    """An agent's answer to a :class:`CallOffer`.

    Args:
        accept: Take the call (``voice.accept``) or not (``voice.decline``).
        sdp: The SDP answer sent in ``voice.accept`` (the agent's media
            endpoint); ``None`` keeps the call's audio in-band.
        reason: Why it is declined (``voice.decline.reason``).
    """

    accept: bool = True
    sdp: str | None = None
    reason: str | None = None


@attrs.frozen(kw_only=True)
class CallEnded:
    """How a call an agent took ended.

    Args:
        call_id: The call.
        session_id: The caller's session.
        duration_ms: From the accept to the end.
        reason: ``"ended"`` (a ``voice.end``), ``"closed"`` (the session or
            connection went away), or the ``voice.end`` reason.
    """

    call_id: str
    session_id: str | None = None
    duration_ms: float | None = None
    reason: str | None = None


@runtime_checkable
class CallHook(Protocol):
    """The hook of an agent that answers its calls itself (beside ``Responder``)."""

    async def take_call(self, offer: CallOffer) -> CallAnswer:
        """Accept (optionally with an SDP answer) or decline ``offer``."""
        ...


def default_answer(name: str, capabilities: Capabilities) -> CallAnswer:
    """The answer of an agent without a call hook: accept when it :func:`takes_calls`."""
    if takes_calls(capabilities):
        return CallAnswer()
    return CallAnswer(accept=False, reason=f"agent {name!r} does not take calls")


def has_call_hook(agent: object) -> bool:
    """Whether ``agent`` answers its calls itself (has ``take_call``)."""
    return callable(getattr(agent, "take_call", None))


async def answer_call(
    agent: Responder,
    offer: CallOffer,
    *,
    move_on_after: MoveOnAfter,
    log: Log,
    timeout: float = CALL_ANSWER_TIMEOUT,
) -> CallAnswer:
    """``agent`` 's answer to ``offer``: its hook's, or the one its capabilities give."""
    hook = getattr(agent, "take_call", None)
    if not callable(hook):
        return default_answer(agent.name, agent.capabilities())
    with move_on_after(timeout):
        try:
            answer = await hook(offer)
        except Exception:
            log.exception("agent %r: take_call failed for call %s", agent.name, offer.call_id)
            return CallAnswer(accept=False, reason="the agent could not take the call")
        if isinstance(answer, CallAnswer):
            return answer
        log.warning("agent %r: take_call returned %r, not a CallAnswer", agent.name, answer)
        return CallAnswer(accept=False, reason="the agent could not take the call")
    return CallAnswer(accept=False, reason="the agent did not answer")


async def call_ended(agent: Responder, ended: CallEnded, *, log: Log) -> None:
    """Tell ``agent`` (its ``call_ended``, if any) how a call ended; never raises."""
    log.info(
        "call %s of agent %r ended (%s) after %s ms",
        ended.call_id,
        agent.name,
        ended.reason,
        None if ended.duration_ms is None else round(ended.duration_ms),
    )
    hook = getattr(agent, "call_ended", None)
    if not callable(hook):
        return
    try:
        await hook(ended)
    except Exception:
        log.exception("agent %r: call_ended failed for call %s", agent.name, ended.call_id)


class Call:
    """One session's call; see the module docstring."""

    __slots__ = ("call_id", "ended", "started_at", "state")

    def __init__(self) -> None:
        self.state = CallState.IDLE
        self.call_id: str | None = None
        self.started_at: float | None = None
        #: Why the last call is over, for the audio refusal's message.
        self.ended: str | None = None

    def apply(
        self,
        etype: str,
        now: float | None,
        *,
        call_id: str | None = None,
        reason: str | None = None,
    ) -> float | None:
        """Move the call by ``etype`` at ``now``; ``duration_ms`` when an active call ends.

        Raises:
            ProtocolError: ``invalid_event`` when the table has no such
                move, ``unknown_call`` when ``call_id`` names another call.
        """
        after = CALL_TRANSITIONS[self.state].get(etype)
        if after is None:
            where = (
                "no call is ringing or active"
                if self.state is _C.IDLE
                else f"a call is {self.state.value}"
            )
            raise ProtocolError(f"{etype} not allowed: {where}", code="invalid_event")
        if self.state is not _C.IDLE and self.call_id is None:
            self.call_id = call_id  # the answer names the call the invite left unnamed
        elif self.state is not _C.IDLE and call_id is not None and call_id != self.call_id:
            raise ProtocolError(
                f"call {call_id!r} is not this session's call {self.call_id!r}",
                code="unknown_call",
                field="call_id",
            )
        duration = None
        if etype == "voice.invite":
            self.call_id, self.ended, self.started_at = call_id, None, None
        elif etype == "voice.accept":
            self.started_at = now
        elif etype == "voice.decline":
            self.ended = f"was declined ({reason})" if reason else "was declined"
        elif etype == "voice.end":
            if self.started_at is not None and now is not None:
                duration = max(0.0, (now - self.started_at) * 1000.0)
            self.ended = "has ended"
        self.state = after
        return duration

    def check_audio(self) -> None:
        """Refuse audio while a call rings or after one was declined or ended.

        Raises:
            ProtocolError: ``call_not_active`` saying why.
        """
        if self.state is _C.ACTIVE:
            return
        if self.state is _C.RINGING:
            why = "the call has not been accepted yet"
        elif self.ended is not None:
            why = f"the call {self.ended}; send voice.invite for a new one"
        else:
            return  # no call ever: plain audio input
        raise ProtocolError(f"audio refused: {why}", code="call_not_active")
