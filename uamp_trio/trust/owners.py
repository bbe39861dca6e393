"""Which server process holds a ledger lock, and whether that process still lives.

Theory of operation. Several servers may share one ledger file (SQLite in WAL
mode takes care of their concurrent writes). Each records, with every lock
it takes, its *instance id*: ``boot:pid:start``, where ``boot`` is the
kernel's boot id, ``pid`` the process id and ``start`` the process's start
time in clock ticks since boot (``/proc/PID/stat`` field 22). A starting
server frees only the locks whose instance is dead:

* another boot id: the machine restarted since, so that process is gone;
* no process with that pid, or one that started at another time (the pid
  was reused): gone;
* otherwise the process lives and its locks are its own to settle.

Why not leases with an expiry: a lease must be renewed while a response runs
(a long response would otherwise lose its lock to a restart) and leaves
money locked until it expires after a crash; the instance id is exact at
once and needs no background task. It is exact only on one machine, which
is also all SQLite's WAL mode supports (its shared-memory index does not
work across hosts, so a ledger file is never shared over the network).

Without ``/proc`` (not Linux) the boot id and start time are unknown: the
id is ``-:pid:-`` and liveness falls back to "a process with that pid
exists", which errs on keeping a lock (never frees a live server's).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["instance_id", "is_alive"]

_UNKNOWN = "-"


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or _UNKNOWN
    except OSError:
        return _UNKNOWN


def _stat(pid: int) -> list[str] | None:
    """Fields 3.. of ``/proc/PID/stat`` (state first), or ``None``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces.
    return stat.rpartition(")")[2].split()


def _start_time(pid: int) -> str:
    """The process's start time in ticks since boot, or ``-`` when unknown."""
    fields = _stat(pid)
    return fields[19] if fields is not None and len(fields) > 19 else _UNKNOWN


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def instance_id(pid: int | None = None) -> str:
    """The id of process ``pid`` (default: this one) as recorded with its locks."""
    pid = os.getpid() if pid is None else pid
    return f"{_boot_id()}:{pid}:{_start_time(pid)}"


def is_alive(owner: str | None) -> bool:
    """Whether the process that recorded ``owner`` still runs (``None``: an old lock, dead)."""
    if not owner:
        return False
    boot, _, rest = owner.partition(":")
    pid_text, _, start = rest.partition(":")
    try:
        pid = int(pid_text)
    except ValueError:
        return False
    if boot != _UNKNOWN and boot != _boot_id():
        return False
    if not _pid_exists(pid):
        return False
    fields = _stat(pid)
    if fields is None:
        return True  # no /proc: the pid exists, keep its locks
    if fields[0] in ("Z", "X"):
        return False  # killed, not yet reaped by its parent
    return start == _UNKNOWN or len(fields) <= 19 or fields[19] == start
