"""A human in the loop over AG-UI with the real ``@ag-ui/client`` 1.0 (issue 30).

Run 1 ends with ``RUN_FINISHED`` whose outcome is ``interrupt``; the client
keeps it in ``pendingInterrupts`` and run 2 answers it with ``resume``
entries (built by the client's own ``buildResumeArray``), streaming the rest
of the run that waited on the server.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests._support.approvals import approving
from tests._support.npm import install_client, run_node
from uamp_trio.app import create_app

CLIENT = Path(__file__).parent / "agui_client"
USER = {"id": "u1", "role": "user", "content": "what is 2+3?"}


@pytest.fixture(scope="module")
def client_dir() -> Path:
    return install_client(CLIENT, "agui-client", script="hitl.mjs")


def _run(client_dir: Path, url: str, **input: Any) -> dict[str, Any]:
    return run_node(client_dir, url, json.dumps(input), script="hitl.mjs")


def _text(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")


@pytest.mark.parametrize(
    ("response", "says"),
    [
        ({"status": "resolved", "payload": {"approved": True}}, "2 + 3 = 5"),
        ({"status": "resolved", "payload": {"approved": False, "reason": "no"}}, "denied"),
        (
            {"status": "resolved", "payload": {"approved": True, "editedArgs": {"a": 2, "b": 40}}},
            "42",
        ),
        ({"status": "cancelled"}, "denied"),
    ],
    ids=["approve", "deny", "edit", "cancel"],
)
def test_interrupt_then_resume(
    client_dir: Path, thread_server: Any, response: dict[str, Any], says: str
) -> None:
    server = thread_server(create_app([approving()]))
    url = f"{server.url}/agents/demo/agui"
    got = _run(client_dir, url, threadId="t-1", messages=[USER], response=response)
    finished = got["first"][-1]
    assert finished["type"] == "RUN_FINISHED"
    assert finished["outcome"]["type"] == "interrupt"
    (interrupt,) = got["pending"]
    assert interrupt["reason"] == "tool_approval"
    assert interrupt["metadata"]["tool"] == "add"
    assert interrupt["metadata"]["arguments"] == {"a": 2, "b": 3}
    assert interrupt["toolCallId"]
    assert "expiresAt" in interrupt
    # Run 1 said nothing after the ask; run 2 carries the rest of the same turn.
    assert "5" not in _text(got["first"])
    second = got["second"]
    assert second[0]["type"] == "RUN_STARTED" and second[-1]["type"] == "RUN_FINISHED"
    assert second[-1].get("outcome", {"type": "success"})["type"] == "success"
    assert says in _text(second)
    assert got["after"] == []  # the client cleared its pending interrupts


def test_a_paused_thread_takes_answers_from_any_client_and_nothing_else(
    client_dir: Path, thread_server: Any
) -> None:
    server = thread_server(create_app([approving()]))
    url = f"{server.url}/agents/demo/agui"
    first = _run(client_dir, url, threadId="t-2", messages=[USER], only="first")
    (interrupt,) = first["pending"]
    # Another client (a fresh HttpAgent, no pendingInterrupts) runs the thread
    # without answering: refused, the turn stays paused.
    plain = _run(client_dir, url, threadId="t-2", messages=[USER], only="resume", resume=[])
    assert plain["second"][-1]["type"] == "RUN_ERROR"
    assert plain["second"][-1]["code"] == "interrupt_pending"
    made_up = [{"interruptId": "int_nope", "status": "resolved", "payload": True}]
    bad = _run(client_dir, url, threadId="t-2", messages=[USER], only="resume", resume=made_up)
    assert bad["second"][-1]["code"] == "invalid_resume"
    # It answers by id: the paused turn goes on in its run.
    answer = [{"interruptId": interrupt["id"], "status": "resolved", "payload": True}]
    done = _run(client_dir, url, threadId="t-2", messages=[USER], only="resume", resume=answer)
    assert "2 + 3 = 5" in _text(done["second"])
    assert done["second"][-1]["type"] == "RUN_FINISHED"
