"""Persistence adapters: memory, a directory of JSON files, SQLite (WAL)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import trio

from uamp_agents.agent import agent
from uamp_agents.errors import SerializationError
from uamp_agents.persistence import (
    JSONDirectoryAdapter,
    MemoryAdapter,
    PersistenceAdapter,
    PersistenceError,
    SQLiteAdapter,
)
from uamp_agents.providers import function
from uamp_agents.session import Session
from uamp_proto.principal import Principal

ALICE = Principal(id="alice", scheme="jwt")
BOB = Principal(id="bob", scheme="jwt")


def doc(session_id: str | None = None, checkpoints: int = 2) -> dict[str, Any]:
    """A SessionJSON-shaped value (adapters store it without validating)."""
    sid = session_id or str(uuid.uuid4())
    return {
        "version": "1.0.0",
        "id": sid,
        "agentId": "agent",
        "createdAt": "2024-01-15T10:30:00.000Z",
        "updatedAt": "2024-01-15T10:35:00.000Z",
        "threadTree": {"rootId": "r", "currentId": "r", "nodes": []},
        "checkpoints": [
            {"id": str(uuid.uuid4()), "sessionId": sid, "step": i, "state": {"step": i}}
            for i in range(checkpoints)
        ],
        "metadata": {"task": "x", "unicode": "héllo ✓"},
    }


@pytest.fixture(params=["memory", "files", "sqlite"])
async def adapter(request: Any, tmp_path: Path) -> AsyncIterator[PersistenceAdapter]:
    if request.param == "memory":
        yield MemoryAdapter()
    elif request.param == "files":
        yield JSONDirectoryAdapter(tmp_path / "sessions")
    else:
        store = SQLiteAdapter(tmp_path / "sessions.db")
        yield store
        await store.aclose()


async def test_adapters_satisfy_the_protocol(adapter: PersistenceAdapter) -> None:
    assert isinstance(adapter, PersistenceAdapter)


async def test_save_then_load_gives_the_same_value(adapter: PersistenceAdapter) -> None:
    value = doc()
    await adapter.save(value)
    assert await adapter.load(value["id"]) == value


async def test_load_unknown_is_none(adapter: PersistenceAdapter) -> None:
    assert await adapter.load(str(uuid.uuid4())) is None


async def test_save_replaces(adapter: PersistenceAdapter) -> None:
    value = doc(checkpoints=3)
    await adapter.save(value)
    value = {**value, "metadata": {"v": 2}, "checkpoints": value["checkpoints"][1:]}
    await adapter.save(value)
    loaded = await adapter.load(value["id"])
    assert loaded == value
    assert loaded is not None and len(loaded["checkpoints"]) == 2


async def test_list_and_delete(adapter: PersistenceAdapter) -> None:
    ids = sorted(str(uuid.uuid4()) for _ in range(3))
    for session_id in reversed(ids):
        await adapter.save(doc(session_id))
    assert await adapter.list() == ids
    await adapter.delete(ids[1])
    assert await adapter.list() == [ids[0], ids[2]]
    assert await adapter.load(ids[1]) is None
    await adapter.delete(ids[1])  # deleting twice is fine
    assert await adapter.list() == [ids[0], ids[2]]


async def test_stored_value_is_a_copy(adapter: PersistenceAdapter) -> None:
    value = doc()
    await adapter.save(value)
    value["metadata"]["task"] = "changed"
    value["checkpoints"].clear()
    loaded = await adapter.load(value["id"])
    assert loaded is not None
    assert loaded["metadata"]["task"] == "x"
    assert len(loaded["checkpoints"]) == 2


@pytest.mark.parametrize("bad", [{"no": "id"}, {"id": ""}, {"id": 5}])
async def test_save_without_id_is_refused(adapter: PersistenceAdapter, bad: Any) -> None:
    with pytest.raises(PersistenceError, match="'id'"):
        await adapter.save(bad)


async def test_save_of_non_json_is_refused(adapter: PersistenceAdapter) -> None:
    value = doc()
    value["metadata"]["bad"] = object()
    with pytest.raises(PersistenceError, match="JSON"):
        await adapter.save(value)
    assert await adapter.load(value["id"]) is None


async def test_checkpoints_key_need_not_be_a_list(adapter: PersistenceAdapter) -> None:
    # Adapters store what they are given; validation is Session.from_json's job.
    value = doc()
    value["checkpoints"] = None
    await adapter.save(value)
    assert await adapter.load(value["id"]) == value


# --- JSON files ------------------------------------------------------------------


async def test_files_are_named_by_id_and_no_temp_file_remains(tmp_path: Path) -> None:
    store = JSONDirectoryAdapter(tmp_path / "d")
    value = doc()
    await store.save(value)
    await store.save(value)
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == [f"{value['id']}.json"]


async def test_failed_write_leaves_the_previous_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = JSONDirectoryAdapter(tmp_path)
    old = doc()
    await store.save(old)
    target = tmp_path / f"{old['id']}.json"
    before = target.read_bytes()

    def broken_replace(src: Any, dst: Any) -> None:
        raise OSError("disk on fire")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(PersistenceError, match="disk on fire"):
        await store.save({**old, "metadata": {"new": True}})
    monkeypatch.undo()
    assert target.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == [target.name]  # temp file removed


async def test_write_is_fsynced_before_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        calls.append("fsync")
        real_fsync(fd)

    def replace(src: Any, dst: Any) -> None:
        calls.append("replace")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    await JSONDirectoryAdapter(tmp_path).save(doc())
    # File data before the rename, the directory entry after it.
    assert calls == ["fsync", "replace", "fsync"]


@pytest.mark.parametrize("bad_id", ["../escape", "a/b", ".hidden", ""])
async def test_unsafe_ids_are_refused(tmp_path: Path, bad_id: str) -> None:
    store = JSONDirectoryAdapter(tmp_path / "d")
    with pytest.raises(PersistenceError):
        await store.save({"id": bad_id} if bad_id else {"id": "x/"})
    with pytest.raises(PersistenceError):
        await store.load(bad_id or "x/")
    assert not (tmp_path / "escape.json").exists()


async def test_corrupt_file_is_reported(tmp_path: Path) -> None:
    store = JSONDirectoryAdapter(tmp_path)
    session_id = str(uuid.uuid4())
    (tmp_path / f"{session_id}.json").write_text('{"id": ')
    with pytest.raises(PersistenceError, match="not valid JSON"):
        await store.load(session_id)
    (tmp_path / f"{session_id}.json").write_text("[1, 2]")
    with pytest.raises(PersistenceError, match="JSON object"):
        await store.load(session_id)


async def test_list_ignores_other_files(tmp_path: Path) -> None:
    store = JSONDirectoryAdapter(tmp_path)
    assert await JSONDirectoryAdapter(tmp_path / "missing").list() == []
    value = doc()
    await store.save(value)
    (tmp_path / ".tmp123.tmp").write_text("x")
    (tmp_path / "notes.txt").write_text("x")
    assert await store.list() == [value["id"]]


# --- SQLite ----------------------------------------------------------------------


async def test_sqlite_uses_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with SQLiteAdapter(path) as store:
        await store.save(doc())
        assert await store.journal_mode() == "wal"
    # WAL is a property of the file: a plain connection sees it too.
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()


async def test_sqlite_is_durable_across_connections(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    value = doc()
    writer = SQLiteAdapter(path)
    await writer.save(value)
    # Another connection sees the committed value while the writer is open.
    async with SQLiteAdapter(path) as reader:
        assert await reader.load(value["id"]) == value
    await writer.aclose()
    async with SQLiteAdapter(path) as again:
        assert await again.list() == [value["id"]]


def checkpoint_rows(path: Path) -> list[tuple[str, int, int]]:
    conn = sqlite3.connect(path)
    try:
        return list(
            conn.execute("SELECT id, seq, rowid FROM uap_owned_checkpoints ORDER BY seq").fetchall()
        )
    finally:
        conn.close()


async def test_sqlite_writes_only_new_checkpoints(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    value = doc(checkpoints=2)
    async with SQLiteAdapter(path) as store:
        await store.save(value)
        first = checkpoint_rows(path)
        assert [row[0] for row in first] == [c["id"] for c in value["checkpoints"]]
        sid = value["id"]
        value["checkpoints"].append({"id": str(uuid.uuid4()), "sessionId": sid, "step": 2})
        await store.save(value)
        second = checkpoint_rows(path)
        # The two old rows were not rewritten (same rowids); one row was added.
        assert second[:2] == first
        assert len(second) == 3
        # A checkpoint that changed is rewritten; one no longer listed is deleted.
        value["checkpoints"][0]["metadata"] = {"edited": True}
        del value["checkpoints"][1]
        await store.save(value)
        third = checkpoint_rows(path)
        assert [row[0] for row in third] == [c["id"] for c in value["checkpoints"]]
        assert await store.load(sid) == value


async def test_sqlite_delete_removes_checkpoints(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    value = doc(checkpoints=3)
    async with SQLiteAdapter(path) as store:
        await store.save(value)
        await store.delete(value["id"])
    assert checkpoint_rows(path) == []


async def test_sqlite_keeps_checkpoint_order_and_key_order(tmp_path: Path) -> None:
    value = doc(checkpoints=12)
    async with SQLiteAdapter(tmp_path / "s.db") as store:
        await store.save(value)
        loaded = await store.load(value["id"])
    assert loaded is not None
    assert [c["step"] for c in loaded["checkpoints"]] == list(range(12))
    assert list(loaded) == list(value)


async def test_sqlite_error_is_a_persistence_error(tmp_path: Path) -> None:
    (tmp_path / "not-a-db").write_text("this is not a database file, just some text" * 100)
    store = SQLiteAdapter(tmp_path / "not-a-db")
    with pytest.raises(PersistenceError):
        await store.load(str(uuid.uuid4()))


# --- owners: sessions are kept by (owner, session id) ---------------------------


def owned(value: dict[str, Any], owner: Principal) -> dict[str, Any]:
    return {**value, "owner": {"scheme": owner.scheme, "id": owner.id}}


async def test_two_owners_keep_separate_sessions_of_one_id(adapter: PersistenceAdapter) -> None:
    """Ids from servers are unique per principal: one id, two owners, two records."""
    base = doc()
    sid = base["id"]
    mine, theirs = owned(base, ALICE), owned({**base, "metadata": {"task": "b"}}, BOB)
    await adapter.save(mine)
    await adapter.save(theirs)
    assert await adapter.load(sid, owner=ALICE) == mine
    assert await adapter.load(sid, owner=BOB) == theirs
    # Another owner's id answers exactly as an id never saved.
    assert await adapter.load(sid) is None
    assert await adapter.load(sid, owner=Principal(id="alice", scheme="api_key")) is None
    assert await adapter.list(owner=ALICE) == [sid]
    assert await adapter.list() == []
    await adapter.delete(sid, owner=BOB)
    assert await adapter.load(sid, owner=BOB) is None
    assert await adapter.load(sid, owner=ALICE) == mine  # bob's delete left alice's alone


@pytest.mark.parametrize("bad", [{"id": "alice"}, "alice", {"scheme": 1, "id": "x"}])
async def test_a_malformed_owner_is_refused(adapter: PersistenceAdapter, bad: Any) -> None:
    with pytest.raises(PersistenceError):
        await adapter.save({**doc(), "owner": bad})


def owner_model(messages: list[Any], tools: list[Any]) -> str:
    return "noted"


async def test_session_records_its_owner_in_itself_and_every_checkpoint(tmp_path: Path) -> None:
    async with SQLiteAdapter(tmp_path / "s.db") as store:
        sess = Session(agent(model=function(owner_model)), persistence=store, owner=ALICE)
        await sess.run("remember this")
        saved = sess.to_json()
        assert saved["owner"] == {"scheme": "jwt", "id": "alice"}
        assert saved["checkpoints"]
        assert {str(c["owner"]) for c in saved["checkpoints"]} == {str(saved["owner"])}
        again = await Session.load(sess.id, agent(model=function(owner_model)), store, owner=ALICE)
        assert again.owner == ALICE and again.history() == sess.history()
        assert all(c.owner == ALICE for c in again.checkpoints)
        for stranger in (BOB, None):
            with pytest.raises(LookupError):
                await Session.load(
                    sess.id, agent(model=function(owner_model)), store, owner=stranger
                )
    # A checkpoint of another owner inside a session is refused on load.
    forged = {
        **saved,
        "checkpoints": [{**saved["checkpoints"][0], "owner": {"scheme": "jwt", "id": "bob"}}],
    }
    with pytest.raises(SerializationError, match="owner"):
        Session.from_json(forged, agent(model=function(owner_model)))


async def test_sqlite_file_of_the_first_schema_moves_to_owned_tables(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    value = doc(checkpoints=2)
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE uap_sessions (id TEXT PRIMARY KEY, updated_at TEXT, split INTEGER NOT NULL,"
        " body TEXT NOT NULL);"
        "CREATE TABLE uap_checkpoints (session_id TEXT NOT NULL, id TEXT NOT NULL,"
        " seq INTEGER NOT NULL, digest TEXT NOT NULL, body TEXT NOT NULL,"
        " PRIMARY KEY (session_id, id));"
    )
    head = {**value, "checkpoints": None}
    conn.execute(
        "INSERT INTO uap_sessions VALUES (?, ?, 1, ?)",
        (value["id"], value["updatedAt"], orjson.dumps(head).decode()),
    )
    for seq, cp in enumerate(value["checkpoints"]):
        conn.execute(
            "INSERT INTO uap_checkpoints VALUES (?, ?, ?, 'x', ?)",
            (value["id"], cp["id"], seq, orjson.dumps(cp).decode()),
        )
    conn.commit()
    conn.close()
    async with SQLiteAdapter(path) as store:
        assert await store.load(value["id"]) == value  # unowned
        assert await store.load(value["id"], owner=ALICE) is None
    check = sqlite3.connect(path)
    names = {r[0] for r in check.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    check.close()
    assert "uap_sessions" not in names and "uap_owned_sessions" in names


# --- a process killed in the middle of a run -------------------------------------

CHILD_SCRIPT = '''
"""Run a many-step agent in a SQLite-backed session; block in step {block_at}."""
import sys
from pathlib import Path

import trio

from uamp_agents.agent import agent
from uamp_agents.providers import function
from uamp_agents.session import session

db, ready, id_file = (Path(p) for p in sys.argv[1:4])
BLOCK_AT = {block_at}


def model(messages, tools):
    done = sum(1 for m in messages if m.role == "tool")
    return [("work", {{"n": done + 1}})] if done < 100 else "finished"


async def work(n: int) -> str:
    """Do step n of the job.

    Args:
        n: The step number.
    """
    if n == BLOCK_AT:
        ready.write_text(str(n))
        await trio.sleep_forever()
    return f"did {{n}}"


async def main():
    sess = session(agent(model=function(model), tools=[work]), persistence=db)
    id_file.write_text(sess.id)
    await sess.run("start the job")


trio.run(main)
'''


async def test_sigkill_mid_run_loses_at_most_the_step_in_progress(tmp_path: Path) -> None:
    block_at = 4
    script = tmp_path / "child.py"
    script.write_text(CHILD_SCRIPT.format(block_at=block_at))
    db, ready, id_file = tmp_path / "sessions.db", tmp_path / "ready", tmp_path / "id"
    python = "/work/venv/bin/python" if Path("/work/venv/bin/python").exists() else sys.executable
    child = subprocess.Popen(
        [python, str(script), str(db), str(ready), str(id_file)],
        stderr=subprocess.PIPE,
    )
    try:
        with trio.fail_after(60):
            while not ready.exists():
                if child.poll() is not None:
                    raise AssertionError(f"child exited early: {child.stderr.read()!r}")
                await trio.sleep(0.05)
        child.send_signal(signal.SIGKILL)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        child.stderr.close()
    assert child.returncode == -signal.SIGKILL

    session_id = id_file.read_text()
    replies = iter(["recovered"])
    restart = agent(model=function(lambda messages, tools: next(replies)))
    async with SQLiteAdapter(db) as store:
        restored = await Session.load(session_id, restart, store)
        done = block_at - 1
        # Every completed step has its checkpoint; the blocked one has none.
        assert [c.step for c in restored.checkpoints] == list(range(1, done + 1))
        last = restored.checkpoints[-1]
        roles = [m.role for m in last.state.messages]
        assert roles == ["user"] + ["assistant", "tool"] * done
        results = [m.content for m in last.state.messages if m.role == "tool"]
        assert results == [f"did {n}" for n in range(1, done + 1)]
        # The thread tree shows the same completed steps.
        assert restored.history() == last.state.messages
        assert restored.step == done
        await restored.restore(last.id)
        assert restored.history() == last.state.messages
        turn = await restored.run("carry on")
        assert turn.response.text == "recovered"
        assert restored.history()[: len(last.state.messages)] == last.state.messages
