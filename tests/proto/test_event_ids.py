"""Event ids: UUIDs by default (UAMP section 4), numbered for deterministic id sources."""

from __future__ import annotations

import uuid

import orjson
import pytest

from uamp_proto import events as ev
from uamp_proto.connection import ConnectionConfig, ServerConnection
from uamp_proto.ids import counter_ids, event_id_stem, numbered, random_ids


@pytest.mark.parametrize(
    ("stem", "expected"),
    [
        ("0e63df0c-ce44-45f8-b8d4-0d4bf45a7f4b", ("0e63df0c-ce44-45f8-b8d4-", 99_999_999_999)),
        ("evt_7", ("evt_7.", 0)),
        ("0E63DF0C-CE44-45F8-B8D4-0D4BF45A7F4B", ("0E63DF0C-CE44-45F8-B8D4-0D4BF45A7F4B.", 0)),
        ("0e63df0c-ce44-45f8-b8d4-0d4bf45a7f4bx", ("0e63df0c-ce44-45f8-b8d4-0d4bf45a7f4bx.", 0)),
    ],
)
def test_stems(stem: str, expected: tuple[str, int]) -> None:
    assert event_id_stem(stem) == expected


def _ids_of(conn: ServerConnection, n: int) -> list[str]:
    conn.receive(orjson.dumps({"type": "session.create", "session": {}}))
    conn.next_event()
    sid = next(iter(conn.sessions))
    out = [orjson.loads(conn.accept(sid))["event_id"]]
    out += [orjson.loads(conn.send(ev.Pong(session_id=sid)))["event_id"] for _ in range(n)]
    out += [orjson.loads(m)["event_id"] for m in conn.data_to_send()]
    return out


def test_the_default_source_gives_distinct_uuids_per_connection() -> None:
    first = _ids_of(ServerConnection(), 50)
    second = _ids_of(ServerConnection(), 50)
    for event_id in first + second:
        assert str(uuid.UUID(event_id)) == event_id
    assert len(set(first + second)) == len(first) + len(second)
    assert random_ids("evt").count("-") == 4


def test_a_counter_source_numbers_the_events() -> None:
    ids = _ids_of(ServerConnection(ConnectionConfig(ids=counter_ids())), 2)
    assert ids == ["evt_1.1", "evt_1.2", "evt_1.3"]


@pytest.mark.parametrize("after", [0, 1, 98, 99, 100, 101, 199, 12_345, 99_999_999_999])
@pytest.mark.parametrize("prefix", ["evt_1.", "0e63df0c-ce44-45f8-b8d4-"])
def test_numbered_counts_as_str_does(prefix: str, after: int) -> None:
    made = numbered(prefix, after)
    assert [next(made) for _ in range(350)] == [
        f"{prefix}{n}" for n in range(after + 1, after + 351)
    ]
