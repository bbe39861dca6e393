"""Level 2 (UAP sections 6, 13): sessions, checkpoints, restore, SessionJSON."""

from __future__ import annotations

import copy
import re
import sys
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
import trio

from uamp_agents.agent import Agent, agent
from uamp_agents.checkpoint import Checkpoint
from uamp_agents.persistence import JSONDirectoryAdapter, MemoryAdapter, SQLiteAdapter
from uamp_agents.providers import function
from uamp_agents.serialization import UAP_VERSION, SerializationError
from uamp_agents.session import Session, SessionBusyError, session
from uamp_proto.types import Message, ToolDefinition


def is_uuid4(value: str) -> bool:
    return uuid.UUID(value).version == 4 and str(uuid.UUID(value)) == value


def is_iso_with_zone(value: str) -> bool:
    return datetime.fromisoformat(value).tzinfo is not None


def texts(messages: list[Message]) -> list[str]:
    """The texts of the user messages and final replies (tool traffic left out)."""
    return [m.text for m in messages if m.role != "tool" and not m.tool_calls]


class Script:
    """A model function: ``tool_steps`` tool-call steps per turn, then a reply.

    It records the conversation it was given on every call.
    """

    def __init__(self, tool_steps: int = 0, reply: Callable[[str], str] | None = None) -> None:
        self.tool_steps = tool_steps
        self.seen: list[list[Message]] = []
        self.reply = reply or (lambda text: f"re: {text}")

    def __call__(self, messages: list[Message], tools: list[ToolDefinition]) -> Any:
        self.seen.append(list(messages))
        # Tool results since the last user message = steps done in this turn.
        last_user = max(i for i, m in enumerate(messages) if m.role == "user")
        done = sum(1 for m in messages[last_user:] if m.role == "tool")
        if done < self.tool_steps:
            return [("bump", {"n": done + 1})]
        return self.reply(messages[last_user].text)


def bump(n: int) -> str:
    """Record step ``n``.

    Args:
        n: The step number.
    """
    return f"bumped {n}"


def make_agent(script: Script) -> Agent:
    return agent(model=function(script), tools=[bump])


# --- creation ------------------------------------------------------------------


async def test_new_session_defaults() -> None:
    a = make_agent(Script())
    s = session(a, metadata={"task": "t"})
    assert isinstance(s, Session)
    assert is_uuid4(s.id)
    assert s.agent is a
    assert s.agent_id == a.id
    assert s.checkpoints_enabled is True
    assert s.checkpoint_interval == "step"
    assert isinstance(s.persistence, MemoryAdapter)
    assert s.metadata == {"task": "t"}
    assert s.checkpoints == [] and s.current_checkpoint is None
    assert is_iso_with_zone(s.created_at)


async def test_bad_options_are_refused() -> None:
    a = make_agent(Script())
    with pytest.raises(ValueError, match="checkpoint_interval"):
        session(a, checkpoint_interval="minute")  # type: ignore[arg-type]
    with pytest.raises(SerializationError):
        session(a, id="sess_abc123")
    given = str(uuid.uuid4())
    assert session(a, id=given).id == given


async def test_a_path_means_sqlite(tmp_path: Path) -> None:
    s = session(make_agent(Script()), persistence=tmp_path / "s.db")
    assert isinstance(s.persistence, SQLiteAdapter)


# --- runs -----------------------------------------------------------------------


async def test_run_appends_turns_and_uses_history() -> None:
    script = Script()
    s = session(make_agent(script))
    t1 = await s.run("hello")
    t2 = await s.run("again")
    assert t1.response.text == "re: hello"
    assert t2.response.text == "re: again"
    assert s.thread_tree.history() == [*t1.messages, *t2.messages]
    assert texts(s.history()) == ["hello", "re: hello", "again", "re: again"]
    # The second call saw the first turn.
    assert texts(script.seen[1]) == ["hello", "re: hello", "again"]


