"""``uamp serve --workers N``: several processes on one listening socket (docs/scale-out.md).

The supervisor binds one socket and runs two workers on it, sharing sessions
through a real Redis. A client streams from whichever worker accepted it;
that worker is killed with SIGKILL mid-stream; the client reconnects to the
same port, reaches a live worker, resumes, and the response goes on from
the agent's checkpoint there. The supervisor starts a new worker in place of
the dead one, and SIGTERM stops them all.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import trio
from trio_websocket import open_websocket_url as open_ws

from tests._support import cli
from tests._support.wire import create_session, recv, resume_session, send, until
from uamp_proto.principal import ANONYMOUS
from uamp_stores.event_log_redis import RedisEventLog

TIMEOUT = 60


def _children(pid: int) -> set[int]:
    found = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        found |= {int(c) for c in (task / "children").read_text().split()}
    return found


async def test_two_workers_one_port_survive_the_loss_of_one(
    redis_url: str, tool_runs: Path
) -> None:
    agent = "tests._support.agents:Checkpointed"
    sup = cli.spawn_serve("--workers", "2", "--store", redis_url, "--agent", agent)
    seen: list[str] = []
    try:
        address = cli.wait_for_line(sup, r"2 workers on ([\d.]+:\d+)", seen).group(1)
        cli.wait_for_line(sup, r"serving on http://", seen)
        cli.wait_for_line(sup, r"serving on http://", seen)  # both workers are up
        workers = _children(sup.pid)
        assert len(workers) == 2
        url = f"ws://{address}/agents/checkpointed/uamp"
        log = RedisEventLog(redis_url)
        with trio.fail_after(TIMEOUT):
            async with open_ws(url) as ws:
                sid = await create_session(ws)
                await send(ws, type="input.text", session_id=sid, text="go")
                await send(ws, type="response.create", session_id=sid)
                events = await until(ws, "response.delta")
                while sum(e.get("delta", {}).get("type") == "text" for e in events) < 3:
                    events.append(await recv(ws))
                record = await log.load((ANONYMOUS.key, sid))
                victim = int(record.node.partition("-")[0])
                assert victim in workers  # the worker streaming this response
                os.kill(victim, signal.SIGKILL)
            async with open_ws(url) as ws:  # same port: a live worker accepts it
                created = await resume_session(ws, sid, events[-1]["event_id"])
                assert created["type"] == "session.created", created
                rest = await until(ws, "response.done")
            await log.aclose()
        # The checkpointed tool step was not run again by the other worker.
        assert len(tool_runs.read_text().split()) == 1
        text = rest[-1]["response"]["output"][-1]["text"]
        assert text == "".join(f"tick {i} " for i in range(40))
        # The supervisor put a new worker in place of the dead one.
        restarting = r"worker \d \(pid (\d+)\) exited with -9; restarting"
        restarted = cli.wait_for_line(sup, restarting, seen)
        assert int(restarted.group(1)) == victim
        deadline = time.monotonic() + cli.STARTUP
        while time.monotonic() < deadline and len(_children(sup.pid) - {victim}) < 2:
            await trio.sleep(0.1)
        assert len(_children(sup.pid) - {victim}) == 2
        children = _children(sup.pid)
        sup.send_signal(signal.SIGTERM)
        assert sup.wait(30) == 0
        assert not any(Path(f"/proc/{pid}").exists() for pid in children)
    finally:
        if sup.poll() is None:
            for pid in _children(sup.pid):
                os.kill(pid, signal.SIGKILL)
            sup.kill()
            sup.wait(10)
