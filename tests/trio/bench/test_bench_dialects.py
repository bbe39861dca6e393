"""How ``uamp bench`` reads each HTTP transport's stream: event data -> delta, end or error."""

from __future__ import annotations

import orjson
import pytest

from uamp_trio.bench.config import BenchConfig, endpoint_url
from uamp_trio.bench.dialects import DIALECTS, Step


def _data(obj: object) -> str:
    return orjson.dumps(obj).decode()


def _chunk(**delta: object) -> str:
    return _data({"choices": [{"index": 0, "delta": delta}]})


def _a2a(result: object) -> str:
    return _data({"jsonrpc": "2.0", "id": 1, "result": result})


def _artifact(text: str, **extra: object) -> str:
    return _a2a(
        {
            "kind": "artifact-update",
            "artifact": {"parts": [{"kind": "text", "text": text}]},
            **extra,
        }
    )


def _status(state: str, final: bool = True) -> str:
    return _a2a({"kind": "status-update", "status": {"state": state}, "final": final})


# (dialect, the events of one response, the steps they mean)
CASES = [
    (
        "openai",
        [_chunk(role="assistant"), _chunk(content="Hi"), _chunk(content=""), "[DONE]"],
        [Step(), Step(text="Hi"), Step(), Step(done=True)],
    ),
    ("openai", [_chunk(reasoning_content="hmm")], [Step(text="hmm")]),
    ("openai", [_data({"error": {"message": "x"}})], [Step(error="stream_error")]),
    ("openai", ["not json", "[1]"], [Step(error="bad_response"), Step(error="bad_response")]),
    ("openai", [_data({"choices": []}), _chunk(content=5)], [Step(), Step()]),
    (
        "agui",
        [
            _data({"type": "RUN_STARTED"}),
            _data({"type": "TEXT_MESSAGE_START"}),
            _data({"type": "TEXT_MESSAGE_CONTENT", "delta": "a"}),
            _data({"type": "TEXT_MESSAGE_CONTENT", "delta": "b"}),
            _data({"type": "RUN_FINISHED"}),
        ],
        [Step(), Step(), Step(text="a"), Step(text="b"), Step(done=True)],
    ),
    (
        "agui",
        [_data({"type": "RUN_ERROR", "code": "boom"}), _data({"type": "RUN_ERROR"})],
        [Step(error="boom"), Step(error="run_error")],
    ),
    ("agui", [_data({"type": "TEXT_MESSAGE_CONTENT"})], [Step(error="bad_response")]),
    (
        "ai-sdk",
        [
            _data({"type": "start", "messageId": "m"}),
            _data({"type": "text-delta", "id": "t", "delta": "a"}),
            _data({"type": "reasoning-delta", "id": "r", "delta": "b"}),
            _data({"type": "finish", "finishReason": "stop"}),
            "[DONE]",
        ],
        [Step(), Step(text="a"), Step(text="b"), Step(done=True), Step()],
    ),
    (
        "ai-sdk",
        [
            _data({"type": "error", "errorText": "x"}),
            _data({"type": "finish", "finishReason": "error"}),
            _data({"type": "text-delta", "id": "t"}),
        ],
        [Step(error="stream_error"), Step(error="finish_error"), Step(error="bad_response")],
    ),
    (
        "a2a-0.3",
        [
            _a2a({"kind": "task", "status": {"state": "submitted"}}),
            _status("working", final=False),
            _artifact("Hel"),
            _artifact("lo", append=True),
            _artifact("Hello", lastChunk=True),
            _status("completed"),
        ],
        [Step(), Step(), Step(text="Hel"), Step(text="lo"), Step(), Step(done=True)],
    ),
    # A server that sends the whole text in one last chunk: that is the delta.
    (
        "a2a-0.3",
        [_artifact("all", lastChunk=True), _status("completed")],
        [Step(text="all"), Step(done=True)],
    ),
    ("a2a-0.3", [_status("failed")], [Step(error="task_failed")]),
    ("a2a-0.3", [_a2a({"kind": "task", "status": {"state": "completed"}})], [Step(done=True)]),
    (
        "a2a-0.3",
        [_data({"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "x"}})],
        [Step(error="jsonrpc_-32602")],
    ),
    ("a2a-0.3", [_data({"jsonrpc": "2.0", "id": 1})], [Step(error="bad_response")]),
    # A2A 1.0: ProtoJSON results, wrapped; no ``final``: a closing state ends.
    (
        "a2a",
        [
            _a2a({"task": {"status": {"state": "TASK_STATE_SUBMITTED"}}}),
            _a2a({"statusUpdate": {"status": {"state": "TASK_STATE_WORKING"}}}),
            _a2a({"artifactUpdate": {"artifact": {"parts": [{"text": "Hel"}]}}}),
            _a2a({"artifactUpdate": {"artifact": {"parts": [{"text": "lo"}]}, "append": True}}),
            _a2a(
                {"artifactUpdate": {"artifact": {"parts": [{"text": "Hello"}]}, "lastChunk": True}}
            ),
            _a2a({"statusUpdate": {"status": {"state": "TASK_STATE_COMPLETED"}}}),
        ],
        [Step(), Step(), Step(text="Hel"), Step(text="lo"), Step(), Step(done=True)],
    ),
    (
        "a2a",
        [_a2a({"statusUpdate": {"status": {"state": "TASK_STATE_INPUT_REQUIRED"}}})],
        [Step(error="task_input-required")],
    ),
    (
        "a2a",
        [_a2a({"statusUpdate": {"status": {"state": "TASK_STATE_FAILED"}}})],
        [Step(error="task_failed")],
    ),
    ("a2a", [_a2a({"task": {"status": {"state": "TASK_STATE_COMPLETED"}}})], [Step(done=True)]),
    (
        "a2a",
        [_data({"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "x"}})],
        [Step(error="jsonrpc_-32602")],
    ),
    (
        "a2a",
        [_a2a({"somethingElse": {}}), _data({"jsonrpc": "2.0", "id": 1})],
        [Step(), Step(error="bad_response")],
    ),
]


CASES += [
    (
        "anthropic",
        [
            _data({"type": "message_start", "message": {}}),
            _data({"type": "content_block_delta", "index": 0,
                   "delta": {"type": "thinking_delta", "thinking": "hm"}}),
            _data({"type": "content_block_delta", "index": 1,
                   "delta": {"type": "text_delta", "text": "Hi"}}),
            _data({"type": "content_block_delta", "index": 2,
                   "delta": {"type": "input_json_delta", "partial_json": "{}"}}),
            _data({"type": "message_delta", "delta": {"stop_reason": "end_turn"}}),
            _data({"type": "message_stop"}),
        ],
        [Step(), Step(text="hm"), Step(text="Hi"), Step(), Step(), Step(done=True)],
    ),
    (
        "anthropic",
        [_data({"type": "error", "error": {"type": "overloaded_error", "message": "x"}}), "nope"],
        [Step(error="overloaded_error"), Step(error="bad_response")],
    ),
]  # fmt: skip


@pytest.mark.parametrize(("dialect", "events", "steps"), CASES)
def test_each_event_means_a_step(dialect: str, events: list[str], steps: list[Step]) -> None:
    reader = DIALECTS[dialect].reader()
    assert [reader.step(data) for data in events] == steps


def test_openai_without_streaming_reads_the_message() -> None:
    body = orjson.dumps({"choices": [{"message": {"role": "assistant", "content": "Hi!"}}]})
    assert DIALECTS["openai"].whole(body) == Step(text="Hi!", done=True)
    assert DIALECTS["openai"].whole(b"{}") == Step(error="bad_response")


def test_the_bodies_carry_the_prompt_and_fresh_ids() -> None:
    config = BenchConfig(url="http://h/agents/a", prompt="p?", max_tokens=7)
    turn = config.workload().script().next()
    openai = orjson.loads(DIALECTS["openai"].body(config, turn))
    assert openai["model"] == "a" and openai["max_tokens"] == 7 and openai["stream"] is True
    assert openai["messages"] == [{"role": "user", "content": "p?"}]
    agui = [orjson.loads(DIALECTS["agui"].body(config, turn)) for _ in range(2)]
    assert agui[0]["messages"][0]["content"] == "p?" and agui[0]["runId"] != agui[1]["runId"]
    a2a = [orjson.loads(DIALECTS["a2a"].body(config, turn)) for _ in range(2)]
    assert a2a[0]["method"] == "SendStreamingMessage"
    assert a2a[0]["params"]["message"]["parts"] == [{"text": "p?"}]
    assert a2a[0]["params"]["message"]["role"] == "ROLE_USER"
    assert a2a[0]["params"]["message"]["messageId"] != a2a[1]["params"]["message"]["messageId"]
    claude = orjson.loads(DIALECTS["anthropic"].body(config, turn))
    assert (claude["model"], claude["max_tokens"], claude["stream"]) == ("a", 7, True)
    assert claude["messages"] == [{"role": "user", "content": "p?"}]
    assert DIALECTS["anthropic"].headers == (("anthropic-version", "2023-06-01"),)
    whole = orjson.dumps({"content": [{"type": "text", "text": "Hi"}, {"type": "tool_use"}]})
    assert DIALECTS["anthropic"].whole(whole) == Step(text="Hi", done=True)
    old = orjson.loads(DIALECTS["a2a-0.3"].body(config, turn))
    assert old["method"] == "message/stream"
    assert old["params"]["message"]["parts"] == [{"kind": "text", "text": "p?"}]


ENDPOINTS = [
    ("http://h:1/agents/x", None, "a2a", "http://h:1/agents/x/a2a"),
    ("http://h:1/agents/x/a2a", None, "a2a", "http://h:1/agents/x/a2a"),
    ("http://h:1", "x", "agui", "http://h:1/agents/x/agui"),
    ("http://h:1/", None, "agui", "http://h:1/agui"),
]


@pytest.mark.parametrize(("url", "agent", "route", "endpoint"), ENDPOINTS)
def test_the_endpoint_of_a_route(url: str, agent: str | None, route: str, endpoint: str) -> None:
    assert endpoint_url(url, agent, route) == endpoint


def test_no_stream_is_only_for_chat_completions() -> None:
    with pytest.raises(ValueError):
        BenchConfig(url="http://h", transport="agui", stream=False)
