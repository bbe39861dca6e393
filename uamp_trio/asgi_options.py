"""``uamp serve``'s flags as :class:`uamp_asgi.Config` options: one configuration, two servers.

``uamp_asgi.Config(**serve_options(["--ledger", "pay.db", "--price", "0.02",
"--api-key", "alice:sk-...", "--signing-key", "key.pem"]))`` configures an
ASGI app exactly as ``uamp serve`` with those flags configures itself: the
same authenticator (``--auth-*``, ``--api-key``), payment policy over the same
ledger (``--ledger``, ``--price``, ``--currency``; its database calls run in
worker threads, on asyncio too), response signer (``--signing-key``), A2A
card signatures (``--a2a-sign-cards``, with ``--envelope-key``'s key or the
stored one), A2A push notifications (its webhook client, ``--a2a-push-allow``,
``--a2a-max-push-configs``, ``--a2a-max-push-config-bytes``), the A2A
extended card (``--a2a-extended-card``) and the limits
the ASGI app applies itself (``--max-body-size``,
``--sse-max-sessions``, ``--sse-session-idle-timeout``) and ``GET /metrics``
(``--metrics``, on unless ``--no-metrics``). ``--env-file`` is
read first, as ``uamp serve`` reads it. Flags about sockets, processes and
stores are the ASGI server's business and are parsed but not used.

This module is the bridge on the Trio side (:mod:`uamp_asgi` imports no
Trio); an app that uses it needs ``uamp[server]`` installed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["serve_options"]


def serve_options(argv: Sequence[str]) -> dict[str, Any]:
    """The :class:`uamp_asgi.Config` keyword arguments ``uamp serve ARGV`` implies.

    Raises:
        ValueError: A flag ``uamp serve`` would refuse (one line, no secrets).
    """
    from uamp_stores.a2a_push import PushSender

    from .cli import _extended_card, build_authenticator, envelope_options, load_signer
    from .command_line import build_parser
    from .envfile import load_env_file
    from .trust.commands import open_policy

    parser = build_parser("serve")
    args, extras = parser.parse_known_args(["serve", *argv])
    if extras:
        raise ValueError(f"not flags of uamp serve: {' '.join(extras)}")
    if args.env_file:
        load_env_file(args.env_file)
    return {
        "authenticator": build_authenticator(args),
        "payment_policy": open_policy(args),
        "response_signer": load_signer(args.signing_key) if args.signing_key else None,
        "max_body_size": args.max_body_size,
        "sse_max_sessions": args.sse_max_sessions,
        "sse_session_idle_timeout": args.sse_session_idle_timeout,
        "metrics": args.metrics,
        # --a2a-sign-cards: the envelope key (--envelope-key, else the stored one).
        "a2a_card_key": envelope_options(args)["envelope_key"] if args.a2a_sign_cards else None,
        # uamp serve always pushes, to public addresses and what --a2a-push-allow admits.
        "a2a_push": PushSender(allow=args.a2a_push_allow),
        "a2a_max_push_configs": args.a2a_max_push_configs,
        "a2a_max_push_config_bytes": args.a2a_max_push_config_bytes,
        "a2a_extended_card": (
            _extended_card(args.a2a_extended_card) if args.a2a_extended_card else None
        ),
    }
