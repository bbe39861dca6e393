"""A2A tasks shared by two processes on one real Redis: ASGI apps, and ``uamp serve`` beside one.

Each ASGI app runs under uvicorn in a process of its own where Trio cannot
be imported (tests/_support/asgi_stores.py), its tasks in
``uamp_stores.open_task_store(REDIS)`` -- the store ``uamp serve --store``
opens. a2a-sdk's own client starts a streaming task on process A; through
process B the same principal gets it while it runs, lists it, subscribes to
it (A's updates stream out of B, each tick once and in order), gives it a
push-notification config (the webhook, a real receiver on 127.0.0.1, then
gets A's updates: A reads the configs B wrote) and cancels it, which stops
the turn on A. Another principal asking B for that task -- get, subscribe,
cancel -- gets exactly the answer for a task nobody made. A is an ASGI app,
or ``uamp serve``: one store, either server. A task whose process is killed
mid-turn ends ``failed`` (``interrupted``) when the other one is asked.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.types import a2a_pb2 as pb

from tests._support.agents import run_asyncio
from tests._support.cli import uamp_serve
from tests._support.webhooks import Receiver
from tests.asgi.test_resume_stores import app_process, kill
from tests.interop.test_a2a_scale_out import (
    _client,
    _collect,
    _ticks,
    _until,
    check_followed_to_the_cancel,
)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

WORKING, CANCELED = pb.TaskState.TASK_STATE_WORKING, pb.TaskState.TASK_STATE_CANCELED
FAILED = pb.TaskState.TASK_STATE_FAILED
ALICE = {"authorization": "Bearer key-alice"}
BOB = {"authorization": "Bearer key-bob"}


@pytest.fixture
def redis_db(redis_url: str) -> str:
    """A fresh database of the real Redis (tests of other files use db 0)."""
    return f"{redis_url.rsplit('/', 1)[0]}/{1 + uuid.uuid4().int % 15}"


@contextmanager
def asgi_app(where: str) -> Iterator[str]:
    """An ASGI app process on ``where``; yields its ticker agent's base URL."""
    with app_process(where) as (_, port):
        yield f"http://127.0.0.1:{port}/agents/ticker"


@contextmanager
def served(where: str, tmp_path: Path) -> Iterator[str]:
    """``uamp serve`` on ``where`` with the same agent and keys; yields the ticker's base URL."""
    keys = tmp_path / "keys"
    keys.write_text("alice:key-alice\nbob:key-bob\n")
    flags = ("--store", where, "--auth-api-keys", str(keys), "--a2a-push-allow", "127.0.0.1/32")
    with uamp_serve(*flags, "--agent", "tests._support.agents:Ticker") as url:
        yield f"{url}/agents/ticker"


async def _start(client: Any) -> tuple[asyncio.Task[None], list[pb.StreamResponse], str]:
    """A streamed ``go`` to the ticker: the stream's task, what it got, the A2A task's id."""
    sent: list[pb.StreamResponse] = []
    message = pb.Message(role=pb.Role.ROLE_USER, parts=[pb.Part(text="go")], message_id="m-1")
    sending = asyncio.create_task(
        _collect(client.send_message(pb.SendMessageRequest(message=message)), sent)
    )
    await _until(lambda: len(_ticks(sent)) >= 2, "A streams ticks")
    return sending, sent, sent[0].task.id


async def _refusal(call: Any) -> str:
    """What a2a-sdk raised for a refused call (the JSON-RPC error), task ids masked."""
    with pytest.raises(Exception) as refused:  # a2a-sdk's error for a JSON-RPC error
        await call
    return re.sub(r"task_[0-9A-Za-z_]+", "ID", str(refused.value))


async def _stream_refusal(stream: Any) -> str:
    async def drain() -> None:
        async for _ in stream:
            pass

    return await _refusal(drain())


def _hook_states(receiver: Receiver) -> list[str]:
    import json

    bodies = [json.loads(body) for _, _, body in receiver.received]
    return [b["statusUpdate"]["status"]["state"] for b in bodies if "statusUpdate" in b]


def _hook_ticks(receiver: Receiver) -> list[int]:
    import json

    text = "".join(
        part.get("text", "")
        for _, _, body in receiver.received
        if "artifactUpdate" in (data := json.loads(body))
        for part in data["artifactUpdate"]["artifact"]["parts"]
    )
    return [int(n) for n in re.findall(r"tick (\d+)", text)]


