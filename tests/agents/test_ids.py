"""The runtime's ids, `uamp_proto.ids.random_uuid4`: `str(uuid.uuid4())`'s text, batched bytes."""

from __future__ import annotations

import os
import uuid

from hypothesis import given
from hypothesis import strategies as st

from uamp_proto.ids import RANDOM_BATCH as BATCH
from uamp_proto.ids import random_uuid4


def test_fresh_ids_are_version_4_and_distinct_across_batches() -> None:
    made = [random_uuid4() for _ in range(BATCH * 3 + 1)]
    assert len(set(made)) == len(made)
    assert all(uuid.UUID(m).version == 4 and str(uuid.UUID(m)) == m for m in made)


def test_a_forked_child_does_not_reuse_the_parents_bytes() -> None:
    random_uuid4()  # the parent holds a batch with unused ids
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(write, random_uuid4().encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.waitpid(pid, 0)
    os.close(read)
    assert uuid.UUID(child).version == 4
    assert child != random_uuid4()  # the parent's next id is not the child's


@given(st.binary(min_size=16 * BATCH, max_size=16 * BATCH))
def test_fresh_ids_format_their_random_bytes_as_the_uuid_module(raw: bytes) -> None:
    """A batch of fresh ids (formatted as text, no integer) sets the bits ``uuid.UUID`` does."""
    from uamp_proto import ids

    real = ids.os.urandom
    ids._forget()
    ids.os.urandom = lambda n: raw  # type: ignore[assignment]
    try:
        made = [random_uuid4() for _ in range(BATCH)]
    finally:
        ids.os.urandom = real
        ids._forget()
    chunks = [raw[i : i + 16] for i in range(0, len(raw), 16)]
    assert made == [str(uuid.UUID(bytes=c, version=4)) for c in chunks]
