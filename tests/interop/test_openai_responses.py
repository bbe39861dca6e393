"""The OpenAI Responses API, driven by the real ``openai`` SDK over real sockets.

The background responses run against ``uamp serve`` and against uamp_asgi
(in FastAPI under uvicorn) on each of its stores: memory, SQLite, Redis.

Every client is built with ``_strict_response_validation=True``: each JSON
answer and each stream event must parse as the SDK's own models (required
fields, closed sets of literals), as the SDK checks them in strict mode.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests._support import asgi
from tests._support.agents import TestAgent, Ticker, WorkingAgent
from uamp_agents import agent
from uamp_agents.bridge import serve_agent
from uamp_agents.providers._demo import DemoProvider
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.payment import TokenPolicy
from uamp_proto.responder import Emit, TurnRequest
from uamp_stores.responses_background import MAX_BACKGROUND_PER_PRINCIPAL
from uamp_trio.app import create_app
from uamp_trio.demo import DemoAgent
from uamp_trio.trust.auth import APIKeyAuthenticator

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}


def _client(base: str, **kw: Any) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=base,
        api_key="unused",
        timeout=10,
        max_retries=0,
        _strict_response_validation=True,
        **kw,
    )


@pytest.fixture
def demo(thread_server: Any) -> tuple[openai.OpenAI, str]:
    server = thread_server(create_app([DemoAgent()]))
    return _client(f"{server.url}/agents/demo/v1"), server.url


@pytest.fixture
def tools(thread_server: Any) -> openai.OpenAI:
    runtime = agent(model=DemoProvider(), name="calc")
    server = thread_server(create_app([serve_agent(runtime)]))
    return _client(f"{server.url}/agents/calc")


def test_create_answers_a_strictly_valid_response(demo: tuple[openai.OpenAI, str]) -> None:
    sdk, _ = demo
    response = sdk.responses.create(model="demo", input="hello there", metadata={"k": "v"})
    assert response.id.startswith("resp_") and response.object == "response"
    assert response.status == "completed"
    assert response.output_text == "You said: hello there"
    assert response.metadata == {"k": "v"} and response.store is True
    assert response.usage is not None
    assert response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens
    message = response.output[0]
    assert message.type == "message" and message.content[0].annotations == []


def test_the_stream_is_the_responses_event_sequence(demo: tuple[openai.OpenAI, str]) -> None:
    sdk, _ = demo
    events = list(sdk.responses.create(model="demo", input="stream me", stream=True))
    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) > 1 and all(d.logprobs == [] for d in deltas)
    text = "".join(d.delta for d in deltas)
    assert text == "You said: stream me"
    final = events[-1].response
    assert final.output_text == text and final.status == "completed"
    # The item streamed is the item of the final object (same id).
    assert final.output[0].id == deltas[0].item_id


def test_the_stream_helper_accumulates_the_same_response(demo: tuple[openai.OpenAI, str]) -> None:
    sdk, _ = demo
    with sdk.responses.stream(model="demo", input="helper") as stream:
        final = stream.get_final_response()
    assert final.output_text == "You said: helper"


def test_previous_response_id_continues_on_the_server(
    demo: tuple[openai.OpenAI, str], thread_server: Any
) -> None:
    recorded: list[Any] = []

    class Recorder(DemoAgent):
        async def respond(self, request: Any, emit: Any) -> None:
            recorded.append([(m.role, m.content) for m in request.messages])
            await super().respond(request, emit)

    server = thread_server(create_app([Recorder()]))
    sdk = _client(f"{server.url}/v1")
    first = sdk.responses.create(model="demo", input="one", instructions="be brief")
    second = sdk.responses.create(model="demo", input="two", previous_response_id=first.id)
    assert second.previous_response_id == first.id
    assert recorded[1] == [
        ("user", "one"),
        ("assistant", "You said: one"),
        ("user", "two"),
    ]
    assert second.instructions is None  # instructions are not carried over


@pytest.fixture(params=["uamp serve", "uamp_asgi"])
def demo_either(request: pytest.FixtureRequest, thread_server: Any) -> Iterator[openai.OpenAI]:
    """The demo agent's Responses API under ``uamp serve`` or ``uamp_asgi`` (uvicorn)."""
    if request.param == "uamp serve":
        server = thread_server(create_app([DemoAgent()]))
        yield _client(f"{server.url}/agents/demo/v1")
        return
    import uamp_asgi
    from tests._support.asgi import uvicorn_server

    with uvicorn_server(uamp_asgi.app([DemoAgent()])) as url:
        yield _client(f"{url}/agents/demo/v1")


