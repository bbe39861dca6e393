"""A human in the loop over MCP with the ``mcp`` Python SDK's own client (issue 30).

The agent is served as an MCP server; its run asks before it runs ``add``.
A client that declares elicitation (an ``elicitation_callback``) is asked
with ``elicitation/create`` on the call's stream -- a form with one boolean
``approved`` -- and its ``ElicitResult`` answers: accept with approved true
runs the tool, accept with false, decline and cancel deny. A client without
elicitation gets the host's policy (deny at once).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest
from mcp import Client, types

from tests._support.approvals import approving
from uamp_trio.app import create_app

TIMEOUT = 30


def _run(main: Callable[[], Any]) -> Any:
    async def bounded() -> Any:
        with anyio.fail_after(TIMEOUT):
            return await main()

    return anyio.run(bounded)


@pytest.mark.parametrize(
    ("result", "says"),
    [
        (types.ElicitResult(action="accept", content={"approved": True}), "2 + 3 = 5"),
        (types.ElicitResult(action="accept", content={"approved": False}), "denied"),
        (types.ElicitResult(action="decline"), "denied"),
        (types.ElicitResult(action="cancel"), "denied"),
    ],
    ids=["accept", "accept-false", "decline", "cancel"],
)
def test_elicitation_create_and_its_result(
    thread_server: Callable[..., Any], result: types.ElicitResult, says: str
) -> None:
    server = thread_server(create_app([approving()]))
    asked: list[Any] = []

    async def elicit(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params)
        return result

    async def main() -> Any:
        async with Client(f"{server.url}/agents/demo/mcp", elicitation_callback=elicit) as client:
            return await client.call_tool("demo", {"prompt": "what is 2+3?"})

    reply = _run(main)
    [params] = asked
    assert params.mode == "form"
    assert "add" in params.message
    assert params.requested_schema["properties"]["approved"]["type"] == "boolean"
    assert not reply.is_error
    assert says in reply.content[0].text


def test_a_client_without_elicitation_gets_the_deny_policy(
    thread_server: Callable[..., Any],
) -> None:
    server = thread_server(create_app([approving()]))

    async def main() -> Any:
        async with Client(f"{server.url}/agents/demo/mcp") as client:
            return await client.call_tool("demo", {"prompt": "what is 2+3?"})

    reply = _run(main)
    assert "denied" in reply.content[0].text
