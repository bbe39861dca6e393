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
extended card (``--a2a-extended-card``), the busy policy (``--on-busy``,
``--busy-max-queued``, ``--busy-max-queued-per-principal``), the limits
the ASGI app applies itself (``--max-body-size``, ``--ws-send-timeout``,
``--sse-max-sessions``, ``--sse-session-idle-timeout``,
``--max-response-output-bytes``, ``--max-history-bytes-per-principal``) and ``GET /metrics``
(``--metrics``, on unless ``--no-metrics``). ``--store`` with
``--retention-events``, ``--retention-age``, ``--a2a-max-tasks`` and
``--a2a-max-tasks-per-principal`` opens the session event log and the A2A
task store ``uamp serve`` would open; left at their defaults, the app keeps
``Config``'s own memory stores. ``--env-file`` is read first, as ``uamp
serve`` reads it. Flags about sockets and processes are the ASGI server's
business and are parsed but not used.

This module is the bridge on the Trio side (:mod:`uamp_asgi` imports no
Trio); an app that uses it needs ``uamp[server]`` installed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["serve_options"]

#: The flags that name the stores: any of them off its default opens them.
_STORE_FLAGS = (
    "store",
    "retention_events",
    "retention_age",
    "a2a_max_tasks",
    "a2a_max_tasks_per_principal",
)


def serve_options(argv: Sequence[str]) -> dict[str, Any]:
    """The :class:`uamp_asgi.Config` keyword arguments ``uamp serve ARGV`` implies.

    Raises:
        ValueError: A flag ``uamp serve`` would refuse (one line, no secrets).
    """
    from uamp_proto.resume import Retention
    from uamp_stores import open_event_log, open_task_store
    from uamp_stores.a2a_push import PushSender

    from .cli.parts import build_authenticator, envelope_options, extended_card, load_signer
    from .command_line import build_parser
    from .envfile import load_env_file
    from .trust.commands import open_policy

    parser = build_parser("serve")
    args, extras = parser.parse_known_args(["serve", *argv])
    if extras:
        raise ValueError(f"not flags of uamp serve: {' '.join(extras)}")
    if args.env_file:
        load_env_file(args.env_file)
    stores: dict[str, Any] = {}
    defaults = parser.parse_args(["serve"])
    if any(getattr(args, name) != getattr(defaults, name) for name in _STORE_FLAGS):
        stores["event_log"] = open_event_log(
            args.store, Retention(args.retention_events, args.retention_age)
        )
        stores["a2a_tasks"] = open_task_store(
            args.store, args.a2a_max_tasks, args.a2a_max_tasks_per_principal
        )
    return {
        **stores,
        "authenticator": build_authenticator(args),
        "payment_policy": open_policy(args),
        "response_signer": load_signer(args.signing_key) if args.signing_key else None,
        "max_body_size": args.max_body_size,
        "websocket_send_timeout": args.ws_send_timeout,
        "sse_max_sessions": args.sse_max_sessions,
        "sse_session_idle_timeout": args.sse_session_idle_timeout,
        "metrics": args.metrics,
        "on_busy": args.on_busy,
        "busy_max_queued": args.busy_max_queued,
        "busy_max_queued_per_principal": args.busy_max_queued_per_principal,
        "max_response_output_bytes": args.max_response_output_bytes,
        "max_history_bytes_per_principal": args.max_history_bytes_per_principal,
        # --a2a-sign-cards: the envelope key (--envelope-key, else the stored one).
        "a2a_card_key": envelope_options(args)["envelope_key"] if args.a2a_sign_cards else None,
        # uamp serve always pushes, to public addresses and what --a2a-push-allow admits.
        "a2a_push": PushSender(allow=args.a2a_push_allow),
        "a2a_max_push_configs": args.a2a_max_push_configs,
        "a2a_max_push_config_bytes": args.a2a_max_push_config_bytes,
        "a2a_extended_card": (
            extended_card(args.a2a_extended_card) if args.a2a_extended_card else None
        ),
    }
