"""The busy policy on AG-UI: a run on a thread whose run is still active.

Every event is validated by the ag-ui-protocol package's models (as in
test_agui_protocol). ``enqueue`` streams the second run after the first,
``reject`` answers ``409`` (code ``conversation_busy``) before any stream,
``interrupt`` ends the first run with ``RUN_FINISHED`` outcome ``cancelled``
and starts the second, ``rollback`` also says ``result: {"uamp.on_busy":
"rollback"}`` (the thread's messages are the client's: it drops the turn). A
run on another thread is never held. Before the policy, two runs on one
thread ran side by side.
"""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest
from ag_ui.core import EventType

from tests._support.busy import Holder, until
from tests.interop.test_agui_protocol import EVENT, check_order, run_input
from uamp_trio.app import create_app


def _serve(thread_server: Any, **config: Any) -> tuple[Any, Holder]:
    agent = Holder()
    return thread_server(create_app([agent]), **config), agent


def _events(server: Any, body: dict[str, Any]) -> list[Any]:
    with httpx.stream("POST", f"{server.url}/agents/holder/agui", json=body, timeout=20) as resp:
        assert resp.status_code == 200
        events = [EVENT.validate_python(_data(line)) for line in resp.iter_lines() if line]
    check_order(events)
    return events


def _data(line: str) -> Any:
    import json

    assert line.startswith("data: ")
    return json.loads(line[6:])


class _Run(threading.Thread):
    """One run streamed in a thread of its own; its events in :attr:`events`."""

    def __init__(self, server: Any, body: dict[str, Any]) -> None:
        super().__init__(daemon=True)
        self.server, self.body = server, body
        self.events: list[Any] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.events = _events(self.server, self.body)
        except BaseException as exc:  # reported by result()
            self.error = exc

    def result(self) -> list[Any]:
        self.join(20)
        assert not self.is_alive(), "the run did not end"
        if self.error is not None:
            raise self.error
        return self.events


def _text(events: list[Any]) -> str:
    return "".join(e.delta for e in events if e.type == EventType.TEXT_MESSAGE_CONTENT)


def _body(text: str, run_id: str, thread: str = "t1", **props: Any) -> dict[str, Any]:
    return run_input(text, threadId=thread, runId=run_id, forwardedProps=props)


@pytest.mark.parametrize("how", ["server", "props"])
def test_enqueue_streams_the_second_run_after_the_first(thread_server: Any, how: str) -> None:
    server, agent = _serve(thread_server, on_busy="reject" if how == "props" else "enqueue")
    props = {"uamp.on_busy": "enqueue"} if how == "props" else {}
    first = _Run(server, _body("hold one", "r1"))
    first.start()
    until(lambda: agent.started == ["hold one"])
    second = _Run(server, _body("two", "r2", **props))
    second.start()
    other = _events(server, _body("elsewhere", "r3", thread="t2"))  # another thread: not held
    assert _text(other) == "echo elsewhere"
    assert agent.started == ["hold one", "elsewhere"]  # "two" waits
    agent.release.set()
    assert _text(first.result()) == "echo hold one"
    events = second.result()
    assert _text(events) == "echo two" and events[-1].type == EventType.RUN_FINISHED
    assert agent.started == ["hold one", "elsewhere", "two"]


@pytest.mark.parametrize("how", ["server", "props"])
def test_reject_is_409_before_any_stream(thread_server: Any, how: str) -> None:
    server, agent = _serve(thread_server, on_busy="reject" if how == "server" else "enqueue")
    props = {"uamp.on_busy": "reject"} if how == "props" else {}
    first = _Run(server, _body("hold one", "r1"))
    first.start()
    until(lambda: agent.started == ["hold one"])
    answer = httpx.post(
        f"{server.url}/agents/holder/agui", json=_body("two", "r2", **props), timeout=10
    )
    assert answer.status_code == 409
    assert answer.json()["error"]["code"] == "conversation_busy"
    agent.release.set()
    assert _text(first.result()) == "echo hold one"
    assert agent.started == ["hold one"]


@pytest.mark.parametrize("policy", ["interrupt", "rollback"])
def test_interrupt_and_rollback_stop_the_active_run(thread_server: Any, policy: str) -> None:
    server, agent = _serve(thread_server, on_busy=policy)
    first = _Run(server, _body("hold one", "r1"))
    first.start()
    until(lambda: agent.started == ["hold one"])
    second = _events(server, _body("two", "r2"))
    assert _text(second) == "echo two" and second[-1].outcome is None
    stopped = first.result()
    finished = stopped[-1]
    assert finished.type == EventType.RUN_FINISHED
    assert finished.outcome.type == "cancelled"
    assert _text(stopped) == "echo hold one"  # what it said before it was stopped
    assert finished.result == ({"uamp.on_busy": "rollback"} if policy == "rollback" else None)
    assert agent.cancelled == ["hold one"]


def test_a_bad_policy_is_400(thread_server: Any) -> None:
    server, agent = _serve(thread_server)
    answer = httpx.post(
        f"{server.url}/agents/holder/agui",
        json=_body("x", "r1", **{"uamp.on_busy": "later"}),
        timeout=10,
    )
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "invalid_policy"
    assert agent.started == []


def test_a_run_that_resumes_an_interrupt_is_not_held(thread_server: Any) -> None:
    server, agent = _serve(thread_server, on_busy="reject")
    first = _Run(server, _body("hold one", "r1"))
    first.start()
    until(lambda: agent.started == ["hold one"])
    # RunAgentInput.resume answers an interrupt (docs/human-in-the-loop.md): never refused.
    resume = [{"interruptId": "int-1", "status": "resolved", "payload": {"approved": True}}]
    events = _events(server, {**_body("two", "r2"), "resume": resume})
    assert events[-1].type in (EventType.RUN_FINISHED, EventType.RUN_ERROR)
    agent.release.set()
    assert _text(first.result()) == "echo hold one"
