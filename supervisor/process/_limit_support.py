"""Where each cgroup controller lives for a run, or why it cannot be had.

A cgroup controller is bound to exactly one hierarchy.  When the cgroup v2 directory
run leaves go under (the *v2 base*: this process's own v2 group, or ``cgroup_root``)
lists a controller in ``cgroup.controllers``, the controller is used there: enabled in
the base's and the host group's ``cgroup.subtree_control`` and set in the run's own v2
leaf.  Otherwise, on a hybrid host, the controller is bound to a cgroup v1 hierarchy
(``/sys/fs/cgroup/memory`` ...): the run then also gets a leaf of the same name in that
hierarchy, under this process's own path there (``/proc/self/cgroup``), e.g.
``/sys/fs/cgroup/memory/<own path>/subagents-<pid>-<start>/run-<id>``.  The spawn
shim writes the child into every leaf before the program runs, and the leaves are
removed with the run.  :func:`limit_support` finds out once, per v2 base, which way
each controller goes, or why it cannot (the reason names the file that refused).
"""

from __future__ import annotations

import errno
import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from supervisor.process._limit_files import read_file
from supervisor.process._limit_values import CONTROLLERS, CPU, MEMORY, PIDS, LimitUnavailable


@dataclass(frozen=True, slots=True)
class Hierarchy:
    """One hierarchy this process puts runs' groups in."""

    version: int
    directory: Path
    """Where this process's host groups go in it."""
    controllers: frozenset[str]
    """Which of :data:`CONTROLLERS` it carries."""

    @property
    def label(self) -> str:
        return "cgroup v2" if self.version == 2 else f"cgroup v1 {','.join(sorted(self.controllers))}"


@dataclass(frozen=True)
class LimitSupport:
    """Which hierarchy carries each controller for runs under one v2 base, or why none does."""

    v2_base: Path | None
    where: Mapping[str, Hierarchy] = field(default_factory=dict)
    why_not: Mapping[str, str] = field(default_factory=dict)

    def require(self, controller: str) -> Hierarchy:
        """The hierarchy for ``controller``; raises :class:`LimitUnavailable` with the reason."""
        found = self.where.get(controller)
        if found is None:
            raise LimitUnavailable(self.why_not.get(controller, f"no {controller} controller"))
        return found

    @property
    def v1(self) -> list[Hierarchy]:
        """The v1 hierarchies in use, each once."""
        seen: dict[Path, Hierarchy] = {}
        for hierarchy in self.where.values():
            if hierarchy.version == 1:
                seen.setdefault(hierarchy.directory, hierarchy)
        return list(seen.values())


def _v1_mounts() -> dict[str, tuple[Path, str]]:
    """controller -> (mount point, root of the mount inside the hierarchy) for mounted v1 hierarchies."""
    found: dict[str, tuple[Path, str]] = {}
    text = read_file(Path("/proc/self/mountinfo")) or ""
    for line in text.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] != "cgroup":
            continue
        options = set(tail[2].split(","))
        for controller in CONTROLLERS:
            if controller in options:
                found.setdefault(controller, (Path(fields[4]), fields[3]))
    return found


def own_v1_paths() -> dict[str, str]:
    """controller -> this process's path in the v1 hierarchy carrying it (``/proc/self/cgroup``)."""
    found: dict[str, str] = {}
    for line in (read_file(Path("/proc/self/cgroup")) or "").splitlines():
        _id, _, rest = line.partition(":")
        names, _, path = rest.partition(":")
        for name in names.split(","):
            if name in CONTROLLERS:
                found[name] = path.strip()
    return found


def v1_homes() -> list[tuple[Path, Path]]:
    """(mount point, this process's directory) of each cgroup v1 hierarchy carrying a
    controller runs' limits use: where a sweep looks for dead hosts' groups."""
    own = own_v1_paths()
    found: dict[Path, Path] = {}
    for controller, (mount, mount_root) in _v1_mounts().items():
        path = own.get(controller)
        if path is not None and (path + "/").startswith(mount_root.rstrip("/") + "/"):
            found[mount] = Path(os.path.normpath(mount / os.path.relpath(path, mount_root)))
    return list(found.items())


