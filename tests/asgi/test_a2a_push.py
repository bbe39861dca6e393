"""A2A push notifications on uamp_asgi under uvicorn: by default, or with ``uamp serve``'s flags.

The client is a2a-sdk's own (JSON-RPC and HTTP+JSON); the webhook a real
HTTP/1.1 receiver on 127.0.0.1 (admitted by ``--a2a-push-allow``) that
refuses the first delivery, so the sender's retry is seen. The task pauses
for input, gets its config, and is resumed: the resumed turn's updates
reach the webhook with the config's credentials. The bounds and the SSRF
guard are ``uamp serve``'s (``--a2a-max-push-configs``, non-public targets).
A plain ``uamp_asgi.app`` pushes too, with the same sender
(:class:`uamp_stores.a2a_push.PushSender`), refusing loopback unless allowed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as pb

import uamp_asgi
from tests._support.agents import run_asyncio
from tests._support.asgi import uvicorn_server
from tests._support.webhooks import Receiver
from uamp_asgi.responders import function_agent
from uamp_proto.responder import ResponderError, TurnRequest
from uamp_stores.a2a_push import PushSender
from uamp_trio.asgi_options import serve_options

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
BINDINGS = pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])


async def asker(turn: TurnRequest) -> AsyncIterator[str]:
    """Asks for a city (the task waits for input), then answers with it."""
    text = turn.messages[-1].text
    if text == "weather":
        raise ResponderError("input_required", "Which city?")
    yield f"Sunny in {text}"


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    flags = ["--a2a-push-allow", "127.0.0.1/32", "--a2a-max-push-configs", "2"]
    flags += ["--api-key", "alice:sk-a", "--api-key", "bob:sk-b"]
    config = uamp_asgi.Config(**serve_options(flags))
    with uvicorn_server(uamp_asgi.app(function_agent(asker), config=config)) as url:
        yield f"{url}/agents/asker"


@pytest.fixture(scope="module")
def plain_base() -> Iterator[str]:
    """No ``uamp serve`` flags: ``Config``'s own sender, admitting 127.0.0.1."""
    config = uamp_asgi.Config(a2a_push=PushSender(allow=["127.0.0.1/32"]))
    with uvicorn_server(uamp_asgi.app(function_agent(asker), config=config)) as url:
        yield f"{url}/agents/asker"


class Hook(Receiver):
    """A webhook on 127.0.0.1 that refuses the first delivery (503), then takes them all."""

    def __init__(self) -> None:
        super().__init__(self._answer)
        self.refused = 0

    def _answer(self, path: str) -> bytes:
        if not self.refused:
            self.refused += 1
            return b"HTTP/1.1 503 Busy\r\ncontent-length: 0\r\n"
        return b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n"

    async def __aenter__(self) -> str:
        return f"http://127.0.0.1:{await self.start('127.0.0.1')}/hook"

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def taken(self) -> list[tuple[dict[str, str], Any]]:
        """The deliveries it took (headers, JSON body), in order."""
        return [(headers, json.loads(body)) for _, headers, body in self.received[self.refused :]]

    def states(self) -> list[str]:
        return [
            body["statusUpdate"]["status"]["state"]
            for _, body in self.taken()
            if "statusUpdate" in body
        ]

    async def wait_for(self, state: str) -> None:
        for _ in range(400):
            if state in self.states():
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"no {state} reached the webhook: {self.states()}")


def _http(key: str = "sk-a") -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=20, headers={"authorization": f"Bearer {key}"})


async def _client(http: httpx.AsyncClient, base: str, binding: str, streaming: bool) -> Any:
    card = await A2ACardResolver(http, base).get_agent_card()
    assert card.capabilities.push_notifications
    config = ClientConfig(
        streaming=streaming, httpx_client=http, supported_protocol_bindings=[binding]
    )
    return ClientFactory(config).create(card)


