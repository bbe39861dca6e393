"""Level 4 (UAP section 9): ask() and query()."""

from __future__ import annotations

import uuid
from pathlib import Path

import orjson
import pytest

from uamp_agents.agent import Agent, agent
from uamp_agents.communication import QueryResult, ask, query, resume_query
from uamp_agents.persistence import JSONDirectoryAdapter
from uamp_agents.providers import function
from uamp_agents.session import Session, session
from uamp_agents.thread import Thread, ThreadTree
from uamp_proto.types import Message, ToolDefinition


class Echo:
    """Replies with the number of user messages it saw and the last one."""

    def __init__(self) -> None:
        self.seen: list[list[str]] = []

    def __call__(self, messages: list[Message], tools: list[ToolDefinition]) -> str:
        users = [m.text for m in messages if m.role == "user"]
        self.seen.append(users)
        return f"{len(users)}:{users[-1]}"


def make() -> tuple[Agent, Echo]:
    echo = Echo()
    return agent(model=function(echo)), echo


# --- ask ------------------------------------------------------------------------


async def test_ask_appends_to_the_thread_and_uses_its_history() -> None:
    a, echo = make()
    thread = Thread()
    t1 = await ask(a, "find files", thread)
    t2 = await ask(a, "which have errors?", thread)
    assert t1.response.text == "1:find files"
    assert t2.response.text == "2:which have errors?"
    assert thread.messages == [*t1.messages, *t2.messages]
    assert echo.seen[-1] == ["find files", "which have errors?"]


async def test_ask_without_a_thread_starts_fresh() -> None:
    a, _echo = make()
    t1 = await ask(a, "one")
    t2 = await ask(a, "two")
    assert t1.response.text == "1:one"
    assert t2.response.text == "1:two"  # no shared history


async def test_ask_on_a_thread_tree_uses_the_current_node() -> None:
    a, _echo = make()
    tree = ThreadTree()
    await ask(a, "root question", tree)
    branch = tree.branch(tree.root.id)
    tree.checkout(branch)
    turn = await ask(a, "branch question", tree)
    assert turn.response.text == "2:branch question"
    assert tree.nodes[branch].thread.messages == turn.messages
    assert len(tree.root.thread.messages) == 2


async def test_ask_accepts_a_message() -> None:
    a, _echo = make()
    thread = Thread()
    await ask(a, Message(role="user", content="as message"), thread)
    assert thread.messages[0] == Message(role="user", content="as message")


# --- query ----------------------------------------------------------------------


async def test_query_runs_on_an_isolated_thread() -> None:
    a, _echo = make()
    main = Thread()
    await ask(a, "main question", main)
    before = list(main.messages)
    result = await query(a, "side question")
    assert isinstance(result, QueryResult)
    assert result.turn.response.text == "1:side question"  # saw no main history
    assert result.thread_id == result.thread.id
    assert uuid.UUID(result.thread_id).version == 4
    assert result.thread.messages == result.turn.messages
    assert main.messages == before


async def test_continue_uses_the_query_thread() -> None:
    a, echo = make()
    first = await query(a, "best practices?")
    second = await first.continue_("async errors?")
    third = await second.continue_("examples")
    assert second.turn.response.text == "2:async errors?"
    assert third.turn.response.text == "3:examples"
    assert echo.seen[-1] == ["best practices?", "async errors?", "examples"]
    assert first.thread is second.thread is third.thread
    assert third.thread_id == first.thread_id
    assert len(third.thread.messages) == 6


async def test_two_queries_do_not_share_history() -> None:
    a, _echo = make()
    q1 = await query(a, "q1")
    q2 = await query(a, "q2")
    await q1.continue_("q1 again")
    follow = await q2.continue_("q2 again")
    assert follow.turn.response.text == "2:q2 again"
    assert q1.thread_id != q2.thread_id


async def test_query_in_a_session_leaves_its_conversation_alone() -> None:
    a, _echo = make()
    s = session(a)
    await s.run("main")
    tree_before = s.thread_tree.to_json()
    checkpoints_before = len(s.checkpoints)
    result = await query(a, "side", session=s)
    await result.continue_("side 2")
    assert s.thread_tree.to_json() == tree_before
    assert len(s.checkpoints) == checkpoints_before
    assert s.query_threads == {result.thread_id: result.thread}


