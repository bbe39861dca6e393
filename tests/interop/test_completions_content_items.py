"""Chat Completions carries UAMP content items both ways (UAMP 8.5 and 8.5.1, spec 004).

A request message may carry ``content_items`` next to ``content``: they reach
the agent as they are (media and ``content_id`` kept), the text from
``content``. A response whose output holds more than text (audio here) puts
its items on the assistant message as ``content_items``; a text-only answer
has none. The client is the openai SDK, over a real socket.
"""

from __future__ import annotations

import base64
from typing import Any

import openai
import pytest

from tests._support.agents import Recording
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.responder import Emit, TurnRequest
from uamp_trio.app import create_app

PCM = base64.b64encode(b"\x00\x01" * 8).decode()


class Speaker(Recording):
    """Records the request; answers text, and audio when asked to speak."""

    name = "speaker"
    modalities = ("text", "audio")

    async def answer(self, request: TurnRequest, emit: Emit) -> None:
        await emit(ev.ResponseDelta(delta=ty.DeltaText(text="here it is")))
        if "speak" in (request.messages[-1].text or ""):
            await emit(ev.ResponseDelta(delta=ty.DeltaAudio(audio=PCM)))


@pytest.fixture
def served(thread_server: Any) -> tuple[openai.OpenAI, Speaker]:
    agent = Speaker()
    server = thread_server(create_app([agent]))
    sdk = openai.OpenAI(
        base_url=f"{server.url}/agents/speaker/v1", api_key="unused", timeout=10, max_retries=0
    )
    return sdk, agent


def test_content_items_reach_the_agent_and_come_back(served: tuple[openai.OpenAI, Speaker]) -> None:
    sdk, agent = served
    items = [
        {"type": "text", "text": "describe and speak"},
        {
            "type": "image",
            "image": {"url": "/api/content/550e8400-e29b-41d4-a716-446655440000"},
            "content_id": "550e8400-e29b-41d4-a716-446655440000",
        },
    ]
    reply = sdk.chat.completions.create(
        model="speaker",
        messages=[{"role": "user", "content": "describe and speak", "content_items": items}],  # type: ignore[misc,list-item]
    )
    (request,) = agent.requests
    message = request.messages[-1]
    assert message.text == "describe and speak"
    assert message.content_items is not None
    image = message.content_items[1]
    assert isinstance(image, ty.ImageContent)
    assert image.content_id == "550e8400-e29b-41d4-a716-446655440000"
    out = reply.choices[0].message
    assert out.content == "here it is"
    assert out.model_extra is not None
    assert out.model_extra["content_items"] == [
        {"type": "text", "text": "here it is"},
        {"type": "audio", "audio": PCM},
    ]


def test_a_text_only_answer_has_no_content_items(served: tuple[openai.OpenAI, Speaker]) -> None:
    sdk, _ = served
    reply = sdk.chat.completions.create(
        model="speaker", messages=[{"role": "user", "content": "just text"}]
    )
    assert reply.choices[0].message.content == "here it is"
    assert "content_items" not in (reply.choices[0].message.model_extra or {})


def test_bad_content_items_are_refused_with_the_field(
    served: tuple[openai.OpenAI, Speaker],
) -> None:
    sdk, agent = served
    with pytest.raises(openai.BadRequestError) as refused:
        sdk.chat.completions.create(
            model="speaker",
            messages=[{"role": "user", "content": "x", "content_items": [{"type": "image"}]}],  # type: ignore[misc,list-item]
        )
    error = refused.value.body
    assert isinstance(error, dict)
    assert error["param"] == "messages[0].content_items"
    assert "messages[0].content_items[0].image" in error["message"]
    assert agent.requests == []


def test_a_stream_carries_media_as_content_items(served: tuple[openai.OpenAI, Speaker]) -> None:
    sdk, _ = served
    chunks = list(
        sdk.chat.completions.create(
            model="speaker", messages=[{"role": "user", "content": "speak"}], stream=True
        )
    )
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert "".join(d.content or "" for d in deltas) == "here it is"
    items = [i for d in deltas for i in (d.model_extra or {}).get("content_items", ())]
    assert items == [{"type": "audio", "audio": PCM}]
