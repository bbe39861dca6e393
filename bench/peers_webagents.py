"""The webagents 0.3.9 peer of ``bench/peers.py``; runs inside webagents' own virtualenv.

``python peers_webagents.py MODEL_URL PORT_FILE``: a webagents ``BaseAgent``
named ``peer`` with the OpenAI skill pointed at the bench's mock model server
and one tool, ``lookup`` (the same as ``bench/peers_agent.py``), served by
webagents' own server (FastAPI) on uvicorn, as its documentation deploys it.
``MODEL_URL`` ``--local``: the model in process instead, the OpenAI skill
with its two model calls answered by the bench's reply rules
(``peers_replies.py``) as the chunks and completion ``model_dump()`` would
give, with no client or network (uamp's side: ``peers_agent.peer_local``).
Only what would make a benchmark fail is turned off: the rate limiter (it
refuses a load test's requests) and the platform heartbeat. Writes the port
to PORT_FILE, then serves until killed.
"""

import asyncio
import socket
import sys

import uvicorn
from peers_replies import completion, stream_chunks
from webagents.agents.core.base_agent import BaseAgent
from webagents.agents.skills.core.llm.openai.skill import OpenAISkill
from webagents.agents.tools.decorators import tool
from webagents.server.core.app import create_server


@tool
def lookup(key: str) -> str:
    """Look ``key`` up (the bench's server-side tool)."""
    return f"value-{key}"


class LocalModelSkill(OpenAISkill):
    """The OpenAI skill with its model in process (the bench's reply rules)."""

    async def chat_completion(self, messages, model=None, tools=None, stream=False, **kwargs):
        return completion(messages)

    async def chat_completion_stream(self, messages, model=None, tools=None, **kwargs):
        usage = bool((kwargs.get("stream_options") or {}).get("include_usage"))
        for chunk in stream_chunks(messages, usage):
            yield chunk


def main(model_url: str, port_file: str) -> None:
    config = {"model": "mock", "api_key": "unused", "base_url": model_url}
    if model_url == "--local":
        model = LocalModelSkill({"model": "mock", "api_key": "unused"})
    else:
        model = OpenAISkill(config)
    agent = BaseAgent(name="peer", skills={"primary_llm": model}, tools=[lookup])
    server = create_server(agents=[agent], heartbeat=False, enable_rate_limiting=False)
    # A TCP socket (proto set) so that uvicorn turns Nagle off, as its own bind does.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)
    with open(port_file, "w") as out:
        out.write(str(sock.getsockname()[1]))
    config = uvicorn.Config(server.app, log_level="error", access_log=False)
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    main(*sys.argv[1:3])
