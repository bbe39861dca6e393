"""Where sessions are kept: persistence adapters (UAP sections 6.3, 15.4).

An adapter stores SessionJSON values by ``(owner, session id)``: the owner
is the principal the session runs for (:func:`owner_key`). Three are provided:

* :class:`MemoryAdapter` -- in this process only (the default of
  :func:`uamp_agents.session`);
* :class:`JSONDirectoryAdapter` -- one JSON file per session in a directory,
  each replaced atomically;
* :class:`SQLiteAdapter` -- one SQLite file in WAL mode, the embedded default
  for durable sessions; checkpoints are rows of their own, so saving after
  each step writes only what is new.

Any object with the four async methods of :class:`PersistenceAdapter` can be
given to a session instead.
"""

from __future__ import annotations

from ._base import PersistenceAdapter, PersistenceError, owner_key
from ._files import JSONDirectoryAdapter
from ._memory import MemoryAdapter
from ._sqlite import SQLiteAdapter

__all__ = [
    "JSONDirectoryAdapter",
    "MemoryAdapter",
    "PersistenceAdapter",
    "PersistenceError",
    "SQLiteAdapter",
    "owner_key",
]
