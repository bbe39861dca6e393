"""A real haproxy in front of test servers, with the project's own ``deploy/haproxy.cfg``.

Debian's ``haproxy`` package, installed with ``apt-get`` when missing (as
root, as CI runs). The configuration file is the one users copy; the test
gives it its addresses through the environment, as ``deploy/compose.yaml``
does.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests._support.cache import cache_folder, exclusive
from tests._support.cli import ROOT
from tests._support.redis_server import free_port
from tests._support.system import installs_allowed, missing

__all__ = ["CONFIG", "haproxy_binary", "running_haproxy"]

CONFIG = ROOT / "deploy" / "haproxy.cfg"


def haproxy_binary() -> str:
    """The path of ``haproxy``, installing the Debian package when it is missing."""
    found = shutil.which("haproxy") or (
        "/usr/sbin/haproxy" if os.path.exists("/usr/sbin/haproxy") else None
    )
    if found:
        return found
    if not installs_allowed():
        missing("haproxy", "apt-get install haproxy")
    with exclusive(cache_folder("apt-get")):
        env = {"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
        for command in (
            ["apt-get", "update", "-qq"],
            ["apt-get", "install", "-y", "-qq", "haproxy"],
        ):
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                raise RuntimeError(f"{' '.join(command)!r} failed: {done.stderr.strip()[-500:]}")
    found = shutil.which("haproxy") or "/usr/sbin/haproxy"
    if not os.path.exists(found):
        raise RuntimeError("apt-get installed haproxy but the binary was not found")
    return found


def check_config(nodes: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """``haproxy -c`` on the shipped configuration with ``nodes`` as its servers."""
    env = _env(nodes, "127.0.0.1:1")
    return subprocess.run(
        [haproxy_binary(), "-c", "-f", str(CONFIG)], env=env, capture_output=True, text=True
    )


def _env(nodes: Sequence[str], listen: str) -> dict[str, str]:
    env = {**os.environ, "UAMP_LISTEN": listen}
    for i, node in enumerate(nodes, start=1):
        env[f"UAMP_NODE{i}"] = node
    return env


@contextmanager
def running_haproxy(
    nodes: Sequence[str], config: Path = CONFIG, ready: str = "/readyz", log: Path | None = None
) -> Iterator[str]:
    """haproxy with ``config`` (default: round-robin over ``nodes``, three ``host:port``);
    yields its ``http://`` URL.

    Returns once a request for ``ready`` through it reaches a ready node.
    ``log``: a file for its request log (one line per request or WebSocket,
    naming the client's port and the node that served it).
    """
    port = free_port()
    with open(log or os.devnull, "wb") as out:
        proc = subprocess.Popen(
            [haproxy_binary(), "-db", "-f", str(config)],
            env=_env(nodes, f"127.0.0.1:{port}"),
            stdout=out,
            stderr=subprocess.PIPE,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(f"{url}{ready}", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()  # its stderr ends with it
                err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                raise RuntimeError(f"haproxy did not start: {err[-800:]}")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
