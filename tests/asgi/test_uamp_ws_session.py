"""uamp_asgi's UAMP WebSocket answers a session's own requests as uamp serve does.

``session.update`` (``session.updated``; a token for another principal
refused), ``capabilities.query`` (the session's view, another hosted agent's,
an unknown model refused) and delta windows (docs/flow.md: a delta past the
window waits for the client's ack, none is dropped). uvicorn serves the app;
uamp's own client drives it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import trio

import uamp_asgi
from tests._support.asgi import uvicorn_server
from uamp_asgi.responders import function_agent
from uamp_proto import events as ev
from uamp_proto.responder import TurnRequest
from uamp_trio.client import connect
from uamp_trio.client.uamp import ClientSession
from uamp_trio.trust.auth import APIKeyAuthenticator

TIMEOUT = 30
WORDS = [f"w{i} " for i in range(12)]


async def words(turn: TurnRequest) -> AsyncIterator[str | ev.Event]:
    """Twelve deltas, one word each."""
    for word in WORDS:
        yield word


async def other(turn: TurnRequest) -> AsyncIterator[str | ev.Event]:
    """Another hosted agent."""
    yield "other"


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    auth = APIKeyAuthenticator([("alice", "sk-alice"), ("alice", "sk-alice-2"), ("bob", "sk-bob")])
    config = uamp_asgi.Config(authenticator=auth)
    agents = [function_agent(words), function_agent(other)]
    with uvicorn_server(uamp_asgi.app(agents, config=config)) as url:
        yield url.replace("http://", "ws://")


ALICE = [("authorization", "Bearer sk-alice")]


async def _error(session: ClientSession, n: int) -> ev.SessionErrorEvent:
    while len(session.errors) <= n:
        await trio.sleep(0.01)
    return session.errors[n]


async def test_session_update_is_answered_and_another_principals_token_refused(base: str) -> None:
    with trio.fail_after(TIMEOUT):
        async with connect(f"{base}/agents/words/uamp", headers=ALICE) as client:
            session = await client.create_session()
            await session.update(token="sk-alice-2")  # returns on session.updated
            await session.send(ev.SessionUpdate(token="sk-bob"))
            refused = await _error(session, 0)
            assert refused.error.code == "unauthorized"
            assert refused.error.details == {"field": "token"}
            await session.send(ev.SessionUpdate(token="sk-nobody"))
            assert (await _error(session, 1)).error.code == "unauthorized"
            # The session goes on, as alice.
            assert (await session.ask("hi")).text == "".join(WORDS)


async def test_capabilities_query_answers_the_session_and_other_hosted_agents(base: str) -> None:
    with trio.fail_after(TIMEOUT):
        async with connect(f"{base}/ws", headers=ALICE) as client:
            session = await client.create_session("words")
            caps = await session.query_capabilities()
            assert caps.id is not None and "words" in caps.id
            await session.send(ev.CapabilitiesQuery(model="other"))
            while session.capabilities is None or "other" not in (session.capabilities.id or ""):
                await trio.sleep(0.01)
            await session.send(ev.CapabilitiesQuery(model="nobody"))
            refused = await _error(session, 0)
            assert refused.error.code == "unsupported"
            assert refused.error.details == {"field": "model"}


@pytest.mark.parametrize("window", [1, 3])
async def test_a_delta_window_holds_deltas_until_acked_and_loses_none(
    base: str, window: int
) -> None:
    with trio.fail_after(TIMEOUT):
        async with connect(f"{base}/agents/words/uamp", headers=ALICE, delta_window=window) as c:
            session = await c.create_session()
            assert session.delta_window == window
            for _ in range(2):
                result = await session.ask("count")
                assert result.text == "".join(WORDS)
