"""The deployment users copy (``deploy/``): its files hang together, and the image builds.

The topology itself runs without containers in ``tests/trio/test_cluster.py``
(the same ``haproxy.cfg``). The image is built where a container runtime
answers (``docker info``); elsewhere the Dockerfile is checked as text: what it
copies exists, it runs as a non-root user, and its entry point is ``uamp
serve`` with a readiness health check.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import yaml

from tests._support.cli import ROOT

DEPLOY = ROOT / "deploy"


def test_compose_runs_three_nodes_behind_haproxy_on_shared_redis_and_postgres() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = compose["services"]
    nodes = [name for name in services if name.startswith("uamp")]
    assert nodes == ["uamp1", "uamp2", "uamp3"]
    for name in nodes:
        command = services[name]["command"]
        assert command[command.index("--store") + 1].startswith("redis://")
        assert command[command.index("--ledger") + 1].startswith("postgresql://")
        assert "volumes" not in services[name]  # no node keeps a file another needs
    assert "ledger" in services["migrate"]["entrypoint"]
    env = services["haproxy"]["environment"]
    assert [env[f"UAMP_NODE{i}"] for i in (1, 2, 3)] == [f"uamp{i}:8765" for i in (1, 2, 3)]
    config = (DEPLOY / "haproxy.cfg").read_text()
    assert "balance roundrobin" in config and "GET /readyz" in config
    assert not re.search(r"^\s*(cookie|stick|hash-type)", config, re.M)  # no stickiness


def test_the_dockerfile_is_slim_non_root_and_serves() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.\d+-slim$", text, re.M)
    for source in re.findall(r"^COPY (\S+)", text, re.M):
        assert (ROOT / source).exists(), source
    assert re.search(r"^USER uamp$", text, re.M)
    assert '"uamp", "serve"' in text and "/readyz" in text and "STOPSIGNAL SIGTERM" in text
    docker = shutil.which("docker")
    if docker is None or subprocess.run([docker, "info"], capture_output=True).returncode != 0:
        return  # no container runtime here: the checks above are what can run
    built = subprocess.run(
        [docker, "build", "-q", "-f", str(DEPLOY / "Dockerfile"), "-t", "uamp-test", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert built.returncode == 0, built.stderr[-2000:]
