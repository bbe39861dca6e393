"""A resumable session's record (:class:`SessionRecord`) and its conversation as JSON.

Beside its event log each session has a record: its agent, configuration,
conversation, the response in flight and the process running it
(:meth:`uamp_stores.event_log.EventLog.save`). A record is queued twice per
response, so its conversation is not copied each time: :class:`HistoryJSON`
converts each message once, onto one JSON list the core only ever extends,
and hands each record a :class:`HistoryView` of that list's first messages
(what it was when the record was queued), which never changes.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterator, Sequence
from typing import Any, Final, overload

import attrs
import orjson

from uamp_proto import types as ty
from uamp_proto.codec import unstructure
from uamp_proto.history import message_weight, weight

__all__ = ["HistoryJSON", "HistoryView", "SessionRecord", "history_weight"]


@attrs.define(kw_only=True)
class SessionRecord:
    """What a resumable session needs besides its log.

    Attributes:
        agent: The agent's name.
        config: The session configuration (UAMP ``session`` object) as JSON.
        history: The conversation so far, as UAMP messages in JSON.
        running: The id of the response in flight, or ``None``.
        input: The input messages (JSON) of the response in flight: what a
            process carrying it on after a loss answers.
        node: Which process runs the session (``uamp serve``'s node id).
        updated: When the session was last active (the log's clock).
        ended: Whether the session ended (``session.end``): not resumable.
        request: The ``event_id`` of the ``response.create`` of the latest
            response (a resumed session names it: a client resends a turn
            that never began, docs/resume.md).
        dropped: Whether the store dropped the conversation (``history``)
            to keep within its bounds: a resume is refused
            (``beyond_retention``), as for a log whose events were dropped.
    """

    agent: str
    config: dict[str, Any] | None = None
    history: Sequence[dict[str, Any]] = attrs.field(factory=list)
    running: str | None = None
    input: list[dict[str, Any]] = attrs.field(factory=list)
    node: str = ""
    updated: float = 0.0
    ended: bool = False
    request: str | None = None
    dropped: bool = False

    def copy(self) -> SessionRecord:
        """A shallow copy: what ``record.copy()`` makes, without its generic machinery.

        A record is copied each time one is queued (twice per response).
        """
        return SessionRecord(
            agent=self.agent,
            config=self.config,
            history=self.history,
            running=self.running,
            input=self.input,
            node=self.node,
            updated=self.updated,
            ended=self.ended,
            request=self.request,
            dropped=self.dropped,
        )

    def encode(self) -> bytes:
        """The record as JSON."""
        return orjson.dumps(attrs.asdict(self), default=_history_list)

    @classmethod
    def decode(cls, data: bytes | str) -> SessionRecord:
        """A record from :meth:`encode` 's JSON (fields it does not know are
        left out: a record written by a newer version, in a rolling update)."""
        fields = orjson.loads(data)
        return cls(**{k: v for k, v in fields.items() if k in _RECORD_FIELDS})


def _history_list(value: object) -> list[dict[str, Any]]:
    """What orjson writes for a :class:`HistoryView` (it knows no other extra type here)."""
    if isinstance(value, HistoryView):
        return value.as_list()
    raise TypeError(f"{type(value).__name__} is not JSON")


#: The fields of a :class:`SessionRecord`.
_RECORD_FIELDS: Final = frozenset(a.name for a in attrs.fields(SessionRecord))


class HistoryView(Sequence[dict[str, Any]]):
    """The first ``length`` messages of a list that is only ever appended to.

    What :class:`HistoryJSON` hands a session record: the conversation as it
    was when the record was queued, without a copy of it. The list's later
    messages are past ``length``, so the view never changes. It reads like
    the list it stands for (``==`` a list of the same messages, iteration,
    indexing, slices as lists) and is written as a JSON array
    (:meth:`SessionRecord.encode`).
    """

    __slots__ = ("_items", "_length", "weight")

    def __init__(self, items: list[dict[str, Any]], length: int, weight: int | None = None) -> None:
        self._items = items
        self._length = length
        #: The messages' :func:`~uamp_proto.history.message_weight`, when known.
        self.weight = weight

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            return self._items[: self._length][index]
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError("history index out of range")
        return self._items[index]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return itertools.islice(self._items, self._length)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, HistoryView):
            other = other.as_list()
        return isinstance(other, list) and self.as_list() == other

    __hash__ = None  # type: ignore[assignment]  # compared by value, like a list

    def __repr__(self) -> str:
        return repr(self.as_list())

    def as_list(self) -> list[dict[str, Any]]:
        """The messages as a new list."""
        return self._items[: self._length]


class HistoryJSON:
    """A session's conversation as JSON for its record, each message converted once.

    The core only ever extends a session's history list (or replaces the
    list), so the messages converted last time are still the list's first
    ones: only the new ones are converted, and appended to one JSON list.
    Each record gets a :class:`HistoryView` of that list's first messages
    (no copy of the conversation per record, which made each response cost
    more the longer its session), so records queued earlier keep the
    conversation they were queued with. A replaced history starts a new
    JSON list; views of the old one keep it.

    A history over its bound is replaced by its own tail (the core drops
    the oldest messages into a new list, :meth:`SessionContext.bound_history
    <uamp_proto.session_context.SessionContext.bound_history>`): the new
    list's messages, the very objects, are the old one's last. Those keep
    their JSON (copied into the new list, not converted again), found by
    :func:`_kept_tail`; every other replacement is converted whole. A
    session at its bound is trimmed every few turns, and converting the
    kept three quarters each time cost three times the new messages.
    """

    __slots__ = ("json", "source", "view", "weight")

    def __init__(self) -> None:
        self.source: list[ty.Message] | None = None
        self.json: list[dict[str, Any]] = []
        #: The converted messages' :func:`~uamp_proto.history.message_weight`
        #: (what the live budget counts), weighed once each as converted.
        self.weight = 0
        #: The view handed out last.
        self.view: HistoryView | None = None

    def of(self, history: list[ty.Message], weights: Sequence[int] | None = None) -> HistoryView:
        """``history`` as JSON (a view that never changes).

        ``weights``: each message's weight when the caller has them (a core
        session's, aligned with ``history``); else the new messages are weighed.
        """
        if history is not self.source or len(history) < len(self.json):
            kept = _kept_tail(self.source, history) if history is not self.source else 0
            if kept:
                assert self.source is not None  # a tail is found only in a list
                # The JSON of the kept messages converted so far (it may
                # lag the old list by the turn that made it overlong).
                self.json = self.json[len(self.source) - kept :]
                if weights is not None and len(weights) == len(history):
                    self.weight = sum(weights[: len(self.json)])
                else:
                    self.weight = sum(map(message_weight, history[: len(self.json)]))
            else:
                self.json, self.weight = [], 0
            self.source = history
        json = self.json
        done = len(json)
        if done < len(history):
            new = history[done:]
            json.extend([unstructure(m) for m in new])
            if weights is not None and len(weights) == len(history):
                self.weight += sum(weights[done:])
            else:
                self.weight += sum(map(message_weight, new))
        elif self.view is not None and self.view._items is json:
            return self.view  # nothing new since the last record (a view never changes)
        view = self.view = HistoryView(json, len(json), self.weight)
        return view


#: How many messages a trimmed history may have gained before it is read
#: again; past that its tail is not looked for (it is converted whole).
_TAIL_LOOKS: Final = 8


def _kept_tail(source: list[ty.Message] | None, history: list[ty.Message]) -> int:
    """How many of ``source`` 's last messages begin ``history`` (its trimmed tail).

    The count of the old list's messages from the one ``history`` starts
    with to its end, when each is the same object at the same place in
    ``history``; 0 otherwise. ``history`` may have gained up to
    :data:`_TAIL_LOOKS` messages since the trim.
    """
    if source is None or not history:
        return 0
    first = history[0]
    for gained in range(min(_TAIL_LOOKS, len(history) - 1) + 1):
        kept = len(history) - gained
        if kept > len(source):
            continue
        if source[-kept] is first:
            same = all(map(operator.is_, history[:kept], source[-kept:]))
            return kept if same else 0
    return 0


def history_weight(history: Sequence[dict[str, Any]]) -> int:
    """About the bytes a record's conversation holds: a :class:`HistoryView` 's weight
    (counted as it was converted), else each message's :func:`~uamp_proto.history.weight`."""
    if isinstance(history, HistoryView) and history.weight is not None:
        return history.weight
    return sum(weight(m) for m in history)
