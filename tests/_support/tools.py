"""The one client tool the interop tests offer, in each wire shape they speak.

The demo agent calls any tool it is offered with ``{"city": <the prompt>}``, so a
weather tool with one required ``city`` string is enough for every protocol.
"""

from __future__ import annotations

from typing import Any

#: The bare function: an AG-UI tool, and the body of the other shapes.
WEATHER_FUNCTION: Any = {
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}

#: A Chat Completions tool (also what A2A callers put in message metadata).
WEATHER_TOOL: Any = {"type": "function", "function": WEATHER_FUNCTION}

#: An OpenAI Realtime session tool: the function's fields beside ``type``.
WEATHER_REALTIME_TOOL: Any = {"type": "function", **WEATHER_FUNCTION}

#: Chat Completions ``tool_choice`` forcing the weather tool.
FORCED: Any = {"type": "function", "function": {"name": "get_weather"}}