def _writable(directory: Path) -> bool:
    return os.access(directory, os.W_OK | os.X_OK) and os.access(directory / "cgroup.procs", os.W_OK)


def _v2_controller(base: Path, controller: str) -> tuple[Hierarchy | None, str | None]:
    enabled = (read_file(base / "cgroup.subtree_control") or "").split()
    if controller not in enabled:
        try:
            (base / "cgroup.subtree_control").write_text(f"+{controller}")
        except OSError as exc:
            reason = errno.errorcode.get(exc.errno or 0, str(exc.errno))
            hint = " (the group holds processes of its own)" if exc.errno == errno.EBUSY else ""
            return None, (
                f"the {controller} controller is delegated to {base} (cgroup v2), but writing "
                f"+{controller} to {base / 'cgroup.subtree_control'} was refused ({reason}){hint}"
            )
    return Hierarchy(2, base, frozenset({controller})), None


@functools.cache
def limit_support(v2_base: Path | None) -> LimitSupport:
    """Where each controller lives for runs under ``v2_base`` (None: no cgroup containment).

    Enabling a v2 controller in the base's ``cgroup.subtree_control`` is tried here,
    once (it is what using the controller needs; where the kernel refuses, the reason
    says so).
    """
    if v2_base is None:
        return LimitSupport(None, why_not=dict.fromkeys(CONTROLLERS, "cgroup containment is not available"))
    delegated = set((read_file(v2_base / "cgroup.controllers") or "").split())
    mounts = _v1_mounts()
    own = own_v1_paths()
    where: dict[str, Hierarchy] = {}
    why_not: dict[str, str] = {}
    v1_dirs: dict[Path, set[str]] = {}
    for controller in CONTROLLERS:
        if controller in delegated:
            hierarchy, reason = _v2_controller(v2_base, controller)
            if hierarchy is not None:
                where[controller] = hierarchy
            else:
                why_not[controller] = str(reason)
            continue
        if controller not in mounts:
            why_not[controller] = (
                f"no {controller} controller here: {v2_base} (cgroup v2) does not delegate it and "
                f"no cgroup v1 {controller} hierarchy is mounted"
            )
            continue
        mount, mount_root = mounts[controller]
        path = own.get(controller)
        if path is None or not (path + "/").startswith(mount_root.rstrip("/") + "/"):
            why_not[controller] = f"this process's cgroup v1 {controller} group is not under {mount}"
            continue
        directory = mount / os.path.relpath(path, mount_root)
        directory = Path(os.path.normpath(directory))
        if not _writable(directory):
            why_not[controller] = f"{directory} (cgroup v1 {controller}) is not writable by this user"
            continue
        v1_dirs.setdefault(directory, set()).add(controller)
    for directory, controllers in v1_dirs.items():
        hierarchy = Hierarchy(1, directory, frozenset(controllers))
        for controller in controllers:
            where[controller] = hierarchy
    return LimitSupport(v2_base, where, why_not)


LIMIT_KEYS = {MEMORY: "memory_max", PIDS: "pids_max", CPU: "cpu_max"}


def limit_lines(support: LimitSupport) -> list[str]:
    """One line per limit: how this host enforces it, or why it cannot (``subagents doctor``)."""
    lines = []
    for controller, key in LIMIT_KEYS.items():
        hierarchy = support.where.get(controller)
        if hierarchy is None:
            lines.append(f"limit {key}: unavailable ({support.why_not.get(controller, 'no controller')})")
        else:
            how = "cgroup v2" if hierarchy.version == 2 else f"cgroup v1 {controller}"
            lines.append(f"limit {key}: {how} ({hierarchy.directory})")
    lines.append("limit timeout_ms, stall_timeout_ms: the supervisor itself (every containment)")
    return lines
