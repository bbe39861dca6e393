"""The envelope key of the user's data folder (issue 32, item 8): made once at the first
start, the same at every later one, no warning on a plain quick start."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import httpx

from tests._support.cli import ROOT, Served
from uamp_trio.envelope.keys import KEY_FILE, stored_key


def test_the_key_is_made_once_private_and_then_read(tmp_path: Path) -> None:
    folder = tmp_path / "data" / "uamp"
    first, made = stored_key(folder)
    assert made and first.path == str(folder / KEY_FILE) and not first.ephemeral
    assert stat.S_IMODE(os.stat(folder / KEY_FILE).st_mode) == 0o600
    again, made_again = stored_key(folder)
    assert not made_again and again.kid == first.kid
    assert sorted(p.name for p in folder.iterdir()) == [KEY_FILE]  # no temporary left


def _serve(data: Path) -> Served:
    command = [sys.executable, "-m", "uamp_trio", "serve", "--port", "0"]
    return Served(command, cwd=ROOT, env={"UAMP_DATA_DIR": str(data)})


def _kid(url: str) -> str:
    keys = httpx.get(url + "/.well-known/jwks.json", timeout=10).json()["keys"]
    return str(next(k["kid"] for k in keys if k.get("crv") == "Ed25519"))


def test_a_quick_start_signs_with_the_stored_key_and_warns_of_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    kids = []
    for _ in range(2):  # a restart keeps the key
        with _serve(data) as srv:
            url = srv.url()
            srv.wait_for("envelopes and manifests signed with " + str(data / KEY_FILE))
            kids.append(_kid(url))
        assert not [line for line in srv.lines if "warning" in line.lower()], srv.lines
    assert kids[0] == kids[1] == stored_key(data)[0].kid


def test_an_unwritable_data_folder_falls_back_to_a_key_for_the_run(tmp_path: Path) -> None:
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the folder would go\\n")
    with _serve(blocked / "uamp") as srv:
        srv.url()
        srv.wait_for("warning: no --envelope-key")