async def test_a_checkpoint_after_every_step() -> None:
    s = session(make_agent(Script(tool_steps=2)))
    turn = await s.run("go")
    assert turn.steps == 3
    assert [c.step for c in s.checkpoints] == [1, 2, 3]
    assert [len(c.state.messages) for c in s.checkpoints] == [3, 5, 6]
    assert all(c.metadata["reason"] == "step" for c in s.checkpoints)
    assert s.checkpoints[-1].state.messages == s.history()
    assert s.current_checkpoint is s.checkpoints[-1]
    for c in s.checkpoints:
        assert is_uuid4(c.id)
        assert c.session_id == s.id
        assert c.thread_id == s.thread_tree.current.id
        assert is_iso_with_zone(c.timestamp)
        assert c.state.step == c.step
    assert s.step == 3
    await s.run("more")
    assert [c.step for c in s.checkpoints] == [1, 2, 3, 4, 5, 6]


async def test_stream_announces_checkpoints() -> None:
    s = session(make_agent(Script(tool_steps=1)))
    stream = s.stream("go")
    kinds: list[str] = []
    announced: list[str] = []
    async for event in stream:
        if event.source == "uap":
            kinds.append(event.uap.type)
            if event.uap.type == "checkpoint":
                announced.append(event.uap.data["checkpoint_id"])
    turn = await stream.turn
    assert turn.response.text == "re: go"
    assert announced == [c.id for c in s.checkpoints]
    assert kinds.index("checkpoint") == kinds.index("step_end") + 1
    assert s.history() == turn.messages


async def test_stream_turn_without_iterating() -> None:
    s = session(make_agent(Script(tool_steps=2)))
    turn = await s.stream("go").turn
    assert len(s.checkpoints) == 3
    assert s.history() == turn.messages


async def test_checkpoint_interval_turn() -> None:
    s = session(make_agent(Script(tool_steps=2)), checkpoint_interval="turn")
    await s.run("one")
    await s.run("two")
    assert [c.step for c in s.checkpoints] == [3, 6]
    assert [c.metadata["reason"] for c in s.checkpoints] == ["turn", "turn"]
    assert s.checkpoints[-1].state.messages == s.history()


async def test_checkpoints_disabled_and_manual_checkpoint() -> None:
    s = session(make_agent(Script(tool_steps=1)), checkpoints=False)
    await s.run("one")
    assert s.checkpoints == []
    cp = await s.checkpoint(metadata={"label": "mine"})
    assert s.checkpoints == [cp]
    assert cp.metadata == {"reason": "manual", "label": "mine"}
    assert cp.state.messages == s.history()
    stored = await s.persistence.load(s.id)
    assert stored is not None and stored["checkpoints"][0]["id"] == cp.id


async def test_concurrent_runs_are_refused() -> None:
    s = session(make_agent(Script()))
    stream = s.stream("one")
    with pytest.raises(SessionBusyError):
        s.stream("two")
    await stream.turn
    await s.run("three")  # free again once the first run has ended
    assert texts(s.history())[-1] == "re: three"


async def test_failed_run_leaves_the_conversation_and_keeps_checkpoints() -> None:
    calls = 0

    def flaky(messages: list[Message], tools: list[ToolDefinition]) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            return "first"
        if calls == 2:
            return [("bump", {"n": 1})]
        raise RuntimeError("model exploded")

    s = session(agent(model=function(flaky), tools=[bump]))
    await s.run("a")
    before = s.history()
    with pytest.raises(RuntimeError, match="model exploded"):
        await s.run("b")
    assert s.history() == before
    assert s.step == 1
    # The completed step of the failed run is still recoverable.
    mid = s.checkpoints[-1]
    assert len(mid.state.messages) == len(before) + 3
    await s.restore(mid.id)
    assert s.history() == mid.state.messages
    assert s.step == 2


async def test_abort_appends_the_partial_turn() -> None:
    gate = trio.Event()

    async def slow(messages: list[Message], tools: list[ToolDefinition]) -> Any:
        if sum(1 for m in messages if m.role == "tool") == 0:
            return [("bump", {"n": 1})]
        gate.set()
        await trio.sleep_forever()

    s = session(agent(model=function(slow), tools=[bump]))
    stream = s.stream("go")
    async with trio.open_nursery() as nursery:

        async def stop() -> None:
            await gate.wait()
            stream.abort()

        nursery.start_soon(stop)
        turn = await stream.turn
    assert turn.status == "aborted"
    assert s.history() == turn.messages
    assert s.history()[0].text == "go"
    assert len(s.checkpoints) >= 1


# --- restore --------------------------------------------------------------------


