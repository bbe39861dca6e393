"""MCP state: the ``Mcp-Session-Id`` sessions of Streamable HTTP, and named conversations.

Theory of operation
-------------------
:mod:`uamp_proto.adapters.mcp` maps MCP onto UAMP and keeps nothing; what
the MCP transport must remember between requests lives here:

* a **peer** (:class:`McpPeer`) is one MCP session over Streamable HTTP: the
  id the server gave in ``Mcp-Session-Id``, the principal that opened it,
  the negotiated protocol version, the calls running in it (so
  ``notifications/cancelled`` can reach them), and whether its ``GET``
  stream is open;
* a **conversation** (:class:`McpConversation`) is what a ``session`` name
  of the agent's tool continues: the messages so far. It is keyed by the
  caller's principal, the agent and the name, so the same name chosen by
  two principals names two conversations and nobody can reach another's.

Everything a client can make grow is bounded (docs/security.md): peers per
principal and in all (the least recently used idle peer is ended to make
room; with every peer busy the new one is refused), peers idle past
``peer_idle`` are ended when the store is next touched, conversations per
principal and in all (least recently used dropped), messages and bytes kept
per conversation (the oldest turns dropped), and bytes kept by all of one
principal's conversations (past ``max_history_bytes_per_principal``, its
least recently continued conversations start afresh:
:class:`uamp_proto.history.HistoryBudget`). Another principal's peer id, or
another agent's, is answered exactly as an id that never existed.
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs
import trio

from uamp_proto import history
from uamp_proto import types as ty
from uamp_proto.errors import UampError
from uamp_proto.principal import Principal

if TYPE_CHECKING:
    from ..hosting.turns import ResponseRunner

__all__ = ["McpConversation", "McpLimits", "McpPeer", "McpSessionStore", "TooManySessions"]


#: A conversation's key: the owner's ``(scheme, id)``, the agent, the name.
_ConversationKey = tuple[tuple[str, str], str, str]


class TooManySessions(UampError):
    """No room for another MCP session: every session of the caller is busy."""


@attrs.frozen(kw_only=True)
class McpLimits:
    """What the MCP transport keeps, at most.

    Attributes:
        max_peers_per_principal: MCP sessions one principal holds at once.
        max_peers: MCP sessions in all.
        peer_idle: Seconds an MCP session may go unused before it ends.
        max_conversations_per_principal: Named conversations one principal keeps.
        max_conversations: Named conversations in all.
        max_messages: Messages kept per conversation (older turns are dropped).
        max_history_bytes: Bytes kept per conversation, about their JSON size
            (:func:`uamp_proto.history.trim`; older turns are dropped).
        max_history_bytes_per_principal: Bytes all of one principal's
            conversations keep; past it, its least recently continued ones
            start afresh.
    """

    max_peers_per_principal: int = 32
    max_peers: int = 10_000
    peer_idle: float = 3600.0
    max_conversations_per_principal: int = 64
    max_conversations: int = 10_000
    max_messages: int = 200
    max_history_bytes: int = history.MAX_HISTORY_BYTES
    max_history_bytes_per_principal: int = history.MAX_OWNER_HISTORY_BYTES


@attrs.define(kw_only=True, eq=False)
class McpPeer:
    """One MCP session over Streamable HTTP (``Mcp-Session-Id``)."""

    id: str
    agent: str
    owner: Principal
    version: str
    last_used: float
    #: Running ``tools/call`` turns by JSON-RPC request id.
    calls: dict[Any, ResponseRunner] = attrs.field(factory=dict)
    #: Whether its ``GET`` stream is open (one at a time).
    streaming: bool = False
    #: Whether the client declared form elicitation (``initialize``): a
    #: run that asks a person asks it with ``elicitation/create``.
    elicits: bool = False
    #: The server's own requests waiting for the client's answer, by id.
    asked: dict[str, Any] = attrs.field(factory=dict)
    #: Set when the session ends (``DELETE``, eviction, expiry).
    ended: trio.Event = attrs.field(factory=trio.Event)

    @property
    def busy(self) -> bool:
        """Whether a call runs in it."""
        return bool(self.calls)

    def end(self) -> None:
        """End the session: cancel its calls and close its stream."""
        for call in list(self.calls.values()):
            call.cancel()
        self.ended.set()


@attrs.define(kw_only=True, eq=False)
class McpConversation:
    """The messages a ``session`` name of the agent's tool continues."""

    name: str
    #: Its key in the store: the owner's ``(scheme, id)``, the agent, the name.
    key: _ConversationKey = (("", ""), "", "")
    #: The UAMP session id its turns run under.
    id: str = attrs.field(factory=lambda: f"mcp_{uuid.uuid4().hex}")
    messages: list[ty.Message] = attrs.field(factory=list)
    #: Calls running or waiting in it (the busy policy): it is never dropped meanwhile.
    calls: int = 0

    @property
    def busy(self) -> bool:
        """Whether a call runs (or waits) in it."""
        return self.calls > 0


