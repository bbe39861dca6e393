"""An agent that streams without end is stopped at the output bound under ``uamp_asgi``.

The scenario of tests/trio/transports/test_output_bound.py
(tests/_support/endless.py) over uamp_asgi's own UAMP WebSocket, which runs
its turns apart from the Trio server (its anyio turn driver, the core's
tracker beside the turn's), and Chat Completions with the openai SDK:
``Config.max_response_output_bytes`` stops the agent, the client gets the
protocol's error, and the next response runs. uvicorn in a thread.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import trio

import uamp_asgi
from tests._support.asgi import uvicorn_server
from tests._support.endless import (
    BOUND,
    Endless,
    completions_stopped_then_next,
    stopped_then_next,
)


@pytest.fixture
def served() -> Iterator[tuple[str, Endless]]:
    """The endless agent under uamp_asgi, bounded at :data:`BOUND` (made outside the test's run)."""
    agent = Endless()
    app = uamp_asgi.app([agent], config=uamp_asgi.Config(max_response_output_bytes=BOUND))
    with uvicorn_server(app) as base:
        yield base, agent


async def test_the_uamp_websocket_stops_an_endless_agent_at_the_bound(
    served: tuple[str, Endless],
) -> None:
    base, agent = served
    with trio.fail_after(60):
        await stopped_then_next(base.replace("http", "ws", 1) + "/agents/endless/uamp", agent)


def test_chat_completions_streaming_ends_with_openais_error_at_the_bound(
    served: tuple[str, Endless],
) -> None:
    completions_stopped_then_next(*served)
