"""What ``uamp serve``'s flags build: the authenticator, the response signer, the
envelope service's options and the transports.

Each builder reads the parsed flags, checks them once and answers the part
(or ``None`` when the flags ask for none); a mistake is a :class:`ValueError`
of one line naming the flag, never a secret. ``uamp serve``
(:mod:`uamp_trio.cli.serve`), ``uamp acp`` / ``uamp mcp`` and
:func:`uamp_trio.asgi_options.serve_options` (the same flags for the ASGI
app) build their parts here, so one flag means one thing everywhere.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric import rsa

from uamp_proto.adapters import a2a_card
from uamp_proto.jose import jwk_thumbprint
from uamp_proto.signing import ResponseSigner

from ..app import default_transports
from ..hosting.host import Transport
from ..transports import a2a, envelope_grpc, envelopes
from ..trust.auth import AnyOf, APIKeyAuthenticator, Authenticator, JWTAuthenticator, is_loopback

__all__ = [
    "build_authenticator",
    "envelope_options",
    "envelopes_refused",
    "extended_card",
    "load_signer",
    "transports",
]


def transports(args: argparse.Namespace) -> list[Transport] | None:
    """The transports ``uamp serve`` mounts: the defaults, A2A configured by its flags,
    without spec 003's bindings when :func:`envelopes_refused` says so."""
    configured = args.a2a_push_allow or args.a2a_sign_cards or args.a2a_extended_card
    if not configured and envelopes_refused(args) is None:
        return None
    chosen = list(default_transports())
    if configured:
        push = a2a.PushSender(allow=args.a2a_push_allow) if args.a2a_push_allow else None
        extended = extended_card(args.a2a_extended_card) if args.a2a_extended_card else None
        a2a_configured = a2a.transport(
            push=push, sign_cards=args.a2a_sign_cards, extended_card=extended
        )
        chosen = [a2a_configured if t is a2a.mount else t for t in chosen]
    if envelopes_refused(args) is not None:
        chosen = [t for t in chosen if t not in (envelopes.mount, envelope_grpc.mount)]
    return chosen


def extended_card(path: str) -> dict[str, Any]:
    """``--a2a-extended-card``: the operator's card members, checked now."""
    try:
        more = json.loads(Path(path).read_text(encoding="utf-8"))
        if not isinstance(more, dict):
            raise ValueError("it is not a JSON object")
        a2a_card.extend_card({"skills": []}, more)
    except (OSError, ValueError) as exc:
        raise ValueError(f"--a2a-extended-card {path}: {exc}") from None
    return more


def envelopes_refused(args: argparse.Namespace) -> str | None:
    """Why spec 003's bindings are not served, or ``None`` when they are.

    Spec 003 section 6.1: envelopes travel over TLS 1.3 only. In cleartext
    they are served on a loopback address (the quick start, or behind a
    local TLS proxy), or where ``--insecure-envelopes`` says the operator
    knows better (a private network, a TLS proxy on another host).
    """
    local = getattr(args, "uds", None) is not None or is_loopback(args.host)
    if args.certfile is not None or local or args.insecure_envelopes:
        return None
    return (
        f"spec 003 envelopes are not served: {args.host} is not a loopback address and there "
        "is no --certfile (spec 003 section 6.1: TLS 1.3 only); give --certfile/--keyfile, "
        "or --insecure-envelopes to serve them in cleartext anyway"
    )


