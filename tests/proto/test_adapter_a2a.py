"""The sans-IO A2A adapter: state table, envelopes, parts, event translation."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from tests._support import a2a_schema
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.adapters import a2a, a2a_card
from uamp_proto.adapters.a2a import Dialect, TaskState, Trigger
from uamp_proto.errors import LocalProtocolError
from uamp_proto.ids import counter_ids

# --- the state table ------------------------------------------------------------------

LISTED = [(s, t, new) for s, row in a2a.TRANSITIONS.items() for t, new in row.items()]
UNLISTED = [
    (s, t) for s, t in itertools.product(TaskState, Trigger) if t not in a2a.TRANSITIONS.get(s, {})
]


@pytest.mark.parametrize(("state", "trigger", "new"), LISTED)
def test_every_listed_transition(state: TaskState, trigger: Trigger, new: TaskState) -> None:
    assert a2a.transition(state, trigger) is new


@pytest.mark.parametrize(("state", "trigger"), UNLISTED)
def test_every_unlisted_transition_raises(state: TaskState, trigger: Trigger) -> None:
    if trigger is Trigger.CANCEL:
        with pytest.raises(a2a.A2AError) as err:
            a2a.transition(state, trigger)
        assert err.value.code == a2a.TASK_NOT_CANCELABLE
    elif trigger is Trigger.RESUME:
        with pytest.raises(a2a.A2AError) as err:
            a2a.transition(state, trigger)
        assert err.value.code == a2a.UNSUPPORTED_OPERATION
    else:
        with pytest.raises(LocalProtocolError):
            a2a.transition(state, trigger)


def test_terminal_states_have_no_way_out() -> None:
    for state in a2a.TERMINAL_STATES:
        assert state not in a2a.TRANSITIONS
        assert state.is_terminal


@pytest.mark.parametrize(
    ("state", "v1", "rest"),
    [
        (TaskState.WORKING, "TASK_STATE_WORKING", "running"),
        (TaskState.INPUT_REQUIRED, "TASK_STATE_INPUT_REQUIRED", "input-required"),
        (TaskState.CANCELED, "TASK_STATE_CANCELED", "canceled"),
    ],
)
def test_state_spellings(state: TaskState, v1: str, rest: str) -> None:
    assert state.v1 == v1 and state.rest == rest


# --- envelopes ----------------------------------------------------------------------------


def _body(obj: Any) -> bytes:
    return json.dumps(obj).encode()


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"{", a2a.PARSE_ERROR),
        (b"", a2a.PARSE_ERROR),
        (b"[]", a2a.INVALID_REQUEST),
        (b'"x"', a2a.INVALID_REQUEST),
        (_body({"jsonrpc": "2.0", "id": True, "method": "GetTask"}), a2a.INVALID_REQUEST),
        (_body({"jsonrpc": "2.0", "id": 1.5, "method": "GetTask"}), a2a.INVALID_REQUEST),
        (_body({"id": 1, "method": "GetTask"}), a2a.INVALID_REQUEST),
        (_body({"jsonrpc": "2.0", "id": 1}), a2a.INVALID_REQUEST),
        (_body({"jsonrpc": "2.0", "id": 1, "method": "message/explode"}), a2a.METHOD_NOT_FOUND),
        (_body({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": 3}), a2a.INVALID_PARAMS),
    ],
)
def test_bad_envelopes(body: bytes, code: int) -> None:
    with pytest.raises(a2a.A2AError) as err:
        a2a.parse_rpc(body)
    assert err.value.code == code


def test_errors_after_the_id_was_read_keep_it() -> None:
    with pytest.raises(a2a.RpcError) as err:
        a2a.parse_rpc(_body({"jsonrpc": "2.0", "id": "abc", "method": "nope"}))
    assert err.value.request_id == "abc"


@pytest.mark.parametrize(
    ("method", "dialect", "op"),
    [
        ("SendMessage", Dialect.V1, "send"),
        ("SendStreamingMessage", Dialect.V1, "stream"),
        ("ListTasks", Dialect.V1, "list"),
        ("SubscribeToTask", Dialect.V1, "subscribe"),
        ("message/send", Dialect.V03, "send"),
        ("message/stream", Dialect.V03, "stream"),
        ("tasks/resubscribe", Dialect.V03, "subscribe"),
        ("tasks/cancel", Dialect.V03, "cancel"),
    ],
)
def test_methods_pick_the_dialect(method: str, dialect: Dialect, op: str) -> None:
    call = a2a.parse_rpc(_body({"jsonrpc": "2.0", "id": 9, "method": method}))
    assert (call.dialect, call.operation, call.params, call.id) == (dialect, op, {}, 9)


def test_error_objects_per_dialect() -> None:
    err = a2a.A2AError(a2a.PAYMENT_REQUIRED, "pay", data={"status_code": 402, "accepts": [{}]})
    v1 = a2a.error_response(1, err, Dialect.V1)["error"]
    assert v1["code"] == -32402
    assert v1["data"][0]["reason"] == "PAYMENT_REQUIRED"
    assert v1["data"][0]["metadata"] == {"status_code": "402", "accepts": "[{}]"}
    assert v1["data"][1]["status_code"] == 402
    v03 = a2a.error_response(1, err, Dialect.V03)["error"]
    assert v03 == {"code": -32402, "message": "pay", "data": {"status_code": 402, "accepts": [{}]}}


# --- messages and parts ---------------------------------------------------------------------

ITEMS: list[ty.ContentItem] = [
    ty.TextContent(text="hello"),
    ty.ImageContent(image="aGk=", format="png"),
    ty.ImageContent(image=ty.MediaURL(url="https://x/img.jpg"), format="jpeg"),
    ty.AudioContent(audio="AAA=", format="wav"),
    ty.FileContent(file="JVBE", filename="a.pdf", mime_type="application/pdf"),
]


@pytest.mark.parametrize("dialect", list(Dialect))
@pytest.mark.parametrize("item", ITEMS, ids=lambda i: type(i).__name__)
def test_parts_round_trip(dialect: Dialect, item: ty.ContentItem) -> None:
    role = "ROLE_USER" if dialect is Dialect.V1 else "user"
    wire = {"messageId": "m", "role": role, "parts": [a2a.render_part(item, dialect)]}
    assert a2a.parse_message(wire).items == [item]


def test_v1_and_v03_and_rest_part_spellings() -> None:
    v1 = {"text": "a"}
    v03 = {"kind": "text", "text": "a"}
    rest = {"type": "text", "text": "a"}
    for part in (v1, v03, rest):
        msg = a2a.parse_message({"role": "user", "parts": [part]}, message_id="given")
        assert msg.items == [ty.TextContent(text="a")] and msg.message_id == "given"


def test_data_parts_become_json_text_and_data() -> None:
    msg = a2a.parse_message(
        {"messageId": "m", "role": "user", "parts": [{"kind": "data", "data": {"k": [1]}}]}
    )
    assert msg.data == [{"k": [1]}]
    assert msg.items == [ty.TextContent(text='{"k":[1]}')]


@pytest.mark.parametrize(
    ("message", "where"),
    [
        (None, "'message' must be an object"),
        ({"role": "bot", "parts": [{"text": "x"}], "messageId": "m"}, "role"),
        ({"role": "user", "parts": [], "messageId": "m"}, "parts"),
        ({"role": "user", "parts": [{}], "messageId": "m"}, "has no content"),
        ({"role": "user", "parts": [{"kind": "file", "file": {}}], "messageId": "m"}, "bytes"),
        ({"role": "user", "parts": [{"kind": "video"}], "messageId": "m"}, "kind"),
        ({"role": "user", "parts": [{"text": "x"}]}, "messageId"),
        ({"role": "user", "parts": [{"text": "x"}], "messageId": 3}, "messageId"),
    ],
)
def test_bad_messages_are_invalid_params(message: Any, where: str) -> None:
    with pytest.raises(a2a.A2AError) as err:
        a2a.parse_message(message)
    assert err.value.code == a2a.INVALID_PARAMS
    assert where in err.value.message


def test_tool_results_by_data_part_or_by_text() -> None:
    calls = [ty.ToolInvocation(id="c1", name="f", arguments="{}")]
    by_text = a2a.parse_message({"messageId": "m", "role": "user", "parts": [{"text": "42"}]})
    assert a2a.parse_tool_results(by_text, calls) == [
        ty.Message(role="tool", tool_call_id="c1", content="42")
    ]
    two = [*calls, ty.ToolInvocation(id="c2", name="g", arguments="{}")]
    data = a2a.parse_message(
        {
            "messageId": "m",
            "role": "user",
            "parts": [{"data": {"tool_results": [{"call_id": "c2", "result": {"v": 1}}]}}],
        }
    )
    with pytest.raises(a2a.A2AError, match="c1"):
        a2a.parse_tool_results(data, two)
    stray = a2a.parse_message(
        {"messageId": "m", "role": "user", "parts": [{"data": {"call_id": "zz", "result": ""}}]}
    )
    with pytest.raises(a2a.A2AError, match="zz"):
        a2a.parse_tool_results(stray, calls)


# --- event translation ------------------------------------------------------------------------


def _task() -> a2a.A2ATask:
    task = a2a.A2ATask(id="t1", context_id="c1", agent="demo")
    task.move(Trigger.START, "2030-01-01T00:00:00Z")
    return task


def _text(text: str) -> ev.ResponseDelta:
    return ev.ResponseDelta(response_id="r1", delta=ty.DeltaText(text=text))


def test_text_streams_as_appended_chunks_then_an_empty_last_chunk() -> None:
    task = _task()
    run = a2a.TaskRun(task, counter_ids())
    updates = [u for e in (_text("Hel"), _text(""), _text("lo")) for u in run.feed(e)]
    # The first output announces working.
    assert [(u.kind, u.state, u.append, u.text) for u in updates] == [
        ("status", TaskState.WORKING, False, None),
        ("artifact", None, False, "Hel"),
        ("artifact", None, True, "lo"),
    ]
    final = run.complete([ty.Message(role="assistant", content="Hello")], "T")
    assert [(u.kind, u.append, u.last_chunk, u.text) for u in final[:1]] == [
        ("artifact", True, True, "")
    ]
    # A client that concatenates the chunks has the answer exactly once.
    chunks = [u for u in [*updates, *final] if u.kind == "artifact"]
    assert "".join(u.text or "" for u in chunks) == "Hello"
    assert final[1].state is TaskState.COMPLETED and final[1].final
    assert task.state is TaskState.COMPLETED and task.timestamp == "T"
    assert task.history[-1].items == [ty.TextContent(text="Hello")]
    assert task.artifacts[0].items == [ty.TextContent(text="Hello")]
    v1 = a2a.render_update(final[1], Dialect.V1)["statusUpdate"]
    assert v1["status"]["state"] == "TASK_STATE_COMPLETED"
    assert v1["status"]["message"]["role"] == "ROLE_AGENT"
    assert "final" not in v1
    v03 = a2a.render_update(final[1], Dialect.V03)
    assert (v03["kind"], v03["final"], v03["status"]["state"]) == (
        "status-update",
        True,
        "completed",
    )
    chunk = a2a.render_update(final[0], Dialect.V1)["artifactUpdate"]
    assert chunk["append"] is True and chunk["lastChunk"] is True
    assert chunk["artifact"]["parts"] == [{"text": ""}]


def test_uamp_internals_stay_inside_unless_the_extension_is_active() -> None:
    events: list[ev.Event] = [
        ev.Thinking(content="hmm"),
        ev.ResponseDelta(
            delta=ty.DeltaToolCall(tool_call=ty.ToolCallFragment(id="c", name="f", arguments="{"))
        ),
        ev.ToolCallDone(call_id="c"),
        ev.Progress(target="x", stage="ack", delta_seq=3),
        ev.UsageDelta(delta=ty.UsageStats(input_tokens=1)),
    ]
    plain = a2a.TaskRun(_task(), counter_ids())
    assert [u for e in events for u in plain.feed(e)] == []
    asked = a2a.TaskRun(_task(), counter_ids(), uamp_events=True)
    noted = [u for e in events for u in asked.feed(e)]
    assert [u.state for u in noted] == [TaskState.WORKING] * 4  # working, then three notes
    assert noted[1].message is not None
    assert noted[1].message.data == [{"uamp": {"type": "thinking", "content": "hmm"}}]


def test_progress_text_is_a_readable_working_message() -> None:
    run = a2a.TaskRun(_task(), counter_ids())
    working, said = run.feed(ev.Progress(target="response", message="Looking it up"))
    assert working.message is None
    assert said.message is not None and said.message.items == [ty.TextContent(text="Looking it up")]
    assert said.message.data == []


def test_artifact_deltas_carry_file_and_data_parts() -> None:
    task = _task()
    run = a2a.TaskRun(task, counter_ids())
    items: list[ty.ContentItem] = [
        ty.FileContent(file="dGNr", filename="out.txt", mime_type="text/plain"),
        ty.FileContent(
            file=ty.MediaURL(url="https://x/o.txt"), filename="o.txt", mime_type="text/plain"
        ),
        a2a.data_item({"key": "value", "count": 42}),
    ]
    first = a2a.artifact_delta(items[:1], artifact_id="a1", name="files")
    more = a2a.artifact_delta(items[1:], artifact_id="a1", append=True, last_chunk=True)
    updates = [u for e in (first, more) for u in run.feed(e)]
    rendered = [a2a.render_update(u, Dialect.V1) for u in updates[1:]]
    assert rendered[0]["artifactUpdate"]["artifact"]["parts"] == [
        {"raw": "dGNr", "mediaType": "text/plain", "filename": "out.txt"}
    ]
    second = rendered[1]["artifactUpdate"]
    assert second["append"] is True and second["lastChunk"] is True
    assert second["artifact"]["parts"] == [
        {"url": "https://x/o.txt", "mediaType": "text/plain", "filename": "o.txt"},
        {"data": {"key": "value", "count": 42}},
    ]
    assert [len(a.items) for a in task.artifacts] == [3]
    v03 = a2a.render_update(updates[2], Dialect.V03)
    assert v03["artifact"]["parts"][1] == {"kind": "data", "data": {"key": "value", "count": 42}}


def test_a_first_message_delta_is_a_direct_reply_and_no_task_update() -> None:
    task = _task()
    run = a2a.TaskRun(task, counter_ids())
    assert run.feed(a2a.message_delta([ty.TextContent(text="Direct")])) == []
    assert run.reply is not None and run.reply.items == [ty.TextContent(text="Direct")]
    assert run.feed(_text("ignored")) == []
    assert run.complete([], "T") == []
    late = a2a.TaskRun(_task(), counter_ids())
    late.feed(_text("x"))
    late.feed(a2a.message_delta([ty.TextContent(text="too late")]))
    assert late.reply is None


@pytest.mark.parametrize(
    ("code", "state"),
    [
        ("input_required", TaskState.INPUT_REQUIRED),
        ("auth_required", TaskState.AUTH_REQUIRED),
        ("rejected", TaskState.REJECTED),
    ],
)
def test_pause_codes_end_the_turn_in_their_state(code: str, state: TaskState) -> None:
    task = _task()
    run = a2a.TaskRun(task, counter_ids())
    [status] = run.pause(a2a.PAUSE_CODES[code], "What is your name?", [], "T")
    assert task.state is state and status.final and status.state is state
    assert status.message is not None
    assert status.message.items == [ty.TextContent(text="What is your name?")]
    paused = state is not TaskState.REJECTED
    assert (
        task.conversation[-1:] == [ty.Message(role="assistant", content="What is your name?")]
    ) is paused


def test_require_input_pauses_with_the_tool_calls() -> None:
    task = _task()
    run = a2a.TaskRun(task, counter_ids())
    call = ty.ToolInvocation(id="c1", name="get_weather", arguments='{"city":"Oslo"}')
    [status] = run.require_input([], [call], "T")
    assert task.state is TaskState.INPUT_REQUIRED and status.final
    assert task.pending_tool_calls == [call]
    events = a2a.rest_events(status)
    assert events == [
        (
            "task.input_required",
            {
                "id": "t1",
                "contextId": "c1",
                "status": "input-required",
                "tool_calls": [{"id": "c1", "name": "get_weather", "arguments": '{"city":"Oslo"}'}],
            },
        )
    ]


def test_fail_and_cancel() -> None:
    task = _task()
    run = a2a.TaskRun(task, counter_ids())
    [status] = run.fail(ty.ErrorInfo(code="tool_failed", message="down"), "T")
    assert task.state is TaskState.FAILED
    assert a2a.rest_events(status) == [
        (
            "task.failed",
            {
                "id": "t1",
                "contextId": "c1",
                "status": "failed",
                "code": "tool_failed",
                "message": "down",
            },
        )
    ]
    other = _task()
    [cancel] = a2a.TaskRun(other, counter_ids()).cancel("T")
    assert other.state is TaskState.CANCELED
    assert a2a.rest_events(cancel)[0][0] == "task.canceled"
    with pytest.raises(a2a.A2AError):
        a2a.TaskRun(task, counter_ids()).cancel("T")  # failed tasks cannot be canceled


def test_render_task_history_length_and_artifacts() -> None:
    task = _task()
    run = a2a.TaskRun(task, counter_ids())
    task.history.append(
        a2a.StoredMessage(message_id="u", role="user", items=[ty.TextContent(text="q")])
    )
    run.feed(_text("a"))
    run.complete([], "T")
    full = a2a.render_task(task, Dialect.V03)
    assert [m["role"] for m in full["history"]] == ["user", "agent"]
    assert full["kind"] == "task" and full["artifacts"][0]["parts"] == [
        {"kind": "text", "text": "a"}
    ]
    assert "history" not in a2a.render_task(task, Dialect.V1, history_length=0)
    assert "artifacts" not in a2a.render_task(task, Dialect.V1, include_artifacts=False)


# --- params and the card ------------------------------------------------------------------------


def test_opt_int_and_tools() -> None:
    assert a2a.opt_int({"n": "5"}, "n") == 5
    assert a2a.opt_int({}, "n") is None
    for bad in (-1, True, "x", 1.5):
        with pytest.raises(a2a.A2AError):
            a2a.opt_int({"n": bad}, "n")
    tools = a2a.parse_tools(
        {"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}
    )
    assert tools[0].function.name == "f"
    with pytest.raises(a2a.A2AError):
        a2a.parse_tools({"tools": [{"name": "f"}]})


def _caps() -> ty.Capabilities:
    return ty.Capabilities(
        id="x",
        provider="p",
        modalities=["text", "audio"],
        supports_streaming=True,
        tools=ty.ToolCapabilities(supports_tools=True, built_in_tools=["search"]),
        provides=["search", "chart"],
    )


def _card(**extra: Any) -> dict[str, Any]:
    url = "http://h/agents/x/a2a"
    return a2a_card.agent_card(
        name="x",
        capabilities=_caps(),
        interfaces=[
            a2a_card.Interface(url, "JSONRPC", "1.0"),
            a2a_card.Interface(url, "JSONRPC", "0.3"),
            a2a_card.Interface(url, "HTTP+JSON", "1.0"),
            a2a_card.Interface("127.0.0.1:5", "GRPC", "1.0", tenant="x"),
        ],
        base_url="http://h",
        **extra,
    )


def test_agent_card_is_the_spec_card_with_uamp_data_in_an_extension() -> None:
    card = _card()
    assert [(i["protocolBinding"], i["protocolVersion"]) for i in card["supportedInterfaces"]] == [
        ("JSONRPC", "1.0"),
        ("JSONRPC", "0.3"),
        ("HTTP+JSON", "1.0"),
        ("GRPC", "1.0"),
    ]
    [extension] = card["capabilities"]["extensions"]
    assert extension["uri"] == a2a_card.CAPABILITIES_EXTENSION
    assert extension["params"]["provides"] == ["search", "chart"]
    assert [s["id"] for s in card["skills"]] == ["x", "tool.search", "provides.chart"]
    assert "client-tools" in card["skills"][0]["tags"]
    assert card["defaultOutputModes"] == ["text/plain", "audio/*"]
    for member in ("url", "preferredTransport", "protocolVersion", "modelCapabilities"):
        assert member not in card


@pytest.mark.parametrize("secured", [False, True])
def test_the_1_0_card_validates_against_the_spec_schema(secured: bool) -> None:
    schemes = {"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}} if secured else None
    card = _card(extended_card=secured, security_schemes=schemes)
    assert a2a_schema.problems("Agent Card", card) == []
    legacy = a2a_card.legacy_card(card, rpc_url="http://h/agents/x/a2a")
    # The 0.3 members are exactly what the 1.0 schema refuses (and the 0.3 scheme shape).
    problems = a2a_schema.problems("Agent Card", legacy)
    assert len(problems) == 1 + secured
    assert all(p.startswith((": ", "securitySchemes/bearer: ")) for p in problems)


def test_legacy_card_adds_the_0_3_members_and_model_capabilities() -> None:
    card = _card()
    legacy = a2a_card.legacy_card(card, rpc_url="http://h/agents/x/a2a")
    assert legacy["protocolVersion"] == "0.3.0" and legacy["preferredTransport"] == "JSONRPC"
    assert legacy["url"] == "http://h/agents/x/a2a"
    assert legacy["modelCapabilities"] == card["capabilities"]["extensions"][0]["params"]
    assert legacy["additionalInterfaces"] == [
        {"url": "http://h/agents/x/a2a", "transport": "JSONRPC"}
    ]


@pytest.mark.parametrize(
    ("scheme", "legacy_scheme"),
    [
        ({"httpAuthSecurityScheme": {"scheme": "Bearer"}}, {"type": "http", "scheme": "Bearer"}),
        (
            {"apiKeySecurityScheme": {"location": "header", "name": "X-Key"}},
            {"type": "apiKey", "in": "header", "name": "X-Key"},
        ),
        ({"mtlsSecurityScheme": {}}, {"type": "mutualTLS"}),
        (
            {"openIdConnectSecurityScheme": {"openIdConnectUrl": "https://i/.well-known"}},
            {"type": "openIdConnect", "openIdConnectUrl": "https://i/.well-known"},
        ),
    ],
)
def test_the_0_3_card_has_0_3_security_shapes(
    scheme: dict[str, Any], legacy_scheme: dict[str, Any]
) -> None:
    card = _card(extended_card=True, security_schemes={"s": scheme})
    legacy = a2a_card.legacy_card(card, rpc_url="http://h/agents/x/a2a")
    assert legacy["securitySchemes"] == {"s": legacy_scheme}
    assert legacy["security"] == [{"s": []}]
    assert legacy["supportsAuthenticatedExtendedCard"] is True
    assert legacy["securityRequirements"] == card["securityRequirements"]  # 1.0 readers


def test_the_0_3_sdk_payload_is_the_0_3_models_members_without_defaults() -> None:
    card = _card(
        extended_card=True, security_schemes={"b": {"httpAuthSecurityScheme": {"scheme": "B"}}}
    )
    legacy = a2a_card.legacy_card(card, rpc_url="http://h/agents/x/a2a")
    view = json.loads(a2a_card.sdk_0_3_payload({**legacy, "signatures": [{"protected": "x"}]}))
    assert set(view) == {
        "additionalInterfaces",
        "capabilities",
        "defaultInputModes",
        "defaultOutputModes",
        "description",
        "name",
        "provider",
        "securitySchemes",
        "skills",
        "supportsAuthenticatedExtendedCard",
        "url",
        "version",
    }  # no 1.0-only members, no modelCapabilities, no defaults, no signatures,
    # no empty members: ``security: [{"b": []}]`` is empty all the way down
    assert view["securitySchemes"] == {"b": {"scheme": "B"}}  # its type is the model default
    assert "extendedAgentCard" not in view["capabilities"]
    assert (
        a2a_card.sdk_0_3_payload({**legacy, "preferredTransport": "GRPC"})
        != json.dumps(view, sort_keys=True, separators=(",", ":")).encode()
    )
    assert b"\\u00e9" in a2a_card.sdk_0_3_payload({**legacy, "description": "caf\u00e9"})
