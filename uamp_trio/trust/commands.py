"""The command line of the payment ledger: ``uamp tokens ...`` and the ``--ledger`` flags.

``uamp tokens issue --ledger PATH --amount 10.00 --currency USD [--expires-in 1h]``
prints the new payment token and nothing else on stdout;
``uamp tokens show --ledger PATH TOKEN`` prints its state as JSON;
``uamp tokens top-up --ledger PATH TOKEN --amount X`` adds money and prints the
state. ``uamp serve`` and ``uamp acp`` take ``--ledger PATH --price AMOUNT``
(:func:`add_ledger_args`, :func:`open_policy`). ``uamp ledger migrate --ledger
URL`` brings a PostgreSQL ledger's schema up to date. ``PATH`` is a SQLite file
or a ``postgresql://`` URL (:mod:`.ledger_postgres`). Every failure is one line
on stderr and exit status 1 (2 for a malformed argument).
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
from .ledger_sql import SqlLedger
from .payments import LedgerPolicy

__all__ = [
    "add_ledger_args",
    "add_ledger_parser",
    "add_tokens_parser",
    "open_ledger",
    "open_policy",
    "parse_duration",
]

_amount = argument_type(parse_amount)

#: What ``--price`` and ``--currency`` are when only ``--ledger`` is given.
PRICE = Decimal("0.01")
CURRENCY = "USD"


def add_ledger_args(p: argparse.ArgumentParser) -> None:
    """``--ledger PATH --price AMOUNT --currency CODE`` for a command that serves agents."""
    p.add_argument(
        "--ledger",
        metavar="PATH",
        help="charge every response to a payment token of this ledger: a SQLite file, or a "
        "postgresql:// URL shared by several servers (issue tokens with 'uamp tokens issue')",
    )
    p.add_argument(
        "--price",
        type=_amount,
        metavar="AMOUNT",
        help=f"price per response of an agent that declares no pricing (default {PRICE}; "
        "needs --ledger)",
    )
    p.add_argument("--currency", help=f"currency of --price (default {CURRENCY})")
    p.add_argument(
        "--ledger-operator",
        action="append",
        default=[],
        metavar="PRINCIPAL",
        help="a principal (its id: an API key's name, a JWT's sub) that may top tokens up over "
        "HTTP, POST /api/payments/tokens/{id}/topup; repeatable (default: nobody)",
    )
    p.add_argument(
        "--ledger-heartbeat",
        type=duration_argument,
        default=15.0,
        metavar="DURATION",
        help="with a postgresql:// ledger: how long a server may go without a heartbeat before "
        "other servers settle its open locks (default %(default)ss)",
    )


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
    ledger = open_ledger(args.ledger, heartbeat=getattr(args, "ledger_heartbeat", 15.0))
    durable = getattr(args, "store", "memory") != "memory"
    grace = float(args.retention_age) if durable else 0.0
    freed = ledger.recover(grace=grace)
    if freed:
        print(f"uamp: ledger {args.ledger}: released {freed} unfinished lock(s)", file=sys.stderr)
    price = PRICE if args.price is None else args.price
    return LedgerPolicy(
        ledger,
        price=price,
        currency=args.currency or CURRENCY,
        orphan_grace=grace,
        operators=frozenset(getattr(args, "ledger_operator", None) or ()),
    )


def open_ledger(spec: str, *, create: bool = True, heartbeat: float = 15.0) -> SqlLedger:
    """The ledger ``--ledger`` names: a ``postgresql://`` URL or a SQLite file.

    ``heartbeat``: a PostgreSQL ledger's (see :class:`.ledger_postgres.PostgresLedger`).

    Raises:
        ValueError: It cannot be opened (one line for the user, no password).
    """
    if spec.startswith(("postgresql://", "postgres://")):
        try:
            from .ledger_postgres import PostgresLedger
        except ModuleNotFoundError as exc:
            raise ValueError(
                f"a PostgreSQL ledger needs the 'postgres' extra (no module {exc.name!r}):"
                " pip install 'uamp[postgres]'"
            ) from None
        return PostgresLedger(spec, heartbeat=heartbeat)
    if not create and not Path(spec).is_file():
        raise ValueError(f"no ledger at {spec}")
    try:
        return Ledger(spec)
    except sqlite3.Error as exc:
        raise ValueError(f"cannot open ledger {spec}: {exc}") from None


def _database_error(exc: BaseException) -> bool:
    """Whether ``exc`` is the database's own error (a connection lost mid-command ...)."""
    return isinstance(exc, sqlite3.Error) or type(exc).__module__.split(".")[0] in {
        "psycopg",
        "psycopg_pool",
    }


