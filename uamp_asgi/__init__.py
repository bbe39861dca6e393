"""uamp as an ASGI application: every HTTP and WebSocket transport for any agent.

``uamp_asgi.app(agents, config=Config(...))`` returns an ASGI app that serves
each agent under the paths ``uamp serve`` uses; mount it in FastAPI or
Starlette, or run it alone under uvicorn, hypercorn or granian. It imports no
Trio: its few tasks and timeouts are anyio's, so it runs on asyncio (and on
Trio under an ASGI server that runs there). See docs/embedding.md.

Agents of other frameworks become responders with
:func:`uamp_asgi.responders.function_agent`,
:func:`~uamp_asgi.responders.pydantic_ai_agent` and
:func:`~uamp_asgi.responders.openai_agents_agent`.
"""

from __future__ import annotations

from .app import UampASGI, app
from .config import Config

__all__ = ["Config", "UampASGI", "app"]
