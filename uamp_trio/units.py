"""Operator-facing values on the command line: durations, and argparse types built from parsers."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import TypeVar

__all__ = ["argument_type", "duration_argument", "parse_duration"]

_T = TypeVar("_T")

_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*")
_SECONDS = {None: 1.0, "ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str) -> float:
    """Seconds in ``500ms``, ``90s``, ``15m``, ``1h``, ``2d`` or plain ``45`` / ``2.5`` (seconds).

    Raises:
        ValueError: Anything else, or a duration that is not positive.
    """
    found = _DURATION.fullmatch(text)
    if found is None:
        raise ValueError(f"not a duration: {text!r} (use e.g. 500ms, 90s, 15m, 1h, 2d or seconds)")
    seconds = float(found.group(1)) * _SECONDS[found.group(2)]
    if seconds <= 0:
        raise ValueError(f"the duration must be positive: {text!r}")
    return seconds


def argument_type(parse: Callable[[str], _T]) -> Callable[[str], _T]:
    """``parse`` as an argparse ``type=``: its ``ValueError`` becomes argparse's one-line error."""

    def convert(text: str) -> _T:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = parse.__name__
    return convert


#: A duration (:func:`parse_duration`) as an argparse ``type=``.
duration_argument = argument_type(parse_duration)
