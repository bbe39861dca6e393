"""A2A 1.0's refusals, each in its binding's own form: versions, params, media types, SSRF.

Raw HTTP against a real server on 127.0.0.1, so each request is exactly what
a peer might send. JSON-RPC refusals are JSON-RPC errors (with the
``google.rpc.ErrorInfo`` reason); HTTP+JSON refusals are AIP-193 bodies with
the status of the specification's table.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests._support.agents import TestAgent
from uamp_proto import types as ty
from uamp_trio.app import create_app
from uamp_trio.demo import DemoAgent
from uamp_trio.transports import a2a as a2a_transport


class FilesAgent(TestAgent):
    """Accepts text and files."""

    name = "files"

    def capabilities(self) -> ty.Capabilities:
        """Text and files."""
        return ty.Capabilities(id=self.name, provider=self.provider, modalities=["text", "file"])


@pytest.fixture
async def base(serve_app) -> str:  # type: ignore[no-untyped-def]
    app = create_app([DemoAgent(), FilesAgent()], transports=[a2a_transport.mount])
    return str((await serve_app(app)).url)


def _message(**extra: Any) -> dict[str, Any]:
    return {"role": "ROLE_USER", "parts": [{"text": "hi"}], "messageId": "m-1", **extra}


def _rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}


async def _call(
    base: str, body: Any, headers: dict[str, str] | None = None, path: str = "/agents/demo/a2a"
) -> dict[str, Any]:
    async with httpx.AsyncClient() as http:
        resp = await http.post(f"{base}{path}", json=body, headers=headers or {})
    assert resp.status_code == 200
    out: dict[str, Any] = resp.json()
    return out


@pytest.mark.parametrize(
    ("header", "code"),
    [("99.0", -32009), ("1", -32009), ("one", -32009), ("1.0", None), ("1.0.3", None), ("", None)],
)
async def test_a2a_version_is_negotiated(base: str, header: str, code: int | None) -> None:
    got = await _call(base, _rpc("SendMessage", {"message": _message()}), {"a2a-version": header})
    if code is None:
        assert got["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    else:
        assert got["error"]["code"] == code
        assert got["error"]["data"][0]["reason"] == "VERSION_NOT_SUPPORTED"


async def test_a_0_3_method_under_a2a_version_1_0_is_not_found(base: str) -> None:
    params = {
        "message": {"role": "user", "parts": [{"kind": "text", "text": "x"}], "messageId": "m"}
    }
    got = await _call(base, _rpc("message/send", params), {"a2a-version": "1.0"})
    assert got["error"]["code"] == -32601
    old = await _call(base, _rpc("message/send", params), {"a2a-version": "0.3"})
    assert old["result"]["kind"] == "task"


async def test_the_card_url_with_a_trailing_slash_serves_json_rpc(base: str) -> None:
    got = await _call(base, _rpc("SendMessage", {"message": _message()}), path="/agents/demo/a2a/")
    assert got["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


@pytest.mark.parametrize(
    ("method", "params", "field"),
    [
        ("SendMessage", {"message": {"role": "ROLE_USER", "parts": [{"text": "x"}]}}, "messageId"),
        ("SendMessage", {}, "message"),
        ("SendMessage", {"message": _message(parts=[{"text": "a", "url": "b"}])}, "exactly one"),
        (
            "SendMessage",
            {"message": _message(), "configuration": {"historyLength": -1}},
            "historyLength",
        ),
        (
            "SendMessage",
            {"message": _message(), "configuration": {"returnImmediately": "y"}},
            "returnImmediately",
        ),
        ("ListTasks", {"statusTimestampAfter": "-1"}, "statusTimestampAfter"),
        ("ListTasks", {"statusTimestampAfter": "2025-13-01T00:00:00Z"}, "statusTimestampAfter"),
        ("ListTasks", {"pageSize": 101}, "pageSize"),
        ("ListTasks", {"pageToken": "bogus"}, "pageToken"),
        ("ListTasks", {"status": "TASK_STATE_DREAMING"}, "status"),
        ("ListTasks", {"historyLength": "-2"}, "historyLength"),
        ("GetTask", {}, "id"),
        ("CreateTaskPushNotificationConfig", {"taskId": "t"}, "task"),
    ],
)
async def test_invalid_params_are_refused_naming_the_field(
    base: str, method: str, params: dict[str, Any], field: str
) -> None:
    got = await _call(base, _rpc(method, params), {"a2a-version": "1.0"})
    if field == "task":  # an unknown task is not found before its config is read
        assert got["error"]["code"] == -32001
        return
    assert got["error"]["code"] == -32602, got
    assert field in got["error"]["message"]


async def test_proto_field_names_are_read_as_their_json_names(base: str) -> None:
    message = {"role": "ROLE_USER", "parts": [{"text": "hi"}], "message_id": "snake"}
    sent = await _call(base, _rpc("SendMessage", {"message": message}))
    task = sent["result"]["task"]
    assert task["history"][0]["messageId"] == "snake"
    got = await _call(base, _rpc("GetTask", {"id": task["id"], "history_length": 0}))
    assert "history" not in got["result"]


async def test_media_types_the_agent_does_not_take_are_content_type_not_supported(
    base: str,
) -> None:
    part = {"raw": "dGNr", "mediaType": "application/x-unknown"}
    got = await _call(base, _rpc("SendMessage", {"message": _message(parts=[part])}))
    assert got["error"]["code"] == -32005
    async with httpx.AsyncClient() as http:
        resp = await http.post(
            f"{base}/agents/demo/a2a/message:send", json={"message": _message(parts=[part])}
        )
        text = await http.post(
            f"{base}/agents/demo/a2a", content=b"hello", headers={"content-type": "text/plain"}
        )
        fine = await http.post(
            f"{base}/agents/files/a2a/message:send",
            json={
                "message": _message(
                    parts=[{"raw": "dGNr", "mediaType": "application/octet-stream"}]
                )
            },
        )
    assert resp.status_code == 415
    assert resp.json()["error"]["details"][0]["reason"] == "CONTENT_TYPE_NOT_SUPPORTED"
    assert text.json()["error"]["code"] == -32005
    assert fine.status_code == 200


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "reason"),
    [
        ("GET", "/tasks/task_nope", None, 404, "TASK_NOT_FOUND"),
        ("POST", "/tasks/task_nope:cancel", {}, 404, "TASK_NOT_FOUND"),
        ("GET", "/tasks?pageSize=0x", None, 400, "INVALID_PARAMS"),
        ("POST", "/message:send", {"message": {"role": "ROLE_USER"}}, 400, "INVALID_PARAMS"),
        ("GET", "/extendedAgentCard", None, 400, "EXTENDED_AGENT_CARD_NOT_CONFIGURED"),
    ],
)
async def test_rest_errors_are_aip_193_with_the_spec_status(
    base: str, method: str, path: str, body: Any, status: int, reason: str
) -> None:
    async with httpx.AsyncClient() as http:
        resp = await http.request(method, f"{base}/agents/demo/a2a{path}", json=body)
    assert resp.status_code == status
    error = resp.json()["error"]
    assert error["code"] == status and error["details"][0]["reason"] == reason
    assert error["details"][0]["domain"] == "a2a-protocol.org"


async def test_rest_speaks_1_0_only(base: str) -> None:
    async with httpx.AsyncClient() as http:
        old = await http.post(
            f"{base}/agents/demo/a2a/message:send",
            json={"message": _message()},
            headers={"a2a-version": "0.3"},
        )
    assert old.status_code == 400
    assert old.json()["error"]["details"][0]["reason"] == "VERSION_NOT_SUPPORTED"


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/hook",
        "http://localhost/hook",
        "http://10.1.2.3/x",
        "http://[::1]/x",
        "ftp://x/y",
    ],
)
async def test_push_webhooks_on_non_public_addresses_are_refused(base: str, url: str) -> None:
    sent = await _call(
        base,
        _rpc("SendMessage", {"message": _message(), "configuration": {"returnImmediately": True}}),
    )
    task_id = sent["result"]["task"]["id"]
    got = await _call(
        base, _rpc("CreateTaskPushNotificationConfig", {"taskId": task_id, "url": url})
    )
    assert got["error"]["code"] == -32602
    inline = await _call(
        base,
        _rpc(
            "SendMessage",
            {"message": _message(), "configuration": {"taskPushNotificationConfig": {"url": url}}},
        ),
    )
    assert inline["error"]["code"] == -32602


async def test_rest_refusals_before_the_operation_are_aip_193_too(serve_app) -> None:  # type: ignore[no-untyped-def]
    """Middleware refusals (here the gate's 401) use the binding's error body, not OpenAI's."""
    from uamp_trio.trust.auth import APIKeyAuthenticator

    gated = create_app(
        [DemoAgent()],
        transports=[a2a_transport.mount],
        authenticator=APIKeyAuthenticator([("alice", "k-1")]),
    )
    url = str((await serve_app(gated)).url)
    async with httpx.AsyncClient() as http:
        resp = await http.post(f"{url}/agents/demo/a2a/message:send", json={"message": _message()})
    assert resp.status_code == 401
    error = resp.json()["error"]
    assert (error["code"], error["status"]) == (401, "UNAUTHENTICATED")
    (info,) = error["details"]
    assert info["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"
    assert (info["reason"], info["domain"]) == ("UNAUTHORIZED", "uamp.dev")
    assert "type" not in error  # the OpenAI shape's member