def _send(text: str, **more: Any) -> pb.SendMessageRequest:
    configuration = more.pop("configuration", None)
    return pb.SendMessageRequest(
        message=pb.Message(
            role=pb.Role.ROLE_USER, parts=[pb.Part(text=text)], message_id="m", **more
        ),
        configuration=configuration,
    )


async def _last(stream: AsyncIterator[Any]) -> Any:
    events = [e async for e in stream]
    return events[-1]


@BINDINGS
@pytest.mark.parametrize("configured", ["flags", "plain"])
def test_a_resumed_task_pushes_its_updates_with_the_configs_credentials(
    request: pytest.FixtureRequest, configured: str, binding: str
) -> None:
    base: str = request.getfixturevalue("base" if configured == "flags" else "plain_base")

    async def main() -> None:
        receiver = Hook()
        async with receiver as hook, _http() as http:
            client = await _client(http, base, binding, streaming=False)
            paused = await _last(client.send_message(_send("weather")))
            task_id = paused.task.id
            assert paused.task.status.state == pb.TaskState.TASK_STATE_INPUT_REQUIRED
            config = await client.create_task_push_notification_config(
                pb.TaskPushNotificationConfig(
                    task_id=task_id,
                    id="hook-1",
                    url=hook,
                    token="tok",
                    authentication=pb.AuthenticationInfo(scheme="Bearer", credentials="s3cret"),
                )
            )
            assert (config.id, config.url) == ("hook-1", hook)
            got = await client.get_task_push_notification_config(
                pb.GetTaskPushNotificationConfigRequest(task_id=task_id, id="hook-1")
            )
            assert got.url == hook
            done = await _last(client.send_message(_send("Paris", task_id=task_id)))
            assert done.task.status.state == pb.TaskState.TASK_STATE_COMPLETED
            await receiver.wait_for("TASK_STATE_COMPLETED")
        assert receiver.refused == 1  # and that refused delivery was tried again
        assert receiver.states()[-1] == "TASK_STATE_COMPLETED"
        for headers, body in receiver.taken():
            assert headers["authorization"] == "Bearer s3cret"
            assert headers["x-a2a-notification-token"] == "tok"
            update = body.get("statusUpdate") or body["artifactUpdate"]
            assert update["taskId"] == task_id
        text = [
            part["text"]
            for _, body in receiver.taken()
            if "artifactUpdate" in body
            for part in body["artifactUpdate"]["artifact"]["parts"]
        ]
        assert "".join(text) == "Sunny in Paris"

    run_asyncio(main, timeout=60)


def test_a_config_given_with_a_streamed_send_gets_the_whole_task(base: str) -> None:
    async def main() -> None:
        receiver = Hook()
        async with receiver as hook, _http() as http:
            client = await _client(http, base, "JSONRPC", streaming=True)
            inline = pb.SendMessageConfiguration(
                task_push_notification_config=pb.TaskPushNotificationConfig(url=hook)
            )
            last = await _last(client.send_message(_send("Oslo", configuration=inline)))
            assert last.status_update.status.state == pb.TaskState.TASK_STATE_COMPLETED
            await receiver.wait_for("TASK_STATE_COMPLETED")
        assert receiver.states()[-1] == "TASK_STATE_COMPLETED"
        assert "authorization" not in receiver.taken()[-1][0]

    run_asyncio(main, timeout=60)