# --- uamp ledger ---------------------------------------------------------------------


def add_ledger_parser(sub: Any) -> None:
    """Register ``uamp ledger migrate``."""
    p = sub.add_parser("ledger", help="manage a payment ledger's database (migrate)")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    migrate = actions.add_parser(
        "migrate", help="create or upgrade a PostgreSQL ledger's schema (idempotent)"
    )
    migrate.add_argument("--ledger", required=True, metavar="URL")
    migrate.set_defaults(func=_migrate)


def _migrate(args: argparse.Namespace) -> int:
    spec: str = args.ledger
    if not spec.startswith(("postgresql://", "postgres://")):
        try:
            open_ledger(spec).close()
        except ValueError as exc:
            print(f"uamp ledger migrate: {exc}", file=sys.stderr)
            return 1
        print(f"uamp ledger migrate: {spec}: SQLite ledgers are brought up to date when opened")
        return 0
    try:
        from .ledger_postgres import migrate, redact
    except ModuleNotFoundError as exc:
        print(
            f"uamp ledger migrate: needs the 'postgres' extra (no module {exc.name!r}):"
            " pip install 'uamp[postgres]'",
            file=sys.stderr,
        )
        return 1
    try:
        before, after = migrate(spec)
    except ValueError as exc:
        print(f"uamp ledger migrate: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        if not _database_error(exc):
            raise
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        print(f"uamp ledger migrate: cannot reach {redact(spec)}: {first}", file=sys.stderr)
        return 1
    where = redact(spec)
    if before == after:
        print(f"uamp ledger migrate: {where}: schema already at version {after}")
    else:
        print(f"uamp ledger migrate: {where}: schema version {before} -> {after}")
    return 0


# --- uamp tokens ---------------------------------------------------------------------


def add_tokens_parser(sub: Any) -> None:
    """Register ``uamp tokens issue|show|top-up``."""
    p = sub.add_parser("tokens", help="issue and inspect payment tokens of a ledger")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)

    issue = actions.add_parser("issue", help="issue a token; prints only the token")
    issue.add_argument("--ledger", required=True, metavar="PATH_OR_URL")
    issue.add_argument("--amount", required=True, type=_amount)
    issue.add_argument("--currency", default="USD")
    issue.add_argument(
        "--expires-in", type=duration_argument, metavar="DURATION", help="e.g. 1h, 30m"
    )
    issue.set_defaults(func=_issue)

    show = actions.add_parser("show", help="print a token's state as JSON")
    show.add_argument("--ledger", required=True, metavar="PATH_OR_URL")
    show.add_argument("token")
    show.set_defaults(func=_show)

    top = actions.add_parser("top-up", help="add money to a token; prints its state")
    top.add_argument("--ledger", required=True, metavar="PATH_OR_URL")
    top.add_argument("token")
    top.add_argument("--amount", required=True, type=_amount)
    top.set_defaults(func=_top_up)


def _run(args: argparse.Namespace, action: Any) -> int:
    try:
        with open_ledger(args.ledger, create=args.action == "issue") as ledger:
            out = action(ledger)
    except LedgerError as exc:
        print(f"uamp tokens {args.action}: {exc.code}: {exc.message}", file=sys.stderr)
        return 1
    except ValueError as exc:
        print(f"uamp tokens {args.action}: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        if not _database_error(exc):
            raise
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        print(f"uamp tokens {args.action}: the ledger failed: {first}", file=sys.stderr)
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
    def action(ledger: SqlLedger) -> str:
        ledger.top_up(args.token, args.amount)
        return json.dumps(ledger.show(args.token).as_json())

    return _run(args, action)
