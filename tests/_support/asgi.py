"""An ASGI app served by uvicorn (asyncio) in a thread, on a free port of 127.0.0.1."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: How long uvicorn may take to start or stop.
STARTUP = 20.0


@contextmanager
def uvicorn_server(app: Any, **options: Any) -> Iterator[str]:
    """Serve ``app`` with uvicorn in a thread; yields its base URL (``http://127.0.0.1:PORT``).

    ``options``: more ``uvicorn.Config`` options (``root_path``).
    """
    import uvicorn

    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        log_level="warning",
        lifespan="on",
        ws="websockets-sansio",
        **options,
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
