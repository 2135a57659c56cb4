"""What a run's processes are, how they are signalled, and how "all gone" is proven.

Two implementations, chosen per provider by the ``containment`` key:

* ``cgroup`` (:class:`~supervisor.process._cgroup.CgroupContainment`): a cgroup v2 leaf
  per run; the kernel keeps every descendant in it.
* ``process-tree`` (:class:`~supervisor.process._tree.ProcessTreeContainment`): the
  fallback, attribution over the process table.

:class:`Containment` is also the one injected seam of the process layer: a test can
wrap a real containment to model the one thing no real process can do, a tree that
survives SIGKILL.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from signal import Signals
from typing import Protocol

from supervisor._public import home
from supervisor.process._cgroup import CgroupContainment, find_cgroup_base
from supervisor.process._limit_values import NO_LIMITS, KernelHit, Limits, Usage
from supervisor.process._tree import ProcessTreeContainment


class ContainmentMode(enum.StrEnum):
    AUTO = "auto"
    CGROUP = "cgroup"
    PROCESS_TREE = "process-tree"


class ContainmentUnavailable(Exception):
    """``cgroup`` containment was asked for and cannot be had; the text says why."""


class Enclosure(Protocol):
    """One run's processes.  The direct child's exit facts are not its business."""

    @property
    def mode(self) -> str:
        """``cgroup`` or ``process-tree``."""
        ...

    def command(self, argv: Sequence[str]) -> list[str]:
        """The argv to spawn so that the child is enclosed before the program runs."""
        ...

    def started(self, pid: int) -> None:
        """The direct child is ``pid`` (its process group has the same id)."""
        ...

    async def signal(self, sig: Signals) -> None:
        """Send ``sig`` to the child's group and every live member."""
        ...

    async def empty(self) -> bool:
        """One fresh observation: whether nothing of the run is alive."""
        ...

    async def wait_empty(self, resignal: Signals | None = None) -> None:
        """Return once nothing of the run is alive (the caller bounds the wait).

        ``resignal``: members found while waiting get this signal too.
        """
        ...

    def survivors(self) -> tuple[int, ...]:
        """What was alive at the last observation (for the host log)."""
        ...

    def release(self) -> None:
        """The run is over: read the run's counters, then drop what the enclosure holds
        (cgroup leaves, bookkeeping)."""
        ...

    async def watch(self) -> None:
        """While the run lives: enforce what the kernel leaves to the supervisor (on cgroup
        v1, an out-of-memory kill ends the whole run).  Returns when there is nothing to do.

        An enclosure may also have a ``watches`` attribute: false when this has nothing to do,
        so that the run starts no task for it (optional: without it, the task is started)."""
        ...

    def limit_hit(self) -> KernelHit | None:
        """The limit the kernel enforced on the run so far (its counters), or None."""
        ...

    async def cpu_seconds(self) -> float | None:
        """CPU time the whole tree has used so far, or None where it cannot be read."""
        ...

    @property
    def usage(self) -> Usage | None:
        """What the tree used (read at :meth:`release`); None without kernel accounting."""
        ...


class Containment(Protocol):
    """Makes one :class:`Enclosure` per run, with its limits (raises
    :class:`~supervisor.process._limit_values.LimitUnavailable` for a limit it cannot enforce,
    ``OSError`` when the kernel refuses)."""

    @property
    def mode(self) -> str: ...

    def enclose(self, run_tag: str, limits: Limits = NO_LIMITS) -> Enclosure: ...


@dataclass(frozen=True, slots=True)
class Detection:
    """What ``auto`` resolves to here, and why cgroup containment is not available."""

    mode: ContainmentMode
    reason: str
    cgroup_base: Path | None


def detect_containment(cgroup_root: Path | None = None) -> Detection:
    """The containment available to this process (``cgroup`` if it can create leaves)."""
    base = find_cgroup_base(cgroup_root)
    if base.path is None:
        return Detection(ContainmentMode.PROCESS_TREE, base.reason, None)
    return Detection(ContainmentMode.CGROUP, base.reason, base.path)


@functools.cache
def containment_for(
    mode: ContainmentMode = ContainmentMode.AUTO, cgroup_root: Path | None = None
) -> Containment:
    """The (shared) containment for a configured mode; raises :class:`ContainmentUnavailable`."""
    if mode == ContainmentMode.PROCESS_TREE:
        return ProcessTreeContainment()
    found = detect_containment(cgroup_root)
    if found.cgroup_base is not None:
        return CgroupContainment(found.cgroup_base)
    if mode == ContainmentMode.CGROUP:
        raise ContainmentUnavailable(f"cgroup containment is not available: {found.reason}")
    return ProcessTreeContainment()


def check_containment(mode: ContainmentMode, cgroup_root: Path | None) -> None:
    """Raise :class:`ContainmentUnavailable` now if ``mode`` cannot be had here."""
    if mode == ContainmentMode.CGROUP:
        found = detect_containment(cgroup_root)
        if found.cgroup_base is None:
            raise ContainmentUnavailable(f"cgroup containment is not available: {found.reason}")


home("supervisor.provider", Containment)
