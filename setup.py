"""What pyproject.toml cannot say statically: the README as the package index shows it.

The README links to ``docs/...`` and ``examples/...`` by relative paths, which
work in the repository and break on an index page. At build time each such
link is rewritten from one setting, ``[tool.uamp.index] source-url`` in
pyproject.toml (where the repository's files can be browsed):

* set: every relative link becomes ``source-url/path`` and the same URL gives
  the project URLs (``Source``, ``Documentation``, ``Changelog``);
* empty (the project has no public home yet): a link becomes its text and
  the path in backquotes, files the sdist carries, and no project URL is
  published -- nothing points at an address that does not exist.

Everything else is in pyproject.toml; setuptools calls :func:`setup` here
only for the fields pyproject.toml lists as ``dynamic``.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: Code (a fenced block or a code span: kept as it is), or a Markdown inline link or
#: image whose target has no scheme and is not an anchor.
_RELATIVE = re.compile(
    r"(?P<code>(?s:```.*?```)|`[^`\n]*`)"
    r"|(?P<image>!?)\[(?P<text>[^\]]*)\]\((?P<target>(?![a-z][a-z0-9+.-]*:|#)[^)\s]+)\)"
)


def source_url(pyproject: Path = HERE / "pyproject.toml") -> str:
    """The ``[tool.uamp.index] source-url`` setting, without a trailing slash ("" if unset)."""
    settings = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    url = settings.get("tool", {}).get("uamp", {}).get("index", {}).get("source-url", "")
    return str(url).rstrip("/")


def index_readme(text: str, base: str) -> str:
    """``text`` with each relative link made absolute under ``base``, or plain when it is ""."""

    def rewrite(found: re.Match[str]) -> str:
        if found["code"]:
            return found["code"]
        label, target = found["text"], found["target"].removeprefix("./")
        if base:
            return f"{found['image']}[{label}]({base}/{target})"
        if label.strip("`") == target.split("#")[0]:
            return f"`{target}`"
        return f"{label} (`{target}`)"

    return _RELATIVE.sub(rewrite, text)


def project_urls(base: str) -> dict[str, str]:
    """The project URLs ``base`` gives (none without one)."""
    if not base:
        return {}
    return {
        "Source": base,
        "Documentation": f"{base}/docs/index.md",
        "Changelog": f"{base}/CHANGELOG.md",
    }


if __name__ == "__main__":  # setuptools runs this file as a script
    from setuptools import setup

    base = source_url()
    setup(
        long_description=index_readme((HERE / "README.md").read_text(encoding="utf-8"), base),
        long_description_content_type="text/markdown",
        project_urls=project_urls(base),
    )
