"""The ``python -m`` entry shared by the client commands (``uamp chat``, ``uamp verify``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

__all__ = ["run_command"]


def run_command(
    prog: str,
    doc: str,
    arguments: Callable[[argparse.ArgumentParser], None],
    command: Callable[[argparse.Namespace], int],
    argv: Sequence[str] | None,
) -> int:
    """Parse ``argv`` with the command's ``arguments`` and run it; its exit status.

    The description is the first paragraph of ``doc`` (the module docstring).
    """
    parser = argparse.ArgumentParser(prog=prog, description=doc.split("\n\n")[0])
    arguments(parser)
    return command(parser.parse_args(argv))
