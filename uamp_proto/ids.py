"""Id sources: the core never makes up ids on its own; it asks one of these.

An id source is a callable taking a prefix (``"evt"``, ``"resp"``,
``"sess"``, ``"call"`` ...) and returning a fresh id string. Pass your own
for deterministic tests or ids that must follow a scheme of yours.
"""

from __future__ import annotations

import itertools
import os
import re
import uuid
from collections.abc import Callable

__all__ = ["IdSource", "counter_ids", "event_id_stem", "random_ids", "short_random_ids"]

#: Makes a fresh id for a prefix.
IdSource = Callable[[str], str]


def random_ids(prefix: str) -> str:
    """A random id: ``<prefix>_<32 hex digits>`` (the default source).

    The 128 bits come straight from the OS (``uuid4().hex`` costs five
    times as much for the same length). Content ids (prefix ``"content"``,
    UAMP section 8.5.4) and event ids (prefix ``"evt"``, section 4) are bare
    UUID strings, as the spec asks.
    """
    if prefix == "content" or prefix == "evt":
        return str(uuid.uuid4())
    return f"{prefix}_{os.urandom(16).hex()}"


def short_random_ids(prefix: str) -> str:
    """A random id of OpenAI's usual length, ``<prefix>_<24 hex digits>`` (Realtime's default)."""
    return f"{prefix}_{os.urandom(12).hex()}"


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
