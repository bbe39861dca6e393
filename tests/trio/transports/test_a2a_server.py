"""The A2A transport over real sockets with raw HTTP: JSON-RPC errors, the REST
task form (spec 004), cards and payment."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import trio

from tests._support import a2a_schema
from tests._support.agents import TestAgent
from tests._support.rpc import a2a_message, a2a_v1_message, rpc
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.payment import TokenPolicy
from uamp_proto.responder import Emit, TurnRequest
from uamp_trio.app import create_app
from uamp_trio.demo import DemoAgent
from uamp_trio.transports import a2a as a2a_transport


class SlowAgent:
    name = "slow"

    def capabilities(self) -> ty.Capabilities:
        return ty.Capabilities(
            id="slow",
            provider="test",
            modalities=["text", "image"],
            tools=ty.ToolCapabilities(supports_tools=False, built_in_tools=["web_search"]),
        )

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="working ")))
        await trio.sleep_forever()


class FailingAgent(TestAgent):
    name = "failing"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        from uamp_proto.responder import ResponderError

        raise ResponderError("tool_failed", "The weather service is down.")


@pytest.fixture
async def base(serve_app) -> str:  # type: ignore[no-untyped-def]
    app = create_app([DemoAgent(), SlowAgent(), FailingAgent()], transports=[a2a_transport.mount])
    server = await serve_app(app)
    return str(server.url)


def _sse(text: str) -> list[tuple[str | None, Any]]:
    out: list[tuple[str | None, Any]] = []
    for block in text.strip().split("\n\n"):
        name, data = None, []
        for line in block.splitlines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data.append(line[6:])
        out.append((name, json.loads("\n".join(data))))
    return out


# --- cards -------------------------------------------------------------------------------


async def test_card_urls_follow_the_host_and_carry_capabilities(base: str) -> None:
    async with httpx.AsyncClient() as http:
        card = (await http.get(f"{base}/agents/slow/.well-known/agent-card.json")).json()
        legacy = (await http.get(f"{base}/agents/slow/.well-known/agent.json")).json()
        proxied = (
            await http.get(
                f"{base}/agents/slow/.well-known/agent-card.json",
                headers={"host": "agents.example:8443"},
            )
        ).json()
    url = f"{base}/agents/slow/a2a"
    assert card["supportedInterfaces"] == [
        {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
        {"url": url, "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
        {
            "url": base.removeprefix("http://"),
            "protocolBinding": "GRPC",
            "protocolVersion": "1.0",
            "tenant": "slow",
        },
    ]
    assert a2a_schema.problems("Agent Card", card) == []
    # agent.json is the 0.3 card with UAMP's modelCapabilities (UAMP 9.2).
    assert legacy == {**legacy, **card}
    assert legacy["url"] == url
    assert legacy["modelCapabilities"]["id"] == "slow"
    assert legacy["modelCapabilities"]["tools"]["built_in_tools"] == ["web_search"]
    assert [s["id"] for s in card["skills"]] == ["slow", "tool.web_search"]
    assert card["defaultInputModes"] == ["text/plain", "image/*", "application/json"]
    assert proxied["supportedInterfaces"][0]["url"] == "http://agents.example:8443/agents/slow/a2a"


async def test_card_is_cacheable_and_0_3_clients_get_the_0_3_card(base: str) -> None:
    url = f"{base}/agents/slow/.well-known/agent-card.json"
    async with httpx.AsyncClient() as http:
        first = await http.get(url)
        again = await http.get(url, headers={"if-none-match": first.headers["etag"]})
        old = await http.get(url, headers={"a2a-version": "0.3"})
        stale = await http.get(url, headers={"if-none-match": '"other"'})
    assert "max-age=" in first.headers["cache-control"]
    assert first.headers["last-modified"].endswith("GMT")
    assert (again.status_code, again.content) == (304, b"")
    assert again.headers["etag"] == first.headers["etag"]
    assert old.json()["protocolVersion"] == "0.3.0" and "protocolVersion" not in first.json()
    assert old.headers["etag"] != first.headers["etag"]
    assert stale.status_code == 200 and stale.json() == first.json()


# --- JSON-RPC errors ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "code", "rid"),
    [
        (b"{not json", -32700, None),
        (b"[1, 2]", -32600, None),
        (json.dumps({"jsonrpc": "1.0", "id": 3, "method": "GetTask"}).encode(), -32600, 3),
        (json.dumps(rpc("tasks/explode", {}, "x")).encode(), -32601, "x"),
        (json.dumps(rpc("GetTask", [1], 4)).encode(), -32602, 4),
        (json.dumps(rpc("GetTask", {}, 5)).encode(), -32602, 5),
        (
            json.dumps(rpc("SendMessage", {"message": {"role": "ROLE_USER"}}, 6)).encode(),
            -32602,
            6,
        ),
        (
            json.dumps(
                rpc("SendMessage", {"message": a2a_v1_message("x", role="ROLE_ROBOT")}, 7)
            ).encode(),
            -32602,
            7,
        ),
        (json.dumps(rpc("GetTask", {"id": "task_missing"}, 8)).encode(), -32001, 8),
        (json.dumps(rpc("tasks/get", {"id": "task_missing"}, 9)).encode(), -32001, 9),
        (json.dumps(rpc("tasks/pushNotificationConfig/set", {}, 10)).encode(), -32602, 10),
        (
            json.dumps(
                rpc("SendMessage", {"message": a2a_v1_message("x", taskId="task_missing")}, 11)
            ).encode(),
            -32001,
            11,
        ),
    ],
)
async def test_bad_requests_get_jsonrpc_errors(base: str, body: bytes, code: int, rid: Any) -> None:
    async with httpx.AsyncClient() as http:
        resp = await http.post(
            f"{base}/agents/demo/a2a", content=body, headers={"content-type": "application/json"}
        )
    assert resp.status_code == 200
    reply = resp.json()
    assert reply["jsonrpc"] == "2.0"
    assert reply["id"] == rid
    assert reply["error"]["code"] == code
    assert reply["error"]["message"]
    assert "result" not in reply


async def test_v1_errors_carry_error_info_and_v03_errors_do_not(base: str) -> None:
    async with httpx.AsyncClient() as http:
        v1 = (await http.post(f"{base}/agents/demo/a2a", json=rpc("GetTask", {"id": "t"}))).json()
        v03 = (
            await http.post(f"{base}/agents/demo/a2a", json=rpc("tasks/get", {"id": "t"}))
        ).json()
    assert v1["error"]["data"][0]["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"
    assert v1["error"]["data"][0]["reason"] == "TASK_NOT_FOUND"
    assert "data" not in v03["error"]


async def test_failed_agent_fails_the_task(base: str) -> None:
    async with httpx.AsyncClient() as http:
        reply = (
            await http.post(
                f"{base}/agents/failing/a2a",
                json=rpc("SendMessage", {"message": a2a_v1_message("hi")}),
            )
        ).json()
    status = reply["result"]["task"]["status"]
    assert status["state"] == "TASK_STATE_FAILED"
    assert status["message"]["parts"] == [{"text": "The weather service is down."}]
    assert status["message"]["metadata"] == {"code": "tool_failed"}


async def test_v03_blocking_send_shapes(base: str) -> None:
    params = {"message": a2a_message("shape")}
    async with httpx.AsyncClient() as http:
        reply = (
            await http.post(f"{base}/agents/demo/a2a", json=rpc("message/send", params))
        ).json()
    task = reply["result"]
    assert task["kind"] == "task"
    assert task["status"]["state"] == "completed"
    assert task["status"]["message"]["kind"] == "message"
    assert task["status"]["message"]["role"] == "agent"
    assert task["status"]["message"]["parts"] == [{"kind": "text", "text": "You said: shape"}]
    assert task["history"][0]["parts"] == [{"kind": "text", "text": "shape"}]


# --- the REST form ------------------------------------------------------------------------


async def test_rest_task_stream_get_and_delete(base: str) -> None:
    body = {
        "message": {"role": "user", "parts": [{"type": "text", "text": "What is the weather?"}]}
    }
    async with httpx.AsyncClient() as http:
        resp = await http.post(f"{base}/agents/demo/tasks", json=body)
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        events = _sse(resp.text)
        names = [n for n, _ in events]
        assert names[0] == "task.started" and names[-1] == "task.completed"
        assert set(names[1:-1]) == {"task.message"}
        task_id = events[0][1]["id"]
        assert events[0][1]["status"] == "running"
        text = "".join(d["parts"][0]["text"] for n, d in events if n == "task.message")
        assert text == "You said: What is the weather?"
        assert events[1][1]["role"] == "agent" and events[1][1]["parts"][0]["type"] == "text"
        assert events[-1][1] == {
            "id": task_id,
            "contextId": events[0][1]["contextId"],
            "status": "completed",
        }
        got = await http.get(f"{base}/agents/demo/tasks/{task_id}")
        assert got.status_code == 200
        assert got.json()["state"] == "completed"
        assert got.json()["status"]["state"] == "completed"
        gone = await http.delete(f"{base}/agents/demo/tasks/{task_id}")
        assert gone.status_code == 409
        assert gone.json()["error"]["code"] == "task_not_cancelable"
        missing = await http.get(f"{base}/agents/demo/tasks/task_nope")
        assert missing.status_code == 404
        assert missing.json()["error"]["code"] == "task_not_found"
        other_agent = await http.get(f"{base}/agents/slow/tasks/{task_id}")
        assert other_agent.status_code == 404


async def test_rest_delete_cancels_a_running_task(base: str) -> None:
    body = {"message": {"role": "user", "parts": [{"type": "text", "text": "go"}]}}
    async with httpx.AsyncClient(timeout=10) as http:
        async with http.stream("POST", f"{base}/agents/slow/tasks", json=body) as resp:
            lines = resp.aiter_lines()
            started = None
            async for line in lines:
                if line.startswith("data: "):
                    started = json.loads(line[6:])
                    break
            assert started is not None and started["status"] == "running"
            seen = ""
            async for line in lines:
                seen += line + "\n"
                if "task.message" in line:
                    break
            deleted = await http.delete(f"{base}/agents/slow/tasks/{started['id']}")
            assert deleted.status_code == 200
            assert deleted.json()["state"] == "canceled"
            rest = seen + "\n".join([line async for line in lines])
        assert "event: task.canceled" in rest
        after = await http.get(f"{base}/agents/slow/tasks/{started['id']}")
        assert after.json()["status"]["state"] == "canceled"


@pytest.mark.parametrize(
    "body",
    [b"not json", b"[]", b'{"message": 5}', b'{"message": {"role": "user", "parts": []}}'],
)
async def test_rest_bad_body_is_400_json(base: str, body: bytes) -> None:
    async with httpx.AsyncClient() as http:
        resp = await http.post(f"{base}/agents/demo/tasks", content=body)
    assert resp.status_code == 400
    assert resp.headers["content-type"] == "application/json"
    assert resp.json()["error"]["message"]


async def test_rest_payment_required_is_a_failed_task(serve_app) -> None:  # type: ignore[no-untyped-def]
    app = create_app(
        [DemoAgent()],
        transports=[a2a_transport.mount],
        payment_policy=TokenPolicy({"paid"}, amount="0.01"),
    )
    server = await serve_app(app)
    body = {"message": {"role": "user", "parts": [{"type": "text", "text": "hi"}]}}
    async with httpx.AsyncClient() as http:
        refused = await http.post(f"{server.url}/agents/demo/tasks", json=body)
        paid = await http.post(
            f"{server.url}/agents/demo/tasks", json=body, headers={"X-PAYMENT": "paid"}
        )
        [(name, data)] = _sse(refused.text)
        assert name == "task.failed"
        assert data["status"] == "failed"
        assert data["code"] == "payment_required"
        assert data["status_code"] == 402
        assert data["accepts"] == [
            {"scheme": "token", "amount": "0.01", "network": "uamp", "currency": "USD"}
        ]
        stored = await http.get(f"{server.url}/agents/demo/tasks/{data['id']}")
        assert stored.json()["state"] == "failed"
    assert _sse(paid.text)[-1][0] == "task.completed"


async def test_explicit_policy_of_the_transport_factory(serve_app) -> None:  # type: ignore[no-untyped-def]
    app = create_app(
        [DemoAgent()],
        transports=[a2a_transport.transport(payment_policy=TokenPolicy({"k"}))],
    )
    server = await serve_app(app)
    async with httpx.AsyncClient() as http:
        reply = (
            await http.post(
                f"{server.url}/a2a", json=rpc("SendMessage", {"message": a2a_v1_message("hi")})
            )
        ).json()
    assert reply["error"]["code"] == -32402
    assert reply["error"]["data"][0]["reason"] == "PAYMENT_REQUIRED"
