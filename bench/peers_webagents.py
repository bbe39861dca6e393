"""The webagents 0.3.9 peer of ``bench/peers.py``; runs inside webagents' own virtualenv.

``python peers_webagents.py MODEL_URL PORT_FILE``: a webagents ``BaseAgent``
named ``peer`` with the OpenAI skill pointed at the bench's mock model server
and one tool, ``lookup`` (the same as ``bench/peers_agent.py``), served by
webagents' own server (FastAPI) on uvicorn, as its documentation deploys it.
Only what would make a benchmark fail is turned off: the rate limiter (it
refuses a load test's requests) and the platform heartbeat. Writes the port
to PORT_FILE, then serves until killed.
"""

import asyncio
import socket
import sys

import uvicorn
from webagents.agents.core.base_agent import BaseAgent
from webagents.agents.skills.core.llm.openai.skill import OpenAISkill
from webagents.agents.tools.decorators import tool
from webagents.server.core.app import create_server


@tool
def lookup(key: str) -> str:
    """Look ``key`` up (the bench's server-side tool)."""
    return f"value-{key}"


def main(model_url: str, port_file: str) -> None:
    model = OpenAISkill({"model": "mock", "api_key": "unused", "base_url": model_url})
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
