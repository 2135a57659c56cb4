"""Ending what dead hosts left behind: at a host's first spawn, and ``subagents reap``.

Two kinds of leftovers, both recognised by the host identity (``<pid>:<start time>``)
of a host that no longer runs:

* cgroups named ``subagents-<pid>-<start>`` anywhere on the cgroup v2 mount: every
  member, in whatever pid namespace, is killed with ``cgroup.kill``, the group is
  awaited empty (``populated 0``, event-driven and bounded) and removed, leaves first;
  then the same names in the cgroup v1 hierarchies runs' limits use (``memory``,
  ``pids``, ``cpu``), whose members are killed one by one (v1 has no ``cgroup.kill``);
* processes whose environment carries ``SUBAGENT_SUPERVISOR_HOST`` of a dead host:
  SIGKILL to each of them and to nothing else (an untagged process in the same
  process group is left alone), pass after pass until none is found.

Normally the keeper of the dead host did this already; the sweep is for a host and
keeper killed together, or a machine where the keeper could not run.  At a host's
first spawn the process table is read only when a host marker says so (``_markers``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio

from supervisor.process._cgroup import parse_host_group
from supervisor.process._cgroup_mounts import own_cgroup_directory, unified_mount
from supervisor.process._env import HOST_TAG_VARIABLE
from supervisor.process._host import HostIdentity, host_is_alive
from supervisor.process._keeper_main import (
    all_pids,
    cgroup_kill,
    cgroup_members,
    end_tagged,
    in_our_pid_namespace,
    remove_cgroup,
    remove_worktrees,
    start_time,
    tagged_processes,
    wait_cgroup_empty,
)
from supervisor.process._limit_support import v1_homes
from supervisor.process._markers import forget, unfinished_hosts

# How deep under the cgroup mount host groups are looked for, and how many directories at most.
MAX_DEPTH = 8
MAX_DIRECTORIES = 20_000


@dataclass(frozen=True, slots=True)
class Reaped:
    """One thing the sweep ended: a cgroup (``path``) or a process (``pid``)."""

    host: HostIdentity
    path: Path | None = None
    processes: int = 0
    pid: int | None = None
    worktree: Path | None = None

    def line(self) -> str:
        if self.worktree is not None:
            return f"reaped worktree {self.worktree} (host {self.host} is gone)"
        if self.path is not None:
            return f"reaped cgroup {self.path} ({_count(self.processes)})"
        return f"reaped process {self.pid} (host {self.host} is gone)"


def _count(n: int) -> str:
    return f"{n} process" if n == 1 else f"{n} processes"


def host_groups(mount: Path) -> Iterator[tuple[Path, HostIdentity]]:
    """Every ``subagents-<pid>-<start>`` directory under ``mount`` (not below one)."""
    stack = [(mount, 0)]
    seen = 0
    while stack and seen < MAX_DIRECTORIES:
        directory, depth = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            if not entry.is_dir(follow_symlinks=False):
                continue
            seen += 1
            if (host := parse_host_group(entry.name)) is not None:
                yield Path(entry.path), HostIdentity(*host)
            elif depth < MAX_DEPTH:
                stack.append((Path(entry.path), depth + 1))


def sweep_cgroups(mount: Path | None = None) -> list[Reaped]:
    """End the groups of dead hosts: on the cgroup v2 mount (or ``mount``), then, unless a
    mount was given, in the cgroup v1 hierarchies runs' limits use."""
    reaped: list[Reaped] = []
    v2 = mount or unified_mount()
    if v2 is not None:
        reaped += _sweep_hierarchy(v2, own_cgroup_directory(v2))
    if mount is None:
        for v1_mount, home in v1_homes():
            reaped += _sweep_hierarchy(v1_mount, home)
    return reaped


