"""Clients: UAMP over WebSocket and HTTP+SSE (:mod:`.uamp`) and ``uamp chat`` (:mod:`.chat`).

``from uamp_trio.client import connect, connect_sse, ClientError, ...``: this
package re-exports the public names of :mod:`.uamp`. See docs/clients.md and
docs/architecture.md.
"""

from . import uamp
from .uamp import *  # noqa: F403

__all__ = uamp.__all__
