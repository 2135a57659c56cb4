"""Waiting for processes to exit, on events: a pidfd is readable once its process has exited
(a zombie included), whoever its parent is and however slowly that parent reaps it."""

from __future__ import annotations

import contextlib
import os
import select
import time
from collections.abc import Iterable


def pidfds(pids: Iterable[int]) -> dict[int, int]:
    """A pidfd for each pid that still exists (an exited, reaped one has none)."""
    fds = {}
    for pid in pids:
        if pid > 0:
            with contextlib.suppress(ProcessLookupError):
                fds[pid] = os.pidfd_open(pid)
    return fds


def wait_gone(fds: dict[int, int], within: float) -> list[int]:
    """Wait until every pidfd is readable (its process exited); the pids still alive after ``within``.

    Whatever exited and was re-parented to this process (a subreaper) is reaped here.
    """
    pending = dict(fds)
    end = time.monotonic() + within
    while pending and (left := end - time.monotonic()) > 0:
        ready, _, _ = select.select(list(pending.values()), [], [], left)
        for pid, fd in list(pending.items()):
            if fd in ready:
                del pending[pid]
    for pid, fd in fds.items():
        os.close(fd)
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)
    return sorted(pending)


def reaped(pid: int) -> bool:
    """Whether ``pid`` is no longer a child of ours, running or waiting to be reaped."""
    try:
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return False
