"""The pydantic-ai peer of ``bench/compare.py``; runs inside pydantic-ai's own virtualenv.

``python peers_pydantic_ai.py PORT_FILE``: a pydantic-ai ``Agent`` with one
tool, ``lookup`` (the same as ``bench/peers_agent.py``), its model a
``FunctionModel`` answering by the bench's reply rules
(``peers_replies.py``), streamed one word a chunk as uamp's ``function``
model streams (``peers_agent.peer_local``). Served on uvicorn over two
protocols, each as its documentation serves it: A2A by FastA2A's
``agent_to_a2a`` (pydantic-ai 2's replacement of ``Agent.to_a2a``; its
JSON-RPC endpoint, at ``/`` there, also answers at ``/a2a``, where
``uamp bench --transport a2a`` posts), and AG-UI at ``/agui``, a route whose
endpoint is ``AGUIAdapter.dispatch_request``. Writes the port to PORT_FILE,
then serves until killed.
"""

import asyncio
import socket
import sys

import uvicorn
from fasta2a.pydantic_ai import agent_to_a2a
from peers_replies import mock_reply
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
from pydantic_ai.ui.ag_ui import AGUIAdapter
from starlette.routing import Route


async def lookup(key: str) -> str:
    """Look ``key`` up (the bench's server-side tool).

    A coroutine, so that pydantic-ai runs it on the event loop: a plain
    function would go to a worker thread, where uamp's peer runs its tool
    inline (``tool(lookup, thread=False)``).
    """
    return f"value-{key}"


def _openai_style(messages):
    """The run's messages as the ``role``/``content`` dicts the reply rules read."""
    out = []
    for message in messages:
        for part in getattr(message, "parts", ()):
            if isinstance(part, UserPromptPart):
                content = part.content if isinstance(part.content, str) else ""
                out.append({"role": "user", "content": content})
            elif isinstance(part, ToolReturnPart):
                out.append({"role": "tool", "content": str(part.content)})
    return out


def _whole(messages, info: AgentInfo) -> ModelResponse:
    text, calls = mock_reply(_openai_style(messages))
    if calls:
        fn = calls[0]["function"]
        return ModelResponse(parts=[ToolCallPart(fn["name"], fn["arguments"], calls[0]["id"])])
    return ModelResponse(parts=[TextPart(text)])


async def _streamed(messages, info: AgentInfo):
    text, calls = mock_reply(_openai_style(messages))
    if calls:
        fn = calls[0]["function"]
        yield {0: DeltaToolCall(fn["name"], fn["arguments"], tool_call_id=calls[0]["id"])}
        return
    for word in text.split(" "):
        if word:
            yield word + " "


agent = Agent(FunctionModel(_whole, stream_function=_streamed), name="peer")
agent.tool_plain(lookup)


async def run_agent(request):
    return await AGUIAdapter.dispatch_request(request, agent=agent)


def app():
    """FastA2A's app with the AG-UI route beside it; ``/a2a`` is its ``/``."""
    a2a = agent_to_a2a(agent, routes=[Route("/agui", run_agent, methods=["POST"])])

    async def serve(scope, receive, send):
        if scope["type"] == "http" and scope["path"] == "/a2a":
            scope = {**scope, "path": "/", "raw_path": b"/"}
        await a2a(scope, receive, send)

    return serve


def main(port_file: str) -> None:
    # A TCP socket (proto set) so that uvicorn turns Nagle off, as its own bind does.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)
    with open(port_file, "w") as out:
        out.write(str(sock.getsockname()[1]))
    config = uvicorn.Config(app(), log_level="error", access_log=False)
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    main(sys.argv[1])
