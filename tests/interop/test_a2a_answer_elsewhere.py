"""An A2A answer reaching another process than the paused run's (issue 30; a2a-sdk's client).

Two ``uamp serve --store redis://... --approve add`` processes share one
Redis (tasks, interrupts). A task asked on process A pauses
``input-required`` on "what is 2+3?"; the message answering it goes to
process B. B hands the answer to A's paused run through the interrupt relay
and follows the task's updates from the store: the same turn goes on on A
and the send on B ends with the task ``completed`` (blocking), or streams
its updates to the end (streaming). Another principal's answer on B is a
task nobody made. Before, B took the answer as a new message on the task.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as pb
from google.protobuf import json_format

from tests._support.agents import run_asyncio
from tests._support.cli import uamp_serve
from tests.interop.test_a2a_interrupts import _data, _last_task, _message, _text

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

INPUT_REQUIRED = pb.TaskState.TASK_STATE_INPUT_REQUIRED
COMPLETED = pb.TaskState.TASK_STATE_COMPLETED


async def _client(http: httpx.AsyncClient, base: str, *, streaming: bool) -> Any:
    card = await A2ACardResolver(http, base + "/agents/demo").get_agent_card()
    config = ClientConfig(
        streaming=streaming, httpx_client=http, supported_protocol_bindings=["JSONRPC"]
    )
    return ClientFactory(config).create(card)


@pytest.mark.parametrize(
    ("streaming", "answer", "says"),
    [
        (False, {"approved": True}, "2 + 3 = 5"),
        (True, {"approved": True}, "2 + 3 = 5"),
        (False, {"approved": False, "reason": "not on B"}, "denied"),
    ],
    ids=["blocking-approve", "streaming-approve", "blocking-deny"],
)
def test_an_answer_on_another_process_resumes_the_paused_run(
    redis_url: str, tmp_path: Path, streaming: bool, answer: dict[str, Any], says: str
) -> None:
    keys = tmp_path / "keys"
    keys.write_text("alice:key-alice\nbob:key-bob\n")
    serve = ("--store", redis_url, "--auth-api-keys", str(keys), "--approve", "add")
    alice = {"authorization": "Bearer key-alice"}
    bob = {"authorization": "Bearer key-bob"}

    with uamp_serve(*serve) as a, uamp_serve(*serve) as b:

        async def main() -> None:
            async with (
                httpx.AsyncClient(timeout=30, headers=alice) as http,
                httpx.AsyncClient(timeout=30, headers=bob) as http_bob,
            ):
                at_a = await _client(http, a, streaming=False)
                at_b = await _client(http, b, streaming=streaming)
                bob_at_b = await _client(http_bob, b, streaming=False)
                task = await _last_task(at_a, _message("m1", pb.Part(text="what is 2+3?")))
                assert task.status.state == INPUT_REQUIRED
                [data] = [
                    json_format.MessageToDict(p)["data"]
                    for p in task.status.message.parts
                    if p.HasField("data")
                ]
                [interrupt] = data["interrupts"]
                part = _data({"interrupt_id": interrupt["id"], **answer})
                with pytest.raises(Exception) as refused:  # bob: a task nobody made
                    await _last_task(
                        bob_at_b, _message("m2", part, task_id=task.id, context_id=task.context_id)
                    )
                assert "not found" in str(refused.value).lower()
                done = await _last_task(
                    at_b, _message("m3", part, task_id=task.id, context_id=task.context_id)
                )
                assert done.id == task.id and done.status.state == COMPLETED
                assert says in _text(done)
                # The same turn went on (on A): one run, its answer in the task on both.
                seen_on_a = await at_a.get_task(pb.GetTaskRequest(id=task.id))
                assert seen_on_a.status.state == COMPLETED and says in _text(seen_on_a)

        run_asyncio(main, timeout=60)
