"""A cgroup-mode run's own cgroup namespace, and the processes that left its leaf anyway.

A child running as root can write its pid into another group's ``cgroup.procs`` and so
leave its run's leaf.  Two lines against that:

* **The namespace.**  The spawn shim enters the leaf and then starts the program in a
  cgroup namespace of its own (``unshare --cgroup``), rooted at the leaf: the run sees
  its leaf as ``/``.  Where the cgroup v2 mount has ``nsdelegate`` (systemd mounts it so),
  the kernel refuses to move a process to a group outside its cgroup namespace, whoever
  asks, root included.  Making the namespace needs ``CAP_SYS_ADMIN``; a supervisor
  without it (or where ``unshare`` is missing or refused) starts the child as before.
* **The watch.**  Where the kernel would let a process out (no ``nsdelegate``, or no
  namespace), the leaf being empty does not prove the run gone: before a run is called
  gone, the supervisor looks for live processes that belong to the run but are not in
  its leaf (their cgroup namespace is the run's, or their environment carries its run
  tag), signals them with the rung under way and waits for them like for the leaf.

Where the watch looks.  With the child subreaper on (since before the run started, and
all along), every process of a run is below its direct child or below an orphan the
kernel handed to this process (:func:`run_descendants`): the look is proportional to
the run's own tree, and a run whose child exited while this process adopted nothing
costs one file.  Without it, the one way to find a process that left its leaf is to
read every process's cgroup namespace (:data:`CENSUS`).

What still gets out is in the README ("What a root child can still do").
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess

from supervisor.process._confine import has_sys_admin
from supervisor.process._fresh import FreshReads
from supervisor.process._keeper_main import all_pids
from supervisor.process._proctable import CHILDREN_FILES, settled_walk

# Walks of our descendants at most, per look (a tree re-parenting without pause never settles).
_MAX_WALKS = 50


def cgroup_namespace(pid: int | str) -> str | None:
    """The ``cgroup:[inode]`` of a process's cgroup namespace, or None if it is gone."""
    try:
        return os.readlink(f"/proc/{pid}/ns/cgroup")
    except OSError:
        return None


def pin_cgroup_namespace(pid: int) -> tuple[str, int] | None:
    """A process's cgroup namespace held open: its ``cgroup:[inode]`` and the descriptor, or None.

    Held, because the kernel hands a freed namespace's inode number to the next namespace
    made (the lowest free one: at once, on a machine starting runs): a run that only
    remembered the number of its namespace, gone with its last process, would find
    another run's fresh child "in its namespace", take it for an escapee and end it.
    While the descriptor is open the namespace, and so its number, stays the run's.
    """
    try:
        fd = os.open(f"/proc/{pid}/ns/cgroup", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        inode = os.fstat(fd).st_ino
    except OSError:
        os.close(fd)
        return None
    return f"cgroup:[{inode}]", fd


@functools.cache
def own_cgroup_namespace() -> str | None:
    return cgroup_namespace("self")


@functools.cache
def namespace_prefix() -> tuple[str, ...]:
    """``unshare --cgroup --`` to put between the shim and the program, or ``()`` where a
    cgroup namespace cannot be made here (tried once per process: a container may refuse it).

    Call it off the event loop the first time: the trial is a short-lived process.
    """
    unshare = shutil.which("unshare")
    if unshare is None or not has_sys_admin():
        return ()
    try:
        tried = subprocess.run(
            [unshare, "--cgroup", "true"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return ()
    return (unshare, "--cgroup", "--") if tried.returncode == 0 else ()


@functools.cache
def kernel_keeps_namespaces_in() -> bool:
    """Whether the cgroup v2 mount is ``nsdelegate``: a process cannot then be moved to a
    group outside its cgroup namespace."""
    with contextlib.suppress(OSError), open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
        for line in f:
            _, _, right = line.partition(" - ")
            fields = right.split()
            if fields[:1] == ["cgroup2"] and len(fields) >= 3:
                return "nsdelegate" in fields[2].split(",")
    return False


def escape_possible() -> bool:
    """Whether a run's process could leave its leaf here: the watch is needed."""
    return not (namespace_prefix() and kernel_keeps_namespaces_in())


def _read_namespaces() -> dict[str, list[int]]:
    ours = own_cgroup_namespace()
    me = os.getpid()
    found: dict[str, list[int]] = {}
    for pid in all_pids():
        namespace = cgroup_namespace(pid)
        if pid != me and namespace is not None and namespace != ours:
            found.setdefault(namespace, []).append(pid)
    return found


# Who is in which cgroup namespace: one read at a time for every run that asks.
CENSUS: FreshReads[dict[str, list[int]]] = FreshReads(_read_namespaces, {})


def main_thread_children() -> list[int]:
    """The children of this process's main thread, from ``/proc/self/task/<pid>/children``.

    Orphans adopted through the child subreaper are re-parented to the first live thread
    of the process, its leader, which a Python process keeps alive; children other threads
    forked are direct children of runs (asyncio's to reap) or not the runs' at all.  One
    file, instead of one per thread (asyncio starts a thread per live child): at N runs in
    flight a walk of every thread's would read N files for every run.
    """
    try:
        with open(f"/proc/self/task/{os.getpid()}/children", "rb") as f:
            return [int(word) for word in f.read().split()]
    except (OSError, ValueError):
        return []


def adopted(exclude: set[int]) -> list[int]:
    """Our main thread's children but ``exclude`` (the runs' direct children, the keeper)."""
    return [pid for pid in main_thread_children() if pid not in exclude]


def descendants_suffice(epoch: int | None, now: int | None) -> bool:
    """Whether a walk of our descendants sees every process of a run started at subreaper
    ``epoch`` (see ``subreaper_epoch``): the subreaper was on then and all along since."""
    return CHILDREN_FILES and epoch is not None and epoch == now


def run_descendants(namespace: str, roots: list[int], exclude: set[int]) -> list[int]:
    """Live processes in ``namespace`` among ``roots`` (the run's child while it lives), our
    adopted children (all but ``exclude``) and everything below them.

    With the child subreaper on, an orphan of a run goes to the nearest live ancestor that
    is a subreaper: one of the run's own (itself below the run's child or adopted by us),
    or this process (its main thread, :func:`main_thread_children`), never out of our tree; the
    runs' other direct children and what is below them are other runs'.  The walk is
    repeated until one finds nothing the previous ones had not: a process re-parented to
    us during a walk is found by the next.
    """
    walk = settled_walk(lambda: [*roots, *adopted(exclude)], _MAX_WALKS)
    return [pid for pid in walk if cgroup_namespace(pid) == namespace]
