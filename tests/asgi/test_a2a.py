"""A2A on uamp_asgi under uvicorn with a2a-sdk's own clients: JSON-RPC and HTTP+JSON,
cancel, list, subscribe, and the card's URLs wherever the app is mounted (root_path)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as pb

import uamp_asgi
from tests._support.agents import run_asyncio
from tests._support.asgi import uvicorn_server
from uamp_asgi.responders import function_agent
from uamp_proto import events as ev
from uamp_proto.responder import TurnRequest
from uamp_trio.trust.auth import APIKeyAuthenticator

from .test_uamp_ws import echo

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
BINDINGS = pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])


class Held:
    """Says ``started``, then waits until released (or cancelled); threading events between."""

    def __init__(self) -> None:
        self.started, self.release, self.cancelled = (threading.Event() for _ in range(3))

    async def __call__(self, turn: TurnRequest) -> AsyncIterator[str | ev.Event]:
        self.started.set()
        yield "started "
        try:
            while not self.release.is_set():
                await anyio.sleep(0.01)
        except BaseException:
            self.cancelled.set()
            raise
        yield "finished"

    def reset(self) -> None:
        for event in (self.started, self.release, self.cancelled):
            event.clear()


HELD = Held()


async def count(turn: TurnRequest) -> AsyncIterator[str | ev.Event]:
    """Says how many messages the conversation holds."""
    yield f"{len(turn.messages)} messages"


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    config = uamp_asgi.Config(authenticator=APIKeyAuthenticator([("a", "sk-a"), ("b", "sk-b")]))
    agents = [function_agent(echo), function_agent(HELD, name="held"), function_agent(count)]
    app = uamp_asgi.app(agents, config=config)
    with uvicorn_server(app) as url:
        yield url


async def _client(http: httpx.AsyncClient, url: str, binding: str, streaming: bool) -> Any:
    card = await A2ACardResolver(http, url).get_agent_card()
    config = ClientConfig(
        streaming=streaming, httpx_client=http, supported_protocol_bindings=[binding]
    )
    return ClientFactory(config).create(card)


def _send(text: str, *, now: bool = False) -> pb.SendMessageRequest:
    return pb.SendMessageRequest(
        message=pb.Message(role=pb.Role.ROLE_USER, parts=[pb.Part(text=text)], message_id="m"),
        configuration=pb.SendMessageConfiguration(return_immediately=now),
    )


def _http(key: str = "sk-a") -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=20, headers={"authorization": f"Bearer {key}"})


def _text(task: Any) -> str:
    return "".join(p.text for p in task.status.message.parts)


@BINDINGS
@pytest.mark.parametrize("streaming", [False, True])
def test_send_get_and_list(base: str, binding: str, streaming: bool) -> None:
    async def main() -> None:
        async with _http() as http:
            client = await _client(http, f"{base}/agents/echo", binding, streaming)
            events = [e async for e in client.send_message(_send("hello"))]
            last = events[-1]
            final = last.status_update.status if streaming else last.task.status
            assert final.state == pb.TaskState.TASK_STATE_COMPLETED
            task_id = events[0].task.id
            task = await client.get_task(pb.GetTaskRequest(id=task_id))
            assert _text(task) == "You said: hello"
            listed = await client.list_tasks(pb.ListTasksRequest())
            assert listed.tasks[0].id == task_id  # last updated first
            assert task_id in [t.id for t in listed.tasks]

    run_asyncio(main)


def test_a_message_in_a_context_continues_its_conversation_for_its_owner_only(base: str) -> None:
    def send(key: str, agent: str, context: str | None = None) -> Any:
        message: dict[str, Any] = {"role": "ROLE_USER", "parts": [{"text": "hi"}], "messageId": "m"}
        if context is not None:
            message["contextId"] = context
        url = f"{base}/agents/{agent}/a2a/message:send"
        answer = httpx.post(url, json={"message": message}, headers={"authorization": key})
        return answer.json()

    def said(answer: Any) -> str:
        return "".join(p["text"] for a in answer["task"]["artifacts"] for p in a["parts"])

    first = send("Bearer sk-a", "count")
    context = first["task"]["contextId"]
    second = send("Bearer sk-a", "count", context)
    third = send("Bearer sk-a", "count", context)
    theirs = send("Bearer sk-b", "count", context)  # bob names alice's context
    other_agent = send("Bearer sk-a", "echo", context)
    assert [said(a) for a in (first, second, third)] == ["1 messages", "3 messages", "5 messages"]
    assert second["task"]["contextId"] == context and second["task"]["id"] != first["task"]["id"]
    assert said(theirs) == "1 messages"  # a fresh conversation, not alice's
    assert other_agent["error"]["details"][0]["reason"] == "INVALID_PARAMS"


@BINDINGS
def test_cancel_a_running_task_and_a_finished_one(base: str, binding: str) -> None:
    HELD.reset()

    async def main() -> None:
        async with _http() as http:
            client = await _client(http, f"{base}/agents/held", binding, streaming=False)
            [answer] = [e async for e in client.send_message(_send("go", now=True))]
            task_id = answer.task.id
            assert answer.task.status.state == pb.TaskState.TASK_STATE_WORKING
            await asyncio.to_thread(HELD.started.wait, 10)
            canceled = await client.cancel_task(pb.CancelTaskRequest(id=task_id))
            assert canceled.status.state == pb.TaskState.TASK_STATE_CANCELED
            assert HELD.cancelled.is_set()  # the agent's turn was stopped, not left running
            again = await http.post(f"{base}/agents/held/a2a/tasks/{task_id}:cancel")
            assert again.status_code == 409
            assert again.json()["error"]["details"][0]["reason"] == "TASK_NOT_CANCELABLE"

    run_asyncio(main)


@BINDINGS
def test_subscribe_follows_a_running_task_to_its_end(base: str, binding: str) -> None:
    HELD.reset()

    async def main() -> None:
        async with _http() as http:
            sender = await _client(http, f"{base}/agents/held", binding, streaming=False)
            sent = [e async for e in sender.send_message(_send("go", now=True))]
            client = await _client(http, f"{base}/agents/held", binding, streaming=True)
            task_id = sent[0].task.id
            await asyncio.to_thread(HELD.started.wait, 10)
            seen: list[Any] = []
            async for event in client.subscribe(pb.SubscribeToTaskRequest(id=task_id)):
                seen.append(event)
                if len(seen) == 1:
                    assert event.task.id == task_id  # the snapshot opens the stream
                    HELD.release.set()
            final = seen[-1].status_update.status
            assert final.state == pb.TaskState.TASK_STATE_COMPLETED
            assert "".join(p.text for p in final.message.parts) == "started finished"
            # A finished task has nothing left to stream.
            rest = await http.post(f"{base}/agents/held/a2a/tasks/{task_id}:subscribe")
            assert rest.status_code == 400

    run_asyncio(main)


def test_another_principals_task_is_not_found_and_rest_refusals_are_aip193(base: str) -> None:
    async def main() -> None:
        async with _http("sk-a") as alice, _http("sk-b") as bob:
            url = f"{base}/agents/echo/a2a"
            body = {"message": {"role": "ROLE_USER", "parts": [{"text": "x"}], "messageId": "m"}}
            sent = await alice.post(f"{url}/message:send", json=body)
            task_id = sent.json()["task"]["id"]
            theirs = await bob.get(f"{url}/tasks/{task_id}")
            missing = await bob.get(f"{url}/tasks/task_nope")
            assert theirs.status_code == missing.status_code == 404
            assert theirs.json()["error"]["status"] == missing.json()["error"]["status"]
            assert (await bob.get(f"{url}/tasks")).json()["tasks"] == []
            nobody = await httpx.AsyncClient().get(f"{url}/tasks")
            assert nobody.status_code == 401 and nobody.json()["error"]["code"] == 401
            old = await alice.get(f"{url}/tasks", headers={"a2a-version": "0.3"})
            assert old.json()["error"]["details"][0]["reason"] == "VERSION_NOT_SUPPORTED"
            # Push is on by default (as under uamp serve): the task has no config yet.
            push = await alice.get(f"{url}/tasks/{task_id}/pushNotificationConfigs")
            assert push.status_code == 200 and push.json().get("configs", []) == []

    run_asyncio(main)


def test_a_rest_body_over_the_json_bounds_is_a_parse_error_and_the_server_goes_on(
    base: str,
) -> None:
    async def main() -> None:
        async with _http("sk-a") as alice:
            url = f"{base}/agents/echo/a2a/message:send"
            deep = b"[" * 200 + b"]" * 200  # orjson parses it; jsonbounds does not let it through
            refused = await alice.post(
                url, content=deep, headers={"content-type": "application/json"}
            )
            assert refused.status_code == 400
            assert refused.json()["error"]["details"][0]["reason"] == "PARSE_ERROR"
            body = {"message": {"role": "ROLE_USER", "parts": [{"text": "x"}], "messageId": "m2"}}
            assert (await alice.post(url, json=body)).status_code == 200

    run_asyncio(main)


# --- root_path: the card's URLs point back through where the app is mounted ---------------


@pytest.mark.parametrize("prefix", ["/agents", "/api/v2"])
def test_card_urls_under_a_fastapi_mount(prefix: str) -> None:
    fastapi = pytest.importorskip("fastapi")
    api = fastapi.FastAPI()
    api.mount(prefix, uamp_asgi.app([function_agent(echo)]))
    # Mounted at /agents the agent's URLs are uamp serve's; deeper, they move under the prefix.
    agent_url = "/agents/echo" if prefix == "/agents" else f"{prefix}/agents/echo"
    with uvicorn_server(api) as url:
        card = httpx.get(f"{url}{agent_url}/.well-known/agent-card.json").json()
        urls = {i["protocolBinding"]: i["url"] for i in card["supportedInterfaces"]}
        assert urls["JSONRPC"] == urls["HTTP+JSON"] == f"{url}{agent_url}/a2a"

        async def main() -> None:
            async with httpx.AsyncClient(timeout=20) as http:
                for binding in ("JSONRPC", "HTTP+JSON"):
                    client = await _client(http, f"{url}{agent_url}", binding, streaming=False)
                    [answer] = [e async for e in client.send_message(_send("hi"))]
                    assert _text(answer.task) == "You said: hi"

        run_asyncio(main)


def test_card_urls_behind_a_proxy_root_path() -> None:
    app = uamp_asgi.app([function_agent(echo)])
    with uvicorn_server(app, root_path="/proxy") as url:
        # A proxy that strips the prefix: the request arrives without it.
        card = httpx.get(f"{url}/agents/echo/.well-known/agent-card.json").json()
    assert card["supportedInterfaces"][0]["url"] == f"{url}/proxy/agents/echo/a2a"
