"""Random UUID4 strings at a fraction of ``str(uuid.uuid4())``'s cost.

``uuid.uuid4()`` asks the kernel for 16 random bytes per id (one
``getrandom`` system call, most of its 8 us on a virtual machine) and then
builds a :class:`uuid.UUID` to format. A run needs one id per turn and one
per step, so :func:`uuid4_str` takes them from
:func:`uamp_proto.ids.random_uuid4`: ``os.urandom`` drawn 64 ids at a time
(a forked child draws its own) and formatted as text in one go, the same
version and variant bits ``uuid.UUID(bytes=..., version=4)`` sets, the same
text.
"""

from __future__ import annotations

from uamp_proto.ids import RANDOM_BATCH, random_uuid4

__all__ = ["BATCH", "uuid4_str"]

#: Ids drawn from one ``os.urandom`` call.
BATCH = RANDOM_BATCH

_VERSION_MASK = ~(0xF000 << 64) & ~(0xC000 << 48)
_VERSION_BITS = (4 << 76) | (0x8000 << 48)


def uuid4_str(value: int | None = None) -> str:
    """A new random UUID (version 4) as text, ``str(uuid.uuid4())``'s format.

    ``value``: use these 128 bits instead of random ones (for tests).
    """
    if value is None:
        return random_uuid4()
    hexed = "%032x" % (value & _VERSION_MASK | _VERSION_BITS)
    return f"{hexed[:8]}-{hexed[8:12]}-{hexed[12:16]}-{hexed[16:20]}-{hexed[20:]}"