async def test_query_threads_are_serialized_within_the_session(tmp_path: Path) -> None:
    a, _echo = make()
    s = session(a, persistence=JSONDirectoryAdapter(tmp_path))
    await s.run("main")
    result = await query(a, "side", session=s)
    await result.continue_("side 2")
    data = orjson.loads(orjson.dumps(s.to_json()))
    assert data["queryThreads"][result.thread_id]["id"] == result.thread_id
    assert len(data["queryThreads"][result.thread_id]["messages"]) == 4

    # Saved by the query itself; continue it after loading the session again.
    b, echo_b = make()
    loaded = await Session.load(s.id, b, s.persistence)
    assert loaded.query_threads[result.thread_id].messages == result.thread.messages
    more = await resume_query(b, result.thread_id, "side 3", session=loaded)
    assert more.turn.response.text == "3:side 3"
    assert echo_b.seen[-1] == ["side", "side 2", "side 3"]
    assert more.thread is loaded.query_threads[result.thread_id]
    again = await Session.load(s.id, b, s.persistence)
    assert len(again.query_threads[result.thread_id].messages) == 6
    assert [m.text for m in again.history() if m.role == "user"] == ["main"]


async def test_resume_query_errors() -> None:
    a, _echo = make()
    s = session(a)
    with pytest.raises(ValueError, match="session"):
        await resume_query(a, "some-id", "x")
    with pytest.raises(LookupError):
        await resume_query(a, "some-id", "x", session=s)


async def test_resume_query_with_a_thread_object() -> None:
    a, _echo = make()
    first = await query(a, "one")
    resumed = await resume_query(a, first.thread, "two")
    assert resumed.turn.response.text == "2:two"
    assert resumed.thread is first.thread


async def test_query_threads_are_saved_in_checkpoints_and_restored(tmp_path: Path) -> None:
    """UAP 9.2 and level 4: a checkpoint holds the query threads as they were;
    restoring it (also from its CheckpointJSON, in another process) brings them back."""
    from uamp_agents.checkpoint import Checkpoint

    a, _echo = make()
    s = session(a, persistence=JSONDirectoryAdapter(tmp_path))
    await s.run("main")
    result = await query(a, "side", session=s)
    mark = await s.checkpoint()
    assert mark.query_threads is not None
    assert mark.query_threads[result.thread_id].messages == result.thread.messages
    await result.continue_("side 2")
    later = await query(a, "another", session=s)
    assert len(s.query_threads[result.thread_id].messages) == 4  # the checkpoint's copy stayed at 2
    assert len(mark.query_threads[result.thread_id].messages) == 2

    # CheckpointJSON carries them (queryThreads, next to the spec's keys).
    wire = orjson.loads(orjson.dumps(mark.to_json()))
    assert list(wire["queryThreads"]) == [result.thread_id]
    again = Checkpoint.from_json(wire)
    assert again.query_threads is not None
    assert (
        again.query_threads[result.thread_id].messages
        == mark.query_threads[result.thread_id].messages
    )

    # Restored in another process: the session is loaded from its store and brought back.
    b, echo_b = make()
    loaded = await Session.load(s.id, b, s.persistence)
    await loaded.restore(mark.id)
    assert list(loaded.query_threads) == [result.thread_id]
    assert later.thread_id not in loaded.query_threads
    assert len(loaded.query_threads[result.thread_id].messages) == 2
    more = await resume_query(b, result.thread_id, "side again", session=loaded)
    assert echo_b.seen[-1] == ["side", "side again"]
    assert more.turn.response.text == "2:side again"


async def test_a_checkpoint_without_query_threads_leaves_them_alone() -> None:
    from uamp_agents.checkpoint import Checkpoint

    a, _echo = make()
    s = session(a)
    await s.run("main")
    mark = await s.checkpoint()
    result = await query(a, "side", session=s)
    old_form = {k: v for k, v in mark.to_json().items() if k != "queryThreads"}
    old_form["id"] = str(uuid.uuid4())
    old = Checkpoint.from_json(old_form)
    assert old.query_threads is None
    s.checkpoints.append(old)
    await s.restore(old.id)
    assert list(s.query_threads) == [result.thread_id]
