"""``uamp_agents._ids.uuid4_str``: ``str(uuid.uuid4())``'s text from batched random bytes."""

from __future__ import annotations

import os
import uuid

from hypothesis import given
from hypothesis import strategies as st

from uamp_agents._ids import BATCH, uuid4_str


@given(st.binary(min_size=16, max_size=16))
def test_the_same_text_as_the_uuid_module(raw: bytes) -> None:
    assert uuid4_str(int.from_bytes(raw, "big")) == str(uuid.UUID(bytes=raw, version=4))


def test_fresh_ids_are_version_4_and_distinct_across_batches() -> None:
    made = [uuid4_str() for _ in range(BATCH * 3 + 1)]
    assert len(set(made)) == len(made)
    assert all(uuid.UUID(m).version == 4 and str(uuid.UUID(m)) == m for m in made)


def test_a_forked_child_does_not_reuse_the_parents_bytes() -> None:
    uuid4_str()  # the parent holds a batch with unused ids
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(write, uuid4_str().encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.waitpid(pid, 0)
    os.close(read)
    assert uuid.UUID(child).version == 4
    assert child != uuid4_str()  # the parent's next id is not the child's


@given(st.binary(min_size=16 * BATCH, max_size=16 * BATCH))
def test_fresh_ids_format_their_random_bytes_as_the_uuid_module(raw: bytes) -> None:
    """A batch of fresh ids (formatted as text, no integer) sets the bits ``uuid.UUID`` does."""
    from uamp_proto import ids

    real = ids.os.urandom
    ids._forget()
    ids.os.urandom = lambda n: raw  # type: ignore[assignment]
    try:
        made = [uuid4_str() for _ in range(BATCH)]
    finally:
        ids.os.urandom = real
        ids._forget()
    chunks = [raw[i : i + 16] for i in range(0, len(raw), 16)]
    assert made == [str(uuid.UUID(bytes=c, version=4)) for c in chunks]
    assert made == [uuid4_str(int.from_bytes(c, "big")) for c in chunks]
