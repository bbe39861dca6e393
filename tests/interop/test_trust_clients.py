"""Authentication, ownership, quota and payment through the real client libraries.

A real server on 127.0.0.1 (its own thread and ``trio.run``) with JWT
authentication; the clients are the openai SDK (Chat Completions), a2a-sdk's
JSON-RPC client and agent-client-protocol's WebSocket client. Every attack
token of :meth:`Issuer.attacks` (and no token at all) is refused in the
transport's style -- the SDK's own error for a 401 -- and a counting agent
shows the agent never ran; another principal's ids are answered exactly as
ids that do not exist.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import acp
import httpx
import openai
import pytest
import websockets
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.client.errors import A2AClientError
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import TaskNotFoundError
from acp.ws import create_websocket_stream

from tests._support.agents import WorkingAgent, run_asyncio
from tests.trio.trust.agents import CountingAgent
from tests.trio.trust.issuer import Issuer
from uamp_trio.app import create_app
from uamp_trio.stores import MemoryTaskStore, Stores
from uamp_trio.trust.ledger import Ledger
from uamp_trio.trust.payments import LedgerPolicy

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

ISSUER = Issuer()
ATTACKS = {"no_token": "", **ISSUER.attacks()}


class Waiting(WorkingAgent):
    """Works until cancelled: its tasks stay unfinished."""

    name = "waiting"


def run(coro_fn: Callable[[], Coroutine[Any, Any, None]]) -> None:
    run_asyncio(coro_fn, 30)


@pytest.fixture
def agent() -> CountingAgent:
    return CountingAgent()


@pytest.fixture
def server(thread_server: Any, tmp_path: Path, agent: CountingAgent) -> Any:
    app = create_app(
        [agent, Waiting()],
        authenticator=ISSUER.authenticator(tmp_path),
        stores=Stores(a2a_tasks=MemoryTaskStore(max_tasks=20, max_per_principal=2)),
    )
    return thread_server(app)


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


# --- openai SDK: Chat Completions -------------------------------------------------------


def _openai(server: Any, token: str) -> openai.OpenAI:
    def strip_empty(request: httpx.Request) -> None:
        if request.headers.get("authorization") == "Bearer no-key-sent":
            del request.headers["authorization"]  # "no token": the SDK insists on a key

    return openai.OpenAI(
        base_url=f"{server.url}/agents/demo/v1",
        api_key=token or "no-key-sent",
        max_retries=0,
        http_client=httpx.Client(event_hooks={"request": [strip_empty]}),
    )


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_openai_sdk_is_refused_with_its_authentication_error(
    server: Any, agent: CountingAgent, attack: str
) -> None:
    client = _openai(server, ATTACKS[attack])
    messages: Any = [{"role": "user", "content": "2 + 3"}]
    for stream in (False, True):
        with pytest.raises(openai.AuthenticationError) as refused:
            client.chat.completions.create(model="demo", messages=messages, stream=stream)
        assert refused.value.status_code == 401
        assert refused.value.code == "unauthorized"
        challenge = refused.value.response.headers["www-authenticate"]
        assert challenge == 'Bearer realm="uamp", error="invalid_token"'
    assert agent.runs == []
    ok = _openai(server, ISSUER.token("alice"))
    reply = ok.chat.completions.create(model="demo", messages=messages)
    assert reply.choices[0].message.content == "You said: 2 + 3"
    assert [p.id for p in agent.runs] == ["alice"]


def test_openai_sdk_pays_after_a_402_and_the_lock_names_the_caller(
    thread_server: Any, tmp_path: Path, agent: CountingAgent
) -> None:
    with Ledger(tmp_path / "ledger.db") as ledger:
        token = ledger.issue("1.00", "USD")
        app = create_app(
            [agent],
            authenticator=ISSUER.authenticator(tmp_path),
            payment_policy=LedgerPolicy(ledger, price="0.02"),
        )
        server = thread_server(app)
        client = _openai(server, ISSUER.token("alice"))
        messages: Any = [{"role": "user", "content": "2 + 3"}]
        with pytest.raises(openai.APIStatusError) as unpaid:
            client.chat.completions.create(model="demo", messages=messages, stream=True)
        assert unpaid.value.status_code == 402
        assert agent.runs == []
        stream = client.chat.completions.create(
            model="demo", messages=messages, stream=True, extra_headers={"X-PAYMENT": token}
        )
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert text == "You said: 2 + 3"
        [entry] = ledger.entries(token)
        assert (entry["principal"], entry["state"], entry["charged"]) == (
            "alice",
            "settled",
            "0.02",
        )


# --- a2a-sdk: JSON-RPC ------------------------------------------------------------------


async def _a2a(http: httpx.AsyncClient, base: str, agent: str = "demo", stream: bool = False):  # type: ignore[no-untyped-def]
    card = await A2ACardResolver(http, f"{base}/agents/{agent}").get_agent_card()
    return ClientFactory(ClientConfig(streaming=stream, httpx_client=http)).create(card)


def _message(text: str) -> pb.SendMessageRequest:
    return pb.SendMessageRequest(
        message=pb.Message(role=pb.Role.ROLE_USER, parts=[pb.Part(text=text)], message_id="m-1")
    )


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_a2a_sdk_is_refused_before_any_task(server: Any, agent: CountingAgent, attack: str) -> None:
    async def main() -> None:
        headers = _bearer(ATTACKS[attack])
        async with httpx.AsyncClient(timeout=10, headers=headers) as http:
            client = await _a2a(http, server.url)  # the card is public
            for call in (
                lambda: anext(client.send_message(_message("hi"))),
                lambda: client.get_task(pb.GetTaskRequest(id="task_x")),
                lambda: client.list_tasks(pb.ListTasksRequest()),
            ):
                with pytest.raises(A2AClientError, match="401"):
                    await call()
        assert agent.runs == []

    run(main)


def test_a2a_sdk_another_principals_task_is_not_found_and_quota_is_per_principal(
    server: Any, agent: CountingAgent
) -> None:
    async def main() -> None:
        alice_http = httpx.AsyncClient(timeout=10, headers=_bearer(ISSUER.token("alice")))
        bob_http = httpx.AsyncClient(timeout=10, headers=_bearer(ISSUER.token("bob")))
        async with alice_http, bob_http:
            alice = await _a2a(alice_http, server.url)
            bob = await _a2a(bob_http, server.url)
            [sent] = [e async for e in alice.send_message(_message("2 + 3"))]
            task = sent.task
            assert task.status.state == pb.TaskState.TASK_STATE_COMPLETED
            # Bob gets exactly the not-found answer a random id gets.
            answers = []
            for task_id in (task.id, "task_" + "0" * 32):
                with pytest.raises(TaskNotFoundError) as missing:
                    await bob.get_task(pb.GetTaskRequest(id=task_id))
                answers.append(str(missing.value).replace(task_id, "ID"))
                with pytest.raises(TaskNotFoundError):
                    await bob.cancel_task(pb.CancelTaskRequest(id=task_id))
            assert answers[0] == answers[1]
            assert list((await bob.list_tasks(pb.ListTasksRequest())).tasks) == []
            assert [t.id for t in (await alice.list_tasks(pb.ListTasksRequest())).tasks] == [
                task.id
            ]

            # Quota (2 per principal): her finished task makes room for one more (it is
            # evicted); then her two unfinished tasks stop a third -- hers, not bob's.
            waiting_alice = await _a2a(alice_http, server.url, "waiting")
            waiting_bob = await _a2a(bob_http, server.url, "waiting")
            later = pb.SendMessageRequest(
                message=_message("wait").message,
                configuration=pb.SendMessageConfiguration(return_immediately=True),
            )
            for _ in range(2):
                [first] = [e async for e in waiting_alice.send_message(later)]
                assert first.task.status.state in (
                    pb.TaskState.TASK_STATE_SUBMITTED,
                    pb.TaskState.TASK_STATE_WORKING,
                )
            with pytest.raises(A2AClientError, match="-32029"):
                [e async for e in waiting_alice.send_message(later)]
            [bobs] = [e async for e in waiting_bob.send_message(later)]
            assert bobs.task.id
        assert [p.id for p in agent.runs] == ["alice"]

    run(main)


# --- agent-client-protocol: WebSocket ----------------------------------------------------


class _Quiet:
    """An ACP client that only collects session updates."""

    def __init__(self) -> None:
        self.updates: list[Any] = []

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)

    async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
        raise acp.RequestError.method_not_found("session/request_permission")

    def on_connect(self, conn: Any) -> None:
        pass


def _acp_url(server: Any) -> str:
    return server.url.replace("http", "ws") + "/agents/demo/acp/stream"


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_acp_client_is_refused_at_the_upgrade(
    server: Any, agent: CountingAgent, attack: str
) -> None:
    async def main() -> None:
        with pytest.raises(websockets.exceptions.InvalidStatus) as refused:
            await create_websocket_stream(_acp_url(server), headers=_bearer(ATTACKS[attack]))
        response = refused.value.response
        assert response.status_code == 401
        assert response.headers["www-authenticate"] == 'Bearer realm="uamp", error="invalid_token"'
        assert b'"code":"unauthorized"' in response.body.replace(b" ", b"")
        assert agent.runs == []

    run(main)


def test_acp_client_another_principals_session_is_not_found(
    server: Any, agent: CountingAgent
) -> None:
    async def main() -> None:
        async def connect(who: str) -> Any:
            transport = await create_websocket_stream(
                _acp_url(server), headers=_bearer(ISSUER.token(who))
            )
            conn = acp.connect_to_agent(_Quiet(), transport)
            await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
            return conn

        alice, bob = await connect("alice"), await connect("bob")
        try:
            session = await alice.new_session(cwd="/", mcp_servers=[])
            sid = session.session_id
            reply = await alice.prompt(session_id=sid, prompt=[acp.text_block("2 + 3")])
            assert reply.stop_reason == "end_turn"
            answers = []
            for session_id in (sid, "sess_" + "0" * 24):
                with pytest.raises(acp.RequestError) as missing:
                    await bob.prompt(session_id=session_id, prompt=[acp.text_block("hi")])
                with pytest.raises(acp.RequestError) as not_loaded:
                    await bob.load_session(session_id=session_id, cwd="/", mcp_servers=[])
                answers.append(
                    (
                        missing.value.code,
                        str(missing.value).replace(session_id, "ID"),
                        not_loaded.value.code,
                        str(not_loaded.value).replace(session_id, "ID"),
                    )
                )
            assert answers[0] == answers[1]
            assert answers[0][0] == -32002
        finally:
            await alice.close()
            await bob.close()
        assert [p.id for p in agent.runs] == ["alice"]

    run(main)
