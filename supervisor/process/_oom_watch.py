"""The cgroup v1 out-of-memory event: an eventfd on a leaf's ``memory.oom_control``.

v1 has no ``memory.oom.group``: the kernel kills one process.  So every v1 memory leaf
registers an eventfd on its ``memory.oom_control`` (``cgroup.event_control``) before the
child enters it, and the run's watch ends the whole run once the kernel has counted an
out-of-memory kill in the leaf.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

import anyio

from supervisor.process._limit_files import write_file
from supervisor.process._limit_values import LimitRefused


@dataclass
class OomWatch:
    """The eventfd registered on a v1 leaf's ``memory.oom_control``."""

    eventfd: int
    control: int

    def close(self) -> None:
        with contextlib.suppress(RuntimeError):  # not on an event loop: nobody waits on it
            anyio.notify_closing(self.eventfd)
        for fd in (self.eventfd, self.control):
            with contextlib.suppress(OSError):
                os.close(fd)


def arm_oom_watch(leaf: Path) -> OomWatch:
    """Register an eventfd on ``memory.oom_control`` (cgroup v1) before the child enters."""
    efd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
    try:
        control = os.open(leaf / "memory.oom_control", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        os.close(efd)
        raise
    watch = OomWatch(efd, control)
    try:
        write_file(leaf / "cgroup.event_control", f"{efd} {control}")
    except LimitRefused:
        watch.close()
        raise
    return watch
