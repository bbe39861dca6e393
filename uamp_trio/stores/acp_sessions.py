"""The ACP session store: the sessions an ACP server keeps for ``session/load``.

:mod:`uamp_proto.adapters.acp` maps ACP onto UAMP; remembering each session's
conversation between prompts (and between connections, for
``session/load``) is the server's job, done here. The composition root
creates one :class:`AcpSessionStore` and hands it to the ACP transport.

Ownership (docs/security.md): a session records the principal that created
it, and :meth:`AcpSessionStore.get` answers another principal's id -- or
another agent's -- exactly as an id that never existed.

Bounds (:class:`AcpLimits`, docs/security.md): a principal holds at most
``max_sessions`` sessions (one more ``session/new`` is refused with
:data:`TOO_MANY_SESSIONS`, for that principal only); what a session keeps of
its client -- ``cwd`` and ``mcpServers`` -- is at most ``max_session_bytes``
(JSON-RPC ``-32602`` naming the field); and a session nobody used for
``idle_timeout`` seconds, with no prompt running, is forgotten. Sessions are
kept in the order they were last used, so expiring is a look at the oldest
few, done on every store call and by the transport's sweep. What the
sessions keep of their conversations is bounded twice: each session's own
history (:func:`uamp_proto.adapters.acp.trim_history`), and all of one
principal's together (``max_history_bytes_per_principal``): past it, the
principal's least recently prompted sessions start afresh
(:class:`uamp_proto.history.HistoryBudget`).
"""

from __future__ import annotations

import time
import uuid
from collections import Counter, OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs
import orjson

from uamp_proto import history
from uamp_proto import jsonrpc as rpc
from uamp_proto import types as ty
from uamp_proto.adapters import acp
from uamp_proto.principal import ANONYMOUS, Principal

if TYPE_CHECKING:
    from ..hosting.turns import ResponseRun

__all__ = ["TOO_MANY_SESSIONS", "AcpLimits", "AcpSession", "AcpSessionStore"]

#: The JSON-RPC error of a principal at its session limit (a server-defined
#: code, the same as A2A's task quota; 429 in its ``data``).
TOO_MANY_SESSIONS = -32029


@attrs.frozen(kw_only=True)
class AcpLimits:
    """What one principal may keep in an ACP server (``ServerConfig.acp_*``).

    Attributes:
        max_sessions: Sessions one principal may hold at once.
        max_session_bytes: Largest ``cwd`` plus ``mcpServers`` (as JSON) kept
            per session.
        idle_timeout: Seconds after its last use an idle session is forgotten.
        max_history_bytes_per_principal: Bytes all of one principal's
            sessions keep of their conversations (about their JSON size);
            past it, its least recently prompted sessions start afresh.
    """

    max_sessions: int = 100
    max_session_bytes: int = 64 * 1024
    idle_timeout: float = 3600.0
    max_history_bytes_per_principal: int = history.MAX_OWNER_HISTORY_BYTES

    def __attrs_post_init__(self) -> None:
        if (
            self.max_sessions < 1
            or self.max_session_bytes < 1
            or self.idle_timeout <= 0
            or self.max_history_bytes_per_principal < 1
        ):
            raise ValueError("ACP limits must be positive")


@attrs.define(kw_only=True)
class AcpSession:
    """One ACP session: its agent, working directory and conversation.

    Attributes:
        id: The ``sessionId``.
        agent: The agent's name.
        owner: The principal that created it; nobody else can reach it.
        cwd: The client's working directory.
        mcp_servers: The MCP servers the client offered (``mcpServers``).
        messages: The conversation so far (UAMP messages).
        payment_token: The last token that paid for a prompt.
        turn: The running prompt's turn, if any.
        last_used: When a request last named it (the store's clock).
    """

    id: str
    agent: str
    cwd: str
    owner: Principal = ANONYMOUS
    mcp_servers: list[dict[str, Any]] = attrs.field(factory=list)
    messages: list[ty.Message] = attrs.field(factory=list)
    payment_token: str | None = None
    turn: ResponseRun | None = None
    busy: bool = False
    last_used: float = 0.0


def too_many_sessions(limit: int) -> rpc.JSONRPCError:
    """The refusal of a principal that holds ``limit`` sessions already."""
    return rpc.JSONRPCError(
        TOO_MANY_SESSIONS,
        f"Too many ACP sessions of yours (at most {limit}); unused ones expire.",
        {"status": 429, "code": "too_many_sessions", "limit": limit},
    )


