"""The ACP session store: the sessions an ACP server keeps for ``session/load``.

:mod:`uamp_proto.adapters.acp` maps ACP onto UAMP; remembering each session's
conversation between prompts (and between connections, for
``session/load``) is the server's job, done here. The composition root
creates one :class:`AcpSessionStore` and hands it to the ACP transport.

Ownership (docs/security.md): a session records the principal that created
it, and :meth:`AcpSessionStore.get` answers another principal's id -- or
another agent's -- exactly as an id that never existed.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import attrs

from uamp_proto import types as ty
from uamp_proto.adapters import acp
from uamp_proto.principal import ANONYMOUS, Principal

if TYPE_CHECKING:
    from ..hosting.turns import ResponseRun

__all__ = ["AcpSession", "AcpSessionStore"]


@attrs.define(kw_only=True)
class AcpSession:
    """One ACP session: its agent, working directory and conversation.

    Attributes:
        id: The ``sessionId``.
        agent: The agent's name.
        owner: The principal that created it; nobody else can reach it.
        cwd: The client's working directory.
        messages: The conversation so far (UAMP messages).
        payment_token: The last token that paid for a prompt.
        turn: The running prompt's turn, if any.
    """

    id: str
    agent: str
    cwd: str
    owner: Principal = ANONYMOUS
    messages: list[ty.Message] = attrs.field(factory=list)
    payment_token: str | None = None
    turn: ResponseRun | None = None
    busy: bool = False


class AcpSessionStore:
    """Sessions kept in memory for the life of the process (``session/load``)."""

    def __init__(self) -> None:
        self.sessions: dict[str, AcpSession] = {}

    def create(self, agent: str, cwd: str, *, owner: Principal) -> AcpSession:
        """A new empty session of ``owner``."""
        session = AcpSession(id=f"sess_{uuid.uuid4().hex}", agent=agent, cwd=cwd, owner=owner)
        self.sessions[session.id] = session
        return session

    def get(self, agent: str, session_id: str, *, owner: Principal) -> AcpSession:
        """The session ``session_id`` of ``agent``, if ``owner`` created it.

        Raises:
            JSONRPCError: ``-32002`` (resource not found), the same for an
                unknown id, another agent's and another principal's session.
        """
        session = self.sessions.get(session_id)
        if session is None or session.agent != agent or session.owner.key != owner.key:
            raise acp.unknown_session(session_id)
        return session
