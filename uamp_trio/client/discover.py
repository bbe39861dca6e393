"""Discovery (spec 003 section 8): fetch and verify signed manifests; ``uamp discover``.

::

    uamp discover http://127.0.0.1:8765                 # the hub: every agent
    uamp discover http://127.0.0.1:8765/agents/demo     # one agent's manifest
    uamp discover https://host --jwks pinned-jwks.json  # trust only these keys

:func:`discover` fetches ``/.well-known/agent-hub.json`` (a server URL) or an
agent's ``/.well-known/agent-manifest.json`` (a URL under ``/agents/NAME``,
or a manifest URL itself) and verifies every manifest's JWS against the keys
given (``jwks``: a file, a URL or a key set), else against the server's own
``/.well-known/jwks.json`` (integrity, not identity). ``uamp discover``
prints the verified manifests as JSON and exits 0, or prints ``failed: ...``
and exits 1 when a signature does not verify (a tampered manifest) or a
document cannot be fetched.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

import httpx
import orjson

from uamp_proto.errors import UampError
from uamp_proto.jose import JWKSError
from uamp_proto.manifest import HUB_PATH, MANIFEST_PATH, ManifestError, verify_hub, verify_manifest
from uamp_proto.signing import JWKS_PATH

from ._command import run_command
from .verify import JWKSSource, load_jwks_sync

__all__ = ["DiscoveryError", "add_parser", "discover", "main"]


class DiscoveryError(UampError):
    """A discovery document could not be fetched or read."""


def _get(http: httpx.Client, url: str) -> httpx.Response:
    try:
        r = http.get(url)
    except httpx.HTTPError as exc:
        raise DiscoveryError(f"{url}: cannot fetch ({exc})") from None
    if r.status_code != 200:
        raise DiscoveryError(f"{url}: the server answered {r.status_code}")
    return r


def discover(
    url: str, *, jwks: JWKSSource | None = None, timeout: float = 10.0
) -> dict[str, dict[str, Any]]:
    """The verified manifests at ``url``: ``{agent name: manifest}``.

    Raises:
        ManifestError: A manifest does not verify, or breaks Appendix A.3.
        DiscoveryError: A document cannot be fetched or read.
        JWKSError: The keys cannot be loaded.
    """
    parsed = httpx.URL(url)
    origin = f"{parsed.scheme}://{parsed.netloc.decode()}"
    path = parsed.path.rstrip("/")
    with httpx.Client(timeout=timeout) as http:
        keys = load_jwks_sync(jwks if jwks is not None else origin + JWKS_PATH, timeout=timeout)
        if path.endswith(MANIFEST_PATH) or "/agents/" in path:
            where = path if path.endswith(MANIFEST_PATH) else path + MANIFEST_PATH
            name = where.removesuffix(MANIFEST_PATH).rpartition("/agents/")[2] or "default"
            signed = _get(http, origin + where).text
            return {name: verify_manifest(signed, keys)}
        r = _get(http, origin + path + HUB_PATH)
        try:
            hub = orjson.loads(r.content)
        except orjson.JSONDecodeError:
            raise DiscoveryError(f"{origin}{HUB_PATH}: not JSON") from None
        return verify_hub(hub, keys)


def add_parser(sub: Any) -> None:
    """Add ``discover`` to the ``uamp`` command line's sub-parsers."""
    p = sub.add_parser("discover", help="fetch and verify an agent's signed manifest(s)")
    _arguments(p)
    p.set_defaults(func=_command)


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("url", metavar="URL", help="a server, /agents/NAME, or a manifest URL")
    p.add_argument(
        "--jwks",
        metavar="PATH_OR_URL",
        help="the keys to trust (default: the server's /.well-known/jwks.json)",
    )


def _command(args: argparse.Namespace) -> int:
    try:
        manifests = discover(args.url, jwks=args.jwks)
    except ManifestError as exc:
        print(f"failed: {exc.reason.value}: {exc.message}")
        return 1
    except (DiscoveryError, JWKSError) as exc:
        print(f"failed: {exc}")
        return 1
    print(orjson.dumps(manifests, option=orjson.OPT_INDENT_2).decode())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m uamp_trio.client.discover ...`` (the same as ``uamp discover``)."""
    return run_command("uamp discover", __doc__ or "", _arguments, _command, argv)


if __name__ == "__main__":
    sys.exit(main())
