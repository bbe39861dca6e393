"""A2A with the JavaScript client: ``@a2a-js/sdk`` (npm) against a real server.

The client is installed with ``npm ci`` from the lock file in
``tests/interop/a2ajs_client/`` (``node_modules`` kept in the tests' cache
folder and reused while the client's files are unchanged, the AG-UI client
test's helper) and run with Node. It resolves the agent card the way a
browser joins URLs, sends a message blocking and streaming, and concatenates
artifact chunks as a UI would: the answer must show exactly once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests._support.agents import TestAgent
from tests._support.npm import install_client, run_node
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.responder import Emit, TurnRequest
from uamp_trio.app import create_app

CLIENT = Path(__file__).parent / "a2ajs_client"
ANSWER = "Hello from uamp, in three chunks."


class Chunky(TestAgent):
    """Answers in three text deltas (each becomes an artifact chunk)."""

    name = "chunky"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        for piece in ("Hello from uamp, ", "in three ", "chunks."):
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text=piece)))


class Other(TestAgent):
    """A second agent: the server hosts several, as real deployments do."""

    name = "other"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="other")))


@pytest.fixture(scope="module")
def client_dir() -> Path:
    """a2ajs_client/ installed with ``npm ci`` under the test cache."""
    return install_client(CLIENT, "a2ajs-client")


def test_the_js_client_resolves_the_card_and_sees_the_answer_once(
    client_dir: Path, thread_server: Any
) -> None:
    server = thread_server(create_app([Chunky(), Other()]))
    got = run_node(client_dir, f"{server.url}/agents/chunky")
    # Browser-style joining: only the base with a trailing slash finds the agent's card;
    # without it the resolver asks for /agents/.well-known/agent-card.json, which names
    # no agent (so no redirect can answer it): docs/a2a.md asks for the trailing slash.
    assert got["slash"] == "chunky"
    wrong = f"{server.url}/agents/.well-known/agent-card.json: 404"
    assert got["noSlash"].startswith("error: ") and got["noSlash"].endswith(wrong)
    assert got["blocking"] == {"state": 3, "text": ANSWER}  # TASK_STATE_COMPLETED
    assert got["streaming"]["text"] == ANSWER
    assert got["streaming"]["kinds"].count("artifactUpdate") >= 3
    assert got["finalState"] == 3
