"""A process's start time, as the journal records it, without importing psutil.

The journal keeps the supervising process's start time (seconds since the epoch) so a
reader can tell a reused pid from the process that wrote a run.  The value is exactly
what ``psutil.Process(pid).create_time()`` returns on Linux, computed the same way:
field 22 of ``/proc/<pid>/stat`` (clock ticks since boot) divided by ``SC_CLK_TCK``,
plus the boot time (``btime`` in ``/proc/stat``), so rows written by earlier versions
compare equal.  Importing psutil costs tens of milliseconds of CPU on every command;
this reads two small files.  Elsewhere than Linux it asks psutil (imported then).
"""

from __future__ import annotations

import os
import sys
from functools import cache

from supervisor.process._keeper_main import start_ticks


class NoSuchProcess(Exception):
    """No process has this pid."""


def start_time(pid: int) -> float:
    """The start time of process ``pid``, in seconds since the epoch.

    Raises :class:`NoSuchProcess` when there is no such process, :class:`OSError` when its
    start time cannot be read."""
    if sys.platform != "linux":  # pragma: no cover - the supervisor runs on Linux
        return _psutil_start_time(pid)
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            data = stat.read()
    except (FileNotFoundError, ProcessLookupError):
        raise NoSuchProcess(pid) from None
    ticks = start_ticks(data)
    if ticks is None:
        raise OSError(f"/proc/{pid}/stat: no start time")
    return ticks / _clock_ticks() + _boot_time()


@cache
def _clock_ticks() -> int:
    return os.sysconf("SC_CLK_TCK")


def _boot_time() -> float:
    # Read each time, as psutil does: the kernel moves it when the wall clock is set.
    with open("/proc/stat", "rb") as stat:
        for line in stat:
            if line.startswith(b"btime"):
                return float(line.split()[1])
    raise OSError("/proc/stat: no btime line")


def _psutil_start_time(pid: int) -> float:  # pragma: no cover - not Linux
    import psutil

    try:
        return float(psutil.Process(pid).create_time())
    except psutil.NoSuchProcess:
        raise NoSuchProcess(pid) from None
    except psutil.Error as exc:
        raise OSError(f"process {pid}: start time unreadable") from exc
