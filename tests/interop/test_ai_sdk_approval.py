"""A human in the loop with the Vercel AI SDK's own client (npm ``ai`` 7.x; issue 30).

The demo agent asks before it runs ``add``: the answer shows the call's tool
part in state ``approval-requested`` (the SDK's ``tool-approval-request``
chunk) and finishes while the turn waits on the server. The user decides
with ``addToolApprovalResponse``; ``sendAutomaticallyWhen`` with
``lastAssistantMessageIsCompleteWithApprovalResponses`` posts it back, and
that answer streams the rest of the same turn into the same assistant
message. The SDK validates every chunk: no warning, no error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests._support.approvals import approving
from tests._support.npm import install_client, run_node
from uamp_trio.app import create_app

CLIENT = Path(__file__).parent / "ai_sdk_client"


@pytest.fixture(scope="module")
def client_dir() -> Path:
    return install_client(CLIENT, "ai-sdk-client", script="hitl.mjs")


@pytest.mark.parametrize(
    ("approved", "says"), [(True, "2 + 3 = 5"), (False, "denied")], ids=["approve", "deny"]
)
def test_tool_approval_request_then_response(
    client_dir: Path, thread_server: Any, approved: bool, says: str
) -> None:
    server = thread_server(create_app([approving()]))
    args = {"chatId": "chat-1", "text": "what is 2+3?", "approved": approved, "reason": "checked"}
    got = run_node(
        client_dir, f"{server.url}/agents/demo/ai-sdk", json.dumps(args), script="hitl.mjs"
    )
    assert got["warnings"] == [] and got["errors"] == []
    [asked] = got["asked"]
    assert asked["input"] == {"a": 2, "b": 3}
    assert asked["approval"]["id"]
    assert len(got["requests"]) == 2  # the question, then the decision
    decided = got["requests"][1]["body"]["messages"][-1]
    [part] = [p for p in decided["parts"] if p.get("approval")]
    assert part["approval"] == {
        "id": asked["approval"]["id"],
        "approved": approved,
        "reason": "checked",
    }
    messages = got["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"]  # one assistant message
    text = "".join(p.get("text", "") for p in messages[-1]["parts"] if p["type"] == "text")
    assert says in text
    assert got["status"] == "ready"
