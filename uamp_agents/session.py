"""Sessions: an agent with a thread tree, checkpoints and persistence (UAP section 6).

Theory of operation
-------------------
A :class:`Session` runs its agent on the history of its thread tree's current
node and appends each turn's messages to that node. A run goes through the
agent's stream with a per-step callback (``on_step``), which the run awaits
at the end of every step, before the next one starts:

* the run's messages so far (``state.messages``) are put on the current
  thread and, with ``checkpoint_interval="step"``, a checkpoint is made and
  the session saved to its persistence adapter. A process killed in the
  middle of a run therefore loses at most the step in progress;
* when the run ends the thread gets exactly ``turn.messages`` (the authority:
  middleware may have changed them) and, unless the last step's checkpoint
  already shows this exact state, a final checkpoint is made.

If the run fails, the messages of its completed steps are taken off the
thread again (the conversation stays as it was before the run); the
checkpoints made during the run remain, so :meth:`Session.restore` can still
bring any completed step back.

A checkpoint holds the whole conversation of the current node (UAP 6.5 rule
3). :meth:`Session.restore` makes the thread tree show exactly that
conversation again: it checks out the checkpoint's node when that node's
history is unchanged, and otherwise branches from the deepest node whose
history is a prefix of the checkpoint's and puts the rest there, so nothing
made after the checkpoint is lost (the spec's "branches the thread tree").

Serialization (:meth:`Session.to_json`, :meth:`Session.from_json`) uses the
SessionJSON format of UAP section 13.1. Three keys are added, which other
implementations may ignore: ``step`` (the session's step counter),
``subAgentStates`` (the SessionJSON of every sub-agent conversation, as in
checkpoints) and ``queryThreads`` (the ThreadJSON of each query thread, UAP
section 9.2 rule 5).
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, Literal

from uamp_proto.principal import Principal
from uamp_proto.types import Message

from .checkpoint import (
    Checkpoint,
    CheckpointState,
    SessionData,
    owner_json,
    read_owner,
    validate_session_json,
)
from .errors import SessionBusyError
from .persistence import MemoryAdapter, PersistenceAdapter, SQLiteAdapter, owner_key
from .serialization import (
    UAP_VERSION,
    Reader,
    new_id,
    now_iso,
)
from .thread import Thread, ThreadNode, ThreadTree
from .turn import Turn

if TYPE_CHECKING:
    from .agent import Agent, AgentInput

__all__ = [
    "CHECKPOINT_INTERVALS",
    "Session",
    "SessionBusyError",
    "SessionData",
    "SessionStream",
    "session",
    "validate_session_json",
]

#: The values of ``checkpoint_interval`` (UAP section 6.1).
CHECKPOINT_INTERVALS: Final = frozenset({"step", "turn"})

CheckpointInterval = Literal["step", "turn"]

# --- sub-agent states ---------------------------------------------------------


def _copy_threads(threads: dict[str, Thread]) -> dict[str, Thread]:
    """The query threads as they are now (later exchanges do not reach the copy)."""
    return {tid: Thread(id=t.id, messages=list(t.messages)) for tid, t in threads.items()}


def _sub_agent_states(
    turn: Turn,
    *,
    parent_session_id: str,
    created_at: str,
    ids: dict[str, str] | None = None,
) -> dict[str, dict[str, Any]]:
    """SessionJSON of each sub-agent run of ``turn`` (UAP 6.5 rule 1, 8.4).

    ``ids`` keeps the sub-session id given to each child turn, so a step's
    checkpoint and the turn's name the same sub-agent state alike.
    """
    out: dict[str, dict[str, Any]] = {}
    for execution in turn.tool_executions:
        for child in execution.child_turns:
            tree = ThreadTree()
            tree.root.thread.append(child.messages)
            sub_id = new_id() if ids is None else ids.setdefault(child.id, new_id())
            out[sub_id] = {
                "version": UAP_VERSION,
                "id": sub_id,
                "agentId": child.agent_id or "",
                "createdAt": created_at,
                "updatedAt": created_at,
                "threadTree": tree.to_json(),
                "checkpoints": [],
                "metadata": {
                    "parentSessionId": parent_session_id,
                    "parentAgentId": child.parent_agent_id or turn.agent_id,
                    "parentTurnId": child.parent_turn_id or turn.id,
                    "turnId": child.id,
                    "toolCallId": execution.call.id,
                    "toolName": execution.call.name,
                    "step": execution.step,
                },
                "step": child.steps,
                "subAgentStates": _sub_agent_states(
                    child, parent_session_id=sub_id, created_at=created_at
                ),
            }
    return out


def _copy(value: dict[str, Any]) -> dict[str, Any]:
    """A deep copy, so later changes to the run's state leave a checkpoint as made."""
    try:
        return copy.deepcopy(value)
    except Exception:  # an uncopyable value is kept by reference
        return dict(value)


