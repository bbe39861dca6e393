"""A human in the loop over ACP with agent-client-protocol's own client (issue 30).

The demo agent asks before it runs ``add``: over the WebSocket carrier that
is the agent's request ``session/request_permission`` with the tool call
(its arguments as ``rawInput``) and the options Allow / Deny; the option the
client's user picks answers it and the prompt goes on. A client that cannot
answer (its handler fails) and a ``cancelled`` outcome deny.
"""

from __future__ import annotations

from typing import Any

import acp
import pytest
from acp.schema import AllowedOutcome, DeniedOutcome
from acp.ws import create_websocket_stream

from tests._support.agents import run_asyncio
from tests._support.approvals import approving
from uamp_trio.app import create_app

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


class _User:
    """An ACP client whose user picks ``choice`` ("allow", "deny", "cancel" or "fail")."""

    def __init__(self, choice: str) -> None:
        self.choice = choice
        self.asked: list[dict[str, Any]] = []
        self.said: list[str] = []

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        content = getattr(update, "content", None)
        text = getattr(content, "text", None)
        if getattr(update, "session_update", None) == "agent_message_chunk" and text:
            self.said.append(text)

    async def request_permission(
        self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any
    ) -> Any:
        self.asked.append(
            {
                "session": session_id,
                "call": tool_call.tool_call_id,
                "input": tool_call.raw_input,
                "title": tool_call.title,
                "options": [(o.option_id, o.kind) for o in options],
            }
        )
        if self.choice == "fail":
            raise acp.RequestError.method_not_found("session/request_permission")
        if self.choice == "cancel":
            return acp.RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return acp.RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=self.choice)
        )

    def on_connect(self, conn: Any) -> None:
        pass


@pytest.mark.parametrize(
    ("choice", "says"),
    [("allow", "2 + 3 = 5"), ("deny", "denied"), ("cancel", "denied"), ("fail", "denied")],
)
def test_request_permission_and_the_chosen_option(
    thread_server: Any, choice: str, says: str
) -> None:
    server = thread_server(create_app([approving()]))
    user = _User(choice)

    async def main() -> None:
        url = server.url.replace("http", "ws") + "/agents/demo/acp/stream"
        # Closed at the end: an open connection holds the server's shutdown for its grace.
        async with acp.connect_to_agent(user, await create_websocket_stream(url)) as conn:
            await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
            session = await conn.new_session(cwd="/tmp", mcp_servers=[])
            reply = await conn.prompt(
                session_id=session.session_id, prompt=[acp.text_block("what is 2+3?")]
            )
        assert reply.stop_reason == "end_turn"
        [asked] = user.asked
        assert asked["session"] == session.session_id
        assert asked["input"] == {"a": 2, "b": 3}
        assert "add" in asked["title"]
        assert asked["options"] == [("allow", "allow_once"), ("deny", "reject_once")]
        assert says in "".join(user.said)

    run_asyncio(main, timeout=30)
