"""The package as it would be published: ``python -m build`` makes an sdist and a
wheel that ``twine check --strict`` accepts, and the wheel installed into a fresh
virtual environment runs ``uamp serve``, playground included."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests._support.checkout import ROOT, clean_env
from tests._support.cli import Served
from tests.architecture.conftest import fresh_venv, pip_install

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
    # docs/ and examples/: the README names their files (setup.py).
    for needed in (
        *("LICENSE", "CHANGELOG.md", "README.md", "pyproject.toml", "setup.py", *DATA),
        *("docs/first-hour.md", "examples/ai-sdk-chat/chat.mjs"),
    ):
        assert needed in members, f"{needed} is not in the sdist"


def test_the_wheel_in_a_fresh_venv_serves(dist: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    bin_dir = fresh_venv(env_dir).parent
    wheel = next(dist.glob("*.whl"))
    install = pip_install(bin_dir / "python", f"{wheel}[server]")
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
    # The base server leaves out gRPC, HTTP/3 and the terminal UI (their own extras).
    for absent in ("google.protobuf", "aioquic", "prompt_toolkit"):
        probe = subprocess.run(
            [str(bin_dir / "python"), "-c", f"import {absent}"],
            capture_output=True,
            text=True,
            cwd=outside,
            env=clean_env(),
        )
        assert probe.returncode != 0, f"{absent} is installed by uamp[server]"
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


# --- the metadata and the extras ------------------------------------------------------

#: The extras a user installs (the others build, test and document this repository).
USER_EXTRAS = {
    "signing",
    "agents",
    "server",
    "trio",
    "grpc",
    "http3",
    "tui",
    "clients",
    "mcp",
    "redis",
    "postgres",
    "otel",
    "voice",
}
#: What only its own extra may bring: (distribution, extra).
OWN_EXTRA = [
    ("protobuf", "grpc"),
    ("aioquic", "http3"),
    ("prompt-toolkit", "tui"),
    ("webrtcvad-wheels", "voice"),
]


def _metadata(dist: Path) -> list[tuple[str, str]]:
    wheel = next(dist.glob("*.whl"))
    name = next(n for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".dist-info/METADATA"))
    text = zipfile.ZipFile(wheel).read(name).decode()
    head = text.split("\n\n", 1)[0]
    return [tuple(line.split(": ", 1)) for line in head.splitlines() if ": " in line]  # type: ignore[misc]


def _requires(fields: list[tuple[str, str]]) -> list[tuple[str, str | None]]:
    """``(distribution, extra or None)`` of every Requires-Dist."""
    found = []
    for key, value in fields:
        if key == "Requires-Dist":
            name = re.match(r"[A-Za-z0-9_.\-]+", value).group(0).lower().replace("_", "-")  # type: ignore[union-attr]
            extra = re.search(r'extra == "([^"]+)"', value)
            found.append((name, extra.group(1) if extra else None))
    return found


def test_the_metadata_describes_the_project_and_its_extras(dist: Path) -> None:
    fields = _metadata(dist)
    classifiers = {value for key, value in fields if key == "Classifier"}
    assert {"Typing :: Typed", "Framework :: Trio", "Programming Language :: Python :: 3.11"} <= (
        classifiers
    )
    assert any(key in ("Author", "Author-email") for key, _ in fields)
    extras = {value for key, value in fields if key == "Provides-Extra"}
    assert USER_EXTRAS | {"all"} <= extras
    requires = _requires(fields)
    # `pip install uamp` is the sans-IO core alone.
    assert sorted(name for name, extra in requires if extra is None) == [
        "attrs",
        "cattrs",
        "orjson",
    ]
    for name, own in OWN_EXTRA:
        assert {extra for dep, extra in requires if dep == name} <= {own, "test", "dev", "bench"}, (
            name
        )
        assert (name, "server") not in requires
    # `all` is every user extra.
    (everything,) = [
        re.search(r"uamp\[([^\]]+)\]", v)
        for k, v in fields
        if k == "Requires-Dist" and 'extra == "all"' in v
    ]
    assert everything is not None
    assert set(everything.group(1).split(",")) >= USER_EXTRAS - {"trio"}


# --- the README on the index page (setup.py) -------------------------------------------

#: A Markdown link or image target, an HTML ``href``/``src``.
_TARGETS = re.compile(r"\]\(([^)\s]+)\)|(?:href|src)=\"([^\"]+)\"")


def _setup_py() -> Any:
    spec = importlib.util.spec_from_file_location("uamp_setup", ROOT / "setup.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # not as __main__: setup() is not called
    return module


def _relative(markdown: str) -> list[str]:
    """The link targets of ``markdown`` (outside code) that have no scheme."""
    prose = re.sub(r"(?s:```.*?```)|`[^`\n]*`", "", markdown)
    targets = [a or b for a, b in _TARGETS.findall(prose)]
    return [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:|#", t)]


def test_the_wheels_readme_has_no_relative_link_and_no_invented_url(dist: Path) -> None:
    wheel = next(dist.glob("*.whl"))
    name = next(n for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".dist-info/METADATA"))
    text = zipfile.ZipFile(wheel).read(name).decode()
    description = text.split("\n\n", 1)[1]
    assert "uamp serve" in description  # the README is there
    linked = _relative((ROOT / "README.md").read_text())
    assert linked, "the check below would see nothing"
    assert _relative(description) == []
    setup = _setup_py()
    base = setup.source_url()
    urls = [value for key, value in _metadata(dist) if key == "Project-URL"]
    if base:
        assert urls and all(base in url.split(", ", 1)[1] for url in urls), urls
    else:  # no public home yet: no project URL pretends to be one
        assert urls == []
        for target in linked:  # named as a path in the sdist instead
            assert f"`{target}`" in description and (ROOT / target.split("#")[0]).exists()


@pytest.mark.parametrize(
    ("base", "markdown", "expected"),
    [
        ("", "[Your first hour](docs/first-hour.md)", "Your first hour (`docs/first-hour.md`)"),
        ("", "([docs/mcp.md](docs/mcp.md))", "(`docs/mcp.md`)"),
        ("", "[docs/security.md](docs/security.md#x)", "`docs/security.md#x`"),
        ("", "![a chart](./docs/img/cdf.png)", "a chart (`docs/img/cdf.png`)"),
        ("https://h/r/", "[a](docs/a.md)", "[a](https://h/r/docs/a.md)"),
        ("https://h/r", "![c](docs/c.png)", "![c](https://h/r/docs/c.png)"),
        ("https://h/r", "[w](https://w.example/x) [t](#top)", "[w](https://w.example/x) [t](#top)"),
        ("https://h/r", "`a[0](b)` [m](mailto:x@y)", "`a[0](b)` [m](mailto:x@y)"),
    ],
)
def test_the_index_readme_rewrite(base: str, markdown: str, expected: str) -> None:
    setup = _setup_py()
    rewritten = setup.index_readme(markdown, base.rstrip("/"))
    assert rewritten == expected
    assert _relative(rewritten) == []
    assert setup.project_urls(base.rstrip("/")) == (
        {
            "Source": "https://h/r",
            "Documentation": "https://h/r/docs/index.md",
            "Changelog": "https://h/r/CHANGELOG.md",
        }
        if base
        else {}
    )


@pytest.mark.parametrize("extra", ["grpc", "http3", "tui", "clients", "all"])
def test_each_extra_resolves_alone(dist: Path, extra: str, tmp_path: Path) -> None:
    """pip resolves the wheel with that one extra (a dry run: nothing is installed; the
    ``server`` extra is installed for real above)."""
    wheel = next(dist.glob("*.whl"))
    report = tmp_path / "report.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "--dry-run",
            "--ignore-installed",
            "--report",
            str(report),
            f"{wheel}[{extra}]",
        ],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    names = {
        item["metadata"]["name"].lower().replace("_", "-")
        for item in json.loads(report.read_text())["install"]
    }
    for name, own in OWN_EXTRA:
        assert (name in names) == (extra in (own, "all")) or extra == "clients", (extra, name)
    if extra in ("clients", "all"):  # (a2a-sdk brings protobuf of its own)
        assert {"openai", "a2a-sdk", "anthropic"} <= names
