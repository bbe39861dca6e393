"""uamp_asgi mounted in a FastAPI app under uvicorn, driven by the protocols' real clients."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator

import httpx
import openai
import pytest

import uamp_asgi
from tests._support.asgi import uvicorn_server
from uamp_asgi.responders import function_agent
from uamp_proto import events as ev
from uamp_proto.payment import TokenPolicy
from uamp_proto.responder import TurnRequest
from uamp_trio.trust.auth import APIKeyAuthenticator

fastapi = pytest.importorskip("fastapi")


async def echo(turn: TurnRequest) -> AsyncIterator[str | ev.Event]:
    """Says back what it was told."""
    yield "You said: "
    yield turn.messages[-1].text


async def thinker(turn: TurnRequest) -> AsyncIterator[str | ev.Event]:
    """Thinks, then asks the client's first tool, then answers with its result."""
    last = turn.messages[-1]
    if last.role == "tool":
        yield f"The tool said {last.text}"
        return
    yield ev.Thinking(content="hmm", is_delta=True)
    if turn.tools:
        yield ev.ToolCall(call_id="call_1", name=turn.tools[0].function.name, arguments='{"x": 1}')
        return
    yield "no tools"


def _api(app: uamp_asgi.UampASGI) -> object:
    api = fastapi.FastAPI()

    @api.get("/health")
    def health() -> dict[str, str]:
        return {"ok": "yes"}

    api.mount("/agents", app)
    return api


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    agents = [function_agent(echo), function_agent(thinker)]
    with uvicorn_server(_api(uamp_asgi.app(agents))) as url:
        yield url


def _openai(base: str, agent: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/agents/{agent}", api_key="x", max_retries=0)


def test_the_host_app_still_serves_its_own_routes(base: str) -> None:
    assert httpx.get(f"{base}/health").json() == {"ok": "yes"}


def test_chat_completions_plain_and_streamed(base: str) -> None:
    client = _openai(base, "echo")
    reply = client.chat.completions.create(
        model="echo", messages=[{"role": "user", "content": "hi"}]
    )
    assert reply.choices[0].message.content == "You said: hi"
    assert reply.choices[0].finish_reason == "stop"
    stream = client.chat.completions.create(
        model="echo", messages=[{"role": "user", "content": "yo"}], stream=True
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "You said: yo"


def test_models_list_the_agent(base: str) -> None:
    assert [m.id for m in _openai(base, "echo").models.list()] == ["echo"]


def test_an_unknown_agent_is_a_404_in_openai_shape(base: str) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        _openai(base, "nobody").chat.completions.create(
            model="nobody", messages=[{"role": "user", "content": "hi"}]
        )
    assert caught.value.code == "agent_not_found"


def test_a_client_tool_round_trip_over_chat_completions(base: str) -> None:
    client = _openai(base, "thinker")
    tools = [{"type": "function", "function": {"name": "probe", "parameters": {}}}]
    messages: list[dict[str, object]] = [{"role": "user", "content": "go"}]
    first = client.chat.completions.create(model="thinker", messages=messages, tools=tools)  # type: ignore[arg-type]
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]  # type: ignore[index]
    assert call.function.name == "probe"  # type: ignore[union-attr]
    messages += [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "42"},
    ]
    second = client.chat.completions.create(model="thinker", messages=messages, tools=tools)  # type: ignore[arg-type]
    assert second.choices[0].message.content == "The tool said 42"


def test_responses_plain_streamed_and_continued(base: str) -> None:
    client = _openai(base, "echo")
    first = client.responses.create(model="echo", input="one")
    assert first.output_text == "You said: one"
    again = client.responses.retrieve(first.id)
    assert again.output_text == "You said: one"
    with client.responses.stream(model="echo", input="two", previous_response_id=first.id) as s:
        final = s.get_final_response()
    assert final.output_text == "You said: two"
    client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)


def test_agui_run(base: str) -> None:
    body = {
        "threadId": "t1",
        "runId": "r1",
        "messages": [{"id": "m1", "role": "user", "content": "hey"}],
        "tools": [],
        "context": [],
        "state": {},
        "forwardedProps": {},
    }
    before = int(time.time() * 1000)
    with httpx.stream("POST", f"{base}/agents/echo/agui", json=body) as resp:
        assert resp.status_code == 200
        events = [json.loads(line[6:]) for line in resp.iter_lines() if line.startswith("data: ")]
    after = int(time.time() * 1000)
    assert events[0]["type"] == "RUN_STARTED" and events[-1]["type"] == "RUN_FINISHED"
    # Every event is stamped (ms since the epoch), as uamp serve's.
    assert all(before <= e["timestamp"] <= after for e in events)
    text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == "You said: hey"


# --- auth and payment: the same objects as `uamp serve` -------------------------------


@pytest.fixture(scope="module")
def guarded() -> Iterator[str]:
    config = uamp_asgi.Config(
        authenticator=APIKeyAuthenticator([("alice", "sk-good")]),
        payment_policy=TokenPolicy({"paid"}),
    )
    with uvicorn_server(uamp_asgi.app(function_agent(echo), config=config)) as url:
        yield url


def test_no_agent_runs_for_a_caller_without_a_valid_key(guarded: str) -> None:
    for key in ("sk-bad", None):
        headers = {} if key is None else {"authorization": f"Bearer {key}"}
        resp = httpx.post(
            f"{guarded}/agents/echo/chat/completions",
            json={"model": "echo", "messages": [{"role": "user", "content": "hi"}]},
            headers=headers,
        )
        assert resp.status_code == 401, resp.text
        assert resp.json()["error"]["code"] == "unauthorized"


def test_an_unpaid_turn_is_a_402_and_a_paid_one_runs(guarded: str) -> None:
    url = f"{guarded}/agents/echo/chat/completions"
    body = {"model": "echo", "messages": [{"role": "user", "content": "hi"}]}
    auth = {"authorization": "Bearer sk-good"}
    assert httpx.post(url, json=body, headers=auth).status_code == 402
    paid = httpx.post(url, json=body, headers={**auth, "x-payment": "paid"})
    assert paid.status_code == 200
    assert paid.json()["choices"][0]["message"]["content"] == "You said: hi"


def test_standalone_paths_are_those_of_uamp_serve(guarded: str) -> None:
    # Served alone: /agents/{name}/... and, for the only agent, the root paths.
    auth = {"authorization": "Bearer sk-good"}
    for path in ("/agents/echo/v1/models", "/v1/models"):
        assert httpx.get(guarded + path, headers=auth).json()["data"][0]["id"] == "echo"
