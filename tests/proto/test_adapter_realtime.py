"""The Realtime adapter without sockets: client events, conversation, response encoder."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.adapters import realtime as rt
from uamp_proto.ids import counter_ids
from uamp_proto.voice import CallAnswer, CallEnded, CallState


def session(beta: bool = False) -> rt.RealtimeSession:
    return rt.RealtimeSession(session_id="sess_1", model="m", beta=beta, ids=counter_ids())


def user_item(text: str, item_id: str | None = None) -> dict[str, Any]:
    item: dict[str, Any] = {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": text}],
    }
    if item_id:
        item["id"] = item_id
    return item


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


def test_session_created_and_update_ga() -> None:
    s = session()
    created = s.created_event()
    assert created["type"] == "session.created"
    assert created["session"]["type"] == "realtime"
    assert created["session"]["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 24000}
    handled = s.handle(
        {
            "type": "session.update",
            "session": {
                "type": "realtime",
                "instructions": "Short.",
                "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
                "tool_choice": {"type": "function", "name": "f"},
                "audio": {
                    "input": {"format": {"type": "audio/pcmu"}},
                    "output": {"voice": "marin"},
                },
                "max_output_tokens": 7,
            },
        }
    )
    (updated,) = handled.replies
    assert updated["type"] == "session.updated"
    sess = updated["session"]
    assert sess["instructions"] == "Short." and sess["tools"][0]["name"] == "f"
    assert sess["tool_choice"] == {"type": "function", "name": "f"}
    assert sess["audio"]["input"]["format"]["type"] == "audio/pcmu"
    assert sess["audio"]["output"]["voice"] == "marin"
    assert s.settings.input_format == "g711_ulaw" and s.settings.max_output_tokens == 7


def test_session_update_beta_shape() -> None:
    s = session(beta=True)
    (updated,) = s.handle(
        {
            "type": "session.update",
            "session": {"modalities": ["text", "audio"], "input_audio_format": "g711_alaw"},
        }
    ).replies
    assert updated["session"]["modalities"] == ["text", "audio"]
    assert updated["session"]["input_audio_format"] == "g711_alaw"
    assert "audio" not in updated["session"]


BAD_EVENTS: list[tuple[Any, str, str | None]] = [
    ("just a string", "invalid_type", "event"),
    ({"no": "type"}, "missing_required_parameter", "type"),
    ({"type": "no.such"}, "invalid_value", "type"),
    ({"type": "session.update", "session": {"type": "transcription"}}, "unsupported_value", None),
    ({"type": "session.update", "session": {"tools": "x"}}, "invalid_type", "session.tools"),
    ({"type": "session.update", "session": {"tool_choice": "sometimes"}}, "invalid_value", None),
    (
        {"type": "session.update", "session": {"input_audio_format": "mp3"}},
        "invalid_value",
        "session.input_audio_format",
    ),
    ({"type": "input_audio_buffer.append", "audio": "!!!"}, "invalid_value", "audio"),
    ({"type": "input_audio_buffer.commit"}, "input_audio_buffer_commit_empty", None),
    ({"type": "conversation.item.create", "item": {"type": "bogus"}}, "invalid_value", "item.type"),
    (
        {"type": "conversation.item.create", "item": {"type": "message", "role": "user"}},
        "invalid_type",
        "item.content",
    ),
    (
        {
            "type": "conversation.item.create",
            "item": {
                "type": "message",
                "role": "user",
                "content": [{"type": "output_text", "text": "x"}],
            },
        },
        "invalid_value",
        "item.content[0].type",
    ),
    (
        {
            "type": "conversation.item.create",
            "item": {"type": "function_call_output", "call_id": "nope", "output": "x"},
        },
        "invalid_value",
        "item.call_id",
    ),
    (
        {"type": "conversation.item.create", "item": user_item("x"), "previous_item_id": "zz"},
        "item_not_found",
        "previous_item_id",
    ),
    ({"type": "conversation.item.delete", "item_id": "zz"}, "item_not_found", "item_id"),
    ({"type": "conversation.item.retrieve"}, "missing_required_parameter", "item_id"),
    ({"type": "response.create", "response": {"conversation": "x"}}, "invalid_value", None),
    ({"type": "response.create", "response": {"max_output_tokens": -1}}, "invalid_value", None),
    ({"type": "payment.submit"}, "invalid_type", "payment"),
]


@pytest.mark.parametrize(("event", "code", "param"), BAD_EVENTS)
def test_bad_client_events_get_error_events(event: Any, code: str, param: str | None) -> None:
    s = session()
    if isinstance(event, dict):
        event = {**event, "event_id": "evt_client"}
    handled = s.handle(event)
    assert handled.action is None
    (error,) = handled.replies
    assert error["type"] == "error"
    assert error["error"]["code"] == code
    if param is not None:
        assert error["error"]["param"] == param
    if isinstance(event, dict):
        assert error["error"]["event_id"] == "evt_client"
    # The session goes on.
    assert types(s.handle({"type": "input_audio_buffer.clear"}).replies) == [
        "input_audio_buffer.cleared"
    ]


def test_conversation_items_create_insert_delete_retrieve() -> None:
    s = session()
    replies = s.handle({"type": "conversation.item.create", "item": user_item("a", "i_a")}).replies
    assert types(replies) == ["conversation.item.added", "conversation.item.done"]
    assert replies[0]["previous_item_id"] is None
    s.handle({"type": "conversation.item.create", "item": user_item("c", "i_c")})
    replies = s.handle(
        {
            "type": "conversation.item.create",
            "item": user_item("b", "i_b"),
            "previous_item_id": "i_a",
        }
    ).replies
    assert replies[0]["previous_item_id"] == "i_a"
    s.handle(
        {"type": "conversation.item.create", "item": user_item("0"), "previous_item_id": "root"}
    )
    assert [m.text for m in s.messages()] == ["0", "a", "b", "c"]
    dup = s.handle({"type": "conversation.item.create", "item": user_item("again", "i_a")})
    assert dup.replies[0]["error"]["code"] == "duplicate_item_id"
    (deleted,) = s.handle({"type": "conversation.item.delete", "item_id": "i_b"}).replies
    assert deleted == {
        "type": "conversation.item.deleted",
        "event_id": deleted["event_id"],
        "item_id": "i_b",
    }
    (got,) = s.handle({"type": "conversation.item.retrieve", "item_id": "i_c"}).replies
    assert got["item"]["content"][0]["text"] == "c"
    assert [m.text for m in s.messages()] == ["0", "a", "c"]


def test_beta_item_create_answers_created() -> None:
    s = session(beta=True)
    assert types(
        s.handle({"type": "conversation.item.create", "item": user_item("x")}).replies
    ) == ["conversation.item.created"]


def _answered(s: rt.RealtimeSession, audio: str, answer: CallAnswer) -> list[dict[str, Any]]:
    """Append ``audio`` as the first audio of a call and answer the call with ``answer``."""
    handled = s.handle({"type": "input_audio_buffer.append", "audio": audio, "event_id": "e1"})
    assert handled.replies == []
    placed = handled.action
    assert isinstance(placed, rt.PlaceCall) and s.call.state is CallState.RINGING
    return s.call_answered(placed, answer, 10.0)


def test_audio_buffer_becomes_an_audio_content_item() -> None:
    s = session()
    chunk = base64.b64encode(b"\x01\x02\x03\x04").decode()
    assert types(_answered(s, chunk, CallAnswer())) == ["voice.accept"]
    assert s.handle({"type": "input_audio_buffer.append", "audio": chunk}) == rt.Handled(replies=[])
    assert s.buffered_audio == 8
    replies = s.handle({"type": "input_audio_buffer.commit"}).replies
    assert types(replies) == [
        "input_audio_buffer.committed",
        "conversation.item.added",
        "conversation.item.done",
    ]
    assert s.buffered_audio == 0
    (message,) = s.messages()
    (audio,) = message.content_items or []
    assert isinstance(audio, ty.AudioContent) and audio.format == "pcm16"
    assert base64.b64decode(audio.audio) == b"\x01\x02\x03\x04" * 2


def test_audio_buffer_cap() -> None:
    s = rt.RealtimeSession(
        session_id="s", model=None, beta=False, ids=counter_ids(), max_audio_buffer=4
    )
    ok = base64.b64encode(b"1234").decode()
    assert types(_answered(s, ok, CallAnswer())) == ["voice.accept"]
    (err,) = s.handle({"type": "input_audio_buffer.append", "audio": ok}).replies
    assert err["error"]["code"] == "input_audio_buffer_full"


def test_messages_merge_calls_and_outputs() -> None:
    s = session()
    for item in [
        user_item("weather?"),
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Let me see."}],
        },
        {"type": "function_call", "call_id": "c1", "name": "w", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "and this"},
                {"type": "input_image", "image_url": "data:image/png;base64,aGk="},
            ],
        },
    ]:
        assert (
            s.handle({"type": "conversation.item.create", "item": item}).replies[0]["type"]
            != "error"
        )
    msgs = s.messages()
    assert [m.role for m in msgs] == ["user", "assistant", "tool", "user"]
    assert msgs[1].content == "Let me see."
    assert msgs[1].tool_calls == [ty.ToolInvocation(id="c1", name="w", arguments="{}")]
    assert msgs[2].tool_call_id == "c1" and msgs[2].content == "sunny"
    image = (msgs[3].content_items or [])[1]
    assert isinstance(image, ty.ImageContent) and image.image == "aGk=" and image.format == "png"


def test_response_create_options_and_turn_request() -> None:
    s = session()
    s.handle(
        {"type": "session.update", "session": {"instructions": "Base.", "max_output_tokens": 9}}
    )
    s.handle({"type": "conversation.item.create", "item": user_item("hi", "i1")})
    handled = s.handle(
        {
            "type": "response.create",
            "event_id": "e1",
            "response": {
                "instructions": "Override.",
                "tools": [{"type": "function", "name": "t"}],
                "tool_choice": "required",
                "conversation": "none",
                "input": [{"type": "item_reference", "id": "i1"}, user_item("extra")],
                "metadata": {"k": "v"},
            },
        }
    )
    action = handled.action
    assert isinstance(action, rt.CreateResponse) and action.client_event_id == "e1"
    req = s.turn_request(action.options, agent="demo", response_id="resp_1", payment_token="p")
    assert req.instructions == "Override." and req.tool_choice == "required"
    assert [t.function.name for t in req.tools] == ["t"]
    assert [m.text for m in req.messages] == ["hi", "extra"]
    assert req.metadata["max_tokens"] == 9 and req.metadata["response_metadata"] == {"k": "v"}
    assert req.payment_token == "p"
    assert len(s.items) == 1  # out-of-band input is not added to the conversation


def test_cancel_and_payment_actions() -> None:
    s = session()
    assert s.handle({"type": "response.cancel", "response_id": "r"}).action == rt.CancelResponse(
        response_id="r"
    )
    action = s.handle(
        {"type": "payment.submit", "payment": {"token": "t", "scheme": "token"}}
    ).action
    assert action == rt.SubmitPayment(token="t", scheme="token")


def test_truncate_assistant_audio() -> None:
    s = session()
    s.handle(
        {
            "type": "conversation.item.create",
            "item": {
                "id": "a1",
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_audio", "transcript": "hello there"}],
            },
        }
    )
    (truncated,) = s.handle(
        {
            "type": "conversation.item.truncate",
            "item_id": "a1",
            "content_index": 0,
            "audio_end_ms": 100,
        }
    ).replies
    assert truncated["type"] == "conversation.item.truncated" and truncated["audio_end_ms"] == 100
    (err,) = s.handle(
        {
            "type": "conversation.item.truncate",
            "item_id": "a1",
            "content_index": 3,
            "audio_end_ms": 1,
        }
    ).replies
    assert err["error"]["param"] == "content_index"


# --- the response encoder ----------------------------------------------------------


def run_encoder(
    events: list[ev.Event], beta: bool = False
) -> tuple[list[dict[str, Any]], rt.ResponseEncoder]:
    s = session(beta)
    enc = rt.ResponseEncoder(s, "resp_1", modalities=["text"])
    out: list[dict[str, Any]] = []
    for e in events:
        out += enc.feed(e)
    return out, enc


def text(t: str) -> ev.ResponseDelta:
    return ev.ResponseDelta(delta=ty.DeltaText(text=t))


DONE = ev.ResponseDone(
    response=ty.ResponseOutput(
        status="completed", output=[], usage=ty.UsageStats(input_tokens=2, output_tokens=3)
    )
)

#: The events of one text message item, from its first delta to its end.
TEXT_ITEM = [
    "response.output_item.added",
    "conversation.item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "conversation.item.done",
]

ENCODER_TABLE: list[tuple[str, list[ev.Event], list[str]]] = [
    (
        "text",
        [ev.ResponseCreated(response_id="resp_1"), text("Hel"), text("lo"), DONE],
        [
            "response.created",
            "response.output_item.added",
            "conversation.item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "conversation.item.done",
            "response.done",
        ],
    ),
    (
        "text then tool call",
        [
            ev.ResponseCreated(response_id="resp_1"),
            text("Checking."),
            ev.ToolCall(call_id="c1", name="w", arguments='{"a":1}'),
        ],
        [
            "response.created",
            *TEXT_ITEM,
            "response.output_item.added",
            "conversation.item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "conversation.item.done",
        ],
    ),
    (
        "audio with transcript then text",
        [
            ev.ResponseDelta(delta=ty.DeltaAudio(audio="AAA=")),
            ev.TranscriptDelta(transcript="hi"),
            text("!"),
        ],
        [
            "response.output_item.added",
            "conversation.item.added",
            "response.content_part.added",
            "response.output_audio.delta",
            "response.output_audio_transcript.delta",
            "response.output_audio.done",
            "response.output_audio_transcript.done",
            "response.content_part.done",
            "response.content_part.added",
            "response.output_text.delta",
        ],
    ),
    (
        "server tools and thinking are not shown",
        [
            ev.ResponseDelta(
                delta=ty.DeltaToolCall(tool_call=ty.ToolCallFragment(id="s", name="own"))
            ),
            ev.Thinking(content="hmm"),
            ev.UsageDelta(delta=ty.UsageStats(input_tokens=1)),
        ],
        [],
    ),
    (
        "cancelled mid-text",
        [text("par"), ev.ResponseCancelled(response_id="resp_1")],
        [
            *TEXT_ITEM,
            "response.done",
        ],
    ),
]


@pytest.mark.parametrize(
    ("name", "events", "expected"), ENCODER_TABLE, ids=[t[0] for t in ENCODER_TABLE]
)
def test_encoder_order(name: str, events: list[ev.Event], expected: list[str]) -> None:
    out, _ = run_encoder(events)
    assert types(out) == expected


def test_encoder_indexes_and_done_payload() -> None:
    out, enc = run_encoder([text("Hi"), ev.ToolCall(call_id="c1", name="w", arguments="{}"), DONE])
    delta = next(e for e in out if e["type"] == "response.output_text.delta")
    assert delta["output_index"] == 0 and delta["content_index"] == 0
    assert delta["response_id"] == "resp_1"
    args = next(e for e in out if e["type"] == "response.function_call_arguments.done")
    assert args["output_index"] == 1 and args["call_id"] == "c1" and args["name"] == "w"
    done = out[-1]["response"]
    assert done["status"] == "completed"
    assert [i["type"] for i in done["output"]] == ["message", "function_call"]
    assert done["output"][0]["content"] == [{"type": "output_text", "text": "Hi"}]
    assert done["usage"]["total_tokens"] == 5
    assert enc.finished and enc.feed(text("late")) == []
    assert len(enc.session.items) == 2  # output joined the conversation


def test_encoder_failed_and_cancelled_status() -> None:
    error = ev.ResponseErrorEvent(error=ty.ErrorInfo(code="boom", message="It broke."))
    out, _ = run_encoder([text("x"), error])
    details = out[-1]["response"]["status_details"]
    assert out[-1]["response"]["status"] == "failed"
    assert details["error"] == {"type": "server_error", "code": "boom", "message": "It broke."}
    out, _ = run_encoder([ev.ResponseCancelled()])
    assert out[-1]["response"]["status_details"]["reason"] == "client_cancelled"


def test_encoder_beta_names() -> None:
    out, _ = run_encoder([text("a"), DONE], beta=True)
    assert types(out) == [
        "response.output_item.added",
        "conversation.item.created",
        "response.content_part.added",
        "response.text.delta",
        "response.text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.done",
    ]
    assert out[-1]["response"]["output"][0]["content"] == [{"type": "text", "text": "a"}]
    assert out[-1]["response"]["modalities"] == ["text"]


def test_conversation_none_keeps_items_out() -> None:
    s = session()
    enc = rt.ResponseEncoder(s, "r", modalities=["text"], conversation="none")
    out = enc.feed(text("x")) + enc.finish("completed")
    assert "conversation.item.added" not in types(out)
    assert s.items == [] and out[-1]["response"]["conversation_id"] is None


def test_payment_event_shape() -> None:
    event = rt.payment_event(ev.PaymentAccepted(payment_id="p1"), "evt_9")
    assert event == {"type": "payment.accepted", "payment_id": "p1", "event_id": "evt_9"}


def test_second_output_item_follows_the_first() -> None:
    s = session()
    s.handle({"type": "conversation.item.create", "item": user_item("q", "u1")})
    enc = rt.ResponseEncoder(s, "r", modalities=["text"])
    out = enc.feed(text("a")) + enc.feed(ev.ToolCall(call_id="c", name="f", arguments="{}"))
    added = [e for e in out if e["type"] == "conversation.item.added"]
    assert added[0]["previous_item_id"] == "u1"
    assert added[1]["previous_item_id"] == added[0]["item"]["id"]


# --- calls (the input audio buffer is a voice call; docs/voice.md) ------------------------


def test_an_accepted_call_carries_the_agents_sdp_and_ends_with_its_duration() -> None:
    s = session()
    pcm = base64.b64encode(b"\x00\x01" * 8).decode()
    (accept,) = _answered(s, pcm, CallAnswer(sdp="v=0 answer"))
    assert accept["type"] == "voice.accept" and accept["sdp"] == "v=0 answer"
    call_id = accept["call_id"]
    assert s.call.state is CallState.ACTIVE and s.buffered_audio == 16
    handled = s.handle({"type": "voice.end", "call_id": call_id, "reason": "bye"})
    assert handled.replies == [] and handled.action == rt.EndCall(reason="bye")
    (end,), ended = s.end_call(12.5, "bye")
    assert end["type"] == "voice.end" and end["call_id"] == call_id
    assert end["duration_ms"] == 2500.0 and end["reason"] == "bye"
    assert ended == CallEnded(
        call_id=call_id, session_id="sess_1", duration_ms=2500.0, reason="bye"
    )
    assert s.call.state is CallState.IDLE and s.buffered_audio == 0  # the call's audio went with it
    assert s.end_call(13.0) == ([], None)  # nothing more to end
    # The next audio places a new call.
    again = s.handle({"type": "input_audio_buffer.append", "audio": pcm}).action
    assert isinstance(again, rt.PlaceCall) and again.call_id != call_id


def test_a_declined_call_refuses_the_audio_and_the_session_goes_on() -> None:
    s = session()
    pcm = base64.b64encode(b"\x00\x01").decode()
    (err,) = _answered(s, pcm, CallAnswer(accept=False, reason="agent 'x' does not take calls"))
    assert err["type"] == "error" and err["error"]["event_id"] == "e1"
    assert err["error"]["code"] == "call_not_active" and err["error"]["param"] == "audio"
    assert "agent 'x' does not take calls" in err["error"]["message"]
    assert s.buffered_audio == 0 and s.call.state is CallState.IDLE
    # Text still works, and the next audio asks the agent again.
    added = s.handle({"type": "conversation.item.create", "item": user_item("hi")}).replies
    assert types(added)[0] == "conversation.item.added"
    assert isinstance(
        s.handle({"type": "input_audio_buffer.append", "audio": pcm}).action, rt.PlaceCall
    )


@pytest.mark.parametrize(
    ("event", "code", "param"),
    [
        ({"type": "voice.end"}, "invalid_event", "type"),
        ({"type": "voice.end", "call_id": 5}, "invalid_event", "type"),
    ],
)
def test_voice_end_without_a_call_is_refused(event: dict[str, Any], code: str, param: str) -> None:
    (err,) = session().handle(event).replies
    assert err["error"]["code"] == code and err["error"]["param"] == param


def test_voice_end_naming_another_call_is_refused() -> None:
    s = session()
    _answered(s, base64.b64encode(b"ab").decode(), CallAnswer())
    (err,) = s.handle({"type": "voice.end", "call_id": "call_other"}).replies
    assert err["error"]["code"] == "unknown_call" and err["error"]["param"] == "call_id"
    assert s.call.state is CallState.ACTIVE


def test_an_answer_for_a_call_no_longer_ringing_is_dropped() -> None:
    s = session()
    placed = s.handle({"type": "input_audio_buffer.append", "audio": "AAAA"}).action
    assert isinstance(placed, rt.PlaceCall)
    s.end_call(1.0, "closed")
    assert s.call_answered(placed, CallAnswer(), 2.0) == []
    assert s.call.state is CallState.IDLE and s.buffered_audio == 0


# --- raw messages, cancel and signing: the pieces both Realtime servers share ---------------


@pytest.mark.parametrize(
    ("message", "code"),
    [
        (b"{not json", "invalid_json"),
        ("[" * 5000 + "]" * 5000, "json_too_complex"),
        (b'{"type": "no.such.event"}', "invalid_value"),
    ],
)
def test_a_bad_message_is_an_error_event_and_the_session_goes_on(message: Any, code: str) -> None:
    s = session()
    handled = s.handle_message(message)
    assert handled.action is None
    [reply] = handled.replies
    assert reply["type"] == "error" and reply["error"]["code"] == code
    after = s.handle_message(b'{"type": "response.create"}')
    assert isinstance(after.action, rt.CreateResponse)


@pytest.mark.parametrize(
    ("requested", "active", "refused"),
    [
        (None, None, "Cancellation failed: no active response found."),
        ("resp_1", None, "Cancellation failed: no active response found with id resp_1."),
        ("resp_2", "resp_1", "Cancellation failed: no active response found with id resp_2."),
        (None, "resp_1", None),
        ("resp_1", "resp_1", None),
    ],
)
def test_cancel_refusal(requested: str | None, active: str | None, refused: str | None) -> None:
    assert rt.cancel_refusal(requested, active) == refused


@pytest.mark.parametrize(
    ("out", "signed"),
    [
        ({"type": "response.done", "response": {"status": "completed"}}, True),
        ({"type": "response.done", "response": {"status": "cancelled"}}, False),
        ({"type": "response.output_text.delta", "delta": "x"}, False),
    ],
)
def test_needs_signature(out: dict[str, Any], signed: bool) -> None:
    assert rt.needs_signature(out) is signed
