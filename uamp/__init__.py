"""The ``uamp`` distribution's own package: its version and ``python -m uamp``.

The code lives in ``uamp_proto`` (the sans-IO core), ``uamp_trio`` (servers,
clients, the command line) and ``uamp_agents`` (the agent runtime); this
package only names the distribution. The version is written once, in
``pyproject.toml``, and read here from the installed metadata.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["__version__"]

try:
    __version__: str = version("uamp")
except PackageNotFoundError:  # pragma: no cover - run from a tree that was never installed
    __version__ = "0+unknown"
