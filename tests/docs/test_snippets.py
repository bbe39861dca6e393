"""The fenced blocks of README.md and docs/ (PAGES), run in order against real servers.

Each page is read top to bottom; an HTML comment ``<!-- snippet: ... -->``
right before a block (or standing alone) says what to do:

* ``skip REASON`` -- the block is not run; the reason is required and says why
  (and what else covers it), so nothing is left out silently;
* ``serve [beside] [until TEXT]`` -- an ``sh`` block that starts a server: it
  runs in the background (the previous ones are stopped first, unless
  ``beside``) until its banner (or a line with ``TEXT``) is out;
* ``start COMMAND`` (alone) -- the same for a server the page assumes is running;
* ``file NAME`` -- the block is a file the reader saves as ``NAME``;
* ``expect TEXT`` -- the block's output must contain ``TEXT``;
* ``env NAME=VALUE ...`` -- the block runs with these variables, which the
  page has told the reader to export.

Every other ``python`` and ``sh`` (or ``bash``) block runs (with ``bash -euo
pipefail``) and must exit 0 without a traceback; a ``json`` block must parse; a
block in any other language needs ``skip``. The pages speak of
``127.0.0.1:8765`` (and ``--port 8765``) and ``.venv/bin/``: both are replaced by the test's free
port and this interpreter's scripts folder, and ``uamp serve`` gets ``--port``.

``docs/first-hour.md`` is run verbatim instead: its own install command in a
copy of the checkout (a fresh ``.venv`` from the package index), then every
block with that environment alone.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from tests._support.checkout import clean_env, copy_checkout
from tests._support.cli import ENV, ROOT, Served

PAGES = [
    "README.md",
    "docs/first-hour.md",
    "docs/envelope.md",
    "docs/mcp.md",
    "docs/anthropic.md",
    "docs/agents.md",
    "docs/responses.md",
    "docs/sessions.md",
    "docs/sans-io.md",
    "docs/embedding.md",
    "docs/sse.md",
    "docs/resume.md",
    "docs/a2a.md",
    "docs/acp.md",
    "docs/agui.md",
    "docs/architecture.md",
    "docs/changelog.md",
    "docs/clients.md",
    "docs/codec.md",
    "docs/completions.md",
    "docs/flow.md",
    "docs/grpc.md",
    "docs/index.md",
    "docs/playground.md",
    "docs/providers.md",
    "docs/realtime.md",
    "docs/relay.md",
    "docs/ai-sdk.md",
    "docs/chat.md",
    "docs/deploy.md",
    "docs/busy.md",
    "docs/operations.md",
    "docs/scale-out.md",
    "docs/security.md",
    "docs/server.md",
    "docs/signing.md",
    "docs/tls.md",
    "docs/uamp-sessions.md",
    "docs/uamp-websocket.md",
    "docs/voice.md",
    "docs/bench.md",
    "docs/performance.md",
    "docs/specs.md",
    "docs/human-in-the-loop.md",
]
BIN = Path(sys.executable).parent
MARKER = re.compile(r"^<!--\s*snippet:\s*(\w+)\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^```(\S*)\s*$")


@attrs.define
class Block:
    """One fenced block (``lang`` ``None``: a stand-alone marker) and the markers before it."""

    line: int
    lang: str | None
    code: str
    markers: list[tuple[str, str]]

    def marker(self, name: str) -> str | None:
        return next((arg for key, arg in self.markers if key == name), None)


def blocks(text: str) -> list[Block]:
    """The blocks of a markdown page, in order."""
    found: list[Block] = []
    pending: list[tuple[str, str]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        marker = MARKER.match(lines[i])
        fence = FENCE.match(lines[i])
        if marker:
            key, arg = marker.group(1), marker.group(2)
            if key == "start":
                found.append(Block(i + 1, None, arg, [("start", arg)]))
            else:
                pending.append((key, arg))
        elif fence:
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            found.append(Block(i + 1, fence.group(1), "\n".join(lines[i + 1 : end]), pending))
            pending = []
            i = end
        i += 1
    assert not pending, f"markers {pending} stand before no block"
    return found


def test_the_parser_sees_markers_and_blocks() -> None:
    page = (
        "<!-- snippet: skip it installs -->\n```sh\npip install x\n```\ntext\n"
        "<!-- snippet: start uamp serve -->\n<!-- snippet: expect 5 -->\n"
        "```python\nprint(5)\n```\n```json\n{}\n```\n"
    )
    assert blocks(page) == [
        Block(2, "sh", "pip install x", [("skip", "it installs")]),
        Block(6, None, "uamp serve", [("start", "uamp serve")]),
        Block(8, "python", "print(5)", [("expect", "5")]),
        Block(11, "json", "{}", []),
    ]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Reader:
    """Runs one page's blocks in a folder of its own, as a reader would."""

    def __init__(self, folder: Path, page: str, bin_dir: Path | None = None) -> None:
        self.folder = folder
        self.page = page
        self.port = _free_port()
        self.servers: list[Served] = []
        # A fresh virtual environment's scripts (``bin_dir``), or this interpreter's.
        self.bin = bin_dir or BIN
        self.env = {**ENV, "PATH": f"{self.bin}{os.pathsep}{ENV.get('PATH', '')}"}
        if bin_dir is None:
            # The pages' programs import the checkout's packages, from any folder.
            paths = [str(ROOT), ENV.get("PYTHONPATH")]
            self.env["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
        else:  # everything comes from what the page had the reader install
            self.env["PYTHONPATH"] = ""
            self.env.pop("VIRTUAL_ENV", None)

    def local(self, text: str) -> str:
        text = text.replace("127.0.0.1:8765", f"127.0.0.1:{self.port}")
        text = text.replace("--port 8765", f"--port {self.port}")  # uvicorn, granian ...
        return text.replace(".venv/bin/", f"{self.bin}/")

    def where(self, block: Block) -> str:
        return f"{self.page}:{block.line}"

    def serve(self, block: Block, command: str, how: str = "") -> None:
        beside, _, until = how.partition("until")
        if beside.strip() != "beside":
            self.stop()
        command = self.local(command).replace("uamp serve", f"uamp serve --port {self.port}")
        server = Served(["bash", "-c", f"exec {command}"], cwd=self.folder, env=self.env)
        self.servers.append(server)
        server.wait_for(re.escape(until.strip() or "Ctrl-C to stop"))

    def stop(self) -> None:
        while self.servers:
            server = self.servers.pop()
            assert server.stop() == 0, "\n".join(server.lines)

    def run(self, block: Block) -> None:
        where = self.where(block)
        reason = block.marker("skip")
        if reason is not None:
            assert reason.strip(), f"{where}: a skipped block must say why"
            return
        if block.lang is None:
            self.serve(block, block.code)
            return
        how = block.marker("serve")
        if how is not None:
            assert block.lang in ("sh", "bash"), f"{where}: only a shell block can start a server"
            self.serve(block, block.code, how)
            return
        name = block.marker("file")
        if name is not None:
            (self.folder / name).write_text(block.code + "\n")
            return
        if block.lang == "json":
            _json_values(block.code)
            return
        if block.lang == "python":
            command = [str(self.bin / "python"), "-c", self.local(block.code)]
        elif block.lang in ("sh", "bash"):
            command = ["bash", "-euo", "pipefail", "-c", self.local(block.code)]
        else:
            pytest.fail(f"{where}: a {block.lang or 'plain'} block must be marked skip or run")
        env = dict(self.env)
        exported = block.marker("env")
        if exported is not None:
            env.update(item.split("=", 1) for item in shlex.split(self.local(exported)))
        done = subprocess.run(
            command, cwd=self.folder, env=env, capture_output=True, text=True, timeout=120
        )
        output = done.stdout + done.stderr
        assert done.returncode == 0, f"{where} failed:\n{output}"
        assert "Traceback" not in output, f"{where}:\n{output}"
        assert done.stdout.strip(), f"{where} printed nothing"
        expected = block.marker("expect")
        if expected is not None:
            assert expected in output, f"{where}: no {expected!r} in:\n{output}"


def _json_values(text: str) -> list[object]:
    """The JSON values of a block: one, or several one after another (a stream of events)."""
    decoder, text = json.JSONDecoder(), text.strip()
    values: list[object] = []
    at = 0
    while at < len(text):
        value, at = decoder.raw_decode(text, at)
        values.append(value)
        while at < len(text) and text[at].isspace():
            at += 1
    return values


def test_a_json_block_may_hold_several_values() -> None:
    assert _json_values('{"a": 1}\n{"b":\n 2}\n') == [{"a": 1}, {"b": 2}]
    with pytest.raises(json.JSONDecodeError):
        _json_values('{"a": 1} {"b": ')


def test_every_page_is_run() -> None:
    """A new page joins PAGES: its blocks run, or say why they cannot."""
    pages = {"README.md", *(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))}
    assert pages == set(PAGES)


