"""Agents of other frameworks on offline models, for the uamp_asgi tests.

Both answer the same way: a tool result in the last input -> "The weather is
<result>"; "weather" -> their own ``weather`` tool (server-side); "probe" ->
the client's ``probe`` tool; "what is 2+3?" -> "2 + 3 = 5"; anything else ->
"You said: <text>" (the replies of the cross-transport check).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any


def reply_for(text: str) -> str:
    """The text reply to ``text`` (when no tool is called)."""
    return "2 + 3 = 5" if text.strip() == "what is 2+3?" else f"You said: {text}"


def weather(city: str) -> str:
    """The weather in ``city`` (the agents' own tool)."""
    return f"sunny in {city}"


# --- pydantic-ai -------------------------------------------------------------------


def pydantic_ai_agent(name: str = "pai") -> Any:
    """A pydantic-ai ``Agent`` on its offline ``FunctionModel``, with one tool."""
    from pydantic_ai import Agent
    from pydantic_ai import messages as pm
    from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

    async def stream(messages: list[Any], info: AgentInfo) -> AsyncIterator[Any]:
        last = messages[-1]
        returns = [p for p in last.parts if isinstance(p, pm.ToolReturnPart)]
        if returns:
            yield f"The weather is {returns[-1].content}"
            return
        prompts = [p for p in last.parts if isinstance(p, pm.UserPromptPart)]
        text = str(prompts[-1].content) if prompts else ""
        if "weather" in text:
            yield {
                0: DeltaToolCall(name="weather", json_args='{"city": "Paris"}', tool_call_id="w1")
            }
            return
        if "probe" in text and any(t.name == "probe" for t in info.function_tools):
            yield {0: DeltaToolCall(name="probe", json_args="{}", tool_call_id="p1")}
            return
        words = reply_for(text).split(" ")
        for i, word in enumerate(words):
            yield word if i == 0 else " " + word

    agent: Any = Agent(FunctionModel(stream_function=stream), name=name)
    agent.tool_plain(weather)
    return agent


# --- the OpenAI Agents SDK -----------------------------------------------------------


def _last_text(items: Any) -> tuple[str, str | None]:
    """``(user text, output of a trailing function_call_output or None)``."""
    if isinstance(items, str):
        return items, None
    last = items[-1]
    if isinstance(last, dict) and last.get("type") == "function_call_output":
        return "", str(last.get("output"))
    content = last.get("content") if isinstance(last, dict) else None
    if isinstance(content, list):
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content or ""), None


def openai_agents_agent(name: str = "oaa") -> Any:
    """An OpenAI Agents SDK ``Agent`` on a local fake model, with one tool."""
    from agents import Agent, function_tool, set_tracing_disabled
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import (
        Response,
        ResponseCompletedEvent,
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
        ResponseTextDeltaEvent,
        ResponseUsage,
    )
    from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails

    def output(items: Any, tools: list[Any]) -> list[Any]:
        text, returned = _last_text(items)
        if returned is not None:
            reply = f"The weather is {returned}"
        elif "weather" in text:
            call = ResponseFunctionToolCall(
                type="function_call", call_id="w1", name="weather", arguments='{"city": "Paris"}'
            )
            return [call]
        elif "probe" in text and any(t.name == "probe" for t in tools):
            return [
                ResponseFunctionToolCall(
                    type="function_call", call_id="p1", name="probe", arguments="{}"
                )
            ]
        else:
            reply = reply_for(text)
        part = ResponseOutputText(type="output_text", text=reply, annotations=[])
        message = ResponseOutputMessage(
            type="message", id="msg_1", role="assistant", status="completed", content=[part]
        )
        return [message]

    def usage() -> ResponseUsage:
        return ResponseUsage(
            input_tokens=3,
            output_tokens=5,
            total_tokens=8,
            input_tokens_details=InputTokensDetails(cached_tokens=0, cache_write_tokens=0),
            output_tokens_details=OutputTokensDetails(reasoning_tokens=0),
        )

    class FakeModel(Model):
        async def get_response(
            self,
            system_instructions: Any,
            input: Any,
            model_settings: Any,
            tools: Any,
            output_schema: Any,
            handoffs: Any,
            tracing: Any,
            **kw: Any,
        ) -> ModelResponse:
            return ModelResponse(
                output=output(input, tools),
                usage=Usage(requests=1, input_tokens=3, output_tokens=5, total_tokens=8),
                response_id=None,
            )

        async def stream_response(
            self,
            system_instructions: Any,
            input: Any,
            model_settings: Any,
            tools: Any,
            output_schema: Any,
            handoffs: Any,
            tracing: Any,
            **kw: Any,
        ) -> AsyncIterator[Any]:
            items = output(input, tools)
            seq = 0
            for item in items:
                if isinstance(item, ResponseOutputMessage):
                    for word in item.content[0].text.split(" "):  # type: ignore[union-attr]
                        seq += 1
                        yield ResponseTextDeltaEvent(
                            type="response.output_text.delta",
                            item_id=item.id,
                            output_index=0,
                            content_index=0,
                            delta=word if seq == 1 else " " + word,
                            sequence_number=seq,
                            logprobs=[],
                        )
            response = Response(
                id="resp_fake",
                object="response",
                created_at=time.time(),
                model="fake",
                output=items,
                parallel_tool_calls=False,
                tool_choice="auto",
                tools=[],
                usage=usage(),
            )
            yield ResponseCompletedEvent(
                type="response.completed", response=response, sequence_number=seq + 1
            )

    set_tracing_disabled(True)  # no traces leave the machine
    tool = function_tool(weather)
    return Agent(name=name, instructions="Be brief.", model=FakeModel(), tools=[tool])


def dumps(obj: Any) -> str:
    return json.dumps(obj)
