"""One ``uamp_asgi`` app under uvicorn in a process of its own, its sessions and tasks shared.

``python -m tests._support.asgi_stores WHERE`` serves the agents below on
127.0.0.1 (a free port) with ``Config(event_log=open_event_log(WHERE),
a2a_tasks=open_task_store(WHERE))`` -- the stores ``uamp serve --store
WHERE`` opens -- and A2A push admitting receivers on 127.0.0.1, and prints
``serving on http://127.0.0.1:PORT`` once its socket listens. Callers
``alice`` and ``bob`` authenticate with the bearer tokens ``alice-key`` and
``bob-key`` (``key-alice`` and ``key-bob`` too, as ``uamp serve
--auth-api-keys`` files name them in the A2A tests). Trio cannot be
imported here (as where it is not installed): the app runs on uvicorn's
asyncio loop, and the ``modules`` agent says which of uamp's Trio side got
loaded (none).
"""

from __future__ import annotations

import socket
import sys
from collections.abc import AsyncIterator

import anyio

import uamp_asgi
from uamp_asgi.responders import function_agent
from uamp_proto import events as ev
from uamp_proto.errors import UampError
from uamp_proto.principal import Principal
from uamp_proto.responder import TurnRequest
from uamp_stores import open_event_log, open_task_store
from uamp_stores.a2a_push import PushSender

#: The deltas ``stall`` sends before it waits for ever (its process is killed then).
STALL_AFTER = 3
TOKENS = {"alice-key": "alice", "bob-key": "bob", "key-alice": "alice", "key-bob": "bob"}


async def echo(turn: TurnRequest) -> AsyncIterator[str | ev.Event]:
    """Says back what it was told, and how many messages the conversation holds."""
    yield f"You said: {turn.messages[-1].text} "
    yield f"({len(turn.messages)} messages)"


async def stall(turn: TurnRequest) -> AsyncIterator[str | ev.Event]:
    """``STALL_AFTER`` deltas, then nothing more: a response its process dies in."""
    for i in range(STALL_AFTER):
        yield f"d{i} "
    await anyio.sleep_forever()
    yield "never"


async def ticker(turn: TurnRequest) -> AsyncIterator[str | ev.Event]:
    """``tick 0 tick 1 ...``, one delta per 50 ms, 400 in all (as ``uamp serve``'s Ticker)."""
    for i in range(400):
        yield f"tick {i} "
        await anyio.sleep(0.05)


async def modules(turn: TurnRequest) -> AsyncIterator[str | ev.Event]:
    """Which of Trio and uamp's Trio side this process loaded (``loaded: []``)."""
    yield f"loaded: {sorted({'uamp_trio', 'uamp_agents'} & set(sys.modules))}"


class Keys:
    """Bearer tokens of :data:`TOKENS`; anything else is refused."""

    async def authenticate(self, token: str | None) -> Principal:
        name = TOKENS.get(token or "")
        if name is None:
            raise UampError("unknown key")
        return Principal(id=name, scheme="api_key")


def main() -> None:
    import uvicorn

    where = sys.argv[1]
    agents = [function_agent(f) for f in (echo, stall, ticker, modules)]
    config = uamp_asgi.Config(
        authenticator=Keys(),
        event_log=open_event_log(where),
        a2a_tasks=open_task_store(where),
        a2a_push=PushSender(allow=["127.0.0.1/32"], backoff=0.05),
    )
    app = uamp_asgi.app(agents, config=config)
    # Named TCP, so asyncio sets TCP_NODELAY on its connections (it checks the
    # protocol number): with Nagle on, every other small reply waits ~40 ms.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    print(f"serving on http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", lifespan="on", ws="websockets-sansio")
    )
    server.run(sockets=[sock])


if __name__ == "__main__":
    sys.modules["trio"] = None  # type: ignore[assignment]  # not installed: importing it fails
    main()
