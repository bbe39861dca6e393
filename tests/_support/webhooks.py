"""A2A push-notification receivers and the scenario agent, for the push tests."""

from __future__ import annotations

import asyncio
import importlib.util
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "a2a_scenarios.py"


class Receiver:
    """An HTTP/1.1 endpoint on loopback recording what reaches it; ``answer`` picks the reply."""

    def __init__(self, answer: Callable[[str], bytes] | None = None) -> None:
        self.received: list[tuple[str, dict[str, str], bytes]] = []
        self.server_names: list[str | None] = []
        self.answer = answer or (lambda path: b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n")
        self.server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        lines = head.split("\r\n")
        headers = {
            k.strip().lower(): v.strip()
            for k, _, v in (line.partition(":") for line in lines[1:] if line)
        }
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        path = lines[0].split(" ")[1]
        self.received.append((path, headers, body))
        writer.write(self.answer(path) + b"connection: close\r\n\r\n")
        await writer.drain()
        writer.close()

    async def start(self, host: str, port: int = 0, tls: ssl.SSLContext | None = None) -> int:
        self.server = await asyncio.start_server(self.handle, host, port, ssl=tls)
        return int(self.server.sockets[0].getsockname()[1])

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


def scenario_agent() -> Any:
    """The A2A conformance kit's scenario agent (``examples/a2a_scenarios.py``)."""
    spec = importlib.util.spec_from_file_location("a2a_scenarios", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.agent