def _check_size(cwd: str, mcp_servers: list[dict[str, Any]], limit: int) -> None:
    """Refuse a session whose ``cwd`` and ``mcpServers`` together pass ``limit`` bytes."""
    size = len(cwd.encode("utf-8", "surrogatepass"))
    if size > limit:
        param = "cwd"
    else:
        size += len(orjson.dumps(mcp_servers))
        if size <= limit:
            return
        param = "mcpServers"
    raise rpc.JSONRPCError(
        rpc.INVALID_PARAMS,
        f"params.{param} is too large: a session keeps at most {limit} bytes of cwd "
        "and mcpServers.",
        {"param": f"params.{param}", "limit": limit},
    )


class AcpSessionStore:
    """Sessions kept in memory, bounded per principal (``session/load``).

    Args:
        limits: The bounds (changeable later: the server's configuration is
            known once it serves).
        clock: Seconds, monotonic (injectable for tests).
    """

    def __init__(
        self, limits: AcpLimits | None = None, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limits = limits or AcpLimits()
        self._clock = clock
        #: Every session, the least recently used first.
        self.sessions: OrderedDict[str, AcpSession] = OrderedDict()
        self._held: Counter[tuple[str, str]] = Counter()
        self._history = history.HistoryBudget(self.limits.max_history_bytes_per_principal)

    def held_by(self, owner: Principal) -> int:
        """How many sessions ``owner`` holds now."""
        return self._held[owner.key]

    def create(
        self,
        agent: str,
        cwd: str,
        *,
        owner: Principal,
        mcp_servers: list[dict[str, Any]] | None = None,
    ) -> AcpSession:
        """A new empty session of ``owner``.

        Raises:
            JSONRPCError: ``-32602`` for a ``cwd``/``mcpServers`` too large;
                :data:`TOO_MANY_SESSIONS` for an owner at its limit.
        """
        servers = mcp_servers or []
        limits = self.limits
        _check_size(cwd, servers, limits.max_session_bytes)
        self.expire()
        if self._held[owner.key] >= limits.max_sessions:
            raise too_many_sessions(limits.max_sessions)
        session = AcpSession(
            id=f"sess_{uuid.uuid4().hex}",
            agent=agent,
            cwd=cwd,
            owner=owner,
            mcp_servers=servers,
            last_used=self._clock(),
        )
        self.sessions[session.id] = session
        self._held[owner.key] += 1
        return session

    def get(self, agent: str, session_id: str, *, owner: Principal) -> AcpSession:
        """The session ``session_id`` of ``agent``, if ``owner`` created it (marked used).

        Raises:
            JSONRPCError: ``-32002`` (resource not found), the same for an
                unknown id, an expired one, another agent's and another
                principal's session.
        """
        self.expire()
        session = self.sessions.get(session_id)
        if session is None or session.agent != agent or session.owner.key != owner.key:
            raise acp.unknown_session(session_id)
        self.touch(session)
        return session

    def reopen(self, session: AcpSession, cwd: str, mcp_servers: list[dict[str, Any]]) -> None:
        """``session/load``: the client's ``cwd`` and ``mcpServers`` now, within the bounds.

        Raises:
            JSONRPCError: ``-32602`` for a ``cwd``/``mcpServers`` too large
                (the session keeps what it had).
        """
        _check_size(cwd, mcp_servers, self.limits.max_session_bytes)
        session.cwd = cwd
        session.mcp_servers = mcp_servers

    def trim_history(self, session: AcpSession) -> None:
        """Bound what ``session`` keeps after a prompt: its own bounds, then its owner's.

        Past the owner's budget, the owner's least recently prompted other
        sessions lose their history (their next prompt starts afresh).
        """
        size = acp.trim_history(session.messages)
        budget = self._history
        budget.max_bytes = self.limits.max_history_bytes_per_principal
        for emptied in budget.kept(session.owner.key, session.id, size):
            other = self.sessions.get(str(emptied))
            if other is not None:
                other.messages = []

    def history_bytes(self, owner: Principal) -> int:
        """What ``owner`` 's sessions keep of their conversations now (about JSON bytes)."""
        return self._history.total(owner.key)

    def touch(self, session: AcpSession) -> None:
        """Mark ``session`` used now (it expires ``idle_timeout`` from now)."""
        session.last_used = self._clock()
        if session.id in self.sessions:
            self.sessions.move_to_end(session.id)

    def expire(self) -> int:
        """Forget the sessions idle for ``idle_timeout``; how many were."""
        deadline = self._clock() - self.limits.idle_timeout
        gone = 0
        for _ in range(len(self.sessions)):
            session = next(iter(self.sessions.values()))
            if session.last_used > deadline:
                break
            if session.busy:
                self.touch(session)  # a prompt is running: idle only from its end
                continue
            del self.sessions[session.id]
            self._history.forget(session.owner.key, session.id)
            self._held[session.owner.key] -= 1
            if not self._held[session.owner.key]:
                del self._held[session.owner.key]
            gone += 1
        return gone