def _plan_json(plan: Any) -> list[dict[str, Any]] | None:
    if plan is None:
        return None
    out: list[dict[str, Any]] = []
    for item in plan:
        if isinstance(item, dict):
            out.append(dict(item))
            continue
        entry: dict[str, Any] = {
            "id": str(getattr(item, "id", "")),
            "description": str(getattr(item, "description", "")),
            "dependsOn": list(getattr(item, "depends_on", []) or []),
            "status": str(getattr(item, "status", "pending")),
        }
        tool = getattr(item, "tool", None)
        if tool is not None:
            entry["tool"] = tool
        out.append(entry)
    return out


# --- the session --------------------------------------------------------------


class Session:
    """An agent with a thread tree, checkpoints and persistence (UAP 6.1).

    Create one with :func:`session` or :meth:`from_json`.

    Attributes:
        id: Session id (UUIDv4).
        agent: The wrapped agent.
        agent_id: The id of the agent the session was made with (kept across
            :meth:`from_json`, where the agent object is a new one).
        thread_tree: The conversation tree; runs use its current node.
        checkpoints: Every checkpoint, oldest first.
        current_checkpoint: The latest checkpoint made or restored.
        checkpoints_enabled: Whether checkpoints are made automatically.
        checkpoint_interval: ``"step"`` or ``"turn"``.
        persistence: Where :meth:`save` stores the session.
        owner: The principal the session runs for (a server's caller,
            ``TurnRequest.principal``), recorded in the session and in each
            checkpoint; adapters keep sessions by ``(owner, id)``.
        metadata: Session metadata.
        step: Steps run so far in this session.
        sub_agent_states: SessionJSON of each sub-agent conversation.
        query_threads: Threads of the queries made with this session
            (:func:`uamp_agents.query`), by thread id.
        created_at: ISO 8601 creation time.
        updated_at: ISO 8601 time of the last change.

    Args:
        agent: The agent to run.
        id: The session id (UUIDv4); generated when omitted.
        checkpoints: Make checkpoints automatically.
        checkpoint_interval: ``"step"`` (after every step) or ``"turn"``.
        persistence: A :class:`~uamp_agents.persistence.PersistenceAdapter`,
            or a file path for a SQLite database; default: in memory.
        metadata: Session metadata.
        owner: The principal the session runs for (``None``: unowned).

    Raises:
        ValueError: Bad ``checkpoint_interval``.
        SerializationError: ``id`` is not a UUIDv4.
    """

    def __init__(
        self,
        agent: Agent,
        *,
        id: str | None = None,
        checkpoints: bool = True,
        checkpoint_interval: CheckpointInterval = "step",
        persistence: PersistenceAdapter | str | os.PathLike[str] | None = None,
        metadata: dict[str, Any] | None = None,
        owner: Principal | None = None,
    ) -> None:
        if checkpoint_interval not in CHECKPOINT_INTERVALS:
            raise ValueError(
                f"checkpoint_interval must be 'step' or 'turn', not {checkpoint_interval!r}"
            )
        if id is not None:
            Reader({"id": id}).uuid4("id")
        self.id = id or new_id()
        self.owner = owner
        self.agent = agent
        self.agent_id: str = agent.id
        self.thread_tree = ThreadTree()
        self.checkpoints: list[Checkpoint] = []
        self.current_checkpoint: Checkpoint | None = None
        self.checkpoints_enabled = checkpoints
        self.checkpoint_interval: CheckpointInterval = checkpoint_interval
        self.persistence: PersistenceAdapter = _adapter(persistence)
        self.metadata: dict[str, Any] = dict(metadata or {})
        self.step = 0
        self.sub_agent_states: dict[str, dict[str, Any]] = {}
        self.query_threads: dict[str, Thread] = {}
        self.created_at = now_iso()
        self.updated_at = self.created_at
        self.extra: dict[str, Any] = {}
        self._running = False

    # --- runs ---------------------------------------------------------------

    async def run(self, input: AgentInput, *, deps: Any = None) -> Turn:
        """Run the agent on the current thread's history and ``input``.

        The turn's messages are appended to the current thread node;
        checkpoints are made as configured and each one is saved. ``deps``
        is handed to the agent's run (tools see it as ``ctx.deps``).

        Returns:
            The agent's turn, unchanged.

        Raises:
            SessionBusyError: Another run of this session is going on.
        """
        return await self.stream(input, deps=deps).turn

    def stream(self, input: AgentInput, *, deps: Any = None) -> SessionStream:
        """Stream the agent on the current thread's history and ``input``.

        The session's ``checkpoint`` events are interleaved with the agent's
        events, right after the ``step_end`` they follow. ``await
        stream.turn`` finishes the run (reading any events left).

        Raises:
            SessionBusyError: Another run of this session is going on.
        """
        if self._running:
            raise SessionBusyError(f"session {self.id} is already running")
        if self.thread_tree.current.children:
            # Appending to a node with children would change the history of
            # every branch below it: continue on a new branch instead.
            self.fork()
        self._running = True
        return SessionStream(self, input, deps=deps)

    # --- checkpoints ----------------------------------------------------------

    def _snapshot(self, *, reason: str, state: Any = None, turn: Turn | None = None) -> Checkpoint:
        metadata_source = getattr(state, "metadata", None)
        if metadata_source is None and turn is not None:
            metadata_source = turn.metadata
        checkpoint = Checkpoint(
            session_id=self.id,
            step=self.step,
            thread_id=self.thread_tree.current.id,
            state=CheckpointState(
                step=self.step,
                messages=self.thread_tree.history(),
                metadata=_copy(dict(metadata_source or {})),
                reasoning=list(getattr(state, "reasoning", None) or []) or None,
                plan=_plan_json(getattr(state, "plan", None)),
            ),
            sub_agent_states=dict(self.sub_agent_states),
            metadata={
                "reason": reason,
                **({"turnId": turn.id} if turn is not None else {}),
                # The step's UUIDv4 (UAP 3.4), for a checkpoint made at a step.
                **({"stepId": state.step_id} if getattr(state, "step_id", None) else {}),
            },
            owner=self.owner,
            query_threads=_copy_threads(self.query_threads),
        )
        self.checkpoints.append(checkpoint)
        self.current_checkpoint = checkpoint
        self._touch()
        return checkpoint

    async def checkpoint(self, *, metadata: dict[str, Any] | None = None) -> Checkpoint:
        """Make a checkpoint of the current state now and save the session.

        Args:
            metadata: Extra checkpoint metadata (``reason`` is ``"manual"``).
        """
        checkpoint = self._snapshot(reason="manual")
        if metadata:
            checkpoint.metadata.update(metadata)
        await self.save()
        return checkpoint

    def get_checkpoint(self, checkpoint_id: str) -> Checkpoint:
        """The checkpoint with id ``checkpoint_id``.

        Raises:
            LookupError: This session has no such checkpoint.
        """
        for checkpoint in self.checkpoints:
            if checkpoint.id == checkpoint_id:
                return checkpoint
        raise LookupError(f"session {self.id} has no checkpoint {checkpoint_id!r}")

    async def restore(self, checkpoint_id: str) -> None:
        """Bring the session back to the state of checkpoint ``checkpoint_id``.

        Afterwards ``thread_tree.history()`` is exactly the checkpoint's
        conversation, ``step``, ``sub_agent_states`` and ``query_threads``
        are the checkpoint's (a checkpoint written without query threads
        leaves them as they are),
        and the checkpoint is the current one. Thread nodes made after the
        checkpoint stay in the tree: if the checkpoint's node has grown, the
        current node becomes a new branch (``metadata["restoredFrom"]``).
        The session is saved.

        Raises:
            LookupError: This session has no such checkpoint.
            SessionBusyError: A run is going on.
        """
        if self._running:
            raise SessionBusyError(f"session {self.id} is running; restore after the run")
        checkpoint = self.get_checkpoint(checkpoint_id)
        self._restore_tree(checkpoint)
        self.step = checkpoint.step
        self.sub_agent_states = dict(checkpoint.sub_agent_states)
        if checkpoint.query_threads is not None:
            self.query_threads = _copy_threads(checkpoint.query_threads)
        self.current_checkpoint = checkpoint
        self._touch()
        await self.save()

    def _restore_tree(self, checkpoint: Checkpoint) -> None:
        tree = self.thread_tree
        wanted = checkpoint.state.messages
        node_id = checkpoint.thread_id if checkpoint.thread_id in tree.nodes else tree.root.id
        if tree.history(node_id) == wanted:
            tree.checkout(node_id)
            return
        # Walk down the checkpoint node's path while each node's thread
        # continues the checkpoint's conversation. Where a node holds only
        # part of it, split that node so its matching head becomes a node of
        # its own (every existing node keeps its history).
        base: ThreadNode | None = None
        covered = 0
        for node in tree.path(node_id):
            messages = node.thread.messages
            if wanted[covered : covered + len(messages)] == messages:
                base, covered = node, covered + len(messages)
                continue
            shared = 0
            for ours, theirs in zip(messages, wanted[covered:], strict=False):
                if ours != theirs:
                    break
                shared += 1
            if shared or base is None:
                base = tree.node(tree.split(node.id, shared))
                covered += shared
            break
        assert base is not None
        if covered == len(wanted):
            tree.checkout(base.id)
            return
        branch_id = tree.branch(base.id)
        branch = tree.node(branch_id)
        branch.metadata["restoredFrom"] = checkpoint.id
        branch.thread.messages.extend(wanted[covered:])
        tree.checkout(branch_id)

    # --- structure ------------------------------------------------------------

    def fork(self, thread_id: str | None = None, *, name: str | None = None) -> str:
        """Branch the thread tree at ``thread_id`` (default: the current node).

        The new node becomes current, so the next run continues from the
        conversation at ``thread_id`` without changing the original branch.

        Returns:
            The new node's id.

        Raises:
            UnknownNodeError: ``thread_id`` is not in the tree.
        """
        node_id = self.thread_tree.branch(thread_id or self.thread_tree.current.id, name)
        self.thread_tree.checkout(node_id)
        self._touch()
        return node_id

    def history(self) -> list[Message]:
        """The conversation of the current thread node, oldest first."""
        return self.thread_tree.history()

    # --- persistence ----------------------------------------------------------

    async def save(self) -> None:
        """Store the session (:meth:`to_json`) in its persistence adapter."""
        await self.persistence.save(self.to_json())

    def to_json(self) -> dict[str, Any]:
        """The SessionJSON form of the session (UAP section 13.1)."""
        owned = {} if self.owner is None else {"owner": owner_json(self.owner)}
        return {
            **self.extra,
            **owned,
            "version": UAP_VERSION,
            "id": self.id,
            "agentId": self.agent_id,
            "createdAt": self.created_at,
            "updatedAt": self.updated_at,
            "threadTree": self.thread_tree.to_json(),
            "checkpoints": [c.to_json() for c in self.checkpoints],
            "metadata": dict(self.metadata),
            "step": self.step,
            "subAgentStates": dict(self.sub_agent_states),
            "queryThreads": {tid: t.to_json() for tid, t in self.query_threads.items()},
        }

    @classmethod
    def from_json(
        cls,
        data: Any,
        agent: Agent,
        *,
        checkpoints: bool = True,
        checkpoint_interval: CheckpointInterval = "step",
        persistence: PersistenceAdapter | str | os.PathLike[str] | None = None,
    ) -> Session:
        """Rebuild a session from its SessionJSON, running on ``agent``.

        Every id is kept; ``current_checkpoint`` is the last checkpoint.

        Raises:
            SerializationError: ``data`` is malformed or of another UAP major
                version; the error names the path of the problem.
        """
        parsed = validate_session_json(data)
        sess = cls(
            agent,
            id=parsed.id,
            checkpoints=checkpoints,
            checkpoint_interval=checkpoint_interval,
            persistence=persistence,
            metadata=parsed.metadata,
            owner=parsed.owner,
        )
        sess.agent_id = parsed.agent_id
        sess.created_at = parsed.created_at
        sess.updated_at = parsed.updated_at
        sess.thread_tree = parsed.thread_tree
        sess.checkpoints = list(parsed.checkpoints)
        sess.current_checkpoint = parsed.checkpoints[-1] if parsed.checkpoints else None
        sess.step = parsed.step
        sess.sub_agent_states = dict(parsed.sub_agent_states)
        sess.query_threads = dict(parsed.query_threads)
        sess.extra = dict(parsed.extra)
        return sess

    @classmethod
    async def load(
        cls,
        session_id: str,
        agent: Agent,
        persistence: PersistenceAdapter | str | os.PathLike[str],
        *,
        owner: Principal | None = None,
        checkpoints: bool = True,
        checkpoint_interval: CheckpointInterval = "step",
    ) -> Session:
        """Load ``owner``'s session ``session_id`` from ``persistence`` and rebuild it.

        Sessions are kept by ``(owner, id)``: another owner's session of the
        same id is not found, exactly like an id never saved.

        Raises:
            LookupError: The adapter has no such session of ``owner``.
            SerializationError: What it has is not a valid SessionJSON.
        """
        adapter = _adapter(persistence)
        data = await adapter.load(session_id, owner=owner)
        if data is None or owner_key(read_owner(Reader(data))) != owner_key(owner):
            raise LookupError(f"no saved session {session_id!r}")
        return cls.from_json(
            data,
            agent,
            checkpoints=checkpoints,
            checkpoint_interval=checkpoint_interval,
            persistence=adapter,
        )

    def _touch(self) -> None:
        self.updated_at = now_iso()

    def __repr__(self) -> str:
        return (
            f"Session(id={self.id!r}, step={self.step}, checkpoints={len(self.checkpoints)}, "
            f"nodes={len(self.thread_tree.nodes)})"
        )


