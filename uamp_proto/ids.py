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

__all__ = ["IdSource", "counter_ids", "event_ids", "random_ids"]

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


def counter_ids(start: int = 1) -> IdSource:
    """A deterministic source: ``evt_1``, ``resp_2`` ... (one counter for all prefixes)."""
    counter = itertools.count(start)

    def make(prefix: str) -> str:
        return f"{prefix}_{next(counter)}"

    return make


_UUID_SHAPE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")
_LOW47 = (1 << 47) - 1


def event_ids(stem: str) -> Callable[[], str]:
    """The ``event_id`` maker of one connection, from one id of its source.

    A UUID stem (what :func:`random_ids` gives) makes UUIDs, as section 4
    asks: its first 80 bits, with the last 48 counting up from the stem's
    own (so each id is unique and UUID-shaped without drawing 16 random
    bytes per event, which the delta path cannot afford). Any other stem
    makes ``<stem>.1``, ``<stem>.2`` ... (deterministic sources).
    """
    # map over a counter calls no Python function per id (the delta path
    # makes one per event).
    if _UUID_SHAPE.match(stem):
        # Counting starts at the stem's last 48 bits less its top bit: 2**47
        # ids before the counter could overflow into the stem's part.
        start = (int(stem[24:], 16) & _LOW47) + 1
        template = stem[:24] + "%012x"
        return map(template.__mod__, itertools.count(start)).__next__
    return map((stem.replace("%", "%%") + ".%d").__mod__, itertools.count(1)).__next__
