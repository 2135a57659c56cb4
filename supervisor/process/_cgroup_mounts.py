"""Where this process's cgroup v2 hierarchy is mounted, and its own group there."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def _cgroup2_mounts() -> list[tuple[Path, str]]:
    """Every cgroup v2 mount point with its root (as this process's cgroup namespace sees it)."""
    found: list[tuple[Path, str]] = []
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                if right.split()[:1] == ["cgroup2"]:
                    fields = left.split()
                    found.append((Path(fields[4]), fields[3]))
    except (OSError, IndexError):
        return []
    return found


def unified_mount() -> Path | None:
    """Where the cgroup v2 hierarchy is mounted (``/sys/fs/cgroup``, or on hybrid hosts
    ``/sys/fs/cgroup/unified``), or None."""
    found = [point for point, _root in _cgroup2_mounts()]
    for preferred in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
        if preferred in found:
            return preferred
    return found[0] if found else None


def own_cgroup_path() -> str | None:
    """This process's path in the cgroup v2 hierarchy (the ``0::`` line), or None."""
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as f:
            for line in f:
                if line.startswith("0::"):
                    return line[3:].strip()
    except OSError:
        return None
    return None


# How many cgroups a supervisor started inside a cgroup namespace looks at to find its own.
_MAX_SEARCHED = 20_000


def own_cgroup_directory(mount: Path | None = None) -> Path | None:
    """This process's own cgroup as a directory of the v2 mount, or None.

    Both ``/proc/self/cgroup`` and the mount's root are shown relative to this process's
    cgroup namespace.  A supervisor that runs inside a run of another one (a cgroup
    namespace rooted at that run's leaf) sees its path as ``/`` and the mount's root as
    ``/../..``: its namespace root is that many levels below the mount's root, and it is
    found there as the one directory whose ``cgroup.procs`` lists this process.
    """
    own = own_cgroup_path()
    mounts = dict(_cgroup2_mounts())
    mount = mount or unified_mount()
    if own is None or mount is None:
        return None
    root = mounts.get(mount, "/")
    if root == "/":
        return mount / own.lstrip("/")
    parts = Path(root).parts[1:]
    if ".." not in parts:  # a mount of a subtree of our namespace
        relative = os.path.relpath(own, root)
        return None if relative.startswith("..") else mount / relative
    depth = len(parts)
    candidates = [mount]
    for _ in range(depth):
        below = []
        for directory in candidates:
            with contextlib.suppress(OSError):
                below += [Path(e.path) for e in os.scandir(directory) if e.is_dir(follow_symlinks=False)]
            if len(below) > _MAX_SEARCHED:
                return None
        candidates = below
    me = str(os.getpid())
    for directory in candidates:
        mine = directory / own.lstrip("/")
        with contextlib.suppress(OSError):
            if me in (mine / "cgroup.procs").read_text().split():
                return mine
    return None
