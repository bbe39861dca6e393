"""Large freed buffers go back to the operating system (glibc's malloc).

glibc serves an allocation of at least ``M_MMAP_THRESHOLD`` bytes (128 KiB by
default) with a mapping of its own, unmapped when it is freed. But it raises
that threshold to the size of each such block freed, up to 32 MiB: once the
first request body of a few MiB has been freed, later bodies come from the
main heap, where the space freed between blocks that are still live stays
resident. A server that buffers many bodies at once then holds far more
memory than it uses: 200 connections stalling 4 MiB bodies peaked at about
207 MB with the threshold moving and 168 MB with it fixed
(``bench/attacks.py --long --only stalled_bodies``). Setting the threshold
at all turns the adjustment off; :func:`fix_mmap_threshold` does that once, at
the start of ``uamp serve``.
"""

from __future__ import annotations

import ctypes
import sys

__all__ = ["fix_mmap_threshold"]

#: ``mallopt`` parameter number of ``M_MMAP_THRESHOLD`` (glibc's malloc.h).
_M_MMAP_THRESHOLD = -3


def fix_mmap_threshold(size: int = 128 * 1024) -> bool:
    """Fix glibc's ``M_MMAP_THRESHOLD`` at ``size`` bytes; whether it could (glibc on Linux)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, size))