#: Run by test_first_hour_verbatim_in_a_fresh_venv below, every block of it, in the
#: environment its own install command makes: not a second time here.
VERBATIM = "docs/first-hour.md"


@pytest.mark.parametrize("page", [p for p in PAGES if p != VERBATIM])
def test_every_block_of_the_page_runs(page: str, tmp_path: Path) -> None:
    reader = Reader(tmp_path, page)
    found = blocks((ROOT / page).read_text())
    try:
        for block in found:
            reader.run(block)
    finally:
        reader.stop()


def test_first_hour_verbatim_in_a_fresh_venv(tmp_path: Path) -> None:
    """The newcomer's path: a copy of the checkout, the page's own install command run as
    printed (a new ``.venv``, the extras the page names, from the package index), then
    every block with that environment alone -- no test dependencies, no PYTHONPATH."""
    source = copy_checkout(tmp_path)
    page = VERBATIM
    found = blocks((ROOT / page).read_text())
    install = next(b for b in found if b.lang == "sh" and "pip install" in b.code)
    env = {**clean_env(), "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", install.code],
        cwd=source,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    reader = Reader(source, page, bin_dir=source / ".venv" / "bin")
    try:
        for block in found:
            if block is not install:
                reader.run(block)
    finally:
        reader.stop()
