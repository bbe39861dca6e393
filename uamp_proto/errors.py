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

from typing import Any

__all__ = [
    "FlowControlError",
    "LocalProtocolError",
    "ProtocolError",
    "RemoteProtocolError",
    "UampError",
]


class UampError(Exception):
    """The root of every exception uamp defines, in all three packages.

    ``except UampError`` catches anything uamp raises on purpose; a bare
    ``Exception`` escaping uamp is a bug.
    """


class ProtocolError(UampError):
    """Base of the core's protocol errors.

    Attributes:
        code: The UAMP error code to report (``"invalid_event"``,
            ``"unknown_session"``, ``"4.09"`` ...).
        message: A sentence naming the problem.
        session_id: The session the error belongs to, or ``None`` when it
            concerns the whole connection.
        event_id: The ``event_id`` of the offending event, when known.
        reply: The error event a server answers the violation with (set
            when the client broke the rule, on either side: a client's
            refused ``send`` carries what the server would have said), or
            ``None``.
    """

    def __init__(
        self,
        message: str,
        *,
        code: str = "protocol_error",
        session_id: str | None = None,
        event_id: str | None = None,
        reply: Any = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.session_id = session_id
        self.event_id = event_id
        self.reply = reply


class LocalProtocolError(ProtocolError):
    """The local side broke a protocol rule; nothing was sent."""


class RemoteProtocolError(ProtocolError):
    """The peer broke a protocol rule; ``reply`` is the error event owed."""


class FlowControlError(LocalProtocolError):
    """Sending a delta would exceed the session's delta window (spec 003, 5)."""
