"""What a connection knows of one session (:class:`SessionContext`).

Its state, its configuration from ``session.create`` / ``session.update``,
the input gathered for the next response, the kept conversation and its
weights, the running response's tracker, payment, delta windows, chats, the
voice call and the ``response.create`` events held while the response slot
was busy (:class:`HeldResponse`). :class:`~uamp_proto.connection.Connection`
applies the protocol's rules to it; this module only keeps and assembles.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

import attrs

from . import _fastinit, flow, history
from . import events as ev
from . import types as ty
from ._state import ResponseState, SessionState
from .payment import PaymentNegotiation
from .response import ResponseTracker
from .voice import Call

if TYPE_CHECKING:
    from .connection_config import ConnectionConfig

__all__ = ["HeldResponse", "SessionContext", "input_size"]

#: ``Message(role=..., content=...)``, positionally (:func:`uamp_proto._fastinit.maker`).
_make_message = _fastinit.maker(ty.Message, ("role", "content"))
_message_weight = history.message_weight


class SessionContext:
    """Everything the connection knows about one session.

    Attributes:
        id: The session id (client side: provisional until ``session.created``).
        state: The :class:`SessionState`.
        agent, chat, token, payment_token, uamp_version: From
            ``session.create`` / ``session.update``.
        config: The session configuration.
        client_capabilities: The client's capability declaration, later
            ``client.capabilities`` merged over it (:mod:`uamp_proto.capabilities`).
        history: The conversation so far (stateless ``messages`` replace it).
        response: The tracker of the current response, or ``None``.
        phase: The :class:`ResponseState` of the response slot (read-only).
        payment: The session's :class:`~uamp_proto.payment.PaymentNegotiation`.
        send_window / receive_window: Delta windows, when negotiated.
    """

    def __init__(
        self,
        session_id: str,
        create: ev.SessionCreate | None,
        state: SessionState = SessionState.CREATING,
    ) -> None:
        self.id = session_id
        self.state = state
        self.agent = create.agent if create else None
        self.chat = create.chat if create else None
        self.token = create.token if create else None
        self.payment_token = create.payment_token if create else None
        self.uamp_version = create.uamp_version if create else None
        self.config: ty.SessionConfig | None = create.session if create else None
        self.client_capabilities = create.client_capabilities if create else None
        #: ``input.text.context`` of the input gathered for the next response
        #: (later keys win), handed to its tracker on ``response.create``.
        self.pending_context: dict[str, Any] | None = None
        self.history: list[ty.Message] = []
        #: About the JSON size of :attr:`history` as last weighed, the list
        #: weighed and each of its messages' weight (:meth:`bound_history`).
        self.history_bytes = 0
        self.weighed: list[ty.Message] | None = None
        self.weights: list[int] = []
        self.pending_input: list[tuple[str, ty.ContentItem]] = []
        #: About the bytes of :attr:`pending_input` (:func:`_input_size`).
        self.pending_bytes = 0
        self.stateless_history: list[ty.Message] | None = None
        self.response: ResponseTracker | None = None
        self.payment = PaymentNegotiation(self.payment_token)
        self.send_window: flow.SendWindow | None = None
        self.receive_window: flow.ReceiveWindow | None = None
        self.requested_window: int | None = None
        self.finished_responses: deque[str] = deque(maxlen=32)
        #: The chats the session takes part in (section 7.1): its
        #: ``session.create.chat`` and those named since by ``input.text``
        #: ``context.chat_id`` or ``input.typing`` ``chat_id``.
        self.chats: set[str] = {self.chat} if self.chat else set()
        #: The session's voice call (sections 5.16, 7.3).
        self.call = Call()
        #: ``response.create`` events held while the slot was busy
        #: (:attr:`ConnectionConfig.on_busy`), oldest first.
        self.held: list[HeldResponse] = []
        #: The response whose turn is dropped from :attr:`history` when it
        #: ends (rolled back, docs/busy.md), or ``None``.
        self.drop_response: str | None = None

    def chat_of(self, event: ev.Event) -> str | None:
        """The chat an ``input.text`` / ``input.typing`` / ``message.read`` belongs to, or ``None``.

        An explicit ``context.chat_id`` (``chat_id`` on the others) wins;
        otherwise a chat-scoped session's own chat.
        """
        named: Any = None
        if type(event) is ev.InputText:
            context = event.context
            named = context.get("chat_id") if context else None
        else:
            named = getattr(event, "chat_id", None)
        if isinstance(named, str) and named:
            return named
        return self.chat

    def __repr__(self) -> str:
        return f"<SessionContext {self.id} {self.state.value} {self.phase.value}>"

    @property
    def phase(self) -> ResponseState:
        """The response slot's state: the current response's, or ``IDLE``."""
        tracker = self.response
        return ResponseState.IDLE if tracker is None else tracker.state

    def conversation(self) -> list[ty.Message]:
        """History, the current response's input, and what it produced so far."""
        msgs = list(self.history)
        tracker = self.response
        if tracker is not None:
            msgs.extend(tracker.input_messages)
            if tracker._slots:  # else it produced nothing yet (a response starting)
                msgs.extend(tracker.messages())
        return msgs

    def history_weights(self) -> list[int] | None:
        """Each message of :attr:`history` 's weight, when weighed since it last changed.

        ``None`` when the history is not the list last weighed: the caller
        weighs it itself (:func:`uamp_proto.history.message_weight`).
        """
        return self.weights if self.weighed is self.history else None

    def bound_history(self, config: ConnectionConfig) -> None:
        """Keep the conversation within ``config`` 's bounds (a turn just joined it).

        Each message is weighed once (:func:`uamp_proto.history.message_weight`,
        kept beside it); a history replaced meanwhile (stateless
        ``messages``, a resume) is weighed anew. Past a bound the oldest
        messages go, down to three quarters of both bounds and on to a user
        message (what :func:`uamp_proto.history.trim` keeps), into a new
        list: what reads the list incrementally (an event log's record) sees
        the replacement.
        """
        history = self.history
        weights = self.weights
        if self.weighed is not history:
            weights = self.weights = [_message_weight(m) for m in history]
            self.history_bytes = sum(weights)
            self.weighed = history
        elif len(weights) < len(history):
            for message in history[len(weights) :]:
                size = _message_weight(message)
                weights.append(size)
                self.history_bytes += size
        count = len(history)
        if self.history_bytes <= config.max_history_bytes and count <= config.max_history_messages:
            if config.on_history is not None:
                config.on_history(self.id, self.history_bytes)
            return
        most_bytes = config.max_history_bytes * 3 // 4
        most_messages = config.max_history_messages * 3 // 4
        total, first = self.history_bytes, 0
        while first < count and (total > most_bytes or count - first > most_messages):
            total -= weights[first]
            first += 1
        while first < count and history[first].role != "user":
            total -= weights[first]
            first += 1
        self.history = self.weighed = history[first:]
        self.weights = weights[first:]
        self.history_bytes = total
        if config.on_history is not None:
            config.on_history(self.id, total)

    def forget_history(self) -> None:
        """Empty the kept conversation, into a new list (see :meth:`bound_history`)."""
        self.history = self.weighed = []
        self.weights = []
        self.history_bytes = 0

    def drop_last_input(self) -> None:
        """Take back the newest gathered input (it went elsewhere: a room's voice call)."""
        if self.pending_input:
            _, item = self.pending_input.pop()
            self.pending_bytes -= input_size(item)

    def _take_input(self) -> list[ty.Message]:
        """Assemble the accumulated input events into messages (section 8.5.1)."""
        pending = self.pending_input
        if len(pending) == 1 and self.stateless_history is None:
            # The usual turn: one input.text. The same message the loop
            # below would build, without it.
            only_role, only = pending[0]
            if type(only) is ty.TextContent:
                pending.clear()
                self.pending_bytes = 0
                return [_make_message(only_role, only.text)]
        messages: list[ty.Message] = []
        role: str | None = None
        items: list[ty.ContentItem] = []

        def flush() -> None:
            if role is None or not items:
                return
            text = "".join(i.text for i in items if isinstance(i, ty.TextContent))
            only_text = all(isinstance(i, ty.TextContent) for i in items)
            messages.append(
                ty.Message(
                    role=role,
                    content=text if (text or only_text) else None,
                    content_items=None if only_text and len(items) == 1 else list(items),
                )
            )

        for item_role, item in self.pending_input:
            if item_role != role:
                flush()
                role, items = item_role, []
            items.append(item)
        flush()
        self.pending_input.clear()
        self.pending_bytes = 0
        if self.stateless_history is not None:
            base = self.stateless_history
            self.stateless_history = None
            # ``messages`` is the full history; skip the new text when the
            # history already ends with it (the spec's own example does).
            if (
                messages
                and base
                and base[-1].role == messages[0].role
                and (base[-1].text == messages[0].text and messages[0].content_items is None)
            ):
                messages = messages[1:]
            self.history = list(base)
        return messages

    def _finish_response(self, keep_output: bool) -> None:
        tracker = self.response
        if tracker is not None:
            if tracker.response_id == self.drop_response:
                self.drop_response = None  # rolled back: its turn leaves no trace
            else:
                self.history.extend(tracker.input_messages)
                if keep_output:
                    self.history.extend(tracker.messages())
            self.finished_responses.append(tracker.response_id)
        self.response = None


@attrs.define(kw_only=True)
class HeldResponse:
    """A ``response.create`` held while its session's response slot was busy.

    Attributes:
        token: What :attr:`ConnectionConfig.on_busy` returned for it.
        create: The event.
        response_id: The id its response gets.
        messages: The input it took when it arrived.
        context: Its ``input.text.context``.
    """

    token: object
    create: ev.ResponseCreate
    response_id: str
    messages: list[ty.Message]
    context: dict[str, Any] | None = None


def input_size(item: ty.ContentItem) -> int:
    """About the bytes one gathered input holds: its text, or its media as sent."""
    if type(item) is ty.TextContent:
        return len(item.text)
    return history.weight(item)
