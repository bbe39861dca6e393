"""An agent that streams without end, and what a server makes of it over a real WebSocket.

Both servers' tests of the response output bound
(``max_response_output_bytes``) run :func:`stopped_then_next` against a
server given :data:`BOUND`: the agent (:class:`Endless`) is stopped there,
the client gets ``response.error`` ``output_too_large`` after at most the
bound of text, and the same session answers its next response; and
:func:`completions_stopped_then_next`, the same with the openai SDK
streaming a chat completion.
"""

from __future__ import annotations

import openai
import pytest
from trio_websocket import open_websocket_url as open_ws

from tests._support.agents import TestAgent
from tests._support.kept_history import turn
from tests._support.wire import create_session, send, texts, until
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.responder import Emit, TurnRequest
from uamp_proto.response import ITEM_BYTES, PART_BYTES

#: What the servers under test keep of one response (1 MiB).
BOUND = 1024 * 1024
#: One delta of the endless agent.
CHUNK = "x" * (64 * 1024)


class Endless(TestAgent):
    """Streams :data:`CHUNK` after :data:`CHUNK` until it is stopped; to ``short``, ``ok``.

    ``emitted`` lists, per stopped response, the characters its ``emit``
    accepted before it raised.
    """

    name = "endless"

    def __init__(self) -> None:
        self.emitted: list[int] = []

    async def respond(self, request: TurnRequest, emit: Emit) -> None:
        if request.messages and request.messages[-1].text == "short":
            await emit(ev.ResponseDelta(delta=ty.DeltaText(text="ok")))
            return
        sent = 0
        try:
            while True:  # a new string each time, as a model's or an echo's text is
                text = f"{sent:08d}{CHUNK[8:]}"
                await emit(ev.ResponseDelta(delta=ty.DeltaText(text=text)))
                sent += len(text)
        finally:
            self.emitted.append(sent)


def assert_stopped_at_the_bound(got: int) -> None:
    """Every chunk that fit in :data:`BOUND` was sent (each weighs ``PART_BYTES``
    more, the text item ``ITEM_BYTES``), and the one that did not fit was not."""
    fit = (BOUND - ITEM_BYTES) // (len(CHUNK) + PART_BYTES)
    assert got == fit * len(CHUNK), (got, fit)


async def stopped_then_next(url: str, agent: Endless) -> None:
    """An endless response ends ``output_too_large`` at the bound; the session goes on."""
    async with open_ws(url, max_message_size=2 * BOUND) as ws:
        sid = await create_session(ws)
        await send(ws, type="input.text", session_id=sid, text="forever")
        await send(ws, type="response.create", session_id=sid)
        events = await until(ws, "response.error")
        error = events[-1]["error"]
        assert error["code"] == "output_too_large", error
        assert error["details"] == {"max_output_bytes": BOUND}
        assert str(BOUND) in error["message"]
        got = len(texts(events))
        assert_stopped_at_the_bound(got)
        assert agent.emitted == [got]  # the agent was stopped where the output ends
        assert not [e for e in events if e["type"] == "response.done"]
        # The session is usable: the next response runs.
        assert await turn(ws, sid, "short") == "ok"


def completions_stopped_then_next(base: str, agent: Endless) -> None:
    """A streamed chat completion of the endless agent ends with OpenAI's error object
    (``code`` ``output_too_large``) at the bound, for the openai SDK; the next one runs.

    ``base``: the server's URL.
    """
    client = openai.OpenAI(
        base_url=base + "/agents/endless/v1", api_key="k", timeout=30, max_retries=0
    )
    got = 0
    stream = client.chat.completions.create(
        model="endless", messages=[{"role": "user", "content": "forever"}], stream=True
    )
    with pytest.raises(openai.APIError) as caught:
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                got += len(chunk.choices[0].delta.content)
    assert caught.value.code == "output_too_large"
    assert str(BOUND) in caught.value.message
    assert_stopped_at_the_bound(got)
    assert agent.emitted == [got]
    reply = client.chat.completions.create(
        model="endless", messages=[{"role": "user", "content": "short"}]
    )
    assert reply.choices[0].message.content == "ok"
