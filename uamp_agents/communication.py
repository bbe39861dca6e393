"""Communication with agents: :func:`ask` and :func:`query` (UAP section 9).

* :func:`ask` runs an agent on a thread's history and appends the turn's
  messages to that thread -- multi-turn conversation in the caller's flow.
* :func:`query` runs an agent on a new, isolated thread and returns a
  :class:`QueryResult` whose :meth:`~QueryResult.continue_` carries on that
  thread alone, leaving every other conversation untouched. Given a
  ``session``, the query thread is kept in ``session.query_threads`` (saved
  with the session as ``queryThreads``), so it can be continued after the
  session is loaded again with :func:`resume_query`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from .serialization import now_iso
from .thread import Thread, ThreadTree

if TYPE_CHECKING:
    from .agent import Agent, AgentInput
    from .session import Session
    from .turn import Turn

__all__ = ["QueryResult", "ask", "query", "resume_query"]


async def ask(agent: Agent, input: AgentInput, thread: Thread | ThreadTree | None = None) -> Turn:
    """Run ``agent`` on ``thread``'s history and append the turn to it (9.1).

    Args:
        agent: The agent to run.
        input: The user input (text, a message, or content items).
        thread: The conversation: a :class:`~uamp_agents.thread.Thread`, or a
            :class:`~uamp_agents.thread.ThreadTree` (its current node's thread
            receives the turn). A new thread is used when omitted.

    Returns:
        The agent's turn, unchanged.
    """
    if thread is None:
        thread = Thread()
    turn = await agent.run(thread.history(), input)
    target = thread.current.thread if isinstance(thread, ThreadTree) else thread
    target.append(turn)
    return turn


@attrs.frozen(kw_only=True)
class QueryResult:
    """The result of :func:`query` or of continuing one (UAP section 9.2).

    Attributes:
        turn: The turn of this exchange.
        thread: The query thread, holding every exchange so far.
        agent: The agent the query runs.
        session: The session the thread is kept in, if any.
    """

    turn: Turn
    thread: Thread
    agent: Agent = attrs.field(repr=False)
    session: Session | None = attrs.field(default=None, repr=False)

    @property
    def thread_id(self) -> str:
        """The query thread's id."""
        return self.thread.id

    async def continue_(self, input: AgentInput) -> QueryResult:
        """Ask a follow-up on the query thread (``continue`` in the spec).

        The agent sees the query thread's history; the new turn is appended
        to it. Other conversations are not affected.
        """
        return await _exchange(self.agent, self.thread, input, self.session)


async def _exchange(
    agent: Agent, thread: Thread, input: AgentInput, session: Session | None
) -> QueryResult:
    turn = await agent.run(thread.history(), input)
    thread.append(turn)
    if session is not None:
        session.query_threads[thread.id] = thread
        session.updated_at = now_iso()
        await session.save()
    return QueryResult(turn=turn, thread=thread, agent=agent, session=session)


async def query(agent: Agent, input: AgentInput, *, session: Session | None = None) -> QueryResult:
    """Run ``agent`` on a new, isolated thread (UAP section 9.2).

    Args:
        agent: The agent to run.
        input: The user input.
        session: When given, the query thread is kept in
            ``session.query_threads`` and the session is saved after each
            exchange. The session's own conversation is not touched.

    Returns:
        The result, with :meth:`QueryResult.continue_` to follow up.
    """
    return await _exchange(agent, Thread(), input, session)


async def resume_query(
    agent: Agent,
    thread: Thread | str,
    input: AgentInput,
    *,
    session: Session | None = None,
) -> QueryResult:
    """Continue a query thread that has no :class:`QueryResult` at hand.

    Args:
        agent: The agent to run.
        thread: The query thread, or its id in ``session.query_threads``
            (for a session loaded from storage).
        input: The follow-up input.
        session: The session keeping the thread, if any.

    Raises:
        LookupError: ``thread`` is an id and the session has no such query.
        ValueError: ``thread`` is an id and no session was given.
    """
    resolved: Any = thread
    if isinstance(thread, str):
        if session is None:
            raise ValueError("a query thread id needs the session that keeps it")
        resolved = session.query_threads.get(thread)
        if resolved is None:
            raise LookupError(f"session {session.id} has no query thread {thread!r}")
    return await _exchange(agent, resolved, input, session)
