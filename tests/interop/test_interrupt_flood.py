"""A flood of questions to a human from one principal (issue 30): at most 32 wait at once.

Every AG-UI run of the demo agent that asks before ``add`` ("what is 2+3?")
pauses on an interrupt and stays parked on the server until someone answers
or it expires; a caller could park runs without end. The host keeps at most
``max_pending`` (32 by default) interrupts per principal: past it the ask is
refused at once -- the model sees a denial naming the limit, and the run
ends -- while another principal still asks as usual. Each run is a thread of
its own, on a connection of its own.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import trio

from tests._support.approvals import approving
from tests.interop.test_agui_protocol import run_input
from uamp_proto.interrupts import DEFAULT_MAX_PENDING
from uamp_proto.principal import Principal
from uamp_trio.app import create_app
from uamp_trio.trust.auth import APIKeyAuthenticator

FLOOD = DEFAULT_MAX_PENDING + 8


def _run(url: str, key: str, thread: str) -> str:
    """One run; how it ended: ``interrupt`` (parked) or ``answered`` (ran to its end)."""
    body = run_input("what is 2+3?", threadId=thread, runId=f"r-{thread}")
    headers = {"authorization": f"Bearer {key}"}
    with httpx.stream("POST", url, json=body, headers=headers, timeout=60) as r:
        assert r.status_code == 200
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    finished = events[-1]
    assert finished["type"] == "RUN_FINISHED", finished
    if (finished.get("outcome") or {}).get("type") == "interrupt":
        return "interrupt"
    text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert "denied" in text, text  # the model was told the ask was refused
    return "answered"


def test_one_principal_parks_at_most_32_runs_on_questions(thread_server: Any) -> None:
    keys = APIKeyAuthenticator([("alice", "key-a"), ("bob", "key-b")])
    app = create_app([approving()], authenticator=keys)
    server = thread_server(app)
    url = f"{server.url}/agents/demo/agui"
    with ThreadPoolExecutor(8) as pool:
        ends = list(pool.map(lambda n: _run(url, "key-a", f"t{n}"), range(FLOOD)))
    assert ends.count("interrupt") == DEFAULT_MAX_PENDING
    assert ends.count("answered") == FLOOD - DEFAULT_MAX_PENDING
    alice = Principal(scheme="api_key", id="alice")
    # (The server is idle meanwhile: every run is parked or over.)
    assert len(trio.run(app.interrupts.pending, alice)) == DEFAULT_MAX_PENDING
    # Another principal is not held by alice's flood.
    assert _run(url, "key-b", "bob-1") == "interrupt"
    assert len(app.interrupts) == DEFAULT_MAX_PENDING + 1
