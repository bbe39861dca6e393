"""Random UUID4 strings at a fraction of ``str(uuid.uuid4())``'s cost.

``uuid.uuid4()`` asks the kernel for 16 random bytes per id (one
``getrandom`` system call, most of its 8 us on a virtual machine) and then
builds a :class:`uuid.UUID` to format. A run needs one id per turn, so
:func:`uuid4_str` takes its bytes from the same source (``os.urandom``) 64
ids at a time and formats them directly: the same version and variant bits
``uuid.UUID(bytes=..., version=4)`` sets, the same text. A forked child
drops the parent's unused bytes, so two processes never share an id.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

__all__ = ["uuid4_str"]

#: Ids drawn from one ``os.urandom`` call.
BATCH = 64

_VERSION_MASK = ~(0xF000 << 64) & ~(0xC000 << 48)
_VERSION_BITS = (4 << 76) | (0x8000 << 48)


def _batch() -> Iterator[int]:
    data = os.urandom(16 * BATCH)
    return iter([int.from_bytes(data[i : i + 16], "big") for i in range(0, len(data), 16)])


_pool: Iterator[int] = iter(())


def _forget() -> None:
    global _pool
    _pool = iter(())


os.register_at_fork(after_in_child=_forget)


def uuid4_str(value: int | None = None) -> str:
    """A new random UUID (version 4) as text, ``str(uuid.uuid4())``'s format.

    ``value``: use these 128 bits instead of random ones (for tests).
    """
    global _pool
    if value is None:
        # next() on a list iterator holds the GIL: threads never share an id.
        value = next(_pool, None)
        if value is None:
            _pool = _batch()
            value = next(_pool)
    hexed = "%032x" % (value & _VERSION_MASK | _VERSION_BITS)
    return f"{hexed[:8]}-{hexed[8:12]}-{hexed[12:16]}-{hexed[16:20]}-{hexed[20:]}"