async def test_restore_brings_back_the_exact_state_and_keeps_later_work() -> None:
    script = Script(tool_steps=1)
    s = session(make_agent(script))
    await s.run("one")
    cp = s.checkpoints[-1]
    await s.run("two")
    later = s.history()
    later_node = s.thread_tree.current.id
    await s.restore(cp.id)
    assert s.history() == cp.state.messages
    assert s.step == cp.step
    assert s.current_checkpoint is cp
    # Nothing made after the checkpoint is lost.
    assert s.thread_tree.history(later_node) == later
    # The next run continues from the restored state, on a branch.
    await s.run("three")
    assert texts(script.seen[-1]) == ["one", "re: one", "three"]
    assert s.thread_tree.history(later_node) == later
    assert texts(s.history()) == ["one", "re: one", "three", "re: three"]


async def test_restore_to_a_step_inside_a_turn() -> None:
    s = session(make_agent(Script(tool_steps=2)))
    await s.run("go")
    first_step = s.checkpoints[0]
    await s.restore(first_step.id)
    assert s.history() == first_step.state.messages
    assert [m.role for m in s.history()] == ["user", "assistant", "tool"]
    assert s.step == 1


async def test_restore_every_checkpoint_in_any_order() -> None:
    s = session(make_agent(Script(tool_steps=1)))
    for word in ("a", "b", "c"):
        await s.run(word)
    checkpoints = list(s.checkpoints)
    for cp in [checkpoints[3], checkpoints[0], checkpoints[5], checkpoints[2], checkpoints[0]]:
        await s.restore(cp.id)
        assert s.history() == cp.state.messages
        assert s.step == cp.step
    # Every node's history still makes sense: no node lost its messages.
    for node_id in s.thread_tree.nodes:
        s.thread_tree.history(node_id)


async def test_restore_unknown_checkpoint() -> None:
    s = session(make_agent(Script()))
    with pytest.raises(LookupError):
        await s.restore(str(uuid.uuid4()))


async def test_restore_is_saved(tmp_path: Path) -> None:
    s = session(make_agent(Script()), persistence=JSONDirectoryAdapter(tmp_path))
    await s.run("one")
    cp = s.checkpoints[-1]
    await s.run("two")
    await s.restore(cp.id)
    loaded = await Session.load(s.id, make_agent(Script()), s.persistence)
    assert loaded.history() == cp.state.messages


# --- fork -----------------------------------------------------------------------


async def test_fork_branches_from_a_thread() -> None:
    script = Script()
    s = session(make_agent(script))
    await s.run("one")
    main = s.thread_tree.current.id
    await s.run("two")
    branch = s.fork(main, name="alt")
    assert is_uuid4(branch)
    assert s.thread_tree.current.id == branch
    assert s.thread_tree.nodes[branch].parent_id == main
    assert s.thread_tree.nodes[branch].name == "alt"
    await s.run("three")
    assert texts(s.history()) == ["one", "re: one", "two", "re: two", "three", "re: three"]
    s.thread_tree.checkout(main)
    assert texts(s.history()) == ["one", "re: one", "two", "re: two"]


# --- serialization --------------------------------------------------------------


async def run_sample() -> Session:
    s = session(make_agent(Script(tool_steps=1)), metadata={"task": "demo"})
    await s.run("one")
    s.fork(name="alt")
    await s.run("two")
    return s


async def test_to_json_uses_the_spec_field_names() -> None:
    s = await run_sample()
    data = orjson.loads(orjson.dumps(s.to_json()))
    required = {"version", "id", "agentId", "createdAt", "updatedAt", "threadTree", "checkpoints"}
    assert required <= set(data)
    assert data["version"] == UAP_VERSION
    assert data["metadata"] == {"task": "demo"}
    cp = data["checkpoints"][0]
    assert {"id", "sessionId", "timestamp", "step", "threadId", "state"} <= set(cp)
    assert {"step", "messages", "metadata"} <= set(cp["state"])
    assert set(data["threadTree"]) == {"rootId", "currentId", "nodes"}