def test_retrieve_delete_and_input_items(demo_either: openai.OpenAI) -> None:
    sdk = demo_either
    created = sdk.responses.create(
        model="demo",
        input=[
            {"role": "developer", "content": "rules"},
            {"role": "user", "content": [{"type": "input_text", "text": "a"}]},
            {"type": "message", "role": "user", "content": "b"},
        ],
    )
    again = sdk.responses.retrieve(created.id)
    assert again.model_dump() == created.model_dump()
    listed = sdk.responses.input_items.list(created.id)
    texts = [i.content[0].text for i in listed.data]  # type: ignore[union-attr]
    assert texts == ["b", "a", "rules"]  # newest first by default
    page = sdk.responses.input_items.list(created.id, order="asc", limit=2)
    assert [i.content[0].text for i in page.data] == ["rules", "a"]  # type: ignore[union-attr]
    assert page.has_more
    rest = sdk.responses.input_items.list(created.id, order="asc", after=page.last_id)
    assert [i.content[0].text for i in rest.data] == ["b"]  # type: ignore[union-attr]
    assert not rest.has_more
    sdk.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        sdk.responses.delete(created.id)


def test_a_response_whose_conversation_was_dropped_is_not_continued(thread_server: Any) -> None:
    # The memory log bounds what a principal's records keep (here 2,000 bytes of
    # conversation): the older response loses its conversation to the newer one, and a
    # continuation of it is refused rather than run without its earlier turns.
    from uamp_stores.event_log import MemoryEventLog
    from uamp_trio.stores import Stores

    log = MemoryEventLog(max_record_bytes_per_principal=2000)
    server = thread_server(create_app([DemoAgent()], stores=Stores(event_log=log)))
    sdk = _client(f"{server.url}/agents/demo/v1")
    older = sdk.responses.create(model="demo", input="a" * 900)
    newer = sdk.responses.create(model="demo", input="b" * 900)
    with pytest.raises(openai.BadRequestError, match="can no longer be continued"):
        sdk.responses.create(model="demo", input="more", previous_response_id=older.id)
    assert sdk.responses.retrieve(older.id).output_text == "You said: " + "a" * 900
    went_on = sdk.responses.create(model="demo", input="more", previous_response_id=newer.id)
    assert went_on.output_text == "You said: more"


def test_store_false_cannot_be_retrieved_or_continued(demo: tuple[openai.OpenAI, str]) -> None:
    sdk, _ = demo
    unstored = sdk.responses.create(model="demo", input="forget me", store=False)
    assert unstored.output_text == "You said: forget me" and unstored.store is False
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve(unstored.id)
    with pytest.raises(openai.NotFoundError):
        sdk.responses.create(model="demo", input="more", previous_response_id=unstored.id)


def test_another_principals_response_is_missing(thread_server: Any) -> None:
    keys = APIKeyAuthenticator([("alice", "tok-a"), ("bob", "tok-b")])
    app = create_app([DemoAgent()], authenticator=keys)
    server = thread_server(app)
    alice = openai.OpenAI(base_url=f"{server.url}/v1", api_key="tok-a", max_retries=0)
    bob = openai.OpenAI(base_url=f"{server.url}/v1", api_key="tok-b", max_retries=0)
    mine = alice.responses.create(model="demo", input="secret")
    assert alice.responses.retrieve(mine.id).output_text == "You said: secret"
    missing = httpx.get(
        f"{server.url}/v1/responses/resp_{'0' * 32}", headers={"Authorization": "Bearer tok-b"}
    )
    theirs = httpx.get(
        f"{server.url}/v1/responses/{mine.id}", headers={"Authorization": "Bearer tok-b"}
    )
    assert theirs.status_code == missing.status_code == 404
    assert theirs.json()["error"]["code"] == missing.json()["error"]["code"]
    for attempt in (
        lambda: bob.responses.retrieve(mine.id),
        lambda: bob.responses.delete(mine.id),
        lambda: bob.responses.input_items.list(mine.id),
        lambda: bob.responses.create(model="demo", input="x", previous_response_id=mine.id),
    ):
        with pytest.raises(openai.NotFoundError):
            attempt()
    assert alice.responses.retrieve(mine.id).status == "completed"