def test_the_bounds_the_ssrf_guard_and_ownership_are_uamp_serves(base: str) -> None:
    async def main() -> None:
        async with _http("sk-a") as alice, _http("sk-b") as bob:
            rpc = f"{base}/a2a"
            rest = f"{base}/a2a/tasks"
            sent = await alice.post(
                f"{base}/a2a/message:send",
                json={
                    "message": {
                        "role": "ROLE_USER",
                        "parts": [{"text": "weather"}],
                        "messageId": "m",
                    }
                },
            )
            task_id = sent.json()["task"]["id"]

            async def create(who: httpx.AsyncClient, url: str, cid: str) -> httpx.Response:
                body = {"url": url, "id": cid}
                return await who.post(f"{rest}/{task_id}/pushNotificationConfigs", json=body)

            # Private and loopback targets the allow-list does not admit: refused.
            for target in ("http://10.0.0.7/hook", "http://127.0.0.2/hook", "http://[::1]:1/"):
                refused = await create(alice, target, "x")
                assert refused.status_code == 400, target
                assert refused.json()["error"]["details"][0]["reason"] == "INVALID_PARAMS"
            for n in (1, 2):
                assert (await create(alice, "http://127.0.0.1:9/h", f"c{n}")).status_code == 200
            again = await create(alice, "http://127.0.0.1:9/h2", "c2")  # a replacement fits
            assert again.status_code == 200
            third = await create(alice, "http://127.0.0.1:9/h", "c3")
            assert third.status_code == 429
            body = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "CreateTaskPushNotificationConfig",
                "params": {"taskId": task_id, "id": "c3", "url": "http://127.0.0.1:9/h"},
            }
            over = (await alice.post(rpc, json=body)).json()["error"]
            assert over["code"] == -32029
            listed = await alice.get(f"{rest}/{task_id}/pushNotificationConfigs")
            assert [c["id"] for c in listed.json()["configs"]] == ["c1", "c2"]
            assert listed.json()["configs"][1]["url"] == "http://127.0.0.1:9/h2"
            # Another principal's task answers as a missing one.
            theirs = await create(bob, "http://127.0.0.1:9/h", "b")
            missing = await bob.post(
                f"{rest}/task_nope/pushNotificationConfigs", json={"url": "http://127.0.0.1:9/"}
            )
            assert theirs.status_code == missing.status_code == 404
            gone = await alice.delete(f"{rest}/{task_id}/pushNotificationConfigs/c1")
            assert gone.status_code == 200
            listed = await alice.get(f"{rest}/{task_id}/pushNotificationConfigs")
            assert [c["id"] for c in listed.json()["configs"]] == ["c2"]

    run_asyncio(main)


def test_a_plain_app_pushes_by_default_and_refuses_loopback_targets() -> None:
    app = uamp_asgi.app(function_agent(asker))
    with uvicorn_server(app) as url:
        card = httpx.get(f"{url}/agents/asker/.well-known/agent-card.json").json()
        assert card["capabilities"]["pushNotifications"] is True
        sent = httpx.post(
            f"{url}/agents/asker/a2a/message:send",
            json={
                "message": {"role": "ROLE_USER", "parts": [{"text": "weather"}], "messageId": "m"}
            },
        )
        task_id = sent.json()["task"]["id"]
        configs = f"{url}/agents/asker/a2a/tasks/{task_id}/pushNotificationConfigs"
        refused = httpx.post(configs, json={"url": "http://127.0.0.1:9/hook"})
        assert refused.status_code == 400
        assert refused.json()["error"]["details"][0]["reason"] == "INVALID_PARAMS"
        taken = httpx.post(configs, json={"url": "https://example.com/hook", "id": "c1"})
        assert taken.status_code == 200, taken.text


def test_without_a_webhook_client_push_is_not_supported_and_the_card_says_so() -> None:
    app = uamp_asgi.app(function_agent(asker), config=uamp_asgi.Config(a2a_push=None))
    with uvicorn_server(app) as url:
        card = httpx.get(f"{url}/agents/asker/.well-known/agent-card.json").json()
        assert card["capabilities"].get("pushNotifications", False) is False
        sent = httpx.post(
            f"{url}/agents/asker/a2a/message:send",
            json={
                "message": {"role": "ROLE_USER", "parts": [{"text": "weather"}], "messageId": "m"}
            },
        )
        task_id = sent.json()["task"]["id"]
        refused = httpx.post(
            f"{url}/agents/asker/a2a/tasks/{task_id}/pushNotificationConfigs",
            json={"url": "https://example.com/hook"},
        )
        assert refused.json()["error"]["details"][0]["reason"] == "PUSH_NOTIFICATION_NOT_SUPPORTED"
