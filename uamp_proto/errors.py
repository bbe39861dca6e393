"""The exceptions of the sans-IO core, in the manner of h11, and uamp's one root.

Every exception class of ``uamp_proto``, ``uamp_trio`` and ``uamp_agents``
derives from :class:`UampError`.

A :class:`LocalProtocolError` means *our* side tried something the protocol
forbids (raised from ``send()`` and constructors); a
:class:`RemoteProtocolError` means the *peer* did (raised only on the receive
path). Both carry the UAMP error the peer should be told about, so a binding
can answer without inventing codes of its own.
"""

from __future__ import annotations

from typing import Any, Final

import attrs

__all__ = [
    "OUTPUT_TOO_LARGE",
    "FlowControlError",
    "LocalProtocolError",
    "OutputTooLarge",
    "ProtocolError",
    "RemoteProtocolError",
    "UampError",
]


class UampError(Exception):
    """The root of every exception uamp defines, in all three packages.

    ``except UampError`` catches anything uamp raises on purpose; a bare
    ``Exception`` escaping uamp is a bug.

    An error that only carries data is declared as an attrs exception class
    (``@attrs.define(auto_exc=True)``, ``message`` first, the rest
    keyword-only) instead of an ``__init__`` that stores each argument. attrs
    puts every field in ``args``; this root keeps ``str(exc)`` the message, as
    for a hand-written error, and pickles such an error by its fields (the
    ``args`` tuple cannot be replayed through keyword-only parameters).
    Errors are compared and hashed by identity, like any exception.
    """

    def __str__(self) -> str:
        if attrs.has(type(self)):
            message = getattr(self, "message", None)
            if isinstance(message, str):
                return message
        return super().__str__()

    def __reduce__(self) -> str | tuple[Any, ...]:
        cls = type(self)
        if not attrs.has(cls):
            return super().__reduce__()
        fields = {f.name: getattr(self, f.name) for f in attrs.fields(cls) if f.init}
        return _rebuild, (cls, fields)


def _rebuild(cls: type[UampError], fields: dict[str, Any]) -> UampError:
    """Unpickle an attrs-declared error from its fields."""
    return cls(**fields)


@attrs.define(auto_exc=True)
class ProtocolError(UampError):
    """Base of the core's protocol errors.

    Attributes:
        code: The UAMP error code to report (``"invalid_event"``,
            ``"unknown_session"``, ``"4.09"`` ...).
        message: A sentence naming the problem.
        session_id: The session the error belongs to, or ``None`` when it
            concerns the whole connection.
        event_id: The ``event_id`` of the offending event, when known.
        field: The dotted path of the offending field (``session.modalities``,
            ``session_id``), when one field is to blame; a server's reply
            carries it as ``details.field``.
        reply: The error event a server answers the violation with (set
            when the client broke the rule, on either side: a client's
            refused ``send`` carries what the server would have said), or
            ``None``.
    """

    message: str
    code: str = attrs.field(default="protocol_error", kw_only=True)
    session_id: str | None = attrs.field(default=None, kw_only=True)
    event_id: str | None = attrs.field(default=None, kw_only=True)
    field: str | None = attrs.field(default=None, kw_only=True)
    reply: Any = attrs.field(default=None, kw_only=True)


class LocalProtocolError(ProtocolError):
    """The local side broke a protocol rule; nothing was sent."""


class RemoteProtocolError(ProtocolError):
    """The peer broke a protocol rule; ``reply`` is the error event owed."""


class FlowControlError(LocalProtocolError):
    """Sending a delta would exceed the session's delta window (spec 003, 5)."""


#: The UAMP error code of a response whose output passed its bound.
OUTPUT_TOO_LARGE: Final = "output_too_large"


@attrs.define(auto_exc=True)
class OutputTooLarge(UampError):
    """A response's output would pass its bound; the event that would pass it was not kept.

    Raised by :class:`~uamp_proto.response.ResponseTracker` (and so by a
    server's ``send`` of such an event). Not a :class:`ProtocolError`: a
    binding that drops a refused event and goes on (``except
    LocalProtocolError``) must not drop this one, since every later event of
    the response would be refused too. The response ends with
    ``response.error`` of :attr:`code` instead (a turn driver's
    :func:`~uamp_proto.outcome.conclude` makes it); a client's connection
    reports a server's response past its bound as a
    :class:`RemoteProtocolError` of the same code.

    Attributes:
        message: A sentence naming the bound.
        limit: The bound, in bytes (:attr:`ResponseTracker.max_output_bytes
            <uamp_proto.response.ResponseTracker.max_output_bytes>`).
        code: The UAMP error code, ``output_too_large``.
    """

    message: str
    limit: int = attrs.field(kw_only=True)
    code: str = attrs.field(default=OUTPUT_TOO_LARGE, kw_only=True)
