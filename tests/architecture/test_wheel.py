"""The package as it would be published: ``python -m build`` makes an sdist and a
wheel that ``twine check --strict`` accepts, and the wheel installed into a fresh
virtual environment runs ``uamp serve``, playground included."""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import httpx
import pytest

from tests._support.checkout import ROOT, clean_env, copy_checkout
from tests._support.cli import Served

VERSION = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
assert VERSION is not None

#: What the wheel must hold beside the modules.
DATA = [
    "uamp/py.typed",
    "uamp_proto/py.typed",
    "uamp_trio/py.typed",
    "uamp_agents/py.typed",
    "uamp_trio/server_routes/static/playground.html",
    "uamp_trio/server_routes/static/playground.js",
    "uamp_trio/server_routes/static/playground.css",
    "uamp_trio/grpc/protos/uamp/v1/agent.proto",
    "uamp_trio/grpc/protos/uamp/v1/agent_pb2.py",
    "uamp_trio/grpc/protos/uamp/v1/agent_pb2.pyi",
    "uamp_trio/grpc/protos/third_party/lf/a2a/v1/a2a.proto",
    "uamp_trio/grpc/protos/third_party/lf/a2a/v1/a2a_pb2.py",
    "uamp_trio/grpc/protos/third_party/lf/a2a/v1/a2a_pb2.pyi",
]


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """sdist and wheel built from a copy of the checkout's files (the checkout stays clean)."""
    work = tmp_path_factory.mktemp("build")
    source = copy_checkout(work)
    out = work / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(out), str(source)],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=600,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return out


def test_build_makes_an_sdist_and_a_wheel_twine_accepts(dist: Path) -> None:
    version = VERSION.group(1)
    wheel = dist / f"uamp-{version}-py3-none-any.whl"
    sdist = dist / f"uamp-{version}.tar.gz"
    assert sorted(p.name for p in dist.iterdir()) == sorted([sdist.name, wheel.name])
    checked = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)],
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.count("PASSED") == 2, checked.stdout
    names = set(zipfile.ZipFile(wheel).namelist())
    for data in DATA:
        assert data in names, f"{data} is not in the wheel"
    assert not any(name.startswith("tests/") for name in names)
    meta = zipfile.ZipFile(wheel).read(f"uamp-{version}.dist-info/METADATA").decode()
    assert "License-Expression: Apache-2.0" in meta
    assert f"uamp-{version}.dist-info/licenses/LICENSE" in names
    with tarfile.open(sdist) as tar:
        members = {m.name.split("/", 1)[1] for m in tar.getmembers() if "/" in m.name}
    for needed in ("LICENSE", "CHANGELOG.md", "README.md", "pyproject.toml", *DATA):
        assert needed in members, f"{needed} is not in the sdist"


def test_the_wheel_in_a_fresh_venv_serves(dist: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    bin_dir = env_dir / "bin"
    wheel = next(dist.glob("*.whl"))
    install = subprocess.run(
        [
            str(bin_dir / "python"),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            f"{wheel}[all]",
        ],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=600,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    outside = tmp_path / "elsewhere"  # not the checkout: everything comes from the wheel
    outside.mkdir()
    version = subprocess.run(
        [str(bin_dir / "uamp"), "--version"],
        capture_output=True,
        text=True,
        cwd=outside,
        env=clean_env(),
    )
    assert version.stdout.strip() == f"uamp {VERSION.group(1)}"
    where = subprocess.run(
        [str(bin_dir / "python"), "-c", "import uamp_trio; print(uamp_trio.__file__)"],
        capture_output=True,
        text=True,
        cwd=outside,
        env=clean_env(),
    )
    assert where.stdout.startswith(str(env_dir)), where.stdout + where.stderr
    with Served(
        [str(bin_dir / "uamp"), "serve", "--port", "0"], cwd=outside, env={"PYTHONPATH": ""}
    ) as served:
        base = served.url()
        models = httpx.get(f"{base}/v1/models", timeout=10)
        assert [m["id"] for m in models.json()["data"]] == ["demo"]
        page = httpx.get(f"{base}/", timeout=10)
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assets = re.findall(r'(?:src|href)="([^"]+\.(?:js|css))"', page.text)
        assert len(assets) == 2, page.text[:500]
        for asset in assets:
            assert (
                httpx.get(
                    base + asset if asset.startswith("/") else f"{base}/{asset}", timeout=10
                ).status_code
                == 200
            )
        said = httpx.post(
            f"{base}/agents/demo/chat/completions",
            json={"messages": [{"role": "user", "content": "what is 2+3?"}]},
            timeout=10,
        )
        assert "5" in said.json()["choices"][0]["message"]["content"]
