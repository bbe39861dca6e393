"""The command line of the payment ledger: ``uamp tokens ...`` and the ``--ledger`` flags.

``uamp tokens issue --ledger PATH --amount 10.00 --currency USD [--expires-in 1h]``
prints the new payment token and nothing else on stdout;
``uamp tokens show --ledger PATH TOKEN`` prints its state as JSON;
``uamp tokens top-up --ledger PATH TOKEN --amount X`` adds money and prints the
state. ``uamp serve`` and ``uamp acp`` take ``--ledger PATH --price AMOUNT``
(:func:`add_ledger_args`, :func:`open_policy`). Every failure is one line on
stderr and exit status 1 (2 for a malformed argument).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

from uamp_proto.ledger import LedgerError, parse_amount

from ..units import argument_type, duration_argument, parse_duration
from .ledger import Ledger
from .payments import LedgerPolicy

__all__ = ["add_ledger_args", "add_tokens_parser", "open_policy", "parse_duration"]

_amount = argument_type(parse_amount)

#: What ``--price`` and ``--currency`` are when only ``--ledger`` is given.
PRICE = Decimal("0.01")
CURRENCY = "USD"


def add_ledger_args(p: argparse.ArgumentParser) -> None:
    """``--ledger PATH --price AMOUNT --currency CODE`` for a command that serves agents."""
    p.add_argument(
        "--ledger",
        metavar="PATH",
        help="charge every response to a payment token of this SQLite ledger "
        "(issue tokens with 'uamp tokens issue')",
    )
    p.add_argument(
        "--price",
        type=_amount,
        metavar="AMOUNT",
        help=f"price per response of an agent that declares no pricing (default {PRICE}; "
        "needs --ledger)",
    )
    p.add_argument("--currency", help=f"currency of --price (default {CURRENCY})")


def open_policy(args: argparse.Namespace) -> LedgerPolicy | None:
    """The ledger policy the flags ask for (``None`` without ``--ledger``).

    Opens the ledger and frees the locks a previous process left (it died
    mid-response), so a restart leaves no money held. With a session store
    that outlives the process (``--store`` other than ``memory``) such a
    response may still be carried on by a process the client resumes on,
    which settles its lock: those locks are left for ``--retention-age``
    (how long the session can be resumed), then released.

    Raises:
        ValueError: The ledger cannot be opened (one line for the user).
    """
    if not args.ledger:
        given = [
            f for f, v in (("--price", args.price), ("--currency", args.currency)) if v is not None
        ]
        if given:
            raise ValueError(
                f"{given[0]} needs --ledger PATH (the ledger that charges it); without a "
                "ledger every response is free"
            )
        return None
    ledger = _open(args.ledger)
    durable = getattr(args, "store", "memory") != "memory"
    grace = float(args.retention_age) if durable else 0.0
    freed = ledger.recover(grace=grace)
    if freed:
        print(f"uamp: ledger {args.ledger}: released {freed} unfinished lock(s)", file=sys.stderr)
    price = PRICE if args.price is None else args.price
    return LedgerPolicy(ledger, price=price, currency=args.currency or CURRENCY, orphan_grace=grace)


def _open(path: str, *, create: bool = True) -> Ledger:
    if not create and not Path(path).is_file():
        raise ValueError(f"no ledger at {path}")
    try:
        return Ledger(path)
    except sqlite3.Error as exc:
        raise ValueError(f"cannot open ledger {path}: {exc}") from None


# --- uamp tokens ---------------------------------------------------------------------


def add_tokens_parser(sub: Any) -> None:
    """Register ``uamp tokens issue|show|top-up``."""
    p = sub.add_parser("tokens", help="issue and inspect payment tokens of a ledger")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)

    issue = actions.add_parser("issue", help="issue a token; prints only the token")
    issue.add_argument("--ledger", required=True, metavar="PATH")
    issue.add_argument("--amount", required=True, type=_amount)
    issue.add_argument("--currency", default="USD")
    issue.add_argument(
        "--expires-in", type=duration_argument, metavar="DURATION", help="e.g. 1h, 30m"
    )
    issue.set_defaults(func=_issue)

    show = actions.add_parser("show", help="print a token's state as JSON")
    show.add_argument("--ledger", required=True, metavar="PATH")
    show.add_argument("token")
    show.set_defaults(func=_show)

    top = actions.add_parser("top-up", help="add money to a token; prints its state")
    top.add_argument("--ledger", required=True, metavar="PATH")
    top.add_argument("token")
    top.add_argument("--amount", required=True, type=_amount)
    top.set_defaults(func=_top_up)


def _run(args: argparse.Namespace, action: Any) -> int:
    try:
        with _open(args.ledger, create=args.action == "issue") as ledger:
            out = action(ledger)
    except LedgerError as exc:
        print(f"uamp tokens {args.action}: {exc.code}: {exc.message}", file=sys.stderr)
        return 1
    except (ValueError, sqlite3.Error) as exc:
        print(f"uamp tokens {args.action}: {exc}", file=sys.stderr)
        return 1
    print(out)
    return 0


def _issue(args: argparse.Namespace) -> int:
    return _run(
        args,
        lambda ledger: ledger.issue(args.amount, args.currency, expires_in=args.expires_in),
    )


def _show(args: argparse.Namespace) -> int:
    return _run(args, lambda ledger: json.dumps(ledger.show(args.token).as_json()))


def _top_up(args: argparse.Namespace) -> int:
    def action(ledger: Ledger) -> str:
        ledger.top_up(args.token, args.amount)
        return json.dumps(ledger.show(args.token).as_json())

    return _run(args, action)
