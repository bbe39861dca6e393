"""Every chat store (memory, SQLite, Redis) keeps the same promises: one parametrised suite."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from uamp_proto.principal import ANONYMOUS, Principal
from uamp_trio.stores import Stores, open_chat_store
from uamp_trio.stores.chats import (
    ChatRecord,
    ChatStore,
    MemoryChatStore,
    RoomEntry,
    StoredMessage,
)
from uamp_trio.stores.chats_redis import RedisChatStore
from uamp_trio.stores.chats_sqlite import SqliteChatStore

ALICE = Principal(id="alice", scheme="api_key")
BOB = Principal(id="bob", scheme="api_key")
CAROL = Principal(id="carol", scheme="api_key")

Make = Callable[..., ChatStore]


@pytest.fixture(params=["memory", "sqlite", "redis"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Make:
    url = request.getfixturevalue("redis_url") if request.param == "redis" else ""

    def make(max_messages: int = 10_000, name: str = "chats") -> ChatStore:
        if request.param == "memory":
            return MemoryChatStore(max_messages)
        if request.param == "redis":
            return RedisChatStore(url, max_messages, prefix=uuid.uuid4().hex)
        return SqliteChatStore(tmp_path / f"{name}.db", max_messages)

    return make


def _msg(seq: int) -> StoredMessage:
    return StoredMessage(
        seq=seq,
        message_id=f"msg_{seq}",
        sender={"id": "alice", "name": "alice", "kind": "user"},
        message={"role": "user", "content": f"m{seq}"},
        created_at=float(seq),
    )


async def test_a_room_is_found_by_its_owner_and_its_members_only(make_store: Make) -> None:
    store = make_store()
    room = await store.create(ChatRecord(chat_id="c", owner=ALICE.key, members=["bob"]))
    assert (await store.find(ALICE, "c")) == room
    assert (await store.find(BOB, "c")) == room
    # Carol is not listed: for her the id is as unknown as one nobody used.
    assert await store.find(CAROL, "c") is None
    assert await store.find(CAROL, "never") is None
    carols = await store.create(ChatRecord(chat_id="c", owner=CAROL.key))
    assert carols.key != room.key
    assert (await store.find(CAROL, "c")) == carols
    assert (await store.find(BOB, "c")) == room
    # Creating under a key in use gives the room already there.
    again = await store.create(ChatRecord(chat_id="c", owner=ALICE.key, members=[]))
    assert again.members == ["bob"]


async def test_anyone_and_anonymous(make_store: Make) -> None:
    store = make_store()
    await store.create(ChatRecord(chat_id="open", owner=ALICE.key, members=["*"]))
    assert (await store.find(CAROL, "open")) is not None
    await store.create(ChatRecord(chat_id="lobby", owner=ANONYMOUS.key))
    assert (await store.find(ANONYMOUS, "lobby")) is not None
    assert (await store.find(ALICE, "lobby")) is None


async def test_save_keeps_settings_and_read_marks(make_store: Make) -> None:
    store = make_store()
    room = await store.create(ChatRecord(chat_id="c", owner=ALICE.key))
    room.last_seq, room.reads, room.policy = 7, {"alice": 5}, {"respond": "every"}
    await store.save(room)
    found = await store.find(ALICE, "c")
    assert found is not None
    assert (found.last_seq, found.reads, found.policy) == (7, {"alice": 5}, {"respond": "every"})


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    count=st.integers(0, 40),
    keep=st.integers(1, 30),
    after=st.integers(0, 45),
    limit=st.integers(0, 50),
)
def test_history_is_the_newest_kept_in_order(
    make_store: Make, count: int, keep: int, after: int, limit: int
) -> None:
    async def main() -> list[int]:
        store = make_store(max_messages=keep, name=f"h{count}_{keep}_{after}_{limit}")
        room = await store.create(ChatRecord(chat_id=f"c{count}", owner=ALICE.key))
        for seq in range(1, count + 1):
            await store.append(room.key, _msg(seq))
        got = await store.history(room.key, after=after, limit=limit)
        assert all(m == _msg(m.seq) for m in got)
        await store.aclose()
        return [m.seq for m in got]

    kept = [s for s in range(1, count + 1) if s > count - keep and s > after]
    expected = kept[-limit:] if limit else []
    assert trio.run(main) == expected


async def test_sqlite_rooms_survive_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "chats.db"
    first = open_chat_store(f"sqlite:{path}")
    room = await first.create(ChatRecord(chat_id="c", owner=ALICE.key, members=["bob"]))
    await first.append(room.key, _msg(1))
    room.last_seq = 1
    await first.save(room)
    await first.aclose()
    second = open_chat_store(str(path))
    found = await second.find(BOB, "c")
    assert found is not None and found.last_seq == 1
    assert [m.seq for m in await second.history(found.key)] == [1]
    await second.aclose()


def test_the_app_has_a_memory_chat_store_by_default() -> None:
    assert isinstance(Stores().chats, MemoryChatStore)
    assert isinstance(open_chat_store(), MemoryChatStore)


@pytest.mark.parametrize(
    ("store", "kind"),
    [
        ("memory", MemoryChatStore),
        ("redis://127.0.0.1:6379/0", RedisChatStore),
        ("{tmp}/sessions.db", SqliteChatStore),
        ("sqlite:{tmp}/x.db", SqliteChatStore),
    ],
)
def test_uamp_serve_store_flag_decides_where_rooms_live(
    store: str, kind: type[ChatStore], tmp_path: Path
) -> None:
    """``--store`` is passed on as is: the event log and the chat rooms live in one place."""
    chosen = open_chat_store(store.format(tmp=tmp_path))
    assert type(chosen) is kind


async def test_a_rooms_feed_reaches_every_process_in_one_order(redis_url: str) -> None:
    """Two stores on one Redis are two processes: both apply the same entries in one order."""
    prefix = uuid.uuid4().hex
    one, two = RedisChatStore(redis_url, prefix=prefix), RedisChatStore(redis_url, prefix=prefix)
    room = await one.create(ChatRecord(chat_id="c", owner=ALICE.key))
    seen: dict[str, list[RoomEntry]] = {"one": [], "two": []}
    async with trio.open_nursery() as running:
        for name, store in (("one", one), ("two", two)):
            store.ensure_running(running)
            state = await store.open_room(room, seen[name].append, 10)
            assert state.recent == [] and state.present == {}
        await _two_processes_talk(one, two, room, seen)
        running.cancel_scope.cancel()
    # A process opening the room later starts from the same state.
    three = RedisChatStore(redis_url, prefix=prefix)
    state = await three.open_room(room, [].append, 5)
    assert [m.seq for m in state.recent] == [36, 37, 38, 39, 40]
    assert state.record.last_seq == 40 and state.present == {}
    for store in (one, two, three):
        await store.aclose()


async def _two_processes_talk(
    one: ChatStore, two: ChatStore, room: ChatRecord, seen: dict[str, list[RoomEntry]]
) -> None:
    joiner = ({"member": "m1", "user_id": "alice", "username": None, "kind": "user"},)
    one.publish(room.key, RoomEntry(kind="arrive", member="m1", participants=joiner))

    async def say(store: ChatStore, who: str) -> None:
        for n in range(20):
            await store.post(room, attrs.evolve(_msg(0), message_id=f"{who}{n}"))

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(say, one, "a")
            nursery.start_soon(say, two, "b")
        one.publish(room.key, RoomEntry(kind="leave", member="m1"))
        while min(len(seen["one"]), len(seen["two"])) < 42:
            await trio.sleep(0.01)

    def shape(entries: list[RoomEntry]) -> list[tuple[str, str, int]]:
        return [(e.kind, e.message.message_id if e.message else e.member, e.seq) for e in entries]

    assert shape(seen["one"]) == shape(seen["two"])
    order = shape(seen["one"])
    first_of_one = next(i for i, e in enumerate(order) if e[1] == "a0")
    assert order.index(("arrive", "m1", 0)) < first_of_one  # one's entries keep their order
    assert order[-1] == ("leave", "m1", 0)
    numbers = [e.message.seq for e in seen["one"] if e.message is not None]
    assert numbers == list(range(1, 41))  # numbered in the order they entered the feed
    # Each store's own posts kept their order.
    for who in "ab":
        mine = [
            e.message.message_id
            for e in seen["one"]
            if e.message and e.message.message_id[0] == who
        ]
        assert mine == [f"{who}{n}" for n in range(20)]


async def test_idle_rooms_nobody_is_in_expire(make_store: Make) -> None:
    store = make_store()
    quiet = await store.create(ChatRecord(chat_id="quiet", owner=ALICE.key, created=10.0))
    busy = await store.create(ChatRecord(chat_id="busy", owner=ALICE.key, created=10.0))
    open_here = await store.create(ChatRecord(chat_id="open", owner=BOB.key, created=10.0))
    await store.post(busy, attrs.evolve(_msg(0), created_at=50.0))
    await store.post(quiet, attrs.evolve(_msg(0), created_at=20.0))
    assert await store.expire(30.0, keep={open_here.key}) == 1
    assert await store.find(ALICE, "quiet") is None
    assert await store.history(quiet.key) == []
    assert (await store.find(ALICE, "busy")) is not None
    assert (await store.find(BOB, "open")) is not None
    # Its id is free again: the next join makes a new, empty room.
    again = await store.create(ChatRecord(chat_id="quiet", owner=ALICE.key, created=60.0))
    assert again.last_seq == 0 and await store.history(again.key) == []
    assert await store.expire(100.0) == 3
    await store.aclose()


#: A server process that publishes room entries and stops at once, gracefully.
_LAST_ROUND = """
import sys, trio
from uamp_trio import App, Server
from uamp_trio.stores import Stores
from uamp_trio.stores.chats import ChatRecord, RoomEntry
from uamp_trio.stores.chats_redis import RedisChatStore

async def main():
    store = RedisChatStore(sys.argv[1], prefix=sys.argv[2])
    room = await store.create(ChatRecord(chat_id="c", owner=("api_key", "alice")))
    server = Server(App([], stores=Stores(chats=store)), port=0, shutdown_grace=0.5)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        for n in range(int(sys.argv[3])):  # an answer's last entries, queued: never waits
            store.publish(room.key, RoomEntry(kind="leave", member=f"m{n}"))
        server.shutdown()  # SIGTERM's graceful shutdown

trio.run(main)
"""


def test_a_graceful_shutdown_writes_the_feed_entries_still_queued(redis_url: str) -> None:
    """The writer runs as a system task, ended when the process's trio run ends: a
    process that exits right after a drain lost the feed's last round (the end of an
    agent's answer in a room, for the participants on other processes)."""
    import subprocess
    import sys

    import redis

    prefix, count = uuid.uuid4().hex, 200
    done = subprocess.run(
        [sys.executable, "-c", _LAST_ROUND, redis_url, prefix, str(count)],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    client = redis.Redis.from_url(redis_url)
    try:
        (feed,) = client.keys(f"{prefix}:chat:feed:*")
        assert client.xlen(feed) == count
    finally:
        client.close()
