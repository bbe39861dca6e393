"""An ASGI app served by uvicorn (asyncio) in a thread, on a free port of 127.0.0.1.

Also agents and stores the tests that run against both servers share.
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from uamp_proto import events as ev
from uamp_proto.responder import TurnRequest

#: How long uvicorn may take to start or stop.
STARTUP = 20.0


@contextmanager
def uvicorn_server(app: Any, **options: Any) -> Iterator[str]:
    """Serve ``app`` with uvicorn in a thread; yields its base URL (``http://127.0.0.1:PORT``).

    ``options``: more ``uvicorn.Config`` options (``root_path``; ``ws``, its WebSocket
    implementation, ``websockets-sansio`` unless said).
    """
    import uvicorn

    options.setdefault("ws", "websockets-sansio")
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, log_level="warning", lifespan="on", **options
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + STARTUP
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(STARTUP)


@contextmanager
def fastapi_with_framework_agents() -> Iterator[str]:
    """A FastAPI app with uamp_asgi at ``/agents``: pydantic-ai "demo", OpenAI Agents SDK "oaa"."""
    import fastapi

    import uamp_asgi
    from tests._support import framework_agents
    from uamp_asgi.responders import openai_agents_agent, pydantic_ai_agent

    agents = [
        pydantic_ai_agent(framework_agents.pydantic_ai_agent("demo")),
        openai_agents_agent(framework_agents.openai_agents_agent("oaa")),
    ]
    api = fastapi.FastAPI()
    api.mount("/agents", uamp_asgi.app(agents))
    with uvicorn_server(api) as url:
        yield url


async def ticker(turn: TurnRequest) -> AsyncIterator[str | ev.Event]:
    """``tick 0 tick 1 ...``: as many as the last message says, one every 20 ms
    (``tests._support.agents.Ticker`` on anyio)."""
    for i in range(int(turn.messages[-1].text)):
        await anyio.sleep(0.02)
        yield f"tick {i} "


async def slow(turn: TurnRequest) -> AsyncIterator[str | ev.Event]:
    """Says ``working ``, then works until cancelled (``WorkingAgent`` on anyio)."""
    yield "working "
    await anyio.sleep_forever()
    yield "never"


def event_log(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    """A fresh event log: ``memory``, a SQLite file in ``tmp_path``, or a real Redis."""
    import uuid

    from uamp_stores import MemoryEventLog, open_event_log

    if kind == "memory":
        return MemoryEventLog(max_sessions=4096, max_sessions_per_principal=256)
    if kind == "sqlite":
        return open_event_log(f"sqlite:{tmp_path / 'responses.db'}")
    url: str = request.getfixturevalue("redis_url")
    db = 1 + uuid.uuid4().int % 15  # tests of other files use db 0
    return open_event_log(f"{url.rsplit('/', 1)[0]}/{db}")


@contextmanager
def fastapi_with(agents: list[Any], **config: Any) -> Iterator[str]:
    """A FastAPI app with uamp_asgi at ``/agents`` (its lifespan run) under uvicorn."""
    import fastapi

    import uamp_asgi

    uamp_app = uamp_asgi.app(agents, config=uamp_asgi.Config(**config))
    api = fastapi.FastAPI(lifespan=uamp_app.lifespan)
    api.mount("/agents", uamp_app)
    with uvicorn_server(api) as url:
        yield url
