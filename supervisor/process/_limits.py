"""One run's cgroups: its limits set in the kernel, its counters read back, and the
whole run ended on a cgroup v1 out-of-memory kill.

Every run in cgroup mode gets a memory and a pids leaf where the host has those
controllers, limits or not: they cost ~0.2 ms and give the run's accounting (peaks) and
make "out of memory ends the whole run" hold for the host ceiling and the system too.
The cpu leaf is made only for ``cpu_max`` (CPU time is read from the v2 leaf).

Where each controller lives is :mod:`._limit_support`'s, the files each cgroup version
uses :mod:`._limit_files`'s, the host groups above the leaves :mod:`._host_groups`'s.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio

from supervisor.process._host_groups import HOST_GROUPS, HostGroups
from supervisor.process._limit_files import (
    cpu_files,
    memory_files,
    pids_file,
    read_number,
    remove_group,
    stat_value,
    subtree,
    subtree_sum,
    write_file,
)
from supervisor.process._limit_support import LimitSupport
from supervisor.process._limit_values import (
    CONTROLLERS,
    CPU,
    MEMORY,
    PIDS,
    HitScope,
    KernelHit,
    LimitRefused,
    Limits,
    LimitUnavailable,
    Usage,
    refused,
)
from supervisor.process._oom_watch import OomWatch, arm_oom_watch

log = logging.getLogger("supervisor")

ACCOUNTED: tuple[str, ...] = (MEMORY, PIDS)
"""Controllers every run gets a leaf in when the host has them (accounting, OOM handling)."""

# After an out-of-memory notification, look this long for the kill to be counted (the
# kernel notifies before it has picked and killed a victim; the gap is its report).
OOM_KILL_LOOK_SECONDS = (0.001, 0.004, 0.016, 0.064, 0.25, 0.5, 1.0, 2.0)


class RunCgroups:
    """One run's limits and counters: its v2 leaf, plus a leaf in each v1 hierarchy it needs.

    Made in a worker thread before the child is spawned (:meth:`create`); the child
    enters every leaf through the spawn shim (the v2 leaf, then :attr:`v1_leaves`); counters are read
    while the leaves exist (:meth:`usage`, :meth:`hit`); :meth:`remove` removes the v1
    leaves once the run's tree is gone.
    """

    def __init__(self, v2_leaf: Path, support: LimitSupport, limits: Limits, host_groups: HostGroups) -> None:
        self.v2_leaf = v2_leaf
        self.support = support
        self.limits = limits
        self.host_groups = host_groups
        self.leaves: dict[str, Path] = {}
        """controller -> the leaf carrying it (the v2 leaf for controllers placed in v2)."""
        self.v1_leaves: list[Path] = []
        self._oom: OomWatch | None = None
        self._oom_wanted = False  # a v1 memory leaf: the out-of-memory watch is the supervisor's
        self._arm_later = False
        self._oom_kills_seen = 0
        self.below = ""
        """The group below each leaf (a root child's, :meth:`mirror`), or ``""``."""

    @classmethod
    def create(
        cls,
        v2_leaf: Path,
        support: LimitSupport,
        limits: Limits,
        *,
        host_groups: HostGroups = HOST_GROUPS,
        arm_later: bool = False,
    ) -> RunCgroups:
        """Make the run's v1 leaves, set its limits, and arm the v1 out-of-memory watch.

        A limit that cannot be had raises :class:`LimitUnavailable`, a file that refuses
        a write :class:`LimitRefused`; nothing made is left behind.  A controller wanted
        only for accounting that cannot be had is just left out.
        """
        run = cls(v2_leaf, support, limits, host_groups)
        run._arm_later = arm_later  # :meth:`arm` after :meth:`mirror`: armed once, where it listens
        try:
            run._make()
        except BaseException:
            run.remove()
            raise
        return run

    def _make(self) -> None:
        required = set(self.limits.controllers) | set(self.host_groups.ceiling.controllers)
        wanted = [c for c in CONTROLLERS if c in required or (c in ACCOUNTED and c in self.support.where)]
        name = self.v2_leaf.name
        host_name = self.v2_leaf.parent.name
        for controller in wanted:
            try:
                hierarchy = self.support.require(controller)
            except LimitUnavailable:
                if controller in required:
                    raise
                continue
            if hierarchy.version == 2:
                self.leaves[controller] = self.v2_leaf
                continue
            leaf = hierarchy.directory / host_name / name
            if leaf not in self.v1_leaves:
                try:
                    self.host_groups.group(hierarchy, host_name)
                    leaf.mkdir()
                except OSError as exc:
                    if controller in required:
                        if isinstance(exc, LimitRefused):
                            raise
                        raise refused(exc, leaf) from exc
                    log.debug("no accounting leaf %s: %r", leaf, exc)
                    continue
                self.v1_leaves.append(leaf)
            self.leaves[controller] = leaf
        self._apply()

    def _version(self, controller: str) -> int:
        return 2 if self.leaves[controller] == self.v2_leaf else 1

    def _apply(self) -> None:
        limits = self.limits
        if MEMORY in self.leaves:
            leaf = self.leaves[MEMORY]
            if self._version(MEMORY) == 2:
                if limits.memory_max is not None:
                    memory_files(leaf, 2, limits.memory_max)
                write_file(leaf / "memory.oom.group", "1")
            else:
                if limits.memory_max is not None:
                    memory_files(leaf, 1, limits.memory_max)
                self._oom_wanted = True
                if not self._arm_later:
                    self._oom = arm_oom_watch(leaf)
        if limits.pids_max is not None:
            pids_file(self.leaves[PIDS], limits.pids_max)
        if limits.cpu_max is not None:
            cpu_files(self.leaves[CPU], self._version(CPU), limits.cpu_max)

    def mirror(self, below: str) -> None:
        """Set the run's limits again on the group ``below`` each leaf (a root child's own group).

        The limits that hold are the leaf's, above everything the child sees; these copies are
        what it reads (Node's heap, Go's ``GOMAXPROCS``), and raising them gains it nothing.  An
        out-of-memory at the copy must still end the whole run: ``memory.oom.group`` there too
        (v2), and the v1 watch listens on the group below (the kernel notifies the group out of
        memory and the groups below it)."""
        self.below = below
        limits = self.limits
        v2 = [c for c in (MEMORY, PIDS, CPU) if c in self.leaves and self._version(c) == 2]
        wanted = {MEMORY: True, PIDS: limits.pids_max is not None, CPU: limits.cpu_max is not None}
        enable = [c for c in v2 if wanted[c]]
        if enable:
            write_file(self.v2_leaf / "cgroup.subtree_control", " ".join(f"+{c}" for c in enable))
        if MEMORY in self.leaves:
            group = self.leaves[MEMORY] / below
            if limits.memory_max is not None:
                memory_files(group, self._version(MEMORY), limits.memory_max)
            if self._version(MEMORY) == 2:
                write_file(group / "memory.oom.group", "1")
            elif self._oom_wanted:
                watch = arm_oom_watch(group)
                if self._oom is not None:
                    self._oom.close()
                self._oom = watch
        if limits.pids_max is not None:
            pids_file(self.leaves[PIDS] / below, limits.pids_max)
        if limits.cpu_max is not None:
            cpu_files(self.leaves[CPU] / below, self._version(CPU), limits.cpu_max)

    def arm(self) -> None:
        """Arm the v1 out-of-memory watch if it is wanted and not armed yet (``arm_later``):
        on the group below the leaf once there is one, else on the leaf."""
        if self._oom is None and self._oom_wanted:
            leaf = self.leaves[MEMORY]
            self._oom = arm_oom_watch(leaf / self.below if self.below else leaf)

    # -- counters ---------------------------------------------------------------------------

    def cpu_seconds(self) -> float | None:
        """CPU time of the whole tree so far (``cpu.stat``, in every v2 group)."""
        usec = stat_value(self.v2_leaf / "cpu.stat", "usage_usec")
        return None if usec is None else usec / 1e6

    def usage(self) -> Usage:
        memory_peak = pids_peak = None
        if MEMORY in self.leaves:
            leaf = self.leaves[MEMORY]
            memory_peak = read_number(
                leaf / ("memory.peak" if self._version(MEMORY) == 2 else "memory.max_usage_in_bytes")
            )
        if PIDS in self.leaves:
            pids_peak = read_number(self.leaves[PIDS] / "pids.peak")
        return Usage(
            cpu_s=self.cpu_seconds(),
            memory_peak_bytes=memory_peak,
            pids_peak=pids_peak,
        )

    def oom_kills(self) -> int:
        """Processes of the run the kernel killed for lack of memory (any limit's)."""
        if MEMORY not in self.leaves:
            return 0
        leaf = self.leaves[MEMORY]
        if self._version(MEMORY) == 2:
            return stat_value(leaf / "memory.events", "oom_kill") or 0
        return subtree_sum(leaf, "memory.oom_control", "oom_kill", self.below)

    def refused_forks(self) -> int:
        """Forks in the run's tree the kernel refused (any limit's)."""
        if PIDS not in self.leaves:
            return 0
        leaf = self.leaves[PIDS]
        if self._version(PIDS) == 2 and (leaf / "pids.events.local").exists():
            return stat_value(leaf / "pids.events.local", "max") or 0
        if self._version(PIDS) == 2:
            return stat_value(leaf / "pids.events", "max") or 0
        return subtree_sum(leaf, "pids.events", "max", self.below)

    def hit(self) -> KernelHit | None:
        """The limit the kernel enforced on the run, if any: an out-of-memory kill first,
        then a refused fork.  Read before the leaves are removed."""
        if self.oom_kills():
            controller, resource = MEMORY, "memory"
        elif self.refused_forks():
            controller, resource = PIDS, "processes"
        else:
            return None
        own = self.limits.memory_max if controller == MEMORY else self.limits.pids_max
        ceiling = self.host_groups.ceiling
        host = ceiling.memory_max if controller == MEMORY else ceiling.pids_max
        leaf = self.leaves[controller]
        v2 = self._version(controller) == 2
        if own is not None and self._reached(leaf, controller, v2):
            return KernelHit(resource, own, HitScope.RUN)
        if host is not None and self._reached(leaf.parent, controller, v2):
            return KernelHit(resource, host, HitScope.HOST)
        return KernelHit(resource, None, HitScope.SYSTEM)

    @staticmethod
    def _reached(group: Path, controller: str, v2: bool) -> bool:
        """Whether ``group``'s own limit was reached (its peak is at its limit)."""
        if controller == MEMORY:
            limit = read_number(group / ("memory.max" if v2 else "memory.limit_in_bytes"))
            peak = read_number(group / ("memory.peak" if v2 else "memory.max_usage_in_bytes"))
        else:
            limit, peak = read_number(group / "pids.max"), read_number(group / "pids.peak")
        return limit is not None and peak is not None and peak >= limit

    # -- the v1 out-of-memory watch --------------------------------------------------------

    @property
    def watching(self) -> bool:
        """Whether :meth:`watch` has an out-of-memory watch to wait on."""
        return self._oom is not None

    async def watch(self, end_run: Callable[[], Awaitable[None]]) -> None:
        """End the whole run once the kernel counts an out-of-memory kill in it (cgroup v1).

        The kernel notifies every group below the one out of memory before it picks
        its victim, so after each notification this looks a few times (within ~4 s) for
        the kill to be counted in this leaf; a notification for another leaf's victim
        changes nothing here.  Returns at once where v2's ``memory.oom.group`` does the job.
        """
        oom = self._oom
        try:
            while oom is not None and self._oom is oom:  # closed: its descriptors may be reused
                await anyio.wait_readable(oom.eventfd)
                if self._oom is not oom:
                    return
                with contextlib.suppress(BlockingIOError):
                    os.eventfd_read(oom.eventfd)
                for pause in OOM_KILL_LOOK_SECONDS:
                    kills = self.oom_kills()
                    if kills > self._oom_kills_seen:
                        self._oom_kills_seen = kills
                        log.info("cgroup %s: out-of-memory kill; ending the run", self.v2_leaf.name)
                        await end_run()
                        break
                    await anyio.sleep(pause)
                    if self._oom is not oom:
                        return
        except (anyio.ClosedResourceError, OSError):  # the run is over: the watch was closed
            return

    def close(self) -> None:
        """Stop the out-of-memory watch (its descriptors go)."""
        if self._oom is not None:
            self._oom.close()
            self._oom = None

    def remove(self) -> None:
        """Close the watch and remove the v1 leaves (deepest first).  A leaf that will not
        go stays for a sweep to find."""
        self.close()
        left = []
        for leaf in self.v1_leaves:
            if remove_group(leaf, self.below):
                continue
            for directory in subtree(leaf, self.below):  # a nested supervisor's too: deepest first
                try:
                    os.rmdir(directory)
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    log.debug("could not remove %s: %r", directory, exc)
            if leaf.exists():
                left.append(leaf)
        self.v1_leaves = left
