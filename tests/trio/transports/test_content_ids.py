"""Content ids (UAMP 8.5.4) over a real UAMP WebSocket, driven with raw JSON from the spec.

* an image given as ``/api/content/<uuid>`` keeps that uuid as its content id;
* the delegate tool's ``attachments`` resolve content ids from the conversation;
* a content producer's ``StructuredToolResult`` reaches the model as labels
  (never its URL), and the ``present`` tool shows the content to the client.
"""

from __future__ import annotations

from typing import Any

import orjson
import trio
from trio_websocket import open_websocket_url as open_ws

from tests._support.wire import create_session, send, serving, until
from uamp_agents import agent
from uamp_agents.bridge import serve_agent
from uamp_agents.content import StructuredToolResult, present_tool
from uamp_agents.providers import function
from uamp_proto import types as ty
from uamp_trio import App
from uamp_trio.transports import uamp_ws

TIMEOUT = 10
PHOTO = "550e8400-e29b-41d4-a716-446655440000"
CHART = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"


def _serve(responder: Any) -> Any:
    app = App([responder])
    app.mount(uamp_ws.mount)
    return serving(app)


def _media(messages: list[ty.Message]) -> list[Any]:
    return [
        i
        for m in messages
        for i in m.content_items or ()
        if isinstance(i, ty.ImageContent | ty.FileContent)
    ]


async def _ask_with_photo(ws: Any, text: str, **image: Any) -> list[dict[str, Any]]:
    await create_session(ws, session={"modalities": ["text", "image"]})
    await send(ws, type="input.image", image={"url": f"/api/content/{PHOTO}"}, **image)
    await send(ws, type="input.text", text=text)
    await send(ws, type="response.create")
    return await until(ws, "response.done")


async def test_a_content_url_keeps_its_uuid_and_attachments_reach_the_delegate() -> None:
    seen: dict[str, list[ty.Message]] = {}

    def describe(messages: list[ty.Message], tools: Any) -> str:
        seen["delegate"] = messages
        return "A red bicycle."

    def lead(messages: list[ty.Message], tools: Any) -> Any:
        seen.setdefault("lead", messages)
        tool_results = [m for m in messages if m.role == "tool"]
        if not tool_results:
            ids = [i.content_id for i in _media(messages)]
            return [
                ("describer", {"task": "describe it", "attachments": ids}),
                ("describer", {"task": "and this", "attachments": ["no-such-id"]}),
            ]
        return " | ".join(m.text for m in tool_results)

    describer = agent(name="describer", model=function(describe))
    served = serve_agent(agent(name="lead", model=function(lead), tools=[describer]))
    async with _serve(served) as server:
        with trio.fail_after(TIMEOUT):
            async with open_ws(f"ws://127.0.0.1:{server.port}/agents/lead/uamp") as ws:
                events = await _ask_with_photo(ws, "what is in the photo?")
    # The lead's own conversation: the storage uuid is the content id.
    (photo,) = _media(seen["lead"])
    assert photo.content_id == PHOTO
    # The delegate got the same item, by id, beside its task.
    (passed,) = _media(seen["delegate"])
    assert passed.content_id == PHOTO and passed.image == ty.MediaURL(url=f"/api/content/{PHOTO}")
    # An id that names nothing is the delegate call's error, not a crash.
    final = "".join(
        e["delta"]["text"]
        for e in events
        if e["type"] == "response.delta" and e["delta"]["type"] == "text"
    )
    assert "A red bicycle." in final and "no-such-id" in final


async def test_a_given_content_id_wins_over_the_url() -> None:
    seen: list[ty.Message] = []

    def echo(messages: list[ty.Message], tools: Any) -> str:
        seen.extend(messages)
        return "ok"

    served = serve_agent(agent(name="echo", model=function(echo)))
    async with _serve(served) as server:
        with trio.fail_after(TIMEOUT):
            async with open_ws(f"ws://127.0.0.1:{server.port}/agents/echo/uamp") as ws:
                await _ask_with_photo(ws, "hi", content_id="mine-1")
    assert [i.content_id for i in _media(seen)] == ["mine-1"]


