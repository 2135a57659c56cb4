"""Where the cgroup v2 hierarchy is, and whether this process could contain runs in it.

A stand-in for the containment module's own detection: ``subagents doctor`` and the
sweep only need to know where run cgroups could live and why cgroup mode would not
be available.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

UNIFIED_MOUNTS = (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified"))


def unified_mount() -> Path | None:
    """The cgroup v2 mount: ``/sys/fs/cgroup``, or ``/sys/fs/cgroup/unified`` on a hybrid host."""
    for mount in UNIFIED_MOUNTS:
        if (mount / "cgroup.controllers").is_file():
            return mount
    return None


def own_cgroup_path() -> str | None:
    """This process's cgroup v2 path (the ``0::`` line of ``/proc/self/cgroup``)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("0::"):
            return line[3:]
    return None


@dataclass(frozen=True, slots=True)
class CgroupSupport:
    """``parent`` is where run cgroups would be created, or ``reason`` says why not."""

    parent: Path | None
    reason: str | None


def detect_cgroup_support() -> CgroupSupport:
    """Probe (create and remove a leaf) whether runs can get a cgroup v2 leaf here."""
    mount = unified_mount()
    if mount is None:
        return CgroupSupport(None, "no cgroup v2 hierarchy is mounted")
    path = own_cgroup_path()
    if path is None:
        return CgroupSupport(None, "this process has no cgroup v2 path")
    parent = mount / path.lstrip("/")
    probe = parent / f"subagents-probe-{os.getpid()}"
    try:
        probe.mkdir()
    except OSError:
        return CgroupSupport(None, f"{parent} is not writable")
    try:  # the root cgroup has no cgroup.kill: look in a leaf
        if not (probe / "cgroup.kill").exists():
            return CgroupSupport(None, "the kernel has no cgroup.kill")
    finally:
        with contextlib.suppress(OSError):
            probe.rmdir()
    return CgroupSupport(parent, None)