@pytest.mark.parametrize("first", ["asgi", "uamp serve"])
def test_a_task_made_on_one_process_is_got_followed_pushed_and_cancelled_on_another(
    redis_db: str, tmp_path: Path, first: str
) -> None:
    made_on = asgi_app(redis_db) if first == "asgi" else served(redis_db, tmp_path)
    with made_on as a, asgi_app(redis_db) as b:

        async def main() -> None:
            receiver = Receiver()
            hook = f"http://127.0.0.1:{await receiver.start('127.0.0.1')}/hook"
            async with (
                httpx.AsyncClient(timeout=30, headers=ALICE) as http_a,
                httpx.AsyncClient(timeout=30, headers=ALICE) as http_b,
                httpx.AsyncClient(timeout=30, headers=BOB) as http_bob,
            ):
                at_a, at_b = await _client(http_a, a), await _client(http_b, b)
                bob_at_b = await _client(http_bob, b)
                sending, sent, task_id = await _start(at_a)

                # Through B, while the turn runs on A.
                got = await at_b.get_task(pb.GetTaskRequest(id=task_id))
                listed = await at_b.list_tasks(pb.ListTasksRequest())
                followed: list[pb.StreamResponse] = []
                following = asyncio.create_task(
                    _collect(at_b.subscribe(pb.SubscribeToTaskRequest(id=task_id)), followed)
                )
                await _until(lambda: len(_ticks(followed)) >= 5, "B streams A's ticks")
                pushing = await at_b.create_task_push_notification_config(
                    pb.TaskPushNotificationConfig(task_id=task_id, id="hook-1", url=hook)
                )
                await _until(lambda: len(_hook_ticks(receiver)) >= 3, "A pushes to B's hook")
                # Bob, on B: alice's task is a task nobody made, whatever he asks.
                refusals = {}
                for name, task in (("theirs", task_id), ("unknown", "task_nobody_made")):
                    refusals[name] = (
                        await _refusal(bob_at_b.get_task(pb.GetTaskRequest(id=task))),
                        await _stream_refusal(
                            bob_at_b.subscribe(pb.SubscribeToTaskRequest(id=task))
                        ),
                        await _refusal(bob_at_b.cancel_task(pb.CancelTaskRequest(id=task))),
                    )
                canceled = await at_b.cancel_task(pb.CancelTaskRequest(id=task_id))
                await asyncio.wait_for(asyncio.gather(sending, following), 20)
                after = await at_a.get_task(pb.GetTaskRequest(id=task_id))
                await _until(lambda: "TASK_STATE_CANCELED" in _hook_states(receiver), "pushed")
            receiver.close()

            assert got.status.state == WORKING and got.context_id == sent[0].task.context_id
            assert task_id in [t.id for t in listed.tasks]
            assert pushing.url == hook
            assert refusals["theirs"] == refusals["unknown"]
            assert "not found" in refusals["unknown"][0].lower()
            assert canceled.status.state == CANCELED
            made = check_followed_to_the_cancel(sent, followed, task_id, after)
            # The webhook B configured got A's ticks after it was set, in order, and the end.
            pushed = _hook_ticks(receiver)
            assert pushed == list(range(pushed[0], pushed[0] + len(pushed)))
            assert set(pushed) <= set(made)
            assert _hook_states(receiver)[-1] == "TASK_STATE_CANCELED"

        run_asyncio(main, timeout=90)


def test_a_task_whose_process_is_killed_ends_interrupted_on_the_other(redis_db: str) -> None:
    with app_process(redis_db) as (first, port_a), asgi_app(redis_db) as b:
        a = f"http://127.0.0.1:{port_a}/agents/ticker"

        async def main() -> None:
            async with (
                httpx.AsyncClient(timeout=30, headers=ALICE) as http_a,
                httpx.AsyncClient(timeout=30, headers=ALICE) as http_b,
            ):
                at_a, at_b = await _client(http_a, a), await _client(http_b, b)
                sending, _, task_id = await _start(at_a)
                assert (await at_b.get_task(pb.GetTaskRequest(id=task_id))).status.state == WORKING
                kill(first)  # no shutdown: its heartbeat stops, nothing more is written
                await asyncio.wait([sending], timeout=20)  # the stream broke with its server
                assert sending.done()
                for _ in range(200):  # the heartbeat expires 5 s after the last beat
                    task = await at_b.get_task(pb.GetTaskRequest(id=task_id))
                    if task.status.state != WORKING:
                        break
                    await asyncio.sleep(0.1)
                # B's process and Trio: none of uamp's Trio side was loaded there.
                reply = await http_b.post(
                    b.replace("/ticker", "/modules") + "/a2a/message:send",
                    json={
                        "message": {
                            "role": "ROLE_USER",
                            "parts": [{"text": "which?"}],
                            "messageId": "m-2",
                        }
                    },
                )
            assert task.status.state == FAILED
            assert task.status.message.parts[0].text.startswith("The server running this task")
            artifacts = reply.json()["task"]["artifacts"]
            text = "".join(p["text"] for art in artifacts for p in art["parts"])
            assert text == "loaded: []"

        run_asyncio(main, timeout=90)
