"""The server ``bench/attacks.py`` attacks as ASGI: ``uamp_asgi`` under uvicorn, the counting agent.

``python bench/attack_asgi.py [uamp serve FLAGS]`` serves
``uamp_asgi.app([CountingAgent()], config=Config(**serve_options(FLAGS)))``
on a free port of 127.0.0.1 with uvicorn's defaults (asyncio, h11, its
WebSocket library, no access log) and prints ``serving on
http://127.0.0.1:PORT`` once its socket listens: the line ``uamp serve``
prints, so the suite starts either server the same way. The flags are
``uamp serve``'s (``uamp_trio.asgi_options``): those about sockets and
timeouts are uvicorn's business here and are parsed but not used.

With ``UAMP_LOOP_STATS=FILE`` each batch of the event loop's work (from one
return of the selector to its next call) of 1 ms or more of the thread's CPU
time is appended to FILE as ``monotonic_time cpu_seconds``, as
``bench/loopstats`` does for Trio's scheduler batches.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import time
from typing import Any

import uvicorn
from attack_agent import CountingAgent

import uamp_asgi
from uamp_trio.asgi_options import serve_options


def _batch_times(loop: asyncio.AbstractEventLoop, path: str) -> None:
    """Write the CPU time of each of ``loop``'s batches of 1 ms or more to ``path``."""
    selector: Any = getattr(loop, "_selector", None)
    if selector is None:
        return
    out = open(path, "a", buffering=1)  # noqa: SIM115 - open for the process's life
    select = selector.select
    began: list[float | None] = [None]

    def timed(timeout: float | None = None) -> Any:
        start = began[0]
        if start is not None:
            spent = time.thread_time() - start
            if spent >= 0.001:
                out.write(f"{time.monotonic():.6f} {spent:.6f}\n")
        try:
            return select(timeout)
        finally:
            began[0] = time.thread_time()

    selector.select = timed


def main(argv: list[str]) -> None:
    app = uamp_asgi.app([CountingAgent()], config=uamp_asgi.Config(**serve_options(argv)))
    # IPPROTO_TCP named, as uvicorn's own listener has it: asyncio turns Nagle's
    # algorithm off only on sockets that say so (a session.created and its
    # capabilities, two writes, would otherwise wait for a delayed ACK).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    config = uvicorn.Config(app, log_level="info", access_log=False, lifespan="on")
    server = uvicorn.Server(config)

    async def serve() -> None:
        stats = os.environ.get("UAMP_LOOP_STATS")
        if stats:
            _batch_times(asyncio.get_running_loop(), stats)
        await server.serve(sockets=[sock])

    print(f"serving on http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    asyncio.run(serve())


if __name__ == "__main__":
    main(sys.argv[1:])