def _adapter(value: PersistenceAdapter | str | os.PathLike[str] | None) -> PersistenceAdapter:
    if value is None:
        return MemoryAdapter()
    if isinstance(value, str | os.PathLike):
        return SQLiteAdapter(value)
    return value


# --- a session's run ------------------------------------------------------------


class SessionStream:
    """A session's streaming run (UAP section 12, through a session).

    Iterate it (``async for event in stream``) for the agent's events -- the
    ``checkpoint`` events of the session's per-step checkpoints among them --
    and/or ``await stream.turn``; ``abort()`` cancels the run, whose partial
    turn is still appended to the thread. ``async with stream:`` ties the run
    to a nursery as the agent's stream does.
    """

    def __init__(self, sess: Session, input: AgentInput, *, deps: Any = None) -> None:
        self._session = sess
        self._node = sess.thread_tree.current
        self._base_len = len(self._node.thread.messages)
        self._base_step = sess.step
        self._run_messages: list[Message] = []
        self._steps_seen = 0
        self._last_step_checkpoint: Checkpoint | None = None
        self._base_subs = dict(sess.sub_agent_states)
        self._sub_ids: dict[str, str] = {}
        self._turn: Turn | None = None
        self._finished = False
        history = sess.thread_tree.history()
        agent: Any = sess.agent
        stream_fn: Callable[..., Any] | None = getattr(agent, "stream", None)
        self._inner: Any = None
        self._run_only: Awaitable[Turn] | None = None
        # Only a run that was given deps passes them on, so an agent-like
        # object without a ``deps`` parameter keeps working.
        extra: dict[str, Any] = {} if deps is None else {"deps": deps}
        if stream_fn is None:
            self._run_only = agent.run(history, input, **extra)
        elif _accepts(stream_fn, "on_step"):
            options: dict[str, Any] = {"on_step": self._on_step, **extra}
            if _accepts(stream_fn, "session"):
                options["session"] = sess  # middleware sees it (UAP 14.2)
            self._inner = stream_fn(history, input, **options)
        else:
            self._inner = stream_fn(history, input, **extra)

    # --- per-step checkpoints ---------------------------------------------------

    async def _on_step(self, step: int, state: Any) -> str | None:
        """The run's per-step callback: record the step, checkpoint, save.

        ``state.messages`` is every message of the run so far, starting with
        the user input; it replaces what earlier steps put on the thread.
        Returns the checkpoint id, which the run announces as a
        ``checkpoint`` stream event.
        """
        sess = self._session
        messages = [m for m in getattr(state, "messages", []) if isinstance(m, Message)]
        self._set_run_messages(messages)
        self._steps_seen = max(self._steps_seen, step)
        sess.step = self._base_step + self._steps_seen
        executions = getattr(state, "tool_executions", None)
        if executions:
            # The sub-agent conversations of the steps so far belong to this
            # step's checkpoint (UAP 6.5), not only to the turn's last one.
            so_far = Turn(
                messages=[],
                response=Message(role="assistant", content=""),
                tool_executions=list(executions),
            )
            sess.sub_agent_states.update(
                _sub_agent_states(
                    so_far, parent_session_id=sess.id, created_at=now_iso(), ids=self._sub_ids
                )
            )
        sess._touch()
        if not (sess.checkpoints_enabled and sess.checkpoint_interval == "step"):
            return None
        checkpoint = sess._snapshot(reason="step", state=state)
        self._last_step_checkpoint = checkpoint
        await sess.save()
        return checkpoint.id

    def _set_run_messages(self, messages: list[Message]) -> None:
        thread = self._node.thread.messages
        del thread[self._base_len :]
        thread.extend(messages)
        self._run_messages = list(messages)

    async def _finish(self, turn: Turn) -> None:
        sess = self._session
        self._set_run_messages(list(turn.messages))
        sess.step = self._base_step + max(turn.steps, self._steps_seen)
        sess.sub_agent_states.update(
            _sub_agent_states(
                turn, parent_session_id=sess.id, created_at=now_iso(), ids=self._sub_ids
            )
        )
        sess._touch()
        if sess.checkpoints_enabled:
            last = self._last_step_checkpoint
            stale = (
                last is None
                or last.step != sess.step
                or last.state.messages != sess.thread_tree.history()
                or last.sub_agent_states != sess.sub_agent_states
            )
            if stale:
                sess._snapshot(reason="turn", turn=turn)
        await sess.save()

    async def _complete(self) -> Turn:
        """Finish the run exactly once and return its turn.

        On failure the thread and step counter go back to where they were
        before the run (the checkpoints made during it stay) and the error is
        raised.
        """
        if self._turn is not None:
            return self._turn
        try:
            if self._inner is not None:
                turn: Turn = await self._inner.turn
            else:
                assert self._run_only is not None
                turn = await self._run_only
        except BaseException:
            if not self._finished:
                self._finished = True
                self._set_run_messages([])
                self._session.step = self._base_step
                self._session.sub_agent_states = dict(self._base_subs)
                self._session._running = False
                # The run's own error is the one to raise.
                with contextlib.suppress(Exception):
                    await self._session.save()
            raise
        if not self._finished:
            self._finished = True
            try:
                await self._finish(turn)
            finally:
                self._session._running = False
        self._turn = turn
        return turn

    # --- consumer side ----------------------------------------------------------

    def __aiter__(self) -> AsyncIterator[Any]:
        return self

    async def __anext__(self) -> Any:
        if self._inner is None:
            await self._complete()
            raise StopAsyncIteration
        try:
            return await self._inner.__anext__()
        except StopAsyncIteration:
            await self._complete()
            raise
        except BaseException:
            await self._complete()  # restores the thread and re-raises the run's error
            raise

    @property
    def turn(self) -> Awaitable[Turn]:
        """Awaitable final turn; resolves once the run has ended and been recorded."""
        return self._complete()

    @property
    def done(self) -> bool:
        """Whether the run has ended and been recorded in the session."""
        return self._finished

    def abort(self) -> None:
        """Cancel the run; its partial turn is appended when it resolves."""
        if self._inner is not None:
            self._inner.abort()

    async def aclose(self) -> None:
        """Abort the run if it is still going and record its outcome.

        A stream that is neither iterated to the end, awaited, nor closed
        keeps the session busy.
        """
        if self._finished:
            return
        self.abort()
        with contextlib.suppress(Exception):
            await self._complete()

    async def __aenter__(self) -> SessionStream:
        if self._inner is not None:
            await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        result: bool | None = None
        if self._inner is not None:
            result = await self._inner.__aexit__(*exc_info)
        if not self._finished:
            # An error here was already raised to the body of the block.
            with contextlib.suppress(Exception):
                await self._complete()
        return result


def _accepts(fn: Callable[..., Any], name: str) -> bool:
    """Whether ``fn`` takes a keyword argument called ``name``."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(
        (p.name == name and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD))
        or p.kind is p.VAR_KEYWORD
        for p in parameters
    )


#: Create a session around an agent (UAP section 6.1); the same as calling :class:`Session`.
session = Session