def test_client_function_tools_round_trip(tools: openai.OpenAI) -> None:
    sdk = tools
    first = sdk.responses.create(model="calc", input="call get_weather for Paris", tools=[WEATHER])
    assert first.status == "completed"
    calls = [i for i in first.output if i.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather"
    assert first.tools[0].name == "get_weather"  # type: ignore[union-attr]
    second = sdk.responses.create(
        model="calc",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny"}],
        tools=[WEATHER],
    )
    assert second.output_text == "Tool get_weather returned: sunny"
    # The same round trip without the server's memory: the items themselves.
    third = sdk.responses.create(
        model="calc",
        store=False,
        input=[
            {"role": "user", "content": "call get_weather for Paris"},
            calls[0].model_dump(exclude_none=True),
            {"type": "function_call_output", "call_id": calls[0].call_id, "output": "rainy"},
        ],
        tools=[WEATHER],
    )
    assert third.output_text == "Tool get_weather returned: rainy"


def test_a_streamed_function_call(tools: openai.OpenAI) -> None:
    events = list(
        tools.responses.create(
            model="calc", input="call get_weather for Rome", tools=[WEATHER], stream=True
        )
    )
    kinds = [e.type for e in events]
    assert "response.function_call_arguments.delta" in kinds
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert done and "Rome" in done[0].arguments
    final = events[-1]
    assert final.type == "response.completed"
    assert [i.type for i in final.response.output][-1] == "function_call"
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_an_unknown_model_is_openais_404(demo: tuple[openai.OpenAI, str]) -> None:
    sdk, _ = demo
    with pytest.raises(openai.NotFoundError) as err:
        sdk.responses.create(model="gpt-9", input="hi")
    assert err.value.code == "model_not_found"


def test_bad_input_is_a_400_naming_the_parameter(demo: tuple[openai.OpenAI, str]) -> None:
    sdk, _ = demo
    with pytest.raises(openai.BadRequestError) as err:
        sdk.responses.create(model="demo", input=[{"type": "nonsense"}])  # type: ignore[list-item]
    assert err.value.param == "input[0].type"


def test_payment_is_the_completions_gate_with_openais_402(thread_server: Any) -> None:
    server = thread_server(create_app([DemoAgent()], payment_policy=TokenPolicy({"tok_ok"})))
    url = f"{server.url}/agents/demo/v1/responses"
    refused = httpx.post(url, json={"model": "demo", "input": "pay"}, timeout=10)
    assert refused.status_code == 402
    error = refused.json()["error"]
    assert error["code"] == "payment_required" and error["accepts"]
    # Nothing ran, nothing was stored.
    paid = httpx.post(
        url, json={"model": "demo", "input": "pay"}, headers={"X-PAYMENT": "tok_ok"}, timeout=10
    )
    assert paid.status_code == 200 and paid.json()["status"] == "completed"


# --- background responses --------------------------------------------------------


@pytest.fixture(params=["uamp serve", "uamp_asgi memory", "uamp_asgi sqlite", "uamp_asgi redis"])
def ticker(
    request: pytest.FixtureRequest, thread_server: Any, tmp_path: Path
) -> Iterator[openai.OpenAI]:
    """Agents ``ticker`` and ``slow`` under ``uamp serve``, or uamp_asgi on each store."""
    if request.param == "uamp serve":
        server = thread_server(create_app([Ticker(), WorkingAgent()]))
        yield _client(f"{server.url}/v1")
        return
    pytest.importorskip("fastapi")
    from uamp_asgi.responders import function_agent

    store = asgi.event_log(request.param.split()[1], tmp_path, request)
    agents = [function_agent(asgi.ticker), function_agent(asgi.slow)]
    with asgi.fastapi_with(agents, event_log=store) as url:
        yield _client(f"{url}/agents/v1")


def _wait_for(sdk: openai.OpenAI, rid: str, *statuses: str) -> Any:
    deadline = time.monotonic() + 15
    while True:
        response = sdk.responses.retrieve(rid)
        if response.status in statuses or time.monotonic() > deadline:
            return response
        time.sleep(0.05)


def test_a_background_response_runs_without_the_connection(ticker: openai.OpenAI) -> None:
    queued = ticker.responses.create(model="ticker", input="5", background=True)
    assert queued.status == "queued" and queued.background is True
    done = _wait_for(ticker, queued.id, "completed")
    assert done.status == "completed"
    assert done.output_text == "tick 0 tick 1 tick 2 tick 3 tick 4 "


def test_a_dropped_stream_resumes_after_its_last_sequence_number(ticker: openai.OpenAI) -> None:
    stream = ticker.responses.create(model="ticker", input="30", background=True, stream=True)
    seen = []
    for event in stream:
        seen.append(event)
        if event.type == "response.output_text.delta" and len(seen) > 8:
            break
    stream.close()  # the connection drops; the response goes on
    rid, last = seen[0].response.id, seen[-1].sequence_number
    assert seen[0].response.status == "queued"
    resumed = list(ticker.responses.retrieve(rid, stream=True, starting_after=last))
    numbers = [e.sequence_number for e in resumed]
    assert numbers == list(range(last + 1, last + 1 + len(numbers)))
    assert resumed[-1].type == "response.completed"
    text = "".join(e.delta for e in [*seen, *resumed] if e.type == "response.output_text.delta")
    assert text == "".join(f"tick {i} " for i in range(30))
    assert resumed[-1].response.output_text == text
    # The whole stream again from the start: the same events, numbered the same.
    again = list(ticker.responses.retrieve(rid, stream=True))
    assert [e.model_dump() for e in again[: len(seen)]] == [e.model_dump() for e in seen]


def test_the_sdk_stream_helper_resumes_a_response(ticker: openai.OpenAI) -> None:
    queued = ticker.responses.create(model="ticker", input="12", background=True)
    with ticker.responses.stream(response_id=queued.id, starting_after=3) as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert events[0].sequence_number == 4
    assert final.output_text == "".join(f"tick {i} " for i in range(12))


def test_cancel_ends_a_background_response_cancelled(ticker: openai.OpenAI) -> None:
    queued = ticker.responses.create(model="slow", input="go", background=True)
    _wait_for(ticker, queued.id, "in_progress")
    cancelled = ticker.responses.cancel(queued.id)
    assert cancelled.status == "cancelled"
    assert ticker.responses.retrieve(queued.id).status == "cancelled"
    events = list(ticker.responses.retrieve(queued.id, stream=True))
    assert events[-1].type == "response.failed"
    assert events[-1].response.status == "cancelled"
    # Only background responses can be cancelled.
    plain = ticker.responses.create(model="ticker", input="1")
    with pytest.raises(openai.BadRequestError):
        ticker.responses.cancel(plain.id)


def test_background_responses_are_bounded_per_principal(ticker: openai.OpenAI) -> None:
    started = [
        ticker.responses.create(model="slow", input="go", background=True)
        for _ in range(MAX_BACKGROUND_PER_PRINCIPAL)
    ]
    with pytest.raises(openai.RateLimitError):
        ticker.responses.create(model="slow", input="one more", background=True)
    ticker.responses.cancel(started[0].id)
    again = ticker.responses.create(model="slow", input="now there is room", background=True)
    for response in [*started[1:], again]:
        ticker.responses.delete(response.id)
    assert ticker.responses.create(model="ticker", input="1", background=True).status == "queued"


class Thinker(TestAgent):
    """Thinks in two deltas, then answers."""

    name = "thinker"

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        await emit(ev.Thinking(content="Let me ", is_delta=True))
        await emit(ev.Thinking(content="see.", is_delta=True))
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="Done.")))
        await emit(ev.UsageDelta(delta=ty.UsageStats(input_tokens=3, output_tokens=4)))


