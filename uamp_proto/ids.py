"""Id sources: the core never makes up ids on its own; it asks one of these.

An id source is a callable taking a prefix (``"evt"``, ``"resp"``,
``"sess"``, ``"call"`` ...) and returning a fresh id string. Pass your own
for deterministic tests or ids that must follow a scheme of yours.
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Callable

__all__ = ["IdSource", "counter_ids", "random_ids"]

#: Makes a fresh id for a prefix.
IdSource = Callable[[str], str]


def random_ids(prefix: str) -> str:
    """A random id: ``<prefix>_<32 hex digits>`` (the default source).

    The 128 bits come straight from the OS (``uuid4().hex`` costs five
    times as much for the same length). Content ids (prefix ``"content"``)
    are bare UUID strings, as UAMP section 8.5.4 asks.
    """
    if prefix == "content":
        return str(uuid.uuid4())
    return f"{prefix}_{os.urandom(16).hex()}"


def counter_ids(start: int = 1) -> IdSource:
    """A deterministic source: ``evt_1``, ``resp_2`` ... (one counter for all prefixes)."""
    counter = itertools.count(start)

    def make(prefix: str) -> str:
        return f"{prefix}_{next(counter)}"

    return make
