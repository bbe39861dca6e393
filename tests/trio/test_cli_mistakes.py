"""A newcomer's mistakes on the command line (issue 32, item 3): each is one line naming
the flag and the fix, exit status 2, and nothing started or created -- through the real
``uamp`` in a subprocess. An agent module that raises is the exception: the user's own
traceback, without uamp's frames."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests._support.cli import ENV, Served

#: Modules a case hides, to play an install without that extra.
SHADOWS = {
    name: f"raise ModuleNotFoundError(\"No module named '{name}'\", name={name!r})\n"
    for name in ("redis", "matplotlib", "trio")
}


def _refused_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


MISTAKES = [
    # (id, uamp arguments, modules hidden, what the one line says)
    ("port too large", ["serve", "--port", "99999"], [], "--port: 99999 is not a port number"),
    ("negative port", ["serve", "--port", "-1"], [], "--port: -1 is not a port number"),
    (
        "port in --host",
        ["serve", "--host", "127.0.0.1:9000"],
        [],
        "--host 127.0.0.1:9000: the port goes in its own flag: --host 127.0.0.1 --port 9000",
    ),
    ("unresolvable host", ["serve", "--host", "nosuch.invalid"], [], "cannot resolve this name"),
    (
        "misspelt flag",
        ["serve", "--prot", "9000"],
        [],
        "did you mean --port? (see uamp serve --help)",
    ),
    ("store typo", ["serve", "--store", "memroy"], [], "--store memroy: did you mean memory?"),
    ("store directory missing", ["serve", "--store", "/nonexistent/x.db"], [], "does not exist"),
    ("store not sqlite", ["serve", "--store", "notes.db"], [], "not a SQLite database"),
    ("store scheme", ["serve", "--store", "postgres://db/x"], [], "unknown scheme postgres://"),
    (
        "redis without the extra",
        ["serve", "--store", "redis://127.0.0.1:6379/0"],
        ["redis"],
        "needs the redis extra: pip install 'uamp[redis]'",
    ),
    ("redis down", ["serve", "--store", "redis://127.0.0.1:{port}/0"], [], "does not answer"),
    ("price without ledger", ["serve", "--price", "0.05"], [], "--price needs --ledger PATH"),
    ("missing agent file", ["serve", "--agent", "./nope.py:agent"], [], "no file ./nope.py"),
    (
        "extended card not JSON",
        ["serve", "--a2a-extended-card", "notes.db"],
        [],
        "--a2a-extended-card notes.db: Expecting value",
    ),
    (
        "extended card missing",
        ["serve", "--a2a-extended-card", "/nonexistent/card.json"],
        [],
        "--a2a-extended-card /nonexistent/card.json: [Errno 2]",
    ),
    (
        "plot without matplotlib",
        ["bench", "http://127.0.0.1:{port}/agents/demo", "--plot", "out.png", "-n", "1"],
        ["matplotlib"],
        "--plot needs matplotlib",
    ),
    (
        "serve without the trio extra",
        ["serve"],
        ["trio"],
        "needs the 'server' extra, which is not installed (no module 'trio'): "
        "pip install 'uamp[server]'",
    ),
]


def _run(args: list[str], cwd: Path, hidden: list[str] = ()) -> subprocess.CompletedProcess[str]:  # type: ignore[assignment]
    env = dict(ENV)
    if hidden:
        shadow = cwd / "shadow"
        for name in hidden:
            (shadow / name).mkdir(parents=True, exist_ok=True)
            (shadow / name / "__init__.py").write_text(SHADOWS[name])
        env["PYTHONPATH"] = f"{shadow}:{env.get('PYTHONPATH', '')}"
    return subprocess.run(
        [sys.executable, "-m", "uamp_trio", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("args", "hidden", "says"), [m[1:] for m in MISTAKES], ids=[m[0] for m in MISTAKES]
)
def test_each_mistake_is_one_line_and_status_2(
    args: list[str], hidden: list[str], says: str, tmp_path: Path
) -> None:
    (tmp_path / "notes.db").write_text("my notes, not a database\n")
    port = str(_refused_port())
    args = [a.replace("{port}", port) for a in args]
    before = sorted(p.name for p in tmp_path.iterdir())
    done = _run(args, tmp_path, hidden)
    assert done.returncode == 2, done.stderr + done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert re.match(r"uamp (serve|bench): ", lines[0]), lines[0]
    assert says in lines[0], lines[0]
    assert "Traceback" not in done.stderr + done.stdout
    assert "serving on" not in done.stdout
    after = sorted(p.name for p in tmp_path.iterdir() if p.name != "shadow")
    assert after == before  # no SQLite file named after a typo, no plot


def test_version_runs_without_the_trio_extra(tmp_path: Path) -> None:
    done = _run(["--version"], tmp_path, ["trio"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("uamp ")


BROKEN = """\
import json


def configure():
    raise RuntimeError("agent config missing")


configure()
"""


@pytest.mark.parametrize(
    ("spec", "last"),
    [
        ("broken:agent", "RuntimeError: agent config missing"),
        ("./broken.py:agent", "RuntimeError: agent config missing"),
        ("needs_a_package:agent", "ModuleNotFoundError: No module named 'not_installed_pkg'"),
    ],
    ids=["module", "file", "missing dependency"],
)
def test_an_agent_that_fails_to_import_shows_the_users_traceback(
    spec: str, last: str, tmp_path: Path
) -> None:
    (tmp_path / "broken.py").write_text(BROKEN)
    (tmp_path / "needs_a_package.py").write_text("import not_installed_pkg\n")
    done = _run(["serve", "--port", "0", "--agent", spec], tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[0].startswith(f"uamp serve: --agent {spec!r}: importing "), lines[0]
    assert lines[-1] == last
    assert "Traceback (most recent call last):" in lines
    frames = [line for line in lines if line.strip().startswith("File ")]
    assert frames, done.stderr
    assert all(("broken.py" in f or "needs_a_package.py" in f) for f in frames), frames
    if "broken" in spec:  # the raise and the call that led to it, with their lines
        assert [re.search(r"line (\d+)", f).group(1) for f in frames] == ["8", "5"]  # type: ignore[union-attr]


WEATHER = """
from uamp_trio.demo import DemoAgent

weather = DemoAgent("weather")
"""


def test_an_agent_file_is_loaded_by_its_path(tmp_path: Path) -> None:
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "weather.py").write_text(WEATHER)
    command = [sys.executable, "-m", "uamp_trio", "serve", "--port", "0"]
    with Served([*command, "--agent", "./agents/weather.py:weather"], cwd=tmp_path) as srv:
        models = httpx.get(srv.url() + "/v1/models", timeout=10).json()
        assert [m["id"] for m in models["data"]] == ["weather"]
