"""The openai SDK with an agent's URL as its base URL, and OpenAI's error object on every
OpenAI-compatible route (the 402 payment pre-flight keeps the body spec 004 fixes)."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from uamp_proto.payment import TokenPolicy
from uamp_trio.app import create_app
from uamp_trio.demo import DemoAgent
from uamp_trio.trust.auth import APIKeyAuthenticator

KEY = "k-openai-models-0123"


@pytest.fixture
def server(thread_server):  # type: ignore[no-untyped-def]
    app = create_app(
        [DemoAgent(), DemoAgent("second")],
        authenticator=APIKeyAuthenticator([("alice", KEY)]),
    )
    return thread_server(app, max_body_size=4096)


def sdk(server: Any, base: str, key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + base, api_key=key, timeout=10, max_retries=0)


@pytest.mark.parametrize("base", ["/agents/demo", "/agents/demo/v1"])
def test_models_list_and_retrieve_with_the_agent_as_base_url(server: Any, base: str) -> None:
    client = sdk(server, base)
    assert [m.id for m in client.models.list()] == ["demo"]
    model = client.models.retrieve("demo")
    assert (model.id, model.object, model.owned_by) == ("demo", "model", "uamp")
    with pytest.raises(openai.NotFoundError) as caught:
        client.models.retrieve("second")  # hosted, but not this agent
    assert caught.value.code == "model_not_found"


def test_models_at_the_root_name_every_agent(server: Any) -> None:
    client = sdk(server, "/v1")
    assert sorted(m.id for m in client.models.list()) == ["demo", "second"]
    assert client.models.retrieve("second").id == "second"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("nobody")


def test_a_chat_completion_through_the_agent_base_url(server: Any) -> None:
    reply = sdk(server, "/agents/demo").chat.completions.create(
        model="demo", messages=[{"role": "user", "content": "hi there"}]
    )
    assert reply.choices[0].message.content == "You said: hi there"


def test_the_sdk_sees_a_refused_token_as_its_own_error(server: Any) -> None:
    with pytest.raises(openai.AuthenticationError) as caught:
        sdk(server, "/agents/demo", key="wrong").models.list()
    assert caught.value.status_code == 401


AUTH = {"authorization": f"Bearer {KEY}"}
CHAT = "/agents/demo/chat/completions"
MESSAGES = [{"role": "user", "content": "hi"}]

# (why, method, path, headers, body, status, code)
ERRORS: list[tuple[str, str, str, dict[str, str], Any, int, str]] = [
    ("no token", "POST", CHAT, {}, {"messages": MESSAGES}, 401, "unauthorized"),
    ("bad token", "GET", "/agents/demo/models", {"authorization": "Bearer x"}, None, 401, ""),
    ("not JSON", "POST", CHAT, AUTH, b"{nope", 400, "invalid_json"),
    ("no messages", "POST", CHAT, AUTH, {"model": "demo"}, 400, ""),
    ("bad role", "POST", CHAT, AUTH, {"messages": [{"role": {}, "content": "x"}]}, 400, ""),
    ("unknown agent", "POST", "/agents/nobody/chat/completions", AUTH, {"messages": MESSAGES},
     404, "agent_not_found"),
    ("unknown model", "GET", "/agents/demo/models/gpt-4", AUTH, None, 404, "model_not_found"),
    ("root: which agent", "POST", "/v1/chat/completions", AUTH, {"messages": MESSAGES}, 404,
     "agent_not_found"),
    ("wrong method", "GET", CHAT, AUTH, None, 405, "method_not_allowed"),
    ("wrong method on models", "POST", "/agents/demo/models", AUTH, {}, 405, "method_not_allowed"),
    ("no such path", "GET", "/agents/demo/v1/embeddings", AUTH, None, 404, "not_found"),
    ("body too large", "POST", CHAT, AUTH, {"messages": [{"role": "user", "content": "x" * 5000}]},
     413, ""),
]  # fmt: skip


@pytest.mark.parametrize(
    ("method", "path", "headers", "body", "status", "code"),
    [case[1:] for case in ERRORS],
    ids=[case[0] for case in ERRORS],
)
def test_every_error_on_an_openai_route_is_an_openai_error_object(
    server: Any,
    method: str,
    path: str,
    headers: dict[str, str],
    body: Any,
    status: int,
    code: str,
) -> None:
    content = body if isinstance(body, bytes) else None
    with httpx.Client(base_url=server.url, timeout=10) as client:
        reply = client.request(
            method,
            path,
            headers=headers,
            content=content,
            json=None if content is not None or body is None else body,
        )
    assert reply.status_code == status, reply.text
    assert reply.headers["content-type"].startswith("application/json")
    error = reply.json()["error"]
    assert isinstance(error["message"], str) and error["message"]
    assert isinstance(error["type"], str) and error["type"]
    assert isinstance(error["code"], str) and error["code"]
    if code:
        assert error["code"] == code


def test_the_payment_preflight_answers_openais_error_object(thread_server: Any) -> None:
    app = create_app([DemoAgent()], payment_policy=TokenPolicy({"tok_ok"}))
    server = thread_server(app)
    reply = httpx.post(f"{server.url}{CHAT}", json={"messages": MESSAGES}, timeout=10)
    assert reply.status_code == 402
    body = reply.json()
    error = body["error"]
    assert error["code"] == "payment_required" and error["type"] == "payment_required"
    assert isinstance(error["message"], str) and error["message"]
    assert error["accepts"] and "param" in error