def test_thinking_comes_back_as_reasoning_items(thread_server: Any) -> None:
    server = thread_server(create_app([Thinker()]))
    sdk = _client(f"{server.url}/v1")
    events = list(
        sdk.responses.create(
            model="thinker", input="think", reasoning={"effort": "low"}, stream=True
        )
    )
    summary = [e.delta for e in events if e.type == "response.reasoning_summary_text.delta"]
    assert summary == ["Let me ", "see."]
    final = events[-1].response
    assert [i.type for i in final.output] == ["reasoning", "message"]
    assert final.output[0].summary[0].text == "Let me see."
    assert final.output_text == "Done." and final.reasoning.effort == "low"
    assert final.usage.input_tokens == 3 and final.usage.output_tokens == 4
    stored = sdk.responses.retrieve(final.id)
    assert stored.output[0].model_dump() == final.output[0].model_dump()


def test_structured_output_and_the_output_budget(tools: openai.OpenAI) -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    }
    shaped = tools.responses.create(
        model="calc",
        input="a city please",
        text={"format": {"type": "json_schema", "name": "place", "schema": schema, "strict": True}},
    )
    assert set(json.loads(shaped.output_text)) == {"city"}
    assert shaped.text.format.type == "json_schema"  # type: ignore[union-attr]
    cut = tools.responses.create(model="calc", input="tell me a long story", max_output_tokens=2)
    assert cut.status == "incomplete"
    assert cut.incomplete_details is not None
    assert cut.incomplete_details.reason == "max_output_tokens"
    assert len(cut.output_text.split()) == 2
