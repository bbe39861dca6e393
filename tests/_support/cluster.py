"""``uamp serve`` nodes behind a real haproxy, as ``deploy/compose.yaml`` runs them.

Each node runs in its own working directory (no file shared with the
others) with its output in ``uamp.log`` there; haproxy uses the project's
own ``deploy/haproxy.cfg`` with as many ``server`` lines as there are nodes.
Used by the cluster test (``tests/trio/test_cluster.py``) and by
``bench/cluster.py``.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

from tests._support.cli import ROOT
from tests._support.haproxy import CONFIG, running_haproxy

__all__ = ["Node", "cluster", "cpu_seconds", "haproxy_config"]


class Node:
    """One ``uamp serve`` in its own directory, its output in a file there."""

    def __init__(self, directory: Path, *flags: str) -> None:
        directory.mkdir()
        self.log = directory / "uamp.log"
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "uamp_trio", "serve", "--port", "0", *flags],
                cwd=directory,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.address = self._wait_address()

    def _wait_address(self) -> str:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            found = re.search(r"serving on http://([\d.]+:\d+)", self.log.read_text())
            if found:
                return found.group(1)
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"node did not start:\n{self.log.read_text()[-2000:]}")

    def drain(self) -> None:
        """SIGTERM: the node drains and exits by itself."""
        self.proc.send_signal(signal.SIGTERM)

    def stop(self) -> None:
        """``kill -9`` unless it exited already; waits for it."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(15)


def haproxy_config(count: int, folder: Path) -> Path:
    """``deploy/haproxy.cfg`` with its first ``count`` server lines (it names three)."""

    def wanted(line: str) -> bool:
        words = line.split()
        return words[:1] != ["server"] or int(words[1].removeprefix("node")) <= count

    kept = [line for line in CONFIG.read_text().splitlines() if wanted(line)]
    path = folder / f"haproxy-{count}.cfg"
    path.write_text("\n".join(kept) + "\n")
    return path


@contextmanager
def cluster(folder: Path, flags: Sequence[str], count: int = 3) -> Iterator[tuple[str, list[Node]]]:
    """``count`` nodes started with ``flags`` (in ``folder/node0`` ...) behind haproxy.

    Yields haproxy's URL and the nodes; every node still running at the end
    is killed. haproxy's request log is ``folder/haproxy.log``.
    """
    with ExitStack() as stack:
        nodes = []
        for i in range(count):
            node = Node(folder / f"node{i}", *flags)
            stack.callback(node.stop)
            nodes.append(node)
        config = CONFIG if count == 3 else haproxy_config(count, folder)
        log = folder / "haproxy.log"
        url = stack.enter_context(running_haproxy([n.address for n in nodes], config, log=log))
        yield url, nodes


def cpu_seconds(pid: int, *, children: bool = False) -> float:
    """CPU time of process ``pid`` so far (Linux ``/proc``).

    The sum of its live threads' time on a CPU, in nanoseconds
    (``/proc/PID/task/*/schedstat``): the clock ticks of ``/proc/PID/stat``
    count in steps of 10 ms, which a short run of a small node can stay
    under, reading 0. Ticks where schedstat is missing. ``children``: with
    that of its children it waited for (a PostgreSQL postmaster's ended
    backends; ticks only).
    """
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    tick = os.sysconf("SC_CLK_TCK")
    nanoseconds, seen = 0, False
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            nanoseconds += int(task.joinpath("schedstat").read_text().split()[0])
            seen = True
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended meanwhile (or no schedstat)
    spent = nanoseconds / 1e9 if seen else (int(fields[11]) + int(fields[12])) / tick
    if children:
        spent += (int(fields[13]) + int(fields[14])) / tick
    return spent
