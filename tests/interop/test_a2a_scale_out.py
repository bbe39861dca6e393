"""A2A tasks shared by two ``uamp serve`` processes on one real Redis (docs/scale-out.md).

a2a-sdk's own client starts a streaming task on process A; through process
B the same principal gets it while it runs, lists it, subscribes to it (the
updates A's turn makes stream out of B, each tick once and in order) and
cancels it, which stops the turn on A. Another principal asking B for that
task gets exactly the answer for a task nobody made.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as pb

from tests._support.agents import run_asyncio
from tests._support.cli import uamp_serve

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

AGENT = ("--agent", "tests._support.agents:Ticker")
WORKING, CANCELED = pb.TaskState.TASK_STATE_WORKING, pb.TaskState.TASK_STATE_CANCELED


async def _client(http: httpx.AsyncClient, base: str, *, streaming: bool = True) -> Any:
    card = await A2ACardResolver(http, base).get_agent_card()
    config = ClientConfig(
        streaming=streaming, httpx_client=http, supported_protocol_bindings=["JSONRPC"]
    )
    return ClientFactory(config).create(card)


def _ticks(events: list[pb.StreamResponse]) -> list[int]:
    """The tick numbers the artifact chunks of ``events`` carry, in order."""
    return _ticks_of_text(
        "".join(
            part.text
            for event in events
            if event.HasField("artifact_update")
            for part in event.artifact_update.artifact.parts
        )
    )


def _ticks_of_text(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"tick (\d+)", text)]


async def _collect(stream: Any, into: list[pb.StreamResponse]) -> None:
    async for event in stream:
        into.append(event)


async def _until(predicate: Any, what: str) -> None:
    for _ in range(400):
        if predicate():
            return
        await asyncio.sleep(0.025)
    raise AssertionError(f"never: {what}")


async def _refusal(client: Any, task_id: str) -> str:
    with pytest.raises(Exception) as refused:  # a2a-sdk's error for a JSON-RPC error
        await client.get_task(pb.GetTaskRequest(id=task_id))
    return str(refused.value).replace(task_id, "ID")


def check_followed_to_the_cancel(
    sent: list[pb.StreamResponse], followed: list[pb.StreamResponse], task_id: str, after: Any
) -> list[int]:
    """A task streamed on A, followed on B and cancelled there: what both saw; the ticks
    A's turn made (what the task holds)."""
    assert after.status.state == CANCELED
    # Both streams end with the cancel; every tick once, in order, none skipped.
    assert sent[-1].status_update.status.state == CANCELED
    assert followed[0].task.id == task_id
    assert followed[-1].status_update.status.state == CANCELED
    at_a_ticks, at_b_ticks = _ticks(sent), _ticks(followed)
    assert at_a_ticks == list(range(len(at_a_ticks)))
    assert at_b_ticks == list(range(at_b_ticks[0], at_b_ticks[0] + len(at_b_ticks)))
    # What A wrote is what B stored: the artifact holds the ticks A's turn made,
    # each stream a part of them. (A tick published as the cancel landed may
    # reach B and not A's own stream: the turn announces before it writes.)
    stored = _ticks_of_text("".join(p.text for art in after.artifacts for p in art.parts))
    assert stored == list(range(len(stored)))
    assert set(at_a_ticks) <= set(stored) and set(at_b_ticks) <= set(stored)
    assert len(stored) < 400  # stopped on A by the cancel sent to B
    return stored


def test_a_task_made_on_one_process_is_got_listed_followed_and_cancelled_on_another(
    redis_url: str, tmp_path: Path
) -> None:
    keys = tmp_path / "keys"
    keys.write_text("alice:key-alice\nbob:key-bob\n")
    serve = ("--store", redis_url, "--auth-api-keys", str(keys), *AGENT)
    alice = {"authorization": "Bearer key-alice"}
    bob = {"authorization": "Bearer key-bob"}

    with uamp_serve(*serve) as a, uamp_serve(*serve) as b:

        async def main() -> None:
            async with (
                httpx.AsyncClient(timeout=30, headers=alice) as http_a,
                httpx.AsyncClient(timeout=30, headers=alice) as http_b,
                httpx.AsyncClient(timeout=30, headers=bob) as http_bob,
            ):
                at_a, at_b = await _client(http_a, a), await _client(http_b, b)
                bob_at_b = await _client(http_bob, b, streaming=False)
                sent: list[pb.StreamResponse] = []
                message = pb.Message(
                    role=pb.Role.ROLE_USER, parts=[pb.Part(text="go")], message_id="m-1"
                )
                sending = asyncio.create_task(
                    _collect(at_a.send_message(pb.SendMessageRequest(message=message)), sent)
                )
                await _until(lambda: len(_ticks(sent)) >= 2, "A streams ticks")
                task_id = sent[0].task.id

                # Through B, while the turn runs on A.
                got = await at_b.get_task(pb.GetTaskRequest(id=task_id))
                listed = await at_b.list_tasks(pb.ListTasksRequest())
                followed: list[pb.StreamResponse] = []
                following = asyncio.create_task(
                    _collect(at_b.subscribe(pb.SubscribeToTaskRequest(id=task_id)), followed)
                )
                await _until(lambda: len(_ticks(followed)) >= 5, "B streams A's ticks")
                stranger = await _refusal(bob_at_b, task_id)
                unknown = await _refusal(bob_at_b, "task_nobody_made")
                canceled = await at_b.cancel_task(pb.CancelTaskRequest(id=task_id))
                await asyncio.wait_for(asyncio.gather(sending, following), 15)
                after = await at_a.get_task(pb.GetTaskRequest(id=task_id))

            assert got.status.state == WORKING and got.context_id == sent[0].task.context_id
            assert task_id in [t.id for t in listed.tasks]
            assert stranger == unknown  # another principal's task is a task nobody made
            assert canceled.status.state == CANCELED
            check_followed_to_the_cancel(sent, followed, task_id, after)

        run_asyncio(main, timeout=60)
