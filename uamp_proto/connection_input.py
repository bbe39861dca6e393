"""What a session's input does: the next response's content, voice calls, chats.

Theory of operation
-------------------
Between two responses a session gathers what the client sends for the next
one (UAMP section 8.5.1): each ``input.text``, ``input.image``,
``input.audio``, ``input.video`` or ``input.file`` becomes a content item of
one pending user message (:meth:`InputPart._input`), which the next
``response.create`` takes. Media get a ``content_id``
(:func:`~uamp_proto.content_ids.content_id_of`); what is pending is weighed,
and an input that would take it past
:attr:`~uamp_proto.connection_config.ConnectionConfig.max_pending_input_bytes`
is refused. An ``input.text`` also carries what the turn is to know besides
the text: a conversation in ``messages`` (section 5.6: it replaces the kept
one), a ``context`` (merged into the next response's), a ``payment_token``.

Two kinds of input are not for the session's next response:

* A chat message (section 7.1): an ``input.text`` of a chat (its
  ``context.chat_id``, else a chat-scoped session's own chat) goes to the
  room, not to the next response. A session joins a chat by taking part
  (:meth:`InputPart._join_chat`: a message, ``input.typing``,
  ``message.read``), in at most :data:`MAX_CHATS_PER_SESSION` of them.
* A voice call (section 8.1): ``voice.*`` events move the session's call
  (:class:`~uamp_proto.voice.CallState`, :meth:`InputPart._voice`, timed by
  the configured clock when there is one), and audio in either direction is
  checked against it (:meth:`InputPart._check_audio`).

Each raises :class:`~uamp_proto.errors.LocalProtocolError` for a broken rule
before changing anything; the general path says whose fault it was.
:class:`InputPart` is that side of :class:`~uamp_proto.connection.Connection`,
which subclasses it and sets every attribute it declares.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from . import events as ev
from . import types as ty
from ._state import refuse
from .content_ids import content_id_of
from .errors import ProtocolError
from .session_context import SessionContext, input_size

if TYPE_CHECKING:
    from .connection_config import ConnectionConfig
    from .ids import IdSource

__all__ = ["MAX_CHATS_PER_SESSION", "InputPart"]

#: Most chats one session may take part in (section 7.1; memory stays bounded).
MAX_CHATS_PER_SESSION: Final = 16


class InputPart:
    """A connection's input side (module docstring): what the events a session
    receives between responses add to its next response, its call and its chats."""

    if TYPE_CHECKING:
        config: ConnectionConfig
        _ids: IdSource

        @staticmethod
        def _offer_token(session: SessionContext, token: str) -> None: ...

    def _check_audio(self, session: SessionContext) -> None:
        try:
            session.call.check_audio()
        except ProtocolError as exc:
            raise refuse(exc.code, exc.message) from None

    def _voice(self, session: SessionContext, event: ev.Event) -> None:
        clock = self.config.clock
        try:
            session.call.apply(
                event.type,
                clock() if clock is not None else None,
                call_id=getattr(event, "call_id", None),
                reason=getattr(event, "reason", None),
            )
        except ProtocolError as exc:
            raise refuse(exc.code, exc.message, exc.field) from None

    @staticmethod
    def _join_chat(session: SessionContext, chat: str) -> None:
        if chat not in session.chats:
            if len(session.chats) >= MAX_CHATS_PER_SESSION:
                raise refuse(
                    "too_many_chats",
                    f"a session takes part in at most {MAX_CHATS_PER_SESSION} chats",
                )
            session.chats.add(chat)

    def _input(self, session: SessionContext, event: ev.Event) -> None:
        item: ty.ContentItem
        role = "user"
        if type(event) is ev.InputText:
            if session.chats or event.context:
                chat = session.chat_of(event)
                if chat is not None:
                    # A chat message (section 7.1): the room has it, not the
                    # session's next response.
                    self._join_chat(session, chat)
                    if event.payment_token is not None:
                        self._offer_token(session, event.payment_token)
                    return
            item = ty.TextContent(text=event.text)
            role = event.role or "user"
            if event.messages is not None:
                session.stateless_history = list(event.messages)
            if event.context is not None:
                if session.pending_context is None:
                    session.pending_context = {}
                session.pending_context.update(event.context)
            if event.payment_token is not None:
                self._offer_token(session, event.payment_token)
        elif type(event) is ev.InputImage:
            item = ty.ImageContent(
                image=event.image,
                format=event.format,
                detail=event.detail,
                content_id=content_id_of(event.image, event.content_id, self._ids),
            )
        elif type(event) is ev.InputAudio:
            item = ty.AudioContent(
                audio=event.audio,
                format=event.format,
                content_id=content_id_of(event.audio, event.content_id, self._ids),
            )
        elif type(event) is ev.InputVideo:
            item = ty.VideoContent(
                video=event.video,
                format=event.format,
                content_id=content_id_of(event.video, event.content_id, self._ids),
            )
        else:
            assert isinstance(event, ev.InputFile)
            item = ty.FileContent(
                file=event.file,
                filename=event.filename,
                mime_type=event.mime_type,
                content_id=content_id_of(event.file, event.content_id, self._ids),
            )
        size = input_size(item)
        limit = self.config.max_pending_input_bytes
        if session.pending_bytes + size > limit:
            raise refuse(
                "invalid_request",
                f"the input gathered for the next response would pass {limit} bytes; "
                "send response.create (or less input) first",
                "text" if type(item) is ty.TextContent else None,
            )
        session.pending_input.append((role, item))
        session.pending_bytes += size