def _sweep_hierarchy(mount: Path, home: Path | None) -> list[Reaped]:
    """End the groups of dead hosts in one hierarchy, whatever pid namespaces their members
    are in.

    A group is judged only when every member is visible from our pid namespace
    (``cgroup.procs`` shows 0 for a process we cannot see: the group is then an
    outer host's); its members may live in namespaces below ours (a run's child
    that ``unshare --pid --fork``s).  A dead host's group is killed whole.  An empty
    one is removed only where this process would create its own: under its own
    cgroup path.
    """
    reaped = []
    for path, host in list(host_groups(mount)):
        members = cgroup_members(path)
        if 0 in members:
            continue
        if not members and path.parent != home:
            continue
        if _alive(host, members):
            continue
        cgroup_kill(path)
        wait_cgroup_empty(path)
        if remove_cgroup(path) or members:
            reaped.append(Reaped(host, path=path, processes=len(set(members))))
    return reaped


def _alive(host: HostIdentity, pids: Iterable[int]) -> bool:
    """Whether ``host``, named by processes ``pids``, still runs.

    A host identity holds a pid as the host's own pid namespace numbers it.  When
    every one of ``pids`` lives in our namespace, so did their host: our numbers
    decide.  When some live in namespaces below ours, the host may be one of ours
    or a process inside a container we can see into; then it is alive if any
    process we can see started at its start time with its pid in some namespace.
    """
    if host_is_alive(host):
        return True
    if all(in_our_pid_namespace(pid) for pid in pids):
        return False
    return host_seen_in_any_namespace(host)


def host_seen_in_any_namespace(host: HostIdentity) -> bool:
    """Whether a live process started at ``host.start`` is ``host.pid`` in one of its pid namespaces."""
    for pid in all_pids():
        if start_time(pid) != host.start:
            continue
        try:
            status = Path(f"/proc/{pid}/status").read_text(encoding="ascii", errors="replace")
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("NSpid:") and str(host.pid) in line.split()[1:]:
                return host_is_alive(HostIdentity(pid, host.start))
    return False


def sweep_processes() -> list[Reaped]:
    """End the processes tagged with a dead host's identity: exactly those, one line each."""
    tagged = tagged_processes(HOST_TAG_VARIABLE)
    carriers: dict[str, list[int]] = {}
    for pid, value in tagged.items():
        carriers.setdefault(value, []).append(pid)
    dead: dict[str, HostIdentity] = {}
    for value, pids in carriers.items():
        host = HostIdentity.parse(value)
        if host is not None and not _alive(host, pids):
            dead[value] = host
    if not dead:
        return []
    killed = end_tagged(HOST_TAG_VARIABLE, dead)
    return [Reaped(dead[value], pid=pid) for pid, value in sorted(killed.items())]


def _dead(value: str) -> bool:
    host = HostIdentity.parse(value)
    return host is not None and not host_is_alive(host)


def sweep_worktrees() -> list[Reaped]:
    """Remove the run worktrees dead hosts left (``workspace = "worktree"``), and prune their repositories."""
    found = []
    for path, value in remove_worktrees(_dead):
        host = HostIdentity.parse(value)
        if host is not None:
            found.append(Reaped(host, worktree=path))
    return found


def sweep() -> list[Reaped]:
    """End everything dead hosts left: their cgroups first, then their tagged processes, then
    their runs' worktrees."""
    unfinished = unfinished_hosts() or []
    reaped = [*sweep_cgroups(), *sweep_processes(), *sweep_worktrees()]
    forget(unfinished)
    return reaped


def sweep_at_start() -> None:
    """The sweep before a host's first spawn: the process table only when a keeper did not finish.

    Stale cgroups cost a walk of the cgroup tree; tagged processes cost a read of
    every process's environment, done only when a host marker says a host and its
    keeper both died (or when markers cannot be kept here).
    """
    sweep_cgroups()
    sweep_worktrees()
    unfinished = unfinished_hosts()
    if unfinished is None or unfinished:
        sweep_processes()
        forget(unfinished or [])


class _Once:
    done = False
    lock = threading.Lock()


def _sweep_once() -> None:
    with _Once.lock:
        if not _Once.done:
            sweep_at_start()
            _Once.done = True


async def sweep_once() -> None:
    """Run :func:`sweep` in a worker thread, once per host process, before its first spawn."""
    if not _Once.done:
        await anyio.to_thread.run_sync(_sweep_once)


def _reset_in_child() -> None:
    _Once.done = False
    _Once.lock = threading.Lock()


os.register_at_fork(after_in_child=_reset_in_child)
