"""The Redis A2A task store under a streamed turn: what each text chunk costs.

Run: ``python bench/a2a_task_store.py [--chunks 2000] [--history 20 200]``
(a throwaway ``redis-server`` is started on a free port, installed with
apt-get when missing, as the tests do).

A working task with ``--history`` conversation messages of 400 characters
each gets ``--chunks`` text chunks, each published as the A2A transports
publish a streamed turn's updates (``TaskRun.more_text``, then
``RedisTaskStore.publish``). Two ways, in the same run: ``appended`` (what
the store does: the chunk goes to the list beside the task) and ``whole``
(the task rewritten for each chunk, as before the list). Printed per chunk:
the bytes sent to Redis (the script's arguments), this process's CPU time,
``redis-server``'s CPU time (from ``/proc``) and the wall time (noisy on a
loaded machine). The task read back is checked to hold every chunk.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests._support.redis_server import free_port, start_redis, stop_redis
from uamp_proto import events as ev
from uamp_proto import types as ty
from uamp_proto.adapters import a2a_records
from uamp_proto.adapters.a2a import A2ATask, TaskRun, Trigger
from uamp_proto.principal import ANONYMOUS
from uamp_stores import a2a_tasks_redis
from uamp_stores.a2a_tasks_redis import RedisTaskStore


def _cpu_of(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0


async def _stream(url: str, redis_pid: int, chunks: int, history: int) -> dict[str, float]:
    store = RedisTaskStore(url, prefix=uuid.uuid4().hex)
    conversation = [ty.Message(role="user", content="x" * 400) for _ in range(history)]
    task = A2ATask(id="t", context_id="c", agent="a", conversation=conversation)
    await store.add(task, owner=ANONYMOUS)
    task.move(Trigger.START)
    count = iter(range(10**9))
    run = TaskRun(task, lambda prefix: f"{prefix}-{next(count)}")
    first = ev.ResponseDelta(delta=ty.DeltaText(text="first "), response_id="r")
    await store.publish(task, run.feed(first))
    sent = 0
    script = store._publish

    def counted(args: list[Any]) -> Any:
        nonlocal sent
        sent += sum(len(a) if isinstance(a, bytes | str) else 8 for a in args)
        return script(args=args)

    store._publish = lambda args: counted(args)
    began, cpu, server = time.perf_counter(), time.process_time(), _cpu_of(redis_pid)
    for n in range(chunks):
        update = run.more_text(f"word{n} ")
        assert update is not None
        await store.publish(task, [update])
    wall, cpu = time.perf_counter() - began, time.process_time() - cpu
    server = _cpu_of(redis_pid) - server
    got = await store.get("t", owner=ANONYMOUS)
    text = "".join(i.text for a in got.artifacts for i in a.items if isinstance(i, ty.TextContent))
    assert text == "first " + "".join(f"word{n} " for n in range(chunks))
    await store.aclose()
    return {
        "bytes": sent / chunks,
        "cpu_us": cpu / chunks * 1e6,
        "redis_us": server / chunks * 1e6,
        "wall_us": wall / chunks * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=2000)
    parser.add_argument("--history", type=int, nargs="+", default=[20, 200])
    args = parser.parse_args()
    appends = a2a_records.text_appends
    with tempfile.TemporaryDirectory() as directory:
        port = free_port()
        proc = start_redis(Path(directory), port)
        url = f"redis://127.0.0.1:{port}/0"
        try:
            for history in args.history:
                for way in ("whole", "appended"):
                    # "whole": no batch counts as text only, so each chunk rewrites the task.
                    chosen = appends if way == "appended" else (lambda updates: None)
                    setattr(a2a_tasks_redis, "text_appends", chosen)  # noqa: B010
                    got = anyio.run(_stream, url, proc.pid, args.chunks, history)
                    print(
                        f"{history:4d} messages  {way:8s}  {got['bytes']:8.0f} bytes/chunk  "
                        f"{got['cpu_us']:6.0f} us CPU  {got['redis_us']:6.0f} us redis CPU  "
                        f"{got['wall_us']:6.0f} us wall"
                    )
        finally:
            setattr(a2a_tasks_redis, "text_appends", appends)  # noqa: B010
            stop_redis(proc)


if __name__ == "__main__":
    main()
