"""A finished response under ``uamp_asgi`` leaves no garbage cycle behind.

The anyio turn driver caught the agent's error in its own frame; the error's
traceback held that frame, and the frame the error and the request: a
cycle that kept a failed response's conversation until the garbage
collector ran. With the collector off, each request must be freed once its
response has ended, however it ended.
"""

from __future__ import annotations

import time

import httpx
import pytest

import uamp_asgi
from tests._support.asgi import uvicorn_server
from tests._support.garbage import Keeps, collector_off

DEADLINE = 30.0


@pytest.mark.parametrize(("said", "status"), [("hello", 200), ("fail", 500)])
def test_a_finished_responses_request_is_freed_without_the_collector(
    said: str, status: int
) -> None:
    agent = Keeps()
    with uvicorn_server(uamp_asgi.app(agent)) as base, collector_off():
        body = {"model": "keeps", "messages": [{"role": "user", "content": said}]}
        for n in range(1, 3):
            # A connection of its own: a kept-alive one may hold its last
            # response until the next request, which is not a cycle.
            with httpx.Client() as http:
                reply = http.post(f"{base}/agents/keeps/chat/completions", json=body)
            assert reply.status_code == status
            deadline = time.monotonic() + DEADLINE  # the response's task ends after its last byte
            while not (len(agent.requests) == n and agent.freed()):
                assert time.monotonic() < deadline, "the request is still held"
                time.sleep(0.01)
