"""Id sources: the core never makes up ids on its own; it asks one of these.

An id source is a callable taking a prefix (``"evt"``, ``"resp"``,
``"sess"``, ``"call"`` ...) and returning a fresh id string. Pass your own
for deterministic tests or ids that must follow a scheme of yours.
"""

from __future__ import annotations

import itertools
import operator
import os
import re
from collections.abc import Callable, Iterator

__all__ = [
    "RANDOM_BATCH",
    "IdSource",
    "counter_ids",
    "event_id_stem",
    "numbered",
    "random_hex",
    "random_ids",
    "random_uuid4",
    "short_random_ids",
]

#: Makes a fresh id for a prefix.
IdSource = Callable[[str], str]


#: 128-bit values drawn from one ``os.urandom`` call.
RANDOM_BATCH = 64


#: Where each value of a batch lies in the batch's hex digits.
_SLICES = tuple(slice(i, i + 32) for i in range(0, 32 * RANDOM_BATCH, 32))


def _draw() -> Iterator[str]:
    # Cut lazily, in C (a list of the 64 values cost five times as much);
    # ``next`` on it runs no Python code, so two threads never share a value.
    return map(operator.getitem, itertools.repeat(os.urandom(16 * RANDOM_BATCH).hex()), _SLICES)


_pool: Iterator[str] = iter(())
_uuids: Iterator[str] = iter(())

#: A hex digit -> the same digit with its two high bits set to ``10`` (the RFC 4122 variant).
_VARIANT = {f"{d:x}": f"{d & 0x3 | 0x8:x}" for d in range(16)}


def _draw_uuids() -> Iterator[str]:
    h, v = os.urandom(16 * RANDOM_BATCH).hex(), _VARIANT
    return iter(
        [
            f"{h[i : i + 8]}-{h[i + 8 : i + 12]}-4{h[i + 13 : i + 16]}-"
            f"{v[h[i + 16]]}{h[i + 17 : i + 20]}-{h[i + 20 : i + 32]}"
            for i in range(0, 32 * RANDOM_BATCH, 32)
        ]
    )


def _forget() -> None:
    global _pool, _uuids
    _pool = _uuids = iter(())


os.register_at_fork(after_in_child=_forget)  # a forked child draws its own


def random_hex() -> str:
    """128 random bits as 32 hex digits: ``os.urandom(16).hex()``, a system call per 64.

    The bytes come from ``os.urandom`` 64 values at a time (one ``getrandom``
    system call each, most of a short request's id cost on a virtual
    machine); ``next`` on a list iterator holds the GIL, so two threads never
    get the same value.
    """
    global _pool
    value = next(_pool, None)
    if value is None:
        _pool = _draw()
        value = next(_pool)
    return value


def random_uuid4() -> str:
    """A random UUID (version 4) as text: ``str(uuid.uuid4())``'s, a system call per 64.

    The 128 bits come from ``os.urandom`` 64 ids at a time, formatted in one
    go (the version digit replaced by ``4``, the variant digit's two high
    bits set to ``10``: what ``uuid.UUID(bytes=..., version=4)`` does).
    """
    global _uuids
    for value in _uuids:  # the next of the batch, if any is left
        return value
    _uuids = _draw_uuids()
    return next(_uuids)


def random_ids(prefix: str) -> str:
    """A random id: ``<prefix>_<32 hex digits>`` (the default source).

    The 128 bits come straight from the OS (``uuid4().hex`` costs five
    times as much for the same length). Content ids (prefix ``"content"``,
    UAMP section 8.5.4) and event ids (prefix ``"evt"``, section 4) are bare
    UUID strings, as the spec asks.
    """
    if prefix == "content" or prefix == "evt":
        return random_uuid4()
    global _pool
    value = next(_pool, None)  # random_hex(), inline: a response's id is on its way to the client
    if value is None:
        _pool = _draw()
        value = next(_pool)
    return f"{prefix}_{value}"


def short_random_ids(prefix: str) -> str:
    """A random id of OpenAI's usual length, ``<prefix>_<24 hex digits>`` (Realtime's default).

    96 of :func:`random_hex`'s bits: Realtime names every event it sends, so
    these come from the same batched draw, not a system call each.
    """
    return f"{prefix}_{random_hex()[:24]}"


def counter_ids(start: int = 1) -> IdSource:
    """A deterministic source: ``evt_1``, ``resp_2`` ... (one counter for all prefixes)."""
    counter = itertools.count(start)

    def make(prefix: str) -> str:
        return f"{prefix}_{next(counter)}"

    return make


_UUID_SHAPE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")
#: The first value of a UUID event id's last group: 12 digits until 10**12 events.
_FIRST_LAST_GROUP = 10**11


def event_id_stem(stem: str) -> tuple[str, int]:
    """How one connection numbers its events: ``(prefix, last number used)``.

    The connection's ``event_id`` is ``prefix + str(n)`` for n counting up
    from the number after the one returned. A UUID stem (what
    :func:`random_ids` gives) makes UUIDs, as UAMP section 4 asks: the
    stem's groups but the last, whose 12 digits count up from
    ``100000000000`` (decimal digits are hex digits too; connections differ
    by the stem's random bits), so no event draws random bytes, which the
    delta path cannot afford. Any other stem makes ``<stem>.1``,
    ``<stem>.2`` ... (deterministic sources).
    """
    if _UUID_SHAPE.match(stem):
        return stem[:24], _FIRST_LAST_GROUP - 1
    return stem + ".", 0


#: The last two digits of a number, as ``str`` writes them, and zero-padded.
_LOW_DIGITS = tuple(str(i) for i in range(100))
_TWO_DIGITS = tuple(f"{i:02d}" for i in range(100))


def numbered(prefix: str, after: int) -> Iterator[str]:
    """``prefix + str(n)`` for n = ``after + 1``, ``after + 2`` ... (``after >= 0``), endlessly.

    How a connection names its events (:func:`event_id_stem` gives the two
    arguments). Each hundred shares its text but for the last two digits,
    so the integer is converted to text once per hundred values, not for
    each (that conversion was most of an event id's cost), and ``next``
    runs no Python code but once per hundred.
    """
    block, low = divmod(after + 1, 100)
    first = map(
        operator.add,
        itertools.repeat(f"{prefix}{block}" if block else prefix),
        (_TWO_DIGITS if block else _LOW_DIGITS)[low:],
    )

    def hundred(number: int) -> Iterator[str]:
        return map(operator.add, itertools.repeat(f"{prefix}{number}"), _TWO_DIGITS)

    rest = itertools.chain.from_iterable(map(hundred, itertools.count(block + 1)))
    return itertools.chain(first, rest)
