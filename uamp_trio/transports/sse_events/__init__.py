"""UAMP over HTTP + SSE (UAMP section 13.2): ``POST .../events``, ``GET .../events/stream``.

* :mod:`.transport` -- :class:`SSEEventsTransport` and :func:`mount`: the
  endpoints, who owns which session and how many, forwarding a POST to the
  process that holds its session, adopting a session whose process died,
  ``Last-Event-ID`` beyond this process's memory (the event log);
* :mod:`.session` -- one HTTP session's life: its session host, the one
  reader of its events (its stream, or a keeper while none is attached),
  the replay, its expiry.

The WebSocket's session host (:mod:`uamp_trio.hosting.sessions`) does the
protocol; ``uamp_asgi`` has its own binding of the same endpoints.
"""

from __future__ import annotations

from .session import HEARTBEAT as HEARTBEAT
from .session import REPLAY_SIZE as REPLAY_SIZE
from .transport import ROUTES as ROUTES
from .transport import SSEEventsTransport, mount
from .transport import raise_error as raise_error

__all__ = ["SSEEventsTransport", "mount"]