async def test_json_round_trip_preserves_everything() -> None:
    s = await run_sample()
    data = orjson.loads(orjson.dumps(s.to_json()))
    other_agent = make_agent(Script(tool_steps=1))
    back = Session.from_json(data, other_agent)
    assert back.id == s.id
    assert back.agent is other_agent
    assert back.agent_id == s.agent_id  # ids are kept exactly
    assert back.created_at == s.created_at
    assert back.thread_tree.current.id == s.thread_tree.current.id
    assert back.history() == s.history()
    assert [c.id for c in back.checkpoints] == [c.id for c in s.checkpoints]
    assert back.checkpoints == s.checkpoints
    assert back.current_checkpoint == s.checkpoints[-1]
    assert back.step == s.step
    assert back.metadata == s.metadata
    assert back.to_json() == data


async def test_restored_session_behaves_like_the_original() -> None:
    original = await run_sample()
    data = orjson.loads(orjson.dumps(original.to_json()))
    twin = Session.from_json(data, make_agent(Script(tool_steps=1)))
    t1 = await original.run("three")
    t2 = await twin.run("three")
    assert texts(t1.messages) == texts(t2.messages)
    assert texts(original.history()) == texts(twin.history())
    assert twin.step == original.step
    cp = twin.checkpoints[1]
    await twin.restore(cp.id)
    assert twin.history() == cp.state.messages


async def test_unknown_keys_survive_a_round_trip() -> None:
    s = session(make_agent(Script()))
    await s.run("x")
    data = s.to_json()
    data["x-vendor"] = {"a": 1}
    data["checkpoints"][0]["x-cp"] = True
    data["checkpoints"][0]["state"]["x-state"] = 2
    again = Session.from_json(data, make_agent(Script())).to_json()
    assert again["x-vendor"] == {"a": 1}
    assert again["checkpoints"][0]["x-cp"] is True
    assert again["checkpoints"][0]["state"]["x-state"] == 2


async def test_reads_a_minimal_foreign_session() -> None:
    # What another implementation might write: required fields only.
    sid, root, cp = (str(uuid.uuid4()) for _ in range(3))
    data = {
        "version": "1.2.0",
        "id": sid,
        "agentId": "agent_xyz789",
        "createdAt": "2024-01-15T10:30:00.000Z",
        "updatedAt": "2024-01-15T10:35:00+02:00",
        "threadTree": {
            "rootId": root,
            "currentId": root,
            "nodes": [
                {
                    "id": root,
                    "thread": {"id": "thread_001", "messages": [{"role": "user", "content": "hi"}]},
                    "children": [],
                }
            ],
        },
        "checkpoints": [
            {
                "id": cp,
                "sessionId": sid,
                "timestamp": "2024-01-15T10:32:00.000Z",
                "step": 3,
                "threadId": root,
                "state": {
                    "step": 3,
                    "messages": [{"role": "user", "content": "hi"}],
                    "metadata": {"taskComplete": False},
                    "reasoning": ["First, I need to..."],
                    "plan": [
                        {"id": "1", "description": "look", "dependsOn": [], "status": "completed"}
                    ],
                },
            }
        ],
    }
    s = Session.from_json(data, make_agent(Script()))
    assert s.step == 3
    assert s.metadata == {}
    assert s.checkpoints[0].state.reasoning == ["First, I need to..."]
    assert s.checkpoints[0].state.plan == data["checkpoints"][0]["state"]["plan"]
    turn = await s.run("next")
    assert turn.response.text == "re: next"
    assert texts(s.history()) == ["hi", "next", "re: next"]


async def test_save_and_load_with_each_adapter(tmp_path: Path) -> None:
    for store in (MemoryAdapter(), JSONDirectoryAdapter(tmp_path / "d"), tmp_path / "s.db"):
        s = session(make_agent(Script(tool_steps=1)), persistence=store)
        await s.run("one")
        loaded = await Session.load(s.id, make_agent(Script()), s.persistence)
        assert loaded.to_json() == s.to_json()
        with pytest.raises(LookupError):
            await Session.load(str(uuid.uuid4()), make_agent(Script()), s.persistence)
        if isinstance(s.persistence, SQLiteAdapter):
            await s.persistence.aclose()