class McpSessionStore:
    """Peers and conversations of the MCP transport, bounded (see the module docstring).

    Args:
        limits: The bounds.
        clock: Seconds, for idleness (monotonic).
    """

    def __init__(
        self, limits: McpLimits | None = None, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limits = limits or McpLimits()
        self._clock = clock
        #: Peers by id, least recently used first.
        self.peers: OrderedDict[str, McpPeer] = OrderedDict()
        #: Conversations by ``(principal key, agent, name)``, least recently used first.
        self.conversations: OrderedDict[_ConversationKey, McpConversation] = OrderedDict()
        self._history = history.HistoryBudget(self.limits.max_history_bytes_per_principal)

    # --- peers ---------------------------------------------------------------------

    def _expire(self, now: float) -> None:
        idle = self.limits.peer_idle
        for peer in list(self.peers.values()):
            if now - peer.last_used < idle:
                break  # the rest were used more recently
            if not peer.busy:
                self.close(peer.id)

    def _evict_one(self, owner: Principal | None) -> bool:
        """End the least recently used idle peer (of ``owner``, or anyone's)."""
        for peer in self.peers.values():
            if not peer.busy and (owner is None or peer.owner.key == owner.key):
                self.close(peer.id)
                return True
        return False

    def open(self, agent: str, owner: Principal, version: str) -> McpPeer:
        """A new MCP session of ``owner`` with ``agent``.

        Raises:
            TooManySessions: The caller (or the server) is at its bound and
                every session there is running a call.
        """
        now = self._clock()
        self._expire(now)
        mine = sum(1 for p in self.peers.values() if p.owner.key == owner.key)
        if mine >= self.limits.max_peers_per_principal and not self._evict_one(owner):
            raise TooManySessions("too many MCP sessions are running calls for this principal")
        if len(self.peers) >= self.limits.max_peers and not self._evict_one(None):
            raise TooManySessions("too many MCP sessions are running calls")
        peer = McpPeer(
            id=uuid.uuid4().hex, agent=agent, owner=owner, version=version, last_used=now
        )
        self.peers[peer.id] = peer
        return peer

    def get(self, agent: str, peer_id: str, owner: Principal) -> McpPeer | None:
        """The peer ``peer_id`` of ``agent`` if ``owner`` opened it (and marks it used)."""
        now = self._clock()
        self._expire(now)
        peer = self.peers.get(peer_id)
        if peer is None or peer.agent != agent or peer.owner.key != owner.key:
            return None
        peer.last_used = now
        self.peers.move_to_end(peer_id)
        return peer

    def close(self, peer_id: str) -> None:
        """End and forget a peer (unknown ids are ignored)."""
        peer = self.peers.pop(peer_id, None)
        if peer is not None:
            peer.end()

    # --- conversations ------------------------------------------------------------------

    def conversation(self, owner: Principal, agent: str, name: str) -> McpConversation:
        """The conversation ``name`` of ``owner`` with ``agent`` (a new empty one if unknown)."""
        key = (owner.key, agent, name)
        found = self.conversations.get(key)
        if found is not None:
            self.conversations.move_to_end(key)
            return found
        limits = self.limits
        mine = [k for k in self.conversations if k[0] == owner.key]
        if len(mine) >= limits.max_conversations_per_principal:
            self._drop_conversation(lambda k: k[0] == owner.key)
        if len(self.conversations) >= limits.max_conversations:
            self._drop_conversation(lambda k: True)
        found = McpConversation(name=name, key=key)
        self.conversations[key] = found
        return found

    def _drop_conversation(self, match: Callable[[_ConversationKey], bool]) -> None:
        for key, conv in self.conversations.items():
            if match(key) and not conv.busy:
                del self.conversations[key]
                self._history.forget(key[0], key)
                return

    def remember(self, conversation: McpConversation, messages: list[ty.Message]) -> None:
        """Append a turn's messages to ``conversation``, within its bounds and its owner's.

        Past the owner's budget, the owner's least recently continued other
        conversations lose their messages (their next call starts afresh).
        """
        grown = [*conversation.messages, *messages]
        size = history.trim(
            grown,
            max_messages=self.limits.max_messages,
            max_bytes=self.limits.max_history_bytes,
        )
        conversation.messages = grown
        budget = self._history
        budget.max_bytes = self.limits.max_history_bytes_per_principal
        key = conversation.key
        for emptied in budget.kept(key[0], key, size):
            other = self.conversations.get(emptied)  # type: ignore[call-overload]
            if other is not None:
                other.messages = []

    def history_bytes(self, owner: Principal) -> int:
        """What ``owner`` 's conversations keep now (about JSON bytes)."""
        return self._history.total(owner.key)
