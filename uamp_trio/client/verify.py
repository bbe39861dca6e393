"""Verifying signed responses: JWKS loading and ``uamp verify``.

::

    uamp verify --jwks http://127.0.0.1:8765/.well-known/jwks.json saved.json
    uamp verify --jwks jwks.json stream.sse --request body.json

``uamp verify`` reads a saved response or a raw event stream
(:func:`uamp_proto.saved_response.read_saved_response` lists the forms),
checks its RS256 signature against the JWKS (a file or an ``http(s)://``
URL) and prints one line: ``ok: ...`` and exit status 0, or ``failed: ...``
and exit status 1 (also when a file cannot be read). ``--request FILE``
gives the request bytes when the saved response holds none, or replaces
them.

:func:`load_jwks` / :func:`load_jwks_sync` turn what a caller passes as
``verify=`` (a :class:`~uamp_proto.signing.JWKS`, its JSON object, a path or
a URL) into a :class:`~uamp_proto.signing.JWKS`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeAlias

import httpx

from uamp_proto.errors import UampError
from uamp_proto.saved_response import SavedResponseError, read_saved_response
from uamp_proto.signing import JWKS, JWKSError, SignatureError

from ._command import run_command

__all__ = ["JWKSSource", "add_parser", "load_jwks", "load_jwks_sync", "main", "verify_file"]

#: What ``verify=`` accepts: a key set, its JSON object, a file path or a URL.
JWKSSource: TypeAlias = "JWKS | Mapping[str, Any] | str | os.PathLike[str]"


def _is_url(source: object) -> bool:
    return isinstance(source, str) and source.startswith(("http://", "https://"))


def _parse(document: bytes | Mapping[str, Any], where: str) -> JWKS:
    try:
        return JWKS.parse(dict(document) if isinstance(document, Mapping) else document)
    except JWKSError as exc:
        raise JWKSError(f"{where}: {exc}") from None


def load_jwks_sync(source: JWKSSource, *, timeout: float = 10.0) -> JWKS:
    """The key set ``source`` names (a URL is fetched with a blocking request).

    Raises:
        JWKSError: The document is no JWKS, cannot be read or fetched.
    """
    if isinstance(source, JWKS):
        return source
    if isinstance(source, Mapping):
        return _parse(source, "the JWKS")
    if _is_url(source):
        try:
            resp = httpx.get(str(source), timeout=timeout)
        except httpx.HTTPError as exc:
            raise JWKSError(f"{source}: cannot fetch the JWKS ({exc})") from None
        if resp.status_code != 200:
            raise JWKSError(f"{source}: the server answered {resp.status_code}")
        return _parse(resp.content, str(source))
    try:
        data = Path(source).read_bytes()
    except OSError as exc:
        raise JWKSError(f"{source}: cannot read the JWKS ({exc.strerror})") from None
    return _parse(data, str(source))


async def load_jwks(source: JWKSSource, *, timeout: float = 10.0) -> JWKS:
    """The key set ``source`` names; a URL is fetched without blocking (httpx on trio).

    Raises:
        JWKSError: The document is no JWKS, cannot be read or fetched.
    """
    if not _is_url(source):
        return load_jwks_sync(source)
    try:
        async with httpx.AsyncClient(timeout=timeout) as http:
            resp = await http.get(str(source))
    except httpx.HTTPError as exc:
        raise JWKSError(f"{source}: cannot fetch the JWKS ({exc})") from None
    if resp.status_code != 200:
        raise JWKSError(f"{source}: the server answered {resp.status_code}")
    return _parse(resp.content, str(source))


def verify_file(jwks: JWKSSource, response: str, request: str | None = None) -> str:
    """Check the saved response at ``response``; returns a one-line description.

    Raises:
        UampError: Why it failed (:class:`~uamp_proto.signing.SignatureError`,
            :class:`~uamp_proto.saved_response.SavedResponseError`,
            :class:`~uamp_proto.signing.JWKSError`), or ``OSError``.
    """
    saved = read_saved_response(Path(response).read_bytes())
    sent = Path(request).read_bytes() if request is not None else None
    claims = saved.verify(load_jwks_sync(jwks), sent)
    return (
        f"{saved.transport} response of {len(saved.text)} characters signed at "
        f"iat={claims.get('iat')}"
    )


def add_parser(sub: Any) -> None:
    """Add ``verify`` to the ``uamp`` command line's sub-parsers."""
    p = sub.add_parser("verify", help="check a saved response's signature against a JWKS")
    _arguments(p)
    p.set_defaults(func=_command)


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--jwks", required=True, metavar="PATH_OR_URL", help="the signer's JWKS")
    p.add_argument("response", metavar="RESPONSE_FILE", help="saved response or event stream")
    p.add_argument(
        "--request", metavar="REQUEST_FILE", help="the request bytes exactly as they were sent"
    )


def _command(args: argparse.Namespace) -> int:
    try:
        line = verify_file(args.jwks, args.response, args.request)
    except SignatureError as exc:
        print(f"failed: {exc.reason.value}: {exc.message}")
        return 1
    except (SavedResponseError, JWKSError, UampError) as exc:
        print(f"failed: {exc}")
        return 1
    except OSError as exc:
        print(f"failed: {exc.filename}: {exc.strerror}")
        return 1
    print(f"ok: {line}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m uamp_trio.client.verify ...`` (the same as ``uamp verify``)."""
    return run_command("uamp verify", __doc__ or "", _arguments, _command, argv)


if __name__ == "__main__":
    sys.exit(main())
