"""The server-side tool rounds of Chat Completions turns that also asked the client for a tool.

Chat Completions is stateless: the client's next request carries the
conversation as the client saw it. When one turn ran some of the agent's own
tools *and* asked the client to run one of its tools, the client saw only the
call addressed to it; the agent's calls and their results never reached it,
so the follow-up request would lose them and the agent would start over.
This store keeps those server-side rounds, keyed by the caller and the id of
each client call of the turn, until the follow-up request names the call
again (:func:`uamp_proto.adapters.completions.splice_server_rounds` puts them
back in place). It is bounded: the oldest entries go first.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from functools import partial

import attrs

from .adapters.completions import server_rounds, splice_server_rounds
from .outcome import ResponseOutcome
from .principal import Principal
from .responder import TurnRequest
from .types import Message

__all__ = ["DEFAULT_MAX_ROUNDS", "ToolRoundStore"]

#: Turns remembered at most (each with its client call ids) before the oldest go.
DEFAULT_MAX_ROUNDS = 4096


class ToolRoundStore:
    """Server-side tool rounds by (principal, client call id), oldest evicted first."""

    def __init__(self, max_rounds: int = DEFAULT_MAX_ROUNDS) -> None:
        if max_rounds < 1:
            raise ValueError(f"max_rounds must be at least 1, got {max_rounds}")
        self.max_rounds = max_rounds
        self._rounds: OrderedDict[tuple[str, str, str], tuple[Message, ...]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._rounds)

    def remember(
        self, principal: Principal, call_ids: Iterable[str], messages: Sequence[Message]
    ) -> None:
        """Keep ``messages`` (the turn's server-side rounds) under each client call id."""
        if not messages:
            return
        kept = tuple(messages)
        for call_id in call_ids:
            key = (principal.scheme, principal.id, call_id)
            self._rounds[key] = kept
            self._rounds.move_to_end(key)
        while len(self._rounds) > self.max_rounds:
            self._rounds.popitem(last=False)

    def keep(self, principal: Principal, outcome: ResponseOutcome) -> None:
        """Keep a turn's own tool rounds when it also asked the client for a tool."""
        calls = outcome.pending_tool_calls
        if calls:
            ids = [c.id for c in calls]
            self.remember(principal, ids, server_rounds(outcome.tracker.messages(), ids))

    def recall(self, principal: Principal, call_id: str) -> tuple[Message, ...] | None:
        """The rounds kept for ``call_id`` of ``principal`` (another caller's: ``None``)."""
        return self._rounds.get((principal.scheme, principal.id, call_id))

    def restore(self, principal: Principal, turn: TurnRequest) -> TurnRequest:
        """``turn`` with the server-side rounds of the client calls it names put back.

        The same object when there is nothing to put back.
        """
        if not self._rounds:
            return turn
        spliced = splice_server_rounds(turn.messages, partial(self.recall, principal))
        if len(spliced) == len(turn.messages):
            return turn
        return attrs.evolve(turn, messages=spliced)