async def test_each_step_is_persisted_before_the_next_starts(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    seen_in_db: list[int] = []
    reader = SQLiteAdapter(db)

    async def probe(n: int) -> str:
        """Look at what is saved while the run is going on.

        Args:
            n: The step number.
        """
        stored = await reader.load(s.id)
        seen_in_db.append(len(stored["checkpoints"]) if stored else 0)
        return f"bumped {n}"

    def model(messages: list[Message], tools: list[ToolDefinition]) -> Any:
        done = sum(1 for m in messages if m.role == "tool")
        return [("probe", {"n": done + 1})] if done < 3 else "done"

    s = session(agent(model=function(model), tools=[probe]), persistence=db)
    await s.run("go")
    # Step n's tool call runs after the checkpoints of steps 1..n-1 were saved.
    assert seen_in_db == [0, 1, 2]
    await reader.aclose()
    assert isinstance(s.persistence, SQLiteAdapter)
    await s.persistence.aclose()


# --- sub-agents -----------------------------------------------------------------


async def test_sub_agent_state_is_recorded() -> None:
    helper = agent(
        model=function(lambda messages, tools: f"helped with {messages[-1].text}"),
        name="helper",
        description="Helps.",
    )

    def parent_model(messages: list[Message], tools: list[ToolDefinition]) -> Any:
        if not any(m.role == "tool" for m in messages):
            return [("helper", {"task": "the thing"})]
        return "all done"

    parent = agent(model=function(parent_model), tools=[helper])
    s = session(parent)
    turn = await s.run("start")
    assert turn.response.text == "all done"
    assert len(s.sub_agent_states) == 1
    (sub_id, sub), *_ = s.sub_agent_states.items()
    assert sub["id"] == sub_id and is_uuid4(sub_id)
    assert sub["agentId"] == helper.id
    assert sub["metadata"]["parentAgentId"] == parent.id
    assert sub["metadata"]["parentTurnId"] == turn.id
    assert sub["metadata"]["parentSessionId"] == s.id
    assert sub["metadata"]["toolName"] == "helper"
    sub_messages = sub["threadTree"]["nodes"][0]["thread"]["messages"]
    assert [m.get("content") for m in sub_messages] == ["the thing", "helped with the thing"]
    # In the checkpoint, and through serialization.
    assert s.checkpoints[-1].sub_agent_states == s.sub_agent_states
    data = orjson.loads(orjson.dumps(s.to_json()))
    assert data["checkpoints"][-1]["subAgentStates"][sub_id]["agentId"] == helper.id
    back = Session.from_json(data, parent)
    assert back.sub_agent_states == s.sub_agent_states


# --- every deserialization error path -------------------------------------------


def valid_json() -> dict[str, Any]:
    s = session(make_agent(Script()))
    tree = s.thread_tree
    tree.root.thread.append([Message(role="user", content="hi")])
    s._snapshot(reason="manual")
    sub = copy.deepcopy(s.to_json())
    sub["id"] = str(uuid.uuid4())
    sub["checkpoints"] = []
    data = s.to_json()
    data["subAgentStates"] = {sub["id"]: copy.deepcopy(sub)}
    data["checkpoints"][0]["subAgentStates"] = {sub["id"]: copy.deepcopy(sub)}
    return data


def mutated(fn: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    data = valid_json()
    fn(data)
    return data


def set_key(path: list[Any], value: Any) -> Callable[[dict[str, Any]], None]:
    def apply(data: dict[str, Any]) -> None:
        target: Any = data
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return apply


def drop_key(path: list[Any]) -> Callable[[dict[str, Any]], None]:
    def apply(data: dict[str, Any]) -> None:
        target: Any = data
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]

    return apply


def sub_key(data: dict[str, Any]) -> str:
    return next(iter(data["subAgentStates"]))


CP = ["checkpoints", 0]
BAD_SESSIONS: list[tuple[str, Callable[[dict[str, Any]], Any], str, str]] = [
    ("version missing", drop_key(["version"]), "version", "is required"),
    ("version 2", set_key(["version"], "2.0.0"), "version", "unsupported UAP version"),
    ("version 0", set_key(["version"], "0.9.0"), "version", "unsupported UAP version"),
    ("version garbage", set_key(["version"], "one"), "version", "MAJOR.MINOR.PATCH"),
    ("version number", set_key(["version"], 1), "version", "version string"),
    ("id not uuid", set_key(["id"], "sess_abc123"), "id", "UUIDv4"),
    ("agentId missing", drop_key(["agentId"]), "agentId", "is required"),
    ("createdAt not iso", set_key(["createdAt"], "yesterday"), "createdAt", "ISO 8601"),
    ("updatedAt no zone", set_key(["updatedAt"], "2024-01-15T10:30:00"), "updatedAt", "time zone"),
    ("threadTree missing", drop_key(["threadTree"]), "threadTree", "is required"),
    (
        "tree node bad",
        set_key(["threadTree", "nodes", 0, "id"], "x"),
        "threadTree.nodes[0].id",
        "UUIDv4",
    ),
    ("checkpoints missing", drop_key(["checkpoints"]), "checkpoints", "is required"),
    ("checkpoints object", set_key(["checkpoints"], {}), "checkpoints", "must be an array"),
    ("metadata list", set_key(["metadata"], []), "metadata", "must be an object"),
    ("step negative", set_key(["step"], -1), "step", "negative"),
    ("step string", set_key(["step"], "3"), "step", "must be an integer"),
    ("checkpoint not object", set_key(CP, "cp"), "checkpoints[0]", "must be an object"),
    ("checkpoint id", set_key([*CP, "id"], "cp_001"), "checkpoints[0].id", "UUIDv4"),
    (
        "checkpoint timestamp",
        set_key([*CP, "timestamp"], "noon"),
        "checkpoints[0].timestamp",
        "ISO 8601",
    ),
    (
        "checkpoint step bool",
        set_key([*CP, "step"], True),
        "checkpoints[0].step",
        "must be an integer",
    ),
    (
        "checkpoint of another session",
        set_key([*CP, "sessionId"], str(uuid.uuid4())),
        "checkpoints[0].sessionId",
        "checkpoint of session",
    ),
    (
        "checkpoint thread unknown",
        set_key([*CP, "threadId"], str(uuid.uuid4())),
        "checkpoints[0].threadId",
        "no thread node",
    ),
    (
        "duplicate checkpoint",
        lambda d: d["checkpoints"].append(copy.deepcopy(d["checkpoints"][0])),
        "checkpoints[1].id",
        "duplicate checkpoint id",
    ),
    ("state missing", drop_key([*CP, "state"]), "checkpoints[0].state", "is required"),
    (
        "state messages missing",
        drop_key([*CP, "state", "messages"]),
        "checkpoints[0].state.messages",
        "is required",
    ),
    (
        "state metadata missing",
        drop_key([*CP, "state", "metadata"]),
        "checkpoints[0].state.metadata",
        "is required",
    ),
    (
        "state message bad",
        set_key([*CP, "state", "messages", 0, "role"], None),
        "checkpoints[0].state.messages[0]",
        "role",
    ),
    (
        "reasoning not strings",
        set_key([*CP, "state", "reasoning"], [1]),
        "checkpoints[0].state.reasoning[0]",
        "must be a string",
    ),
    (
        "plan status",
        set_key(
            [*CP, "state", "plan"],
            [{"id": "1", "description": "d", "dependsOn": [], "status": "maybe"}],
        ),
        "checkpoints[0].state.plan[0].status",
        "must be one of",
    ),
    (
        "plan dependsOn missing",
        set_key([*CP, "state", "plan"], [{"id": "1", "description": "d", "status": "pending"}]),
        "checkpoints[0].state.plan[0].dependsOn",
        "is required",
    ),
    (
        "checkpoint subAgentStates list",
        set_key([*CP, "subAgentStates"], []),
        "checkpoints[0].subAgentStates",
        "must be an object",
    ),
    (
        "checkpoint sub-agent state invalid",
        lambda d: d["checkpoints"][0]["subAgentStates"][sub_key(d)].update(version="9.0.0"),
        "checkpoints[0].subAgentStates.{sub}.version",
        "unsupported UAP version",
    ),
    (
        "session sub-agent state invalid",
        lambda d: d["subAgentStates"][sub_key(d)].pop("threadTree"),
        "subAgentStates.{sub}.threadTree",
        "is required",
    ),
    (
        "query thread key mismatch",
        set_key(["queryThreads"], {"q1": {"id": "q2", "messages": []}}),
        "queryThreads.q1.id",
        "stored under",
    ),
    (
        "query thread bad",
        set_key(["queryThreads"], {"q1": {"id": "q1", "messages": [5]}}),
        "queryThreads.q1.messages[0]",
        "must be an object",
    ),
]


@pytest.mark.parametrize(
    ("fn", "path", "reason"),
    [case[1:] for case in BAD_SESSIONS],
    ids=[case[0] for case in BAD_SESSIONS],
)
async def test_malformed_session_json_is_rejected_with_its_path(
    fn: Callable[[dict[str, Any]], Any], path: str, reason: str
) -> None:
    data = mutated(fn)
    if "{sub}" in path:
        path = path.replace("{sub}", sub_key(data))
    with pytest.raises(SerializationError) as info:
        Session.from_json(data, make_agent(Script()))
    assert info.value.path == path
    assert reason in info.value.reason
    assert str(info.value).startswith(path)


async def test_valid_json_fixture_is_valid() -> None:
    s = Session.from_json(valid_json(), make_agent(Script()))
    assert len(s.sub_agent_states) == 1
    assert len(s.checkpoints[0].sub_agent_states) == 1


@pytest.mark.parametrize("value", [None, [], "session", 3])
async def test_non_object_session_json(value: Any) -> None:
    with pytest.raises(SerializationError) as info:
        Session.from_json(value, make_agent(Script()))
    assert info.value.path == ""
    assert "must be an object" in str(info.value)


async def test_checkpoint_from_json_alone() -> None:
    s = session(make_agent(Script(tool_steps=1)))
    await s.run("x")
    cp = s.checkpoints[0]
    assert Checkpoint.from_json(cp.to_json()) == cp
    with pytest.raises(SerializationError) as info:
        Checkpoint.from_json({**cp.to_json(), "state": None}, "cp")
    assert info.value.path == "cp.state"


# --- the guide's examples run -----------------------------------------------------

REPO = Path(__file__).resolve().parents[2]
DOC_BLOCKS = re.findall(r"```python\n(.*?)```", (REPO / "docs" / "sessions.md").read_text(), re.S)


@pytest.mark.parametrize("index", range(len(DOC_BLOCKS)))
async def test_docs_sessions_examples_run(index: int) -> None:
    python = "/work/venv/bin/python" if Path("/work/venv/bin/python").exists() else sys.executable
    result = await trio.run_process(
        [python, "-c", DOC_BLOCKS[index]], cwd=REPO, capture_stdout=True, capture_stderr=True
    )
    assert result.returncode == 0
    assert result.stdout.strip()


def test_docs_have_examples() -> None:
    assert len(DOC_BLOCKS) >= 5


async def test_aclose_frees_the_session() -> None:
    s = session(make_agent(Script(tool_steps=1)))
    stream = s.stream("never read")
    await stream.aclose()
    assert stream.done
    turn = await s.run("next")
    assert turn.response.text == "re: next"


async def test_checkpoint_state_metadata_is_a_snapshot() -> None:
    def mark(n: int) -> str:
        """Mark.

        Args:
            n: Step.
        """
        return "ok"

    def model(messages: list[Message], tools: list[ToolDefinition]) -> Any:
        done = sum(1 for m in messages if m.role == "tool")
        return [("mark", {"n": done})] if done < 2 else "done"

    def on_step_end(step: int, result: Any) -> None:
        result.state.metadata.setdefault("seen", []).append(step)

    s = session(agent(model=function(model), tools=[mark], strategy={"on_step_end": on_step_end}))
    await s.run("go")
    assert [c.state.metadata["seen"] for c in s.checkpoints] == [[1], [1, 2], [1, 2, 3]]


async def test_an_agent_without_stream_gets_turn_checkpoints() -> None:
    # A minimal agent-like object (run only): the session falls back to one
    # checkpoint per turn.
    from uamp_agents.turn import Turn

    class RunOnly:
        id = str(uuid.uuid4())

        async def run(self, history: list[Message], input: str) -> Turn:
            user = Message(role="user", content=input)
            reply = Message(role="assistant", content=f"{len(history)} before")
            return Turn(messages=[user, reply], response=reply, steps=1)

    s = session(RunOnly())  # type: ignore[arg-type]
    await s.run("a")
    turn = await s.run("b")
    assert turn.response.text == "2 before"
    assert [c.metadata["reason"] for c in s.checkpoints] == ["turn", "turn"]
    assert s.checkpoints[-1].state.messages == s.history()
    assert s.step == 2