def envelope_options(args: argparse.Namespace) -> dict[str, Any]:
    """The envelope service's options (``--envelope-key``, ``--trust-jwks``, ``--max-concurrent``).

    Raises:
        ValueError: A key or JWKS that cannot be read or used (one line for the operator).
    """
    from ..envelope.keys import EnvelopeKey, read_jwks, stored_key
    from ..envelope.service import EnvelopeLimits

    if args.envelope_key is not None:
        key = EnvelopeKey.from_file(args.envelope_key)
    else:
        try:
            key, _ = stored_key()  # the data folder's, made at the first start
        except OSError:
            key = EnvelopeKey.ephemeral_key()  # warned about once the server starts
    trusted = read_jwks(args.trust_jwks, "--trust-jwks") if args.trust_jwks else None
    if args.max_concurrent < 1:
        raise ValueError("--max-concurrent must be at least 1")
    try:
        limits = EnvelopeLimits(
            max_concurrent=args.max_concurrent,
            max_size=args.max_envelope_size,
            replay_memory=args.envelope_replay_memory,
            replay_per_principal=args.envelope_replay_per_principal,
            exchanges_per_principal=args.envelope_exchanges_per_principal,
            notes_per_principal=args.envelope_notes,
            note_bytes_per_principal=args.envelope_note_bytes,
        )
    except ValueError as exc:
        raise ValueError(f"envelope limits: {exc}") from None
    return {"envelope_key": key, "trust_jwks": trusted, "envelope_limits": limits}


def load_signer(path: str) -> ResponseSigner:
    """A :class:`~uamp_proto.signing.ResponseSigner` for the PEM RSA key at ``path``.

    Its ``kid`` is the key's RFC 7638 thumbprint, so the same key always
    publishes the same JWKS.

    Raises:
        ValueError: One line saying what is wrong with the file.
    """
    from ..envelope.keys import read_private_key

    key = read_private_key(path, "--signing-key")
    if not isinstance(key, rsa.RSAPrivateKey):
        raise ValueError(
            f"--signing-key {path}: response signatures are RS256, so the key must be RSA, "
            f"not {type(key).__name__.removeprefix('_')}"
        )
    return ResponseSigner(key=key, kid=jwk_thumbprint(key), clock=lambda: int(time.time()))


def build_authenticator(args: argparse.Namespace) -> Authenticator | None:
    """The authenticator the ``--auth-*`` flags ask for, or ``None`` when none is configured.

    Raises:
        ValueError: An incomplete or unreadable configuration (one line, no secrets).
    """
    found: list[Authenticator] = []
    if args.auth_jwks:
        if not args.auth_issuer or not args.auth_audience:
            raise ValueError("--auth-jwks needs --auth-issuer and --auth-audience")
        algorithms = [a.strip() for a in args.auth_algorithms.split(",") if a.strip()]
        try:
            found.append(
                JWTAuthenticator(
                    args.auth_jwks,
                    issuer=args.auth_issuer,
                    audience=args.auth_audience,
                    algorithms=algorithms,
                    leeway=args.auth_leeway,
                )
            )
        except OSError as exc:
            raise ValueError(f"--auth-jwks: cannot read {args.auth_jwks}: {exc.strerror}") from None
    elif args.auth_issuer or args.auth_audience:
        raise ValueError("--auth-issuer and --auth-audience go with --auth-jwks")
    if args.auth_api_keys:
        try:
            keys = APIKeyAuthenticator.from_file(args.auth_api_keys)
        except OSError as exc:
            raise ValueError(
                f"--auth-api-keys: cannot read {args.auth_api_keys}: {exc.strerror}"
            ) from None
        if not len(keys):
            raise ValueError(f"--auth-api-keys: {args.auth_api_keys} holds no key")
        found.append(keys)
    if getattr(args, "api_key", None):
        found.append(APIKeyAuthenticator([_api_key_pair(entry) for entry in args.api_key]))
    if not found:
        return None
    return found[0] if len(found) == 1 else AnyOf(found)


def _api_key_pair(entry: str) -> tuple[str, str]:
    """``--api-key [PRINCIPAL:]KEY`` as ``(principal, key)`` (never echoes the key)."""
    principal, sep, key = entry.partition(":")
    if principal.strip() == "agent" and sep:  # agent:NAME:KEY, as in an --auth-api-keys file
        name, sep, key = key.partition(":")
        principal = f"agent:{name.strip()}" if name.strip() else ""
    if not sep:
        key = entry
        principal = "key-" + hashlib.sha256(key.encode()).hexdigest()[:8]
    if not principal.strip() or not key.strip():
        raise ValueError("--api-key: expected KEY or PRINCIPAL:KEY, both non-empty")
    return principal.strip(), key.strip()