async def test_produced_content_is_labelled_for_the_model_and_shown_by_present() -> None:
    model_saw: list[str] = []

    def draw(topic: str) -> StructuredToolResult:
        """Draw a chart."""
        chart = ty.ImageContent(image=ty.MediaURL(url=f"https://cdn.example/api/content/{CHART}"))
        return StructuredToolResult.of(f"Drew {topic}.", (chart, "a bar chart of sales"))

    def lead(messages: list[ty.Message], tools: Any) -> Any:
        results = [m for m in messages if m.role == "tool"]
        if not results:
            return [("draw", {"topic": "sales"})]
        if len(results) == 1:
            model_saw.append(results[0].text)
            return [("present", {"content_ids": [CHART]})]
        return "Here is the chart."

    served = serve_agent(agent(name="artist", model=function(lead), tools=[draw, present_tool()]))
    async with _serve(served) as server:
        with trio.fail_after(TIMEOUT):
            async with open_ws(f"ws://127.0.0.1:{server.port}/agents/artist/uamp") as ws:
                await create_session(ws)
                await send(ws, type="input.text", text="chart the sales")
                await send(ws, type="response.create")
                events = await until(ws, "response.done")
    # Text purity: the model read a label with the id and description, no URL.
    assert model_saw == [f"Drew sales.\n[image {CHART}] a bar chart of sales"]
    assert "/api/content/" not in model_saw[0]
    results = [
        e["delta"]["tool_result"]
        for e in events
        if e["type"] == "response.delta" and e["delta"]["type"] == "tool_result"
    ]
    assert results[0].get("content_items") is None  # produced: not shown
    shown = results[1]["content_items"]
    assert [(i["type"], i["content_id"]) for i in shown] == [("image", CHART)]
    assert shown[0]["description"] == "a bar chart of sales"
    # response.done carries it too, in the present call's tool_result item.
    output = events[-1]["response"]["output"]
    presented = [
        i["tool_result"]
        for i in output
        if i["type"] == "tool_result" and i["tool_result"].get("content_items")
    ]
    assert len(presented) == 1
    assert presented[0]["content_items"][0]["content_id"] == CHART
    assert orjson.dumps(output).count(CHART.encode()) >= 1


async def test_attachments_given_as_a_uuid_or_a_content_url_resolve_and_others_do_not() -> None:
    """The spec's UUID fallback; a uuid only another conversation holds is a missing id."""
    theirs = "6ba7b810-9dad-11d1-80b4-00c04fd430c8"
    passed: list[list[ty.Message]] = []

    def describe(messages: list[ty.Message], tools: Any) -> str:
        passed.append(messages)
        return "described"

    def lead(messages: list[ty.Message], tools: Any) -> Any:
        if not [m for m in messages if m.role == "tool"]:
            return [
                ("describer", {"task": "1", "attachments": [PHOTO.upper()]}),
                ("describer", {"task": "2", "attachments": [f"/api/content/{PHOTO}"]}),
                ("describer", {"task": "3", "attachments": [theirs]}),
                ("describer", {"task": "4", "attachments": ["made-up"]}),
            ]
        return "\n".join(m.text for m in messages if m.role == "tool")

    describer = agent(name="describer", model=function(describe))
    served = serve_agent(agent(name="lead", model=function(lead), tools=[describer]))
    async with _serve(served) as server:
        url = f"ws://127.0.0.1:{server.port}/agents/lead/uamp"
        with trio.fail_after(TIMEOUT):
            async with open_ws(url) as other:  # another conversation holds `theirs`
                await create_session(other, session={"modalities": ["text", "image"]})
                await send(other, type="input.image", image={"url": f"/api/content/{theirs}"})
            async with open_ws(url) as ws:
                await create_session(ws, session={"modalities": ["text", "image"]})
                await send(ws, type="input.image", image={"url": f"/api/content/{PHOTO}"})
                await send(ws, type="input.text", text="describe")
                await send(ws, type="response.create")
                events = await until(ws, "response.done")
    assert [[i.content_id for i in _media(m)] for m in passed] == [[PHOTO], [PHOTO]]
    final = "".join(
        e["delta"]["text"]
        for e in events
        if e["type"] == "response.delta" and e["delta"]["type"] == "text"
    ).splitlines()
    assert final[:2] == ["described", "described"]
    # Another conversation's content answers exactly as an id that never existed.
    assert final[2].replace(theirs, "X") == final[3].replace("made-up", "X")
    assert "no content id of this conversation" in final[3]
